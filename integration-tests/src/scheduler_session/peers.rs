//! The two kinds of peer process: a worker (the server's own) and the
//! external scheduler. Each logs on, takes its descriptors by role, and
//! runs until the server ends its session.

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nodeipc_handshake::{ClientSession, connect, logon};
use nodeipc_pool::{BlockRef, Handle};
use nodeipc_queue::{Consumer, PeerState, Producer, Waitable, Zeroable};
use nodeipc_shm::Region;

use super::{
    CORRUPT, DONE_SCHEMA, Done, PROGRESS_SCHEMA, Progress, TICK, TX_SCHEMA, Tx, monotonic_ns,
    roles, tx_bytes, tx_len, tx_sum,
};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// How often a peer looks at its session while idle.
const SESSION_CHECK: Duration = Duration::from_millis(20);
/// How long the TPU must be quiet before the scheduler forwards its
/// container's last `buffer` transactions.
pub const FLUSH_AFTER: Duration = Duration::from_millis(200);
/// How often the scheduler checks a quiet worker's liveness.
const WORKER_CHECK: Duration = Duration::from_millis(5);

fn pool_region(session: &mut ClientSession) -> Result<Arc<Region>> {
    Ok(Arc::new(Region::from_fd(
        session.take_role(roles::POOL)?.fd,
    )?))
}

/// Worker `w`: pops transactions, checks every byte against its id, and
/// answers the scheduler and the server. Runs until the server ends the
/// session.
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
    let pool = Handle::free_only(pool_region(&mut session)?)?;
    let mut to = Consumer::<Tx>::from_fd(session.take_role(&roles::to_worker(w))?.fd, TX_SCHEMA)?;
    let mut from =
        Producer::<Done>::from_fd(session.take_role(&roles::from_worker(w))?.fd, DONE_SCHEMA)?;
    let mut report = Producer::<Done>::from_fd(session.take_role(roles::REPORT)?.fd, DONE_SCHEMA)?;
    println!("WORKER-READY {w}");
    let mut txs = [Tx::zeroed(); 64];
    let (mut block, mut expected) = ([0u8; 256], [0u8; 256]);
    let (mut processed, mut corrupt) = (0u64, 0u64);
    let mut checked = Instant::now();
    loop {
        let n = match to.pop_into_timeout(&mut txs, TICK) {
            Ok(n) => n,
            Err(nodeipc_queue::Error::TimedOut { .. }) => 0,
            // The scheduler is gone; the next one takes its role over.
            Err(nodeipc_queue::Error::PeerDied { .. } | nodeipc_queue::Error::PeerLeft { .. }) => {
                std::thread::sleep(TICK);
                0
            }
            Err(e) => return Err(e.into()),
        };
        for tx in &txs[..n] {
            let len = tx.len as usize;
            let sum = if len != tx_len(tx.id) {
                CORRUPT
            } else {
                let read = pool.read_at(BlockRef::from_bits(tx.block), 0, &mut block[..len]);
                tx_bytes(tx.id, &mut expected[..len]);
                if read.is_ok() && block[..len] == expected[..len] {
                    block[..len].iter().map(|&b| u64::from(b)).sum()
                } else {
                    CORRUPT
                }
            };
            corrupt += u64::from(sum == CORRUPT);
            let done = Done {
                id: tx.id,
                block: tx.block,
                stamp: tx.stamp,
                sum,
            };
            report.push_timeout(&done, Duration::from_secs(5))?;
            // A scheduler that died leaves its answers to the next one.
            while let Err(e) = from.push_timeout(&done, TICK) {
                match e {
                    nodeipc_queue::Error::TimedOut { .. }
                    | nodeipc_queue::Error::PeerDied { .. }
                    | nodeipc_queue::Error::PeerLeft { .. } => {
                        if !session.server_alive() {
                            println!("WORKER-DONE {w} processed={processed} corrupt={corrupt}");
                            return Ok(());
                        }
                    }
                    e => return Err(e.into()),
                }
            }
            processed += 1;
        }
        if n == 0 && checked.elapsed() > SESSION_CHECK {
            checked = Instant::now();
            if !session.server_alive() {
                break;
            }
        }
    }
    println!("WORKER-DONE {w} processed={processed} corrupt={corrupt}");
    Ok(())
}

/// One worker as the scheduler sees it.
struct WorkerEnds {
    w: u32,
    to: Producer<Tx>,
    from: Consumer<Done>,
    alive: bool,
    in_flight: HashMap<u64, Tx>,
    checked: Instant,
}

/// Frees are batched per handle (`free_batch`, as rts-alloc batches its
/// remote frees): a scheduler killed mid-stream holds up to this many
/// blocks, which the TPU's ledger then frees.
const FREE_BATCH: usize = 128;

/// What the scheduler did.
#[derive(Debug, Default)]
struct Counts {
    to_free: Vec<Vec<BlockRef>>,
    forwarded: u64,
    completed: u64,
    corrupt: u64,
    free_errors: u64,
    progress: u64,
    rerouted: u64,
    rtt_ns: Vec<u64>,
}

