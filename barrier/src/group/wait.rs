//! Waiting: the barriers, and what ends a wait early (poison, a dead or
//! departed peer).

use std::sync::atomic::Ordering;
use std::thread;
use std::time::Duration;

use nodeipc_fdpass::Pidfd;
use nodeipc_shm::wait::{Deadline, Spin, WaitError, unpark, wait_while, wake_if_parked};
use rustix::io::Errno;

use super::Group;
use crate::vault::{self, BarrierWords, Cause, flags};
use crate::{Error, Result};

/// How many times a rank that finds the group poisoned but no cause stored
/// yet yields before it reports the cause as unknown (0): the poisoner
/// stores it right after the poison word, unless it died in between.
const CAUSE_GRACE_YIELDS: u32 = 100;

impl Group {
    /// Waits until every rank has called `barrier`, up to the group's timeout.
    ///
    /// # Errors
    /// [`Error::PeerDied`], [`Error::PeerLeft`], [`Error::Poisoned`],
    /// [`Error::Timeout`] (with how many ranks arrived), [`Error::Interrupted`]
    /// by this thread's cancellation hook; each poisons the group.
    pub fn barrier(&self) -> Result<()> {
        self.barrier_timeout(self.timeout)
    }

    /// Waits until every rank has called a barrier, up to `timeout`.
    ///
    /// # Errors
    /// As [`barrier`](Group::barrier); [`Error::Busy`] (nothing done) while
    /// another thread is in a barrier of this rank.
    pub fn barrier_timeout(&self, timeout: Duration) -> Result<()> {
        let _turn = self.enter("barrier")?;
        self.arrive_and_wait(
            self.layout.barrier(&self.region),
            self.world_size,
            "barrier",
            timeout,
        )
    }

    /// A barrier among ranks `0..n` only (a sub-group sync); ranks `n..` must
    /// not call it.
    ///
    /// # Errors
    /// [`Error::SubsetOutOfRange`] if `n` is 0 or beyond the world, or this
    /// rank is not below `n`; otherwise as [`barrier`](Group::barrier).
    pub fn barrier_subset(&self, n: u32) -> Result<()> {
        self.barrier_subset_timeout(n, self.timeout)
    }

    /// [`barrier_subset`](Group::barrier_subset) with its own timeout.
    ///
    /// # Errors
    /// As [`barrier_subset`](Group::barrier_subset).
    pub fn barrier_subset_timeout(&self, n: u32, timeout: Duration) -> Result<()> {
        let _turn = self.enter("barrier_subset")?;
        if n == 0 || n > self.world_size || self.rank >= n {
            return Err(Error::SubsetOutOfRange {
                group: self.name.clone(),
                rank: self.rank,
                n,
                world_size: self.world_size,
            });
        }
        self.arrive_and_wait(
            self.layout.subset(&self.region),
            n,
            "barrier_subset",
            timeout,
        )
    }

    /// A barrier that releases once `n` ranks have arrived, whichever they
    /// are (ThunderKittens' `sync(n)`): ranks not taking part must not call
    /// it meanwhile. It shares its counter with
    /// [`barrier_subset`](Group::barrier_subset): never run the two at once.
    ///
    /// # Errors
    /// [`Error::InvalidOptions`] if `n` is 0 or beyond the world; otherwise
    /// as [`barrier`](Group::barrier).
    pub fn barrier_arrivals_timeout(&self, n: u32, timeout: Duration) -> Result<()> {
        let _turn = self.enter("barrier_arrivals")?;
        if n == 0 || n > self.world_size {
            return Err(Error::InvalidOptions {
                group: self.name.clone(),
                reason: format!(
                    "a barrier of {n} arrivals in a group of {} ranks",
                    self.world_size
                ),
            });
        }
        self.arrive_and_wait(
            self.layout.subset(&self.region),
            n,
            "barrier_arrivals",
            timeout,
        )
    }

    /// Arrives at a barrier of `parties` ranks and waits for the others.
    ///
    /// The last arriver resets the count and then bumps the generation
    /// (release), which is what the others wait for (acquire): a rank that
    /// passes and arrives again always finds the count reset. Waiting polls
    /// the generation, then yields, then parks on it as a shared futex in
    /// slices, checking the peers' pidfds between slices.
    fn arrive_and_wait(
        &self,
        words: &BarrierWords,
        parties: u32,
        op: &'static str,
        timeout: Duration,
    ) -> Result<()> {
        self.check_poison()?;
        let wake = &words.wake;
        let generation = wake.generation.load(Ordering::Acquire);
        // The count lies in memory every rank maps: whatever a broken or
        // hostile rank left there, no arithmetic on it may overflow.
        let arrived = words.count.fetch_add(1, Ordering::AcqRel).wrapping_add(1);
        if arrived >= parties {
            words.count.store(0, Ordering::Relaxed);
            wake.generation
                .store(generation.wrapping_add(1), Ordering::SeqCst);
            let _ = wake_if_parked(&wake.generation, &wake.sleepers, i32::MAX as u32);
            return Ok(());
        }
        // With more ranks than cores, the others need our core to arrive: poll
        // briefly and yield it, since a futex wake-up per rank costs more than
        // the whole barrier then. Parked, check the peers every slice.
        let spin = if parties > self.cores {
            Spin::OVERSUBSCRIBED
        } else {
            Spin::BARRIER
        };
        let mut deadline = Deadline::after(Some(timeout));
        let waited = wait_while(
            &wake.generation,
            &wake.sleepers,
            generation,
            &mut deadline,
            spin,
            || {
                self.check_poison()?;
                match self.gone_peer()? {
                    // The barrier may have been passed while we looked: a
                    // peer that went through it and left (or died) since is
                    // no reason to fail it, nor to poison the group.
                    Some(gone) if wake.generation.load(Ordering::Acquire) == generation => {
                        Err(self.mark_gone(gone))
                    }
                    _ => Ok(()),
                }
            },
        );
        match waited {
            Ok(()) => Ok(()),
            Err(WaitError::Stopped(e)) => Err(e),
            Err(WaitError::Futex(e)) => Err(self.io("futex(FUTEX_WAIT)", e)),
            Err(WaitError::Interrupted(waited)) => {
                // As a timeout: our arrival stays counted, so the others
                // must not wait for a rank that is going down.
                self.poison(self.rank, Cause::Interrupted);
                Err(Error::Interrupted {
                    group: self.name.clone(),
                    rank: self.rank,
                    op,
                    waited,
                })
            }
            Err(WaitError::TimedOut(waited)) => {
                // Our arrival cannot be taken back: the barrier is broken for all.
                self.poison(self.rank, Cause::TimedOut);
                Err(Error::Timeout {
                    group: self.name.clone(),
                    rank: self.rank,
                    op,
                    waited,
                    arrived: words.count.load(Ordering::Relaxed),
                    expected: parties,
                    missing: Vec::new(),
                })
            }
        }
    }

