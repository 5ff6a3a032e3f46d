//! The protocol crate's integration tests, one module per former test
//! binary, linked once.

mod frame;
mod messages;
mod props;
mod stream;
mod wire_types;
