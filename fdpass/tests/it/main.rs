//! fdpass's integration tests, one module per former test binary, linked
//! once. `scm_rights.rs` stays a binary of its own: it counts this process's
//! descriptors, which tests running beside it would change. Tests whose
//! work needs another process (another uid, umask 000, a full descriptor
//! table) run this binary again, naming themselves by
//! `nodeipc_testkit::test_path`.

mod connect;
mod fork;
mod handle;
mod listener;
mod liveness;
mod permissions;
mod proc_reads;
mod security_listener;
