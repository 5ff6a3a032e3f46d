//! One function a layer: its rows, ours beside the baselines.

use std::io;
use std::time::Duration;

use super::open_loop_rows::{Offered, open_loop_row};
use super::{Contender, Measured, Options, Row, floor_note};
use crate::bench::barrier::{self, BarrierKind};
use crate::bench::channel::{ChannelImpl, ChannelSession, memcpy_bandwidth};
use crate::bench::fdpass::{self, Impl};
use crate::bench::monitor::{Beat, MonitorSession};
use crate::bench::{Handoff, Ring, Summary};

/// A contender passing a token around a ring of `members` processes: one
/// batch is a fresh ring, warmed up, then `laps` laps.
pub(super) fn ring(handoff: Handoff, members: usize, laps: u64) -> Contender<'static> {
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
    let what = "semaphore round trip, 2 processes";
    let (ours, baselines) = options.measure(what, contenders)?;
    let round_trip = options.done(Row {
        bench: "sem",
        what: what.into(),
        params: vec![("processes", 2)],
        ours,
        baselines,
        note: None,
    });
    let laps = options.ops(2_000);
    let contenders = vec![
        ring(Handoff::ShmSemaphore, 4, laps),
        ring(Handoff::GlibcSemaphore, 4, laps / 4),
        ring(Handoff::Futex, 4, laps / 4),
    ];
    let what = "token ring of 4 processes (more than the cores)";
    let (ours, baselines) = options.measure(what, contenders)?;
    let oversubscribed = options.done(Row {
        bench: "sem",
        what: what.into(),
        params: vec![("processes", 4)],
        ours,
        baselines,
        note: None,
    });
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
        let what = format!("SCM_RIGHTS to another process, {per_message} fds a message, per fd");
        let (ours, baselines) = options.measure(&what, contenders)?;
        rows.push(options.done(Row {
            bench: "fdpass",
            what,
            params: vec![("fds", per_message as u64)],
            ours,
            baselines,
            note: None,
        }));
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
        let what = "pidfd_getfd from another process, per fd";
        let (ours, baselines) = options.measure(what, contenders)?;
        rows.push(options.done(Row {
            bench: "fdpass",
            what: what.into(),
            params: vec![("fds", 1)],
            ours,
            baselines,
            note: None,
        }));
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
    // Measured first, so that the row its note goes with is final (and
    // reported) as soon as it is measured.
    let mut parked_note = match ranks {
        None => {
            let parked = barrier::parked_cpu(Duration::from_secs(1))?;
            Some(format!(
                "CPU time of a rank parked 1 s in a barrier: {:.2} ms",
                parked.as_secs_f64() * 1e3
            ))
        }
        Some(_) => None,
    };
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
        let what = format!("barrier of {ranks} processes");
        let (ours, baselines) = options.measure(&what, contenders)?;
        rows.push(options.done(Row {
            bench: "barrier",
            what,
            params: vec![("ranks", u64::from(ranks)), ("iters", iters)],
            ours,
            baselines,
            note: parked_note.take(),
        }));
    }
    Ok(rows)
}

