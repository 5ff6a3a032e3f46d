#![doc = include_str!("../README.md")]
#![deny(unsafe_op_in_unsafe_fn)]

mod error;
mod fork;
mod list;
mod name;
mod open;
mod region;
mod space;
mod view;
pub mod wait;

pub use error::{Error, Result};
pub use fork::{ForkGeneration, Forked};
// The listing and the forensics it needs to prove an object abandoned
// (`/proc` scans, `kcmp`, write leases): `nodeipc ls` and `nodeipc clean`
// are their users, and the region type carries none of them.
pub use list::{
    Cleanup, Gap, KeepReason, NotProved, ObjectKind, ProcessScan, ShmObject, Unheld, list,
    list_with, plan_cleanup, plan_cleanup_with, remove_stale, remove_stale_with,
};
pub use name::{MAX_NAME_LEN, validate_name};
pub use open::{OpenOptions, open_unmapped};
pub use region::{Pages, Prefetch, REGION_MODE, Region, unlink};
pub use view::{Padded, ShmSafe};

/// Where Linux keeps POSIX shared-memory objects and named semaphores.
pub const SHM_DIR: &str = "/dev/shm";
