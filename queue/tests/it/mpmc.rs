//! MPMC rings in one process: every message once, places limited, the
//! claims of the dead resolved (a producer's skipped, a consumer's message
//! lost and counted, never given twice), `PeerDied` only once no producer
//! lives and the ring is drained, checked messages, waits and `wait_any`.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::thread;
use std::time::Duration;

use nodeipc_queue::{Error, Message, MpmcQueue, Queue, Role, Waitable, wait_any};
use nodeipc_testkit::{Watchdog, unique_name};

const SCHEMA: u64 = 0x6d706d63;
const T: Duration = Duration::from_secs(5);

/// Offsets the README's MPMC layout gives (a test's view of the region).
const TAIL: usize = 128;
const HEAD: usize = 256;
fn place(i: usize) -> usize {
    768 + 128 * i
}
fn slots_offset(producers: usize, consumers: usize) -> usize {
    768 + 128 * (producers + consumers)
}

/// An identity of a process that has exited: a dead holder.
fn dead_identity() -> (u32, u64) {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    let start = nodeipc_fdpass::process_start_time(pid).unwrap();
    child.wait().unwrap();
    (pid, start)
}

/// Writes a dead process into place `i`, claiming `count` positions from `start`.
fn dead_claim<T: Message>(queue: &MpmcQueue<T>, i: usize, start: u32, count: u32) {
    let (pid, start_time) = dead_identity();
    let region = queue.region();
    let at = place(i);
    region.write_at(at, &pid.to_ne_bytes()).unwrap();
    region.write_at(at + 4, &1u32.to_ne_bytes()).unwrap();
    region.write_at(at + 8, &start_time.to_ne_bytes()).unwrap();
    let claim = u64::from(count) << 32 | u64::from(start);
    region.write_at(at + 16, &claim.to_ne_bytes()).unwrap();
}

fn word<T: Message>(queue: &MpmcQueue<T>, at: usize) -> &AtomicU32 {
    queue.region().view::<AtomicU32>(at).unwrap()
}

#[test]
fn one_producer_and_one_consumer_keep_order() {
    let queue = MpmcQueue::<u64>::anonymous(8, 1, 1, SCHEMA).unwrap();
    let (mut tx, mut rx) = (queue.producer().unwrap(), queue.consumer().unwrap());
    for round in 0..5u64 {
        for i in 0..8 {
            assert!(tx.try_push(&(round * 8 + i)).unwrap());
        }
        assert!(!tx.try_push(&0).unwrap(), "full");
        let mut out = [0u64; 3];
        assert_eq!(rx.try_pop_into(&mut out).unwrap(), 3);
        assert_eq!(out, [round * 8, round * 8 + 1, round * 8 + 2]);
        for i in 3..8 {
            assert_eq!(rx.try_pop().unwrap(), Some(round * 8 + i));
        }
        assert_eq!(rx.try_pop().unwrap(), None);
    }
    assert_eq!(tx.try_push_slice(&[1, 2, 3]).unwrap(), 3);
    assert_eq!(rx.skipped_and_lost(), (0, 0));
}

#[test]
fn many_threads_deliver_every_message_exactly_once() {
    let _dog = Watchdog::new("mpmc threads", Duration::from_secs(120));
    const PER: u64 = 20_000;
    let queue = Arc::new(MpmcQueue::<[u64; 2]>::anonymous(64, 3, 3, SCHEMA).unwrap());
    let done = Arc::new(AtomicU64::new(0));
    let producers: Vec<_> = (0..3u64)
        .map(|p| {
            let mut tx = queue.producer().unwrap();
            let q = Arc::clone(&queue);
            thread::spawn(move || {
                for i in 0..PER {
                    if let Err(e) = tx.push_timeout(&[p, i], T) {
                        // What the ring looked like, to tell a lost wake-up
                        // from a claim nobody resolved.
                        let r = q.region();
                        let w = |at| r.view::<AtomicU32>(at).unwrap().load(Ordering::SeqCst);
                        let seqs: Vec<u32> =
                            (0..64).map(|s| w(slots_offset(3, 3) + s * 64)).collect();
                        let claims: Vec<u64> = (0..6)
                            .map(|i| {
                                r.view::<AtomicU64>(place(i) + 16)
                                    .unwrap()
                                    .load(Ordering::SeqCst)
                            })
                            .collect();
                        panic!(
                            "{e}: tail {} head {} claims {claims:x?} seqs {seqs:?} parked {} {}",
                            w(TAIL),
                            w(HEAD),
                            w(512),
                            w(640)
                        );
                    }
                }
            })
        })
        .collect();
    let consumers: Vec<_> = (0..3)
        .map(|_| {
            let mut rx = queue.consumer().unwrap();
            let done = Arc::clone(&done);
            thread::spawn(move || {
                let mut got = Vec::new();
                let mut buf = [[0u64; 2]; 7];
                while done.load(Ordering::Acquire) < 3 * PER {
                    match rx.pop_into_timeout(&mut buf, Duration::from_millis(20)) {
                        Ok(n) => {
                            got.extend_from_slice(&buf[..n]);
                            done.fetch_add(n as u64, Ordering::AcqRel);
                        }
                        Err(Error::TimedOut { .. }) => {}
                        // Every producer done and the ring drained.
                        Err(Error::PeerLeft { .. }) => break,
                        Err(e) => panic!("{e}"),
                    }
                }
                got
            })
        })
        .collect();
    for p in producers {
        p.join().unwrap();
    }
    let mut seen = HashSet::new();
    let mut last = [None::<u64>; 3];
    for c in consumers {
        let got = c.join().unwrap();
        // Per producer, each consumer sees its messages in order.
        let mut mine = [None::<u64>; 3];
        for [p, i] in got {
            assert!(seen.insert((p, i)), "message ({p}, {i}) delivered twice");
            let prev = &mut mine[p as usize];
            assert!(prev.is_none_or(|prev| prev < i), "out of order");
            *prev = Some(i);
            last[p as usize] = last[p as usize].max(Some(i));
        }
    }
    assert_eq!(seen.len() as u64, 3 * PER);
}

