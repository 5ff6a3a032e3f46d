//! The semaphores' integration tests, one module per former test binary,
//! linked once. What is process-wide (a signal handler without
//! `SA_RESTART`, another uid) happens in a child: this binary again, the
//! test named by `nodeipc_testkit::test_path`.

mod cancel;
mod conformance;
mod fork;
mod futex;
mod glibc;
mod hostile;
mod interrupted;
mod named;
