//! The one error type of this crate.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use crate::RefusalCode;

/// What can go wrong binding, serving or connecting to a monitor.
/// Every variant names the path, process, limit or count it is about; system
/// call failures keep their errno.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The directory that would hold the socket is not safe: not ours, or
    /// writable by group or others (anyone could replace the socket).
    #[error(
        "refusing socket directory {dir}: owned by uid {owner} with mode {mode:04o}; it must be owned by uid {expected_owner} and not writable by group or others"
    )]
    UnsafeDirectory {
        /// The directory.
        dir: PathBuf,
        /// Its owner.
        owner: u32,
        /// Its permission bits.
        mode: u32,
        /// Our effective uid.
        expected_owner: u32,
    },

    /// Something other than a directory where the socket's directory should be.
    #[error("{path} is not a directory")]
    NotADirectory {
        /// The path.
        path: PathBuf,
    },

    /// A symbolic link sits where the socket would go: never followed, never removed.
    #[error("refusing {path}: it is a symbolic link")]
    SymlinkRefused {
        /// The path.
        path: PathBuf,
    },

    /// A file that is not a socket sits where the socket would go.
    #[error("refusing {path}: it exists and is not a socket")]
    NotASocket {
        /// The path.
        path: PathBuf,
    },

    /// A live server already listens on the path.
    #[error("a monitor is already serving on {path}")]
    AlreadyServing {
        /// The path.
        path: PathBuf,
    },

    /// The path does not fit in a Unix socket address.
    #[error("socket path {path} is {len} bytes; a Unix socket path holds at most {max}")]
    PathTooLong {
        /// The path.
        path: PathBuf,
        /// Its length in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },

    /// A configuration value is not acceptable.
    #[error("invalid monitor configuration: {reason}")]
    Config {
        /// Which value and why.
        reason: String,
    },

    /// The server answered `Error { cause, code }`: the request was refused.
    #[error("the monitor at {path} refused {what}: {cause}")]
    Refused {
        /// The request (`Init`, `the heartbeat`, …).
        what: &'static str,
        /// The monitor's socket.
        path: PathBuf,
        /// Why, for programs ([`RefusalCode::Unspecified`] from a monitor
        /// that sends no code).
        code: RefusalCode,
        /// The server's words.
        cause: String,
    },

    /// The monitor did not take a request or answer it within the client's
    /// timeout (`SO_SNDTIMEO`/`SO_RCVTIMEO` ran out): says what was awaited.
    #[error(
        "the monitor at {path}: {op} timed out after {}{detail}",
        nodeipc_text::duration(*waited)
    )]
    Timeout {
        /// What was being done (`waiting for the reply to Init`, …).
        op: String,
        /// The monitor's socket.
        path: PathBuf,
        /// How long it waited.
        waited: Duration,
        /// Why, when the client could find out (`: another client holds
        /// the rank connection …`); empty otherwise.
        detail: String,
    },

    /// The server answered something the protocol does not allow here.
    #[error("protocol violation: {reason}")]
    Protocol {
        /// What was expected and what came.
        reason: String,
    },

    /// Sending a request, or reading or decoding its reply, failed: names
    /// the request and the monitor's socket (sizes include the 4-byte prefix).
    #[error("the monitor at {path}: {op}: {source}{}", closed_hint(source))]
    Frame {
        /// What was being done (`sending the heartbeat`, …).
        op: String,
        /// The monitor's socket.
        path: PathBuf,
        /// The framing error.
        #[source]
        source: nodeipc_proto::Error,
    },

    /// Passing a descriptor, checking a peer or signalling a process failed.
    #[error(transparent)]
    Fdpass(#[from] nodeipc_fdpass::Error),

    /// Creating or mapping the heartbeat region failed.
    #[error(transparent)]
    Shm(#[from] nodeipc_shm::Error),

    /// No server accepted a connection on the path in time.
    #[error(
        "no monitor accepted a connection on {path} within {}: {}",
        nodeipc_text::duration(*waited),
        nodeipc_fdpass::connect_failure_reason(last)
    )]
    ConnectTimeout {
        /// The socket path.
        path: PathBuf,
        /// How long we tried.
        waited: Duration,
        /// The last attempt's error, with its errno (`EAGAIN`: the backlog
        /// is full, the monitor is not accepting).
        last: io::Error,
    },

    /// `heartbeat_fast` without a heartbeat region (the server declined it or
    /// `init` did not ask for one).
    #[error("no shared-memory heartbeat region: ask for one in init (the server may decline)")]
    NoHeartbeatRegion,

    /// The heartbeat region the server passed does not match its description.
    #[error("bad heartbeat region: {reason}")]
    BadHeartbeatRegion {
        /// What is wrong.
        reason: String,
    },

    /// The estimator has too few observations to propose a timeout.
    #[error(
        "not enough samples to propose a {what} timeout: {have} of {need} observed, {missing} missing",
        missing = need - have
    )]
    NotEnoughSamples {
        /// Which timeout.
        what: String,
        /// Observations so far.
        have: usize,
        /// Observations needed.
        need: usize,
    },

    /// A system call failed; the errno is kept in `source`.
    #[error("{op} {path}: {source}")]
    Io {
        /// The call.
        op: &'static str,
        /// The path or object it was about (may be empty).
        path: String,
        /// The error with its raw errno.
        #[source]
        source: io::Error,
    },
}

