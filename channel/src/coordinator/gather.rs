//! Taking the workers' responses out of their slots: every worker's
//! (`recv_all`, `recv_init`), the first to arrive (`recv_first`), the ones
//! `recv_first` left behind (`drain`).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use nodeipc_proto::execute::ExecuteResponse;

use super::liveness::Waiter;
use super::{Coordinator, Shared};
use crate::aggregate::{aggregate, validate};
use crate::sem_kind::{Direction, Role};
use crate::wait::Poll;
use crate::{Error, Result};

/// Which response slots a gather reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Slot {
    Response,
    Init,
}

impl Slot {
    fn name(self) -> &'static str {
        match self {
            Slot::Response => "response slot",
            Slot::Init => "init slot",
        }
    }
}

impl Coordinator {
    /// Every worker's response to the oldest request not yet gathered, in
    /// rank order.
    ///
    /// # Errors
    /// The first of: [`Error::WorkerFailed`] (non-zero status),
    /// [`Error::UnknownMessageType`], [`Error::Corrupt`], [`Error::Decode`]
    /// — every worker's slot is still consumed, so the channel stays in step;
    /// or [`Error::WorkerDied`], [`Error::Timeout`],
    /// [`Error::NothingOutstanding`].
    pub fn recv_all(&mut self) -> Result<Vec<ExecuteResponse>> {
        self.gather(Slot::Response)?.into_iter().collect()
    }

    /// One response for the oldest request not yet gathered: the first whose
    /// pull-KV results carry a code other than success, else rank 0's.
    ///
    /// # Errors
    /// As [`recv_all`](Coordinator::recv_all).
    pub fn recv_all_aggregated(&mut self) -> Result<ExecuteResponse> {
        aggregate(self.recv_all()?)
    }

    /// Every worker's init response (from its fixed-size init slot), in rank order.
    ///
    /// # Errors
    /// As [`recv_all`](Coordinator::recv_all).
    pub fn recv_init(&mut self) -> Result<Vec<ExecuteResponse>> {
        self.gather(Slot::Init)?.into_iter().collect()
    }

    /// The first response to arrive for the oldest request not yet gathered,
    /// with the rank that sent it. The other workers' responses to it are
    /// consumed (and dropped) by the next gather.
    ///
    /// # Errors
    /// As [`recv_all`](Coordinator::recv_all), for the response returned.
    pub fn recv_first(&mut self) -> Result<(u32, ExecuteResponse)> {
        self.check_no_thread()?;
        let shared = Arc::clone(&self.shared);
        let mut gatherer = shared.lock_gatherer();
        let n = gatherer.next;
        shared.check_outstanding(n)?;
        // A gather interrupted half-way may already hold an answer.
        if let Some(rank) = gatherer
            .partial
            .iter()
            .position(|p| matches!(p, Some(Ok(_))))
        {
            let response = gatherer.partial[rank].take().expect("just found")?;
            gatherer.partial.iter_mut().for_each(|p| *p = None);
            gatherer.next += 1;
            return Ok((rank as u32, response));
        }
        let mut poll = Poll::new(
            Duration::from_micros(5),
            Duration::from_millis(1),
            shared.config.timeout,
        );
        loop {
            for rank in 0..shared.config.workers {
                let r = rank as usize;
                while gatherer.consumed[r] < n {
                    match shared.try_consume(rank, Slot::Response)? {
                        Some(_) => gatherer.consumed[r] += 1,
                        None => break,
                    }
                }
                if gatherer.consumed[r] == n
                    && let Some(response) = shared.try_consume(rank, Slot::Response)?
                {
                    gatherer.consumed[r] += 1;
                    gatherer.next += 1;
                    let next = gatherer.next;
                    let behind = gatherer.consumed.iter().any(|&c| c < next);
                    shared.stale.store(behind, Ordering::Release);
                    return response.map(|response| (rank, response));
                }
            }
            for rank in 0..shared.config.workers {
                shared.check_worker(rank)?;
            }
            poll.pause(&shared.config.name, || {
                format!("waiting for any worker's response to request {n}")
            })?;
        }
    }

    /// Consumes (and drops) every answer [`recv_first`](Coordinator::recv_first)
    /// left behind, waiting for the slower workers to give them; returns how
    /// many. Call it before closing the channel after `recv_first`, so every
    /// worker can finish its last answer.
    ///
    /// # Errors
    /// [`Error::WorkerDied`], [`Error::Timeout`].
    pub fn drain(&mut self) -> Result<u64> {
        self.check_no_thread()?;
        let shared = &*self.shared;
        let mut gatherer = shared.lock_gatherer();
        let next = gatherer.next;
        let mut drained = 0;
        for rank in 0..shared.config.workers {
            while gatherer.consumed[rank as usize] < next {
                let _ = shared.consume(Waiter::Caller, rank, Slot::Response)?;
                gatherer.consumed[rank as usize] += 1;
                drained += 1;
            }
        }
        shared.stale.store(false, Ordering::Release);
        Ok(drained)
    }

    fn gather(&mut self, slot: Slot) -> Result<Vec<Result<ExecuteResponse>>> {
        self.check_no_thread()?;
        self.shared.gather(Waiter::Caller, slot)
    }
}

impl Shared {
    fn check_outstanding(&self, n: u64) -> Result<()> {
        if n >= self.sent.load(Ordering::Acquire) {
            return Err(Error::NothingOutstanding {
                channel: self.config.name.clone(),
            });
        }
        Ok(())
    }

