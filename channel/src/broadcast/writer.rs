//! [`Writer`]: the ring's one writer.

use std::sync::atomic::{Ordering, fence};
use std::time::Duration;

use nodeipc_fdpass::{ForkGeneration, Identity, PeerWatch};
use nodeipc_shm::Region;
use nodeipc_shm::wait::{Deadline, Spin, wait_while, wake_if_parked};

use super::error::{Waited, list, paced_wait_failed, waited};
use super::layout::{self, Layout};
use super::{Behind, Broadcast, Error, Result, Wait, ready_pacer};

mod readers;

/// A wait that has spun once already: park at once.
pub(super) const PARK_AT_ONCE: Spin = Spin {
    polls: 0,
    yield_for: Duration::ZERO,
    snooze: false,
};

/// What the writer knows of one reader, privately: nothing here is read
/// back from shared memory without a check.
#[derive(Debug, Default)]
struct Follower {
    /// Its position as last read (checked: never backwards, never past the head).
    tail: u64,
    /// The writer goes on without it.
    dropped: bool,
    /// Its process, once it has joined.
    who: Option<Identity>,
    watch: PeerWatch,
}

/// The writer of a broadcast ring (see [`Broadcast`]).
///
/// Not `Clone`: one writer per ring. Dropping it closes the ring: readers
/// read what was sent, then get [`Error::WriterClosed`].
pub struct Writer {
    region: Region,
    layout: Layout,
    config: Broadcast,
    /// Chunks published.
    head: u64,
    /// Messages started.
    msgs: u64,
    /// The message each chunk slot last held.
    chunk_msg: Vec<u64>,
    followers: Vec<Follower>,
    /// The lowest position of a reader still followed, as last computed.
    min_tail: u64,
    /// A loan's length, while one is open.
    loan: Option<usize>,
    born: ForkGeneration,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("name", &self.config.name)
            .field("head", &self.head)
            .field("msgs", &self.msgs)
            .finish_non_exhaustive()
    }
}

impl Writer {
    pub(super) fn create(config: &Broadcast) -> Result<Writer> {
        let name = &config.name;
        let layout = Layout::new(name, config.readers, config.chunks, config.chunk_bytes)?;
        let shm = |source| Error::Shm {
            name: name.clone(),
            source,
        };
        let me = Identity::current().map_err(|source| Error::FdPass {
            name: name.clone(),
            source,
        })?;
        let region = Region::create(name, layout.size).map_err(shm)?;
        let header = layout.header(&region);
        header.version.store(layout::VERSION, Ordering::Relaxed);
        header.readers.store(layout.readers, Ordering::Relaxed);
        header.chunks.store(layout.chunks, Ordering::Relaxed);
        header
            .chunk_bytes
            .store(layout.chunk_bytes as u64, Ordering::Relaxed);
        header.writer_pid.store(me.pid, Ordering::Relaxed);
        header.writer_start.store(me.start_time, Ordering::Relaxed);
        // The magic last: a reader that sees it sees the rest.
        header.magic.store(layout::MAGIC, Ordering::Release);
        Ok(Writer {
            region,
            layout,
            config: config.clone(),
            head: 0,
            msgs: 0,
            chunk_msg: vec![0; layout.chunks as usize],
            followers: (0..layout.readers).map(|_| Follower::default()).collect(),
            min_tail: 0,
            loan: None,
            born: ForkGeneration::current(),
        })
    }

    /// The ring's shape and waits, to hand to readers.
    pub fn config(&self) -> &Broadcast {
        &self.config
    }

    /// Messages sent (started) so far.
    pub fn sent(&self) -> u64 {
        self.msgs
    }

    /// Waits (up to `timeout`) until every reader not dropped has joined,
    /// then removes the region's name: from here on a crash of any process
    /// leaves nothing behind.
    ///
    /// # Errors
    /// [`Error::Timeout`] naming the readers missing; [`Error::ReaderDied`];
    /// [`Error::Interrupted`].
    pub fn wait_until_ready(&mut self, timeout: Duration) -> Result<()> {
        let mut pacer = ready_pacer(timeout);
        loop {
            let mut missing = Vec::new();
            for rank in 0..self.layout.readers {
                if self.followers[rank as usize].dropped {
                    continue;
                }
                match self.joined(rank) {
                    Some(_) => self.check_alive(rank)?,
                    None => missing.push(rank),
                }
            }
            if missing.is_empty() {
                break;
            }
            pacer.pause_interruptible().map_err(|stop| {
                let what = format!("waiting for readers {missing:?} to join");
                paced_wait_failed(&self.config.name, what, stop)
            })?;
        }
        let header = self.layout.header(&self.region);
        header.flags.fetch_or(layout::READY, Ordering::Release);
        self.region.unlink_now().map_err(|source| Error::Shm {
            name: self.config.name.clone(),
            source,
        })
    }

