//! The queue and the pool together under load, across processes: this
//! process and two children, each child with a pair of queues. This side
//! allocates a block of a random size, fills it and sends its reference;
//! the child checks every byte, allocates a reply block of another size,
//! fills it, frees the block it got (a remote free back to us) and sends the
//! reply's reference back; we check every byte and free it (a remote free
//! back to the child). Both sides clean up as they allocate. At the end both
//! sides' occupancy is 0. Seconds by default; `NODEIPC_CI_LONG=1`: minutes.

use std::time::{Duration, Instant};

use nodeipc_pool::{BlockRef, Error, Handle, Pool, PoolConfig};
use nodeipc_queue::{Consumer, Producer, Queue};
use nodeipc_testkit::{
    ChildGuard, Watchdog, shm_leftovers, spawn_child, this_test_in_a_child, unique_name,
};

const CHILD: &str = "NODEIPC_POOL_STRESS_CHILD";
const SCHEMA: u64 = 0x7374_7265_7373; // "stress"
const T: Duration = Duration::from_secs(10);
const CHILDREN: usize = 2;
/// Blocks in flight to each child at most.
const IN_FLIGHT: usize = 48;
/// The end of a child's stream.
const END: u64 = u64::MAX;

/// `[block bits, size, sequence number, 0]`.
type Msg = [u64; 4];

fn long() -> bool {
    std::env::var("NODEIPC_CI_LONG").is_ok_and(|v| v == "1")
}

/// The bytes of request (`reply == false`) or reply `seq`, `size` long.
fn pattern(seq: u64, size: usize, reply: bool) -> Vec<u8> {
    let salt = if reply { 0x5a } else { 0xa5 };
    (0..size)
        .map(|i| {
            (seq as usize)
                .wrapping_mul(7)
                .wrapping_add(i.wrapping_mul(13)) as u8
                ^ salt
        })
        .collect()
}

/// Sizes from 1 byte to 16 KiB, spread over every class up to there.
fn size_of_request(seq: u64) -> usize {
    1 + (seq.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 50) as usize
}

fn size_of_reply(seq: u64) -> usize {
    1 + (seq.wrapping_mul(0xbf58_476d_1ce4_e5b9) >> 51) as usize
}

/// Allocates, cleaning up and retrying while the pool is full (the peer
/// frees as it goes), for up to `T`.
fn alloc(h: &mut Handle, size: usize) -> BlockRef {
    let deadline = Instant::now() + T;
    loop {
        match h.alloc(size) {
            Ok(b) => return b,
            Err(Error::Full { .. }) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_micros(100));
            }
            Err(e) => panic!("alloc({size}): {e}"),
        }
    }
}

fn check(h: &Handle, block: BlockRef, want: &[u8]) {
    let mut got = vec![0u8; want.len()];
    h.read_at(block, 0, &mut got).unwrap();
    assert!(got == want, "block {block:?}: bytes differ");
}

/// A child: `<pool> <requests queue> <replies queue>`.
#[test]
fn child_main() {
    let Ok(spec) = std::env::var(CHILD) else {
        return;
    };
    let names: Vec<&str> = spec.split(' ').collect();
    let mut h = Handle::open(names[0], T).unwrap();
    let mut rx = Consumer::<Msg>::open(names[1], SCHEMA, T).unwrap();
    let mut tx = Producer::<Msg>::open(names[2], SCHEMA, T).unwrap();
    println!("ready");
    let mut served = 0u64;
    loop {
        let [bits, size, seq, _] = rx.pop_timeout(T).unwrap();
        if seq == END {
            break;
        }
        let request = BlockRef::from_bits(bits);
        check(&h, request, &pattern(seq, size as usize, false));
        let reply_size = size_of_reply(seq);
        let reply = alloc(&mut h, reply_size);
        h.write_at(reply, 0, &pattern(seq, reply_size, true))
            .unwrap();
        h.free(request).unwrap();
        tx.push_timeout(&[reply.to_bits(), reply_size as u64, seq, 0], T)
            .unwrap();
        served += 1;
    }
    // Every reply was freed by the parent before it sent the end.
    h.clean_remote_frees().unwrap();
    assert_eq!(
        h.occupancy().unwrap(),
        0,
        "the child's blocks after the end"
    );
    println!("served {served}");
}

/// Reads the child's output up to its "ready" (after the test harness's
/// own lines), byte by byte: nothing after it is consumed.
fn wait_until_ready(guard: &mut ChildGuard) {
    let stdout = guard.child().stdout.as_mut().expect("piped stdout");
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        let n = std::io::Read::read(stdout, &mut byte).unwrap();
        assert!(
            n == 1,
            "the child ended before it was ready: {:?}",
            String::from_utf8_lossy(&line)
        );
        if byte[0] == b'\n' {
            if line.ends_with(b"ready") {
                return;
            }
            line.clear();
        } else {
            line.push(byte[0]);
        }
    }
}

