//! `versus-shaq`: nodeipc-queue beside shaq 4.0.0 (the newest shaq that
//! builds on stable Rust 1.95; 5.x needs `isolate_highest_one`), two
//! processes pinned one per core, both sides reading every byte of every
//! message. Prints one JSON object per row:
//!
//! - `spsc-rt-poll`: 64-byte round trip, both sides polling (ns);
//! - `spsc-rt-block`: the same through the timed pop (ours `pop_timeout`,
//!   shaq's `read_timeout`) (ns);
//! - `floor-rt`: the cache-line round trip, two words in one mapping (ns);
//! - `spsc-throughput`: 64 B one way in batches of 64 (messages/s);
//! - `pool-local`, `pool-remote`: nodeipc-pool beside rts-alloc 5.1.0 (see
//!   `pool_rows.rs`) (ns);
//! - `pool-view-hash`: a 1232-byte transaction read and hashed in place
//!   through a `BlockView`, beside copying it out first (ns);
//! - `mpmc-rt-1x1`, `mpmc-rt-2x2`, `mpmc-tp-1x1`, `mpmc-tp-2x2`:
//!   `MpmcQueue` beside shaq's `mpmc` (see `mpmc_rows.rs`).
//!
//! Each row's figure is the median of `--rounds` (default 21) interleaved
//! rounds (every round measures every row, ours then the anchor's, with a
//! fresh pair of processes), with its spread. `--quick`: 3 rounds of few
//! messages, to prove it runs.
//!
//! `cargo run --release -p nodeipc-benches --features rivals --bin versus-shaq -- --json`
//! (`--only spsc-rt-poll,floor-rt` measures those rows alone).

mod mpmc_rows;
mod peer;
mod pool_rows;
mod rows;

use std::io;

use rows::{Impl, Params, Row};

fn main() -> io::Result<()> {
    if let Some(spec) = peer::role() {
        return rows::run_peer(&spec).map_err(|e| io::Error::other(format!("peer {spec}: {e}")));
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let json = args.iter().any(|a| a == "--json");
    let rounds = match args.iter().position(|a| a == "--rounds") {
        Some(i) => args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| io::Error::other("--rounds needs a number"))?,
        None if quick => 3,
        None => 21,
    };
    // `--only ROW[,ROW]`: measure those rows alone (for profiling one).
    let only: Option<Vec<String>> = match args.iter().position(|a| a == "--only") {
        Some(i) => Some(
            args.get(i + 1)
                .ok_or_else(|| io::Error::other("--only needs row names"))?
                .split(',')
                .map(str::to_owned)
                .collect(),
        ),
        None => None,
    };
    let rows: Vec<Row> = Row::ALL
        .into_iter()
        .filter(|r| {
            only.as_ref()
                .is_none_or(|o| o.iter().any(|n| n == r.name()))
        })
        .collect();
    if rows.is_empty() {
        return Err(io::Error::other("--only names no row"));
    }
    let params = if quick { Params::QUICK } else { Params::FULL };
    let pin = nodeipc_cli::bench::machine::cores() >= 2;
    // Described before pinning narrows what this process sees.
    let machine = nodeipc_cli::bench::machine::describe();
    let _pinned = if pin {
        Some(nodeipc_cli::bench::machine::Pinned::to(0)?)
    } else {
        None
    };
    if !json {
        println!(
            "# versus-shaq: {} rounds, {}, {}",
            rounds,
            machine,
            if pin {
                "pinned to cores 0 and 1"
            } else {
                "not pinned (one core)"
            }
        );
    }
    let mut samples: Vec<(Row, Impl, Vec<f64>)> = Vec::new();
    for &row in &rows {
        for imp in row.impls() {
            samples.push((row, *imp, Vec::new()));
        }
    }
    for _ in 0..rounds {
        for (row, imp, values) in &mut samples {
            let value = rows::sample(*row, *imp, params, pin)
                .map_err(|e| io::Error::other(format!("{} ({}): {e}", row.name(), imp.name())))?;
            values.push(value);
        }
    }
    for &row in &rows {
        let of = |imp: Impl| {
            samples
                .iter()
                .find(|(r, i, _)| *r == row && *i == imp)
                .map(|(_, _, v)| Spread::of(v))
        };
        let ours = of(Impl::Nodeipc)
            .or_else(|| of(Impl::Floor))
            .expect("every row measures ours or the floor");
        let anchor_impl = row.impls().get(1).copied();
        let anchor = anchor_impl.and_then(of);
        let mut line = serde_json::json!({
            "row": row.name(),
            "unit": row.unit(),
            "rounds": rounds,
            "nodeipc": ours.json(),
            "ratio": anchor.as_ref().map(|a| round3(ours.median / a.median)),
            "better": if row.unit() == "ns" { "lower" } else { "higher" },
        });
        if let (Some(imp), Some(a)) = (anchor_impl, &anchor) {
            line["anchor"] = imp.name().into();
            line[imp.name()] = a.json();
        }
        if json {
            println!("{line}");
        } else {
            println!(
                "{:<16} nodeipc {:>12.1} {} (spread {:.1}%){}",
                row.name(),
                ours.median,
                row.unit(),
                ours.iqr_pct,
                anchor.map_or(String::new(), |a| format!(
                    "   {} {:>12.1} (spread {:.1}%)   ratio {:.3}",
                    anchor_impl.map_or("", Impl::name),
                    a.median,
                    a.iqr_pct,
                    ours.median / a.median
                )),
            );
        }
    }
    Ok(())
}

/// A row's median and how far its rounds spread.
struct Spread {
    median: f64,
    min: f64,
    max: f64,
    /// Interquartile range over the median, in percent.
    iqr_pct: f64,
}

impl Spread {
    fn of(values: &[f64]) -> Spread {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let at = |p: f64| sorted[((sorted.len() - 1) as f64 * p).round() as usize];
        let median = at(0.5);
        Spread {
            median,
            min: sorted[0],
            max: sorted[sorted.len() - 1],
            iqr_pct: (at(0.75) - at(0.25)) / median * 100.0,
        }
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "median": round3(self.median),
            "min": round3(self.min),
            "max": round3(self.max),
            "iqr_pct": round3(self.iqr_pct),
        })
    }
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}