/// How a channel contender is named in a row.
pub(super) fn contender_name(which: ChannelImpl, depth: u32) -> String {
    match (which, depth) {
        (ChannelImpl::Nodeipc, 1) => "nodeipc channel".to_owned(),
        (ChannelImpl::Nodeipc, depth) => format!("nodeipc channel, depth {depth}"),
        (ChannelImpl::NodeipcResponseThread, depth) => {
            format!("send thread + response thread, depth {depth} (Rust)")
        }
        (ChannelImpl::CppResponseThread, depth) => {
            format!("send thread + response thread, depth {depth} (C++)")
        }
        (ChannelImpl::NodeipcInPlace, 1) => "lock-step send then recv(All)".to_owned(),
        (ChannelImpl::CppLockstep, 1) => "lock-step send then recv_in_place(all) (C++)".to_owned(),
        (which, _) => which.name().to_owned(),
    }
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
    Contender::new(contender_name(which, depth), iters, move |iters| {
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
    let what = format!("execute round trip, {workers} worker(s), {payload}-byte payload");
    let (ours, baselines) = options.measure(&what, contenders)?;
    Ok(Row {
        bench: "channel",
        what,
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
/// single-core memcpy), 8 workers with 64 bytes, then a send thread +
/// response thread against lock-step with 64 bytes and 64 KiB, at
/// saturation and open loop at 80% of lock-step's maximum; or one shape if
/// given (with `response_thread`, its saturation row, or with `offered`
/// its open-loop row).
///
/// # Errors
/// A worker that failed.
pub fn channel(
    options: Options,
    shape: Option<(u32, usize, u64)>,
    depth: u32,
    response_thread: bool,
    offered: Option<Offered>,
) -> io::Result<Vec<Row>> {
    use ChannelImpl::{GlibcLockstep, UnixSocket};
    if let (Some((workers, payload, iters)), true, Some(offered)) =
        (shape, response_thread, offered)
    {
        let row = open_loop_row(options, workers, payload, depth, iters, offered)?;
        return Ok(vec![options.done(row)]);
    }
    if let (Some((workers, payload, iters)), true) = (shape, response_thread) {
        let row = response_thread_row(options, workers, payload, depth, iters)?;
        return Ok(vec![options.done(row)]);
    }
    if let Some((workers, payload, iters)) = shape {
        let baselines = [GlibcLockstep, UnixSocket];
        let row = channel_row(options, workers, payload, depth, iters, &baselines, false)?;
        return Ok(vec![options.done(row)]);
    }
    let small = options.done(channel_row(
        options,
        1,
        64,
        1,
        options.ops(8_000),
        &[GlibcLockstep, UnixSocket],
        true,
    )?);
    let in_place = options.done(in_place_row(options)?);

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
    let large = options.done(large);
    let wide = options.done(channel_row(
        options,
        8,
        64,
        1,
        options.ops(2_000),
        &[GlibcLockstep],
        false,
    )?);
    let threaded_small = options.done(response_thread_row(options, 1, 64, 4, options.ops(8_000))?);
    let threaded_large = options.done(response_thread_row(
        options,
        1,
        64 << 10,
        4,
        options.ops(2_000),
    )?);
    let loan = super::loan_row::loan(options)?;
    // The same layouts offered 80% of lock-step's maximum, open loop.
    let open_small = options.done(open_loop_row(
        options,
        1,
        64,
        4,
        options.ops(4_000),
        Offered::Load(0.8),
    )?);
    let open_large = options.done(open_loop_row(
        options,
        1,
        64 << 10,
        4,
        options.ops(1_000),
        Offered::Load(0.8),
    )?);
    Ok(vec![
        small,
        in_place,
        large,
        loan,
        wide,
        threaded_small,
        threaded_large,
        open_small,
        open_large,
    ])
}

/// MindIE's coordinator layout (issue 35): one thread sends raw requests
/// while the response thread gathers every answer, at depth 4, from Rust
/// and from C++ (`nodeipc::Coordinator::on_response` over the C ABI),
/// against lock-step send-then-gather on the same channel. The time per
/// request at saturation (the sender never waits for an answer unless the
/// ring is full).
fn response_thread_row(
    options: Options,
    workers: u32,
    payload: usize,
    depth: u32,
    iters: u64,
) -> io::Result<Row> {
    let mut contenders = vec![
        channel_contender(
            ChannelImpl::NodeipcResponseThread,
            workers,
            payload,
            depth,
            iters,
        ),
        channel_contender(ChannelImpl::NodeipcInPlace, workers, payload, 1, iters),
    ];
    let note = match crate::bench::kittens::unavailable() {
        None => {
            contenders.push(channel_contender(
                ChannelImpl::CppResponseThread,
                workers,
                payload,
                depth,
                iters,
            ));
            None
        }
        Some(why) => Some(format!("no C++ row: {why}")),
    };
    let what =
        format!("send thread + response thread, {workers} worker(s), {payload}-byte payload");
    let (ours, baselines) = options.measure(&what, contenders)?;
    Ok(Row {
        bench: "channel",
        what,
        params: vec![
            ("workers", u64::from(workers)),
            ("payload", payload as u64),
            ("depth", u64::from(depth)),
        ],
        ours,
        baselines,
        note,
    })
}

/// The channel carrying raw bytes, read in place (a `Raw` channel's
/// `send`, `recv_in_place`, `respond`): the round trip with no protobuf work,
/// beside the cache-line floor it is judged by.
fn in_place_row(options: Options) -> io::Result<Row> {
    let iters = options.ops(8_000);
    let contenders = vec![
        channel_contender(ChannelImpl::NodeipcInPlace, 1, 64, 1, iters),
        ring(Handoff::CacheLine, 2, iters),
    ];
    let what = "raw bytes read in place, 1 worker, 64-byte payload";
    let (ours, baselines) = options.measure(what, contenders)?;
    let note = floor_note(&ours, &baselines);
    Ok(Row {
        bench: "channel",
        what: what.to_owned(),
        params: vec![("workers", 1), ("payload", 64), ("depth", 1)],
        ours,
        baselines,
        note,
    })
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
    let what = "one heartbeat to a rank monitor in another process";
    let (ours, baselines) = options.measure(what, contenders)?;
    let note = format!(
        "{:.0} heartbeats/s through shared memory, {:.0}/s over the socket",
        1e9 / ours.ns.median,
        1e9 / baselines[0].ns.median
    );
    Ok(vec![options.done(Row {
        bench: "monitor",
        what: what.into(),
        params: vec![],
        ours,
        baselines,
        note: Some(note),
    })])
}
