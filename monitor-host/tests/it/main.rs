//! monitor-host's integration tests, one module per former test binary,
//! linked once. The fixtures stay in `tests/fixtures/`.

mod config;
mod estimator_state;
mod health_file;
mod nvrx;
