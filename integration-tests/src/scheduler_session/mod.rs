//! Agave's scheduler session on nodeipc, on Agave's own message types
//! (`agave-scheduler-bindings` 8.0.0, [`crate::agave_bindings`]): a server
//! (the validator) owns a block pool, the TPU → scheduler queue, a progress
//! queue and a queue pair per execution worker; its worker processes and an
//! external scheduler log on through `nodeipc-handshake` (the server side in
//! Agave's `accept()` shape: [`nodeipc_handshake::Acceptor`]) and receive
//! what the server decides, and the pool handles it grants them by id.
//! Shared by `tests/it/scheduler_session.rs`, the `session_peer` program and
//! the `scheduler_session` example.
//!
//! A transaction is a pool block (64 to 1144 bytes, each a function of its
//! id, which its first 8 bytes hold), referenced by a `TpuToPackMessage`.
//! The scheduler first sends transactions to the check workers, in
//! batches (`PackToCheckWorkerMessage`) on an MPMC ring they all pop; a
//! check worker reads every transaction in place, answers a
//! `CheckResponse` per transaction in a block of its own, on a second
//! MPMC ring (`CheckWorkerToPackMessage`). Checked transactions go on
//! to execution. The scheduler gathers transactions into batches: an array of
//! `SharableTransactionRegion`s in a pool block, referenced by a
//! `PackToExecutionWorkerMessage`. A worker reads the batch and every
//! transaction in place (`BlockView`), checks every byte, writes an
//! `ExecutionResponse` per transaction into a block of its own and answers
//! with an `ExecutionWorkerToPackMessage`; the scheduler reads the
//! responses in place and frees the transactions, the batch and the
//! responses. Each worker also reports what it processed to the server
//! (a [`Done`] per transaction, the test's own message), which is how the
//! server counts deliveries.

mod peers;
mod server;
mod tpu;

use std::time::Duration;

use nodeipc_queue::{Pod, Zeroable};

pub use peers::{FLUSH_AFTER, run_checker, run_scheduler, run_worker};
pub use server::{Grant, SessionServer, Setup};
pub use tpu::{Ledger, Tally, TpuProgress, WINDOW};

/// A worker's report to the server: the transaction, and the sum of its
/// bytes (or [`CORRUPT`] when a byte was not what its id makes it). The
/// test's own message (Agave has none): how the server counts deliveries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub struct Done {
    /// The transaction's id.
    pub id: u64,
    /// Its block (`BlockRef::to_bits`).
    pub block: u64,
    /// When the worker took its batch (CLOCK_MONOTONIC, ns).
    pub stamp: u64,
    /// The sum of its bytes, or [`CORRUPT`].
    pub sum: u64,
}

/// Schema ids of the queues' message types.
pub const TPU_SCHEMA: u64 = 0x5450_5550_0008;
/// `ProgressMessage`.
pub const PROGRESS_SCHEMA: u64 = 0x5052_4f47_0008;
/// `PackToExecutionWorkerMessage`.
pub const TO_WORKER_SCHEMA: u64 = 0x5041_434b_0008;
/// `ExecutionWorkerToPackMessage`.
pub const FROM_WORKER_SCHEMA: u64 = 0x574f_524b_0008;
/// [`Done`].
pub const DONE_SCHEMA: u64 = 0x444f_4e45_0001;
/// `PackToCheckWorkerMessage`.
pub const TO_CHECK_SCHEMA: u64 = 0x4348_4b49_0008;
/// `CheckWorkerToPackMessage`.
pub const FROM_CHECK_SCHEMA: u64 = 0x4348_4b4f_0008;
/// `parsing_and_sanitization_flags`' `FAILED` bit of the bindings: the
/// check worker found the transaction's bytes wrong.
pub const CHECK_FAILED: u8 = 1;
/// A [`Done::sum`] that says a byte was wrong.
pub const CORRUPT: u64 = u64::MAX;
/// `processed_codes::PROCESSED` of the bindings: the batch was processed.
pub const PROCESSED: u8 = 0;
/// `processed_codes::INVALID`: the batch's message was not valid.
pub const INVALID: u8 = 1;
/// `not_included_reasons::NONE`: the transaction was included.
pub const INCLUDED: u8 = 0;
/// The scheduler's own code in `not_included_reason` for a transaction
/// whose bytes were wrong (a custom reason, below the bindings' 64).
pub const WRONG_BYTES: u8 = 63;
/// Transactions in one batch at most (the bindings allow 64).
pub const MAX_BATCH: usize = 16;

/// The roles the server hands out.
pub mod roles {
    /// The block pool.
    pub const POOL: &str = "pool";
    /// TPU → scheduler.
    pub const TPU: &str = "tpu_to_pack";
    /// Server → scheduler progress.
    pub const PROGRESS: &str = "progress_tracker";
    /// Scheduler → worker `w`.
    pub fn to_worker(w: u32) -> String {
        format!("pack_to_worker.{w}")
    }
    /// Worker `w` → scheduler.
    pub fn from_worker(w: u32) -> String {
        format!("worker_to_pack.{w}")
    }
    /// Worker `w` → server (what it processed).
    pub const REPORT: &str = "report";
    /// Scheduler → check workers (an MPMC ring).
    pub const TO_CHECK: &str = "pack_to_check";
    /// Check workers → scheduler (an MPMC ring).
    pub const FROM_CHECK: &str = "check_to_pack";
}

/// The length of transaction `id`: 64 to 1144 bytes.
pub fn tx_len(id: u64) -> usize {
    64 + (id % 16) as usize * 72
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
    let mut buf = [0u8; 2048];
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
