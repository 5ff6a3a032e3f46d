//! A producer of an MPMC ring.

use std::marker::PhantomData;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use nodeipc_shm::Region;
use nodeipc_shm::wait::{Deadline, SLICE, Spin, coarse_now_ns, wait_while};

use crate::error::Role;
use crate::error::wait_ended;
use crate::mpmc::end::MpmcEnd;
use crate::mpmc::ring::Pushed;
use crate::{Message, Result};

/// One of an MPMC ring's producers (as many as the ring was made for):
/// pushes copies of `T` in.
///
/// # Examples
/// ```
/// let queue = nodeipc_queue::MpmcQueue::<u64>::anonymous(8, 2, 2, 1)?;
/// let (mut a, mut b) = (queue.producer()?, queue.producer()?);
/// let mut rx = queue.consumer()?;
/// assert!(a.try_push(&1)? && b.try_push(&2)?);
/// assert_eq!((rx.try_pop()?, rx.try_pop()?), (Some(1), Some(2)));
/// # Ok::<(), nodeipc_queue::Error>(())
/// ```
#[derive(Debug)]
pub struct MpmcProducer<T> {
    end: MpmcEnd,
    /// When the consumers' liveness is next due for a look (coarse clock).
    next_look: u64,
    /// The coarse-clock time of the last look while the ring stayed full.
    stalled_look: u64,
    /// The position found full last, and its slot's sequence then: what a
    /// wait parks on (the very value that said full).
    full: (u32, u32),
    _message: PhantomData<fn(T)>,
}

impl<T: Message> MpmcProducer<T> {
    /// Takes a producer place of the ring in `region` (checked as
    /// [`Producer::join`](crate::Producer::join) checks, and the number of
    /// places): a vacant one, else one whose holder is dead (its claim
    /// dropped: the positions it held are skipped by the consumers they
    /// hold up).
    ///
    /// # Errors
    /// [`Error::BadHeader`], [`Error::Mismatch`], [`Error::NotSealed`],
    /// [`Error::NoPlace`] naming the live holders.
    pub fn join(region: Arc<Region>, schema: u64) -> Result<Self> {
        Ok(Self::new(MpmcEnd::join::<T>(
            region,
            schema,
            Role::Producer,
        )?))
    }

    /// Opens the named ring (waiting up to `timeout` for its creator) and joins it.
    ///
    /// # Errors
    /// As [`join`](MpmcProducer::join), and those of `Region::open`.
    pub fn open(name: &str, schema: u64, timeout: Duration) -> Result<Self> {
        Ok(Self::new(MpmcEnd::open_named::<T>(
            name,
            schema,
            timeout,
            Role::Producer,
        )?))
    }

    /// Joins the ring in a region received as a descriptor.
    ///
    /// # Errors
    /// As [`join`](MpmcProducer::join).
    pub fn from_fd(fd: OwnedFd, schema: u64) -> Result<Self> {
        Ok(Self::new(MpmcEnd::from_fd::<T>(
            fd,
            schema,
            Role::Producer,
        )?))
    }

    fn new(end: MpmcEnd) -> Self {
        MpmcProducer {
            end,
            next_look: 0,
            stalled_look: 0,
            full: (0, 0),
            _message: PhantomData,
        }
    }

    /// Looks at the consumers at least every [`SLICE`] of pushing: one
    /// coarse clock read a push; a `poll` per consumer when due.
    #[inline]
    fn look_at_consumers(&mut self) -> Result<u64> {
        let now = coarse_now_ns();
        if now >= self.next_look {
            self.next_look = now.saturating_add(SLICE.as_nanos() as u64);
            if let Some(gone) = self.end.others_gone() {
                return Err(gone);
            }
        }
        Ok(now)
    }

