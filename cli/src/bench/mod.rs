//! Cross-process benchmarks of nodeipc beside their baselines: what
//! `nodeipc bench` runs ([`suite`]), and what the criterion suites and the
//! rival comparisons in `benches/` build on.
//!
//! Every measurement runs ours and its baselines in the same run, on the same
//! machine, so the figures that matter are ratios. The baselines here are
//! the system's own (glibc semaphores, pipes, sockets, `pthread_barrier`, a
//! cache line, `memcpy`) and the C ABI's KittensBroker against the seed's;
//! no rival library (iceoryx2, shaq, rts-alloc) is linked: those live in
//! `benches/`, behind its `rivals` feature.
//!
//! An executable using this module must call [`run_if_peer`] first thing in
//! `main`: peers are that same executable, spawned again. One that measures
//! heartbeats ([`monitor`]) spawns its monitor the same way and calls
//! `nodeipc_monitor_host::run_if_server()` before it.

pub mod barrier;
pub mod channel;
pub mod channel_loan;
mod dispatch;
pub mod fdpass;
mod glibc_sem;
pub mod kittens;
pub mod machine;
pub mod monitor;
mod peer;
pub mod queue;
pub mod ring;
pub mod stats;
pub mod suite;

pub use dispatch::run_if_peer;
pub use peer::{PEER_ENV, Peers, inherited};
pub use ring::{Handoff, Ring};
pub use stats::Summary;

/// Measures `batches` batches of `laps` laps around a ring of `members`
/// processes after a warm-up of one batch; returns nanoseconds per lap.
///
/// # Errors
/// A peer that failed to start, died, or stopped answering.
pub fn measure_ring(
    handoff: Handoff,
    members: usize,
    batches: usize,
    laps: u64,
    pin: bool,
) -> std::io::Result<Summary> {
    let mut ring = Ring::new(handoff, members, laps * (batches as u64 + 1), pin)?;
    ring.run(laps)?;
    let mut per_lap = Vec::with_capacity(batches);
    for _ in 0..batches {
        per_lap.push(ring.run(laps)?.as_nanos() as f64 / laps as f64);
    }
    ring.finish()?;
    Ok(Summary::of(&per_lap).expect("at least one batch"))
}

/// A number that differs between runs, to make names unique.
pub(crate) fn nonce() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0)
}
