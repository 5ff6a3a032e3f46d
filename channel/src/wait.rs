//! Waiting on a semaphore without ever waiting on a dead peer.

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
