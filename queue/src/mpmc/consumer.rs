//! A consumer of an MPMC ring.

use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use nodeipc_shm::Region;
use nodeipc_shm::wait::{Deadline, Spin, coarse_now_ns, wait_while};

use crate::error::Role;
use crate::error::wait_ended;
use crate::mpmc::end::MpmcEnd;
use crate::mpmc::ring::Popped;
use crate::sync::AtomicU32;
use crate::{Error, Message, Result};

/// One of an MPMC ring's consumers (as many as the ring was made for):
/// pops copies of `T` out. Each message goes to one consumer, at most once:
/// a consumer that dies holding a message it claimed loses it (counted,
/// never given to another).
#[derive(Debug)]
pub struct MpmcConsumer<T> {
    end: MpmcEnd,
    /// The coarse-clock time of the last look at a position held up.
    stalled_look: u64,
    /// The position found empty last, and its slot's sequence then.
    empty: (u32, u32),
    /// An invalid message met in a batch after good ones: the next call
    /// returns it.
    pending: Option<Error>,
    _message: PhantomData<fn() -> T>,
}

/// What one claim gave.
enum Step {
    /// `n` messages copied out (skipped positions not counted).
    Got(usize),
    /// Nothing published at the head position.
    Empty,
}

impl<T: Message> MpmcConsumer<T> {
    /// Takes a consumer place of the ring in `region` (checked as
    /// [`MpmcProducer::join`](crate::MpmcProducer::join) checks): a vacant
    /// one, else one whose holder is dead (its claim dropped: a message it
    /// held is released as lost by the producer it holds up).
    ///
    /// # Errors
    /// As [`MpmcProducer::join`](crate::MpmcProducer::join).
    pub fn join(region: Arc<Region>, schema: u64) -> Result<Self> {
        Ok(Self::new(MpmcEnd::join::<T>(
            region,
            schema,
            Role::Consumer,
        )?))
    }

    /// Opens the named ring (waiting up to `timeout` for its creator) and joins it.
    ///
    /// # Errors
    /// As [`join`](MpmcConsumer::join), and those of `Region::open`.
    pub fn open(name: &str, schema: u64, timeout: Duration) -> Result<Self> {
        Ok(Self::new(MpmcEnd::open_named::<T>(
            name,
            schema,
            timeout,
            Role::Consumer,
        )?))
    }

    /// Joins the ring in a region received as a descriptor.
    ///
    /// # Errors
    /// As [`join`](MpmcConsumer::join).
    pub fn from_fd(fd: OwnedFd, schema: u64) -> Result<Self> {
        Ok(Self::new(MpmcEnd::from_fd::<T>(
            fd,
            schema,
            Role::Consumer,
        )?))
    }

    fn new(end: MpmcEnd) -> Self {
        MpmcConsumer {
            end,
            stalled_look: 0,
            empty: (0, 0),
            pending: None,
            _message: PhantomData,
        }
    }

    /// Claims up to `out.len()` positions and copies their messages out,
    /// into `out[..n]` for the `n` it reports.
    fn claim(&mut self, out: &mut [MaybeUninit<T>]) -> Result<Step> {
        let want = u32::try_from(out.len()).unwrap_or(u32::MAX);
        let ring = self.end.ring();
        match ring
            .claim_pop(self.end.me(), want)
            .map_err(|b| self.end.corrupt(b))?
        {
            Popped::Empty { at, seq } => {
                self.empty = (at, seq);
                Ok(Step::Empty)
            }
            Popped::Claimed { start, count } => {
                let mut got = 0;
                let mut invalid = None;
                for k in 0..count {
                    let p = start.wrapping_add(k);
                    match ring.read::<T>(p) {
                        Some(Ok(value)) => {
                            out[got].write(value);
                            got += 1;
                        }
                        Some(Err(bad)) => {
                            invalid.get_or_insert((p, bad));
                        }
                        None => {}
                    }
                }
                ring.release(self.end.me(), start, count);
                if let Some((p, bad)) = invalid {
                    let error = self.end.invalid(p, bad);
                    if got == 0 {
                        return Err(error);
                    }
                    self.pending = Some(error);
                }
                Ok(Step::Got(got))
            }
        }
    }

    /// The head position is not published: if its producer died holding
    /// it (or the slot still holds a message a dead consumer claimed),
    /// resolve that, once a clock tick at most; `true` when something was
    /// resolved (look again).
    fn stalled(&mut self) -> bool {
        let now = coarse_now_ns();
        if now == self.stalled_look {
            return false;
        }
        self.stalled_look = now;
        let (at, _) = self.empty;
        let previous = at.wrapping_sub(self.end.geo.capacity);
        let (p, c) = (
            self.end.geo.producers as usize,
            self.end.geo.consumers as usize,
        );
        let live_p: Vec<bool> = (0..p).map(|i| self.end.live(Role::Producer, i)).collect();
        let live_c: Vec<bool> = (0..c).map(|i| self.end.live(Role::Consumer, i)).collect();
        let ring = self.end.ring();
        ring.skip_dead_claim(at, |i| live_p[i]) || ring.release_dead_claim(previous, |i| live_c[i])
    }

    /// Pops a copy of the oldest message; `None` when none is published.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a message whose checked fields hold invalid
    /// values (taken off the ring: the next pop goes on);
    /// [`Error::Corrupt`].
    pub fn try_pop(&mut self) -> Result<Option<T>> {
        let mut one = [MaybeUninit::<T>::uninit()];
        Ok((self.pop_uninit(&mut one)? == 1).then(|| {
            // SAFETY: `pop_uninit` wrote the one slot it reports.
            unsafe { one[0].assume_init() }
        }))
    }

