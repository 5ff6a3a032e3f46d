//! A peer that writes what the protocol never would: impossible indices are
//! errors naming the queue, never an out-of-bounds access, a re-read of
//! consumed slots, a panic or a hang; a thread flipping bytes of a live
//! queue causes errors at worst.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use nodeipc_queue::{Error, Queue};
use nodeipc_testkit::Watchdog;

const SCHEMA: u64 = 0x686f7374;
/// Offsets of the two indices (see the README's layout).
const TAIL: usize = 128;
const HEAD: usize = 256;

#[test]
fn a_tail_past_head_plus_capacity_is_an_error_not_a_read() {
    let _dog = Watchdog::new(
        "a_tail_past_head_plus_capacity_is_an_error_not_a_read",
        Duration::from_secs(20),
    );
    let queue = Queue::<u64>::anonymous(8, SCHEMA).unwrap();
    let mut rx = queue.consumer().unwrap();
    let tail: &AtomicU32 = queue.region().view(TAIL).unwrap();
    tail.store(100, Ordering::Release);
    let err = rx.try_pop().unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err:?}");
    assert!(
        err.to_string().contains("tail 100 is 100 past head 0"),
        "{err}"
    );
    // A timed pop does not wait on it either.
    let started = Instant::now();
    assert!(matches!(
        rx.pop_timeout(Duration::from_secs(30)),
        Err(Error::Corrupt { .. })
    ));
    assert!(started.elapsed() < Duration::from_secs(10));
    // A tail moved behind the head (a re-read of consumed slots) is refused too.
    tail.store(u32::MAX, Ordering::Release);
    assert!(matches!(
        rx.try_pop_into(&mut [0; 4]),
        Err(Error::Corrupt { .. })
    ));
}

#[test]
fn a_head_moved_backwards_or_past_the_tail_is_an_error() {
    let queue = Queue::<u64>::anonymous(8, SCHEMA).unwrap();
    let mut tx = queue.producer().unwrap();
    let mut rx = queue.consumer().unwrap();
    for i in 0..8 {
        assert!(tx.try_push(&i).unwrap());
    }
    for _ in 0..4 {
        rx.try_pop().unwrap().unwrap();
    }
    for i in 8..12 {
        assert!(tx.try_push(&i).unwrap()); // the producer has now seen head 4
    }
    let head: &AtomicU32 = queue.region().view(HEAD).unwrap();
    head.store(2, Ordering::Release);
    let err = tx.try_push(&99).unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err:?}");
    assert!(err.to_string().contains("head 2 is not between"), "{err}");
    head.store(20, Ordering::Release); // past the tail (12)
    assert!(matches!(
        tx.push_timeout(&99, Duration::from_secs(5)),
        Err(Error::Corrupt { .. })
    ));
    assert!(matches!(tx.reserve(3), Err(Error::Corrupt { .. })));
}

#[test]
fn a_join_onto_impossible_indices_is_refused() {
    let queue = Queue::<u64>::anonymous(8, SCHEMA).unwrap();
    let tail: &AtomicU32 = queue.region().view(TAIL).unwrap();
    tail.store(9, Ordering::Release);
    assert!(matches!(queue.producer(), Err(Error::Corrupt { .. })));
    assert!(matches!(queue.consumer(), Err(Error::Corrupt { .. })));
}

