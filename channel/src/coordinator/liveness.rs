//! Whether a worker is still there, and the bounded waits on a worker that
//! keep looking while they wait.

use std::sync::atomic::Ordering;
use std::time::Duration;

use nodeipc_fdpass::Identity;
use nodeipc_shm::wait::Spin;

use super::{Coordinator, Shared};
use crate::layout::worker_flags;
use crate::payload::Payload;
use crate::sem_kind::{Direction, Role};
use crate::wait::{self, Budget, Poll};
use crate::{Error, Result};

/// Who waits on a worker: the response thread also stops waiting when
/// asked to stop.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Waiter {
    Caller,
    ResponseThread,
}

impl<Req: Payload, Resp: Payload> Coordinator<Req, Resp> {
    /// Waits (bounded) until every worker has joined, then removes every name
    /// the channel had: from here on a crash of any process leaves nothing.
    ///
    /// # Errors
    /// [`Error::Timeout`] naming how many joined; [`Error::WorkerDied`].
    pub fn wait_for_workers(&self, timeout: Duration) -> Result<()> {
        let mut poll = Poll::new(Duration::from_micros(50), Duration::from_millis(5), timeout);
        loop {
            let mut joined = 0;
            for rank in 0..self.shared.config.workers {
                if self.shared.joined(rank) {
                    self.shared.check_worker(rank)?;
                    joined += 1;
                }
            }
            if joined == self.shared.config.workers {
                break;
            }
            poll.pause(&self.shared.config.name, || {
                format!(
                    "waiting for workers to join ({joined} of {} did)",
                    self.shared.config.workers
                )
            })?;
        }
        let _ = self.shared.request.unlink_now();
        let _ = self.shared.response.unlink_now();
        self.shared.sems.unlink_names();
        Ok(())
    }
}

impl Shared {
    fn joined(&self, rank: u32) -> bool {
        self.layout
            .worker(&self.response, rank)
            .flags
            .load(Ordering::Acquire)
            & worker_flags::JOINED
            != 0
    }

    /// Whether worker `rank` is still there: once it has registered, its
    /// process alive. A worker that left cleanly may come back (a reconnect)
    /// while its process lives; once that process is gone too, it has left.
    pub(super) fn check_worker(&self, rank: u32) -> Result<()> {
        let entry = self.layout.worker(&self.response, rank);
        let flags = entry.flags.load(Ordering::Acquire);
        if flags & worker_flags::JOINED == 0 || flags & worker_flags::CLAIMING != 0 {
            return Ok(());
        }
        let pid = entry.pid.load(Ordering::Relaxed);
        let died = || Error::WorkerDied {
            channel: self.config.name.clone(),
            rank,
            pid,
        };
        let holder = Identity {
            pid,
            start_time: entry.start_time.load(Ordering::Relaxed),
        };
        // fdpass's one policy: no such process, a later start time or one
        // that exited (a zombie too) is gone; failing to look (EMFILE, say)
        // is reported as itself.
        let alive = self.workers[rank as usize]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .alive(holder)
            .map_err(|e| self.fdpass(rank, e))?;
        if !alive {
            if flags & worker_flags::LEFT != 0 {
                return Err(Error::WorkerLeft {
                    channel: self.config.name.clone(),
                    rank,
                });
            }
            return Err(died());
        }
        Ok(())
    }

    /// A failure to look at worker `rank`'s process, named as such.
    fn fdpass(&self, rank: u32, source: nodeipc_fdpass::Error) -> Error {
        Error::FdPass {
            context: format!(
                "channel {}: checking whether worker {rank} lives",
                self.config.name
            ),
            source,
        }
    }

    /// Waits on worker `rank`'s semaphore within `budget`, for `waiter`: the
    /// response thread also gives up (within a wait slice) once it is asked
    /// to stop.
    pub(super) fn wait_worker_as(
        &self,
        waiter: Waiter,
        direction: Direction,
        role: Role,
        rank: u32,
        budget: &mut Budget,
    ) -> Result<()> {
        let spin = match (direction, role) {
            (Direction::Request, Role::Produce) => self.frame_spin(),
            _ => self.spin(),
        };
        let what = || match direction {
            Direction::Request => format!(
                "waiting for worker {rank} to free a request frame (it has taken {} requests \
                 and not released the oldest frame)",
                self.worker_received(rank)
            ),
            Direction::Response => format!("waiting for worker {rank}'s response"),
        };
        wait::wait(
            self.sem(direction, role, rank),
            budget,
            self.config.poll,
            spin,
            &self.config.name,
            what,
            || {
                self.check_stop(waiter)?;
                self.check_worker(rank)
            },
        )
    }

    /// How a wait for a worker's next free request frame spins. With the
    /// response thread on this core ([`Spin::OVERSUBSCRIBED`]) and the
    /// worker's answer slots all full, only that thread can let the worker
    /// answer and so free a frame: yield to it at once instead of polling.
    ///
    /// Judged from the coordinator's own counts: with no frame free, all
    /// `depth` frames hold requests the worker has not released, so `2 ×
    /// depth` requests sent and not gathered leave `depth` answers in its
    /// slots (give or take the one it is handling). The worker's entry
    /// says the same, but the worker writes that line on every request:
    /// reading it here made the worker's next write wait to take the line
    /// back (the 64-byte response thread was 6 % slower for it).
    fn frame_spin(&self) -> Spin {
        if self.answer_slots_full() {
            self.spin_for_peer()
        } else {
            self.spin()
        }
    }

    /// Whether, with no request frame free, the workers' answer slots are
    /// full: see [`frame_spin`](Shared::frame_spin).
    pub(super) fn answer_slots_full(&self) -> bool {
        let sent = self.sent.load(Ordering::Relaxed);
        let gathered = self.next_gather.load(Ordering::Relaxed);
        sent.wrapping_sub(gathered) >= 2 * u64::from(self.config.depth)
    }

    /// For the response thread, whether it was asked to stop: then its
    /// wait ends (what it gathered stays for the next gather).
    pub(super) fn check_stop(&self, waiter: Waiter) -> Result<()> {
        if waiter == Waiter::ResponseThread && self.stop.load(Ordering::SeqCst) {
            return Err(Error::ResponseThread {
                channel: self.config.name.clone(),
                reason: "the response thread was asked to stop",
            });
        }
        Ok(())
    }

    /// How many requests worker `rank` has taken, as its entry says (for
    /// messages only: any process may write the entry).
    fn worker_received(&self, rank: u32) -> u64 {
        self.layout
            .worker(&self.response, rank)
            .received
            .load(Ordering::Relaxed)
    }
}
