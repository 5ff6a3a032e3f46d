//! Rings with several producers and consumers that a killed process cannot
//! wedge: per-slot sequence words, a place per producer and per consumer
//! holding its claim, and the claims of the dead resolved by whoever they
//! hold up (see `ring.rs` and the README's MPMC layout).
// Under loom only the ring and its models are used.
#![cfg_attr(loom, allow(dead_code))]

pub(crate) mod layout;
pub(crate) mod ring;

#[cfg(not(loom))]
mod consumer;
#[cfg(not(loom))]
mod end;
#[cfg(not(loom))]
mod producer;
#[cfg(not(loom))]
mod queue;

#[cfg(all(loom, test))]
mod loom_model;

#[cfg(not(loom))]
pub use consumer::MpmcConsumer;
pub use layout::{MAX_PLACES, MPMC_MAGIC, MPMC_MAX_CAPACITY, MPMC_VERSION};
#[cfg(not(loom))]
pub use producer::MpmcProducer;
#[cfg(not(loom))]
pub use queue::MpmcQueue;
