//! Taking the workers' responses out of their slots: every worker's
//! (`recv_all`, `recv_init`, and their `_bytes` forms), the first to arrive
//! (`recv_first`), the ones `recv_first` left behind (`drain`).
//!
//! Every gather works on bytes first: a worker's frame is copied out of its
//! slot into the coordinator's own buffer for that worker, its length checked
//! against the slot, and the slot given back at once. The typed gathers
//! decode from those buffers; the `_bytes` ones hand them out as slices.

use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};
use std::time::Duration;

use super::liveness::Waiter;
use super::{Coordinator, Gatherer, Shared, Turn, TurnGuard};
use crate::aggregate::Aggregate;
use crate::sem_kind::{Direction, Role};
use crate::wait::Budget;
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

/// Every worker's response to one request, as bytes (the frames' bodies,
/// length prefix removed), in the coordinator's own buffers: borrowed until
/// the next call on the coordinator.
pub struct Gathered<'c> {
    gatherer: MutexGuard<'c, Gatherer>,
    /// The caller's turn as the gathering thread, held while the responses
    /// are borrowed (the response thread has none: it is the only gatherer).
    turn: Option<TurnGuard<'c>>,
}

impl Gathered<'_> {
    /// Worker `rank`'s response; `None` past the last rank.
    pub fn get(&self, rank: u32) -> Option<&[u8]> {
        self.gatherer.frames.get(rank as usize).map(Vec::as_slice)
    }

    /// How many responses: one per worker.
    pub fn len(&self) -> usize {
        self.gatherer.frames.len()
    }

    /// Never true: a channel has at least one worker.
    pub fn is_empty(&self) -> bool {
        self.gatherer.frames.is_empty()
    }

    /// Every response with its rank, in rank order.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &[u8])> {
        self.gatherer
            .frames
            .iter()
            .enumerate()
            .map(|(rank, frame)| (rank as u32, frame.as_slice()))
    }
}

/// The first response to arrive for one request, as bytes in the
/// coordinator's own buffer: borrowed until the next call on the coordinator.
pub struct First<'c> {
    gatherer: MutexGuard<'c, Gatherer>,
    rank: u32,
    /// As in [`Gathered`].
    _turn: TurnGuard<'c>,
}

impl First<'_> {
    /// The rank that answered first.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Its response (the frame's body).
    pub fn bytes(&self) -> &[u8] {
        &self.gatherer.frames[self.rank as usize]
    }
}

