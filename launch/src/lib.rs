#![doc = include_str!("../README.md")]
#![deny(unsafe_op_in_unsafe_fn)]

mod backend;
mod error;
mod events;
mod health;
mod launcher;
mod monitors;
mod options;
mod rank;
mod reap;
mod round;
mod signals;

pub use backend::{LocalBackend, RoundBackend, RoundPlan, RoundResult, free_port};
pub use error::{Error, Result};
pub use events::Event;
pub use launcher::{HealthChecks, Outcome, launch, launch_id, launch_with};
pub use options::{HealthOptions, LaunchOptions, MAX_NPROC, MAX_RESTARTS, MAX_STOP_TIMEOUT};
