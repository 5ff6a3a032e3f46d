//! The monitor's integration tests, one module per former test binary,
//! linked once; the helper processes (`common::helper`) are this binary
//! too. `log_facade.rs` stays a binary of its own: it installs the
//! process's one `log` logger, which would capture the lines of every test
//! beside it.

mod backpressure;
mod client_timeouts;
mod common;
mod connections;
mod estimator;
mod estimator_initial;
mod fd_exhaustion;
mod field_caps;
mod files;
mod fork;
mod health;
mod health_config;
mod health_parity;
mod hostile_clients;
mod idle_connections;
mod leaks;
mod lifecycle;
mod measure;
mod messages;
mod pid_check;
mod protocol;
mod python;
mod refusal_codes;
mod setup_signals;
mod timeouts;
mod tracker;
mod wire_types;
