//! The pushing end.

use std::marker::PhantomData;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use crate::Message;
use crate::error::wait_ended;
use nodeipc_shm::Region;
use nodeipc_shm::wait::{Deadline, SLICE, Spin, coarse_now_ns, wait_while};

use crate::Result;
use crate::end::End;
use crate::error::Role;
use crate::ring::{ProducerState, Ring};
use crate::role::PeerState;
use crate::sync::Ordering;

/// The one producer of a queue: pushes copies of `T` in.
///
/// # Examples
/// ```
/// let queue = nodeipc_queue::Queue::<u64>::anonymous(8, 1)?;
/// let mut tx = queue.producer()?;
/// assert!(tx.try_push(&7)?);
/// assert_eq!(queue.consumer()?.try_pop()?, Some(7));
/// # Ok::<(), nodeipc_queue::Error>(())
/// ```
#[derive(Debug)]
pub struct Producer<T> {
    end: End,
    state: ProducerState,
    /// When the consumer's liveness is next due for a look (the coarse
    /// monotonic clock, ns): at least every [`SLICE`] of pushing.
    next_look: u64,
    /// The coarse-clock time of the last look at a consumer that left the
    /// ring full (a spinning pusher looks once a tick).
    stalled_look: u64,
    _message: PhantomData<fn(T)>,
}

impl<T: Message> Producer<T> {
    /// Takes the producer role of the queue in `region` (checked: magic,
    /// version, element size and alignment, capacity against the length,
    /// `schema`; a memfd must be sealed against shrinking). A role held by a
    /// dead process is taken over, the contents intact.
    ///
    /// # Errors
    /// [`Error::BadHeader`], [`Error::Mismatch`], [`Error::NotSealed`],
    /// [`Error::RoleTaken`] naming the live holder's pid, [`Error::Corrupt`].
    pub fn join(region: Arc<Region>, schema: u64) -> Result<Self> {
        Self::new(End::join::<T>(region, schema, Role::Producer)?)
    }

    /// Opens the named queue (waiting up to `timeout` for its creator) and joins it.
    ///
    /// # Errors
    /// As [`join`](Producer::join), and those of `Region::open`.
    pub fn open(name: &str, schema: u64, timeout: Duration) -> Result<Self> {
        Self::new(End::open_named::<T>(name, schema, timeout, Role::Producer)?)
    }

    /// Joins the queue in a region received as a descriptor.
    ///
    /// # Errors
    /// As [`join`](Producer::join).
    pub fn from_fd(fd: OwnedFd, schema: u64) -> Result<Self> {
        Self::new(End::from_fd::<T>(fd, schema, Role::Producer)?)
    }

    fn new(end: End) -> Result<Self> {
        let header = end.header();
        // Our index: the shared tail (a restarted producer resumes there),
        // checked against the head once.
        let tail = header.tail.load(Ordering::Acquire);
        let head = header.head.load(Ordering::Acquire);
        if tail.wrapping_sub(head) > end.geo.capacity {
            return Err(end.corrupt(crate::ring::BadIndex(format!(
                "tail {tail} is {} past head {head} in a ring of {}",
                tail.wrapping_sub(head),
                end.geo.capacity
            ))));
        }
        Ok(Producer {
            end,
            state: ProducerState {
                tail,
                head_seen: head,
            },
            next_look: 0,
            stalled_look: 0,
            _message: PhantomData,
        })
    }

    /// Looks at the consumer at least every [`SLICE`] of pushing: one
    /// coarse clock read a push (a few ns), a `poll` of the consumer's
    /// pidfd when it is due, never per push.
    #[inline]
    fn look_at_consumer(&mut self) -> Result<u64> {
        let now = coarse_now_ns();
        if now >= self.next_look {
            self.consumer_gone(now)?;
        }
        Ok(now)
    }

