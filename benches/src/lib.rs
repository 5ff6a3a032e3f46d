//! The rival comparisons of the benchmarks, behind the `rivals` feature
//! (off unless asked: `cargo bench -p nodeipc-benches --features rivals`),
//! so a workspace build compiles no rival. The measurements themselves, the
//! ones `nodeipc bench` runs, are `nodeipc_cli::bench`; this crate is a
//! leaf: nothing depends on it.
#![deny(unsafe_op_in_unsafe_fn)]

#[cfg(feature = "rivals")]
pub mod iceoryx;
