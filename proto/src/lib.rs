#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]

mod error;
mod frame;

pub use error::{Error, Result};
pub use frame::{
    LEN_PREFIX, decode_frame, encode_frame, encode_frame_to_vec, frame_len, read_frame, write_frame,
};

/// The execute channel: `ExecuteRequest` broadcast to the workers and the
/// `ExecuteResponse` each of them answers (`proto/execute.proto`, package
/// `nodeipc.execute.v1`).
#[allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic)]
pub mod execute {
    include!(concat!(env!("OUT_DIR"), "/nodeipc.execute.v1.rs"));
}

/// The logon handshake: `Logon` from the client, `LogonReply` (accept with the
/// passed descriptors, or reject with a reason) from the server
/// (`proto/handshake.proto`, package `nodeipc.handshake.v1`).
#[allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic)]
pub mod handshake {
    include!(concat!(env!("OUT_DIR"), "/nodeipc.handshake.v1.rs"));

    /// The handshake protocol version this crate speaks, sent in
    /// `Logon::protocol_version` and `Accept::protocol_version`. A server
    /// rejects a logon of any other version.
    pub const PROTOCOL_VERSION: u32 = 1;
}

/// The rank monitor: `ClientMessage` from the rank, one `ServerMessage` in
/// answer to each (`proto/monitor.proto`, package `nodeipc.monitor.v1`).
#[allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic)]
pub mod monitor {
    include!(concat!(env!("OUT_DIR"), "/nodeipc.monitor.v1.rs"));
}

pub use handshake::PROTOCOL_VERSION;
/// The payload type of the execute messages' `bytes` fields.
pub use prost::bytes::Bytes;