/// Random bytes written all over a live queue (indices, roles, parked
/// counts, slots) while a producer and a consumer run: no panic, no hang (the
/// watchdog), no access outside the region (the test would fault).
///
/// The garbling starts once each side has got one message through, and the
/// two sides then run for two seconds of it: so the queue is known to have
/// worked before, and to have been used while garbled, however late a
/// loaded machine runs either thread.
#[test]
fn a_thread_flipping_bytes_causes_errors_at_worst() {
    let _dog = Watchdog::new(
        "a_thread_flipping_bytes_causes_errors_at_worst",
        Duration::from_secs(60),
    );
    let queue = Queue::<[u64; 3]>::anonymous(16, SCHEMA).unwrap();
    let region = queue.region().clone();
    // Sides that got one message through; set once the garbling started;
    // set when the sides are to stop.
    let warmed = Arc::new(AtomicU32::new(0));
    let flipping = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let flipper = {
        let (warmed, flipping, stop) = (warmed.clone(), flipping.clone(), stop.clone());
        let region = region.clone();
        thread::spawn(move || {
            while warmed.load(Ordering::Acquire) < 2 {
                if stop.load(Ordering::Relaxed) {
                    return 0;
                }
                thread::sleep(Duration::from_millis(1));
            }
            flipping.store(true, Ordering::Release);
            let mut x: u64 = 0x2545_f491_4f6c_dd1d;
            let mut flips = 0u64;
            while !stop.load(Ordering::Relaxed) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Past the configuration line: a garbled magic or capacity
                // only ends in refused joins; the live words are the test.
                let live = region.len() - 128;
                let offset = 128 + (x % live as u64) as usize;
                region.write_at(offset, &[(x >> 32) as u8]).unwrap();
                flips += 1;
                if flips.is_multiple_of(8) {
                    thread::sleep(Duration::from_micros(100));
                }
            }
            flips
        })
    };
    // What one side did: messages through, errors, and operations tried
    // while the garbling ran.
    #[derive(Debug, Default)]
    struct Side {
        ok: u64,
        errors: u64,
        while_garbled: u64,
    }
    let producer = {
        let (queue_region, warmed) = (region.clone(), warmed.clone());
        let (flipping, stop) = (flipping.clone(), stop.clone());
        thread::spawn(move || {
            let mut side = Side::default();
            let mut tx = None;
            while !stop.load(Ordering::Relaxed) {
                let garbled = flipping.load(Ordering::Acquire);
                side.while_garbled += u64::from(garbled);
                let Some(p) = tx.as_mut() else {
                    // Joins fail while the header is garbled, or the role word says otherwise.
                    tx = nodeipc_queue::Producer::<[u64; 3]>::join(queue_region.clone(), SCHEMA)
                        .ok();
                    side.errors += u64::from(tx.is_none());
                    continue;
                };
                let ok = side.ok;
                match p.push_timeout(&[ok, !ok, ok ^ 0x55], Duration::from_millis(5)) {
                    Ok(()) => {
                        side.ok += 1;
                        if side.ok == 1 {
                            warmed.fetch_add(1, Ordering::AcqRel);
                        }
                    }
                    Err(_) => {
                        side.errors += 1;
                        tx = None; // rejoin: the state it held may now disagree with the region
                    }
                }
            }
            side
        })
    };
    let consumer = {
        let (queue_region, warmed) = (region.clone(), warmed.clone());
        let (flipping, stop) = (flipping.clone(), stop.clone());
        thread::spawn(move || {
            let mut side = Side::default();
            let mut rx = None;
            let mut out = [[0u64; 3]; 4];
            while !stop.load(Ordering::Relaxed) {
                let garbled = flipping.load(Ordering::Acquire);
                side.while_garbled += u64::from(garbled);
                let Some(c) = rx.as_mut() else {
                    rx = nodeipc_queue::Consumer::<[u64; 3]>::join(queue_region.clone(), SCHEMA)
                        .ok();
                    side.errors += u64::from(rx.is_none());
                    continue;
                };
                match c.pop_into_timeout(&mut out, Duration::from_millis(5)) {
                    Ok(0) => {}
                    Ok(n) => {
                        if side.ok == 0 {
                            warmed.fetch_add(1, Ordering::AcqRel);
                        }
                        side.ok += n as u64;
                    }
                    Err(_) => {
                        side.errors += 1;
                        rx = None;
                    }
                }
            }
            side
        })
    };
    // Both sides through once, then two seconds of garbling.
    let limit = Instant::now() + Duration::from_secs(30);
    while !flipping.load(Ordering::Acquire) {
        assert!(
            Instant::now() < limit,
            "no message got through an intact queue in 30 s"
        );
        thread::sleep(Duration::from_millis(1));
    }
    thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    let pushed = producer.join().unwrap();
    let popped = consumer.join().unwrap();
    let flips = flipper.join().unwrap();
    eprintln!("{flips} flips: producer {pushed:?}, consumer {popped:?}");
    assert!(flips > 1000, "the flipper ran ({flips} flips)");
    assert!(
        pushed.while_garbled > 0 && popped.while_garbled > 0,
        "the queue was used while it was garbled"
    );
    assert!(
        pushed.errors + popped.errors > 0,
        "the garbling was noticed"
    );
    // The queue is still ours to inspect: its magic word may be flipped, nothing more.
    let _: &AtomicU64 = region.view(0).unwrap();
}

