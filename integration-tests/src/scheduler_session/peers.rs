//! The three kinds of peer process: an execution worker and a check
//! worker (the server's own) and the external scheduler. Each logs on, takes its descriptors by role
//! and its pool handles by the ids the server granted, and runs until the
//! server ends its session.

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nodeipc_handshake::{ClientSession, connect, logon};
use nodeipc_pool::{BlockRef, BlockView, Handle};
use nodeipc_queue::{Consumer, Message, MpmcConsumer, MpmcProducer, PeerState, Producer, Waitable};
use nodeipc_shm::Region;

use super::{
    CHECK_FAILED, CORRUPT, DONE_SCHEMA, Done, FROM_CHECK_SCHEMA, FROM_WORKER_SCHEMA, Grant,
    INCLUDED, INVALID, MAX_BATCH, PROCESSED, PROGRESS_SCHEMA, TICK, TO_CHECK_SCHEMA,
    TO_WORKER_SCHEMA, TPU_SCHEMA, WRONG_BYTES, monotonic_ns, roles, tx_bytes, tx_len, tx_sum,
};
use crate::agave_bindings::worker_message_types::{CheckResponse, ExecutionResponse};
use crate::agave_bindings::{
    CheckResponseRegion, CheckWorkerToPackMessage, ExecutionResponseRegion,
    ExecutionWorkerToPackMessage, PackToCheckWorkerMessage, PackToExecutionWorkerMessage,
    ProgressMessage, SharablePubkeys, SharableTransactionBatchRegion, SharableTransactionRegion,
    TpuToPackMessage,
};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// How often a peer looks at its session while idle.
const SESSION_CHECK: Duration = Duration::from_millis(20);
/// How long the TPU must be quiet before the scheduler forwards its
/// container's last `buffer` transactions.
pub const FLUSH_AFTER: Duration = Duration::from_millis(200);
/// How often the scheduler checks a quiet worker's liveness.
const WORKER_CHECK: Duration = Duration::from_millis(5);
/// Bytes of a `SharableTransactionRegion` in a batch's array.
const REGION: usize = size_of::<SharableTransactionRegion>();
/// Bytes of an `ExecutionResponse` in a response array.
const RESPONSE: usize = size_of::<ExecutionResponse>();
/// Bytes of a `CheckResponse` in a response array.
const CHECKED: usize = size_of::<CheckResponse>();

fn pool_region(session: &mut ClientSession) -> Result<Arc<Region>> {
    Ok(Arc::new(Region::from_fd(
        session.take_role(roles::POOL)?.fd,
    )?))
}

/// The `k`-th `T` of an array in a pool block, read in place into a
/// private copy and checked as a queue checks what it pops.
fn element<T: Message>(view: &BlockView<'_>, k: usize) -> Result<T> {
    let mut bytes = [0u8; 256];
    let bytes = &mut bytes[..size_of::<T>()];
    view.copy_to(k * size_of::<T>(), bytes)?;
    Ok(T::read_bytes(bytes)?)
}

/// The id of the transaction in `block` (its first 8 bytes, little-endian),
/// read in place; checks its length and, with `check_bytes`, every byte,
/// returning the sum of its bytes, or [`CORRUPT`].
fn read_transaction(pool: &Handle, block: BlockRef, length: u32) -> (Option<u64>, u64) {
    let Ok(view) = pool.view(block) else {
        return (None, CORRUPT);
    };
    let Ok(id) = view.read_u64_le(0) else {
        return (None, CORRUPT);
    };
    let len = length as usize;
    if id >= 1 << 40 || len != tx_len(id) {
        return (Some(id), CORRUPT);
    }
    let mut expected = [0u8; 2048];
    tx_bytes(id, &mut expected[..len]);
    // Through a small stack buffer: no copy of the transaction anywhere.
    let mut chunk = [0u8; 128];
    let (mut sum, mut same) = (0u64, true);
    let read = view.chunks(0, len, &mut chunk, |at, bytes| {
        same &= bytes == &expected[at..at + bytes.len()];
        sum += bytes.iter().map(|&b| u64::from(b)).sum::<u64>();
    });
    // Bytes read while the block was not the one referenced are not its.
    if read.is_err() || view.verify().is_err() || !same {
        return (Some(id), CORRUPT);
    }
    (Some(id), sum)
}

