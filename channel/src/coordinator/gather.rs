//! Taking the workers' responses out of their slots: the one byte-level
//! gather every form calls ([`Shared::gather_frames`], for a [`Mode`] and a
//! [`Wait`]), and the draining of answers a [`First`](crate::First) gather
//! left behind.
//!
//! Every gather works on bytes: a worker's frame is copied out of its slot
//! into the coordinator's own buffer for that worker, its length checked
//! against the slot, and the slot given back at once. The typed modes
//! decode from those buffers; the raw ones hand them out as slices.

use std::sync::MutexGuard;
use std::sync::atomic::Ordering;
use std::time::Duration;

use nodeipc_shm::Prefetch;

use super::answers::{Answers, Gathered, Picked};
use super::liveness::Waiter;
use super::{Gatherer, Shared};
use crate::mode::Mode;
use crate::sem_kind::{Direction, Role};
use crate::wait::Wait;
use crate::{Error, Result};

/// Which response slots a gather reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Slot {
    Response,
    Init,
}

impl Slot {
    pub(super) fn of(mode: Mode) -> Slot {
        match mode {
            Mode::Init => Slot::Init,
            _ => Slot::Response,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Slot::Response => "response slot",
            Slot::Init => "init slot",
        }
    }
}

/// The mode a gather takes the next request in.
#[derive(Clone, Copy, Debug)]
pub(super) enum ModeOf {
    /// The caller's.
    Given(Mode),
    /// The one recorded at the request's send, else the fallback (the
    /// response thread's).
    Recorded(Mode),
}

/// What [`Shared::gather_next`] gathered: which request, in which mode, and
/// its answers or why there are none.
pub(super) struct Next<'c> {
    pub(super) index: u64,
    pub(super) mode: Mode,
    pub(super) answers: Result<Option<Answers<'c>>>,
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

