#![doc = include_str!("../README.md")]
#![deny(unsafe_op_in_unsafe_fn)]

mod dir;
mod error;
mod open;

pub use dir::{
    PrivateDir, check_dir, check_private_dir, create_private_dir, create_unique_private_dir,
};
pub use error::{Error, Result, file_type_name};
pub use open::{Existing, ModeRule, create_exclusive, create_output, open_regular, read_capped};