/// Execution worker `w`: pops batches, reads the batch and each
/// transaction in place, checks every byte against the transaction's id,
/// writes an `ExecutionResponse` per transaction into a block of its own
/// handle (the sum of its bytes as `cost_units`), and answers the scheduler
/// and the server. Runs until the server ends the session.
///
/// # Errors
/// The logon, or a queue or pool failure of our own.
pub fn run_worker(socket: &Path, w: u32) -> Result<()> {
    let mut session = connect(
        socket,
        &logon(&[("worker", u64::from(w))], b"worker".to_vec()),
        Duration::from_secs(10),
    )?;
    session.expect_roles(&[
        roles::POOL.to_owned(),
        roles::to_worker(w),
        roles::from_worker(w),
        roles::REPORT.to_owned(),
    ])?;
    let [id] = Grant::handles_in(session.payload())[..] else {
        return Err("the server granted no pool handle".into());
    };
    let mut pool = Handle::join_id(pool_region(&mut session)?, id)?;
    let mut to = Consumer::<PackToExecutionWorkerMessage>::from_fd(
        session.take_role(&roles::to_worker(w))?.fd,
        TO_WORKER_SCHEMA,
    )?;
    let mut from = Producer::<ExecutionWorkerToPackMessage>::from_fd(
        session.take_role(&roles::from_worker(w))?.fd,
        FROM_WORKER_SCHEMA,
    )?;
    let mut report = Producer::<Done>::from_fd(session.take_role(roles::REPORT)?.fd, DONE_SCHEMA)?;
    println!("WORKER-READY {w}");
    let empty = PackToExecutionWorkerMessage {
        flags: 0,
        max_working_slot: 0,
        batch: SharableTransactionBatchRegion {
            num_transactions: 0,
            transactions_offset: 0,
        },
    };
    let mut batches = [empty; 16];
    let mut responses = [0u8; MAX_BATCH * RESPONSE];
    let (mut processed, mut corrupt) = (0u64, 0u64);
    let mut checked = Instant::now();
    loop {
        let n = match to.pop_into_timeout(&mut batches, TICK) {
            Ok(n) => n,
            Err(nodeipc_queue::Error::TimedOut { .. }) => 0,
            // The scheduler is gone; the next one takes its role over.
            Err(nodeipc_queue::Error::PeerDied { .. } | nodeipc_queue::Error::PeerLeft { .. }) => {
                std::thread::sleep(TICK);
                0
            }
            Err(e) => return Err(e.into()),
        };
        for message in &batches[..n] {
            let stamp = monotonic_ns();
            let count = usize::from(message.batch.num_transactions);
            let batch = BlockRef::from_bits(message.batch.transactions_offset as u64);
            let answer = match pool.view(batch) {
                Ok(view) if count <= MAX_BATCH && view.len() >= count * REGION => {
                    let mut sums = [0u64; MAX_BATCH];
                    for (k, sum) in sums[..count].iter_mut().enumerate() {
                        let region: SharableTransactionRegion = element(&view, k)?;
                        let block = BlockRef::from_bits(region.offset as u64);
                        let (id, s) = read_transaction(&pool, block, region.length);
                        *sum = s;
                        corrupt += u64::from(s == CORRUPT);
                        let done = Done {
                            id: id.unwrap_or(u64::MAX),
                            block: block.to_bits(),
                            stamp,
                            sum: s,
                        };
                        report.push_timeout(&done, Duration::from_secs(5))?;
                        ExecutionResponse {
                            execution_slot: 1,
                            not_included_reason: if s == CORRUPT { WRONG_BYTES } else { INCLUDED },
                            execution_status: 0,
                            cost_units: s,
                            fee_payer_balance: 0,
                        }
                        .write_bytes(&mut responses[k * RESPONSE..(k + 1) * RESPONSE]);
                    }
                    let block = pool.alloc(count.max(1) * RESPONSE)?;
                    pool.write_at(block, 0, &responses[..count * RESPONSE])?;
                    processed += count as u64;
                    ExecutionWorkerToPackMessage {
                        batch: message.batch,
                        processed_code: PROCESSED,
                        responses: ExecutionResponseRegion {
                            num_transaction_responses: count as u8,
                            transaction_responses_offset: block.to_bits() as usize,
                        },
                    }
                }
                _ => ExecutionWorkerToPackMessage {
                    batch: message.batch,
                    processed_code: INVALID,
                    responses: ExecutionResponseRegion {
                        num_transaction_responses: 0,
                        transaction_responses_offset: 0,
                    },
                },
            };
            // A scheduler that died leaves its answers to the next one.
            while let Err(e) = from.push_timeout(&answer, TICK) {
                match e {
                    nodeipc_queue::Error::TimedOut { .. }
                    | nodeipc_queue::Error::PeerDied { .. }
                    | nodeipc_queue::Error::PeerLeft { .. } => {
                        if !session.server_alive() {
                            println!("WORKER-DONE {w} processed={processed} corrupt={corrupt}");
                            return Ok(());
                        }
                        std::thread::sleep(TICK);
                    }
                    e => return Err(e.into()),
                }
            }
        }
        if n == 0 && checked.elapsed() > SESSION_CHECK {
            checked = Instant::now();
            let _ = pool.clean_remote_frees();
            if !session.server_alive() {
                break;
            }
        }
    }
    println!("WORKER-DONE {w} processed={processed} corrupt={corrupt}");
    Ok(())
}

