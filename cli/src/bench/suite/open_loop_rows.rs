//! The execute channel under open-loop load (issue 35): requests offered
//! on a fixed schedule to a send thread + response thread and to lock-step
//! send-then-gather, from Rust and from C++ over the C ABI, in the same
//! run. Each request's latency counts from when it was due
//! ([`open_loop`](crate::bench::channel::open_loop)), so a sender that
//! falls behind shows it; the row gives the p50 and p99 over every request
//! of every round.

use std::io;

use super::layers::{channel_contender, contender_name};
use super::{Measured, Options, Row};
use crate::bench::Summary;
use crate::bench::channel::open_loop::{self, MAX_RATE};
use crate::bench::channel::{ChannelImpl, ChannelSession};

/// How much load an open-loop row offers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Offered {
    /// Requests a second.
    Rate(u64),
    /// This fraction of lock-step's maximum rate, measured first in the
    /// same run (closed loop, depth 1).
    Load(f64),
}

/// The open-loop row of one shape: the response thread at `depth` (ours)
/// beside lock-step, from Rust and (where the CLI was built with a C++
/// compiler) from C++, `iters` requests a batch.
///
/// # Errors
/// A bad rate, load or `iters`; a worker that failed or answered wrongly.
pub fn open_loop_row(
    options: Options,
    workers: u32,
    payload: usize,
    depth: u32,
    iters: u64,
    offered: Offered,
) -> io::Result<Row> {
    open_loop::batch_len(iters)?;
    let shape = format!("{workers} worker(s), {payload}-byte payload");
    let mut params = vec![
        ("workers", u64::from(workers)),
        ("payload", payload as u64),
        ("depth", u64::from(depth)),
    ];
    let (rate, offered_note) = match offered {
        Offered::Rate(rate) => (rate as f64, format!("{rate} requests/s")),
        Offered::Load(load) => {
            if !(load.is_finite() && load > 0.0) {
                return Err(io::Error::other(format!(
                    "an open-loop load of {load}; it must be a positive fraction"
                )));
            }
            let max = lockstep_max_rate(options, workers, payload, iters, &shape)?;
            let rate = (load * max).min(MAX_RATE);
            params.push(("load_percent", (load * 100.0).round() as u64));
            params.push(("lockstep_max_rate", max.round() as u64));
            (
                rate,
                format!(
                    "{rate:.0} requests/s = {:.0}% of lock-step's maximum ({max:.0}/s, \
                     measured in this run)",
                    load * 100.0
                ),
            )
        }
    };
    params.push(("rate", rate.round() as u64));
    let mut contenders = vec![
        (ChannelImpl::NodeipcResponseThread, depth),
        (ChannelImpl::NodeipcInPlace, 1),
    ];
    let missing = crate::bench::kittens::unavailable();
    if missing.is_none() {
        contenders.push((ChannelImpl::CppResponseThread, depth));
        contenders.push((ChannelImpl::CppLockstep, 1));
    }
    let what = format!("open loop at {rate:.0}/s, {shape}: latency");
    let rounds = options.batches();
    let mut latencies: Vec<Vec<f64>> = contenders.iter().map(|_| Vec::new()).collect();
    for round in 1..=rounds {
        if let Some(report) = options.report {
            report.round(&what, round, rounds);
        }
        for (&(which, depth), latencies) in contenders.iter().zip(&mut latencies) {
            latencies.extend(batch(which, workers, payload, depth, iters, rate)?);
        }
    }
    let mut measured = contenders
        .iter()
        .zip(&latencies)
        .map(|(&(which, depth), latencies)| Measured {
            name: contender_name(which, depth),
            ns: Summary::of(latencies).expect("at least one request"),
        });
    let ours = measured.next().expect("the response thread");
    let baselines: Vec<Measured> = measured.collect();
    let mut note = format!(
        "open loop, {offered_note}; median and p99 of every request's latency from when it \
         was due to its answers ({rounds} rounds of {iters})"
    );
    if let Some(why) = missing {
        note.push_str(&format!("; no C++ rows: {why}"));
    }
    Ok(Row {
        bench: "channel",
        what,
        params,
        ours,
        baselines,
        note: Some(note),
    })
}

/// Lock-step's maximum rate (requests a second): the inverse of its median
/// closed-loop round trip over the rounds.
fn lockstep_max_rate(
    options: Options,
    workers: u32,
    payload: usize,
    iters: u64,
    shape: &str,
) -> io::Result<f64> {
    let what = format!("lock-step maximum, {shape}");
    let contender = channel_contender(ChannelImpl::NodeipcInPlace, workers, payload, 1, iters);
    let (lockstep, _) = options.measure(&what, vec![contender])?;
    Ok(1e9 / lockstep.ns.median)
}

/// One open-loop batch in a fresh session: a closed-loop warm-up of a
/// quarter of it, then `iters` requests at `rate` a second.
fn batch(
    which: ChannelImpl,
    workers: u32,
    payload: usize,
    depth: u32,
    iters: u64,
    rate: f64,
) -> io::Result<Vec<f64>> {
    let warm_up = (iters / 4).max(2);
    let mut session =
        ChannelSession::start_with_depth(which, workers, payload, depth, iters + warm_up)?;
    session.run(warm_up)?;
    let latencies = session.run_open_loop(iters, rate)?;
    session.finish()?;
    Ok(latencies)
}
