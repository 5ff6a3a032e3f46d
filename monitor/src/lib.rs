#![doc = include_str!("../README.md")]
#![deny(unsafe_op_in_unsafe_fn)]

mod bind;
mod client;
mod codec;
mod config;
mod conn;
mod error;
mod estimator;
mod estimator_state;
mod fastpath;
mod health;
mod limits;
mod logging;
#[cfg(feature = "json")]
mod nvrx;
mod procfs;
mod refusal;
mod server;
mod signals;
mod spawn;
mod status;
// Public so that `tests/tracker.rs` can drive the state machine with its
// own clock; not a supported API (it speaks the protocol's generated types
// and may change with the server).
#[doc(hidden)]
pub mod tracker;
mod wire;

pub use bind::control_socket_path;
pub use client::{ControlClient, EffectiveConfig, MonitorClient};
pub use config::{
    MAX_CHECK_INTERVAL, MAX_CONNECTION_DEADLINE, MonitorConfig, TimeoutUpdate, Timeouts,
    signal_name,
};
pub use error::{Error, Result};
pub use estimator::TimeoutEstimator;
pub use health::{
    DEFAULT_HEALTH_INTERVAL, Every, GpuCheck, GpuHealth, GpuId, GpuProbe, HealthCheck,
    HealthConfig, HealthSetup, MAX_NICS, NVML_LIBRARY, NicCheck, NicHealth, Nvml, ProcessAlive,
    RankContext, RankGpuCheck, Unavailable, gpu_for_local_rank,
};
pub use limits::{
    MAX_CAUSE, MAX_CONFIG_FILE, MAX_FRAME, MAX_HOST, MAX_SECTION_NAME, MAX_SECTIONS, MAX_STATE,
    MAX_STATUS_FRAME,
};
pub use logging::{LOG_BURST, LOG_TARGET, LOG_WINDOW, LogLevel, MAX_LOG_LINE, StderrLogger};
#[cfg(feature = "json")]
pub use nvrx::NvrxConfig;
pub use refusal::RefusalCode;
pub use server::{MonitorServer, Shutdown, StopHandle};
pub use signals::{StopSignals, block_terminating_signals, terminating_signals};
pub use spawn::{
    CONFIG_ENV, MonitorHandle, SERVE_ENV, SpawnOptions, run_if_server, serve, spawn_monitor,
    spawn_monitor_with,
};
pub use status::{MonitorStatus, OpenSectionStatus, RankInfo, RankState, TimeoutsMs};

/// The signal type the configuration uses (`rustix`'s, re-exported by
/// `nodeipc-fdpass`).
pub use nodeipc_fdpass::Signal;
