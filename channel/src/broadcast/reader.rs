//! [`Reader`]: one of the ring's readers.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering, fence};
use std::time::Duration;

use nodeipc_fdpass::{ForkGeneration, Identity, PeerWatch};
use nodeipc_shm::wait::{Deadline, Pacer, wait_while, wake_if_parked};
use nodeipc_shm::{OpenOptions, Region};

use super::error::{Waited, paced_wait_failed, waited};
use super::layout::{self, Layout};
use super::writer::PARK_AT_ONCE;
use super::{Broadcast, Error, Result, Wait, ready_pacer};

/// A message being assembled from its chunks (kept across a timeout).
#[derive(Debug)]
struct Partial {
    msg: u64,
    total: u64,
    got: u64,
    /// `None`: the message is too large for this reader and is skipped.
    buf: Option<Vec<u8>>,
}

/// A reader of a broadcast ring (see [`Broadcast`]): every message, in order.
///
/// Dropping it tells the writer it left ([`Error::ReaderLeft`] if the
/// writer then waits for it).
pub struct Reader {
    region: Region,
    layout: Layout,
    config: Broadcast,
    rank: u32,
    /// Chunks read and released.
    pos: u64,
    /// The next message's index.
    msg: u64,
    writer: Identity,
    watch: PeerWatch,
    partial: Option<Partial>,
    /// A message's buffer handed back ([`Reader::recycle`]): the next
    /// message is copied into it.
    spare: Option<Vec<u8>>,
    /// Set once shared memory was found broken: every later call fails so.
    failed: Option<String>,
    /// Set through a [`StopHandle`]: waits end with [`Error::Stopped`].
    stop: Arc<AtomicBool>,
    born: ForkGeneration,
}

/// Ends a [`Reader`]'s waits from another thread ([`Reader::stop_handle`]).
#[derive(Clone, Debug)]
pub struct StopHandle(Arc<AtomicBool>);

impl StopHandle {
    /// Makes the reader's current wait (within a wait slice, 50 ms) and
    /// every later one end with [`Error::Stopped`]; messages already
    /// published are still handed out.
    pub fn stop(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("name", &self.config.name)
            .field("rank", &self.rank)
            .field("pos", &self.pos)
            .finish_non_exhaustive()
    }
}

impl Reader {
    pub(super) fn join(config: &Broadcast, rank: u32) -> Result<Reader> {
        let name = &config.name;
        let layout = Layout::new(name, config.readers, config.chunks, config.chunk_bytes)?;
        if rank >= layout.readers {
            return Err(Error::NoSuchRank {
                name: name.clone(),
                rank,
                readers: layout.readers,
            });
        }
        let shm = |source| Error::Shm {
            name: name.clone(),
            source,
        };
        // The header first: a ring of another shape is named as such, not
        // waited for until it grows to this shape's size.
        let region =
            Region::open(name, OpenOptions::wait(layout::HEADER, config.join_wait)).map_err(shm)?;
        let header = layout.header(&region);
        // The writer stores the magic last (the region is there before it is
        // filled in): wait for it within the same bound.
        let mut pacer = Pacer::new(
            Duration::from_micros(20),
            Duration::from_millis(2),
            Some(config.join_wait),
        );
        while header.magic.load(Ordering::Acquire) != layout::MAGIC {
            pacer.pause().map_err(|waited| Error::Timeout {
                name: name.clone(),
                what: "waiting for the writer to fill in the ring's header".to_owned(),
                waited,
            })?;
        }
        let mismatch = |what, ours: u64, theirs: u64| Error::Mismatch {
            name: name.clone(),
            what,
            ours,
            theirs,
        };
        let checks = [
            (
                "layout version",
                u64::from(layout::VERSION),
                u64::from(header.version.load(Ordering::Relaxed)),
            ),
            (
                "readers",
                u64::from(layout.readers),
                u64::from(header.readers.load(Ordering::Relaxed)),
            ),
            (
                "chunks",
                u64::from(layout.chunks),
                u64::from(header.chunks.load(Ordering::Relaxed)),
            ),
            (
                "chunk bytes",
                layout.chunk_bytes as u64,
                header.chunk_bytes.load(Ordering::Relaxed),
            ),
        ];
        for (what, ours, theirs) in checks {
            if ours != theirs {
                return Err(mismatch(what, ours, theirs));
            }
        }
        if region.len() < layout.size {
            return Err(mismatch(
                "region size",
                layout.size as u64,
                region.len() as u64,
            ));
        }
        let writer = Identity {
            pid: header.writer_pid.load(Ordering::Relaxed),
            start_time: header.writer_start.load(Ordering::Relaxed),
        };
        let me = Identity::current().map_err(|source| Error::FdPass {
            name: name.clone(),
            source,
        })?;
        let slot = layout.slot(&region, rank);
        if let Err(state) = slot.state.compare_exchange(
            layout::FREE,
            layout::CLAIMING,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            let _ = state;
            return Err(Error::RankTaken {
                name: name.clone(),
                rank,
                pid: slot.pid.load(Ordering::Relaxed),
            });
        }
        slot.pid.store(me.pid, Ordering::Relaxed);
        slot.start_time.store(me.start_time, Ordering::Relaxed);
        slot.tail.store(0, Ordering::Relaxed);
        slot.state.store(layout::JOINED, Ordering::Release);
        Ok(Reader {
            region,
            layout,
            config: config.clone(),
            rank,
            pos: 0,
            msg: 0,
            writer,
            watch: PeerWatch::new(),
            partial: None,
            spare: None,
            failed: None,
            stop: Arc::new(AtomicBool::new(false)),
            born: ForkGeneration::current(),
        })
    }

