//! The cross-crate, multi-process tests, one module per former test binary,
//! linked once. `crash.rs` and `soak.rs` stay binaries of their own: they
//! count this process's descriptors (and the soak its mappings and resident
//! memory), which tests running beside them would change.

mod agave_messages;
mod barrier_processes;
mod channel_processes;
mod crash_barrier;
mod fdpass_processes;
mod fuzz_props;
mod handshake_processes;
mod huge_pages;
mod io_errors;
mod layout_peers;
mod names;
mod pool_fuzz;
mod queue_fuzz;
mod scheduler_session;
mod security_peers;
mod security_squatting;
mod sem_hostile_processes;
mod shm_sem_processes;
mod squatting;
