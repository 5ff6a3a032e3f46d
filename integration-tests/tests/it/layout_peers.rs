//! Peers written in C from the byte layouts in `queue/README.md` and
//! `pool/README.md` alone (`c/queue_peer.c`, `c/pool_peer.c`, sharing
//! `c/peer_record.h`; C11 `__atomic_*` builtins and the raw `futex`
//! system call), each role against the Rust side: a queue's producer
//! (taking the role over from a dead holder) and consumer, a pool handle
//! that allocates, frees its own blocks and frees the Rust side's
//! remotely, and takes back what the Rust side freed remotely.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use nodeipc_pool::{BlockRef, Pool, PoolConfig};
use nodeipc_queue::{Error, MpmcQueue, PeerState, Pod, Queue, Zeroable};
use nodeipc_testkit::{
    ChildGuard, TempDir, Watchdog, compile_c, shm_leftovers, skip, spawn_child, unique_name,
};

const SCHEMA: u64 = 0x6c61796f7574;
const COUNT: u64 = 20_000;
const T: Duration = Duration::from_secs(10);
/// What the C peer multiplies a message's sequence number by.
const K: u64 = 0x9e37_79b9_7f4a_7c15;

/// The C peer's message: 16 bytes, 8-aligned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
struct Msg {
    seq: u64,
    check: u64,
}

fn msg(seq: u64) -> Msg {
    Msg {
        seq,
        check: seq.wrapping_mul(K),
    }
}

/// Compiles `c/<program>.c` into `dir`; `None` (the test skips, or fails
/// under `CI=true`) without a C compiler.
fn program(dir: &TempDir, program: &str) -> Option<PathBuf> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("c/{program}.c"));
    compile_c(&source, &dir.join(program), &[])
}

/// A C peer and its stdout, line by line.
struct Peer {
    guard: ChildGuard,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

impl Peer {
    fn spawn(command: &mut Command) -> Peer {
        let mut guard = spawn_child(command.stdout(Stdio::piped()));
        let stdout = guard.child().stdout.take().expect("piped stdout");
        Peer {
            guard,
            lines: BufReader::new(stdout).lines(),
        }
    }

    fn line(&mut self) -> String {
        match self.lines.next() {
            Some(line) => line.expect("the peer's stdout"),
            None => panic!("the C peer ended early: {:?}", self.guard.wait_timeout(T)),
        }
    }

    fn succeeds(mut self) {
        assert!(self.guard.wait_timeout(T).success(), "the C peer failed");
    }
}

fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {key} in {line:?}"))
}

#[test]
fn a_c_producer_from_the_readme_takes_over_a_dead_producer_and_leaves() {
    let _dog = Watchdog::new("C queue producer", Duration::from_secs(120));
    let dir = TempDir::new("cqueue-produce");
    let Some(peer) = program(&dir, "queue_peer") else {
        skip("a_c_producer_from_the_readme", "no C compiler");
        return;
    };
    let name = unique_name("cqueue-produce");
    let queue = Queue::<Msg>::create(&name, 64, SCHEMA).unwrap();
    // A producer that died holding its role, parked on the head.
    let mut dead = spawn_child(Command::new("sleep").arg("30"));
    let dead_pid = dead.id();
    let dead_start = nodeipc_fdpass::process_start_time(dead_pid).unwrap();
    dead.kill();
    let region = queue.region();
    region.write_at(384, &dead_pid.to_ne_bytes()).unwrap();
    region.write_at(388, &1u32.to_ne_bytes()).unwrap();
    region.write_at(392, &dead_start.to_ne_bytes()).unwrap();
    region.write_at(640, &3u32.to_ne_bytes()).unwrap();
    let mut rx = queue.consumer().unwrap();
    assert_eq!(rx.peer(), PeerState::Died(dead_pid));

    let mut c = Peer::spawn(Command::new(&peer).args([
        "produce",
        &name,
        &SCHEMA.to_string(),
        &COUNT.to_string(),
    ]));
    let joined = c.line();
    assert_eq!(field(&joined, "joins"), "2", "{joined}");
    assert_eq!(field(&joined, "took_over"), "1", "{joined}");
    for seq in 0..COUNT {
        assert_eq!(rx.pop_timeout(T).unwrap(), msg(seq));
    }
    assert_eq!(c.line(), format!("done {COUNT}"));
    c.succeeds();
    // It left: pid 0, joins kept, read as PeerLeft.
    assert!(matches!(
        rx.pop_timeout(Duration::from_secs(1)),
        Err(Error::PeerLeft { .. })
    ));
    assert_eq!(rx.peer(), PeerState::Left);
    let parked: &AtomicU32 = region.view(640).unwrap();
    assert_eq!(
        parked.load(Ordering::SeqCst),
        0,
        "the dead holder's parked count was reset"
    );
    drop((rx, queue));
    assert!(shm_leftovers(&name).is_empty());
}

