//! Loom models of the ring: the code of `ring.rs` itself, on loom's
//! atomics, with a mock futex that sleeps only while the word holds the
//! expected value (as the kernel's does). Run with
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test -p nodeipc-queue --lib --release`.
//!
//! The waiter's side mirrors `nodeipc_shm::wait::wait_while`'s park step
//! (announce with a SeqCst read-modify-write, recheck, sleep, withdraw);
//! its spin and clock phases only delay that step and are not modelled.

use loom::sync::Arc;
use loom::thread;

use crate::layout::{Geometry, Header, init};
use crate::ring::{ConsumerState, ProducerState, Ring};
use crate::sync::{AtomicU64, Ordering};

struct Shared {
    header: Header,
    slots: Vec<AtomicU64>,
    geo: Geometry,
}

impl Shared {
    fn new(capacity: u32) -> Arc<Shared> {
        let geo = Geometry::new("loom", 16, capacity).unwrap();
        let header = Header::default();
        init(&header, 16, 8, geo, 0);
        let slots = (0..geo.words().unwrap())
            .map(|_| AtomicU64::new(0))
            .collect();
        Arc::new(Shared { header, slots, geo })
    }

    fn ring(&self) -> Ring<'_> {
        Ring {
            header: &self.header,
            slots: &self.slots,
            geo: self.geo,
        }
    }
}

/// A message whose two words must arrive together.
fn message(i: u64) -> [u64; 2] {
    [i, !i]
}

/// Pushes `n` messages, parking on the head while the ring is full.
fn produce(shared: &Shared, n: u64) {
    let ring = shared.ring();
    let mut p = ProducerState {
        tail: 0,
        head_seen: 0,
    };
    for i in 0..n {
        loop {
            if ring.room(&mut p, 1).unwrap() > 0 {
                break;
            }
            let seen = p.head_seen;
            shared
                .header
                .futex
                .park_while(&shared.header.head, &shared.header.head_parked, seen);
        }
        ring.write_slot(p.tail, &message(i));
        ring.publish(&mut p, 1);
    }
}

/// Pops `n` messages, parking on the tail while the ring is empty; checks
/// each is whole and in order.
fn consume(shared: &Shared, n: u64) {
    let ring = shared.ring();
    let mut c = ConsumerState {
        head: 0,
        tail_seen: 0,
    };
    for i in 0..n {
        loop {
            if ring.ready(&mut c, 1).unwrap() > 0 {
                break;
            }
            let seen = c.tail_seen;
            shared
                .header
                .futex
                .park_while(&shared.header.tail, &shared.header.tail_parked, seen);
        }
        let got: [u64; 2] = ring.read_slot(c.head).unwrap();
        assert_eq!(got, message(i), "message {i} torn or out of order");
        ring.release(&mut c, 1);
    }
    assert_eq!(shared.header.tail.load(Ordering::Acquire), n as u32);
}

/// A consumer parked on an empty ring is always woken by the push (a lost
/// wake-up would leave it asleep: loom reports the deadlock).
#[test]
fn park_and_wake_lose_no_wake_up() {
    loom::model(|| {
        let shared = Shared::new(2);
        let consumer = {
            let shared = shared.clone();
            thread::spawn(move || consume(&shared, 1))
        };
        produce(&shared, 1);
        consumer.join().unwrap();
    });
}

/// Across the wrap-around of a 2-slot ring, with both sides parking (the
/// producer on a full ring, the consumer on an empty one): every message
/// whole, in order, nobody left asleep.
#[test]
fn wrap_around_with_both_sides_parking() {
    loom::model(|| {
        let shared = Shared::new(2);
        let consumer = {
            let shared = shared.clone();
            thread::spawn(move || consume(&shared, 3))
        };
        produce(&shared, 3);
        consumer.join().unwrap();
    });
}

/// A one-slot ring: every push waits for the pop before it.
#[test]
fn one_slot_ring_alternates() {
    loom::model(|| {
        let shared = Shared::new(1);
        let producer = {
            let shared = shared.clone();
            thread::spawn(move || produce(&shared, 2))
        };
        consume(&shared, 2);
        producer.join().unwrap();
    });
}
