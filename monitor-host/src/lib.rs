#![doc = include_str!("../README.md")]
#![deny(unsafe_op_in_unsafe_fn)]

mod codec;
mod config;
mod error;
mod estimator_state;
mod health;
mod logging;
mod nvrx;
mod nvrx_calc;
mod spawn;
mod status;

pub use config::{HostConfig, MAX_CONFIG_FILE, MonitorConfigFile};
pub use estimator_state::EstimatorState;
pub use health::{
    DEFAULT_HEALTH_INTERVAL, GpuHealth, GpuId, GpuProbe, HealthChecks, HealthConfig, HealthSetup,
    MAX_NICS, NicHealth, ProcessAlive, Unavailable,
};
pub use logging::StderrLogger;
pub use nvrx::{NvrxConfig, nvrx_document};
pub use nvrx_calc::{HeartbeatTimeouts, NvrxCalc, NvrxState, SectionTimeouts};
pub use spawn::{
    CONFIG_ENV, MonitorHandle, SERVE_ENV, SpawnOptions, run_if_server, serve, spawn_monitor,
    spawn_monitor_with,
};
pub use status::StatusJson;

pub use error::{Error, Result};

/// An [`Error::Config`] naming the value and why.
pub(crate) fn config_error(reason: impl Into<String>) -> Error {
    Error::Config {
        reason: reason.into(),
    }
}

/// An [`Error::Io`]: the call, what it was about, the errno kept.
pub(crate) fn io_error(
    op: &'static str,
    path: impl std::fmt::Display,
    source: impl Into<std::io::Error>,
) -> Error {
    Error::Monitor(nodeipc_monitor::Error::Io {
        op,
        path: path.to_string(),
        source: source.into(),
    })
}
