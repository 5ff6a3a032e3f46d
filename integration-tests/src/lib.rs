//! The multi-process tests under `tests/`, the peer programs they spawn
//! under `src/bin/`, and, as this library, the hostile-input drivers that
//! both the property tests (`tests/it/fuzz_props.rs`) and the cargo-fuzz
//! targets (`fuzz/`) run.

pub mod agave_bindings;
pub mod fuzz_drivers;
pub mod scheduler_session;