struct Child {
    guard: ChildGuard,
    tx: Producer<Msg>,
    rx: Consumer<Msg>,
    /// Sequence numbers sent and not yet answered, with their blocks.
    in_flight: Vec<(u64, BlockRef)>,
    answered: u64,
    /// Its two queues (we created them; they go with it).
    _queues: (Queue<Msg>, Queue<Msg>),
}

/// A child with a fresh pair of queues (named with `tag`), started and ready.
fn start_child(pool_name: &str, tag: &str) -> Child {
    let (requests, replies) = (unique_name(tag), unique_name(tag));
    let req = Queue::<Msg>::create(&requests, 256, SCHEMA).unwrap();
    let rep = Queue::<Msg>::create(&replies, 256, SCHEMA).unwrap();
    let mut command =
        this_test_in_a_child(&nodeipc_testkit::test_path(module_path!(), "child_main"));
    command.env(CHILD, format!("{pool_name} {requests} {replies}"));
    let mut guard = spawn_child(&mut command);
    wait_until_ready(&mut guard);
    Child {
        guard,
        tx: req.producer().unwrap(),
        rx: rep.consumer().unwrap(),
        in_flight: Vec::new(),
        answered: 0,
        _queues: (req, rep),
    }
}

/// Checks and frees one reply from `child`.
fn take_reply(h: &mut Handle, child: &mut Child, [bits, size, answered, _]: Msg) {
    let at = child
        .in_flight
        .iter()
        .position(|(s, _)| *s == answered)
        .unwrap_or_else(|| panic!("a reply to {answered}, never sent or answered twice"));
    child.in_flight.swap_remove(at);
    let reply = BlockRef::from_bits(bits);
    assert_eq!(size as usize, size_of_reply(answered));
    check(h, reply, &pattern(answered, size as usize, true));
    h.free(reply).unwrap();
    child.answered += 1;
}

/// Keeps every child busy for `run_for` (`seq` numbers the requests); then,
/// if `drain`, waits for every answer.
fn pump(h: &mut Handle, children: &mut [Child], seq: &mut u64, run_for: Duration, drain: bool) {
    let start = Instant::now();
    let mut last_progress = Instant::now();
    loop {
        let sending = start.elapsed() < run_for;
        let mut progress = false;
        for child in children.iter_mut() {
            if sending && child.in_flight.len() < IN_FLIGHT {
                let size = size_of_request(*seq);
                let block = alloc(h, size);
                h.write_at(block, 0, &pattern(*seq, size, false)).unwrap();
                assert!(
                    child
                        .tx
                        .try_push(&[block.to_bits(), size as u64, *seq, 0])
                        .unwrap(),
                    "the request queue is larger than what is in flight"
                );
                child.in_flight.push((*seq, block));
                *seq += 1;
                progress = true;
            }
            while let Some(reply) = child.rx.try_pop().unwrap() {
                take_reply(h, child, reply);
                progress = true;
            }
            if !child.rx.peer_alive() {
                died(child);
            }
        }
        if !sending && (!drain || children.iter().all(|c| c.in_flight.is_empty())) {
            return;
        }
        if progress {
            last_progress = Instant::now();
        } else {
            assert!(
                last_progress.elapsed() < T,
                "no progress for {T:?}: in flight {:?}",
                children
                    .iter()
                    .map(|c| c.in_flight.len())
                    .collect::<Vec<_>>()
            );
            std::thread::yield_now();
        }
    }
}

/// A child that died unasked: its status and what it said.
fn died(child: &mut Child) -> ! {
    let pid = child.guard.id();
    let status = child.guard.wait_timeout(T);
    let mut err = String::new();
    if let Some(stderr) = child.guard.child().stderr.as_mut() {
        let _ = std::io::Read::read_to_string(stderr, &mut err);
    }
    panic!("child {pid} died ({status}):\n{err}");
}

/// Ends every child's stream; each checks its own occupancy is 0 and says
/// how many it served, which must be what we counted. Returns the total.
fn finish(children: &mut [Child]) -> u64 {
    let mut total = 0;
    for child in children.iter_mut() {
        child.tx.push_timeout(&[0, 0, END, 0], T).unwrap();
        let status = child.guard.wait_timeout(T);
        let mut out = String::new();
        let stdout = child.guard.child().stdout.as_mut().expect("piped stdout");
        std::io::Read::read_to_string(stdout, &mut out).unwrap();
        assert!(status.success(), "child: {status}\n{out}");
        assert!(
            out.contains(&format!("served {}", child.answered)),
            "the child served another count than answered ({}): {out}",
            child.answered
        );
        total += child.answered;
    }
    total
}

fn run_for() -> Duration {
    if long() {
        Duration::from_secs(180)
    } else {
        Duration::from_secs(3)
    }
}

