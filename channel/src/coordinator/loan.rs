//! A request written in place: the frame lent to the caller
//! ([`RequestLoan`]), or filled by a closure
//! ([`send_with`](Coordinator::send_with)).

use std::time::Duration;

use super::{Coordinator, Shared, Turn, TurnGuard};
use crate::payload::Raw;
use crate::wait::{Budget, Wait};
use crate::{Error, Result};

impl Coordinator<Raw, Raw> {
    /// Broadcasts a request of `len` bytes that `fill` writes straight into
    /// the request frame (no copy of the payload: build it there). Waits for
    /// the frames as [`send`](Coordinator::send) does; nothing is sent if
    /// `fill` panics.
    ///
    /// # Errors
    /// As [`send`](Coordinator::send).
    ///
    /// # Examples
    /// ```no_run
    /// # use nodeipc_channel::{Coordinator, Raw};
    /// # fn f(coordinator: &Coordinator<Raw, Raw>) -> nodeipc_channel::Result<()> {
    /// let index = coordinator.send_with(1 << 20, |frame| {
    ///     for (i, chunk) in frame.chunks_mut(8).enumerate() {
    ///         chunk.copy_from_slice(&(i as u64).to_le_bytes());
    ///     }
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn send_with(&self, len: usize, fill: impl FnOnce(&mut [u8])) -> Result<u64> {
        let mut loan = self.loan(len)?;
        fill(loan.bytes_mut());
        loan.commit()
    }

    /// Lends the next request frame's `len` bytes, once every worker has
    /// freed it (waiting as [`send`](Coordinator::send) does):
    /// [`RequestLoan::commit`] broadcasts what was written there, dropping
    /// the loan sends nothing. The loan holds this thread's turn as the
    /// sender: another thread's send meanwhile is [`Error::Busy`].
    ///
    /// # Errors
    /// As [`send`](Coordinator::send) ([`Error::TooLarge`] for more than a
    /// frame holds, before any wait).
    pub fn loan(&self, len: usize) -> Result<RequestLoan<'_>> {
        let wait = Wait::Within(self.default_budget());
        Ok(self
            .lend("loan", len, wait)?
            .expect("a loan that may wait lends or fails"))
    }

    /// [`loan`](Coordinator::loan) without waiting: `None` (nothing taken)
    /// while a worker has no free frame.
    ///
    /// # Errors
    /// As [`loan`](Coordinator::loan), never [`Error::Timeout`].
    pub fn try_loan(&self, len: usize) -> Result<Option<RequestLoan<'_>>> {
        self.lend("try_loan", len, Wait::Try)
    }

    /// [`loan`](Coordinator::loan) within `timeout`. A timeout leaves the
    /// channel as it was: nothing is taken.
    ///
    /// # Errors
    /// As [`loan`](Coordinator::loan).
    pub fn loan_timeout(&self, len: usize, timeout: Duration) -> Result<RequestLoan<'_>> {
        let wait = Wait::Within(Budget::new(timeout));
        Ok(self
            .lend("loan_timeout", len, wait)?
            .expect("a loan that may wait lends or fails"))
    }

    fn lend(
        &self,
        op: &'static str,
        len: usize,
        mut wait: Wait,
    ) -> Result<Option<RequestLoan<'_>>> {
        let turn = self.shared.turn(Turn::Send, op)?;
        let Some(frame) = self.shared.reserve(len, &mut wait)? else {
            return Ok(None);
        };
        // From here the loan owns the frames: dropped on an error below, it
        // gives them back.
        let loan = RequestLoan {
            shared: &self.shared,
            index: frame.index,
            at: frame.at + nodeipc_proto::LEN_PREFIX,
            len,
            committed: false,
            _turn: turn,
        };
        // `reserve` checked `len + LEN_PREFIX` against the frame, at most
        // MAX_SLOT (1 GiB): the length fits the u32 prefix.
        let prefix = (len as u32).to_le_bytes();
        self.shared
            .request
            .write_at(frame.at, &prefix)
            .map_err(|source| Error::Shm {
                channel: self.shared.config.name.clone(),
                source,
            })?;
        Ok(Some(loan))
    }
}

/// A request frame lent to write one request in place
/// ([`Coordinator::loan`]): [`bytes_mut`](RequestLoan::bytes_mut) is the
/// frame's body, [`commit`](RequestLoan::commit) broadcasts it (consuming
/// the loan: no byte of it can be touched after), dropping the loan sends
/// nothing and gives the frame back.
///
/// The bytes hold whatever the frame last held (an earlier request of this
/// coordinator) until written.
///
/// A committed loan is gone, by type: its bytes cannot be reached after.
/// ```compile_fail,E0382
/// # use nodeipc_channel::{Coordinator, Raw};
/// # fn f(coordinator: &Coordinator<Raw, Raw>) -> nodeipc_channel::Result<()> {
/// let mut loan = coordinator.loan(4)?;
/// loan.bytes_mut().copy_from_slice(b"step");
/// loan.commit()?;
/// loan.bytes_mut()[0] = b'X'; // moved: does not compile
/// # Ok(()) }
/// ```
pub struct RequestLoan<'c> {
    shared: &'c Shared,
    index: u64,
    /// Where the body starts in the request region, and its length: checked
    /// against the frame when it was taken.
    at: usize,
    len: usize,
    committed: bool,
    /// Dropped after `Drop::drop` has given the frames back.
    _turn: TurnGuard<'c>,
}

impl RequestLoan<'_> {
    /// The request's bytes, in the frame every worker will read.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: the loan holds every worker's request-produce count for
        // this frame, so by the channel's protocol no process reads or
        // writes it until `commit` posts the consume semaphores (workers
        // map the ring read-only), and the loan holds the sender's turn, so
        // no other thread of ours writes it; the range was checked against
        // the frame when it was taken; `&mut self` keeps the slice unique.
        unsafe { self.shared.request.bytes_mut(self.at, self.len) }
            .expect("the body was checked to lie in its frame")
    }

    /// The request's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the request is empty (0 bytes).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The index the request gets when committed (0, 1, …).
    pub fn index(&self) -> u64 {
        self.index
    }

    /// Broadcasts the request to every worker; returns its index.
    ///
    /// # Errors
    /// [`Error::Sem`] if a worker's semaphore cannot be posted.
    pub fn commit(mut self) -> Result<u64> {
        // Announced (even if a post fails part way): never given back.
        self.committed = true;
        self.shared
            .publish(self.index, self.len + nodeipc_proto::LEN_PREFIX)
    }
}

impl std::fmt::Debug for RequestLoan<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestLoan")
            .field("channel", &self.shared.config.name)
            .field("index", &self.index)
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

impl Drop for RequestLoan<'_> {
    fn drop(&mut self) {
        // Not committed: nothing announced, the frames go back (in a child
        // forked since, they are the parent's to give back: it holds them).
        if !self.committed && !self.shared.born.is_forked() {
            self.shared.give_back(self.shared.config.workers);
        }
    }
}