    /// Copies up to `out.len()` messages out (claiming their positions at
    /// once); returns how many. Positions skipped (their producer died) are
    /// passed over.
    ///
    /// # Errors
    /// As [`try_pop`](MpmcConsumer::try_pop); an invalid message met after
    /// good ones is returned by the next call.
    pub fn try_pop_into(&mut self, out: &mut [T]) -> Result<usize> {
        self.pop_uninit(as_uninit(out))
    }

    fn pop_uninit(&mut self, out: &mut [MaybeUninit<T>]) -> Result<usize> {
        if let Some(error) = self.pending.take() {
            return Err(error);
        }
        if out.is_empty() {
            return Ok(0);
        }
        // Skipped positions give nothing: claim again, a bounded number of
        // times (each claim moves the head).
        for _ in 0..=self.end.geo.capacity {
            match self.claim(out)? {
                Step::Got(0) => continue,
                Step::Got(n) => return Ok(n),
                Step::Empty => {
                    if !self.stalled() {
                        return Ok(0);
                    }
                }
            }
        }
        Ok(0)
    }

    /// Pops a copy of the oldest message, waiting up to `timeout`: polls,
    /// yields, then parks on the head position's sequence word. Not fair:
    /// a consumer that polls can take every message before this one, woken,
    /// runs (see the README's "Many producers and consumers").
    ///
    /// # Errors
    /// [`Error::TimedOut`]; [`Error::PeerDied`] or [`Error::PeerLeft`] only
    /// when no producer is alive and every claimed position has been taken
    /// (checked at least every 50 ms while waiting); [`Error::Invalid`];
    /// [`Error::Corrupt`]; [`Error::Futex`].
    pub fn pop_timeout(&mut self, timeout: Duration) -> Result<T> {
        let mut one = [MaybeUninit::<T>::uninit()];
        self.pop_uninit_timeout(&mut one, timeout)?;
        // SAFETY: `pop_uninit_timeout` returns Ok only with at least one
        // slot written (it waits for one).
        Ok(unsafe { one[0].assume_init() })
    }

    /// As [`try_pop_into`](MpmcConsumer::try_pop_into), waiting up to
    /// `timeout` for at least one message.
    ///
    /// # Errors
    /// As [`pop_timeout`](MpmcConsumer::pop_timeout).
    pub fn pop_into_timeout(&mut self, out: &mut [T], timeout: Duration) -> Result<usize> {
        self.pop_uninit_timeout(as_uninit(out), timeout)
    }

    fn pop_uninit_timeout(
        &mut self,
        out: &mut [MaybeUninit<T>],
        timeout: Duration,
    ) -> Result<usize> {
        let mut deadline = Deadline::after(Some(timeout));
        loop {
            let n = self.pop_uninit(out)?;
            if n > 0 || out.is_empty() {
                return Ok(n);
            }
            let (at, seen) = self.empty;
            let spot = self.end.park_spot(at, Role::Consumer);
            let waited = wait_while(
                spot.word(),
                spot.parked(),
                seen,
                &mut deadline,
                Spin::DEFAULT,
                || {
                    if self.stalled() {
                        return Err(None);
                    }
                    // Gone only once every claimed position was taken.
                    if self.end.ring().drained()
                        && let Some(gone) = self.end.others_gone()
                    {
                        return Err(Some(gone));
                    }
                    Ok(())
                },
            );
            if let Some(Some(gone)) = wait_ended(&self.end.label, "pop", waited)? {
                // A message published just before the last went first.
                let n = self.pop_uninit(out)?;
                return if n > 0 { Ok(n) } else { Err(gone) };
            }
        }
    }

    /// Whether the head position holds something (a message or a skip).
    pub fn has_data(&self) -> bool {
        self.pending.is_some() || self.end.ring().has_data()
    }

    /// Whether every producer is gone and every claimed position taken:
    /// the next pop's wait would say `PeerDied` or `PeerLeft`.
    pub fn producers_gone(&mut self) -> bool {
        self.end.ring().drained() && self.end.others_gone().is_some()
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

    /// Our place's index among the ring's consumers.
    pub fn place(&self) -> usize {
        self.end.place
    }

    /// The region, to hand over as a descriptor.
    pub fn region(&self) -> &Arc<Region> {
        self.end.region()
    }

    pub(crate) fn label(&self) -> &str {
        &self.end.label
    }

    /// The word to park on (the head position's sequence word), its parked
    /// count, and the value it holds now.
    pub(crate) fn park_word(&self) -> (&AtomicU32, &AtomicU32, u32) {
        let ring = self.end.ring();
        let at = ring.header.head.load(crate::sync::Ordering::Acquire);
        let word = ring.seq(at);
        (
            word,
            &ring.header.data_parked,
            word.load(crate::sync::Ordering::Acquire),
        )
    }
}

/// `out` as slots to write `T`s into: the same layout, and only whole `T`s
/// are ever written, so every element stays a valid `T`.
fn as_uninit<T>(out: &mut [T]) -> &mut [MaybeUninit<T>] {
    // SAFETY: `MaybeUninit<T>` has `T`'s layout; writers of the result
    // write only valid `T`s, so `out` holds valid values throughout.
    unsafe { &mut *(std::ptr::from_mut(out) as *mut [MaybeUninit<T>]) }
}