/// The producer keeps a cached copy of the consumer's head and reloads it
/// only when that copy shows too little room (no extra load per push): a
/// bad head written by a hostile consumer goes unseen while the cache
/// suffices, and is reported (`Corrupt`, naming it) at the first reload,
/// before any slot the consumer has not released is written.
#[test]
fn a_bad_head_from_a_hostile_consumer_is_reported_at_the_next_reload() {
    let queue = Queue::<u64>::anonymous(8, SCHEMA).unwrap();
    let mut tx = queue.producer().unwrap();
    let mut rx = queue.consumer().unwrap();
    for i in 0..4 {
        assert!(tx.try_push(&i).unwrap());
    }
    // The consumer writes a head past the tail (4) without popping.
    let head: &AtomicU32 = queue.region().view(HEAD).unwrap();
    head.store(1000, Ordering::Release);
    // Four more fit in the producer's cached view (head 0): no reload.
    for i in 4..8 {
        assert!(tx.try_push(&i).unwrap(), "no reload needed for {i}");
    }
    // The ninth needs room the cache does not show: the reload reports it.
    let err = tx.try_push(&8).unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("head 1000 is not between the last head seen (0) and the tail (8)"),
        "{err}"
    );
    // Every later attempt that reloads says so too; none writes a slot.
    assert!(matches!(
        tx.try_push_slice(&[9, 10]),
        Err(Error::Corrupt { .. })
    ));
    assert!(matches!(tx.reserve(1), Err(Error::Corrupt { .. })));
    assert!(matches!(
        tx.push_timeout(&9, Duration::from_secs(5)),
        Err(Error::Corrupt { .. })
    ));
    // The eight messages published are intact for an honest consumer.
    head.store(0, Ordering::Release);
    let mut out = [0u64; 8];
    assert_eq!(rx.try_pop_into(&mut out).unwrap(), 8);
    assert_eq!(out, [0, 1, 2, 3, 4, 5, 6, 7]);
}

/// The consumer's side of the same rule: the tail only moves forward.
/// A hostile producer that moves it back (not behind the head, so the
/// distance still fits the ring) is `Corrupt` at the consumer's next
/// reload (it was once accepted: the consumer's view of what was published
/// silently shrank, and slots it had seen published could be rewritten
/// before it read them).
#[test]
fn regression_a_tail_moved_backwards_is_an_error_at_the_next_reload() {
    let queue = Queue::<u64>::anonymous(8, SCHEMA).unwrap();
    let mut tx = queue.producer().unwrap();
    let mut rx = queue.consumer().unwrap();
    for i in 0..6 {
        assert!(tx.try_push(&i).unwrap());
    }
    assert_eq!(rx.try_pop().unwrap(), Some(0)); // the consumer has seen tail 6
    let tail: &AtomicU32 = queue.region().view(TAIL).unwrap();
    tail.store(4, Ordering::Release);
    // Asking for more than the five it knows of makes it reload: tail 4 is
    // behind the 6 it saw, though still ahead of its head (1).
    let result = rx.try_pop_into(&mut [0u64; 8]);
    let err = match result {
        Err(err) => err,
        Ok(n) => panic!("a tail moved back from 6 to 4 was accepted: {n} popped"),
    };
    assert!(matches!(err, Error::Corrupt { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("tail 4 is not between the last tail seen (6) and head 1 + capacity 8"),
        "{err}"
    );
}
