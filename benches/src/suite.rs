//! The side-by-side suite `nodeipc bench` prints: every layer against its
//! baselines, measured in the same run as repeated batches (median and p99
//! of the per-operation time over the batches).

use std::io;
use std::time::Duration;

use crate::barrier::{self, BarrierKind};
use crate::channel::{ChannelImpl, ChannelSession, memcpy_bandwidth};
use crate::fdpass::{self, Impl};
use crate::monitor::{Beat, MonitorSession};
use crate::{Handoff, Ring, Summary};

/// How long to measure.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Fewer and shorter batches: the whole suite in well under a minute.
    pub quick: bool,
}

impl Options {
    fn batches(self) -> usize {
        if self.quick { 7 } else { 21 }
    }

    /// Operations per batch, scaled from the full size.
    fn ops(self, full: u64) -> u64 {
        if self.quick { (full / 4).max(2) } else { full }
    }
}

/// One implementation's time per operation.
#[derive(Clone, Debug)]
pub struct Measured {
    /// What was measured.
    pub name: String,
    /// Nanoseconds per operation over the batches.
    pub ns: Summary,
}

/// One comparison: ours beside its baselines.
#[derive(Clone, Debug)]
pub struct Row {
    /// The benchmark's key (`sem`, `barrier`, `channel`, …).
    pub bench: &'static str,
    /// A human description of the operation.
    pub what: String,
    /// Parameters, as `(key, value)`.
    pub params: Vec<(&'static str, u64)>,
    /// nodeipc.
    pub ours: Measured,
    /// What it is compared with.
    pub baselines: Vec<Measured>,
    /// A remark printed under the row (bandwidth, say).
    pub note: Option<String>,
}

impl Row {
    /// Ours ÷ the baseline's median time: below 1, ours is faster.
    pub fn ratio(&self, baseline: &Measured) -> f64 {
        self.ours.ns.median / baseline.ns.median
    }

