#![doc = include_str!("../README.md")]
#![deny(unsafe_op_in_unsafe_fn)]

mod error;
mod fds;
mod group;
mod mesh;
mod options;
mod vault;

pub use error::{Error, Result};
pub use group::Group;
pub use nodeipc_fdpass::Transport;
pub use options::{GroupOptions, TransportChoice};
pub use vault::{MAX_SLOT_SIZE, MAX_WORLD_SIZE};
