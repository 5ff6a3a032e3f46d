//! Draws the channel's round-trip latency against payload size, beside its
//! baselines and iceoryx2, measured in one run: an SVG chart (log-log) and
//! the figures as CSV.
//!
//! ```sh
//! cargo run --release -p nodeipc-benches --features rivals --example latency_chart -- docs/channel-latency.svg
//! ```

use std::fmt::Write as _;
use std::io;

use nodeipc_cli::bench::channel::ChannelImpl;
use nodeipc_cli::bench::run_if_peer;
use nodeipc_cli::bench::suite::{Contender, channel_contender, interleave};

use nodeipc_benches::iceoryx;

const PAYLOADS: [usize; 6] = [64, 1 << 10, 16 << 10, 128 << 10, 512 << 10, 1 << 20];
const BATCHES: usize = 15;

/// Round trips per batch: about the same time per batch whatever the size.
fn rounds(payload: usize) -> u64 {
    (2_000_000 / (payload as u64 + 2_000)).clamp(20, 2_000)
}

/// Writes an output file the way every nodeipc output is written
/// ([`nodeipc_fs::create_output`]): a link, a FIFO or another user's file
/// planted at the path is refused by name, never written through.
fn write_output(path: &std::path::Path, bytes: &[u8]) {
    use std::io::Write as _;
    let fd = nodeipc_fs::create_output(path, 0o644, nodeipc_fs::Existing::Truncate)
        .unwrap_or_else(|e| panic!("{e}"));
    std::fs::File::from(fd)
        .write_all(bytes)
        .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}

/// What the chart calls iceoryx2.
const ICEORYX2: &str = "iceoryx2 request-response (raw bytes, polling)";

/// iceoryx2 as a contender: each batch a fresh client and server, warmed up
/// for a quarter of the batch, as the channel's contenders are.
fn iceoryx2(payload: usize, rounds: u64) -> Contender<'static> {
    Contender::new(ICEORYX2, rounds, move |rounds| {
        let failed = |e: Box<dyn std::error::Error>| io::Error::other(e.to_string());
        let warm_up = (rounds / 4).max(2);
        let mut session =
            iceoryx::IceoryxSession::start(payload, warm_up + rounds).map_err(failed)?;
        session.run(warm_up).map_err(failed)?;
        let elapsed = session.run(rounds).map_err(failed)?;
        session.finish().map_err(failed)?;
        Ok(elapsed)
    })
}

fn main() {
    iceoryx::run_if_server();
    run_if_peer();
    let out = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "channel-latency.svg".to_owned());
    let channels = [
        ChannelImpl::Nodeipc,
        ChannelImpl::NodeipcInPlace,
        ChannelImpl::NodeipcInPlacePoll,
        ChannelImpl::GlibcLockstep,
        ChannelImpl::UnixSocket,
    ];
    let mut series: Vec<(String, Vec<f64>)> = channels
        .iter()
        .map(|which| which.name())
        .chain([ICEORYX2])
        .map(|name| (name.to_owned(), Vec::new()))
        .collect();
    for payload in PAYLOADS {
        let rounds = rounds(payload);
        let mut contenders: Vec<Contender> = channels
            .iter()
            .map(|&which| channel_contender(which, 1, payload, 1, rounds).named(which.name()))
            .collect();
        contenders.push(iceoryx2(payload, rounds));
        // Interleaved batches: every contender sees the same moments of a
        // shared, noisy machine.
        let measured = interleave(BATCHES, contenders).expect("round trips");
        for ((name, points), measured) in series.iter_mut().zip(measured) {
            eprintln!("{name} {payload} B: {:.0} ns", measured.ns.median);
            points.push(measured.ns.median);
        }
    }

    let mut csv = String::from("payload_bytes");
    for (name, _) in &series {
        let _ = write!(csv, ",{name}");
    }
    csv.push('\n');
    for (i, payload) in PAYLOADS.iter().enumerate() {
        let _ = write!(csv, "{payload}");
        for (_, points) in &series {
            let _ = write!(csv, ",{:.1}", points[i]);
        }
        csv.push('\n');
    }
    let csv_path = std::path::Path::new(&out).with_extension("csv");
    if let Some(dir) = std::path::Path::new(&out).parent() {
        std::fs::create_dir_all(dir).expect("create the output directory");
    }
    write_output(&csv_path, csv.as_bytes());
    write_output(std::path::Path::new(&out), svg(&series).as_bytes());
    println!("wrote {out} and {}", csv_path.display());
    print!("{csv}");
}

