#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]

mod error;
mod frame;
mod schema;

pub use error::{Error, Result};
pub use frame::{
    LEN_PREFIX, decode_frame, decode_message, encode_frame, encode_frame_to_vec, frame_len,
    read_frame, write_frame,
};
pub use schema::KnownMessage;

/// Each `.proto` file's serialized `FileDescriptorProto` (comments and
/// positions left out, as `protoc` embeds them), by file name: what another
/// language's protobuf runtime builds its message classes from (the Python
/// package's `*_pb2` modules do), so they always match this crate's contract.
pub const FILE_DESCRIPTORS: &[(&str, &[u8])] =
    include!(concat!(env!("OUT_DIR"), "/descriptors.rs"));

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

/// Calls `$callback!` with the path of every message the three `.proto`
/// files define, so that code that must cover them all (the tests, the fuzz
/// drivers) keeps one list, the one beside the generated types.
#[doc(hidden)]
#[macro_export]
macro_rules! every_message {
    ($callback:ident) => {
        $callback! {
            $crate::execute::ExecuteRequest,
            $crate::execute::ModelInit,
            $crate::execute::ForwardRequest,
            $crate::execute::PullKvRequest,
            $crate::execute::RecoverCommand,
            $crate::execute::Finalize,
            $crate::execute::ExecuteResponse,
            $crate::execute::InitResponse,
            $crate::execute::ForwardResponse,
            $crate::execute::PullKvResponse,
            $crate::execute::PullKvResult,
            $crate::execute::RecoverResponse,
            $crate::handshake::Logon,
            $crate::handshake::Count,
            $crate::handshake::LogonReply,
            $crate::handshake::Accept,
            $crate::handshake::PassedFd,
            $crate::handshake::ChannelGeometry,
            $crate::handshake::Reject,
            $crate::monitor::ClientMessage,
            $crate::monitor::Init,
            $crate::monitor::RankInfo,
            $crate::monitor::Heartbeat,
            $crate::monitor::Section,
            $crate::monitor::UpdateConfig,
            $crate::monitor::Timeouts,
            $crate::monitor::StatusQuery,
            $crate::monitor::ServerMessage,
            $crate::monitor::Ok,
            $crate::monitor::ShmHeartbeat,
            $crate::monitor::Error,
            $crate::monitor::EffectiveConfig,
            $crate::monitor::Status,
            $crate::monitor::OpenSection,
            $crate::monitor::ControlRequest,
            $crate::monitor::CloseConnection,
            $crate::monitor::WorkloadControl,
        }
    };
}
