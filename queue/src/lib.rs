#![doc = include_str!("../README.md")]
// Under loom only the ring and its models are built, for the models; built
// as a dependency (of the pool's tests) under loom, none of it is used.
#![cfg_attr(all(loom, not(test)), allow(dead_code))]

// The derive's generated code names `::nodeipc_queue`, this crate too.
extern crate self as nodeipc_queue;

mod layout;
mod message;
mod mpmc;
mod ring;
mod sync;

#[cfg(not(loom))]
mod consumer;
#[cfg(not(loom))]
mod end;
mod error;
#[cfg(not(loom))]
mod inspect;
#[cfg(not(loom))]
mod producer;
#[cfg(not(loom))]
mod queue;
#[cfg(not(loom))]
mod role;
#[cfg(not(loom))]
mod select;

#[cfg(all(loom, test))]
mod loom_model;

#[cfg(not(loom))]
pub use consumer::Consumer;
pub use error::{Error, Result, Role};
#[cfg(not(loom))]
pub use inspect::{QueueInfo, inspect};
pub use layout::{MAGIC, MAX_CAPACITY, MAX_ELEM_SIZE, SLOTS_OFFSET, VERSION};
pub use message::{Invalid, Message};
pub use mpmc::{MAX_PLACES, MPMC_MAGIC, MPMC_MAX_CAPACITY, MPMC_VERSION};
#[cfg(not(loom))]
pub use mpmc::{MpmcConsumer, MpmcProducer, MpmcQueue};
/// `#[derive(Message)]`: see [`Message`].
pub use nodeipc_queue_derive::Message;
/// What backs an anonymous region (`anonymous_pages`): normal or huge pages.
pub use nodeipc_shm::Pages;
#[cfg(not(loom))]
pub use producer::{Batch, Producer};
#[cfg(not(loom))]
pub use queue::Queue;
#[cfg(not(loom))]
pub use role::PeerState;
#[cfg(not(loom))]
pub use select::{Waitable, wait_any};

/// Plain-data messages: any bit pattern is a valid value, no padding
/// (bytemuck's traits; its derives need `bytemuck` with `derive` in your
/// own dependencies: [`Message`]'s derive does not).
pub use bytemuck::{Pod, Zeroable};
