//! What can go wrong on a broadcast ring: every variant names the ring, and
//! the reader where one is involved.

use std::convert::Infallible;
use std::fmt;
use std::time::Duration;

use nodeipc_shm::wait::WaitError;

/// A reader the writer waits for: its rank, its process and how far behind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Behind {
    /// The reader's rank.
    pub rank: u32,
    /// Its process (0 if it has not joined).
    pub pid: u32,
    /// Messages it has not finished reading.
    pub messages: u64,
    /// Chunks it has not released.
    pub chunks: u64,
}

impl fmt::Display for Behind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.pid == 0 {
            write!(f, "reader {} (not joined)", self.rank)
        } else {
            write!(
                f,
                "reader {} (pid {}) {} message(s) behind",
                self.rank, self.pid, self.messages
            )
        }
    }
}

/// The readers a full ring waits for, as one phrase.
pub(super) fn list(behind: &[Behind]) -> String {
    let mut text = String::new();
    for (i, b) in behind.iter().enumerate() {
        if i > 0 {
            text.push_str(", ");
        }
        text.push_str(&b.to_string());
    }
    text
}

/// What can go wrong on a broadcast ring.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The shape asked for cannot be a ring.
    #[error("broadcast ring {name}: invalid configuration: {reason}")]
    InvalidConfig {
        /// The ring.
        name: String,
        /// What is wrong.
        reason: String,
    },

    /// The region could not be made, opened or used.
    #[error("broadcast ring {name}: {source}")]
    Shm {
        /// The ring.
        name: String,
        /// What the region said.
        #[source]
        source: nodeipc_shm::Error,
    },

    /// The region is not a ring of the shape this side expects.
    #[error("broadcast ring {name}: {what} is {theirs} in the region but {ours} for this side")]
    Mismatch {
        /// The ring.
        name: String,
        /// Which value differs.
        what: &'static str,
        /// This side's value.
        ours: u64,
        /// The region's value.
        theirs: u64,
    },

    /// A rank the ring does not have.
    #[error("broadcast ring {name}: rank {rank} is not a reader's (the ring has {readers})")]
    NoSuchRank {
        /// The ring.
        name: String,
        /// The rank asked for.
        rank: u32,
        /// How many readers the ring has.
        readers: u32,
    },

    /// Another process holds the rank.
    #[error("broadcast ring {name}: rank {rank} is already held by pid {pid}")]
    RankTaken {
        /// The ring.
        name: String,
        /// The rank.
        rank: u32,
        /// The process holding it.
        pid: u32,
    },

    /// The ring stayed full past the wait's limit: these readers held it.
    #[error(
        "broadcast ring {name}: no free chunk after {waited:?}; waiting for {}",
        list(behind)
    )]
    Full {
        /// The ring.
        name: String,
        /// The readers that are behind.
        behind: Vec<Behind>,
        /// How long the writer waited.
        waited: Duration,
    },

    /// A reader's process is gone while the writer waited for it; the
    /// writer may go on without it ([`Writer::drop_reader`](super::Writer::drop_reader)).
    #[error("broadcast ring {name}: reader {rank} (pid {pid}) died {messages} message(s) behind")]
    ReaderDied {
        /// The ring.
        name: String,
        /// Its rank.
        rank: u32,
        /// Its process.
        pid: u32,
        /// Messages it had not finished.
        messages: u64,
    },

    /// A reader left (dropped its handle) while the writer waited for it.
    #[error("broadcast ring {name}: reader {rank} left {messages} message(s) behind")]
    ReaderLeft {
        /// The ring.
        name: String,
        /// Its rank.
        rank: u32,
        /// Messages it had not finished.
        messages: u64,
    },

    /// The writer's process is gone; nothing more will come.
    #[error("broadcast ring {name}: the writer (pid {pid}) died")]
    WriterDied {
        /// The ring.
        name: String,
        /// Its process.
        pid: u32,
    },

    /// The writer closed the ring and every message it sent was read.
    #[error("broadcast ring {name}: the writer closed the ring")]
    WriterClosed {
        /// The ring.
        name: String,
    },

    /// A wait ran out.
    #[error("broadcast ring {name}: {what} timed out after {waited:?}")]
    Timeout {
        /// The ring.
        name: String,
        /// What was awaited.
        what: String,
        /// How long.
        waited: Duration,
    },

    /// The thread's cancellation hook ended a wait (a binding's Ctrl-C).
    #[error("broadcast ring {name}: {what} interrupted after {waited:?}")]
    Interrupted {
        /// The ring.
        name: String,
        /// What was awaited.
        what: String,
        /// How long.
        waited: Duration,
    },

    /// Shared memory holds what the protocol cannot have written: another
    /// process wrote the ring's words or chunk headers. No byte of the
    /// message was handed out; the handle stays failed.
    #[error("broadcast ring {name}: {what}")]
    Corrupt {
        /// The ring.
        name: String,
        /// What was found, and where.
        what: String,
    },

    /// A message larger than this reader accepts; it was skipped.
    #[error(
        "broadcast ring {name}: message {msg} is {size} bytes, more than this reader's {max}; skipped"
    )]
    TooLarge {
        /// The ring.
        name: String,
        /// The message.
        msg: u64,
        /// Its length.
        size: u64,
        /// The reader's limit.
        max: u64,
    },

    /// The writer gave up a message part way (its wait failed mid-stream);
    /// the reader dropped what it had and the next call reads the next one.
    #[error("broadcast ring {name}: the writer abandoned message {msg} part way")]
    Abandoned {
        /// The ring.
        name: String,
        /// The message.
        msg: u64,
    },

    /// The reader was stopped ([`StopHandle::stop`](super::StopHandle::stop)).
    #[error("broadcast ring {name}: reader {rank} was stopped")]
    Stopped {
        /// The ring.
        name: String,
        /// The reader.
        rank: u32,
    },

    /// The call does not fit the handle's state (a loan open, none open).
    #[error("broadcast ring {name}: {what}")]
    Usage {
        /// The ring.
        name: String,
        /// What was wrong.
        what: &'static str,
    },

    /// A private buffer for a message could not be allocated.
    #[error("broadcast ring {name}: cannot allocate {bytes} bytes for message {msg}")]
    OutOfMemory {
        /// The ring.
        name: String,
        /// The message.
        msg: u64,
        /// The bytes asked for.
        bytes: u64,
    },

    /// Looking at a peer's process failed (never reported as a death).
    #[error("broadcast ring {name}: {source}")]
    FdPass {
        /// The ring.
        name: String,
        /// What fdpass said.
        #[source]
        source: nodeipc_fdpass::Error,
    },

    /// `futex` failed with an errno a waiter does not expect.
    #[error("broadcast ring {name}: futex: {errno}")]
    Futex {
        /// The ring.
        name: String,
        /// The errno.
        errno: rustix::io::Errno,
    },
}

