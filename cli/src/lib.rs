//! The library half of the `nodeipc` command: the measurements behind
//! `nodeipc bench` ([`bench`]), which the criterion suites and the rival
//! comparisons in `benches/` build on. Nothing here links a rival library
//! or a benchmark crate: `benches/` depends on this, never the reverse.
//!
//! Not a supported API: it serves the `nodeipc` binary and the
//! benchmarks, and changes with them.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod bench;