    /// This reader's rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The writer's process, as the ring's header named it at join.
    pub fn writer_pid(&self) -> u32 {
        self.writer.pid
    }

    /// A handle that ends this reader's waits from another thread.
    pub fn stop_handle(&self) -> StopHandle {
        StopHandle(Arc::clone(&self.stop))
    }

    /// Messages read so far.
    pub fn received(&self) -> u64 {
        self.msg
    }

    /// Whether the writer has published past our position.
    fn writer_ahead(&self) -> bool {
        self.layout
            .published(&self.region)
            .head
            .load(Ordering::Acquire)
            > self.pos
    }

    /// Waits (up to `timeout`) until the writer has seen every reader join.
    ///
    /// # Errors
    /// [`Error::Timeout`]; [`Error::WriterDied`]; [`Error::Interrupted`].
    pub fn wait_until_ready(&mut self, timeout: Duration) -> Result<()> {
        let mut pacer = ready_pacer(timeout);
        loop {
            let flags = self
                .layout
                .header(&self.region)
                .flags
                .load(Ordering::Acquire);
            if flags & layout::READY != 0 {
                return Ok(());
            }
            self.check_writer()?;
            pacer.pause_interruptible().map_err(|stop| {
                let what = "waiting for the other readers to join".to_owned();
                paced_wait_failed(&self.config.name, what, stop)
            })?;
        }
    }