pub(super) fn decode<Resp: prost::Message + Default>(
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
    /// The one byte-level gather: the answers to the oldest request not
    /// yet gathered, as `mode` takes them, waiting as `wait` allows
    /// (`None`: a [`Wait::Try`] found them not all there yet). Every
    /// gather of the coordinator — each mode's `recv`, `try_recv` and
    /// `recv_timeout`, the bindings', the response thread's — is this call.
    ///
    /// Interrupted (by a stop of the response thread, a dead worker, a
    /// timeout, a try that found an answer missing), it keeps what it
    /// gathered: the next gather goes on from there.
    pub(super) fn gather_frames(
        &self,
        waiter: Waiter,
        mode: Mode,
        wait: &mut Wait,
    ) -> Result<Option<Answers<'_>>> {
        self.gather_next(waiter, ModeOf::Given(mode), wait).answers
    }

    /// [`gather_frames`](Shared::gather_frames) saying which request it
    /// answered and in what mode: the oldest request not yet handed out,
    /// which is the first the sending thread gathered ahead if it did (see
    /// [`gather_ahead`](Shared::gather_ahead)), in its recorded mode for
    /// [`ModeOf::Recorded`].
    pub(super) fn gather_next(&self, waiter: Waiter, mode: ModeOf, wait: &mut Wait) -> Next<'_> {
        let mut gatherer = self.lock_gatherer();
        if let Some(ahead) = gatherer.ahead.pop_front() {
            self.ahead_len
                .store(gatherer.ahead.len(), Ordering::Release);
            let mode = match mode {
                ModeOf::Given(mode) => mode,
                ModeOf::Recorded(_) => ahead.mode,
            };
            let index = ahead.index;
            return Next {
                index,
                mode,
                answers: self.hand_out_ahead(gatherer, ahead, mode),
            };
        }
        let index = gatherer.next;
        let mode = match mode {
            ModeOf::Given(mode) => mode,
            ModeOf::Recorded(fallback) => self.modes.mode_of(index).unwrap_or(fallback),
        };
        let answers = match mode {
            Mode::First => self
                .first(gatherer, waiter, wait)
                .map(|one| one.map(Answers::One)),
            Mode::All | Mode::Aggregated | Mode::Rank0AfterAll | Mode::Init => self
                .every(gatherer, waiter, Slot::of(mode), wait)
                .map(|all| all.map(Answers::All)),
        };
        Next {
            index,
            mode,
            answers,
        }
    }

    fn check_outstanding(&self, n: u64) -> Result<()> {
        if n >= self.sent.load(Ordering::Acquire) {
            return Err(Error::NothingOutstanding {
                channel: self.config.name.clone(),
            });
        }
        Ok(())
    }

    /// Whether some worker's slot still holds an answer a [`First`](crate::First)
    /// gather did not need, which `send` must then drain.
    fn update_stale(&self, gatherer: &Gatherer) {
        let behind = gatherer.consumed.iter().any(|&c| c < gatherer.next);
        self.stale.store(behind, Ordering::Release);
    }

    /// Every worker's response to the next request, as frames in the
    /// gatherer's buffers.
    fn every<'a>(
        &'a self,
        mut gatherer: MutexGuard<'a, Gatherer>,
        waiter: Waiter,
        slot: Slot,
        wait: &mut Wait,
    ) -> Result<Option<Gathered<'a>>> {
        if !self.every_in(&mut gatherer, waiter, slot, wait)? {
            return Ok(None);
        }
        Ok(Some(Gathered {
            gatherer,
            turn: None,
        }))
    }

    /// Takes every worker's response to the next request into the
    /// gatherer's buffers: whether all were there (a [`Wait::Try`] may
    /// find some missing; what it took stays taken).
    pub(super) fn every_in(
        &self,
        gatherer: &mut Gatherer,
        waiter: Waiter,
        slot: Slot,
        wait: &mut Wait,
    ) -> Result<bool> {
        let n = gatherer.next;
        self.check_outstanding(n)?;
        // Every worker's next answer slot, asked for before its count is
        // taken: the two trips to the worker's core overlap.
        for (rank, &answer) in (0..self.config.workers).zip(&gatherer.consumed) {
            self.response
                .prefetch(self.slot_at(rank, slot, answer), 64, Prefetch::Read);
        }
        let mut complete = true;
        for rank in 0..self.config.workers {
            let r = rank as usize;
            if gatherer.taken[r].is_some() {
                continue;
            }
            // Answers a First gather did not need: consumed and dropped.
            while gatherer.consumed[r] < n && self.take(waiter, rank, wait)? {
                self.release(rank)?;
                gatherer.consumed[r] += 1;
            }
            if gatherer.consumed[r] < n || !self.take(waiter, rank, wait)? {
                // A try: this worker has not answered yet.
                complete = false;
                continue;
            }
            let Gatherer {
                frames, consumed, ..
            } = &mut *gatherer;
            let frame = self.read_and_release(rank, slot, consumed[r], &mut frames[r]);
            gatherer.consumed[r] += 1;
            gatherer.taken[r] = Some(frame);
        }
        if !complete {
            self.update_stale(gatherer);
            return Ok(false);
        }
        gatherer.next += 1;
        self.next_gather.store(gatherer.next, Ordering::Release);
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
            None => Ok(true),
        }
    }

    /// The first response to arrive for the next request; the others are
    /// left in their slots, to be drained.
    fn first<'a>(
        &'a self,
        mut gatherer: MutexGuard<'a, Gatherer>,
        waiter: Waiter,
        wait: &mut Wait,
    ) -> Result<Option<Picked<'a>>> {
        let n = gatherer.next;
        self.check_outstanding(n)?;
        // A gather interrupted half-way may already hold an answer.
        if let Some(rank) = gatherer
            .taken
            .iter()
            .position(|t| matches!(t, Some(Ok(()))))
        {
            return Ok(Some(self.picked(gatherer, rank as u32)));
        }
        // Any worker may answer first: there is no one semaphore to wait
        // on, so every slot is looked at, paced as every such loop is.
        let mut pause = match wait {
            Wait::Within(budget) => {
                Some(budget.poll(Duration::from_micros(5), Duration::from_millis(1)))
            }
            Wait::Try => None,
        };
        loop {
            for rank in 0..self.config.workers {
                let r = rank as usize;
                while gatherer.consumed[r] < n {
                    if !self.try_discard(rank)? {
                        break;
                    }
                    gatherer.consumed[r] += 1;
                }
                if gatherer.consumed[r] == n {
                    let Gatherer {
                        frames, consumed, ..
                    } = &mut *gatherer;
                    let Some(frame) =
                        self.try_consume(rank, Slot::Response, consumed[r], &mut frames[r])?
                    else {
                        continue;
                    };
                    gatherer.consumed[r] += 1;
                    let picked = self.picked(gatherer, rank);
                    frame?;
                    return Ok(Some(picked));
                }
            }
            for rank in 0..self.config.workers {
                self.check_worker(rank)?;
            }
            self.check_stop(waiter)?;
            match &mut pause {
                None => return Ok(None),
                Some(pause) => pause.pause(&self.config.name, || {
                    format!("waiting for any worker's response to request {n}")
                })?,
            }
        }
    }

    /// Worker `rank`'s answer as the first to the next request, which is
    /// gathered from here on (the others' answers to it are left behind).
    fn picked<'a>(&'a self, mut gatherer: MutexGuard<'a, Gatherer>, rank: u32) -> Picked<'a> {
        gatherer.taken.iter_mut().for_each(|t| *t = None);
        gatherer.next += 1;
        self.next_gather.store(gatherer.next, Ordering::Release);
        self.update_stale(&gatherer);
        Picked {
            gatherer,
            rank,
            turn: None,
        }
    }

    /// Consumes (and drops) every answer a [`First`](crate::First) gather
    /// left behind; how many (`None`: a [`Wait::Try`] found some not given
    /// yet, and took the others).
    pub(super) fn drain(&self, waiter: Waiter, wait: &mut Wait) -> Result<Option<u64>> {
        let mut gatherer = self.lock_gatherer();
        let next = gatherer.next;
        let mut drained = 0;
        let mut complete = true;
        for rank in 0..self.config.workers {
            let r = rank as usize;
            while gatherer.consumed[r] < next {
                if !self.take(waiter, rank, wait)? {
                    complete = false;
                    break;
                }
                self.release(rank)?;
                gatherer.consumed[r] += 1;
                drained += 1;
            }
        }
        self.update_stale(&gatherer);
        Ok(complete.then_some(drained))
    }

    /// Takes worker `rank`'s response-consume count, waiting as `wait`
    /// allows: whether it was taken (always, unless a try).
    fn take(&self, waiter: Waiter, rank: u32, wait: &mut Wait) -> Result<bool> {
        match wait {
            Wait::Within(budget) => {
                self.wait_worker_as(waiter, Direction::Response, Role::Consume, rank, budget)?;
                Ok(true)
            }
            Wait::Try => {
                if self.try_take(rank)? {
                    return Ok(true);
                }
                // Nothing there: a dead worker is still news, but what it
                // posted before it went is still ours to take.
                match self.check_worker(rank) {
                    Ok(()) => Ok(false),
                    Err(gone) => {
                        if self.try_take(rank)? {
                            return Ok(true);
                        }
                        Err(gone)
                    }
                }
            }
        }
    }

    /// Takes worker `rank`'s answer `answer` from its `slot` into `into`
    /// if it is there: `None` if not. The outer result is the look; the
    /// inner one the frame's own validity.
    fn try_consume(
        &self,
        rank: u32,
        slot: Slot,
        answer: u64,
        into: &mut Vec<u8>,
    ) -> Result<Option<Result<()>>> {
        Ok(self
            .try_take(rank)?
            .then(|| self.read_and_release(rank, slot, answer, into)))
    }

    /// Gives worker `rank`'s next response back unread, if it is there:
    /// whether there was one.
    pub(super) fn try_discard(&self, rank: u32) -> Result<bool> {
        if !self.try_take(rank)? {
            return Ok(false);
        }
        self.release(rank)?;
        Ok(true)
    }

    /// Whether worker `rank` has posted an answer not yet taken (a look,
    /// nothing taken).
    pub(super) fn answer_ready(&self, rank: u32) -> bool {
        self.sem(Direction::Response, Role::Consume, rank)
            .value()
            .is_ok_and(|count| count > 0)
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

    /// Copies worker `rank`'s answer `answer` out of its slot, then gives
    /// the slot back.
    fn read_and_release(
        &self,
        rank: u32,
        slot: Slot,
        answer: u64,
        into: &mut Vec<u8>,
    ) -> Result<()> {
        // The line the release posts to, fetched while the slot is read.
        self.prefetch_semaphore(Direction::Response, Role::Produce, rank);
        let copied = self.copy_out(rank, slot, answer, into);
        let released = self.release(rank);
        copied?;
        released
    }

    /// Where worker `rank`'s answer `answer` lies in the response region.
    fn slot_at(&self, rank: u32, slot: Slot, answer: u64) -> usize {
        match slot {
            Slot::Response => self.layout.response_slot(rank, answer),
            Slot::Init => self.layout.init_slot(rank, answer),
        }
    }

    /// Copies the body of worker `rank`'s answer `answer` (counted from its
    /// first, so the slot is `answer % depth` of its ring) into `into` (the
    /// coordinator's own buffer for that worker, reused).
    ///
    /// The slot is the worker's to write and ours to read only while we hold
    /// its response-consume count, but a broken or hostile worker may write
    /// it at any moment: so no reference to the slot's bytes is ever made.
    /// The length prefix is copied and checked against the slot first, then
    /// just the body, straight into `into`'s spare capacity.
    fn copy_out(&self, rank: u32, slot: Slot, answer: u64, into: &mut Vec<u8>) -> Result<()> {
        let at = self.slot_at(rank, slot, answer);
        let size = match slot {
            Slot::Response => self.layout.response_slot_size,
            Slot::Init => self.layout.init_slot_size,
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
