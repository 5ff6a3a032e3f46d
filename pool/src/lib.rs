#![doc = include_str!("../README.md")]

mod slab;
mod sync;

#[cfg(not(loom))]
mod block_ref;
mod error;
#[cfg(not(loom))]
mod handle;
#[cfg(not(loom))]
mod layout;
#[cfg(not(loom))]
mod occupancy;
#[cfg(not(loom))]
mod pool;
#[cfg(not(loom))]
mod slab_table;
#[cfg(not(loom))]
mod view;

#[cfg(all(loom, test))]
mod loom_model;

#[cfg(not(loom))]
pub use block_ref::BlockRef;
pub use error::{Error, Result};
#[cfg(not(loom))]
pub use handle::{Handle, Reclaimed};
#[cfg(not(loom))]
pub use layout::{
    MAGIC, MAX_CLASSES, MAX_HANDLES, MAX_SLABS, MIN_CLASS, PoolConfig, SLAB_SIZE, VERSION,
};
/// What backs an anonymous region (`anonymous_pages`): normal or huge pages.
pub use nodeipc_shm::Pages;
#[cfg(not(loom))]
pub use occupancy::{Occupancy, inspect};
#[cfg(not(loom))]
pub use pool::Pool;
pub use slab::MAX_BLOCKS;
#[cfg(not(loom))]
pub use view::BlockView;