impl<Req: prost::Message + Default, Resp: prost::Message + Default + 'static>
    Coordinator<Req, Resp>
{
    /// Every worker's response to the oldest request not yet gathered, in
    /// rank order.
    ///
    /// # Errors
    /// The first of: [`Error::WorkerFailed`] (non-zero status),
    /// [`Error::UnknownMessageType`], [`Error::Corrupt`], [`Error::Decode`]
    /// — every worker's slot is still consumed, so the channel stays in step;
    /// or [`Error::WorkerDied`], [`Error::Timeout`],
    /// [`Error::NothingOutstanding`].
    pub fn recv_all(&self) -> Result<Vec<Resp>> {
        self.recv_all_within(self.default_budget())
    }

    /// [`recv_all`](Coordinator::recv_all) within `timeout` instead of the
    /// configured one. On a timeout what was gathered is kept: the next
    /// gather resumes there.
    ///
    /// # Errors
    /// As [`recv_all`](Coordinator::recv_all).
    pub fn recv_all_timeout(&self, timeout: Duration) -> Result<Vec<Resp>> {
        self.recv_all_within(Budget::new(timeout))
    }

    fn recv_all_within(&self, budget: Budget) -> Result<Vec<Resp>> {
        let gathered = self.gather_as_caller("recv_all", Slot::Response, budget)?;
        decode_all(
            &self.shared.config.name,
            &gathered,
            Slot::Response,
            self.check,
        )
    }

    /// One response for the oldest request not yet gathered: every worker's,
    /// folded by the channel's aggregation rule ([`PullKvRule`](crate::PullKvRule)
    /// for the execute schema: the first response whose pull-KV results
    /// carry a failure code, else rank 0's; see
    /// [`set_aggregate`](Coordinator::set_aggregate)).
    ///
    /// # Errors
    /// As [`recv_all`](Coordinator::recv_all); [`Error::ResponseThread`]
    /// (before anything is gathered) if the channel has no aggregation rule.
    pub fn recv_all_aggregated(&mut self) -> Result<Resp> {
        let Some(mut aggregate) = self.aggregate_mut().take() else {
            return Err(self.thread_error(
                "no aggregation rule for these messages (call set_aggregate first)",
            ));
        };
        let result = self.recv_all().and_then(|all| aggregate.aggregate(all));
        *self.aggregate_mut() = Some(aggregate);
        result
    }

    /// Every worker's response folded by `aggregate`, whatever rule the
    /// channel has.
    ///
    /// # Errors
    /// As [`recv_all`](Coordinator::recv_all), and what `aggregate` returns.
    pub fn recv_all_aggregated_by(&self, aggregate: &mut impl Aggregate<Resp>) -> Result<Resp> {
        aggregate.aggregate(self.recv_all()?)
    }

    /// Waits for every worker's response to the oldest request not yet
    /// gathered and returns rank 0's — the answer MindIE's coordinator takes
    /// (the other workers' responses are checked and dropped).
    ///
    /// # Errors
    /// As [`recv_all`](Coordinator::recv_all).
    pub fn recv_rank0_after_all(&self) -> Result<Resp> {
        let mut all = self.recv_all()?;
        Ok(all.swap_remove(0))
    }

    /// Every worker's init response (from its fixed-size init slot), in rank order.
    ///
    /// # Errors
    /// As [`recv_all`](Coordinator::recv_all).
    pub fn recv_init(&self) -> Result<Vec<Resp>> {
        let gathered = self.gather_as_caller("recv_init", Slot::Init, self.default_budget())?;
        decode_all(&self.shared.config.name, &gathered, Slot::Init, self.check)
    }

    /// The first response to arrive for the oldest request not yet gathered,
    /// with the rank that sent it. The other workers' responses to it are
    /// consumed (and dropped) by the next gather.
    ///
    /// # Errors
    /// As [`recv_all`](Coordinator::recv_all), for the response returned.
    pub fn recv_first(&self) -> Result<(u32, Resp)> {
        let (shared, check) = (Arc::clone(&self.shared), self.check);
        let channel = &shared.config.name;
        let first = self.recv_first_bytes()?;
        let rank = first.rank();
        let response = decode(channel, rank, Slot::Response, first.bytes())?;
        drop(first);
        check(channel, rank, response).map(|r| (rank, r))
    }

    /// Every worker's response to the oldest request not yet gathered, as
    /// bytes: a frame of any encoding (see [`send_bytes`](Coordinator::send_bytes)).
    /// Nothing is decoded or checked beyond the frame's length.
    ///
    /// # Errors
    /// [`Error::Corrupt`] naming the first worker whose frame is longer than
    /// its slot (every slot is still consumed); [`Error::WorkerDied`],
    /// [`Error::Timeout`], [`Error::NothingOutstanding`].
    pub fn recv_all_bytes(&self) -> Result<Gathered<'_>> {
        self.gather_as_caller("recv_all_bytes", Slot::Response, self.default_budget())
    }

    /// [`recv_all_bytes`](Coordinator::recv_all_bytes) within `timeout`.
    ///
    /// # Errors
    /// As [`recv_all_bytes`](Coordinator::recv_all_bytes).
    pub fn recv_all_bytes_timeout(&self, timeout: Duration) -> Result<Gathered<'_>> {
        self.gather_as_caller("recv_all_bytes", Slot::Response, Budget::new(timeout))
    }

    /// Every worker's init response as bytes.
    ///
    /// # Errors
    /// As [`recv_all_bytes`](Coordinator::recv_all_bytes).
    pub fn recv_init_bytes(&self) -> Result<Gathered<'_>> {
        self.gather_as_caller("recv_init_bytes", Slot::Init, self.default_budget())
    }

    /// A gather by the caller's thread: refused while the response thread
    /// runs or another thread gathers; the turn lives as long as the
    /// responses are borrowed.
    fn gather_as_caller(
        &self,
        op: &'static str,
        slot: Slot,
        mut budget: Budget,
    ) -> Result<Gathered<'_>> {
        self.check_no_thread()?;
        let turn = self.shared.turn(Turn::Gather, op)?;
        let mut gathered = self.shared.gather(Waiter::Caller, slot, &mut budget)?;
        gathered.turn = Some(turn);
        Ok(gathered)
    }

    /// [`recv_first`](Coordinator::recv_first) as bytes.
    ///
    /// # Errors
    /// As [`recv_all_bytes`](Coordinator::recv_all_bytes), for the response returned.
    pub fn recv_first_bytes(&self) -> Result<First<'_>> {
        self.check_no_thread()?;
        let turn = self.shared.turn(Turn::Gather, "recv_first")?;
        let mut budget = self.default_budget();
        let shared = &*self.shared;
        let mut gatherer = shared.lock_gatherer();
        let n = gatherer.next;
        shared.check_outstanding(n)?;
        // A gather interrupted half-way may already hold an answer.
        if let Some(rank) = gatherer
            .taken
            .iter()
            .position(|t| matches!(t, Some(Ok(()))))
        {
            gatherer.taken.iter_mut().for_each(|t| *t = None);
            gatherer.next += 1;
            shared.update_stale(&gatherer);
            return Ok(First {
                gatherer,
                rank: rank as u32,
                _turn: turn,
            });
        }
        let mut poll = budget.poll(Duration::from_micros(5), Duration::from_millis(1));
        loop {
            for rank in 0..shared.config.workers {
                let r = rank as usize;
                while gatherer.consumed[r] < n {
                    if !shared.try_discard(rank)? {
                        break;
                    }
                    gatherer.consumed[r] += 1;
                }
                if gatherer.consumed[r] == n {
                    let Gatherer { frames, .. } = &mut *gatherer;
                    let Some(frame) = shared.try_consume(rank, Slot::Response, &mut frames[r])?
                    else {
                        continue;
                    };
                    gatherer.consumed[r] += 1;
                    gatherer.next += 1;
                    gatherer.taken.iter_mut().for_each(|t| *t = None);
                    shared.update_stale(&gatherer);
                    frame?;
                    return Ok(First {
                        gatherer,
                        rank,
                        _turn: turn,
                    });
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
    pub fn drain(&self) -> Result<u64> {
        self.check_no_thread()?;
        let _turn = self.shared.turn(Turn::Gather, "drain")?;
        let mut budget = self.default_budget();
        let shared = &*self.shared;
        let mut gatherer = shared.lock_gatherer();
        let next = gatherer.next;
        let mut drained = 0;
        for rank in 0..shared.config.workers {
            while gatherer.consumed[rank as usize] < next {
                shared.discard(Waiter::Caller, rank, &mut budget)?;
                gatherer.consumed[rank as usize] += 1;
                drained += 1;
            }
        }
        shared.stale.store(false, Ordering::Release);
        Ok(drained)
    }
}

/// Decodes every gathered frame and checks each response; the first error
/// wins, after every frame was looked at.
pub(super) fn decode_all<Resp: prost::Message + Default>(
    channel: &str,
    gathered: &Gathered<'_>,
    slot: Slot,
    check: super::Check<Resp>,
) -> Result<Vec<Resp>> {
    gathered
        .iter()
        .map(|(rank, bytes)| {
            decode(channel, rank, slot, bytes).and_then(|r| check(channel, rank, r))
        })
        .collect::<Vec<_>>()
        .into_iter()
        .collect()
}

fn decode<Resp: prost::Message + Default>(
    channel: &str,
    rank: u32,
    slot: Slot,
    bytes: &[u8],
) -> Result<Resp> {
    Resp::decode(bytes).map_err(|source| Error::Decode {
        channel: channel.to_owned(),
        rank,
        slot: slot.name(),
        source,
    })
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

    /// Whether some worker's slot still holds an answer `recv_first` did not
    /// need, which `send` must then drain.
    fn update_stale(&self, gatherer: &Gatherer) {
        let behind = gatherer.consumed.iter().any(|&c| c < gatherer.next);
        self.stale.store(behind, Ordering::Release);
    }

    /// Takes worker `rank`'s next frame from `slot` into `into`, waiting for
    /// it. The outer result is the wait (a dead worker, a timeout); the
    /// inner one the frame's own validity.
    fn consume(
        &self,
        waiter: Waiter,
        rank: u32,
        slot: Slot,
        into: &mut Vec<u8>,
        budget: &mut Budget,
    ) -> Result<Result<()>> {
        self.wait_worker_as(waiter, Direction::Response, Role::Consume, rank, budget)?;
        Ok(self.read_and_release(rank, slot, into))
    }

    /// [`consume`](Shared::consume) without waiting: `None` if no response is there yet.
    fn try_consume(&self, rank: u32, slot: Slot, into: &mut Vec<u8>) -> Result<Option<Result<()>>> {
        Ok(self
            .try_take(rank)?
            .then(|| self.read_and_release(rank, slot, into)))
    }

    /// Waits for worker `rank`'s next response and gives its slot back unread.
    fn discard(&self, waiter: Waiter, rank: u32, budget: &mut Budget) -> Result<()> {
        self.wait_worker_as(waiter, Direction::Response, Role::Consume, rank, budget)?;
        self.release(rank)
    }

    /// [`discard`](Shared::discard) without waiting: whether there was one.
    pub(super) fn try_discard(&self, rank: u32) -> Result<bool> {
        if !self.try_take(rank)? {
            return Ok(false);
        }
        self.release(rank)?;
        Ok(true)
    }

    fn try_take(&self, rank: u32) -> Result<bool> {
        self.sem(Direction::Response, Role::Consume, rank)
            .try_wait()
            .map_err(|source| Error::Sem {
                channel: self.config.name.clone(),
                source,
            })
    }

    fn release(&self, rank: u32) -> Result<()> {
        self.sem(Direction::Response, Role::Produce, rank)
            .post()
            .map_err(|source| Error::Sem {
                channel: self.config.name.clone(),
                source,
            })
    }

    /// Copies worker `rank`'s frame out of its slot, then gives the slot back.
    fn read_and_release(&self, rank: u32, slot: Slot, into: &mut Vec<u8>) -> Result<()> {
        let copied = self.copy_out(rank, slot, into);
        let released = self.release(rank);
        copied?;
        released
    }

    /// Copies the body of worker `rank`'s frame out of its slot into `into`
    /// (the coordinator's own buffer for that worker, reused).
    ///
    /// The slot is the worker's to write and ours to read only while we hold
    /// its response-consume count, but a broken or hostile worker may write
    /// it at any moment: so no reference to the slot's bytes is ever made.
    /// The length prefix is copied and checked against the slot first, then
    /// just the body, straight into `into`'s spare capacity.
    fn copy_out(&self, rank: u32, slot: Slot, into: &mut Vec<u8>) -> Result<()> {
        let (at, size) = match slot {
            Slot::Response => (
                self.layout.response_slot(rank),
                self.layout.response_slot_size,
            ),
            Slot::Init => (self.layout.init_slot(rank), self.layout.init_slot_size),
        };
        let shm = |source| Error::Shm {
            channel: self.config.name.clone(),
            source,
        };
        let mut prefix = [0u8; nodeipc_proto::LEN_PREFIX];
        self.response.read_at(at, &mut prefix).map_err(shm)?;
        let len = match nodeipc_proto::frame_len(&prefix, size) {
            // Only the prefix was copied: "truncated" is the frame it
            // announces, which fits the slot.
            Ok(len) | Err(nodeipc_proto::Error::Truncated { need: len, .. }) => len,
            Err(e) => return Err(slot_error(&self.config.name, rank, slot, size, e)),
        };
        let body = len - prefix.len();
        into.clear();
        into.reserve(body);
        let spare = &mut into.spare_capacity_mut()[..body];
        self.response
            .read_uninit(at + prefix.len(), spare)
            .map_err(shm)?;
        // SAFETY: `read_uninit` initialised these `body` bytes of spare
        // capacity, which `reserve` made room for.
        unsafe { into.set_len(body) };
        Ok(())
    }

    /// Every worker's response to the next request, as frames in the
    /// gatherer's buffers. Interrupted (by a stop of the response thread, a
    /// dead worker, a timeout), it keeps what it gathered: the next gather
    /// goes on from there.
    pub(super) fn gather(
        &self,
        waiter: Waiter,
        slot: Slot,
        budget: &mut Budget,
    ) -> Result<Gathered<'_>> {
        let mut gatherer = self.lock_gatherer();
        let n = gatherer.next;
        self.check_outstanding(n)?;
        for rank in 0..self.config.workers {
            let r = rank as usize;
            if gatherer.taken[r].is_some() {
                continue;
            }
            while gatherer.consumed[r] < n {
                // A response recv_first did not need: consume and drop it.
                self.discard(waiter, rank, budget)?;
                gatherer.consumed[r] += 1;
            }
            let Gatherer { frames, .. } = &mut *gatherer;
            let frame = self.consume(waiter, rank, slot, &mut frames[r], budget)?;
            gatherer.consumed[r] += 1;
            gatherer.taken[r] = Some(frame);
        }
        gatherer.next += 1;
        // Every worker's slot is consumed up to this request now.
        self.stale.store(false, Ordering::Release);
        let mut first_error = None;
        for taken in &mut gatherer.taken {
            if let Some(Err(e)) = taken.take() {
                first_error.get_or_insert(e);
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(Gathered {
                gatherer,
                turn: None,
            }),
        }
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
