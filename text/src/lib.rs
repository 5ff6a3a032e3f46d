#![doc = include_str!("../README.md")]
#![deny(unsafe_op_in_unsafe_fn)]

mod duration;
mod escape;
mod signal;

pub use duration::{InWords, duration, whole_ms};
pub use escape::{Printable, printable};
pub use signal::signal_name;
