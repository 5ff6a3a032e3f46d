#![doc = include_str!("../README.md")]
#![deny(unsafe_op_in_unsafe_fn)]

mod accept;
mod client;
mod error;
mod link;
mod offer;
mod server;
mod wire;

pub use accept::{AcceptedSession, Acceptor};
pub use client::{
    ClientOptions, ClientSession, PassedDescriptor, connect, connect_with, count, logon,
};
pub use error::{Error, Result};
pub use link::{PeerGone, PeerLink};
pub use nodeipc_fdpass::Credentials;
pub use nodeipc_proto::handshake::{
    Accept, Count, FdKind, Logon, PROTOCOL_VERSION, PassedFd, Reject, RejectCode,
};
pub use offer::{Decision, Offer, reject};
pub use server::{HandshakeOptions, HandshakeServer, HandshakeStats, ServerSession};

/// The largest `Logon` frame a server reads by default
/// ([`HandshakeOptions::max_logon`]).
pub const MAX_LOGON: usize = 4096;
/// The largest reply frame a client reads by default
/// ([`ClientOptions::max_reply`]).
pub const MAX_REPLY: usize = 1 << 20;
/// The most descriptors a client takes from one accept by default
/// ([`ClientOptions::max_fds`]): well below a default `RLIMIT_NOFILE` of 1024
/// once the process's own are counted, and above 3 + 2 × 128 workers.
pub const MAX_FDS: usize = 768;
