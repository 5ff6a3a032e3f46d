//! Answering: a response encoded, or bytes written, straight into this
//! worker's slot.

use std::sync::atomic::Ordering;

use nodeipc_shm::Prefetch;

use super::Worker;
use crate::layout;
use crate::payload::{Payload, Raw};
use crate::sem_kind::{Direction, Role};
use crate::wait::Budget;
use crate::{Error, Result};

/// Which of a worker's slots an answer goes to.
#[derive(Clone, Copy)]
pub(crate) enum SlotKind {
    Response,
    Init,
}

impl<Req, Resp> Worker<Req, Resp>
where
    Req: prost::Message + Default + 'static,
    Resp: prost::Message + Default + 'static,
{
    /// Answers the oldest request not yet answered, encoding straight into
    /// this worker's response slot (no intermediate buffer, no allocation).
    ///
    /// # Errors
    /// [`Error::TooLarge`] before anything is written; [`Error::CoordinatorDied`];
    /// [`Error::Timeout`] if the coordinator has not taken an answer from
    /// this worker's ring of `depth` answers, all of them full.
    pub fn respond(&mut self, response: &Resp) -> Result<()> {
        self.respond_message(response, SlotKind::Response, None)
    }

    /// Answers an init request in this worker's fixed-size init slot
    /// (gathered by an [`Init`](crate::Init) gather).
    ///
    /// # Errors
    /// As [`respond`](Worker::respond).
    pub fn respond_init(&mut self, response: &Resp) -> Result<()> {
        self.respond_message(response, SlotKind::Init, None)
    }

    pub(crate) fn respond_message(
        &mut self,
        response: &Resp,
        slot: SlotKind,
        held: Option<&mut bool>,
    ) -> Result<()> {
        let channel = &self.config.name;
        let context = || format!("channel {channel}");
        self.write_slot(response.encoded_len(), slot, held, |out| {
            nodeipc_proto::encode_frame(response, out)
                .map(drop)
                .map_err(|source| Error::Proto {
                    context: context(),
                    source,
                })
        })
    }
}

impl Worker<Raw, Raw> {
    /// Answers the oldest request not yet answered with `response` as it
    /// is: bytes of any encoding, written straight into this worker's
    /// response slot.
    ///
    /// # Errors
    /// [`Error::TooLarge`] before anything is written; [`Error::CoordinatorDied`];
    /// [`Error::Timeout`] if the coordinator has not taken an answer from
    /// this worker's ring of `depth` answers, all of them full.
    pub fn respond(&mut self, response: &[u8]) -> Result<()> {
        self.respond_frame(response, SlotKind::Response, None)
    }

    /// Answers an init request with bytes, in this worker's fixed-size init
    /// slot (gathered by an [`Init`](crate::Init) gather).
    ///
    /// # Errors
    /// As [`respond`](Worker::respond).
    pub fn respond_init(&mut self, response: &[u8]) -> Result<()> {
        self.respond_frame(response, SlotKind::Init, None)
    }

    /// Answers the oldest request not yet answered with `len` bytes that
    /// `fill` writes straight into this worker's response slot (no copy of
    /// the payload: build it there). Nothing is announced if `fill` panics:
    /// the slot stays this worker's for the next answer.
    ///
    /// # Errors
    /// As [`respond`](Worker::respond).
    pub fn respond_with(&mut self, len: usize, fill: impl FnOnce(&mut [u8])) -> Result<()> {
        self.respond_frame_with(len, SlotKind::Response, None, fill)
    }

