#![doc = include_str!("../README.md")]
#![deny(unsafe_op_in_unsafe_fn)]

mod error;
mod futex;
mod glibc;
mod named;
mod semaphore;

pub use error::{Error, Result};
pub use futex::ShmSemaphore;
pub use named::{NamedSemaphore, SEM_VALUE_MAX};
/// How a wait polls and yields before it sleeps (see [`Semaphore::wait_timeout_spin`]).
pub use nodeipc_shm::wait::Spin;
pub use semaphore::Semaphore;
