#![doc = include_str!("../README.md")]

mod slab;
mod sync;

mod error;
#[cfg(not(loom))]
mod handle;
#[cfg(not(loom))]
mod layout;
#[cfg(not(loom))]
mod pool;

#[cfg(all(loom, test))]
mod loom_model;

pub use error::{Error, Result};
#[cfg(not(loom))]
pub use handle::{BlockRef, Handle, Occupancy, Reclaimed, inspect};
#[cfg(not(loom))]
pub use layout::{
    MAGIC, MAX_CLASSES, MAX_HANDLES, MAX_SLABS, MIN_CLASS, PoolConfig, SLAB_SIZE, VERSION,
};
#[cfg(not(loom))]
pub use pool::Pool;
pub use slab::MAX_BLOCKS;