    /// One JSON object: `bench`, the parameters, `ns_per_op` (ours),
    /// `p99_ns_per_op`, and per baseline its `ns_per_op` and the `ratio`.
    pub fn to_json(&self) -> String {
        let mut out = format!(
            "{{\"bench\":\"{}\",\"what\":\"{}\"",
            self.bench,
            escape(&self.what)
        );
        for (key, value) in &self.params {
            out.push_str(&format!(",\"{key}\":{value}"));
        }
        out.push_str(&format!(
            ",\"impl\":\"{}\",\"ns_per_op\":{:.1},\"p99_ns_per_op\":{:.1}",
            escape(&self.ours.name),
            self.ours.ns.median,
            self.ours.ns.p99
        ));
        let baselines: Vec<String> = self
            .baselines
            .iter()
            .map(|b| {
                format!(
                    "\"{}\":{{\"ns_per_op\":{:.1},\"p99_ns_per_op\":{:.1}}}",
                    escape(&b.name),
                    b.ns.median,
                    b.ns.p99
                )
            })
            .collect();
        out.push_str(&format!(",\"baselines\":{{{}}}", baselines.join(",")));
        let ratios: Vec<String> = self
            .baselines
            .iter()
            .map(|b| format!("\"{}\":{:.4}", escape(&b.name), self.ratio(b)))
            .collect();
        out.push_str(&format!(",\"ratio\":{{{}}}}}", ratios.join(",")));
        out
    }
}

fn escape(text: &str) -> String {
    text.replace('\\', "\\\\").replace('"', "\\\"")
}

/// Runs `batches` batches of `ops` operations with `run` (which returns the
/// time for the operations it was asked for) and summarises ns per operation.
fn batches(
    batches: usize,
    ops: u64,
    mut run: impl FnMut(u64) -> io::Result<Duration>,
) -> io::Result<Summary> {
    let per_op: Vec<f64> = (0..batches)
        .map(|_| run(ops).map(|d| d.as_nanos() as f64 / ops as f64))
        .collect::<io::Result<_>>()?;
    Ok(Summary::of(&per_op).expect("at least one batch"))
}

fn measured(name: impl Into<String>, ns: Summary) -> Measured {
    Measured {
        name: name.into(),
        ns,
    }
}

/// A ring of `members` processes passing the token: ns per lap.
fn ring(handoff: Handoff, members: usize, options: Options, laps: u64) -> io::Result<Measured> {
    let n = options.batches();
    let mut session = Ring::new(handoff, members, laps * (n as u64 + 1), true)?;
    session.run(laps)?;
    let ns = batches(n, laps, |l| session.run(l))?;
    session.finish()?;
    Ok(measured(handoff.name(), ns))
}

/// Semaphores: the round trip between two processes on two cores, and a
/// ring of four processes on this machine's cores.
///
/// # Errors
/// A peer that failed.
pub fn sem(options: Options) -> io::Result<Vec<Row>> {
    let laps = options.ops(8_000);
    let ours = ring(Handoff::ShmSemaphore, 2, options, laps)?;
    let mut baselines = Vec::new();
    for handoff in [
        Handoff::CacheLine,
        Handoff::Futex,
        Handoff::GlibcSemaphore,
        Handoff::Pipe,
        Handoff::UnixStream,
    ] {
        let laps = if matches!(handoff, Handoff::CacheLine) {
            laps
        } else {
            laps / 4
        };
        baselines.push(ring(handoff, 2, options, laps.max(2))?);
    }
    let round_trip = Row {
        bench: "sem",
        what: "semaphore round trip, 2 processes".into(),
        params: vec![("processes", 2)],
        ours,
        baselines,
        note: None,
    };
    let laps = options.ops(2_000);
    let ours = ring(Handoff::ShmSemaphore, 4, options, laps)?;
    let baselines = vec![
        ring(Handoff::GlibcSemaphore, 4, options, laps / 4)?,
        ring(Handoff::Futex, 4, options, laps / 4)?,
    ];
    let oversubscribed = Row {
        bench: "sem",
        what: "token ring of 4 processes (more than the cores)".into(),
        params: vec![("processes", 4)],
        ours,
        baselines,
        note: None,
    };
    Ok(vec![round_trip, oversubscribed])
}

/// Descriptor passing, per descriptor: `SCM_RIGHTS` at 1 and `fds` a message
/// (64 unless given), and `pidfd_getfd`, each against the bare calls.
///
/// # Errors
/// A peer that failed.
pub fn fdpass(options: Options, fds: Option<usize>) -> io::Result<Vec<Row>> {
    let mut rows = Vec::new();
    let sizes = match fds {
        Some(k) => vec![k],
        None => vec![1, 64],
    };
    for per_message in sizes {
        let messages = options.ops(if per_message > 8 { 400 } else { 2_000 });
        let per_fd = |which| {
            batches(options.batches(), messages, |m| {
                fdpass::scm_rights(which, per_message, m)
            })
            .map(|s| scale(s, 1.0 / per_message as f64))
        };
        rows.push(Row {
            bench: "fdpass",
            what: format!("SCM_RIGHTS to another process, {per_message} fds a message, per fd"),
            params: vec![("fds", per_message as u64)],
            ours: measured("nodeipc send_fds/recv_fds", per_fd(Impl::Ours)?),
            baselines: vec![measured("bare sendmsg/recvmsg", per_fd(Impl::Bare)?)],
            note: None,
        });
    }
    if fds.is_none() {
        let count = options.ops(20_000);
        let per = |which| batches(options.batches(), count, |c| fdpass::pidfd_getfd(which, c));
        rows.push(Row {
            bench: "fdpass",
            what: "pidfd_getfd from another process, per fd".into(),
            params: vec![("fds", 1)],
            ours: measured("nodeipc Pidfd::get_fd", per(Impl::Ours)?),
            baselines: vec![measured("bare pidfd_getfd", per(Impl::Bare)?)],
            note: None,
        });
    }
    Ok(rows)
}

fn scale(summary: Summary, factor: f64) -> Summary {
    Summary {
        median: summary.median * factor,
        p99: summary.p99 * factor,
        min: summary.min * factor,
        samples: summary.samples,
    }
}

/// Barriers of `ranks` processes (2 and 8 unless given), each a process,
/// against a process-shared `pthread_barrier` and a spin barrier; with two
/// ranks the cache-line round trip too.
///
/// # Errors
/// A peer that failed.
pub fn barrier(options: Options, ranks: Option<u32>, iters: Option<u64>) -> io::Result<Vec<Row>> {
    let mut rows = Vec::new();
    for ranks in ranks.map_or(vec![2, 8], |r| vec![r]) {
        let iters = iters.unwrap_or_else(|| options.ops(if ranks > 2 { 2_000 } else { 8_000 }));
        let per = |kind| barrier::barrier_batches(kind, ranks, options.batches(), iters);
        let ours = measured("nodeipc Group::barrier", per(BarrierKind::Nodeipc)?);
        let mut baselines = vec![
            measured(
                "pthread_barrier (process-shared)",
                per(BarrierKind::Pthread)?,
            ),
            measured("spin barrier", per(BarrierKind::Spin)?),
        ];
        if ranks == 2 {
            baselines.push(ring(Handoff::CacheLine, 2, options, iters)?);
        }
        rows.push(Row {
            bench: "barrier",
            what: format!("barrier of {ranks} processes"),
            params: vec![("ranks", u64::from(ranks)), ("iters", iters)],
            ours,
            baselines,
            note: None,
        });
    }
    if ranks.is_none() {
        let parked = barrier::parked_cpu(Duration::from_secs(1))?;
        if let Some(row) = rows.first_mut() {
            row.note = Some(format!(
                "CPU time of a rank parked 1 s in a barrier: {:.2} ms",
                parked.as_secs_f64() * 1e3
            ));
        }
    }
    Ok(rows)
}

/// One channel shape: ours (at `depth`) against the lock-step baselines.
fn channel_row(
    options: Options,
    workers: u32,
    payload: usize,
    depth: u32,
    iters: u64,
    baselines: &[ChannelImpl],
) -> io::Result<Row> {
    let per = |which: ChannelImpl, depth: u32, iters: u64| -> io::Result<Summary> {
        let n = options.batches();
        let mut session = ChannelSession::start_with_depth(
            which,
            workers,
            payload,
            depth,
            iters * (n as u64 + 1),
        )?;
        session.run(iters)?;
        let summary = batches(n, iters, |i| session.run(i))?;
        session.finish()?;
        Ok(summary)
    };
    let name = if depth > 1 {
        format!("nodeipc channel, depth {depth}")
    } else {
        "nodeipc channel".to_owned()
    };
    let ours = measured(name, per(ChannelImpl::Nodeipc, depth, iters)?);
    let mut measured_baselines = Vec::new();
    for &which in baselines {
        measured_baselines.push(measured(which.name(), per(which, 1, (iters / 4).max(2))?));
    }
    Ok(Row {
        bench: "channel",
        what: format!("execute round trip, {workers} worker(s), {payload}-byte payload"),
        params: vec![
            ("workers", u64::from(workers)),
            ("payload", payload as u64),
            ("depth", u64::from(depth)),
        ],
        ours,
        baselines: measured_baselines,
        note: None,
    })
}

/// The execute channel: 1 worker with 64 bytes (against lock-step glibc
/// semaphores, a Unix socket and the cache-line floor), 1 MiB (against
/// single-core memcpy), 8 workers with 64 bytes; or one shape if given.
///
/// # Errors
/// A worker that failed.
pub fn channel(
    options: Options,
    shape: Option<(u32, usize, u64)>,
    depth: u32,
) -> io::Result<Vec<Row>> {
    use ChannelImpl::{GlibcLockstep, UnixSocket};
    if let Some((workers, payload, iters)) = shape {
        return Ok(vec![channel_row(
            options,
            workers,
            payload,
            depth,
            iters,
            &[GlibcLockstep, UnixSocket],
        )?]);
    }
    let mut small = channel_row(
        options,
        1,
        64,
        1,
        options.ops(8_000),
        &[GlibcLockstep, UnixSocket],
    )?;
    small
        .baselines
        .push(ring(Handoff::CacheLine, 2, options, options.ops(8_000))?);

    let mib = 1 << 20;
    let mut large = channel_row(
        options,
        1,
        mib,
        4,
        options.ops(80),
        &[GlibcLockstep, UnixSocket],
    )?;
    let bandwidth = memcpy_bandwidth(
        mib,
        Duration::from_millis(if options.quick { 200 } else { 600 }),
    );
    let memcpy_ns = 1e9 * mib as f64 / bandwidth;
    large.baselines.push(Measured {
        name: "memcpy of 1 MiB, one core".into(),
        ns: Summary {
            median: memcpy_ns,
            p99: memcpy_ns,
            min: memcpy_ns,
            samples: 1,
        },
    });
    large.note = Some(format!(
        "channel bandwidth {:.2} GB/s = {:.0}% of single-core memcpy ({:.1} GB/s)",
        mib as f64 / large.ours.ns.median,
        100.0 * memcpy_ns / large.ours.ns.median,
        bandwidth / 1e9
    ));
    let wide = channel_row(options, 8, 64, 1, options.ops(2_000), &[GlibcLockstep])?;
    Ok(vec![small, large, wide])
}

/// Heartbeats: the shared-memory fast path against the socket.
///
/// # Errors
/// The monitor failing to start or refusing a heartbeat.
pub fn monitor(options: Options) -> io::Result<Vec<Row>> {
    let mut session = MonitorSession::start()?;
    let fast = batches(options.batches(), options.ops(2_000_000), |n| {
        session.run(Beat::FastPath, n)
    })?;
    let socket = batches(options.batches(), options.ops(4_000), |n| {
        session.run(Beat::Socket, n)
    })?;
    Ok(vec![Row {
        bench: "monitor",
        what: "one heartbeat to a rank monitor in another process".into(),
        params: vec![],
        ours: measured(Beat::FastPath.name(), fast),
        baselines: vec![measured(Beat::Socket.name(), socket)],
        note: Some(format!(
            "{:.0} heartbeats/s through shared memory, {:.0}/s over the socket",
            1e9 / fast.median,
            1e9 / socket.median
        )),
    }])
}

/// Everything, in layer order.
///
/// # Errors
/// The first layer that fails.
pub fn all(options: Options) -> io::Result<Vec<Row>> {
    let mut rows = sem(options)?;
    rows.extend(fdpass(options, None)?);
    rows.extend(barrier(options, None, None)?);
    rows.extend(channel(options, None, 1)?);
    rows.extend(monitor(options)?);
    Ok(rows)
}

/// The rows as a table, with the machine it ran on.
pub fn table(rows: &[Row]) -> String {
    let mut out = format!("machine: {}\n", crate::machine::describe());
    if crate::machine::cores() >= 2 {
        out.push_str("two-process rows pinned: this process on core 0, its peer on core 1\n");
    }
    out.push_str(&format!(
        "\n{:<58} {:<36} {:>12} {:>12} {:>10}\n",
        "what", "implementation", "median", "p99", "ours/this"
    ));
    for row in rows {
        out.push_str(&format!(
            "{:<58} {:<36} {:>12} {:>12} {:>10}\n",
            row.what,
            row.ours.name,
            human(row.ours.ns.median),
            human(row.ours.ns.p99),
            ""
        ));
        for baseline in &row.baselines {
            out.push_str(&format!(
                "{:<58} {:<36} {:>12} {:>12} {:>10}\n",
                "",
                baseline.name,
                human(baseline.ns.median),
                human(baseline.ns.p99),
                format!("{:.3}", row.ratio(baseline))
            ));
        }
        if let Some(note) = &row.note {
            out.push_str(&format!("  {note}\n"));
        }
    }
    out
}

/// Nanoseconds in the unit that reads best.
fn human(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.2} us", ns / 1e3)
    } else {
        format!("{ns:.1} ns")
    }
}
