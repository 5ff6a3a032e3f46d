//! The TPU (the server's producer of transactions) and its ledger: which
//! ids were pushed, with which block, and how often each was reported done.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nodeipc_pool::{BlockRef, Handle};
use nodeipc_queue::{Consumer, PeerState, Producer, Waitable, Zeroable};

use super::{CORRUPT, Done, tx_bytes, tx_len, tx_sum};
use crate::agave_bindings::{ProgressMessage, SharableTransactionRegion, TpuToPackMessage};

/// Most transactions unreported at once by default: bounds the pool's use.
pub const WINDOW: u64 = 8192;
/// No report for this long while some are missing: the missing are sent
/// again (they were lost with a dead scheduler or worker).
const QUIET: Duration = Duration::from_millis(300);

/// What the workers reported.
#[derive(Debug, Default)]
pub struct Tally {
    /// Reports per id (saturating).
    pub reports: Vec<u8>,
    /// Ids reported at least once.
    pub unique: u64,
    /// Reports beyond the first of an id.
    pub duplicates: u64,
    /// Reports whose bytes were not the transaction's.
    pub corrupt: u64,
}

/// What the TPU pushed and with which blocks.
#[derive(Debug)]
pub struct Ledger {
    /// Transactions in the stream.
    pub count: u64,
    /// Ids pushed so far (each at least once).
    pub next: u64,
    /// The block each id was last pushed with (`BlockRef` bits; 0: none).
    pub blocks: Vec<u64>,
    /// Blocks replaced by a resend: freed, if nobody did, at the end.
    pub superseded: Vec<u64>,
    /// Ids sent again.
    pub resent: u64,
    /// The reports.
    pub tally: Tally,
    /// From the first push to the last report.
    pub elapsed: Duration,
    /// Most transactions unreported at once (1: one at a time, for latency).
    pub window: u64,
    /// When each id was first pushed (CLOCK_MONOTONIC ns).
    pushed_at: Vec<u64>,
    /// From first push to first report, per id reported (ns).
    pub latency_ns: Vec<u64>,
}

/// What the test watches while the TPU runs.
#[derive(Debug, Default)]
pub struct TpuProgress {
    /// Ids reported at least once.
    pub unique: AtomicU64,
    /// Ids pushed.
    pub pushed: AtomicU64,
    /// Stop now (the test gave up).
    pub stop: AtomicBool,
    /// No scheduler holds a session: a quiet stream is not a lost one.
    pub hold: AtomicBool,
}

impl Ledger {
    /// A ledger for `count` transactions.
    pub fn new(count: u64) -> Ledger {
        let n = usize::try_from(count).expect("count fits memory");
        Ledger {
            count,
            next: 0,
            blocks: vec![0; n],
            superseded: Vec::new(),
            resent: 0,
            tally: Tally {
                reports: vec![0; n],
                ..Tally::default()
            },
            elapsed: Duration::ZERO,
            window: WINDOW,
            pushed_at: vec![0; n],
            latency_ns: Vec::new(),
        }
    }