/// The external scheduler: logs on asking for `workers` workers and
/// `handles` pool handles, and forwards transactions from the TPU to the
/// workers round robin, freeing each block when its worker is done. A
/// worker that dies is dropped (its queues' operations say `PeerDied`) and
/// what it held is sent to the others. Runs until the server ends the
/// session.
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
    ];
    for w in 0..workers {
        expected.push(roles::to_worker(w));
        expected.push(roles::from_worker(w));
    }
    session.expect_roles(&expected)?;
    let region = pool_region(&mut session)?;
    let mut pool: Vec<Handle> = (0..handles.max(1))
        .map(|_| Handle::join(Arc::clone(&region)))
        .collect::<nodeipc_pool::Result<_>>()?;
    let mut tpu = Consumer::<Tx>::from_fd(session.take_role(roles::TPU)?.fd, TX_SCHEMA)?;
    let mut progress =
        Consumer::<Progress>::from_fd(session.take_role(roles::PROGRESS)?.fd, PROGRESS_SCHEMA)?;
    let mut ends = Vec::new();
    for w in 0..workers {
        ends.push(WorkerEnds {
            w,
            to: Producer::from_fd(session.take_role(&roles::to_worker(w))?.fd, TX_SCHEMA)?,
            from: Consumer::from_fd(session.take_role(&roles::from_worker(w))?.fd, DONE_SCHEMA)?,
            alive: true,
            in_flight: HashMap::new(),
            checked: Instant::now(),
        });
    }
    println!("SCHEDULER-READY pid={}", std::process::id());
    let mut counts = Counts {
        to_free: vec![Vec::new(); pool.len()],
        ..Counts::default()
    };
    let mut pending: VecDeque<Tx> = VecDeque::new();
    let mut txs = [Tx::zeroed(); 64];
    let mut dones = [Done::zeroed(); 64];
    let mut ticks = [Progress::zeroed(); 16];
    let mut next_worker = 0usize;
    let mut checked = Instant::now();
    let mut arrived = Instant::now();
    loop {
        let mut busy = false;
        if pending.len() < 1024 + buffer {
            let n = tpu.try_pop_into(&mut txs)?;
            pending.extend(&txs[..n]);
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
        // Forward round robin to the live workers with room.
        'forward: while pending.len() > keep {
            let Some(&tx) = pending.front() else { break };
            let workers = ends.len();
            for _ in 0..workers {
                let end = &mut ends[next_worker % workers];
                next_worker = next_worker.wrapping_add(1);
                if !end.alive {
                    continue;
                }
                let tx = Tx {
                    stamp: monotonic_ns(),
                    ..tx
                };
                if end.to.try_push(&tx)? {
                    end.in_flight.insert(tx.id, tx);
                    pending.pop_front();
                    counts.forwarded += 1;
                    busy = true;
                    continue 'forward;
                }
            }
            break;
        }
        for end in ends.iter_mut().filter(|e| e.alive) {
            let n = end.from.try_pop_into(&mut dones)?;
            complete(&dones[..n], end, &mut pool, &mut counts);
            busy |= n > 0;
            if n == 0 && end.checked.elapsed() > WORKER_CHECK {
                end.checked = Instant::now();
                if let PeerState::Died(pid) = end.from.peer() {
                    worker_died(end, pid, &mut pool, &mut counts, &mut pending, &mut dones);
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
            let mut waitable: Vec<&mut dyn Waitable> = vec![&mut tpu];
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
        "SCHEDULER-DONE forwarded={} completed={} corrupt={} free_errors={} progress={} rerouted={} rtt_p50_ns={} rtt_p99_ns={}",
        counts.forwarded,
        counts.completed,
        counts.corrupt,
        counts.free_errors,
        counts.progress,
        counts.rerouted,
        at(0.5),
        at(0.99)
    );
    Ok(())
}

/// Answers from a worker: check, free the block, note the round trip.
fn complete(dones: &[Done], end: &mut WorkerEnds, pool: &mut [Handle], counts: &mut Counts) {
    let now = monotonic_ns();
    for done in dones {
        end.in_flight.remove(&done.id);
        if done.sum == CORRUPT || done.sum != tx_sum(done.id) {
            counts.corrupt += 1;
        }
        let h = (done.id % pool.len() as u64) as usize;
        counts.to_free[h].push(BlockRef::from_bits(done.block));
        if counts.to_free[h].len() >= FREE_BATCH {
            flush_frees(pool, counts, h);
        }
        counts.completed += 1;
        counts.rtt_ns.push(now.saturating_sub(done.stamp));
    }
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

/// A worker died: take what it answered, say how its queues answer now,
/// and send what it still held to the others.
fn worker_died(
    end: &mut WorkerEnds,
    pid: u32,
    pool: &mut [Handle],
    counts: &mut Counts,
    pending: &mut VecDeque<Tx>,
    dones: &mut [Done],
) {
    loop {
        match end.from.try_pop_into(dones) {
            Ok(0) | Err(_) => break,
            Ok(n) => complete(&dones[..n], end, pool, counts),
        }
    }
    let seen = monotonic_ns();
    // The pop checks the producer at least every 50 ms: PeerDied, not a
    // timeout. A push is not tried: it would succeed while there is room.
    let pop = end.from.pop_timeout(Duration::from_millis(200));
    let to = match end.to.peer() {
        PeerState::Died(_) => "PeerDied".to_owned(),
        other => format!("{other:?}").replace(' ', "_"),
    };
    println!(
        "WORKER-DIED {} pid={pid} at_ns={seen} pop={} to={to}",
        end.w,
        describe(pop.map(drop)),
    );
    end.alive = false;
    let mut held: Vec<Tx> = end.in_flight.drain().map(|(_, tx)| tx).collect();
    held.sort_unstable_by_key(|tx| tx.id);
    counts.rerouted += held.len() as u64;
    for tx in held.into_iter().rev() {
        pending.push_front(tx);
    }
}

fn describe(result: nodeipc_queue::Result<()>) -> String {
    match result {
        Ok(()) => "ok".to_owned(),
        Err(nodeipc_queue::Error::PeerDied { .. }) => "PeerDied".to_owned(),
        Err(e) => format!("{e:?}").replace(' ', "_"),
    }
}
