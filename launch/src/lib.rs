#![doc = include_str!("../README.md")]
#![deny(unsafe_op_in_unsafe_fn)]

mod backend;
mod error;
mod events;
mod ft;
mod health;
mod launcher;
mod monitors;
mod options;
mod output;
mod progress;
mod rank;
mod rdzv;
mod reap;
mod round;
mod workload;

#[cfg(feature = "etcd")]
mod etcd;

pub use backend::{
    Begin, Decision, LocalBackend, RoundBackend, RoundPlan, RoundReport, RoundResult, free_port,
};
pub use error::{Error, Result};
#[cfg(feature = "etcd")]
pub use etcd::EtcdBackend;
pub use events::Event;
pub use ft::{FT_SETTINGS, FtSetting, FtSettings, FtSupport, FtValue, resolve as resolve_ft};
pub use launcher::{HealthChecks, Outcome, launch, launch_id, launch_with};
pub use options::{HealthOptions, LaunchOptions, MAX_NPROC, MAX_RESTARTS, MAX_STOP_TIMEOUT};
pub use output::{OutputOptions, StreamChoice, Streams};
pub use progress::{NO_RESTART_EXIT_CODE, ProgressOptions};
pub use rdzv::{
    DEFAULT_LAST_CALL, EtcdRendezvous, EtcdTls, MAX_ENDPOINTS, MAX_NNODES, MAX_RDZV_TIMEOUT,
    MAX_RDZV_TTL, RdzvOptions, Rendezvous,
};
