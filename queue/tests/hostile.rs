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
#[test]
fn a_thread_flipping_bytes_causes_errors_at_worst() {
    let _dog = Watchdog::new(
        "a_thread_flipping_bytes_causes_errors_at_worst",
        Duration::from_secs(60),
    );
    let queue = Queue::<[u64; 3]>::anonymous(16, SCHEMA).unwrap();
    let region = queue.region().clone();
    let stop = Arc::new(AtomicBool::new(false));
    let flipper = {
        let stop = stop.clone();
        let region = region.clone();
        thread::spawn(move || {
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
    let deadline = Instant::now() + Duration::from_secs(2);
    let producer = {
        let queue_region = region.clone();
        thread::spawn(move || {
            let (mut ok, mut errors) = (0u64, 0u64);
            let mut tx = None;
            while Instant::now() < deadline {
                let Some(p) = tx.as_mut() else {
                    // Joins fail while the header is garbled, or the role word says otherwise.
                    tx = nodeipc_queue::Producer::<[u64; 3]>::join(queue_region.clone(), SCHEMA)
                        .ok();
                    errors += 1;
                    continue;
                };
                match p.push_timeout(&[ok, !ok, ok ^ 0x55], Duration::from_millis(5)) {
                    Ok(()) => ok += 1,
                    Err(_) => {
                        errors += 1;
                        tx = None; // rejoin: the state it held may now disagree with the region
                    }
                }
            }
            (ok, errors)
        })
    };
    let consumer = {
        let queue_region = region.clone();
        thread::spawn(move || {
            let (mut ok, mut errors) = (0u64, 0u64);
            let mut rx = None;
            let mut out = [[0u64; 3]; 4];
            while Instant::now() < deadline {
                let Some(c) = rx.as_mut() else {
                    rx = nodeipc_queue::Consumer::<[u64; 3]>::join(queue_region.clone(), SCHEMA)
                        .ok();
                    errors += 1;
                    continue;
                };
                match c.pop_into_timeout(&mut out, Duration::from_millis(5)) {
                    Ok(n) => ok += n as u64,
                    Err(_) => {
                        errors += 1;
                        rx = None;
                    }
                }
            }
            (ok, errors)
        })
    };
    let (pushed, push_errors) = producer.join().unwrap();
    let (popped, pop_errors) = consumer.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    let flips = flipper.join().unwrap();
    eprintln!(
        "{flips} flips: {pushed} pushed ({push_errors} errors), {popped} popped ({pop_errors} errors)"
    );
    assert!(flips > 1000, "the flipper ran ({flips} flips)");
    assert!(
        pushed > 0 && popped > 0,
        "the queue was used while it was garbled"
    );
    assert!(push_errors + pop_errors > 0, "the garbling was noticed");
    // The queue is still ours to inspect: its magic word may be flipped, nothing more.
    let _: &AtomicU64 = region.view(0).unwrap();
}