    /// The ring is full at position `at`: once a clock tick at most,
    /// resolve a dead process's claim on the slot (a consumer that died
    /// holding the previous lap's message, a producer that died before
    /// publishing it) and look at the consumers; `true` when a claim was
    /// resolved (try again).
    fn stalled(&mut self, at: u32, now: u64) -> Result<bool> {
        if now == self.stalled_look {
            return Ok(false);
        }
        self.stalled_look = now;
        let previous = at.wrapping_sub(self.end.geo.capacity);
        let (p, c) = (
            self.end.geo.producers as usize,
            self.end.geo.consumers as usize,
        );
        let live_c: Vec<bool> = (0..c).map(|i| self.end.live(Role::Consumer, i)).collect();
        let live_p: Vec<bool> = (0..p).map(|i| self.end.live(Role::Producer, i)).collect();
        let ring = self.end.ring();
        if ring.release_dead_claim(previous, |i| live_c[i])
            || ring.skip_dead_claim(previous, |i| live_p[i])
        {
            return Ok(true);
        }
        match self.end.others_gone() {
            Some(gone) => Err(gone),
            None => Ok(false),
        }
    }

    /// Pushes a copy of `value`; `false` when the ring is full.
    ///
    /// # Errors
    /// [`Error::PeerDied`] (or [`Error::PeerLeft`]) when every consumer is
    /// gone, seen at least every 50 ms of pushing and whenever the ring is
    /// full; [`Error::Corrupt`] when the ring's words are impossible.
    #[inline]
    pub fn try_push(&mut self, value: &T) -> Result<bool> {
        Ok(self.try_push_slice(std::slice::from_ref(value))? == 1)
    }

    /// Pushes copies of the first values of `values` that fit, claiming
    /// their positions at once; returns how many.
    ///
    /// # Errors
    /// As [`try_push`](MpmcProducer::try_push).
    pub fn try_push_slice(&mut self, values: &[T]) -> Result<usize> {
        if values.is_empty() {
            return Ok(0);
        }
        let now = self.look_at_consumers()?;
        let want = u32::try_from(values.len()).unwrap_or(u32::MAX);
        for _ in 0..2 {
            let ring = self.end.ring();
            match ring
                .claim_push(self.end.me(), want)
                .map_err(|b| self.end.corrupt(b))?
            {
                Pushed::Claimed { start, count } => {
                    for (k, value) in values[..count as usize].iter().enumerate() {
                        ring.write(start.wrapping_add(k as u32), value);
                    }
                    ring.publish(self.end.me(), start, count);
                    return Ok(count as usize);
                }
                Pushed::Full { at, seq } => {
                    self.full = (at, seq);
                    if !self.stalled(at, now)? {
                        return Ok(0);
                    }
                }
            }
        }
        Ok(0)
    }

    /// Pushes a copy of `value`, waiting up to `timeout` for room: polls,
    /// yields, then parks on the full slot's sequence word.
    ///
    /// # Errors
    /// [`Error::TimedOut`]; [`Error::PeerDied`] or [`Error::PeerLeft`] when
    /// every consumer is gone (checked at least every 50 ms while waiting);
    /// [`Error::Corrupt`]; [`Error::Futex`].
    pub fn push_timeout(&mut self, value: &T, timeout: Duration) -> Result<()> {
        let mut deadline = Deadline::after(Some(timeout));
        loop {
            if self.try_push(value)? {
                return Ok(());
            }
            // Parked on the value that said full: released meanwhile, the
            // wait returns at once (never asleep on a claimable slot).
            let (at, seen) = self.full;
            let spot = self.end.park_spot(at, Role::Producer);
            let waited = wait_while(
                spot.word(),
                spot.parked(),
                seen,
                &mut deadline,
                Spin::DEFAULT,
                || match self.stalled(at, coarse_now_ns()) {
                    Ok(true) => Err(None),
                    Ok(false) => Ok(()),
                    Err(gone) => Err(Some(gone)),
                },
            );
            if let Some(Some(gone)) = wait_ended(&self.end.label, "push", waited)? {
                return Err(gone);
            }
        }
    }

    /// Positions skipped (claimed by producers that died before
    /// publishing) and messages lost (claimed by consumers that died
    /// before reading them through), so far, ring-wide.
    pub fn skipped_and_lost(&self) -> (u64, u64) {
        self.end.counters()
    }

    /// Slots in the ring.
    pub fn capacity(&self) -> u32 {
        self.end.geo.capacity
    }

    /// Our place's index among the ring's producers.
    pub fn place(&self) -> usize {
        self.end.place
    }

    /// The region, to hand over as a descriptor.
    pub fn region(&self) -> &Arc<Region> {
        self.end.region()
    }
}
