//! Agave's scheduler session on nodeipc: a server (the validator) owns a
//! block pool, the TPU → scheduler queue, a progress queue and a queue pair
//! per worker; its worker processes and an external scheduler log on
//! through `nodeipc-handshake` and receive what the server decides. Shared
//! by `tests/scheduler_session.rs`, the `session_peer` program and the
//! `scheduler_session` example.
//!
//! A transaction is a pool block (64 to 208 bytes, each a function of its
//! id) referenced from a queue message; it flows TPU → scheduler → worker →
//! scheduler, and each worker also reports what it processed to the server
//! on a queue of its own, which is how the server counts deliveries.

mod peers;
mod server;
mod tpu;

use std::time::Duration;

use nodeipc_queue::{Pod, Zeroable};

pub use peers::{FLUSH_AFTER, run_scheduler, run_worker};
pub use server::{SessionServer, Setup};
pub use tpu::{Ledger, Tally, TpuProgress, WINDOW};

/// A transaction as queues carry it: its id and its block.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub struct Tx {
    /// The transaction's id, 0..count.
    pub id: u64,
    /// Its pool block (`BlockRef::to_bits`).
    pub block: u64,
    /// When the scheduler handed it to a worker (CLOCK_MONOTONIC, ns).
    pub stamp: u64,
    /// Its length in bytes.
    pub len: u32,
    /// Reserved.
    pub _pad: u32,
}

/// A worker's answer: the transaction, and the sum of its bytes (or
/// [`CORRUPT`] when a byte was not what its id makes it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub struct Done {
    /// The transaction's id.
    pub id: u64,
    /// Its block, for the scheduler to free.
    pub block: u64,
    /// The scheduler's stamp, echoed.
    pub stamp: u64,
    /// The sum of its bytes, or [`CORRUPT`].
    pub sum: u64,
}

/// A progress update from the server (Agave's bank progress).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub struct Progress {
    /// A slot number.
    pub slot: u64,
    /// Transactions pushed so far.
    pub pushed: u64,
}

/// Schema ids of the three message types.
pub const TX_SCHEMA: u64 = 0x5458_0001;
/// Schema id of [`Done`].
pub const DONE_SCHEMA: u64 = 0x444f_0001;
/// Schema id of [`Progress`].
pub const PROGRESS_SCHEMA: u64 = 0x5052_0001;
/// A [`Done::sum`] that says a byte was wrong.
pub const CORRUPT: u64 = u64::MAX;
/// The roles the server hands out.
pub mod roles {
    /// The block pool.
    pub const POOL: &str = "pool";
    /// TPU → scheduler.
    pub const TPU: &str = "tpu_to_scheduler";
    /// Server → scheduler progress.
    pub const PROGRESS: &str = "progress";
    /// Scheduler → worker `w`.
    pub fn to_worker(w: u32) -> String {
        format!("worker.{w}.to")
    }
    /// Worker `w` → scheduler.
    pub fn from_worker(w: u32) -> String {
        format!("worker.{w}.from")
    }
    /// Worker `w` → server (what it processed).
    pub const REPORT: &str = "report";
}

/// The length of transaction `id`: 64 to 208 bytes (the pool's 256-byte class).
pub fn tx_len(id: u64) -> usize {
    64 + (id % 4) as usize * 48
}

/// Fills `buf` with transaction `id`'s bytes: its id, then a pattern of it.
pub fn tx_bytes(id: u64, buf: &mut [u8]) {
    let seed = id.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for (j, b) in buf.iter_mut().enumerate() {
        *b = (seed >> (8 * (j % 8))) as u8 ^ (j as u8);
    }
    if buf.len() >= 8 {
        buf[..8].copy_from_slice(&id.to_le_bytes());
    }
}

/// The sum a worker reports for transaction `id`.
pub fn tx_sum(id: u64) -> u64 {
    let mut buf = [0u8; 256];
    let len = tx_len(id);
    tx_bytes(id, &mut buf[..len]);
    buf[..len].iter().map(|&b| u64::from(b)).sum()
}

/// CLOCK_MONOTONIC in nanoseconds: comparable across processes.
pub fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    (t.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec as u64)
}

/// How long peers wait for anything at once: short, so they notice the
/// session's end and dead peers quickly.
pub const TICK: Duration = Duration::from_millis(2);
