//! The shared-memory crate's integration tests, one module per former test
//! binary, linked once. What needs a process of its own (a full `/dev/shm`
//! in a mount namespace, a stray store that faults, a thread with its own
//! descriptor table, a full descriptor table) runs in a child: this binary
//! again, the test named by `nodeipc_testkit::test_path`.

mod cancel;
mod fork;
mod full_tmpfs;
mod list;
mod list_processes;
mod list_proof;
mod list_threads;
mod read_only;
mod region;
mod wait;
