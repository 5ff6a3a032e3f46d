//! Waiting on a semaphore without ever waiting on a dead peer.

use std::time::{Duration, Instant};

use nodeipc_sem::Semaphore;
use nodeipc_shm::wait::Pacer;

use crate::{Error, Result};

/// How long one wait lasts before the peer's liveness is checked again:
/// the slice every parked waiter of nodeipc uses.
pub(crate) const SLICE: Duration = nodeipc_shm::wait::SLICE;

/// Takes `sem`, in slices of [`SLICE`]; between slices `check` says whether
/// the peer is still there. No clock is read unless the first slice runs out:
/// the fast path is the semaphore's own.
pub(crate) fn wait(
    sem: &(dyn Semaphore + Sync),
    timeout: Duration,
    channel: &str,
    what: impl Fn() -> String,
    mut check: impl FnMut() -> Result<()>,
) -> Result<()> {
    let first = SLICE.min(timeout);
    let mut started: Option<Instant> = None;
    let mut slice = first;
    loop {
        match sem.wait_timeout(slice) {
            Ok(()) => return Ok(()),
            Err(e) if e.is_timeout() => {}
            Err(source) => {
                return Err(Error::Sem {
                    channel: channel.to_owned(),
                    source,
                });
            }
        }
        if let Err(gone) = check() {
            // The peer may have posted and then gone while we looked: what
            // it posted is still ours to take.
            if matches!(sem.try_wait(), Ok(true)) {
                return Ok(());
            }
            return Err(gone);
        }
        let start = *started.get_or_insert_with(Instant::now);
        let waited = start.elapsed() + first;
        if waited >= timeout {
            return Err(Error::Timeout {
                channel: channel.to_owned(),
                op: what(),
                waited,
            });
        }
        slice = SLICE.min(timeout - waited);
    }
}

/// Paces a loop that watches for something no semaphore announces (workers
/// joining, a slot filling), as every such loop in nodeipc is paced
/// ([`Pacer`]); past the timeout, an error naming what was awaited.
pub(crate) struct Poll(Pacer);

impl Poll {
    pub(crate) fn new(first: Duration, ceiling: Duration, timeout: Duration) -> Poll {
        Poll(Pacer::new(first, ceiling, Some(timeout)))
    }

    /// Pauses once, or fails with [`Error::Timeout`] for `what` when the
    /// timeout has passed.
    pub(crate) fn pause(&mut self, channel: &str, what: impl FnOnce() -> String) -> Result<()> {
        self.0.pause().map_err(|waited| Error::Timeout {
            channel: channel.to_owned(),
            op: what(),
            waited,
        })
    }
}
