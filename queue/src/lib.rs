#![doc = include_str!("../README.md")]
// Under loom only the ring and its models are built, for the models; built
// as a dependency (of the pool's tests) under loom, none of it is used.
#![cfg_attr(all(loom, not(test)), allow(dead_code))]

mod layout;
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
#[cfg(not(loom))]
pub use producer::{Batch, Producer};
#[cfg(not(loom))]
pub use queue::Queue;
#[cfg(not(loom))]
pub use role::PeerState;
#[cfg(not(loom))]
pub use select::{Waitable, wait_any};

/// Plain-data messages: any bit pattern is a valid value, no padding.
pub use bytemuck::{Pod, Zeroable};
