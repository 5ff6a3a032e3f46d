//! [`InPlace`]: a request read where it lies in the ring.

use super::{SlotKind, Worker};
use crate::payload::Raw;
use crate::{Error, Result};

/// A request held in place in the ring: its frame's bytes, borrowed from the
/// worker for as long as this guard lives. Dropping the guard (or answering
/// through it) gives the frame back to the coordinator.
///
/// Sound because the worker maps the ring read-only and the coordinator does
/// not write a frame until every worker has released it: while the guard
/// lives, no process of the channel writes these bytes. (A process of our
/// uid outside the channel that opens the ring's name, while it has one, or
/// ptraces the coordinator could; see the crate's README.)
///
/// A typed worker's guard decodes the bytes on demand and answers with a
/// message; a [`Raw`] worker's answers with bytes.
///
/// # Examples
/// ```no_run
/// # use nodeipc_channel::{Raw, Worker};
/// # fn f(worker: &mut Worker<Raw, Raw>) -> nodeipc_channel::Result<()> {
/// let request = worker.recv_in_place()?;
/// let digest = request.bytes().iter().fold(0u64, |h, &b| h.rotate_left(5) ^ u64::from(b));
/// request.respond(&digest.to_le_bytes())?;
/// # Ok(()) }
/// ```
pub struct InPlace<'w, Req, Resp> {
    worker: &'w mut Worker<Req, Resp>,
    /// Offset of the body in the request region, and its length: checked
    /// against the frame when the request was taken.
    at: usize,
    len: usize,
    released: bool,
}

impl<'w, Req, Resp> InPlace<'w, Req, Resp> {
    pub(super) fn new(worker: &'w mut Worker<Req, Resp>, at: usize, len: usize) -> Self {
        InPlace {
            worker,
            at,
            len,
            released: false,
        }
    }

    /// The request's bytes (the frame's body, without its length prefix).
    pub fn bytes(&self) -> &[u8] {
        body(self.worker, self.at, self.len)
    }

    /// The request's index (0, 1, …: the coordinator's `send` returned it).
    pub fn index(&self) -> u64 {
        self.worker.received.wrapping_sub(1)
    }

    /// Releases the frame now, reporting a failure to (dropping the guard
    /// releases it too, silently).
    ///
    /// # Errors
    /// [`Error::Sem`] if the coordinator's semaphore cannot be posted.
    pub fn release(mut self) -> Result<()> {
        self.release_inner()
    }

    fn release_inner(&mut self) -> Result<()> {
        if std::mem::replace(&mut self.released, true) {
            return Ok(());
        }
        self.worker.release_frame()
    }
}

impl<Req, Resp> InPlace<'_, Req, Resp>
where
    Req: prost::Message + Default + 'static,
    Resp: prost::Message + Default + 'static,
{
    /// Decodes the request into a new message (its `bytes` and `string`
    /// fields are copies).
    ///
    /// # Errors
    /// [`Error::Decode`] for bytes that are not a `Req`.
    pub fn decode(&self) -> Result<Req> {
        let mut request = Req::default();
        self.decode_into(&mut request)?;
        Ok(request)
    }

    /// Decodes the request into `request`, reusing its allocations.
    ///
    /// # Errors
    /// As [`decode`](InPlace::decode).
    pub fn decode_into(&self, request: &mut Req) -> Result<()> {
        request.clear();
        request.merge(self.bytes()).map_err(|source| Error::Decode {
            channel: self.worker.config.name.clone(),
            rank: self.worker.rank,
            slot: "request frame",
            source,
        })
    }

    /// Answers the request (as [`Worker::respond`]) and releases its frame.
    ///
    /// # Errors
    /// As [`Worker::respond`]; the frame is released either way.
    pub fn respond(mut self, response: &Resp) -> Result<()> {
        let answered =
            self.worker
                .respond_message(response, SlotKind::Response, Some(&mut self.released));
        let released = self.release_inner();
        answered.and(released)
    }
}

impl InPlace<'_, Raw, Raw> {
    /// Answers the request with bytes of any encoding (as the raw
    /// [`Worker::respond`]) and releases its frame.
    ///
    /// # Errors
    /// As [`Worker::respond`]; the frame is released either way.
    pub fn respond(mut self, response: &[u8]) -> Result<()> {
        let answered =
            self.worker
                .respond_frame(response, SlotKind::Response, Some(&mut self.released));
        let released = self.release_inner();
        answered.and(released)
    }

    /// Answers the request with `len` bytes that `fill` writes straight
    /// into the response slot (as [`Worker::respond_with`]), the request's
    /// bytes still readable in it; then releases its frame.
    ///
    /// # Errors
    /// As [`Worker::respond`]; the frame is released either way.
    pub fn respond_with(mut self, len: usize, fill: impl FnOnce(&[u8], &mut [u8])) -> Result<()> {
        let InPlace {
            worker,
            at,
            len: request_len,
            released,
        } = &mut self;
        let request = body(worker, *at, *request_len);
        let answered = worker.respond_frame_with(len, SlotKind::Response, Some(released), |out| {
            fill(request, out)
        });
        let released = self.release_inner();
        answered.and(released)
    }
}

/// The body of the request an [`InPlace`] guard holds (`at`, `len` its
/// checked place), borrowed for as long as the worker is.
fn body<Req, Resp>(worker: &Worker<Req, Resp>, at: usize, len: usize) -> &[u8] {
    // SAFETY: the range was checked against the frame when the request was
    // taken; this worker maps the ring read-only, and the coordinator
    // writes the frame again only after this worker's request-produce post,
    // which happens when the guard holding the request is released (the
    // callers borrow from a live guard).
    unsafe { worker.request.bytes(at, len) }.expect("the body was checked to lie in its frame")
}

impl<Req, Resp> Drop for InPlace<'_, Req, Resp> {
    fn drop(&mut self) {
        // In a child forked since the worker joined, the frame is the
        // parent's to release (it still holds it).
        if !self.worker.born.is_forked() {
            let _ = self.release_inner();
        }
    }
}
