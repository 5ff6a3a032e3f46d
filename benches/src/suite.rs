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
    /// Interleaved rounds: each measures one batch of every contender.
    fn batches(self) -> usize {
        if self.quick { 7 } else { 15 }
    }

    /// Operations per batch, scaled from the full size.
    fn ops(self, full: u64) -> u64 {
        if self.quick { (full / 3).max(2) } else { full }
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
    /// `p99_ns_per_op`, per baseline its `ns_per_op` and the `ratio`, the
    /// row's `note` if it has one, and the `machine` it ran on. A time that
    /// is not a finite number (a batch that measured nothing) is `null`:
    /// JSON has no NaN.
    pub fn to_json(&self) -> String {
        let mut row = serde_json::Map::new();
        row.insert("bench".into(), self.bench.into());
        row.insert("what".into(), self.what.as_str().into());
        for (key, value) in &self.params {
            row.insert((*key).into(), (*value).into());
        }
        row.insert("impl".into(), self.ours.name.as_str().into());
        row.insert("ns_per_op".into(), rounded(self.ours.ns.median, 1));
        row.insert("p99_ns_per_op".into(), rounded(self.ours.ns.p99, 1));
        let baselines = self.baselines.iter().map(|b| {
            let times = serde_json::json!({
                "ns_per_op": rounded(b.ns.median, 1),
                "p99_ns_per_op": rounded(b.ns.p99, 1),
            });
            (b.name.clone(), times)
        });
        row.insert("baselines".into(), baselines.collect());
        let ratios = self
            .baselines
            .iter()
            .map(|b| (b.name.clone(), rounded(self.ratio(b), 4)));
        row.insert("ratio".into(), ratios.collect());
        if let Some(note) = &self.note {
            row.insert("note".into(), note.as_str().into());
        }
        row.insert("machine".into(), crate::machine::describe().into());
        serde_json::Value::Object(row).to_string()
    }
}

/// `value` to `digits` decimals, as a JSON number, or `null` if not finite.
fn rounded(value: f64, digits: i32) -> serde_json::Value {
    let scale = 10f64.powi(digits);
    serde_json::Number::from_f64((value * scale).round() / scale)
        .map_or(serde_json::Value::Null, serde_json::Value::Number)
}

/// One implementation in a comparison: how many operations a batch holds,
/// and how to run a batch (set-up and tear-down excluded from its time).
pub struct Contender<'a> {
    name: String,
    ops: u64,
    /// Multiplies the per-operation time (per descriptor, say).
    scale: f64,
    run: Box<dyn FnMut(u64) -> io::Result<Duration> + 'a>,
}

impl<'a> Contender<'a> {
    /// `run(ops)` runs one batch of `ops` operations and returns their time.
    pub fn new(
        name: impl Into<String>,
        ops: u64,
        run: impl FnMut(u64) -> io::Result<Duration> + 'a,
    ) -> Self {
        Contender {
            name: name.into(),
            ops: ops.max(2),
            scale: 1.0,
            run: Box::new(run),
        }
    }

    fn scaled(mut self, scale: f64) -> Self {
        self.scale = scale;
        self
    }

    /// The same contender under another name.
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }
}

/// Measures the contenders in interleaved rounds — one batch of each per
/// round — so ours and its baselines see the same conditions (on a VM the
/// cost of a cache-line transfer changes as the host moves its vCPUs).
///
/// # Errors
/// The first batch that failed.
pub fn interleave(rounds: usize, mut contenders: Vec<Contender<'_>>) -> io::Result<Vec<Measured>> {
    let mut samples: Vec<Vec<f64>> = contenders
        .iter()
        .map(|_| Vec::with_capacity(rounds))
        .collect();
    for _ in 0..rounds {
        for (contender, samples) in contenders.iter_mut().zip(&mut samples) {
            let elapsed = (contender.run)(contender.ops)?;
            samples.push(elapsed.as_nanos() as f64 / contender.ops as f64 * contender.scale);
        }
    }
    Ok(contenders
        .into_iter()
        .zip(samples)
        .map(|(c, s)| measured(c.name, Summary::of(&s).expect("at least one round")))
        .collect())
}

