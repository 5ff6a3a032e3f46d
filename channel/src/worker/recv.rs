//! Receiving: a request copied out (and decoded, typed), or held in place.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{InPlace, Worker};
use crate::layout;
use crate::payload::{Payload, Raw};
use crate::sem_kind::{Direction, Role};
use crate::wait::{Budget, Wait};
use crate::{Error, Result};

/// Requests at least this large are copied out of the ring into a buffer
/// their payloads can borrow from, so decoding copies (and allocates) them
/// no second time; smaller ones are copied into a fixed buffer and their
/// payloads copied from there.
pub(super) const COPY_OUT_AT: usize = 64 << 10;

impl<Req, Resp> Worker<Req, Resp>
where
    Req: prost::Message + Default + 'static,
    Resp: prost::Message + Default + 'static,
{
    /// Waits for the next request and decodes it.
    ///
    /// # Errors
    /// [`Error::Closed`] once the coordinator closed the channel and every
    /// request sent before is received; [`Error::CoordinatorDied`];
    /// [`Error::Timeout`]; [`Error::Corrupt`] or [`Error::Decode`] for a
    /// frame that is not a request.
    pub fn recv(&mut self) -> Result<Req> {
        let mut request = Req::default();
        self.recv_into(&mut request)?;
        Ok(request)
    }

    /// [`recv`](Worker::recv) if a request is there, without waiting.
    ///
    /// # Errors
    /// As [`recv`](Worker::recv), never [`Error::Timeout`].
    pub fn try_recv(&mut self) -> Result<Option<Req>> {
        let mut request = Req::default();
        Ok(self.recv_with(&mut request, Wait::Try)?.then_some(request))
    }

    /// [`recv`](Worker::recv) within `timeout` instead of the configured one.
    /// A timeout takes nothing: the next receive gets the request.
    ///
    /// # Errors
    /// As [`recv`](Worker::recv).
    pub fn recv_timeout(&mut self, timeout: Duration) -> Result<Req> {
        let mut request = Req::default();
        self.recv_with(&mut request, Wait::Within(Budget::new(timeout)))?;
        Ok(request)
    }

    /// [`recv`](Worker::recv) into an existing message, reusing its
    /// allocations (the payload's buffer, say): no allocation in steady state.
    ///
    /// # Errors
    /// As [`recv`](Worker::recv).
    pub fn recv_into(&mut self, request: &mut Req) -> Result<()> {
        let wait = Wait::Within(Budget::new(self.config.timeout));
        self.recv_with(request, wait).map(drop)
    }

    /// Receives into `request`; whether there was one (always, unless a try).
    fn recv_with(&mut self, request: &mut Req, wait: Wait) -> Result<bool> {
        if !self.acquire(wait)? {
            return Ok(false);
        }
        let decoded = self
            .locate()
            .and_then(|(at, len)| self.copy_out(at, len, request));
        self.advance();
        let released = self.release_frame();
        decoded?;
        released.map(|()| true)
    }

    /// Copies the request body at `body` (`body_len` bytes) out of the ring
    /// and decodes it into `request`.
    ///
    /// No reference to the ring's bytes is made here: small requests land
    /// in a buffer sized once for the frame and are decoded from there;
    /// large ones in `copy`, whose allocation comes back once the caller
    /// drops the previous request, and are decoded without copying their
    /// payloads a second time.
    fn copy_out(&mut self, body: usize, body_len: usize, request: &mut Req) -> Result<()> {
        let (channel, rank) = (&self.config.name, self.rank);
        let shm = |source| Error::Shm {
            channel: channel.clone(),
            source,
        };
        // Dropping the previous request's payloads first lets `reserve` take
        // back the copy buffer's allocation instead of making a new one.
        request.clear();
        let decoded = if body_len >= COPY_OUT_AT {
            self.copy.clear();
            self.copy.reserve(body_len);
            let spare = &mut self.copy.spare_capacity_mut()[..body_len];
            self.request.read_uninit(body, spare).map_err(shm)?;
            // SAFETY: `read_uninit` initialised these `body_len` bytes of
            // spare capacity, which `reserve` made room for.
            unsafe { self.copy.set_len(body_len) };
            request.merge(self.copy.split().freeze())
        } else {
            let small = &mut self.small[..body_len];
            self.request.read_at(body, small).map_err(shm)?;
            request.merge(&*small)
        };
        decoded.map_err(|source| Error::Decode {
            channel: channel.clone(),
            rank,
            slot: "request frame",
            source,
        })
    }
}

