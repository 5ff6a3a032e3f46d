//! Waiting on several queues at once: a consumer of many queues (a
//! scheduler reading every worker) parks on all their tails with one
//! `futex_waitv`, in slices, checking each producer between slices.

use std::thread;
use std::time::Duration;

use crate::Message;
use nodeipc_shm::wait::{Deadline, PARK_ANY_MAX, SLICE, Spin, park_any};
use rustix::io::Errno;

use crate::role::PeerState;
use crate::sync::Ordering;
use crate::{Consumer, Error, Result};

mod sealed {
    pub trait Sealed {}
}

/// A queue [`wait_any`] can wait on: a [`Consumer`] or an
/// [`MpmcConsumer`](crate::MpmcConsumer) of any message type.
pub trait Waitable: sealed::Sealed {
    #[doc(hidden)]
    fn has_data(&mut self) -> Result<bool>;
    #[doc(hidden)]
    fn peer_gone(&mut self) -> bool;
    #[doc(hidden)]
    fn announce(&self, delta: i32) -> (bool, Option<(&crate::sync::AtomicU32, u32)>);
    #[doc(hidden)]
    fn queue_label(&self) -> &str;
}

impl<T: Message> sealed::Sealed for Consumer<T> {}
impl<T: Message> sealed::Sealed for crate::MpmcConsumer<T> {}

impl<T: Message> Waitable for Consumer<T> {
    fn has_data(&mut self) -> Result<bool> {
        Ok(self.ready()? > 0)
    }

    fn peer_gone(&mut self) -> bool {
        matches!(self.peer(), PeerState::Died(_) | PeerState::Left)
    }

    /// Announces (+1) or withdraws (-1) a sleeper; on +1, says whether the
    /// tail still holds the value seen and returns the word to park on.
    fn announce(&self, delta: i32) -> (bool, Option<(&crate::sync::AtomicU32, u32)>) {
        let (word, parked, seen) = self.park_word();
        if delta > 0 {
            parked.fetch_add(1, Ordering::SeqCst);
            crate::sync::fence(Ordering::SeqCst);
            let still = word.load(Ordering::SeqCst) == seen;
            (still, Some((word, seen)))
        } else {
            parked.fetch_sub(1, Ordering::SeqCst);
            (false, None)
        }
    }

    fn queue_label(&self) -> &str {
        self.label()
    }
}

impl<T: Message> Waitable for crate::MpmcConsumer<T> {
    fn has_data(&mut self) -> Result<bool> {
        Ok(crate::MpmcConsumer::has_data(self))
    }

    fn peer_gone(&mut self) -> bool {
        self.producers_gone()
    }

    /// As a [`Consumer`]'s, on the sequence word of the position found
    /// empty last.
    fn announce(&self, delta: i32) -> (bool, Option<(&crate::sync::AtomicU32, u32)>) {
        let (word, parked, seen) = self.park_word();
        if delta > 0 {
            parked.fetch_add(1, Ordering::SeqCst);
            crate::sync::fence(Ordering::SeqCst);
            let still = word.load(Ordering::SeqCst) == seen && !self.has_data();
            (still, Some((word, seen)))
        } else {
            parked.fetch_sub(1, Ordering::SeqCst);
            (false, None)
        }
    }

    fn queue_label(&self) -> &str {
        self.label()
    }
}

/// Waits up to `timeout` until one of `queues` needs attention: it has a
/// message, or its producer is gone (its next pop says which). Returns the
/// index of the first such queue, lowest first.
///
/// Polls all, yields, then parks on all their tails at once
/// (`futex_waitv`, Linux ≥ 5.16; on an older kernel it sleeps 1 ms slices),
/// checking every producer at least every 50 ms.
///
/// # Errors
/// [`Error::TimedOut`]; [`Error::InvalidArgument`] for no queue or more than
/// 128; [`Error::Corrupt`] from a queue's indices; [`Error::Futex`].
pub fn wait_any(queues: &mut [&mut dyn Waitable], timeout: Duration) -> Result<usize> {
    if queues.is_empty() || queues.len() > PARK_ANY_MAX {
        return Err(Error::InvalidArgument {
            queue: "wait_any".to_owned(),
            what: "number of queues",
            value: queues.len() as u64,
            limit: "must be 1 to 128 (futex_waitv's limit)",
        });
    }
    let ready = |queues: &mut [&mut dyn Waitable]| -> Result<Option<usize>> {
        for (i, q) in queues.iter_mut().enumerate() {
            if q.has_data()? {
                return Ok(Some(i));
            }
        }
        Ok(None)
    };
    let spin = Spin::DEFAULT;
    for _ in 0..spin.polls / 8 {
        if let Some(i) = ready(queues)? {
            return Ok(i);
        }
        std::hint::spin_loop();
    }
    let mut deadline = Deadline::after(Some(timeout));
    let start = deadline.start();
    while start.elapsed() < spin.yield_for {
        if let Some(i) = ready(queues)? {
            return Ok(i);
        }
        thread::yield_now();
    }
    loop {
        if let Some(i) = ready(queues)? {
            return Ok(i);
        }
        if let Some(i) = queues.iter_mut().position(|q| q.peer_gone()) {
            // A message published just before it went comes first.
            return Ok(ready(queues)?.unwrap_or(i));
        }
        let left = deadline.left().map_err(|waited| Error::TimedOut {
            queue: queues[0].queue_label().to_owned(),
            op: "wait_any",
            waited,
        })?;
        let slice = left.map_or(SLICE, |left| left.min(SLICE));
        let mut words = Vec::with_capacity(queues.len());
        let mut all_still = true;
        for q in queues.iter() {
            let (still, word) = q.announce(1);
            all_still &= still;
            words.extend(word);
        }
        let slept = if all_still {
            park_any(&words, Some(slice))
        } else {
            Ok(nodeipc_shm::wait::Parked::Woken)
        };
        for q in queues.iter() {
            q.announce(-1);
        }
        match slept {
            Ok(_) => {}
            Err(Errno::NOSYS) => thread::sleep(Duration::from_millis(1).min(slice)),
            Err(errno) => {
                return Err(Error::Futex {
                    queue: queues[0].queue_label().to_owned(),
                    errno,
                });
            }
        }
    }
}