#[test]
fn a_c_consumer_from_the_readme_drains_a_rust_producer_and_leaves() {
    let _dog = Watchdog::new("C queue consumer", Duration::from_secs(120));
    let dir = TempDir::new("cqueue-consume");
    let Some(peer) = program(&dir, "queue_peer") else {
        skip("a_c_consumer_from_the_readme", "no C compiler");
        return;
    };
    let name = unique_name("cqueue-consume");
    let queue = Queue::<Msg>::create(&name, 64, SCHEMA).unwrap();
    let mut tx = queue.producer().unwrap();
    let mut c = Peer::spawn(Command::new(&peer).args([
        "consume",
        &name,
        &SCHEMA.to_string(),
        &COUNT.to_string(),
    ]));
    let joined = c.line();
    assert_eq!(field(&joined, "joins"), "1", "{joined}");
    assert_eq!(field(&joined, "took_over"), "0", "{joined}");
    assert_eq!(
        tx.peer(),
        PeerState::Alive(field(&joined, "pid").parse().unwrap())
    );
    for seq in 0..COUNT {
        tx.push_timeout(&msg(seq), T).unwrap();
    }
    assert_eq!(c.line(), format!("done {COUNT}"));
    c.succeeds();
    assert_eq!(tx.peer(), PeerState::Left);
    // A push looks at the consumer at least every 50 ms: it says so.
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while tx.try_push(&msg(0)).is_ok() {
        assert!(std::time::Instant::now() < deadline, "pushes go on");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(matches!(tx.try_push(&msg(0)), Err(Error::PeerLeft { .. })));
    assert!(matches!(
        tx.push_timeout(&msg(0), Duration::from_secs(1)),
        Err(Error::PeerLeft { .. })
    ));
    drop((tx, queue));
    assert!(shm_leftovers(&name).is_empty());
}

/// An MPMC message as the C peer writes it: `{source << 48 | n, that × K}`.
fn mpmc_msg(source: u64, n: u64) -> Msg {
    let value = source << 48 | n;
    Msg {
        seq: value,
        check: value.wrapping_mul(K),
    }
}

#[test]
fn c_mpmc_peers_from_the_readme_produce_and_consume_beside_rust_ones() {
    let _dog = Watchdog::new("C mpmc peers", Duration::from_secs(120));
    let dir = TempDir::new("cmpmc");
    let Some(peer) = program(&dir, "mpmc_peer") else {
        skip("c_mpmc_peers_from_the_readme", "no C compiler");
        return;
    };
    let name = unique_name("cmpmc");
    let queue = MpmcQueue::<Msg>::create(&name, 64, 2, 2, SCHEMA).unwrap();
    // Producer place 0: a process that died holding it (and claiming
    // nothing); place 1: a live Rust producer. The C producer must take
    // the dead one's place.
    let mut dead = spawn_child(Command::new("sleep").arg("30"));
    let dead_pid = dead.id();
    let dead_start = nodeipc_fdpass::process_start_time(dead_pid).unwrap();
    dead.kill();
    let region = queue.region();
    region.write_at(768, &dead_pid.to_ne_bytes()).unwrap();
    region.write_at(772, &1u32.to_ne_bytes()).unwrap();
    region.write_at(776, &dead_start.to_ne_bytes()).unwrap();
    let mut vacant = queue.producer().unwrap();
    assert_eq!(vacant.place(), 1);
    let mut rx = queue.consumer().unwrap();

    // C producer (source 1) → the Rust consumer, in order.
    let mut c = Peer::spawn(Command::new(&peer).args([
        "produce",
        &name,
        &SCHEMA.to_string(),
        &COUNT.to_string(),
        "1",
    ]));
    let joined = c.line();
    assert_eq!(field(&joined, "place"), "0", "{joined}");
    assert_eq!(field(&joined, "took_over"), "1", "{joined}");
    for n in 0..COUNT {
        assert_eq!(rx.pop_timeout(T).unwrap(), mpmc_msg(1, n), "message {n}");
    }
    assert_eq!(c.line(), format!("done {COUNT}"));
    c.succeeds();

    // The Rust producer (source 2) → the C consumer, beside the Rust one
    // (idle: it takes nothing while the C consumer pops every message).
    let mut c = Peer::spawn(Command::new(&peer).args([
        "consume",
        &name,
        &SCHEMA.to_string(),
        &COUNT.to_string(),
        "2",
    ]));
    let joined = c.line();
    assert_eq!(field(&joined, "place"), "1", "{joined}");
    for n in 0..COUNT {
        vacant.push_timeout(&mpmc_msg(2, n), T).unwrap();
    }
    assert_eq!(c.line(), format!("done {COUNT}"));
    c.succeeds();
    assert_eq!(rx.try_pop().unwrap(), None);
    assert_eq!(rx.skipped_and_lost(), (0, 0));
    drop((vacant, rx, queue));
    assert!(shm_leftovers(&name).is_empty());
}

/// Byte `j` of the block `block` refers to, as both sides write it.
fn pattern(block: BlockRef, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|j| block.to_bits().wrapping_add(7 * j) as u8)
        .collect()
}

