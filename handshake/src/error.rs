//! The handshake's errors: each names the peer (a socket path, or the
//! client's pid) and what did not match.

use std::io;
use std::time::Duration;

use nodeipc_text::InWords;

/// Results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong in a handshake or a session.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A server's options cannot work.
    #[error("{server}: {reason}")]
    InvalidConfig {
        /// The server, by socket path.
        server: String,
        /// What is wrong with the options.
        reason: String,
    },

    /// The server refused the logon.
    #[error("logon rejected ({code}): {reason}")]
    Rejected {
        /// The reject code's name (`REJECT_CODE_VERSION_MISMATCH`, ...).
        code: String,
        /// The server's reason.
        reason: String,
    },

    /// The other side broke the protocol: another version, a reply that is
    /// not one, descriptors that do not match their description, a role the
    /// client asked for and did not get.
    #[error("handshake with {peer}: {reason}")]
    Handshake {
        /// Who: a socket path, or "client pid N".
        peer: String,
        /// What happened.
        reason: String,
    },

    /// A step of the handshake ran out of time.
    #[error("handshake with {peer}: timed out after {} {op}", InWords(*waited))]
    Timeout {
        /// Who.
        peer: String,
        /// The step: "connecting", "waiting for the logon reply", ...
        op: String,
        /// How long it waited.
        waited: Duration,
    },

    /// Passing descriptors or binding the socket failed.
    #[error("{context}: {source}")]
    FdPass {
        /// Who or what.
        context: String,
        /// The cause, errno kept.
        #[source]
        source: nodeipc_fdpass::Error,
    },

    /// A frame could not be written or read.
    #[error("{context}: {source}")]
    Proto {
        /// Who.
        context: String,
        /// The cause.
        #[source]
        source: nodeipc_proto::Error,
    },

    /// A system call failed.
    #[error("{context}: {op}: {source}")]
    Io {
        /// Who.
        context: String,
        /// The call.
        op: &'static str,
        /// The cause, errno kept.
        #[source]
        source: io::Error,
    },
}

impl Error {
    /// The `io::ErrorKind` closest to this error (a failed system call's
    /// own kind): what the `io::Error` made of it has, and what a layer
    /// wrapping this error whole reports for it.
    pub fn kind(&self) -> io::ErrorKind {
        match self {
            Error::InvalidConfig { .. } => io::ErrorKind::InvalidInput,
            Error::Rejected { .. } => io::ErrorKind::PermissionDenied,
            Error::Handshake { .. } | Error::Proto { .. } => io::ErrorKind::InvalidData,
            Error::Timeout { .. } => io::ErrorKind::TimedOut,
            Error::FdPass { .. } => io::ErrorKind::Other,
            Error::Io { source, .. } => source.kind(),
        }
    }
}

impl From<Error> for io::Error {
    fn from(error: Error) -> io::Error {
        io::Error::new(error.kind(), error)
    }
}