    /// Writes a frame of `len` bytes that `fill` writes into the slot of
    /// `kind`, released as [`respond_frame`](Worker::respond_frame) does.
    pub(crate) fn respond_frame_with(
        &self,
        len: usize,
        kind: SlotKind,
        held: Option<&mut bool>,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<()> {
        self.write_slot(len, kind, held, |out| {
            // `write_slot` checked the frame against its slot (at most
            // MAX_SLOT, 1 GiB): the length fits the u32 prefix.
            let (prefix, body) = out.split_at_mut(nodeipc_proto::LEN_PREFIX);
            prefix.copy_from_slice(&(len as u32).to_le_bytes());
            fill(body);
            Ok(())
        })
    }

    /// Writes `frame` into the slot of `kind`; with `held`, the frame of a
    /// request held in place is released once the answer is written, before
    /// it is announced (see [`write_slot`](Worker::write_slot)).
    pub(crate) fn respond_frame(
        &mut self,
        frame: &[u8],
        kind: SlotKind,
        held: Option<&mut bool>,
    ) -> Result<()> {
        self.write_slot(frame.len(), kind, held, |out| {
            layout::write_bytes_frame(frame, out);
            Ok(())
        })
    }
}

impl<Req: Payload, Resp: Payload> Worker<Req, Resp> {
    /// Writes a frame of `body` bytes into this worker's slot of `kind`
    /// through `fill` (given exactly the frame's bytes, prefix included),
    /// the next of its ring of `depth`, once the coordinator has taken
    /// what was there before.
    ///
    /// With `held` (a request held in place, `false` until released), its
    /// frame is released after the answer is written and before the answer
    /// is announced: the coordinator, which waits for the answer, then finds
    /// the frame free for its next send at once instead of waiting for a
    /// second post on the same semaphore line.
    fn write_slot(
        &self,
        body: usize,
        kind: SlotKind,
        held: Option<&mut bool>,
        fill: impl FnOnce(&mut [u8]) -> Result<()>,
    ) -> Result<()> {
        let answer = self.answered.load(Ordering::Relaxed);
        let (at, size, slot) = match kind {
            SlotKind::Response => (
                self.layout.response_slot(self.rank, answer),
                self.layout.response_slot_size,
                "response slot",
            ),
            SlotKind::Init => (
                self.layout.init_slot(self.rank, answer),
                self.layout.init_slot_size,
                "init slot",
            ),
        };
        let frame = body.saturating_add(nodeipc_proto::LEN_PREFIX);
        if frame > size {
            return Err(Error::TooLarge {
                channel: self.config.name.clone(),
                slot,
                size: frame,
                max: size,
            });
        }
        let mut budget = Budget::new(self.config.timeout);
        self.wait_coordinator(
            Direction::Response,
            Role::Produce,
            "waiting for the coordinator to take a response (every answer slot full)",
            &mut budget,
        )?;
        // SAFETY: we hold our response-produce count: by the protocol the
        // coordinator does not read our slot until we post the consume
        // below, and no other worker writes it.
        let out = unsafe { self.response.bytes_mut(at, frame) }.map_err(|source| Error::Shm {
            channel: self.config.name.clone(),
            source,
        });
        // Until announced, the slot is ours: on an error, or a panic in
        // `fill`, it goes back for the next answer.
        let mut taken = SlotTaken(Some(self));
        out.and_then(fill)?;
        taken.0 = None;
        if let Some(released) = held
            && !std::mem::replace(released, true)
        {
            self.release_frame()?;
        }
        // Counted before it is announced: once posted, the slot is the
        // coordinator's, and our next answer must go to the next one.
        let answered = answer.wrapping_add(1);
        self.answered.store(answered, Ordering::Relaxed);
        self.layout
            .worker(&self.response, self.rank)
            .answered
            .store(answered, Ordering::Release);
        let posted = self
            .sem(Direction::Response, Role::Consume)
            .post()
            .map_err(|source| Error::Sem {
                channel: self.config.name.clone(),
                source,
            });
        // The next answer's slot, owned again before it is written (the
        // coordinator read it `depth` answers ago and reads it next only
        // after that answer's post): the write's stall on it becomes a
        // fetch while this answer travels.
        if let SlotKind::Response = kind {
            let next = self.layout.response_slot(self.rank, answered);
            self.response
                .prefetch(next, frame.min(layout::PREFETCH_NEXT), Prefetch::Write);
        }
        posted
    }
}

/// A response slot taken (its produce count held) and not yet announced:
/// dropped while `Some`, it gives the slot back.
struct SlotTaken<'w, Req: Payload, Resp: Payload>(Option<&'w Worker<Req, Resp>>);

impl<Req: Payload, Resp: Payload> Drop for SlotTaken<'_, Req, Resp> {
    fn drop(&mut self) {
        if let Some(worker) = self.0 {
            let _ = worker.sem(Direction::Response, Role::Produce).post();
        }
    }
}