    /// Streams every transaction until each is reported at least once or
    /// `limit` passes.
    ///
    /// # Errors
    /// A queue or pool error, or the limit, named.
    pub fn run(
        &mut self,
        tpu: &mut Producer<TpuToPackMessage>,
        progress: &mut Producer<ProgressMessage>,
        reports: &mut [Consumer<Done>],
        handle: &mut Handle,
        watch: &Arc<TpuProgress>,
        limit: Duration,
    ) -> Result<(), String> {
        let start = Instant::now();
        let mut last_report = Instant::now();
        let mut resend: VecDeque<u64> = VecDeque::new();
        let mut dones = [Done::zeroed(); 256];
        let mut buf = [0u8; 2048];
        let mut slot = 0u64;
        while self.tally.unique < self.count {
            if watch.stop.load(Ordering::Relaxed) || start.elapsed() > limit {
                return Err(format!(
                    "after {:?}: {} of {} reported, {} pushed",
                    start.elapsed(),
                    self.tally.unique,
                    self.count,
                    self.next
                ));
            }
            let mut busy = false;
            for report in reports.iter_mut() {
                let n = report.try_pop_into(&mut dones).map_err(|e| e.to_string())?;
                for done in &dones[..n] {
                    self.tally_one(done);
                }
                if n > 0 {
                    busy = true;
                    last_report = Instant::now();
                }
            }
            watch.unique.store(self.tally.unique, Ordering::Relaxed);
            if watch.hold.load(Ordering::Relaxed) {
                last_report = Instant::now();
            }
            if resend.is_empty() && last_report.elapsed() > QUIET {
                resend.extend((0..self.next).filter(|&id| self.tally.reports[id as usize] == 0));
                last_report = Instant::now();
            }
            for _ in 0..256 {
                let id = match resend.front() {
                    Some(&id) => id,
                    None if self.next < self.count
                        && self.next - self.tally.unique < self.window =>
                    {
                        self.next
                    }
                    None => break,
                };
                let len = tx_len(id);
                let block = match handle.alloc(len) {
                    Ok(block) => block,
                    Err(nodeipc_pool::Error::Full { .. }) => {
                        handle.clean_remote_frees().map_err(|e| e.to_string())?;
                        break;
                    }
                    Err(e) => return Err(e.to_string()),
                };
                tx_bytes(id, &mut buf[..len]);
                handle
                    .write_at(block, 0, &buf[..len])
                    .map_err(|e| e.to_string())?;
                let tx = TpuToPackMessage {
                    transaction: SharableTransactionRegion {
                        offset: block.to_bits() as usize,
                        length: len as u32,
                    },
                    flags: 0,
                    src_addr: [0; 16],
                };
                let pushed = match tpu.try_push(&tx) {
                    Ok(pushed) => pushed,
                    // No scheduler right now (it died, or left): the next
                    // one takes the queue over, contents intact.
                    Err(
                        nodeipc_queue::Error::PeerDied { .. }
                        | nodeipc_queue::Error::PeerLeft { .. },
                    ) => false,
                    Err(e) => return Err(e.to_string()),
                };
                if !pushed {
                    handle.free(block).map_err(|e| e.to_string())?;
                    break;
                }
                busy = true;
                let old = std::mem::replace(&mut self.blocks[id as usize], block.to_bits());
                if resend.front() == Some(&id) {
                    resend.pop_front();
                    self.resent += 1;
                    self.superseded.push(old);
                } else {
                    self.pushed_at[id as usize] = super::monotonic_ns();
                    self.next += 1;
                    watch.pushed.store(self.next, Ordering::Relaxed);
                    if self.next.is_multiple_of(4096) {
                        slot += 1;
                        // Progress is advisory: a full queue (no scheduler)
                        // or none (it died) skips it.
                        let _ = progress.try_push(&ProgressMessage {
                            leader_state: 2,
                            current_slot_progress: (self.next * 100 / self.count) as u8,
                            epoch: 0,
                            current_slot: slot,
                            next_leader_slot: slot,
                            leader_range_end: slot + 4,
                            remaining_cost_units: 48_000_000,
                            remaining_allocated_accounts_data_size: 0,
                            latest_blockhash: [0; 32],
                            target_bank_time_ms: 400,
                        });
                    }
                }
            }
            if !busy {
                // Park on the live workers' report queues (a dead worker's
                // would wake us at once, forever).
                let mut live: Vec<&mut dyn Waitable> = Vec::with_capacity(reports.len());
                for report in reports.iter_mut() {
                    if !matches!(report.peer(), PeerState::Died(_) | PeerState::Left) {
                        live.push(report);
                    }
                }
                if live.is_empty() {
                    std::thread::sleep(Duration::from_micros(200));
                } else {
                    // Timed out or woken: either way, look again.
                    let _ = nodeipc_queue::wait_any(&mut live, Duration::from_micros(500));
                }
            }
        }
        self.elapsed = start.elapsed();
        Ok(())
    }

    fn tally_one(&mut self, done: &Done) {
        let Some(count) = usize::try_from(done.id)
            .ok()
            .and_then(|i| self.tally.reports.get_mut(i))
        else {
            self.tally.corrupt += 1;
            return;
        };
        if done.sum == CORRUPT || done.sum != tx_sum(done.id) {
            self.tally.corrupt += 1;
            return;
        }
        if *count == 0 {
            self.tally.unique += 1;
            let at = self.pushed_at[done.id as usize];
            self.latency_ns
                .push(super::monotonic_ns().saturating_sub(at));
        } else {
            self.tally.duplicates += 1;
        }
        *count = count.saturating_add(1);
    }

    /// Frees, from the ledger, what a dead scheduler held: the blocks of ids
    /// pushed in `ids` and every superseded block, each unless someone freed
    /// it already (a stale or free block is refused by the pool: counted).
    /// Returns (freed now, freed before).
    ///
    /// # Errors
    /// Any other pool error.
    pub fn free_leftovers(
        &self,
        handle: &mut Handle,
        ids: std::ops::Range<u64>,
    ) -> Result<(u64, u64), String> {
        let (mut freed, mut before) = (0, 0);
        let blocks = ids
            .filter_map(|id| self.blocks.get(id as usize).copied())
            .chain(self.superseded.iter().copied())
            .filter(|&bits| bits != 0);
        for bits in blocks {
            match handle.free(BlockRef::from_bits(bits)) {
                Ok(()) => freed += 1,
                Err(
                    nodeipc_pool::Error::Stale { .. } | nodeipc_pool::Error::NotAllocated { .. },
                ) => {
                    before += 1;
                }
                Err(e) => return Err(e.to_string()),
            }
        }
        Ok((freed, before))
    }
}
