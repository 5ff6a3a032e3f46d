//! The one error type of this crate.

use std::io;
use std::time::Duration;

use nodeipc_text::InWords;

/// What can go wrong on an execute channel or its handshake. Every variant
/// names the channel, and the worker where one is involved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration cannot describe a channel.
    #[error("channel {channel}: invalid configuration: {reason}")]
    InvalidConfig {
        /// The channel.
        channel: String,
        /// What is wrong.
        reason: String,
    },

    /// The regions were made for another channel shape.
    #[error("channel {channel}: {what} is {theirs} in the regions but {ours} for this side")]
    Mismatch {
        /// The channel.
        channel: String,
        /// Which value differs.
        what: &'static str,
        /// This side's value.
        ours: u64,
        /// The regions' value.
        theirs: u64,
    },

    /// A message larger than its slot; nothing was written.
    #[error(
        "channel {channel}: a {size}-byte frame does not fit the {max}-byte {slot}; nothing was sent"
    )]
    TooLarge {
        /// The channel.
        channel: String,
        /// Which slot (request frame, response slot, init slot).
        slot: &'static str,
        /// The frame's size, length prefix included.
        size: usize,
        /// The slot's size.
        max: usize,
    },

    /// A worker's slot holds a length beyond the slot: never read past it.
    #[error(
        "channel {channel}: worker {rank}'s {slot} claims a {len}-byte frame, beyond its {slot_size}-byte slot"
    )]
    Corrupt {
        /// The channel.
        channel: String,
        /// The worker.
        rank: u32,
        /// Which slot.
        slot: &'static str,
        /// The length found.
        len: u64,
        /// The slot's size.
        slot_size: usize,
    },

    /// A slot's bytes are not the message they should be.
    #[error("channel {channel}: cannot decode {slot} of worker {rank}: {source}")]
    Decode {
        /// The channel.
        channel: String,
        /// The worker whose slot it is (for requests: the receiving worker).
        rank: u32,
        /// Which slot.
        slot: &'static str,
        /// What prost said.
        #[source]
        source: prost::DecodeError,
    },

    /// A worker answered with a non-zero status.
    #[error(
        "channel {channel}: worker {rank} failed request {sequence} with status {status}: {message}"
    )]
    WorkerFailed {
        /// The channel.
        channel: String,
        /// The worker.
        rank: u32,
        /// The request's sequence number, as echoed.
        sequence: u64,
        /// The status.
        status: i32,
        /// The worker's error text.
        message: String,
    },

    /// A worker answered with a message type this side does not know.
    #[error("channel {channel}: worker {rank} answered with unknown message type {value}")]
    UnknownMessageType {
        /// The channel.
        channel: String,
        /// The worker.
        rank: u32,
        /// The value found.
        value: i32,
    },

    /// A bounded wait ran out.
    #[error("channel {channel}: timed out after {} {op}", InWords(*waited))]
    Timeout {
        /// The channel.
        channel: String,
        /// What was awaited, e.g. "waiting for worker 2's response".
        op: String,
        /// How long.
        waited: Duration,
    },

    /// A worker's process died.
    #[error("channel {channel}: worker {rank} (pid {pid}) died")]
    WorkerDied {
        /// The channel.
        channel: String,
        /// The worker.
        rank: u32,
        /// Its pid.
        pid: u32,
    },

    /// A worker closed its end.
    #[error("channel {channel}: worker {rank} left the channel")]
    WorkerLeft {
        /// The channel.
        channel: String,
        /// The worker.
        rank: u32,
    },

    /// The coordinator's process died.
    #[error("channel {channel}: the coordinator (pid {pid}) died")]
    CoordinatorDied {
        /// The channel.
        channel: String,
        /// Its pid.
        pid: u32,
    },

    /// The coordinator closed the channel; no more requests will come.
    #[error("channel {channel}: closed by the coordinator")]
    Closed {
        /// The channel.
        channel: String,
    },

    /// A gather with no request left to answer.
    #[error("channel {channel}: nothing to gather: every request sent has been gathered")]
    NothingOutstanding {
        /// The channel.
        channel: String,
    },

    /// Another process already joined as this worker.
    #[error("channel {channel}: worker rank {rank} is already taken")]
    RankTaken {
        /// The channel.
        channel: String,
        /// The rank.
        rank: u32,
    },

    /// A rank outside the channel.
    #[error("channel {channel}: rank {rank} is outside a channel of {workers} workers")]
    RankOutOfRange {
        /// The channel.
        channel: String,
        /// The rank.
        rank: u32,
        /// The worker count.
        workers: u32,
    },

    /// Another thread of this process is in a call this one may not
    /// overlap: a coordinator takes one sending and one gathering thread at
    /// a time (a second sender or a second gatherer is refused). Nothing
    /// was done; the channel is intact.
    #[error("channel {channel}: {op} refused: another thread is {busy}; {rule}")]
    Busy {
        /// The channel.
        channel: String,
        /// The call refused (`send`, `recv(All)`, …).
        op: &'static str,
        /// What the other thread is doing (`sending`, `gathering`).
        busy: &'static str,
        /// The rule the call would break.
        rule: &'static str,
    },

    /// The response thread or handler is in a state that forbids the call.
    #[error("channel {channel}: {reason}")]
    ResponseThread {
        /// The channel.
        channel: String,
        /// What is wrong: handler registered twice, thread started twice,
        /// started without a handler, or a gather while the thread runs.
        reason: &'static str,
    },

    /// The logon handshake failed: the handshake layer's own error, whole
    /// (a rejection with the server's code and reason, a timeout, a peer
    /// that broke the protocol, …), its `source()` chain intact. An accept
    /// that lacks what a channel needs is `nodeipc_handshake::Error::Handshake`
    /// naming what is missing.
    #[error("{0}")]
    Handshake(#[from] nodeipc_handshake::Error),

    /// A region failed.
    #[error("channel {channel}: {source}")]
    Shm {
        /// The channel.
        channel: String,
        /// The region error.
        #[source]
        source: nodeipc_shm::Error,
    },

    /// A semaphore failed.
    #[error("channel {channel}: {source}")]
    Sem {
        /// The channel.
        channel: String,
        /// The semaphore error.
        #[source]
        source: nodeipc_sem::Error,
    },

    /// Passing descriptors failed.
    #[error("{context}: {source}")]
    FdPass {
        /// The channel or handshake peer.
        context: String,
        /// The fdpass error.
        #[source]
        source: nodeipc_fdpass::Error,
    },

    /// Framing failed on a socket.
    #[error("{context}: {source}")]
    Proto {
        /// The channel or handshake peer.
        context: String,
        /// The framing error.
        #[source]
        source: nodeipc_proto::Error,
    },

    /// A system call failed; the errno is kept in `source`.
    #[error("{context}: {op} failed: {source}")]
    Io {
        /// The channel or handshake peer.
        context: String,
        /// The call.
        op: &'static str,
        /// The error with its raw errno.
        #[source]
        source: io::Error,
    },
}