    /// Sends `bytes` to every reader, waiting for room as the ring's
    /// timeout allows. Returns the message's index.
    ///
    /// # Errors
    /// [`Error::Full`] naming the readers behind; [`Error::ReaderDied`] /
    /// [`Error::ReaderLeft`] (go on with [`drop_reader`](Writer::drop_reader));
    /// [`Error::Corrupt`] when a reader's position is not one the protocol
    /// allows; [`Error::Interrupted`].
    pub fn send(&mut self, bytes: &[u8]) -> Result<u64> {
        self.send_parts_within(&[bytes], Wait::Within(self.config.timeout))
    }

    /// As [`send`](Writer::send), never waiting: [`Error::Full`] at once
    /// when the whole message has no room now (nothing is written then).
    ///
    /// # Errors
    /// As [`send`](Writer::send).
    pub fn try_send(&mut self, bytes: &[u8]) -> Result<u64> {
        self.send_parts_within(&[bytes], Wait::Try)
    }

    /// As [`send`](Writer::send), waiting up to `timeout`.
    ///
    /// # Errors
    /// As [`send`](Writer::send).
    pub fn send_timeout(&mut self, bytes: &[u8], timeout: Duration) -> Result<u64> {
        self.send_parts_within(&[bytes], Wait::Within(Some(timeout)))
    }

    /// Sends the concatenation of `parts` as one message (a pickle and its
    /// out-of-band buffers, say), each copied once, straight into the ring.
    ///
    /// # Errors
    /// As [`send`](Writer::send).
    pub fn send_parts(&mut self, parts: &[&[u8]], timeout: Option<Duration>) -> Result<u64> {
        self.send_parts_within(parts, Wait::Within(timeout))
    }

    /// Sends a message of `len` bytes that `fill` writes in place: in the
    /// ring itself when it fits one chunk, else in a private buffer then
    /// streamed. Nothing is sent if `fill` panics.
    ///
    /// # Errors
    /// As [`send`](Writer::send).
    pub fn send_bytes_with(&mut self, len: usize, fill: impl FnOnce(&mut [u8])) -> Result<u64> {
        if len <= self.layout.chunk_bytes {
            let mut loan = self.loan(len, self.config.timeout)?;
            fill(loan.bytes_mut());
            return loan.commit();
        }
        let mut staged = vec![0; len];
        fill(&mut staged);
        self.send(&staged)
    }