/// Splits measured contenders into ours (the first) and the baselines.
fn split(mut all: Vec<Measured>) -> (Measured, Vec<Measured>) {
    let ours = all.remove(0);
    (ours, all)
}

fn measured(name: impl Into<String>, ns: Summary) -> Measured {
    Measured {
        name: name.into(),
        ns,
    }
}

/// A contender passing a token around a ring of `members` processes: one
/// batch is a fresh ring, warmed up, then `laps` laps.
fn ring(handoff: Handoff, members: usize, laps: u64) -> Contender<'static> {
    Contender::new(handoff.name(), laps, move |laps| {
        let warm_up = (laps / 4).max(20);
        let mut ring = Ring::new(handoff, members, laps + warm_up, true)?;
        ring.run(warm_up)?;
        let elapsed = ring.run(laps)?;
        ring.finish()?;
        Ok(elapsed)
    })
}

/// Semaphores: the round trip between two processes on two cores, and a
/// ring of four processes on this machine's cores.
///
/// # Errors
/// A peer that failed.
pub fn sem(options: Options) -> io::Result<Vec<Row>> {
    let laps = options.ops(8_000);
    let mut contenders = vec![
        ring(Handoff::ShmSemaphore, 2, laps),
        ring(Handoff::CacheLine, 2, laps),
    ];
    for handoff in [
        Handoff::Futex,
        Handoff::GlibcSemaphore,
        Handoff::Pipe,
        Handoff::UnixStream,
    ] {
        contenders.push(ring(handoff, 2, laps / 8));
    }
    let (ours, baselines) = split(interleave(options.batches(), contenders)?);
    let round_trip = Row {
        bench: "sem",
        what: "semaphore round trip, 2 processes".into(),
        params: vec![("processes", 2)],
        ours,
        baselines,
        note: None,
    };
    let laps = options.ops(2_000);
    let contenders = vec![
        ring(Handoff::ShmSemaphore, 4, laps),
        ring(Handoff::GlibcSemaphore, 4, laps / 4),
        ring(Handoff::Futex, 4, laps / 4),
    ];
    let (ours, baselines) = split(interleave(options.batches(), contenders)?);
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
        let per_fd = 1.0 / per_message as f64;
        let contenders = vec![
            Contender::new("nodeipc send_fds/recv_fds", messages, move |m| {
                fdpass::scm_rights(Impl::Ours, per_message, m)
            })
            .scaled(per_fd),
            Contender::new("bare sendmsg/recvmsg", messages, move |m| {
                fdpass::scm_rights(Impl::Bare, per_message, m)
            })
            .scaled(per_fd),
        ];
        let (ours, baselines) = split(interleave(options.batches(), contenders)?);
        rows.push(Row {
            bench: "fdpass",
            what: format!("SCM_RIGHTS to another process, {per_message} fds a message, per fd"),
            params: vec![("fds", per_message as u64)],
            ours,
            baselines,
            note: None,
        });
    }
    if fds.is_none() {
        let count = options.ops(20_000);
        let contenders = vec![
            Contender::new("nodeipc Pidfd::get_fd", count, |c| {
                fdpass::pidfd_getfd(Impl::Ours, c)
            }),
            Contender::new("bare pidfd_getfd", count, |c| {
                fdpass::pidfd_getfd(Impl::Bare, c)
            }),
        ];
        let (ours, baselines) = split(interleave(options.batches(), contenders)?);
        rows.push(Row {
            bench: "fdpass",
            what: "pidfd_getfd from another process, per fd".into(),
            params: vec![("fds", 1)],
            ours,
            baselines,
            note: None,
        });
    }
    Ok(rows)
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
        let kind = |name: &str, kind: BarrierKind, ops: u64| {
            Contender::new(name, ops, move |i| barrier::barriers(kind, ranks, i))
        };
        let mut contenders = vec![
            kind("nodeipc Group::barrier", BarrierKind::Nodeipc, iters),
            kind(
                "pthread_barrier (process-shared)",
                BarrierKind::Pthread,
                iters / 8,
            ),
            kind("spin barrier", BarrierKind::Spin, iters),
        ];
        if ranks == 2 {
            contenders.push(ring(Handoff::CacheLine, 2, iters));
        }
        let (ours, baselines) = split(interleave(options.batches(), contenders)?);
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