    /// After a push reloaded the consumer's head: a head that moved is the
    /// consumer's own proof of life; one that did not (the ring is full
    /// and stays full) has the consumer looked at, once a clock tick at
    /// most while a caller spins on a full ring.
    #[inline]
    fn reloaded(&mut self, head_before: u32, now: u64) -> Result<()> {
        if self.state.head_seen != head_before {
            self.next_look = now.saturating_add(SLICE.as_nanos() as u64);
        } else if now != self.stalled_look {
            self.stalled_look = now;
            self.consumer_gone(now)?;
        }
        Ok(())
    }

    /// How many more than the cached head shows free: the push reloads.
    #[inline]
    fn will_reload(&self, want: u32) -> bool {
        self.end.geo.capacity - self.state.tail.wrapping_sub(self.state.head_seen) < want.max(1)
    }

    #[cold]
    fn consumer_gone(&mut self, now: u64) -> Result<()> {
        match self.end.peer() {
            // Gone stays gone until a consumer joins: the next push looks
            // again (a gone consumer is an error, not the fast path).
            PeerState::Died(pid) => Err(self.end.peer_gone(Some(pid))),
            PeerState::Left => Err(self.end.peer_gone(None)),
            PeerState::NotJoined | PeerState::Alive(_) => {
                self.next_look = now.saturating_add(SLICE.as_nanos() as u64);
                Ok(())
            }
        }
    }

    /// Pushes a copy of `value`; `false` when the ring is full.
    ///
    /// # Errors
    /// [`Error::PeerDied`] (or [`Error::PeerLeft`]) when the consumer is
    /// gone, seen when the push reloads the consumer's head and at least
    /// every 50 ms of pushing: a push to a dead consumer does not succeed
    /// for as long as there is room. [`Error::Corrupt`] when the consumer's
    /// head is impossible.
    #[inline(always)]
    pub fn try_push(&mut self, value: &T) -> Result<bool> {
        let now = self.look_at_consumer()?;
        let (reload, head_before) = (self.will_reload(1), self.state.head_seen);
        let ring = self.end.ring();
        let room = ring
            .room(&mut self.state, 1)
            .map_err(|b| self.end.corrupt(b))?;
        if reload {
            self.reloaded(head_before, now)?;
        }
        if room == 0 {
            return Ok(false);
        }
        let ring = self.end.ring();
        ring.write_slot(self.state.tail, value);
        ring.publish(&mut self.state, 1);
        Ok(true)
    }

    /// Pushes copies of the first values of `values` that fit, publishing
    /// them at once; returns how many.
    ///
    /// # Errors
    /// As [`try_push`](Producer::try_push).
    pub fn try_push_slice(&mut self, values: &[T]) -> Result<usize> {
        let want = u32::try_from(values.len()).unwrap_or(u32::MAX);
        let now = self.look_at_consumer()?;
        let (reload, head_before) = (self.will_reload(want), self.state.head_seen);
        let ring = self.end.ring();
        let room = ring
            .room(&mut self.state, want)
            .map_err(|b| self.end.corrupt(b))? as usize;
        if reload {
            self.reloaded(head_before, now)?;
        }
        let ring = self.end.ring();
        let n = room.min(values.len());
        for (i, value) in values[..n].iter().enumerate() {
            ring.write_slot(self.state.tail.wrapping_add(i as u32), value);
        }
        if n > 0 {
            ring.publish(&mut self.state, n as u32);
        }
        Ok(n)
    }

