//! The pool's integration tests, one module per former test binary, linked
//! once. Tests that run this binary again in a child (`child_main`) name it
//! by `nodeipc_testkit::test_path`.

mod hostile;
mod local;
mod processes;
mod stress;
mod view;
