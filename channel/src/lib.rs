#![doc = include_str!("../README.md")]
#![deny(unsafe_op_in_unsafe_fn)]

mod aggregate;
pub mod broadcast;
mod builder;
mod config;
mod coordinator;
mod error;
mod handshake;
mod layout;
pub mod mode;
mod payload;
mod sem_kind;
mod sems;
mod wait;
mod worker;

pub use aggregate::{Aggregate, Pick, PullKvRule};
pub use builder::{Channel, ChannelBuilder};
pub use config::ChannelConfig;
pub use coordinator::{
    Answers, Coordinator, GatherAhead, Gathered, Picked, Reply, RequestLoan, ResponseHandler,
    ThreadPolicy,
};
pub use error::{Error, Result};
pub use handshake::{
    ChannelOffer, ChannelServer, Decision, HandshakeError, HandshakeOptions, HandshakeStats, Offer,
    Session, connect, worker_logon,
};
pub use layout::Layout;
pub use mode::{Aggregated, AggregatedBy, All, First, GatherMode, Init, Mode, Rank0AfterAll};
pub use payload::{Payload, Raw};
pub use sem_kind::{Direction, Role, SemKind};
pub use worker::{InPlace, Worker};

/// The most workers a channel can have.
pub const MAX_WORKERS: u32 = 1024;
/// The deepest request ring.
pub const MAX_DEPTH: u32 = 64;
/// The largest request frame or response slot, in bytes.
pub const MAX_SLOT: usize = 1 << 30;
