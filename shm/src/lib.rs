#![doc = include_str!("../README.md")]
#![deny(unsafe_op_in_unsafe_fn)]

mod error;
mod fork;
mod lease;
mod list;
mod name;
mod open;
mod procscan;
mod region;
mod space;
mod view;
pub mod wait;

pub use error::{Error, Result};
pub use fork::{ForkGeneration, Forked};
pub use lease::{NotProved, Unheld};
pub use list::{
    Cleanup, KeepReason, ObjectKind, ShmObject, list, list_with, plan_cleanup, plan_cleanup_with,
    remove_stale, remove_stale_with,
};
pub use name::{MAX_NAME_LEN, validate_name};
pub use open::{OpenOptions, open_unmapped};
pub use procscan::{Gap, ProcessScan};
pub use region::{Pages, REGION_MODE, Region, unlink};
pub use view::{Padded, ShmSafe};

/// Where Linux keeps POSIX shared-memory objects and named semaphores.
pub const SHM_DIR: &str = "/dev/shm";