impl Worker<Raw, Raw> {
    /// Waits for the next request and copies its bytes out of the ring.
    ///
    /// # Errors
    /// [`Error::Closed`] once the coordinator closed the channel and every
    /// request sent before is received; [`Error::CoordinatorDied`];
    /// [`Error::Timeout`]; [`Error::Corrupt`] for a frame longer than the ring's.
    pub fn recv(&mut self) -> Result<Vec<u8>> {
        let mut request = Vec::new();
        self.recv_into(&mut request)?;
        Ok(request)
    }

    /// [`recv`](Worker::recv) if a request is there, without waiting.
    ///
    /// # Errors
    /// As [`recv`](Worker::recv), never [`Error::Timeout`].
    pub fn try_recv(&mut self) -> Result<Option<Vec<u8>>> {
        let mut request = Vec::new();
        Ok(self.recv_bytes(&mut request, Wait::Try)?.then_some(request))
    }

    /// [`recv`](Worker::recv) within `timeout` instead of the configured one.
    /// A timeout takes nothing: the next receive gets the request.
    ///
    /// # Errors
    /// As [`recv`](Worker::recv).
    pub fn recv_timeout(&mut self, timeout: Duration) -> Result<Vec<u8>> {
        let mut request = Vec::new();
        self.recv_bytes(&mut request, Wait::Within(Budget::new(timeout)))?;
        Ok(request)
    }

    /// [`recv`](Worker::recv) into `request`, whose allocation is reused.
    ///
    /// # Errors
    /// As [`recv`](Worker::recv).
    pub fn recv_into(&mut self, request: &mut Vec<u8>) -> Result<()> {
        let wait = Wait::Within(Budget::new(self.config.timeout));
        self.recv_bytes(request, wait).map(drop)
    }

    /// Receives into `into`; whether there was a request (always, unless a try).
    fn recv_bytes(&mut self, into: &mut Vec<u8>, wait: Wait) -> Result<bool> {
        if !self.acquire(wait)? {
            return Ok(false);
        }
        let copied = self
            .locate()
            .and_then(|(at, len)| self.copy_bytes(at, len, into));
        self.advance();
        let released = self.release_frame();
        copied?;
        released.map(|()| true)
    }

    /// Copies the request body at `at` (`len` bytes) out of the ring into
    /// `into`'s spare capacity: no reference to the ring's bytes is made.
    fn copy_bytes(&self, at: usize, len: usize, into: &mut Vec<u8>) -> Result<()> {
        into.clear();
        into.reserve(len);
        self.request
            .read_uninit(at, &mut into.spare_capacity_mut()[..len])
            .map_err(|source| Error::Shm {
                channel: self.config.name.clone(),
                source,
            })?;
        // SAFETY: `read_uninit` initialised these `len` bytes of spare
        // capacity, which `reserve` made room for.
        unsafe { into.set_len(len) };
        Ok(())
    }
}