#[test]
fn places_are_fixed_at_creation_and_a_live_holder_is_named() {
    let queue = MpmcQueue::<u32>::anonymous(4, 2, 1, SCHEMA).unwrap();
    let a = queue.producer().unwrap();
    let _b = queue.producer().unwrap();
    match queue.producer() {
        Err(Error::NoPlace {
            role: Role::Producer,
            places: 2,
            holders,
            ..
        }) => assert_eq!(holders, vec![std::process::id(); 2]),
        other => panic!("expected NoPlace, got {other:?}"),
    }
    drop(a);
    assert_eq!(queue.producer().unwrap().place(), 0, "the vacated place");
    let _c = queue.consumer().unwrap();
    assert!(matches!(
        queue.consumer(),
        Err(Error::NoPlace {
            role: Role::Consumer,
            ..
        })
    ));
    assert!(matches!(
        MpmcQueue::<u32>::anonymous(2, 1, 1, SCHEMA),
        Err(Error::InvalidArgument {
            what: "capacity",
            ..
        })
    ));
    assert!(matches!(
        MpmcQueue::<u32>::anonymous(8, 65, 1, SCHEMA),
        Err(Error::InvalidArgument {
            what: "producers",
            ..
        })
    ));
}

#[test]
fn a_position_a_dead_producer_claimed_is_skipped_and_counted() {
    let queue = MpmcQueue::<u64>::anonymous(4, 2, 1, SCHEMA).unwrap();
    let mut tx = queue.producer().unwrap();
    let mut rx = queue.consumer().unwrap();
    // Producer place 1: a process that claimed position 0 and died before
    // publishing it (the tail moved past it, its slot still free).
    dead_claim(&queue, 1, 0, 1);
    word(&queue, TAIL).store(1, Ordering::SeqCst);
    assert!(tx.try_push(&42).unwrap());
    // The consumer, held up at position 0, skips it and gets position 1.
    assert_eq!(rx.try_pop().unwrap(), Some(42));
    assert_eq!(rx.skipped_and_lost(), (1, 0));
    assert_eq!(
        tx.skipped_and_lost(),
        (1, 0),
        "both sides read the counters"
    );
    assert_eq!(rx.try_pop().unwrap(), None);
    // The place of the dead is taken over, its claim dropped.
    let other = queue.producer().unwrap();
    assert_eq!(other.place(), 1);
}

#[test]
fn a_claim_of_a_live_producer_is_never_skipped() {
    let queue = MpmcQueue::<u64>::anonymous(4, 2, 1, SCHEMA).unwrap();
    let mut tx = queue.producer().unwrap();
    let other = queue.producer().unwrap();
    let mut rx = queue.consumer().unwrap();
    // Place 1 (held by `other`, alive) claims position 0 and is slow.
    let claim = 1u64 << 32;
    queue
        .region()
        .write_at(place(1) + 16, &claim.to_ne_bytes())
        .unwrap();
    word(&queue, TAIL).store(1, Ordering::SeqCst);
    assert!(tx.try_push(&7).unwrap());
    thread::sleep(Duration::from_millis(20)); // another coarse clock tick
    assert_eq!(rx.try_pop().unwrap(), None, "position 0 is still coming");
    assert_eq!(rx.skipped_and_lost(), (0, 0));
    drop(other);
}

