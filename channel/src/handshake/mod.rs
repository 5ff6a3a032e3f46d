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
pub use nodeipc_handshake::{
    Decision, Error as HandshakeError, HandshakeOptions, HandshakeStats, Offer,
};
pub use offer::ChannelOffer;
pub use server::ChannelServer;

/// The largest `LogonReply` frame a channel client reads.
pub(crate) const MAX_REPLY: usize = 64 << 10;
/// The most descriptors a channel's `Accept` carries.
pub(crate) const MAX_PASSED_FDS: usize = 16;
