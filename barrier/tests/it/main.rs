//! The group's integration tests, one module per former test binary, linked
//! once. A full descriptor table and umask 000 happen in a child: this
//! binary again, the test named by `nodeipc_testkit::test_path`.

mod arrivals;
mod fd_exhaustion;
mod fork;
mod hostile_vault;
mod interrupt;
mod private_dir;
mod threads;
