//! The broadcast ring: one writer, N readers, every message to every reader,
//! in order, through chunks of one shared region (no response slots).
//!
//! - Waits poll and spin briefly, then park on a futex word
//!   ([`nodeipc_shm::wait`]): an idle reader costs no CPU and wakes within
//!   microseconds of the next message.
//! - Each reader's read position lies in the region, so a writer whose ring
//!   stays full names who is behind ([`Error::Full`]), a dead reader within
//!   a wait slice ([`Error::ReaderDied`]; go on with
//!   [`Writer::drop_reader`]), and a reader whose writer died is told so
//!   ([`Error::WriterDied`]).
//! - A message larger than a chunk streams through the chunks (the reader
//!   releases each as it copies it) into the reader's private memory.
//! - Readers copy bytes out of the ring; nothing hands out a `&[u8]` over
//!   memory another process writes. A reader checks every word it reads
//!   against what the protocol allows, so a process that writes the ring's
//!   headers gets readers an [`Error::Corrupt`], never a wrong message.
//!
//! The region is named (0600, owner-checked on open) so a handle carries no
//! descriptor; the writer removes the name once every reader has joined
//! ([`Writer::wait_until_ready`]). The layout is in the crate README.

mod error;
mod layout;
mod reader;
mod writer;

use std::time::Duration;

use nodeipc_shm::wait::{Pacer, Spin};

pub use error::{Behind, Error, Result};
pub use reader::{Reader, StopHandle};
pub use writer::{Loan, Writer};

/// The most readers a ring has.
pub const MAX_READERS: u32 = crate::MAX_WORKERS;
/// The most chunks a ring has.
pub const MAX_CHUNKS: u32 = 1 << 16;

/// A broadcast ring's shape and waits: what the writer creates and every
/// reader joins with. A plain value to hand to readers (the name and the
/// three numbers are all a reader needs).
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use nodeipc_channel::broadcast::Broadcast;
///
/// let ring = Broadcast::builder(&format!("/nodeipc-doc-bcast-{}", std::process::id()))
///     .readers(1)
///     .chunk_bytes(4096)
///     .chunks(4);
/// let mut writer = ring.create()?;
/// let mut reader = ring.join(0)?;
/// writer.wait_until_ready(Duration::from_secs(5))?;
/// writer.send(b"step 1")?;
/// assert_eq!(reader.recv()?, b"step 1");
/// # Ok::<(), nodeipc_channel::broadcast::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Broadcast {
    pub(crate) name: String,
    pub(crate) readers: u32,
    pub(crate) chunk_bytes: usize,
    pub(crate) chunks: u32,
    pub(crate) timeout: Option<Duration>,
    pub(crate) spin: Spin,
    pub(crate) warn_every: Option<Duration>,
    pub(crate) max_message: u64,
    pub(crate) join_wait: Duration,
}

impl Broadcast {
    /// A ring named `name` (a POSIX shared-memory name: `/` then up to 254
    /// bytes): 1 reader, 10 chunks of 24 MiB, no time limit on waits, a
    /// warning every 60 s of a long wait.
    pub fn builder(name: &str) -> Broadcast {
        Broadcast {
            name: name.to_owned(),
            readers: 1,
            chunk_bytes: 24 << 20,
            chunks: 10,
            timeout: None,
            spin: Spin::DEFAULT,
            warn_every: Some(Duration::from_secs(60)),
            max_message: 1 << 40,
            join_wait: Duration::from_secs(30),
        }
    }

    /// How many readers (ranks `0..n`).
    pub fn readers(mut self, n: u32) -> Self {
        self.readers = n;
        self
    }

    /// The bytes of one chunk.
    pub fn chunk_bytes(mut self, bytes: usize) -> Self {
        self.chunk_bytes = bytes;
        self
    }

    /// How many chunks: how far the writer may run ahead of its slowest reader.
    pub fn chunks(mut self, n: u32) -> Self {
        self.chunks = n;
        self
    }

    /// The limit of the `send` and `recv` forms' waits (`None`: none; dead
    /// peers still end them). The `_timeout` forms take their own.
    pub fn timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
        self
    }

    /// How waits poll and yield before they park.
    pub fn spin(mut self, spin: Spin) -> Self {
        self.spin = spin;
        self
    }

    /// How often a long wait logs a warning naming who it waits for
    /// (`log::warn!`; `None`: never).
    pub fn warn_every(mut self, every: Option<Duration>) -> Self {
        self.warn_every = every;
        self
    }

    /// The largest message a reader accepts (a larger one is skipped with
    /// [`Error::TooLarge`]): the most private memory a writer can make a
    /// reader allocate.
    pub fn max_message(mut self, bytes: u64) -> Self {
        self.max_message = bytes;
        self
    }

    /// How long [`join`](Broadcast::join) waits for the region to appear.
    pub fn join_wait(mut self, wait: Duration) -> Self {
        self.join_wait = wait;
        self
    }

    /// The ring's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Creates the ring (its region, mode 0600) and returns its writer.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`]; [`Error::Shm`] (the name taken, no room).
    pub fn create(&self) -> Result<Writer> {
        Writer::create(self)
    }

    /// Joins the ring as reader `rank`, waiting up to the
    /// [`join_wait`](Broadcast::join_wait) for its region.
    ///
    /// # Errors
    /// [`Error::Shm`] (not there in time, another owner, a mode other than
    /// 0600); [`Error::Mismatch`]; [`Error::NoSuchRank`]; [`Error::RankTaken`].
    pub fn join(&self, rank: u32) -> Result<Reader> {
        Reader::join(self, rank)
    }
}

/// How long one call may wait.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Wait {
    /// Never: the `try_` forms.
    Try,
    /// Up to a limit (`None`: none).
    Within(Option<Duration>),
}

/// The pacing of a wait for every reader to join (`wait_until_ready`, both
/// sides): polls from 50 µs, backing off to 5 ms, up to `timeout`.
fn ready_pacer(timeout: Duration) -> Pacer {
    Pacer::new(
        Duration::from_micros(50),
        Duration::from_millis(5),
        Some(timeout),
    )
}
