//! The logon handshake: a client (a worker) connects to the coordinator's
//! Unix socket, sends a `Logon` frame, and receives a `LogonReply` frame —
//! `Accept` with the channel's region descriptors attached (`SCM_RIGHTS`),
//! or `Reject` with a reason. One logon per connection.

mod client;
mod offer;
mod server;

pub use client::{Session, connect, worker_logon};
pub use offer::ChannelOffer;
pub use server::{Decision, HandshakeOptions, HandshakeServer, HandshakeStats, Offer};

/// The largest `Logon` frame a server reads.
pub(crate) const MAX_LOGON: usize = 4096;
/// The largest `LogonReply` frame a client reads.
pub(crate) const MAX_REPLY: usize = 64 << 10;
/// The most descriptors an `Accept` carries.
pub(crate) const MAX_PASSED_FDS: usize = 16;