    /// Takes worker `rank`'s next response from `slot`, waiting for it. The
    /// outer result is the wait (a dead worker, a timeout); the inner one
    /// the response's own validity.
    fn consume(&self, waiter: Waiter, rank: u32, slot: Slot) -> Result<Result<ExecuteResponse>> {
        self.wait_worker_as(waiter, Direction::Response, Role::Consume, rank)?;
        Ok(self.read_and_release(rank, slot))
    }

    /// [`consume`](Shared::consume) without waiting: `None` if no response is there yet.
    pub(super) fn try_consume(
        &self,
        rank: u32,
        slot: Slot,
    ) -> Result<Option<Result<ExecuteResponse>>> {
        let taken = self
            .sem(Direction::Response, Role::Consume, rank)
            .try_wait()
            .map_err(|source| Error::Sem {
                channel: self.config.name.clone(),
                source,
            })?;
        Ok(taken.then(|| self.read_and_release(rank, slot)))
    }

    /// Decodes worker `rank`'s slot in place, then gives the slot back.
    fn read_and_release(&self, rank: u32, slot: Slot) -> Result<ExecuteResponse> {
        let (at, size) = match slot {
            Slot::Response => (
                self.layout.response_slot(rank),
                self.layout.response_slot_size,
            ),
            Slot::Init => (self.layout.init_slot(rank), self.layout.init_slot_size),
        };
        let decoded = self.copy_out(rank, slot, at, size);
        let released = self.sem(Direction::Response, Role::Produce, rank).post();
        let response = decoded?;
        released.map_err(|source| Error::Sem {
            channel: self.config.name.clone(),
            source,
        })?;
        validate(&self.config.name, rank, response)
    }

    /// Copies worker `rank`'s answer out of its slot into the coordinator's
    /// own buffer and decodes it there.
    ///
    /// The slot is the worker's to write and ours to read only while we hold
    /// its response-consume count, but a broken or hostile worker may write
    /// it at any moment: so no reference to the slot's bytes is ever made.
    /// The length prefix is copied and checked against the slot first, then
    /// just the frame; both copies land in a buffer sized once for the
    /// largest slot, so nothing is allocated here.
    fn copy_out(&self, rank: u32, slot: Slot, at: usize, size: usize) -> Result<ExecuteResponse> {
        let shm = |source| Error::Shm {
            channel: self.config.name.clone(),
            source,
        };
        let mut buffer = self.slot_copy.lock().unwrap_or_else(|e| e.into_inner());
        let prefix = nodeipc_proto::LEN_PREFIX;
        self.response
            .read_at(at, &mut buffer[..prefix])
            .map_err(shm)?;
        let len = match nodeipc_proto::frame_len(&buffer[..prefix], size) {
            // Only the prefix is in the buffer yet: "truncated" is the
            // frame it announces, which fits the slot; copy that much.
            Ok(len) | Err(nodeipc_proto::Error::Truncated { need: len, .. }) => len,
            Err(e) => return Err(slot_error(&self.config.name, rank, slot, size, e)),
        };
        self.response.read_at(at, &mut buffer[..len]).map_err(shm)?;
        nodeipc_proto::decode_frame::<ExecuteResponse>(&buffer[..len], size)
            .map_err(|e| slot_error(&self.config.name, rank, slot, size, e))
    }

    /// Every worker's response to the next request. Interrupted (by a stop
    /// of the response thread, a dead worker, a timeout), it keeps what it
    /// gathered: the next gather goes on from there.
    pub(super) fn gather(
        &self,
        waiter: Waiter,
        slot: Slot,
    ) -> Result<Vec<Result<ExecuteResponse>>> {
        let mut gatherer = self.lock_gatherer();
        let n = gatherer.next;
        self.check_outstanding(n)?;
        for rank in 0..self.config.workers {
            let r = rank as usize;
            if gatherer.partial[r].is_some() {
                continue;
            }
            while gatherer.consumed[r] < n {
                // A response recv_first did not need: consume and drop it.
                let _ = self.consume(waiter, rank, Slot::Response)?;
                gatherer.consumed[r] += 1;
            }
            let response = self.consume(waiter, rank, slot)?;
            gatherer.consumed[r] += 1;
            gatherer.partial[r] = Some(response);
        }
        gatherer.next += 1;
        // Every worker's slot is consumed up to this request now.
        self.stale.store(false, Ordering::Release);
        Ok(gatherer
            .partial
            .iter_mut()
            .map(|p| p.take().expect("every rank gathered"))
            .collect())
    }
}

/// A slot's frame that could not be decoded, as the channel's error.
fn slot_error(
    channel: &str,
    rank: u32,
    slot: Slot,
    size: usize,
    error: nodeipc_proto::Error,
) -> Error {
    match error {
        nodeipc_proto::Error::TooLarge { size: len, .. }
        | nodeipc_proto::Error::Truncated { need: len, .. } => Error::Corrupt {
            channel: channel.to_owned(),
            rank,
            slot: slot.name(),
            len: len as u64,
            slot_size: size,
        },
        nodeipc_proto::Error::Decode(source) => Error::Decode {
            channel: channel.to_owned(),
            rank,
            slot: slot.name(),
            source,
        },
        source => Error::Proto {
            context: format!("channel {channel}"),
            source,
        },
    }
}