    /// Lends the next chunk's first `len` bytes (at most a chunk) to write a
    /// message in place; [`Loan::commit`] sends it, dropping the loan sends
    /// nothing.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for more than a chunk; as [`send`](Writer::send).
    pub fn loan(&mut self, len: usize, timeout: Option<Duration>) -> Result<Loan<'_>> {
        let at = self.begin_loan(len, timeout)?;
        Ok(Loan {
            writer: self,
            at,
            len,
        })
    }

    /// The first half of a loan for a binding that cannot hold a [`Loan`]
    /// across calls: waits for a chunk and returns where its bytes start in
    /// the region ([`region_ptr`](Writer::region_ptr) + that). Until
    /// [`commit_loan`](Writer::commit_loan) or
    /// [`abort_loan`](Writer::abort_loan), this process alone may write
    /// those `len` bytes, and no other call may be made.
    ///
    /// # Errors
    /// As [`loan`](Writer::loan); [`Error::Usage`] when a loan is open.
    pub fn begin_loan(&mut self, len: usize, timeout: Option<Duration>) -> Result<usize> {
        if self.loan.is_some() {
            return Err(self.usage("a loan is already open"));
        }
        if len > self.layout.chunk_bytes {
            return Err(Error::InvalidConfig {
                name: self.config.name.clone(),
                reason: format!(
                    "a loan of {len} bytes is larger than a chunk ({} bytes)",
                    self.layout.chunk_bytes
                ),
            });
        }
        self.wait_room(1, &mut Deadline::after(timeout), Wait::Within(timeout))?;
        self.invalidate();
        self.loan = Some(len);
        Ok(self.layout.chunk_data(self.head))
    }

    /// Sends what was written in the open loan.
    ///
    /// # Errors
    /// [`Error::Usage`] when no loan is open.
    pub fn commit_loan(&mut self) -> Result<u64> {
        let len = self
            .loan
            .take()
            .ok_or_else(|| self.usage("no loan is open"))?;
        let msg = self.msgs;
        self.msgs += 1;
        self.publish(msg, len as u64, 0);
        Ok(msg)
    }

    /// Closes the open loan without sending (nothing to do if none is open).
    pub fn abort_loan(&mut self) {
        self.loan = None;
    }

    /// The start of the region's mapping, for [`begin_loan`](Writer::begin_loan).
    pub fn region_ptr(&self) -> *mut u8 {
        self.region.as_ptr()
    }

    /// Goes on without reader `rank`: the writer no longer waits for it
    /// (a dead reader, say). It cannot come back.
    ///
    /// # Errors
    /// [`Error::NoSuchRank`].
    pub fn drop_reader(&mut self, rank: u32) -> Result<()> {
        self.check_rank(rank)?;
        self.followers[rank as usize].dropped = true;
        self.layout
            .slot(&self.region, rank)
            .dropped
            .store(1, Ordering::Release);
        Ok(())
    }

    /// Every reader still followed that has not read everything sent,
    /// with how far behind it is (its position read now).
    ///
    /// # Errors
    /// [`Error::Corrupt`] when a reader's position is not one the protocol
    /// allows.
    pub fn behind(&mut self) -> Result<Vec<Behind>> {
        self.refresh_tails()?;
        let ring = u64::from(self.layout.chunks);
        Ok(self.behind_by(ring))
    }

    fn check_rank(&self, rank: u32) -> Result<()> {
        if rank >= self.layout.readers {
            return Err(Error::NoSuchRank {
                name: self.config.name.clone(),
                rank,
                readers: self.layout.readers,
            });
        }
        Ok(())
    }

    fn usage(&self, what: &'static str) -> Error {
        Error::Usage {
            name: self.config.name.clone(),
            what,
        }
    }

    fn send_parts_within(&mut self, parts: &[&[u8]], wait: Wait) -> Result<u64> {
        if self.loan.is_some() {
            return Err(self.usage("a loan is open: commit or abort it first"));
        }
        let total = parts
            .iter()
            .try_fold(0usize, |sum, part| sum.checked_add(part.len()))
            .ok_or_else(|| self.usage("the parts' total length overflows"))?;
        let cap = self.layout.chunk_bytes;
        let chunks = total.div_ceil(cap).max(1) as u64;
        let ring = u64::from(self.layout.chunks);
        let mut deadline = Deadline::after(match wait {
            Wait::Try => Some(Duration::ZERO),
            Wait::Within(limit) => limit,
        });
        // A message the ring holds whole waits for all its room first, so it
        // never stops part way; a larger one streams chunk by chunk.
        if chunks <= ring {
            self.wait_room(chunks, &mut deadline, wait)?;
        }
        let msg = self.msgs;
        let mut cursor = Cursor {
            parts,
            part: 0,
            at: 0,
        };
        for k in 0..chunks {
            if chunks > ring {
                // On an error part way, readers see the next message's
                // first chunk where this one's next was due, and drop this
                // one (its index was taken with its first chunk).
                self.wait_room(1, &mut deadline, wait)?;
            }
            let offset = k * cap as u64;
            let piece = (total as u64 - offset).min(cap as u64) as usize;
            self.invalidate();
            let mut at = self.layout.chunk_data(self.head);
            cursor.take(piece, |bytes| {
                self.region
                    .write_at(at, bytes)
                    .expect("a chunk's bytes lie in the region");
                at += bytes.len();
            });
            if k == 0 {
                self.msgs += 1;
            }
            self.publish(msg, total as u64, offset);
        }
        Ok(msg)
    }

    /// Marks the chunk at the head as being written (sequence 0), before
    /// its bytes change: a reader copying it meanwhile sees the change.
    fn invalidate(&self) {
        let chunk = self.layout.chunk(&self.region, self.head);
        chunk.seq.store(0, Ordering::Relaxed);
        fence(Ordering::Release);
    }

    /// Publishes the chunk at the head (its bytes written) as `offset` of
    /// message `msg` of `total` bytes, and wakes parked readers.
    fn publish(&mut self, msg: u64, total: u64, offset: u64) {
        let chunk = self.layout.chunk(&self.region, self.head);
        chunk.msg.store(msg, Ordering::Relaxed);
        chunk.total.store(total, Ordering::Relaxed);
        chunk.offset.store(offset, Ordering::Relaxed);
        chunk.seq.store(self.head + 1, Ordering::Release);
        let index = (self.head % u64::from(self.layout.chunks)) as usize;
        self.chunk_msg[index] = msg;
        self.head += 1;
        let published = self.layout.published(&self.region);
        published.head.store(self.head, Ordering::Release);
        published.word.store(self.head as u32, Ordering::Release);
        // Pairs with a parking reader's announce-then-look (see
        // `nodeipc_shm::wait::wait_while`).
        fence(Ordering::SeqCst);
        let _ = wake_if_parked(&published.word, &published.parked, u32::MAX);
    }

    /// Waits until `need` chunks from the head are free, within `deadline`.
    fn wait_room(&mut self, need: u64, deadline: &mut Deadline, wait: Wait) -> Result<()> {
        let ring = u64::from(self.layout.chunks);
        // Cheap: the last computed minimum may already leave room.
        if self.head + need - self.min_tail <= ring {
            return Ok(());
        }
        let mut spin = self.config.spin;
        let mut next_warning = self.config.warn_every;
        loop {
            let released = self.layout.released(&self.region);
            // The word before the positions: a release after this load
            // changes it, so the wait below cannot miss it.
            let seen = released.word.load(Ordering::Acquire);
            self.refresh_tails()?;
            if self.head + need - self.min_tail <= ring {
                return Ok(());
            }
            if matches!(wait, Wait::Try) {
                return Err(self.full(need, Duration::ZERO));
            }
            let released = self.layout.released(&self.region);
            // One park slice, then back here to look at the readers.
            let mut slices = 0;
            let outcome = wait_while(
                &released.word,
                &released.parked,
                seen,
                deadline,
                spin,
                || {
                    slices += 1;
                    if slices > 1 { Err(()) } else { Ok(()) }
                },
            );
            let what = || format!("waiting for room ({})", list(&self.behind_by(need)));
            match waited(&self.config.name, what, outcome)? {
                Waited::Moved => continue,
                Waited::Slice => {}
                Waited::TimedOut(waited) => {
                    self.refresh_tails()?;
                    if self.head + need - self.min_tail <= ring {
                        return Ok(());
                    }
                    for b in self.behind_by(need) {
                        self.check_alive(b.rank)?;
                    }
                    return Err(self.full(need, waited));
                }
            }
            // Past the first slice: no more spinning, park at once.
            spin = PARK_AT_ONCE;
            self.refresh_tails()?;
            for b in self.behind_by(need) {
                self.check_alive(b.rank)?;
            }
            if let (Some(every), Some(at)) = (self.config.warn_every, next_warning) {
                let waited = deadline.waited();
                if waited >= at {
                    log::warn!(
                        "broadcast ring {}: no free chunk for {waited:?}; waiting for {}",
                        self.config.name,
                        list(&self.behind_by(need))
                    );
                    next_warning = Some(at + every);
                }
            }
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // A forked child's copy tells the readers nothing: the ring is its
        // parent's.
        if self.born.is_forked() {
            return;
        }
        let header = self.layout.header(&self.region);
        header.flags.fetch_or(layout::CLOSED, Ordering::SeqCst);
        let published = self.layout.published(&self.region);
        published.word.fetch_add(1, Ordering::SeqCst);
        let _ = nodeipc_shm::wait::unpark(&published.word, u32::MAX);
    }
}