#[test]
fn queue_and_pool_under_load_across_processes() {
    let run_for = run_for();
    let _dog = Watchdog::new(
        "queue_and_pool_under_load_across_processes",
        run_for + Duration::from_secs(60),
    );
    let tag = "pool-stress-load";
    let pool_name = unique_name(tag);
    let pool = Pool::create(&pool_name, &PoolConfig::new(128, 1 + CHILDREN as u32)).unwrap();
    let mut h = pool.handle().unwrap();
    let mut children: Vec<Child> = (0..CHILDREN)
        .map(|_| start_child(&pool_name, tag))
        .collect();
    let start = Instant::now();
    let mut seq = 0;
    pump(&mut h, &mut children, &mut seq, run_for, true);
    let total = finish(&mut children);
    h.clean_remote_frees().unwrap();
    assert_eq!(h.occupancy().unwrap(), 0, "our blocks after the end");
    eprintln!(
        "{total} round trips in {:?} ({CHILDREN} children), every byte checked",
        start.elapsed()
    );
    assert!(
        total > 1000,
        "too little traffic to count as stress: {total}"
    );
    drop((children, h, pool));
    assert!(shm_leftovers(tag).is_empty(), "{:?}", shm_leftovers(tag));
}

/// Under the same load, one child is SIGKILLed mid-stream, again and again
/// (once by default; every few seconds for minutes under
/// `NODEIPC_CI_LONG`): its replies already sent are taken and checked, then
/// its queue says `PeerDied` within 1 s of the kill; we free the requests it
/// never answered from our own ledger (a block it had freed already is
/// refused, not freed twice), reclaim its dead handle (its slabs become
/// ours), start a replacement and carry on. At the end every handle's
/// occupancy is 0 but for the reply blocks a child had allocated and not yet
/// sent when it was killed (at most one per kill): live until their dead
/// holder frees them, which is never.
#[test]
fn a_child_killed_under_load_is_noticed_reclaimed_and_replaced() {
    let kills = if long() { 30 } else { 1 };
    let round = Duration::from_millis(if long() { 5_000 } else { 700 });
    let _dog = Watchdog::new(
        "a_child_killed_under_load_is_noticed_reclaimed_and_replaced",
        round * (kills + 1) + Duration::from_secs(60),
    );
    let tag = "pool-stress-kill";
    let pool_name = unique_name(tag);
    let pool = Pool::create(&pool_name, &PoolConfig::new(128, 1 + CHILDREN as u32)).unwrap();
    let mut h = pool.handle().unwrap();
    let mut children: Vec<Child> = (0..CHILDREN)
        .map(|_| start_child(&pool_name, tag))
        .collect();
    let mut seq = 0;
    let (mut orphans_at_most, mut slowest) = (0, Duration::ZERO);
    for kill in 0..kills {
        pump(&mut h, &mut children, &mut seq, round, false);
        let victim = &mut children[kill as usize % CHILDREN];
        let pid = victim.guard.id();
        let killed = Instant::now();
        victim.guard.kill();
        loop {
            match victim.rx.pop_timeout(T) {
                Ok(reply) => take_reply(&mut h, victim, reply),
                Err(nodeipc_queue::Error::PeerDied { pid: dead, .. }) => {
                    assert_eq!(dead, pid);
                    break;
                }
                Err(e) => panic!("the killed child's queue: {e}"),
            }
        }
        let noticed = killed.elapsed();
        assert!(
            noticed < Duration::from_secs(1),
            "PeerDied {noticed:?} after the kill"
        );
        slowest = slowest.max(noticed);
        for (_, block) in victim.in_flight.drain(..) {
            match h.free(block) {
                Ok(()) | Err(Error::NotAllocated { .. } | Error::Stale { .. }) => {}
                Err(e) => panic!("freeing an unanswered request: {e}"),
            }
        }
        let reclaimed = h.reclaim_dead().unwrap();
        assert_eq!(reclaimed.handles, 1, "{reclaimed:?}");
        orphans_at_most += 1;
        children[kill as usize % CHILDREN] = start_child(&pool_name, tag);
    }
    pump(&mut h, &mut children, &mut seq, round, true);
    let total = finish(&mut children);
    h.clean_remote_frees().unwrap();
    let occupancy = h.occupancy_all().unwrap();
    let ours = occupancy[h.index().unwrap() as usize].blocks;
    assert!(
        ours <= orphans_at_most,
        "{ours} blocks still held after {kills} kills: {occupancy:?}"
    );
    assert!(
        occupancy
            .iter()
            .filter(|o| Some(o.handle) != h.index())
            .all(|o| o.blocks == 0),
        "{occupancy:?}"
    );
    eprintln!(
        "{total} round trips, {kills} kills, each noticed within {slowest:?}, {ours} orphaned blocks"
    );
    drop((children, h, pool));
    assert!(shm_leftovers(tag).is_empty(), "{:?}", shm_leftovers(tag));
}