#[test]
fn a_message_a_dead_consumer_claimed_is_lost_and_counted_never_given_twice() {
    let queue = MpmcQueue::<u64>::anonymous(4, 1, 2, SCHEMA).unwrap();
    let mut tx = queue.producer().unwrap();
    let mut rx = queue.consumer().unwrap();
    assert!(tx.try_push(&100).unwrap());
    // Consumer place 1 (index 2 among places: 1 producer first) claimed
    // position 0 and died before releasing it.
    dead_claim(&queue, 1 + 1, 0, 1);
    word(&queue, HEAD).store(1, Ordering::SeqCst);
    for v in 101..104 {
        assert!(tx.try_push(&v).unwrap());
    }
    // Position 4 needs slot 0: the producer releases the dead claim.
    assert!(tx.try_push(&104).unwrap());
    assert_eq!(tx.skipped_and_lost(), (0, 1));
    let mut got = Vec::new();
    while let Some(v) = rx.try_pop().unwrap() {
        got.push(v);
    }
    assert_eq!(got, vec![101, 102, 103, 104], "100 is lost, never given");
    let _ = slots_offset(1, 2);
}

#[test]
fn a_consumer_gets_peer_died_only_when_no_producer_lives_and_the_ring_is_drained() {
    let queue = MpmcQueue::<u64>::anonymous(8, 2, 1, SCHEMA).unwrap();
    let mut rx = queue.consumer().unwrap();
    // Nobody has joined: a timeout, not a death.
    assert!(matches!(
        rx.pop_timeout(Duration::from_millis(60)),
        Err(Error::TimedOut { .. })
    ));
    let mut tx = queue.producer().unwrap();
    assert!(tx.try_push(&1).unwrap());
    assert!(tx.try_push(&2).unwrap());
    drop(tx);
    // Left, with messages in the ring: they come first.
    assert_eq!(rx.pop_timeout(T).unwrap(), 1);
    assert_eq!(rx.pop_timeout(T).unwrap(), 2);
    assert!(matches!(
        rx.pop_timeout(T),
        Err(Error::PeerLeft {
            role: Role::Producer,
            ..
        })
    ));
    // A dead producer in place 1 (the other vacant, left): died.
    let (pid, start) = dead_identity();
    let region = queue.region();
    region.write_at(place(1), &pid.to_ne_bytes()).unwrap();
    region.write_at(place(1) + 4, &1u32.to_ne_bytes()).unwrap();
    region.write_at(place(1) + 8, &start.to_ne_bytes()).unwrap();
    match rx.pop_timeout(T) {
        Err(Error::PeerDied {
            role: Role::Producer,
            pid: dead,
            ..
        }) => assert_eq!(dead, pid),
        other => panic!("expected PeerDied, got {other:?}"),
    }
}

#[test]
fn producers_learn_that_every_consumer_is_gone() {
    let queue = MpmcQueue::<u64>::anonymous(4, 1, 2, SCHEMA).unwrap();
    let mut tx = queue.producer().unwrap();
    let a = queue.consumer().unwrap();
    let b = queue.consumer().unwrap();
    assert!(tx.try_push(&1).unwrap());
    drop(a);
    thread::sleep(Duration::from_millis(60));
    assert!(tx.try_push(&2).unwrap(), "one consumer left: pushes go on");
    drop(b);
    thread::sleep(Duration::from_millis(60));
    assert!(matches!(
        tx.try_push(&3),
        Err(Error::PeerLeft {
            role: Role::Consumer,
            ..
        })
    ));
}

#[test]
fn a_parked_consumer_is_woken_by_a_push_from_another_thread() {
    let _dog = Watchdog::new("mpmc park", Duration::from_secs(60));
    let queue = MpmcQueue::<u64>::anonymous(4, 1, 1, SCHEMA).unwrap();
    let mut tx = queue.producer().unwrap();
    let mut rx = queue.consumer().unwrap();
    let pusher = thread::spawn(move || {
        thread::sleep(Duration::from_millis(200));
        tx.push_timeout(&9, T).unwrap();
        tx
    });
    let start = std::time::Instant::now();
    assert_eq!(rx.pop_timeout(T).unwrap(), 9);
    assert!(start.elapsed() < Duration::from_secs(2));
    let mut tx = pusher.join().unwrap();
    // And a producer parked on a full ring, by a pop.
    for v in 0..4 {
        assert!(tx.try_push(&v).unwrap());
    }
    let popper = thread::spawn(move || {
        thread::sleep(Duration::from_millis(200));
        (rx.pop_timeout(T).unwrap(), rx)
    });
    tx.push_timeout(&4, T).unwrap();
    let (first, rx) = popper.join().unwrap();
    assert_eq!(first, 0);
    drop(rx);
}