/// A channel implementation as a contender: each batch a fresh coordinator
/// and `workers` worker processes, warmed up for a quarter of the batch.
pub fn channel_contender(
    which: ChannelImpl,
    workers: u32,
    payload: usize,
    depth: u32,
    iters: u64,
) -> Contender<'static> {
    let name = match (which, depth) {
        (ChannelImpl::Nodeipc, 1) => "nodeipc channel".to_owned(),
        (ChannelImpl::Nodeipc, depth) => format!("nodeipc channel, depth {depth}"),
        (which, _) => which.name().to_owned(),
    };
    Contender::new(name, iters, move |iters| {
        let warm_up = (iters / 4).max(2);
        let mut session =
            ChannelSession::start_with_depth(which, workers, payload, depth, iters + warm_up)?;
        session.run(warm_up)?;
        let elapsed = session.run(iters)?;
        session.finish()?;
        Ok(elapsed)
    })
}

/// One channel shape: ours (at `depth`) against the lock-step baselines.
fn channel_row(
    options: Options,
    workers: u32,
    payload: usize,
    depth: u32,
    iters: u64,
    baselines: &[ChannelImpl],
    floor: bool,
) -> io::Result<Row> {
    let mut contenders = vec![channel_contender(
        ChannelImpl::Nodeipc,
        workers,
        payload,
        depth,
        iters,
    )];
    for &which in baselines {
        contenders.push(channel_contender(
            which,
            workers,
            payload,
            1,
            (iters / 8).max(2),
        ));
    }
    if floor {
        contenders.push(ring(Handoff::CacheLine, 2, iters));
    }
    let (ours, baselines) = split(interleave(options.batches(), contenders)?);
    Ok(Row {
        bench: "channel",
        what: format!("execute round trip, {workers} worker(s), {payload}-byte payload"),
        params: vec![
            ("workers", u64::from(workers)),
            ("payload", payload as u64),
            ("depth", u64::from(depth)),
        ],
        ours,
        baselines,
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
        let baselines = [GlibcLockstep, UnixSocket];
        return Ok(vec![channel_row(
            options, workers, payload, depth, iters, &baselines, false,
        )?]);
    }
    let small = channel_row(
        options,
        1,
        64,
        1,
        options.ops(8_000),
        &[GlibcLockstep, UnixSocket],
        true,
    )?;

    let mib = 1 << 20;
    let mut large = channel_row(
        options,
        1,
        mib,
        4,
        options.ops(160),
        &[GlibcLockstep, UnixSocket],
        false,
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
    let wide = channel_row(
        options,
        8,
        64,
        1,
        options.ops(2_000),
        &[GlibcLockstep],
        false,
    )?;
    Ok(vec![small, large, wide])
}

/// Heartbeats: the shared-memory fast path against the socket.
///
/// # Errors
/// The monitor failing to start or refusing a heartbeat.
pub fn monitor(options: Options) -> io::Result<Vec<Row>> {
    let session = std::cell::RefCell::new(MonitorSession::start()?);
    let contenders = vec![
        Contender::new(Beat::FastPath.name(), options.ops(2_000_000), |n| {
            session.borrow_mut().run(Beat::FastPath, n)
        }),
        Contender::new(Beat::Socket.name(), options.ops(4_000), |n| {
            session.borrow_mut().run(Beat::Socket, n)
        }),
    ];
    let (ours, baselines) = split(interleave(options.batches(), contenders)?);
    let note = format!(
        "{:.0} heartbeats/s through shared memory, {:.0}/s over the socket",
        1e9 / ours.ns.median,
        1e9 / baselines[0].ns.median
    );
    Ok(vec![Row {
        bench: "monitor",
        what: "one heartbeat to a rank monitor in another process".into(),
        params: vec![],
        ours,
        baselines,
        note: Some(note),
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
