//! The popping end.

use std::marker::PhantomData;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use crate::Message;
use crate::error::wait_ended;
use nodeipc_shm::Region;
use nodeipc_shm::wait::{Deadline, Spin, wait_while};

use crate::Result;
use crate::end::End;
use crate::error::Role;
use crate::ring::ConsumerState;
use crate::role::PeerState;
use crate::sync::{AtomicU32, Ordering};

/// How often a timed pop polls with the pop itself before it waits: the
/// wait's own polls of the tail, then a pop, took 60–100 ns longer to hand
/// a message over than polling with the pop (versus-shaq `spsc-rt-block`,
/// BENCHMARKS.md), so the polls are made here and the wait starts at its
/// yields.
const POLLS: u32 = Spin::DEFAULT.polls;

/// The wait after [`POLLS`]: no polls of its own.
const AFTER_POLLS: Spin = Spin {
    polls: 0,
    ..Spin::DEFAULT
};

/// The one consumer of a queue: pops copies of `T` out.
#[derive(Debug)]
pub struct Consumer<T> {
    end: End,
    state: ConsumerState,
    _message: PhantomData<fn() -> T>,
}

impl<T: Message> Consumer<T> {
    /// Takes the consumer role of the queue in `region`; checks as
    /// [`Producer::join`](crate::Producer::join). A restarted consumer
    /// resumes at the shared head: nothing published is lost or re-read.
    ///
    /// # Errors
    /// As [`Producer::join`](crate::Producer::join).
    pub fn join(region: Arc<Region>, schema: u64) -> Result<Self> {
        Self::new(End::join::<T>(region, schema, Role::Consumer)?)
    }

    /// Opens the named queue (waiting up to `timeout` for its creator) and joins it.
    ///
    /// # Errors
    /// As [`join`](Consumer::join), and those of `Region::open`.
    pub fn open(name: &str, schema: u64, timeout: Duration) -> Result<Self> {
        Self::new(End::open_named::<T>(name, schema, timeout, Role::Consumer)?)
    }

    /// Joins the queue in a region received as a descriptor.
    ///
    /// # Errors
    /// As [`join`](Consumer::join).
    pub fn from_fd(fd: OwnedFd, schema: u64) -> Result<Self> {
        Self::new(End::from_fd::<T>(fd, schema, Role::Consumer)?)
    }

    fn new(end: End) -> Result<Self> {
        let head = end.header().head.load(Ordering::Acquire);
        let mut state = ConsumerState {
            head,
            tail_seen: head,
        };
        // Refuse a region whose indices are already impossible.
        end.ring()
            .ready(&mut state, 1)
            .map_err(|b| end.corrupt(b))?;
        Ok(Consumer {
            end,
            state,
            _message: PhantomData,
        })
    }

    /// Pops a copy of the oldest message; `None` when the ring is empty.
    ///
    /// # Errors
    /// [`Error::Corrupt`] when the producer's tail is impossible;
    /// [`Error::Invalid`] for a message whose checked fields hold invalid
    /// values (taken off the queue: the next pop goes on).
    #[inline(always)]
    pub fn try_pop(&mut self) -> Result<Option<T>> {
        let ring = self.end.ring();
        if ring
            .ready(&mut self.state, 1)
            .map_err(|b| self.end.corrupt(b))?
            == 0
        {
            return Ok(None);
        }
        let index = self.state.head;
        let value = ring.read_slot(index);
        ring.release(&mut self.state, 1);
        match value {
            Ok(value) => Ok(Some(value)),
            Err(invalid) => Err(self.end.invalid(index, invalid)),
        }
    }

    /// Copies up to `out.len()` messages out, releasing their slots at once;
    /// returns how many. An invalid message ends the batch before it; met
    /// first, it is taken off the queue and returned as the error.
    ///
    /// # Errors
    /// [`Error::Corrupt`]; [`Error::Invalid`].
    pub fn try_pop_into(&mut self, out: &mut [T]) -> Result<usize> {
        let ring = self.end.ring();
        let want = u32::try_from(out.len()).unwrap_or(u32::MAX);
        let ready = ring
            .ready(&mut self.state, want)
            .map_err(|b| self.end.corrupt(b))? as usize;
        let n = ready.min(out.len());
        if ring.read_run_plain(self.state.head, &mut out[..n]) {
            if n > 0 {
                ring.release(&mut self.state, n as u32);
            }
            return Ok(n);
        }
        for (i, slot) in out[..n].iter_mut().enumerate() {
            let index = self.state.head.wrapping_add(i as u32);
            match ring.read_slot_into(index, slot) {
                Ok(()) => {}
                Err(invalid) if i == 0 => {
                    ring.release(&mut self.state, 1);
                    return Err(self.end.invalid(index, invalid));
                }
                // The good ones first; the next call meets it.
                Err(_) => {
                    ring.release(&mut self.state, i as u32);
                    return Ok(i);
                }
            }
        }
        if n > 0 {
            ring.release(&mut self.state, n as u32);
        }
        Ok(n)
    }