#[test]
fn wait_any_waits_on_mpmc_and_spsc_consumers_alike() {
    let _dog = Watchdog::new("mpmc wait_any", Duration::from_secs(60));
    let spsc = Queue::<u64>::anonymous(4, SCHEMA).unwrap();
    let mpmc = MpmcQueue::<u64>::anonymous(4, 1, 1, SCHEMA).unwrap();
    let mut a = spsc.consumer().unwrap();
    let mut b = mpmc.consumer().unwrap();
    let _spsc_tx = spsc.producer().unwrap();
    let mut tx = mpmc.producer().unwrap();
    let pusher = thread::spawn(move || {
        thread::sleep(Duration::from_millis(150));
        tx.try_push(&5).unwrap();
        tx
    });
    let mut queues: [&mut dyn Waitable; 2] = [&mut a, &mut b];
    assert_eq!(wait_any(&mut queues, T).unwrap(), 1);
    assert_eq!(b.try_pop().unwrap(), Some(5));
    drop(pusher.join().unwrap());
}

#[test]
fn checked_messages_go_through_an_mpmc_ring_and_a_bad_one_is_named() {
    #[derive(Clone, Copy, Debug, PartialEq, Message)]
    #[repr(C)]
    struct Check {
        id: u64,
        ok: bool,
    }
    let name = unique_name("mpmc-named");
    let queue = MpmcQueue::<Check>::create(&name, 4, 1, 1, SCHEMA).unwrap();
    let mut tx = nodeipc_queue::MpmcProducer::<Check>::open(&name, SCHEMA, T).unwrap();
    let mut rx = nodeipc_queue::MpmcConsumer::<Check>::open(&name, SCHEMA, T).unwrap();
    assert!(tx.try_push(&Check { id: 1, ok: true }).unwrap());
    assert!(tx.try_push(&Check { id: 2, ok: false }).unwrap());
    // Message 1's `ok` (slot 1: sequence word, then the message) set to 5.
    let stride = 64; // 8 + 16, in whole cache lines
    queue
        .region()
        .write_at(slots_offset(1, 1) + stride + 8 + 8, &[5])
        .unwrap();
    assert_eq!(rx.try_pop().unwrap(), Some(Check { id: 1, ok: true }));
    match rx.try_pop() {
        Err(Error::Invalid {
            index: 1,
            slot: 1,
            invalid,
            ..
        }) => assert_eq!((invalid.field.as_str(), invalid.offset), ("ok", 8)),
        other => panic!("expected Invalid, got {other:?}"),
    }
    assert_eq!(rx.try_pop().unwrap(), None, "taken off the ring");
    // A joiner with another message type is refused.
    assert!(matches!(
        nodeipc_queue::MpmcConsumer::<u64>::open(&name, SCHEMA, T),
        Err(Error::Mismatch { .. })
    ));
    drop((tx, rx, queue));
    assert!(nodeipc_testkit::shm_leftovers("mpmc-named").is_empty());
}

/// Any words another process writes into the cursors, counters, claims
/// and sequence words: every call returns (a value, `None`, `Corrupt`, a
/// timeout), never a panic, never a wait without end.
#[test]
fn arbitrary_words_in_the_ring_make_calls_fail_cleanly() {
    let _dog = Watchdog::new("mpmc hostile words", Duration::from_secs(120));
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for round in 0..50 {
        let queue = MpmcQueue::<[u64; 2]>::anonymous(8, 2, 2, SCHEMA).unwrap();
        let mut tx = queue.producer().unwrap();
        let mut rx = queue.consumer().unwrap();
        for i in 0..5 {
            let _ = tx.try_push(&[i, i]);
        }
        let region = queue.region();
        let words: Vec<usize> = [TAIL, HEAD, 384, 392, place(0) + 16, place(2) + 16]
            .into_iter()
            .chain((0..8).map(|s| slots_offset(2, 2) + 64 * s))
            .collect();
        for _ in 0..1 + round % 4 {
            let at = words[(next() % words.len() as u64) as usize];
            let value = match next() % 4 {
                0 => next() as u32,
                1 => (next() % 16) as u32,
                2 => u32::MAX - (next() % 4) as u32,
                _ => 1 << 31,
            };
            region.write_at(at, &value.to_ne_bytes()).unwrap();
        }
        for _ in 0..4 {
            let _ = tx.try_push(&[7, 7]);
            let _ = rx.try_pop();
            let mut out = [[0u64; 2]; 3];
            let _ = rx.try_pop_into(&mut out);
        }
        let _ = rx.pop_timeout(Duration::from_millis(5));
        let _ = tx.push_timeout(&[1, 1], Duration::from_millis(5));
    }
}
