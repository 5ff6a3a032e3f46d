//! The handshake's integration tests, one module per former test binary,
//! linked once. A peer killed with SIGKILL and a client of another uid are
//! this binary again in a child, the test named by
//! `nodeipc_testkit::test_path`.

mod death;
mod errors;
mod fork;
mod sessions;