    /// Fails if the group was poisoned, naming who and why.
    #[inline]
    pub(super) fn check_poison(&self) -> Result<()> {
        let header = vault::header(&self.region);
        let poison = header.poison.load(Ordering::Acquire);
        if poison == 0 {
            return Ok(());
        }
        let rank = poison - 1;
        // The poisoner stores the cause just after winning the poison word:
        // give it a moment before calling a missing cause unknown.
        let mut raw = header.poison_cause.load(Ordering::Acquire);
        for _ in 0..CAUSE_GRACE_YIELDS {
            if raw != 0 {
                break;
            }
            thread::yield_now();
            raw = header.poison_cause.load(Ordering::Acquire);
        }
        let cause = Cause::from_raw(raw);
        Err(match cause {
            Cause::Died if rank < self.world_size => {
                let pid = self
                    .layout
                    .rank(&self.region, rank)
                    .pid
                    .load(Ordering::Relaxed);
                Error::PeerDied {
                    group: self.name.clone(),
                    rank,
                    pid,
                }
            }
            Cause::Left => Error::PeerLeft {
                group: self.name.clone(),
                rank,
            },
            cause => Error::Poisoned {
                group: self.name.clone(),
                rank,
                cause: cause.describe(),
            },
        })
    }

    /// Checks every peer's pidfd (one `poll`) and departure flag; poisons the
    /// group and fails on the first that is gone.
    pub(super) fn check_peers(&self) -> Result<()> {
        match self.gone_peer()? {
            Some(gone) => Err(self.mark_gone(gone)),
            None => Ok(()),
        }
    }

    /// The first peer that has died or left, with its pid, if any; nothing
    /// is poisoned yet (see [`mark_gone`](Group::mark_gone)).
    fn gone_peer(&self) -> Result<Option<(u32, Cause, u32)>> {
        let pidfds: Vec<(u32, &Pidfd)> = self
            .peers
            .iter()
            .enumerate()
            .filter_map(|(r, p)| p.as_ref().map(|p| (r as u32, p)))
            .collect();
        // fdpass's one policy: a readable (or hung up) pidfd is a death.
        let all: Vec<&Pidfd> = pidfds.iter().map(|(_, p)| *p).collect();
        let exited = nodeipc_fdpass::first_exited(&all).map_err(|source| Error::FdPass {
            group: self.name.clone(),
            source,
        })?;
        if let Some(i) = exited {
            let (rank, pidfd) = pidfds[i];
            return Ok(Some((rank, Cause::Died, pidfd.pid())));
        }
        for (rank, pidfd) in &pidfds {
            let state = self
                .layout
                .rank(&self.region, *rank)
                .flags
                .load(Ordering::Acquire);
            if state & flags::LEFT != 0 {
                return Ok(Some((*rank, Cause::Left, pidfd.pid())));
            }
        }
        Ok(None)
    }

    /// Poisons the group for a peer [`gone_peer`](Group::gone_peer) found,
    /// and says what happened to it.
    fn mark_gone(&self, (rank, cause, pid): (u32, Cause, u32)) -> Error {
        self.poison(rank, cause);
        // The first cause sticks: a rank that timed out (or was interrupted)
        // poisons the group and then leaves, so a peer that sees it gone
        // may be seeing the consequence; report what broke the group.
        if let Err(first) = self.check_poison()
            && !matches!(first, Error::PeerDied { rank: r, .. } | Error::PeerLeft { rank: r, .. } if r == rank)
        {
            return first;
        }
        match cause {
            Cause::Left => Error::PeerLeft {
                group: self.name.clone(),
                rank,
            },
            _ => self.died(rank, pid),
        }
    }

    /// Marks the group unusable (the first cause sticks) and wakes every sleeper.
    pub(super) fn poison(&self, rank: u32, cause: Cause) {
        let header = vault::header(&self.region);
        if header
            .poison
            .compare_exchange(0, rank + 1, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            header.poison_cause.store(cause.to_raw(), Ordering::Release);
        }
        for words in [
            self.layout.barrier(&self.region),
            self.layout.subset(&self.region),
        ] {
            let _ = unpark(&words.wake.generation, i32::MAX as u32);
        }
    }

    pub(super) fn died(&self, rank: u32, pid: u32) -> Error {
        Error::PeerDied {
            group: self.name.clone(),
            rank,
            pid,
        }
    }

    pub(super) fn io(&self, op: &'static str, errno: Errno) -> Error {
        Error::Io {
            group: self.name.clone(),
            op,
            source: errno.into(),
        }
    }
}