impl Error {
    pub(crate) fn io(
        op: &'static str,
        path: impl std::fmt::Display,
        source: impl Into<io::Error>,
    ) -> Self {
        Error::Io {
            op,
            path: path.to_string(),
            source: source.into(),
        }
    }

    pub(crate) fn config(reason: impl Into<String>) -> Self {
        Error::Config {
            reason: reason.into(),
        }
    }

    /// Whether a bounded wait ran out: [`Error::ConnectTimeout`] or
    /// [`Error::Timeout`].
    pub fn is_timeout(&self) -> bool {
        matches!(self, Error::ConnectTimeout { .. } | Error::Timeout { .. })
    }

    /// Whether this is the server refusing a request ([`Error::Refused`]).
    pub fn is_refused(&self) -> bool {
        matches!(self, Error::Refused { .. })
    }

    /// The server's cause, for an [`Error::Refused`].
    pub fn refusal_cause(&self) -> Option<&str> {
        match self {
            Error::Refused { cause, .. } => Some(cause),
            _ => None,
        }
    }

    /// The server's code, for an [`Error::Refused`].
    pub fn refusal_code(&self) -> Option<RefusalCode> {
        match self {
            Error::Refused { code, .. } => Some(*code),
            _ => None,
        }
    }
}

impl From<Error> for io::Error {
    /// An `io::Error` of the closest kind (a failed system call's own kind)
    /// that wraps this error whole: `get_ref()` and a downcast give it back,
    /// and `source()` is its source — for a failed system call, the kernel's
    /// error with its errno (`raw_os_error()`).
    fn from(error: Error) -> io::Error {
        let kind = match &error {
            Error::Io { source, .. } => source.kind(),
            Error::Fdpass(_) | Error::Shm(_) | Error::Frame { .. } => io::ErrorKind::Other,
            Error::UnsafeDirectory { .. }
            | Error::SymlinkRefused { .. }
            | Error::Refused { .. } => io::ErrorKind::PermissionDenied,
            Error::AlreadyServing { .. } => io::ErrorKind::AddrInUse,
            Error::ConnectTimeout { .. } | Error::Timeout { .. } => io::ErrorKind::TimedOut,
            Error::Config { .. }
            | Error::PathTooLong { .. }
            | Error::NotADirectory { .. }
            | Error::NotASocket { .. }
            | Error::NoHeartbeatRegion
            | Error::NotEnoughSamples { .. } => io::ErrorKind::InvalidInput,
            _ => io::ErrorKind::InvalidData,
        };
        io::Error::new(kind, error)
    }
}

/// What a closed connection means, after a framing error that is one.
fn closed_hint(source: &nodeipc_proto::Error) -> &'static str {
    let closed = match source {
        nodeipc_proto::Error::Closed | nodeipc_proto::Error::Truncated { .. } => true,
        nodeipc_proto::Error::Io(e) => matches!(
            e.kind(),
            io::ErrorKind::BrokenPipe
                | io::ErrorKind::ConnectionReset
                | io::ErrorKind::UnexpectedEof
        ),
        _ => false,
    };
    if closed {
        " (the monitor closed the connection: it exited, or dropped this client)"
    } else {
        ""
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