/// A chunk lent to write one message in place ([`Writer::loan`]).
pub struct Loan<'w> {
    writer: &'w mut Writer,
    at: usize,
    len: usize,
}

impl Loan<'_> {
    /// The message's bytes, in the ring: no reader reads them before
    /// [`commit`](Loan::commit) publishes the chunk, and no reader writes a
    /// chunk (a process that breaks the protocol and does is what readers'
    /// checks after the copy catch).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: `begin_loan` waited until every reader released this
        // chunk and marked it unwritten; readers read a chunk only once it
        // is published, which `commit` does after this borrow ends; the
        // range lies in the region (`chunk_data` of a layout the region
        // was made for) and the writer maps it writable.
        unsafe { self.writer.region.bytes_mut(self.at, self.len) }
            .expect("a chunk's bytes lie in the writable region")
    }

    /// Sends the message.
    ///
    /// # Errors
    /// None in practice (the loan is open).
    pub fn commit(self) -> Result<u64> {
        let mut this = std::mem::ManuallyDrop::new(self);
        this.writer.commit_loan()
    }
}

impl Drop for Loan<'_> {
    fn drop(&mut self) {
        self.writer.abort_loan();
    }
}

/// Walks the parts of a message, handing out pieces.
struct Cursor<'p> {
    parts: &'p [&'p [u8]],
    part: usize,
    at: usize,
}

impl Cursor<'_> {
    fn take(&mut self, mut len: usize, mut sink: impl FnMut(&[u8])) {
        while len > 0 {
            let part = self.parts[self.part];
            let n = (part.len() - self.at).min(len);
            if n > 0 {
                sink(&part[self.at..self.at + n]);
            }
            self.at += n;
            len -= n;
            if self.at == part.len() {
                self.part += 1;
                self.at = 0;
            }
        }
    }
}
