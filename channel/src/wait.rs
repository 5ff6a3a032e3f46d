//! Waiting on a semaphore without ever waiting on a dead peer, within the
//! time one call may take.

use std::time::{Duration, Instant};

use nodeipc_sem::{Semaphore, Spin};
use nodeipc_shm::wait::Pacer;

use crate::{Error, Result};

/// How long one wait lasts before the peer's liveness is checked again:
/// the slice every parked waiter of nodeipc uses.
pub(crate) const SLICE: Duration = nodeipc_shm::wait::SLICE;

/// How long a call may wait: within a budget (the `x` and `x_timeout`
/// forms), or not at all (the `try_x` forms, which then return `None`).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Wait {
    Within(Budget),
    Try,
}

/// The time one call (a send, a gather, a receive) may spend waiting, over
/// all its waits together.
///
/// The clock is read only once a wait has run out its first slice: waits
/// that succeed at once cost no clock read, and the time they took (each
/// under one slice) is not counted against the budget.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Budget {
    timeout: Duration,
    /// When the budget started to be counted: the first slow wait's start.
    started: Option<Instant>,
}

impl Budget {
    pub(crate) fn new(timeout: Duration) -> Budget {
        Budget {
            timeout,
            started: None,
        }
    }

    /// Time left, counted from the first slow wait (`None` before one).
    fn left(&self) -> Option<Duration> {
        self.started
            .map(|start| self.timeout.saturating_sub(start.elapsed()))
    }

    fn waited(&self) -> Duration {
        self.started.map_or(Duration::ZERO, |start| start.elapsed())
    }

    /// A pacer for a loop watching for something no semaphore announces,
    /// bounded by what is left of the budget (the budget starts now if it
    /// has not yet).
    pub(crate) fn poll(&mut self, first: Duration, ceiling: Duration) -> Poll {
        let now = Instant::now();
        let start = *self.started.get_or_insert(now);
        let left = self.timeout.saturating_sub(now - start);
        Poll(Pacer::new(first, ceiling, Some(left)), start)
    }
}

/// Takes `sem`, in slices of [`SLICE`]; between slices `check` says whether
/// the peer is still there. No clock is read unless the first slice runs out
/// (or `poll` is set): the fast path is the semaphore's own.
///
/// With a non-zero `poll` (at most one slice), the semaphore is first polled
/// for that long, the core never given up: no wake-up to wait for when the
/// peer answers within it.
///
/// `spin` is how the semaphore's own wait polls and yields before it
/// sleeps ([`Spin::OVERSUBSCRIBED`] when the thread that posts may need
/// this core).
pub(crate) fn wait(
    sem: &(dyn Semaphore + Sync),
    budget: &mut Budget,
    poll: Duration,
    spin: Spin,
    channel: &str,
    what: impl Fn() -> String,
    mut check: impl FnMut() -> Result<()>,
) -> Result<()> {
    if !poll.is_zero() && busy_poll(sem, poll.min(SLICE), channel)? {
        return Ok(());
    }
    let first = budget.left().unwrap_or(budget.timeout).min(SLICE);
    let mut slice = first;
    loop {
        match sem.wait_timeout_spin(slice, spin) {
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
        // The first slow wait of the call starts the count, back-dated by
        // the slice it just spent.
        budget.started.get_or_insert_with(|| {
            Instant::now()
                .checked_sub(first)
                .unwrap_or_else(Instant::now)
        });
        let left = budget.left().unwrap_or_default();
        if left.is_zero() {
            return Err(Error::Timeout {
                channel: channel.to_owned(),
                op: what(),
                waited: budget.waited(),
            });
        }
        slice = SLICE.min(left);
    }
}

/// Polls `sem` for up to `poll`; whether it was taken.
fn busy_poll(sem: &(dyn Semaphore + Sync), poll: Duration, channel: &str) -> Result<bool> {
    let sem_error = |source| Error::Sem {
        channel: channel.to_owned(),
        source,
    };
    let start = Instant::now();
    loop {
        // The clock once every 64 looks: a look is a load (a take is one
        // compare-and-swap more), a clock read costs about as much as 20.
        for _ in 0..64 {
            if sem.try_wait().map_err(sem_error)? {
                return Ok(true);
            }
            std::hint::spin_loop();
        }
        if start.elapsed() >= poll {
            return Ok(false);
        }
    }
}

/// Paces a loop that watches for something no semaphore announces (workers
/// joining, a slot filling), as every such loop in nodeipc is paced
/// ([`Pacer`]); past the budget, an error naming what was awaited.
pub(crate) struct Poll(Pacer, Instant);

impl Poll {
    /// A pacer bounded by `timeout` alone, for waits that are not part of a
    /// call's budget.
    pub(crate) fn new(first: Duration, ceiling: Duration, timeout: Duration) -> Poll {
        Budget::new(timeout).poll(first, ceiling)
    }

    /// Pauses once, or fails with [`Error::Timeout`] for `what` when the
    /// budget has run out.
    pub(crate) fn pause(&mut self, channel: &str, what: impl FnOnce() -> String) -> Result<()> {
        self.0.pause().map_err(|_| Error::Timeout {
            channel: channel.to_owned(),
            op: what(),
            waited: self.1.elapsed(),
        })
    }
}