impl<Req: Payload, Resp: Payload> Worker<Req, Resp> {
    /// The next request, read where it lies in the ring: the guard gives the
    /// frame's bytes ([`InPlace::bytes`]) — and, typed, decodes them on
    /// demand — and holds the frame until it drops or answers
    /// ([`InPlace::respond`]). No copy and no allocation. The coordinator
    /// cannot reuse the frame while the guard lives: hold it for long and
    /// its sends wait, then time out naming this worker.
    ///
    /// # Errors
    /// As [`recv`](Worker::recv), without [`Error::Decode`] (nothing is decoded yet).
    pub fn recv_in_place(&mut self) -> Result<InPlace<'_, Req, Resp>> {
        let wait = Wait::Within(Budget::new(self.config.timeout));
        self.in_place_with(wait)
            .map(|taken| taken.expect("a waiting receive takes a request or fails"))
    }

    /// [`recv_in_place`](Worker::recv_in_place) if a request is there,
    /// without waiting.
    ///
    /// # Errors
    /// As [`recv_in_place`](Worker::recv_in_place), never [`Error::Timeout`].
    pub fn try_recv_in_place(&mut self) -> Result<Option<InPlace<'_, Req, Resp>>> {
        self.in_place_with(Wait::Try)
    }

    /// [`recv_in_place`](Worker::recv_in_place) within `timeout`.
    ///
    /// # Errors
    /// As [`recv_in_place`](Worker::recv_in_place).
    pub fn recv_in_place_timeout(&mut self, timeout: Duration) -> Result<InPlace<'_, Req, Resp>> {
        self.in_place_with(Wait::Within(Budget::new(timeout)))
            .map(|taken| taken.expect("a waiting receive takes a request or fails"))
    }

    fn in_place_with(&mut self, wait: Wait) -> Result<Option<InPlace<'_, Req, Resp>>> {
        if !self.acquire(wait)? {
            return Ok(None);
        }
        let located = self.locate();
        self.advance();
        match located {
            Ok((at, len)) => Ok(Some(InPlace::new(self, at, len))),
            Err(e) => {
                let _ = self.release_frame();
                Err(e)
            }
        }
    }

    /// Takes this worker's request-consume count: a request, unless the
    /// coordinator closed (then the wake-up of the close, given back).
    fn acquire(&mut self, wait: Wait) -> Result<bool> {
        match wait {
            Wait::Within(mut budget) => {
                self.wait_coordinator(
                    Direction::Request,
                    Role::Consume,
                    "waiting for a request",
                    &mut budget,
                )?;
            }
            Wait::Try => {
                let taken = self
                    .sem(Direction::Request, Role::Consume)
                    .try_wait()
                    .map_err(|source| Error::Sem {
                        channel: self.config.name.clone(),
                        source,
                    })?;
                if !taken {
                    // Nothing there: a dead or closed coordinator is still news.
                    self.check_coordinator(Direction::Request)?;
                    return Ok(false);
                }
            }
        }
        let header = layout::request_header(&self.request);
        // A count taken is a request, unless the coordinator closed: then it
        // may be the wake-up of the close (`sent` is read only then).
        if header.closed.load(Ordering::Acquire) != 0
            && self.received >= header.sent.load(Ordering::Acquire)
        {
            let _ = self.sem(Direction::Request, Role::Consume).post();
            return Err(Error::Closed {
                channel: self.config.name.clone(),
            });
        }
        Ok(true)
    }

    /// Where the body of the request in this worker's next frame lies, and
    /// its length, the prefix checked against the frame.
    fn locate(&self) -> Result<(usize, usize)> {
        let capacity = self.layout.request_capacity;
        let frame = self.layout.frame(self.received);
        let mut prefix = [0u8; nodeipc_proto::LEN_PREFIX];
        self.request
            .read_at(frame, &mut prefix)
            .map_err(|source| Error::Shm {
                channel: self.config.name.clone(),
                source,
            })?;
        let len = match nodeipc_proto::frame_len(&prefix, capacity) {
            // Only the prefix was copied: "truncated" is the frame it
            // announces, which fits the ring's frame.
            Ok(len) | Err(nodeipc_proto::Error::Truncated { need: len, .. }) => len,
            Err(e) => return Err(frame_error(&self.config.name, self.rank, capacity, e)),
        };
        Ok((frame + prefix.len(), len - prefix.len()))
    }

    /// Counts the request taken, where a rejoining worker would resume.
    fn advance(&mut self) {
        // Where a rejoining worker resumes was read from its entry, which
        // any process mapping the region may have written: never overflow.
        self.received = self.received.wrapping_add(1);
        self.layout
            .worker(&self.response, self.rank)
            .received
            .store(self.received, Ordering::Release);
    }
}

/// A request frame that could not be decoded, as the channel's error.
fn frame_error(channel: &str, rank: u32, capacity: usize, error: nodeipc_proto::Error) -> Error {
    match error {
        nodeipc_proto::Error::TooLarge { size, .. }
        | nodeipc_proto::Error::Truncated { need: size, .. } => Error::Corrupt {
            channel: channel.to_owned(),
            rank,
            slot: "request frame",
            len: size as u64,
            slot_size: capacity,
        },
        nodeipc_proto::Error::Decode(source) => Error::Decode {
            channel: channel.to_owned(),
            rank,
            slot: "request frame",
            source,
        },
        source => Error::Proto {
            context: format!("channel {channel}"),
            source,
        },
    }
}
