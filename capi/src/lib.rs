//! `libnodeipc.a` and `libnodeipc.so`: the C ABI of nodeipc, declared by
//! `include/nodeipc.h`. See the README.
//!
//! The entry points are `nodeipc-capi-abi`'s (`abi/`): a static or shared
//! library exports every `#[no_mangle] pub extern "C"` function of the
//! crates it links, so this crate only names that one. It holds no code of
//! its own, so that a Rust program linking C or C++ against the ABI (the
//! CLI's benchmarks) depends on that rlib, and no two packages of the
//! workspace write a `libnodeipc.*`.

pub use nodeipc_capi_abi::*;
