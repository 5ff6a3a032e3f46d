//! The channel's [`HandshakeServer`]: `nodeipc-handshake`'s server, its
//! errors the channel's.

use std::path::Path;

use nodeipc_fdpass::Credentials;
use nodeipc_proto::handshake::{Logon, PassedFd};

use super::channel_error;
use crate::Result;
use nodeipc_handshake::{Decision, HandshakeOptions, HandshakeStats};

/// A server answering logons at a socket path, on a thread of its own.
///
/// The socket is bound with [`nodeipc_fdpass::Listener`] (0600, in a
/// directory we own, a stale socket replaced, a symlink refused); every
/// client's uid is checked (`SO_PEERCRED`); each connection is handled on a
/// short-lived thread with a logon timeout, so a client that says nothing,
/// sends garbage or leaves early costs nothing but itself. The protocol
/// version is checked before the decision function sees a logon. Dropping
/// the server stops it and removes the socket file. (See
/// `nodeipc-handshake`, which does the work.)
// Not `Debug`, as before it moved: a `Result<HandshakeServer>` keeps
// `.err().expect(..)` in callers free of clippy's `err_expect`.
pub struct HandshakeServer {
    inner: nodeipc_handshake::HandshakeServer,
}

impl HandshakeServer {
    /// Binds `path` and starts answering logons with `decide`.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) for a zero
    /// `logon_timeout` (a socket timeout of zero means none at all: a silent
    /// client would hold its thread forever);
    /// [`Error::FdPass`](crate::Error::FdPass) when the path cannot be bound
    /// safely; [`Error::Io`](crate::Error::Io) if the thread cannot start.
    pub fn bind(
        path: impl AsRef<Path>,
        options: HandshakeOptions,
        decide: impl Fn(&Logon, &Credentials) -> Decision + Send + Sync + 'static,
    ) -> Result<HandshakeServer> {
        let inner = nodeipc_handshake::HandshakeServer::bind(path, options, decide)
            .map_err(channel_error)?;
        Ok(HandshakeServer { inner })
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        self.inner.path()
    }

    /// Counts of accepted, rejected and dropped logons so far.
    pub fn stats(&self) -> HandshakeStats {
        self.inner.stats()
    }
}

/// Describes one passed region of the channel.
pub(crate) fn passed(kind: nodeipc_proto::handshake::FdKind, size: usize) -> PassedFd {
    PassedFd {
        kind: kind as i32,
        size: size as u64,
        role: String::new(),
    }
}
