//! The execute channel's logon, one user of `nodeipc-handshake`: a worker
//! connects to the coordinator's Unix socket, sends a `Logon` frame, and
//! receives `Accept` with the channel's region descriptors attached, or
//! `Reject` with a reason. The server closes each connection once it has
//! answered (the channel watches its workers through the regions' pids and
//! pidfds, not through a session socket).

mod client;
mod offer;
mod server;

pub use client::{Session, connect, worker_logon};
pub use nodeipc_handshake::{Decision, HandshakeOptions, HandshakeStats, Offer};
pub use offer::ChannelOffer;
pub use server::HandshakeServer;

/// The largest `LogonReply` frame a channel client reads.
pub(crate) const MAX_REPLY: usize = 64 << 10;
/// The most descriptors a channel's `Accept` carries.
pub(crate) const MAX_PASSED_FDS: usize = 16;

/// The handshake layer's error as the channel's.
pub(crate) fn channel_error(error: nodeipc_handshake::Error) -> crate::Error {
    use nodeipc_handshake::Error as H;
    match error {
        H::InvalidConfig { server, reason } => crate::Error::InvalidConfig {
            channel: server,
            reason,
        },
        H::Rejected { code, reason } => crate::Error::Rejected { code, reason },
        H::Handshake { peer, reason } => crate::Error::Handshake { peer, reason },
        H::Timeout { peer, op, waited } => crate::Error::Timeout {
            channel: peer,
            op,
            waited,
        },
        H::FdPass { context, source } => crate::Error::FdPass { context, source },
        H::Proto { context, source } => crate::Error::Proto { context, source },
        H::Io {
            context,
            op,
            source,
        } => crate::Error::Io {
            context,
            op,
            source,
        },
        other => crate::Error::Handshake {
            peer: "the handshake layer".to_owned(),
            reason: other.to_string(),
        },
    }
}