    /// Reserves up to `n` slots to fill through [`Batch::push`] and publish
    /// once with [`Batch::publish`]; `None` when the ring is full.
    ///
    /// # Errors
    /// As [`try_push`](Producer::try_push).
    pub fn reserve(&mut self, n: usize) -> Result<Option<Batch<'_, T>>> {
        let want = u32::try_from(n).unwrap_or(u32::MAX);
        let now = self.look_at_consumer()?;
        let (reload, head_before) = (self.will_reload(want), self.state.head_seen);
        let room = {
            let ring = self.end.ring();
            ring.room(&mut self.state, want)
                .map_err(|b| self.end.corrupt(b))?
        };
        if reload {
            self.reloaded(head_before, now)?;
        }
        let Producer { end, state, .. } = self;
        let ring = end.ring();
        let reserved = room.min(want);
        if reserved == 0 {
            return Ok(None);
        }
        Ok(Some(Batch {
            ring,
            state,
            reserved,
            filled: 0,
            _message: PhantomData,
        }))
    }

    /// Pushes a copy of `value`, waiting up to `timeout` for room: polls,
    /// yields, then parks on the consumer's head.
    ///
    /// # Errors
    /// [`Error::TimedOut`]; [`Error::PeerDied`] or [`Error::PeerLeft`] when
    /// the consumer is gone (checked at least every 50 ms while waiting);
    /// [`Error::Corrupt`]; [`Error::Futex`].
    pub fn push_timeout(&mut self, value: &T, timeout: Duration) -> Result<()> {
        let mut deadline = Deadline::after(Some(timeout));
        loop {
            if self.try_push(value)? {
                return Ok(());
            }
            let seen = self.state.head_seen;
            let (header, watch) = self.end.split();
            let mut check = || watch.state(&header.roles.consumer);
            let waited = wait_while(
                &header.head,
                &header.head_parked,
                seen,
                &mut deadline,
                Spin::DEFAULT,
                || match check() {
                    PeerState::Died(pid) => Err(Some(pid)),
                    PeerState::Left => Err(None),
                    _ => Ok(()),
                },
            );
            if let Some(who) = wait_ended(&self.end.label, "push", waited)? {
                // Room made before it went still counts.
                if self.try_push(value)? {
                    return Ok(());
                }
                return Err(self.end.peer_gone(who));
            }
        }
    }

    /// Whether the consumer is alive (`true` too before anyone consumes).
    pub fn peer_alive(&mut self) -> bool {
        matches!(self.end.peer(), PeerState::Alive(_) | PeerState::NotJoined)
    }

    /// What became of the consumer.
    pub fn peer(&mut self) -> PeerState {
        self.end.peer()
    }

    /// The consumer's pid (0: none).
    pub fn peer_pid(&self) -> u32 {
        self.end.peer_pid()
    }

    /// Slots in the ring.
    pub fn capacity(&self) -> u32 {
        self.end.geo.capacity
    }

    /// The region, to hand over as a descriptor.
    pub fn region(&self) -> &Arc<Region> {
        self.end.region()
    }
}

/// Slots reserved by [`Producer::reserve`]: filled in order, published at
/// once. Dropping it unpublished publishes nothing.
#[derive(Debug)]
pub struct Batch<'p, T: Message> {
    ring: Ring<'p>,
    state: &'p mut ProducerState,
    reserved: u32,
    filled: u32,
    _message: PhantomData<fn(T)>,
}

impl<T: Message> Batch<'_, T> {
    /// Copies `value` into the next reserved slot; `false` when all are filled.
    #[inline]
    pub fn push(&mut self, value: &T) -> bool {
        if self.filled == self.reserved {
            return false;
        }
        self.ring
            .write_slot(self.state.tail.wrapping_add(self.filled), value);
        self.filled += 1;
        true
    }

    /// Slots reserved.
    pub fn reserved(&self) -> usize {
        self.reserved as usize
    }

    /// Slots filled so far.
    pub fn len(&self) -> usize {
        self.filled as usize
    }

    /// Whether none is filled yet.
    pub fn is_empty(&self) -> bool {
        self.filled == 0
    }

    /// Publishes the filled slots (one release store, one wake-up check);
    /// returns how many.
    pub fn publish(self) -> usize {
        let n = self.filled;
        if n > 0 {
            self.ring.publish(self.state, n);
        }
        n as usize
    }
}