/// A log-log line chart: payload bytes across, round-trip time up.
fn svg(series: &[(String, Vec<f64>)]) -> String {
    let (width, height, left, right, top, bottom) = (860.0, 520.0, 80.0, 300.0, 30.0, 60.0);
    let plot_w = width - left - right;
    let plot_h = height - top - bottom;
    let all: Vec<f64> = series.iter().flat_map(|(_, p)| p.iter().copied()).collect();
    let (lo, hi) = (
        all.iter().copied().fold(f64::MAX, f64::min).log10().floor(),
        all.iter().copied().fold(f64::MIN, f64::max).log10().ceil(),
    );
    let (x_lo, x_hi) = (
        (PAYLOADS[0] as f64).log10(),
        (PAYLOADS[PAYLOADS.len() - 1] as f64).log10(),
    );
    let x = |bytes: usize| left + ((bytes as f64).log10() - x_lo) / (x_hi - x_lo) * plot_w;
    let y = |ns: f64| top + plot_h - (ns.log10() - lo) / (hi - lo) * plot_h;
    let colors = [
        "#1b7837", "#5aae61", "#a6dba0", "#b2182b", "#2166ac", "#762a83", "#e08214",
    ];
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"18\" text-anchor=\"middle\" font-size=\"14\">Execute round trip, 1 worker: latency vs payload (log-log, lower is better)</text>\n",
        width / 2.0
    );
    for decade in lo as i32..=hi as i32 {
        let ns = 10f64.powi(decade);
        let yy = y(ns);
        let label = if ns >= 1e6 {
            format!("{} ms", ns / 1e6)
        } else if ns >= 1e3 {
            format!("{} us", ns / 1e3)
        } else {
            format!("{ns} ns")
        };
        let _ = writeln!(
            s,
            "<line x1=\"{left}\" y1=\"{yy:.1}\" x2=\"{:.1}\" y2=\"{yy:.1}\" stroke=\"#ddd\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{label}</text>",
            left + plot_w,
            left - 6.0,
            yy + 4.0
        );
    }
    for &payload in &PAYLOADS {
        let xx = x(payload);
        let label = if payload >= 1 << 20 {
            format!("{} MiB", payload >> 20)
        } else if payload >= 1 << 10 {
            format!("{} KiB", payload >> 10)
        } else {
            format!("{payload} B")
        };
        let _ = writeln!(
            s,
            "<line x1=\"{xx:.1}\" y1=\"{top}\" x2=\"{xx:.1}\" y2=\"{:.1}\" stroke=\"#eee\"/><text x=\"{xx:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{label}</text>",
            top + plot_h,
            top + plot_h + 18.0
        );
    }
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">payload</text>",
        left + plot_w / 2.0,
        height - 15.0
    );
    for (i, (name, points)) in series.iter().enumerate() {
        let color = colors[i % colors.len()];
        let path: Vec<String> = PAYLOADS
            .iter()
            .zip(points)
            .map(|(&p, &ns)| format!("{:.1},{:.1}", x(p), y(ns)))
            .collect();
        let _ = writeln!(
            s,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" points=\"{}\"/>",
            path.join(" ")
        );
        for (&p, &ns) in PAYLOADS.iter().zip(points) {
            let _ = writeln!(
                s,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{color}\"/>",
                x(p),
                y(ns)
            );
        }
        let ly = top + 20.0 + i as f64 * 22.0;
        let lx = left + plot_w + 16.0;
        let _ = writeln!(
            s,
            "<line x1=\"{lx}\" y1=\"{ly}\" x2=\"{}\" y2=\"{ly}\" stroke=\"{color}\" stroke-width=\"3\"/><text x=\"{}\" y=\"{}\">{}</text>",
            lx + 20.0,
            lx + 26.0,
            ly + 4.0,
            name.replace('&', "&amp;")
        );
    }
    s.push_str("</svg>\n");
    s
}