impl From<Error> for io::Error {
    /// An `io::Error` of the closest kind (a failed system call's own kind)
    /// that wraps this error whole: `get_ref()` and a downcast give it back,
    /// and `source()` is its source — for a failed system call, the kernel's
    /// error with its errno (`raw_os_error()`).
    fn from(error: Error) -> io::Error {
        let kind = match &error {
            Error::Io { source, .. } => source.kind(),
            Error::Timeout { .. } => io::ErrorKind::TimedOut,
            Error::WorkerDied { .. }
            | Error::WorkerLeft { .. }
            | Error::CoordinatorDied { .. }
            | Error::Closed { .. } => io::ErrorKind::BrokenPipe,
            Error::InvalidConfig { .. } | Error::TooLarge { .. } | Error::RankOutOfRange { .. } => {
                io::ErrorKind::InvalidInput
            }
            Error::Handshake(inner) => inner.kind(),
            _ => io::ErrorKind::InvalidData,
        };
        io::Error::new(kind, error)
    }
}

impl Error {
    /// Whether this is a bounded wait that ran out: a channel's call, or
    /// the logon handshake.
    pub fn is_timeout(&self) -> bool {
        matches!(
            self,
            Error::Timeout { .. } | Error::Handshake(nodeipc_handshake::Error::Timeout { .. })
        )
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
