//! Waiting on a semaphore without ever waiting on a dead peer.

use std::thread;
use std::time::{Duration, Instant};

use nodeipc_sem::Semaphore;

use crate::{Error, Result};

/// How long one wait lasts before the peer's liveness is checked again.
pub(crate) const SLICE: Duration = Duration::from_millis(50);

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
        check()?;
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
/// joining, a slot filling): it yields while the pause is shorter than a
/// sleep's own cost, then sleeps, doubling the pause up to a ceiling; past
/// the timeout, an error naming what was awaited.
pub(crate) struct Poll {
    start: Instant,
    pause: Duration,
    ceiling: Duration,
    timeout: Duration,
}

impl Poll {
    /// Sleeping shorter than this costs more than it saves: yield instead.
    const YIELD_BELOW: Duration = Duration::from_micros(50);

    pub(crate) fn new(first: Duration, ceiling: Duration, timeout: Duration) -> Poll {
        Poll {
            start: Instant::now(),
            pause: first,
            ceiling,
            timeout,
        }
    }

    /// Pauses once, or fails with [`Error::Timeout`] for `what` when the
    /// timeout has passed.
    pub(crate) fn pause(&mut self, channel: &str, what: impl FnOnce() -> String) -> Result<()> {
        let waited = self.start.elapsed();
        if waited >= self.timeout {
            return Err(Error::Timeout {
                channel: channel.to_owned(),
                op: what(),
                waited,
            });
        }
        if self.pause < Self::YIELD_BELOW {
            thread::yield_now();
        } else {
            thread::sleep(self.pause);
        }
        self.pause = (self.pause * 2).min(self.ceiling);
        Ok(())
    }
}
