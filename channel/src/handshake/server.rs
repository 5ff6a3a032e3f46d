//! The channel's [`ChannelServer`]: `nodeipc-handshake`'s server serving a
//! channel's offer to the workers that log on.

use std::path::Path;

use nodeipc_fdpass::Credentials;
use nodeipc_proto::handshake::{Logon, PassedFd};

use super::ChannelOffer;
use crate::Result;
use nodeipc_handshake::{Decision, HandshakeOptions, HandshakeServer, HandshakeStats};

/// A channel's logon server: answers the workers that log on at a socket
/// path with the channel's regions ([`ChannelServer::bind`], deciding by
/// the coordinator's [`ChannelOffer`]), on a thread of its own, and keeps
/// no session once it has answered (the channel watches its workers
/// through the regions).
///
/// The socket is bound with [`nodeipc_fdpass::Listener`] (0600, in a
/// directory we own, a stale socket replaced, a symlink refused); every
/// client's uid is checked (`SO_PEERCRED`); each connection is handled on a
/// short-lived thread with a logon timeout, so a client that says nothing,
/// sends garbage or leaves early costs nothing but itself. The protocol
/// version is checked before the decision function sees a logon. Dropping
/// the server stops it and removes the socket file. (See
/// `nodeipc-handshake`, which does the work.)
// Not `Debug`, as before it moved: a `Result<ChannelServer>` keeps
// `.err().expect(..)` in callers free of clippy's `err_expect`.
pub struct ChannelServer {
    inner: HandshakeServer,
}

impl ChannelServer {
    /// Binds `path` and starts answering logons with the channel's `offer`
    /// ([`Coordinator::offer`](crate::Coordinator::offer)).
    ///
    /// # Errors
    /// [`Error::Handshake`](crate::Error::Handshake) wrapping the handshake
    /// layer's error: `InvalidConfig` for a zero `logon_timeout` (a socket
    /// timeout of zero means none at all: a silent client would hold its
    /// thread forever), `FdPass` when the path cannot be bound safely, `Io`
    /// if the thread cannot start.
    ///
    /// # Examples
    /// ```no_run
    /// use nodeipc_channel::{Channel, ChannelServer, HandshakeOptions};
    /// let coordinator = Channel::anonymous("/nodeipc-doc-serve").workers(2).create()?;
    /// let server = ChannelServer::bind(
    ///     "/run/user/1000/job/channel.sock",
    ///     HandshakeOptions::default(),
    ///     coordinator.offer()?,
    /// )?;
    /// # Ok::<(), nodeipc_channel::Error>(())
    /// ```
    pub fn bind(
        path: impl AsRef<Path>,
        options: HandshakeOptions,
        offer: ChannelOffer,
    ) -> Result<ChannelServer> {
        ChannelServer::bind_with(path, options, move |logon, peer| offer.decide(logon, peer))
    }

    /// [`bind`](ChannelServer::bind) deciding each logon with `decide`
    /// instead: a policy of the caller's, which may ask a
    /// [`ChannelOffer`] in turn.
    ///
    /// # Errors
    /// As [`bind`](ChannelServer::bind).
    pub fn bind_with(
        path: impl AsRef<Path>,
        options: HandshakeOptions,
        decide: impl Fn(&Logon, &Credentials) -> Decision + Send + Sync + 'static,
    ) -> Result<ChannelServer> {
        let inner = HandshakeServer::bind(path, options, decide)?;
        Ok(ChannelServer { inner })
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