impl Error {
    /// Whether a wait ran out ([`Error::Timeout`], [`Error::Full`]): the
    /// handle is intact and the call may be made again.
    pub fn is_timeout(&self) -> bool {
        matches!(self, Error::Timeout { .. } | Error::Full { .. })
    }
}

/// The result of a broadcast ring's calls.
pub type Result<T> = std::result::Result<T, Error>;

/// How one slice of a ring wait ended, once the ways it fails are errors.
pub(super) enum Waited {
    /// The word moved.
    Moved,
    /// The slice ran out: the caller looks around and waits again.
    Slice,
    /// The deadline passed after this long: the caller rechecks, then
    /// says who was late.
    TimedOut(Duration),
}

/// A ring wait's end in the ring's terms: interrupted or a failed futex
/// become the errors naming `name` and (lazily) `what` the wait was for.
pub(super) fn waited(
    name: &str,
    what: impl FnOnce() -> String,
    waited: std::result::Result<(), WaitError<()>>,
) -> Result<Waited> {
    match waited {
        Ok(()) => Ok(Waited::Moved),
        Err(WaitError::Stopped(())) => Ok(Waited::Slice),
        Err(WaitError::TimedOut(waited)) => Ok(Waited::TimedOut(waited)),
        Err(WaitError::Interrupted(waited)) => Err(paced_wait_failed(
            name,
            what(),
            WaitError::Interrupted(waited),
        )),
        Err(WaitError::Futex(errno)) => {
            Err(paced_wait_failed(name, what(), WaitError::Futex(errno)))
        }
    }
}

/// The error for a paced wait (one with no stop of its own) that ended
/// before what it waited for: timed out, interrupted, or the futex failed.
pub(super) fn paced_wait_failed(name: &str, what: String, e: WaitError<Infallible>) -> Error {
    let name = name.to_owned();
    match e {
        WaitError::TimedOut(waited) => Error::Timeout { name, what, waited },
        WaitError::Interrupted(waited) => Error::Interrupted { name, what, waited },
        WaitError::Futex(errno) => Error::Futex { name, errno },
        WaitError::Stopped(never) => match never {},
    }
}