#[test]
fn a_c_pool_handle_from_the_readme_allocates_frees_and_frees_remotely() {
    let _dog = Watchdog::new("C pool handle", Duration::from_secs(120));
    let dir = TempDir::new("cpool");
    let Some(peer) = program(&dir, "pool_peer") else {
        skip("a_c_pool_handle_from_the_readme", "no C compiler");
        return;
    };
    let name = unique_name("cpool");
    let pool = Pool::create(&name, &PoolConfig::new(8, 4)).unwrap();
    let mut owner = pool.handle().unwrap();
    let ours: Vec<BlockRef> = (0..40).map(|_| owner.alloc(256).unwrap()).collect();
    for &b in &ours {
        owner.write_at(b, 0, &pattern(b, 256)).unwrap();
    }
    let mut args = vec![name.clone(), "200".to_owned(), "50".to_owned()];
    args.extend(ours.iter().map(|b| b.to_bits().to_string()));
    let mut c = Peer::spawn(Command::new(&peer).args(&args));
    let handle: u32 = c
        .line()
        .strip_prefix("handle ")
        .expect("its handle")
        .parse()
        .unwrap();
    let (mut lent, mut freed) = (Vec::new(), Vec::new());
    loop {
        let line = c.line();
        if let Some(bits) = line.strip_prefix("block ") {
            lent.push(BlockRef::from_bits(bits.parse().unwrap()));
        } else if let Some(bits) = line.strip_prefix("freed ") {
            freed.push(BlockRef::from_bits(bits.parse().unwrap()));
        } else if line == "ready" {
            break;
        } else {
            assert_eq!(line, "remote-freed 40");
        }
    }
    assert_eq!((lent.len(), freed.len()), (25, 25));
    // Its blocks hold what it wrote; what it freed itself is refused.
    for &b in &lent {
        let mut buf = [0u8; 200];
        owner.read_at(b, 0, &mut buf).unwrap();
        assert_eq!(buf.to_vec(), pattern(b, 200));
    }
    // It reuses a block it freed at its next allocation, with the next
    // generation: all but its last freed reference are stale.
    let (mut stale, mut free) = (0, 0);
    for &b in &freed {
        match owner.free(b) {
            Err(nodeipc_pool::Error::Stale { .. }) => stale += 1,
            Err(nodeipc_pool::Error::NotAllocated { .. }) => free += 1,
            other => panic!("a block the C peer freed: {other:?}"),
        }
    }
    assert_eq!((stale, free), (24, 1));
    // Ours, freed remotely by it, come back to us; its, freed remotely by
    // us, go back to it (its clean-up waits for them).
    assert_eq!(owner.clean_remote_frees().unwrap(), 40);
    assert_eq!(owner.occupancy().unwrap(), 0);
    owner.free_batch(&lent).unwrap();
    assert_eq!(c.line(), "cleaned 25");
    c.succeeds();
    let all = owner.occupancy_all().unwrap();
    let theirs = all[handle as usize];
    assert_eq!((theirs.pid, theirs.blocks), (0, 0), "{all:?}");
    let joins: &AtomicU32 = pool.region().view(128 + 64 * handle as usize + 4).unwrap();
    assert_eq!(joins.load(Ordering::Acquire), 1);
    // Its slab is still its handle's, every block free: a later holder of
    // that handle adopts it; a stale reference stays refused.
    assert!(owner.free(lent[0]).is_err());
    drop((owner, pool));
    assert!(shm_leftovers(&name).is_empty());
}