/// Check worker `c`: pops check batches from the MPMC ring all check
/// workers share, reads each transaction in place, checks every byte, and
/// answers a `CheckResponse` per transaction (its byte sum as the
/// estimated cost) in a block of its own handle, on the second MPMC ring.
/// Runs until the server ends the session.
///
/// # Errors
/// The logon, or a queue or pool failure of our own.
pub fn run_checker(socket: &Path, c: u32) -> Result<()> {
    let mut session = connect(
        socket,
        &logon(&[("checker", u64::from(c))], b"checker".to_vec()),
        Duration::from_secs(10),
    )?;
    session.expect_roles(&[
        roles::POOL.to_owned(),
        roles::TO_CHECK.to_owned(),
        roles::FROM_CHECK.to_owned(),
    ])?;
    let [id] = Grant::handles_in(session.payload())[..] else {
        return Err("the server granted no pool handle".into());
    };
    let mut pool = Handle::join_id(pool_region(&mut session)?, id)?;
    let mut rx = MpmcConsumer::<PackToCheckWorkerMessage>::from_fd(
        session.take_role(roles::TO_CHECK)?.fd,
        TO_CHECK_SCHEMA,
    )?;
    let mut tx = MpmcProducer::<CheckWorkerToPackMessage>::from_fd(
        session.take_role(roles::FROM_CHECK)?.fd,
        FROM_CHECK_SCHEMA,
    )?;
    println!("CHECKER-READY {c} place={}", rx.place());
    let mut responses = [0u8; MAX_BATCH * CHECKED];
    let (mut checked, mut corrupt) = (0u64, 0u64);
    let mut looked = Instant::now();
    loop {
        let message = match rx.pop_timeout(TICK) {
            Ok(message) => message,
            Err(nodeipc_queue::Error::TimedOut { .. }) => {
                if looked.elapsed() > SESSION_CHECK {
                    looked = Instant::now();
                    let _ = pool.clean_remote_frees();
                    if !session.server_alive() {
                        break;
                    }
                }
                continue;
            }
            // No scheduler right now: the next one takes its place over.
            Err(nodeipc_queue::Error::PeerDied { .. } | nodeipc_queue::Error::PeerLeft { .. }) => {
                if !session.server_alive() {
                    break;
                }
                std::thread::sleep(TICK);
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let count = usize::from(message.batch.num_transactions);
        let batch = BlockRef::from_bits(message.batch.transactions_offset as u64);
        let answer = match pool.view(batch) {
            Ok(view) if count <= MAX_BATCH && view.len() >= count * REGION => {
                for k in 0..count {
                    let region: SharableTransactionRegion = element(&view, k)?;
                    let block = BlockRef::from_bits(region.offset as u64);
                    let (_, sum) = read_transaction(&pool, block, region.length);
                    corrupt += u64::from(sum == CORRUPT);
                    CheckResponse {
                        parsing_and_sanitization_flags: if sum == CORRUPT {
                            CHECK_FAILED
                        } else {
                            0
                        },
                        status_cache_check_flags: 0,
                        fee_payer_balance_flags: 0,
                        resolve_flags: 0,
                        scheduling_details_flags: 0,
                        age_nonce_check_flags: 0,
                        included_slot: 0,
                        transaction_fee: 5000,
                        prioritization_fee: 0,
                        estimated_cost_units: sum,
                        allocated_accounts_data_size: 0,
                        balance_slot: 0,
                        fee_payer_balance: 0,
                        resolution_slot: 0,
                        min_alt_deactivation_slot: u64::MAX,
                        resolved_pubkeys: SharablePubkeys {
                            offset: 0,
                            num_pubkeys: 0,
                        },
                    }
                    .write_bytes(&mut responses[k * CHECKED..(k + 1) * CHECKED]);
                }
                let block = pool.alloc(count.max(1) * CHECKED)?;
                pool.write_at(block, 0, &responses[..count * CHECKED])?;
                checked += count as u64;
                CheckWorkerToPackMessage {
                    batch: message.batch,
                    processed_code: PROCESSED,
                    responses: CheckResponseRegion {
                        num_transaction_responses: count as u8,
                        transaction_responses_offset: block.to_bits() as usize,
                    },
                }
            }
            _ => CheckWorkerToPackMessage {
                batch: message.batch,
                processed_code: INVALID,
                responses: CheckResponseRegion {
                    num_transaction_responses: 0,
                    transaction_responses_offset: 0,
                },
            },
        };
        // A scheduler that died leaves its answers to the next one.
        while let Err(e) = tx.push_timeout(&answer, TICK) {
            match e {
                nodeipc_queue::Error::TimedOut { .. }
                | nodeipc_queue::Error::PeerDied { .. }
                | nodeipc_queue::Error::PeerLeft { .. } => {
                    if !session.server_alive() {
                        println!("CHECKER-DONE {c} checked={checked} corrupt={corrupt}");
                        return Ok(());
                    }
                    std::thread::sleep(TICK);
                }
                e => return Err(e.into()),
            }
        }
    }
    println!("CHECKER-DONE {c} checked={checked} corrupt={corrupt}");
    Ok(())
}

/// A transaction the scheduler holds: its id and its region.
#[derive(Clone, Copy, Debug)]
struct Tx {
    id: u64,
    region: SharableTransactionRegion,
}

/// A batch sent to a worker and not answered yet.
#[derive(Debug)]
struct InFlight {
    txs: Vec<Tx>,
    stamp: u64,
}

/// One worker as the scheduler sees it.
struct WorkerEnds {
    w: u32,
    to: Producer<PackToExecutionWorkerMessage>,
    from: Consumer<ExecutionWorkerToPackMessage>,
    alive: bool,
    /// Batches sent, by their block's reference.
    in_flight: HashMap<u64, InFlight>,
    checked: Instant,
}

/// Transactions' frees are batched per handle (`free_batch`, as rts-alloc
/// batches its remote frees): a scheduler killed mid-stream holds up to
/// this many, which the TPU's ledger then frees (it knows every
/// transaction's block). Batches and responses are freed at once.
const FREE_BATCH: usize = 128;

/// What the scheduler did.
#[derive(Debug, Default)]
struct Counts {
    to_free: Vec<Vec<BlockRef>>,
    forwarded: u64,
    batches: u64,
    check_batches: u64,
    check_orphans: u64,
    check_failed: u64,
    completed: u64,
    orphans: u64,
    corrupt: u64,
    free_errors: u64,
    progress: u64,
    rerouted: u64,
    rtt_ns: Vec<u64>,
}

impl Counts {
    /// Queues `block` to be freed through handle `h`.
    fn free(&mut self, pool: &mut [Handle], h: usize, block: BlockRef) {
        self.to_free[h].push(block);
        if self.to_free[h].len() >= FREE_BATCH {
            flush_frees(pool, self, h);
        }
    }
}

/// The external scheduler: logs on asking for `workers` workers and
/// `handles` pool handles (taken by the ids the server grants), and sends
/// the TPU's transactions to the workers in batches, round robin, freeing
/// each transaction, its batch and the worker's responses when the answer
/// comes. A worker that dies is dropped (its queues' operations say
/// `PeerDied`, a push to it included) and what it held is sent to the
/// others. Answers to batches a dead scheduler sent are taken as orphans:
/// checked and freed all the same. Runs until the server ends the session.
///
/// `buffer`: transactions kept in the scheduler's own container before it
/// forwards (as Agave's scheduler holds a priority container), flushed
/// once the TPU has been quiet for [`FLUSH_AFTER`]; 0 forwards at once. A
/// scheduler killed with a full container loses those transactions: the
/// server's at-least-once resend is what brings them back.
///
/// # Errors
/// The logon, or a queue or pool failure of our own.
pub fn run_scheduler(socket: &Path, workers: u32, handles: u32, buffer: usize) -> Result<()> {
    let mut session = connect(
        socket,
        &logon(
            &[
                ("workers", u64::from(workers)),
                ("pool_handles", u64::from(handles)),
            ],
            b"scheduler".to_vec(),
        ),
        Duration::from_secs(10),
    )?;
    let mut expected = vec![
        roles::POOL.to_owned(),
        roles::TPU.to_owned(),
        roles::PROGRESS.to_owned(),
        roles::TO_CHECK.to_owned(),
        roles::FROM_CHECK.to_owned(),
    ];
    for w in 0..workers {
        expected.push(roles::to_worker(w));
        expected.push(roles::from_worker(w));
    }
    session.expect_roles(&expected)?;
    let ids = Grant::handles_in(session.payload());
    if ids.is_empty() {
        return Err("the server granted no pool handle".into());
    }
    let region = pool_region(&mut session)?;
    let mut pool: Vec<Handle> = ids
        .iter()
        .map(|&id| Handle::join_id(Arc::clone(&region), id))
        .collect::<nodeipc_pool::Result<_>>()?;
    let mut tpu =
        Consumer::<TpuToPackMessage>::from_fd(session.take_role(roles::TPU)?.fd, TPU_SCHEMA)?;
    let mut progress = Consumer::<ProgressMessage>::from_fd(
        session.take_role(roles::PROGRESS)?.fd,
        PROGRESS_SCHEMA,
    )?;
    let mut to_check = MpmcProducer::<PackToCheckWorkerMessage>::from_fd(
        session.take_role(roles::TO_CHECK)?.fd,
        TO_CHECK_SCHEMA,
    )?;
    let mut from_check = MpmcConsumer::<CheckWorkerToPackMessage>::from_fd(
        session.take_role(roles::FROM_CHECK)?.fd,
        FROM_CHECK_SCHEMA,
    )?;
    // Check batches sent and not answered, by their block's reference.
    let mut checking: HashMap<u64, Vec<Tx>> = HashMap::new();
    // Transactions the check workers passed, on their way to execution.
    let mut ready: VecDeque<Tx> = VecDeque::new();
    let mut ends = Vec::new();
    for w in 0..workers {
        ends.push(WorkerEnds {
            w,
            to: Producer::from_fd(
                session.take_role(&roles::to_worker(w))?.fd,
                TO_WORKER_SCHEMA,
            )?,
            from: Consumer::from_fd(
                session.take_role(&roles::from_worker(w))?.fd,
                FROM_WORKER_SCHEMA,
            )?,
            alive: true,
            in_flight: HashMap::new(),
            checked: Instant::now(),
        });
    }
    println!("SCHEDULER-READY pid={} handles={ids:?}", std::process::id());
    let mut counts = Counts {
        to_free: vec![Vec::new(); pool.len()],
        ..Counts::default()
    };
    let mut pending: VecDeque<Tx> = VecDeque::new();
    let empty_region = SharableTransactionRegion {
        offset: 0,
        length: 0,
    };
    let mut arrivals = [TpuToPackMessage {
        transaction: empty_region,
        flags: 0,
        src_addr: [0; 16],
    }; 64];
    let mut answers = [ExecutionWorkerToPackMessage {
        batch: SharableTransactionBatchRegion {
            num_transactions: 0,
            transactions_offset: 0,
        },
        processed_code: 0,
        responses: ExecutionResponseRegion {
            num_transaction_responses: 0,
            transaction_responses_offset: 0,
        },
    }; 32];
    let mut ticks = [ProgressMessage {
        leader_state: 0,
        current_slot_progress: 0,
        epoch: 0,
        current_slot: 0,
        next_leader_slot: 0,
        leader_range_end: 0,
        remaining_cost_units: 0,
        remaining_allocated_accounts_data_size: 0,
        latest_blockhash: [0; 32],
        target_bank_time_ms: 0,
    }; 16];
    let mut next_worker = 0usize;
    let mut checked = Instant::now();
    let mut arrived = Instant::now();
    loop {
        let mut busy = false;
        if pending.len() < 1024 + buffer {
            let n = tpu.try_pop_into(&mut arrivals)?;
            for message in &arrivals[..n] {
                let region = message.transaction;
                let block = BlockRef::from_bits(region.offset as u64);
                // The id, read in place from the transaction's first bytes.
                match pool[0].view(block).and_then(|v| v.read_u64_le(0)) {
                    Ok(id) => pending.push_back(Tx { id, region }),
                    Err(_) => counts.corrupt += 1,
                }
            }
            if n > 0 {
                busy = true;
                arrived = Instant::now();
            }
        }
        let keep = if arrived.elapsed() > FLUSH_AFTER {
            0
        } else {
            buffer
        };
        // To the check workers, a batch at a time, on their shared ring.
        while pending.len() > keep {
            let take = (pending.len() - keep).min(MAX_BATCH);
            let txs: Vec<Tx> = pending.iter().take(take).copied().collect();
            let batch = write_batch(&mut pool[0], &txs)?;
            let message = PackToCheckWorkerMessage {
                flags: 0,
                batch: SharableTransactionBatchRegion {
                    num_transactions: take as u8,
                    transactions_offset: batch.to_bits() as usize,
                },
            };
            let pushed = match to_check.try_push(&message) {
                Ok(pushed) => pushed,
                // No check worker right now: try again later.
                Err(
                    nodeipc_queue::Error::PeerDied { .. } | nodeipc_queue::Error::PeerLeft { .. },
                ) => false,
                Err(e) => return Err(e.into()),
            };
            if !pushed {
                pool[0].free(batch)?;
                break;
            }
            pending.drain(..take);
            checking.insert(batch.to_bits(), txs);
            counts.check_batches += 1;
            busy = true;
        }
        // Their answers, one at a time (a scheduler killed between a pop
        // and its frees strands one answer's blocks at most).
        let mut answer = [CheckWorkerToPackMessage {
            batch: SharableTransactionBatchRegion {
                num_transactions: 0,
                transactions_offset: 0,
            },
            processed_code: 0,
            responses: CheckResponseRegion {
                num_transaction_responses: 0,
                transaction_responses_offset: 0,
            },
        }];
        if from_check.try_pop_into(&mut answer)? == 1 {
            check_answered(
                &answer[0],
                &mut checking,
                &mut pool,
                &mut counts,
                &mut ready,
            );
            busy = true;
        }
        // Forward round robin, a batch at a time, to the live workers with room.
        'forward: while !ready.is_empty() {
            let workers = ends.len();
            for _ in 0..workers {
                let end = &mut ends[next_worker % workers];
                next_worker = next_worker.wrapping_add(1);
                if !end.alive {
                    continue;
                }
                let take = ready.len().min(MAX_BATCH);
                let txs: Vec<Tx> = ready.iter().take(take).copied().collect();
                let batch = write_batch(&mut pool[0], &txs)?;
                let message = PackToExecutionWorkerMessage {
                    flags: 0,
                    max_working_slot: u64::MAX,
                    batch: SharableTransactionBatchRegion {
                        num_transactions: take as u8,
                        transactions_offset: batch.to_bits() as usize,
                    },
                };
                let pushed = match end.to.try_push(&message) {
                    Ok(pushed) => pushed,
                    Err(nodeipc_queue::Error::PeerDied { .. }) => false,
                    Err(e) => return Err(e.into()),
                };
                if !pushed {
                    pool[0].free(batch)?;
                    continue;
                }
                ready.drain(..take);
                end.in_flight.insert(
                    batch.to_bits(),
                    InFlight {
                        txs,
                        stamp: monotonic_ns(),
                    },
                );
                counts.forwarded += take as u64;
                counts.batches += 1;
                busy = true;
                continue 'forward;
            }
            break;
        }
        for end in ends.iter_mut().filter(|e| e.alive) {
            // One answer at a time: killed between a pop and its frees, a
            // scheduler strands one answer's batch and responses at most.
            let n = end.from.try_pop_into(&mut answers[..1])?;
            for answer in &answers[..n] {
                complete(answer, end, &mut pool, &mut counts);
            }
            busy |= n > 0;
            if n == 0 && end.checked.elapsed() > WORKER_CHECK {
                end.checked = Instant::now();
                if let PeerState::Died(pid) = end.from.peer() {
                    worker_died(end, pid, &mut pool, &mut counts, &mut ready, &mut answers);
                }
            }
        }
        let n = progress.try_pop_into(&mut ticks)?;
        counts.progress += n as u64;
        if !busy {
            for h in 0..pool.len() {
                flush_frees(&mut pool, &mut counts, h);
            }
            if checked.elapsed() > SESSION_CHECK {
                checked = Instant::now();
                if !session.server_alive() {
                    break;
                }
            }
            let mut waitable: Vec<&mut dyn Waitable> = vec![&mut tpu, &mut from_check];
            waitable.extend(
                ends.iter_mut()
                    .filter(|e| e.alive)
                    .map(|e| &mut e.from as &mut dyn Waitable),
            );
            // Timed out, or something to do: either way, look again.
            let _ = nodeipc_queue::wait_any(&mut waitable, TICK);
        }
    }
    for h in 0..pool.len() {
        flush_frees(&mut pool, &mut counts, h);
    }
    counts.rtt_ns.sort_unstable();
    let at = |q: f64| {
        counts
            .rtt_ns
            .get(((counts.rtt_ns.len() as f64 - 1.0) * q) as usize)
            .copied()
            .unwrap_or(0)
    };
    println!(
        "SCHEDULER-DONE forwarded={} batches={} check_batches={} check_orphans={} check_failed={} completed={} orphans={} corrupt={} free_errors={} progress={} rerouted={} rtt_p50_ns={} rtt_p99_ns={}",
        counts.forwarded,
        counts.batches,
        counts.check_batches,
        counts.check_orphans,
        counts.check_failed,
        counts.completed,
        counts.orphans,
        counts.corrupt,
        counts.free_errors,
        counts.progress,
        counts.rerouted,
        at(0.5),
        at(0.99)
    );
    Ok(())
}

/// A batch of `txs` (their regions, in order) written into a block of
/// `pool`'s.
fn write_batch(pool: &mut Handle, txs: &[Tx]) -> Result<BlockRef> {
    let mut array = [0u8; MAX_BATCH * REGION];
    for (k, tx) in txs.iter().enumerate() {
        tx.region
            .write_bytes(&mut array[k * REGION..(k + 1) * REGION]);
    }
    let batch = pool.alloc(txs.len() * REGION)?;
    pool.write_at(batch, 0, &array[..txs.len() * REGION])?;
    Ok(batch)
}

/// A check worker's answer: read its responses in place; the transactions
/// that pass go on to execution (`ready`), the others are freed; the batch
/// and the responses are freed at once. An answer to a batch a dead
/// scheduler sent (an orphan) is taken all the same, its transactions
/// found through the batch itself.
fn check_answered(
    answer: &CheckWorkerToPackMessage,
    checking: &mut HashMap<u64, Vec<Tx>>,
    pool: &mut [Handle],
    counts: &mut Counts,
    ready: &mut VecDeque<Tx>,
) {
    let batch = BlockRef::from_bits(answer.batch.transactions_offset as u64);
    let txs = match checking.remove(&batch.to_bits()) {
        Some(txs) => txs,
        None => {
            counts.check_orphans += 1;
            orphan_batch(&pool[0], &answer.batch)
        }
    };
    let responses = BlockRef::from_bits(answer.responses.transaction_responses_offset as u64);
    let count = usize::from(answer.responses.num_transaction_responses);
    let usable = answer.processed_code == PROCESSED && count == txs.len();
    let passed: Vec<bool> = {
        let view = pool[0].view(responses).ok().filter(|_| usable);
        txs.iter()
            .enumerate()
            .map(|(k, tx)| {
                view.as_ref()
                    .and_then(|view| element::<CheckResponse>(view, k).ok())
                    .is_some_and(|r| {
                        r.parsing_and_sanitization_flags & CHECK_FAILED == 0
                            && r.estimated_cost_units == tx_sum(tx.id)
                    })
            })
            .collect()
    };
    for (tx, ok) in txs.into_iter().zip(passed) {
        if ok {
            ready.push_back(tx);
        } else {
            counts.check_failed += 1;
            let h = (tx.id % pool.len() as u64) as usize;
            counts.free(pool, h, BlockRef::from_bits(tx.region.offset as u64));
        }
    }
    if pool[0].free(batch).is_err() {
        counts.free_errors += 1;
    }
    if answer.processed_code == PROCESSED && pool[0].free(responses).is_err() {
        counts.free_errors += 1;
    }
}

/// A worker's answer: read the responses in place, check each against its
/// transaction, and free the transactions, the batch and the responses. An
/// answer to a batch this scheduler did not send (a dead scheduler's) is an
/// orphan: its transactions are found in the batch itself.
fn complete(
    answer: &ExecutionWorkerToPackMessage,
    end: &mut WorkerEnds,
    pool: &mut [Handle],
    counts: &mut Counts,
) {
    let now = monotonic_ns();
    let batch = BlockRef::from_bits(answer.batch.transactions_offset as u64);
    let sent = end.in_flight.remove(&batch.to_bits());
    let txs = match sent {
        Some(InFlight { txs, stamp }) => {
            counts.rtt_ns.push(now.saturating_sub(stamp));
            txs
        }
        None => {
            counts.orphans += 1;
            orphan_batch(&pool[0], &answer.batch)
        }
    };
    let responses = BlockRef::from_bits(answer.responses.transaction_responses_offset as u64);
    let count = usize::from(answer.responses.num_transaction_responses);
    let checked = answer.processed_code == PROCESSED && count == txs.len();
    let good: Vec<bool> = {
        let view = pool[0].view(responses).ok().filter(|_| checked);
        txs.iter()
            .enumerate()
            .map(|(k, tx)| {
                view.as_ref()
                    .and_then(|view| element::<ExecutionResponse>(view, k).ok())
                    .is_some_and(|r| {
                        r.not_included_reason == INCLUDED && r.cost_units == tx_sum(tx.id)
                    })
            })
            .collect()
    };
    for (tx, ok) in txs.iter().zip(good) {
        counts.corrupt += u64::from(!ok);
        counts.completed += 1;
        let h = (tx.id % pool.len() as u64) as usize;
        counts.free(pool, h, BlockRef::from_bits(tx.region.offset as u64));
    }
    // The batch and the responses at once (nobody else can find them if
    // this process dies); the transactions in batches (the TPU's ledger can).
    if pool[0].free(batch).is_err() {
        counts.free_errors += 1;
    }
    if answer.processed_code == PROCESSED && pool[0].free(responses).is_err() {
        counts.free_errors += 1;
    }
}

/// The transactions of a batch another scheduler sent, read from the batch
/// block in place.
fn orphan_batch(pool: &Handle, batch: &SharableTransactionBatchRegion) -> Vec<Tx> {
    let count = usize::from(batch.num_transactions).min(MAX_BATCH);
    let batch = BlockRef::from_bits(batch.transactions_offset as u64);
    let Ok(view) = pool.view(batch) else {
        return Vec::new();
    };
    (0..count)
        .filter_map(|k| {
            let region: SharableTransactionRegion = element(&view, k).ok()?;
            let block = BlockRef::from_bits(region.offset as u64);
            let id = pool.view(block).ok()?.read_u64_le(0).ok()?;
            Some(Tx { id, region })
        })
        .collect()
}

/// Frees handle `h`'s batch.
fn flush_frees(pool: &mut [Handle], counts: &mut Counts, h: usize) {
    if counts.to_free[h].is_empty() {
        return;
    }
    if pool[h].free_batch(&counts.to_free[h]).is_err() {
        counts.free_errors += 1;
    }
    counts.to_free[h].clear();
}

/// A worker died: take what it answered, say how its queues answer now (a
/// pop, and a push: both `PeerDied`), and send what it still held to the
/// others.
fn worker_died(
    end: &mut WorkerEnds,
    pid: u32,
    pool: &mut [Handle],
    counts: &mut Counts,
    pending: &mut VecDeque<Tx>,
    answers: &mut [ExecutionWorkerToPackMessage],
) {
    loop {
        match end.from.try_pop_into(answers) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                for answer in &answers[..n] {
                    complete(answer, end, pool, counts);
                }
            }
        }
    }
    let seen = monotonic_ns();
    // The pop checks the producer at least every 50 ms: PeerDied, not a
    // timeout.
    let pop = end.from.pop_timeout(Duration::from_millis(200));
    // A push looks at its consumer at least every 50 ms of pushing: an
    // empty batch (no block) is pushed until it says so, within 1 s.
    let probe = PackToExecutionWorkerMessage {
        flags: 0,
        max_working_slot: 0,
        batch: SharableTransactionBatchRegion {
            num_transactions: 0,
            transactions_offset: 0,
        },
    };
    let started = Instant::now();
    let push = loop {
        match end.to.try_push(&probe) {
            Ok(_) if started.elapsed() < Duration::from_secs(1) => {
                std::thread::sleep(Duration::from_millis(5));
            }
            other => break other.map(drop),
        }
    };
    println!(
        "WORKER-DIED {} pid={pid} at_ns={seen} pop={} push={} push_after_ms={}",
        end.w,
        describe(pop.map(drop)),
        describe(push),
        started.elapsed().as_millis(),
    );
    end.alive = false;
    let mut held: Vec<(u64, InFlight)> = end.in_flight.drain().collect();
    held.sort_unstable_by_key(|(_, f)| f.txs.first().map_or(0, |t| t.id));
    for (batch, flight) in held.into_iter().rev() {
        if pool[0].free(BlockRef::from_bits(batch)).is_err() {
            counts.free_errors += 1;
        }
        counts.rerouted += flight.txs.len() as u64;
        for tx in flight.txs.into_iter().rev() {
            pending.push_front(tx);
        }
    }
}

fn describe(result: nodeipc_queue::Result<()>) -> String {
    match result {
        Ok(()) => "ok".to_owned(),
        Err(nodeipc_queue::Error::PeerDied { .. }) => "PeerDied".to_owned(),
        Err(e) => format!("{e:?}").replace(' ', "_"),
    }
}
