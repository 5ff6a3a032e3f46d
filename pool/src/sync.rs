//! The atomics the pool uses, from one place: std's, or loom's under
//! `cfg(loom)` so the models check the very code the pool runs.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