    /// Pops a copy of the oldest message, waiting up to `timeout`: polls,
    /// yields, then parks on the producer's tail.
    ///
    /// # Errors
    /// [`Error::TimedOut`]; [`Error::PeerDied`] or [`Error::PeerLeft`] once
    /// everything the producer published has been popped (checked at least
    /// every 50 ms while waiting); [`Error::Corrupt`]; [`Error::Futex`].
    pub fn pop_timeout(&mut self, timeout: Duration) -> Result<T> {
        for _ in 0..POLLS {
            if let Some(value) = self.try_pop()? {
                return Ok(value);
            }
            std::hint::spin_loop();
        }
        let mut deadline = Deadline::after(Some(timeout));
        loop {
            if let Some(value) = self.try_pop()? {
                return Ok(value);
            }
            self.wait_for_data(&mut deadline)?;
        }
    }

    /// As [`try_pop_into`](Consumer::try_pop_into), waiting up to `timeout`
    /// for at least one message.
    ///
    /// # Errors
    /// As [`pop_timeout`](Consumer::pop_timeout).
    pub fn pop_into_timeout(&mut self, out: &mut [T], timeout: Duration) -> Result<usize> {
        // `pop_timeout`'s two loops, written out again on purpose: folded
        // into one helper taking the pop as a closure (always inlined),
        // `pop_timeout`'s blocking round trip measured 150 ns slower
        // (versus-shaq spsc-rt-block, 600 -> 760 ns, four alternations).
        for _ in 0..POLLS {
            let n = self.try_pop_into(out)?;
            if n > 0 || out.is_empty() {
                return Ok(n);
            }
            std::hint::spin_loop();
        }
        let mut deadline = Deadline::after(Some(timeout));
        loop {
            let n = self.try_pop_into(out)?;
            if n > 0 || out.is_empty() {
                return Ok(n);
            }
            self.wait_for_data(&mut deadline)?;
        }
    }

    /// Waits while the tail is where we last saw it; `Ok` when it moved, or
    /// when the producer went still with messages left to pop.
    fn wait_for_data(&mut self, deadline: &mut Deadline) -> Result<()> {
        let seen = self.state.tail_seen;
        let (header, watch) = self.end.split();
        let waited = wait_while(
            &header.tail,
            &header.tail_parked,
            seen,
            deadline,
            AFTER_POLLS,
            || match watch.state(&header.roles.producer) {
                PeerState::Died(pid) => Err(Some(pid)),
                PeerState::Left => Err(None),
                _ => Ok(()),
            },
        );
        let Some(who) = wait_ended(&self.end.label, "pop", waited)? else {
            return Ok(());
        };
        // What it published before it went is returned first.
        if self
            .end
            .ring()
            .ready(&mut self.state, 1)
            .map_err(|b| self.end.corrupt(b))?
            > 0
        {
            return Ok(());
        }
        Err(self.end.peer_gone(who))
    }

    /// Messages ready to pop (reloads the tail only when none is known).
    ///
    /// # Errors
    /// [`Error::Corrupt`].
    pub fn ready(&mut self) -> Result<usize> {
        let ring = self.end.ring();
        Ok(ring
            .ready(&mut self.state, u32::MAX)
            .map_err(|b| self.end.corrupt(b))? as usize)
    }

    /// Whether the producer is alive (`true` too before anyone produces).
    pub fn peer_alive(&mut self) -> bool {
        matches!(self.end.peer(), PeerState::Alive(_) | PeerState::NotJoined)
    }

    /// What became of the producer.
    pub fn peer(&mut self) -> PeerState {
        self.end.peer()
    }

    /// The producer's pid (0: none).
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

    pub(crate) fn label(&self) -> &str {
        &self.end.label
    }

    /// The word to park on and the value it holds while empty.
    pub(crate) fn park_word(&self) -> (&AtomicU32, &AtomicU32, u32) {
        let header = self.end.header();
        (&header.tail, &header.tail_parked, self.state.tail_seen)
    }
}
