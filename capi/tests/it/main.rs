//! The C ABI's integration tests, one module per former test binary, linked
//! once. They compile the C and C++ programs of `tests/c/` against
//! `include/` and the static library (`common`); `header::` checks the
//! checked-in header first in CI (`.ci/steps/capi.sh`).

mod c_api;
mod channel;
mod common;
mod cpp_classes;
mod fork;
mod header;
mod install;
mod kittens_broker;
mod launched;
mod mixed_group;
mod monitor_client;
mod readme;