    /// Hands a message's buffer back: the next message is copied into it
    /// instead of into fresh memory, so a reader that recycles what it read
    /// allocates nothing per message and, for large ones, takes no page
    /// faults (a fresh allocation of a megabyte or more is new pages each
    /// time). A buffer larger than the ring holds at once is dropped.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        let ring = self
            .layout
            .chunk_bytes
            .saturating_mul(self.layout.chunks as usize);
        if buf.capacity() <= ring {
            self.spare = Some(buf);
        }
    }

    /// The next message, waiting as the ring's timeout allows.
    ///
    /// # Errors
    /// [`Error::Timeout`] (the next call resumes where this one was);
    /// [`Error::WriterDied`]; [`Error::WriterClosed`]; [`Error::Corrupt`];
    /// [`Error::TooLarge`] / [`Error::Abandoned`] (the next call reads the
    /// next message); [`Error::Interrupted`].
    pub fn recv(&mut self) -> Result<Vec<u8>> {
        let timeout = self.config.timeout;
        self.recv_within(Wait::Within(timeout))
            .map(|m| m.expect("a wait with a limit returns a message or an error"))
    }

    /// The next message if all of it is there now, else `None`.
    ///
    /// # Errors
    /// As [`recv`](Reader::recv), but never [`Error::Timeout`].
    pub fn try_recv(&mut self) -> Result<Option<Vec<u8>>> {
        self.recv_within(Wait::Try)
    }

    /// As [`recv`](Reader::recv), waiting up to `timeout`.
    ///
    /// # Errors
    /// As [`recv`](Reader::recv).
    pub fn recv_timeout(&mut self, timeout: Duration) -> Result<Vec<u8>> {
        self.recv_within(Wait::Within(Some(timeout)))
            .map(|m| m.expect("a wait with a limit returns a message or an error"))
    }

    fn corrupt(&mut self, what: String) -> Error {
        self.failed = Some(what.clone());
        Error::Corrupt {
            name: self.config.name.clone(),
            what,
        }
    }

    fn recv_within(&mut self, wait: Wait) -> Result<Option<Vec<u8>>> {
        if let Some(what) = &self.failed {
            return Err(Error::Corrupt {
                name: self.config.name.clone(),
                what: what.clone(),
            });
        }
        let mut deadline = Deadline::after(match wait {
            Wait::Try => Some(Duration::ZERO),
            Wait::Within(limit) => limit,
        });
        loop {
            if !self.wait_chunk(&mut deadline, wait)? {
                return Ok(None);
            }
            if let Some(done) = self.take_chunk()? {
                return Ok(Some(done));
            }
        }
    }

    /// Reads the chunk at `pos` into the message being assembled and
    /// releases it; the message once it is whole.
    fn take_chunk(&mut self) -> Result<Option<Vec<u8>>> {
        let seq = self.pos + 1;
        let chunk = self.layout.chunk(&self.region, self.pos);
        let found = chunk.seq.load(Ordering::Acquire);
        let (msg, total, offset) = (
            chunk.msg.load(Ordering::Relaxed),
            chunk.total.load(Ordering::Relaxed),
            chunk.offset.load(Ordering::Relaxed),
        );
        let index = self.pos % u64::from(self.layout.chunks);
        if found != seq {
            return Err(self.corrupt(format!(
                "chunk {index} holds chunk number {found}, not {seq}: it was written over \
                 before reader {} released it (another process wrote the ring's positions \
                 or headers)",
                self.rank
            )));
        }
        let cap = self.layout.chunk_bytes as u64;
        match &self.partial {
            None if offset != 0 || msg != self.msg => {
                return Err(self.corrupt(format!(
                    "chunk {index} claims offset {offset} of message {msg} where message {} \
                     starts",
                    self.msg
                )));
            }
            None => {
                let buf = if total > self.config.max_message {
                    None
                } else {
                    let mut buf = self.spare.take().unwrap_or_default();
                    buf.clear();
                    // What the ring can hold at once; more as it arrives.
                    let first = total.min(cap * u64::from(self.layout.chunks));
                    buf.try_reserve_exact(first as usize)
                        .map_err(|_| Error::OutOfMemory {
                            name: self.config.name.clone(),
                            msg,
                            bytes: total,
                        })?;
                    Some(buf)
                };
                self.partial = Some(Partial {
                    msg,
                    total,
                    got: 0,
                    buf,
                });
            }
            Some(p) if msg == p.msg + 1 && offset == 0 => {
                // The writer gave up on `p.msg`; this chunk starts the next.
                let abandoned = p.msg;
                self.partial = None;
                self.msg = msg;
                return Err(Error::Abandoned {
                    name: self.config.name.clone(),
                    msg: abandoned,
                });
            }
            Some(p) if msg != p.msg || offset != p.got || total != p.total => {
                let what = format!(
                    "chunk {index} claims offset {offset} of message {msg} ({total} bytes) \
                     where offset {} of message {} ({} bytes) is due",
                    p.got, p.msg, p.total
                );
                return Err(self.corrupt(what));
            }
            Some(_) => {}
        }
        let partial = self.partial.as_mut().expect("set above");
        let piece = (partial.total - partial.got).min(cap) as usize;
        if let Some(buf) = &mut partial.buf {
            buf.try_reserve(piece).map_err(|_| Error::OutOfMemory {
                name: self.config.name.clone(),
                msg,
                bytes: total,
            })?;
            let len = buf.len();
            self.region
                .read_uninit(
                    self.layout.chunk_data(self.pos),
                    &mut buf.spare_capacity_mut()[..piece],
                )
                .expect("a chunk's bytes lie in the region");
            // SAFETY: `read_uninit` initialised these `piece` bytes of spare
            // capacity, reserved above.
            unsafe { buf.set_len(len + piece) };
        }
        // The copy is good only if the chunk was not rewritten meanwhile.
        fence(Ordering::Acquire);
        if chunk.seq.load(Ordering::Relaxed) != seq {
            return Err(self.corrupt(format!(
                "chunk {index} was written over while reader {} copied it (another process \
                 wrote the ring's positions or headers)",
                self.rank
            )));
        }
        partial.got += piece as u64;
        let whole = partial.got == partial.total;
        self.release();
        if !whole {
            return Ok(None);
        }
        let done = self.partial.take().expect("set above");
        self.msg += 1;
        match done.buf {
            Some(buf) => Ok(Some(buf)),
            None => Err(Error::TooLarge {
                name: self.config.name.clone(),
                msg: done.msg,
                size: done.total,
                max: self.config.max_message,
            }),
        }
    }

    /// Gives the chunk at `pos` back to the writer.
    fn release(&mut self) {
        self.pos += 1;
        let slot = self.layout.slot(&self.region, self.rank);
        slot.tail.store(self.pos, Ordering::Release);
        let released = self.layout.released(&self.region);
        released.word.fetch_add(1, Ordering::Release);
        // Pairs with a parking writer's announce-then-look.
        fence(Ordering::SeqCst);
        let _ = wake_if_parked(&released.word, &released.parked, 1);
    }

    /// Waits until the chunk at `pos` is published; `false` for a `Try`
    /// that found none.
    fn wait_chunk(&mut self, deadline: &mut Deadline, wait: Wait) -> Result<bool> {
        let mut spin = self.config.spin;
        let mut next_warning = self.config.warn_every;
        loop {
            let published = self.layout.published(&self.region);
            // The word before the head: a publication after this load
            // changes it.
            let seen = published.word.load(Ordering::Acquire);
            if published.head.load(Ordering::Acquire) > self.pos {
                return Ok(true);
            }
            if self
                .layout
                .header(&self.region)
                .flags
                .load(Ordering::Acquire)
                & layout::CLOSED
                != 0
            {
                return Err(Error::WriterClosed {
                    name: self.config.name.clone(),
                });
            }
            if matches!(wait, Wait::Try) {
                return Ok(false);
            }
            self.check_stop()?;
            let mut slices = 0;
            let outcome = wait_while(
                &published.word,
                &published.parked,
                seen,
                deadline,
                spin,
                || {
                    slices += 1;
                    if slices > 1 { Err(()) } else { Ok(()) }
                },
            );
            let (rank, msg) = (self.rank, self.msg);
            let what = move || format!("reader {rank} waiting for message {msg}");
            match waited(&self.config.name, what, outcome)? {
                Waited::Moved => continue,
                Waited::Slice => {}
                Waited::TimedOut(waited) => {
                    if self.writer_ahead() {
                        return Ok(true);
                    }
                    self.check_writer()?;
                    return Err(Error::Timeout {
                        name: self.config.name.clone(),
                        what: what(),
                        waited,
                    });
                }
            }
            spin = PARK_AT_ONCE;
            if self.writer_ahead() {
                return Ok(true);
            }
            self.check_writer()?;
            self.check_stop()?;
            if let (Some(every), Some(at)) = (self.config.warn_every, next_warning) {
                let waited = deadline.waited();
                if waited >= at {
                    log::warn!(
                        "broadcast ring {}: reader {} has had no message for {waited:?} \
                         (writer pid {})",
                        self.config.name,
                        self.rank,
                        self.writer.pid
                    );
                    next_warning = Some(at + every);
                }
            }
        }
    }

    fn check_stop(&self) -> Result<()> {
        if self.stop.load(Ordering::SeqCst) {
            return Err(Error::Stopped {
                name: self.config.name.clone(),
                rank: self.rank,
            });
        }
        Ok(())
    }

    /// Whether the writer's process still runs.
    fn check_writer(&mut self) -> Result<()> {
        let alive = self
            .watch
            .alive(self.writer)
            .map_err(|source| Error::FdPass {
                name: self.config.name.clone(),
                source,
            })?;
        if alive {
            return Ok(());
        }
        Err(Error::WriterDied {
            name: self.config.name.clone(),
            pid: self.writer.pid,
        })
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        if self.born.is_forked() {
            return;
        }
        let slot = self.layout.slot(&self.region, self.rank);
        slot.state.store(layout::LEFT, Ordering::Release);
        // A writer parked on us looks again.
        let released = self.layout.released(&self.region);
        released.word.fetch_add(1, Ordering::SeqCst);
        let _ = wake_if_parked(&released.word, &released.parked, 1);
    }
}
