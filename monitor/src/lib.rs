#![doc = include_str!("../README.md")]
#![deny(unsafe_op_in_unsafe_fn)]

mod bind;
mod client;
mod config;
mod conn;
mod error;
mod estimator;
mod fastpath;
mod health;
mod limits;
mod logging;
mod procfs;
mod refusal;
mod server;
mod status;
pub mod tracker;
mod wire;

pub use bind::control_socket_path;
pub use client::{ControlClient, EffectiveConfig, MonitorClient};
pub use config::{
    MAX_CHECK_INTERVAL, MAX_CONNECTION_DEADLINE, MonitorConfig, TimeoutUpdate, Timeouts,
    signal_by_name, signal_by_number, signal_name,
};
pub use error::{Error, Result};
pub use estimator::{Observations, Samples, TimeoutEstimator};
pub use health::{HealthCheck, RankContext};
pub use limits::{MAX_FRAME, MAX_HOST, MAX_SECTION_NAME, MAX_SECTIONS, MAX_STATE};
pub use logging::{LOG_TARGET, LOG_WINDOW, LogLevel, MAX_LOG_LINE};
pub use refusal::RefusalCode;
pub use server::{MonitorServer, Shutdown, StopHandle};
pub use status::{MonitorStatus, OpenSectionStatus, RankInfo, RankState, TimeoutsMs};

/// The signal type the configuration uses (`rustix`'s, re-exported by
/// `nodeipc-fdpass`).
pub use nodeipc_fdpass::Signal;
