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
pub use semaphore::Semaphore;
