//! One process: the ring's behaviour, its batches, its join checks.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use nodeipc_queue::{Error, Pod, Producer, Queue, Role, Zeroable, wait_any};
use nodeipc_shm::Region;
use nodeipc_testkit::{Watchdog, unique_name};

const SCHEMA: u64 = 0x5eed;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
struct Msg {
    words: [u64; 8],
}

fn msg(seq: u64) -> Msg {
    let mut words = [0; 8];
    for (i, w) in words.iter_mut().enumerate() {
        *w = seq.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ i as u64;
    }
    Msg { words }
}

/// A message whose size is not a multiple of 8: the last slot word is partial.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
struct Odd {
    bytes: [u8; 13],
}

#[test]
fn push_pop_in_order_across_the_wrap_around() {
    let queue = Queue::<Msg>::anonymous(8, SCHEMA).unwrap();
    let mut tx = queue.producer().unwrap();
    let mut rx = queue.consumer().unwrap();
    let mut next_out = 0;
    for seq in 0..100u64 {
        assert!(tx.try_push(&msg(seq)).unwrap());
        if seq % 3 == 2 {
            while let Some(m) = rx.try_pop().unwrap() {
                assert_eq!(m, msg(next_out));
                next_out += 1;
            }
        }
    }
    while let Some(m) = rx.try_pop().unwrap() {
        assert_eq!(m, msg(next_out));
        next_out += 1;
    }
    assert_eq!(next_out, 100);
}

/// Pushes `count` values made by `make` through a ring of 8 and pops them
/// in batches of every size from 1 to 8 (and single pops), so batches start
/// at every slot and cross the wrap-around; every value comes back whole.
fn batches_round_trip<T>(make: impl Fn(u64) -> T)
where
    T: nodeipc_queue::Message + Copy + PartialEq + std::fmt::Debug,
{
    let queue = Queue::<T>::anonymous(8, SCHEMA).unwrap();
    let mut tx = queue.producer().unwrap();
    let mut rx = queue.consumer().unwrap();
    let (mut pushed, mut popped) = (0u64, 0u64);
    let mut out = [make(u64::MAX); 8];
    for round in 0..200usize {
        while tx.try_push(&make(pushed)).unwrap() {
            pushed += 1;
        }
        let want = round % 9;
        let got = if want == 0 {
            out[0] = rx.try_pop().unwrap().expect("a full ring has a message");
            1
        } else {
            rx.try_pop_into(&mut out[..want]).unwrap()
        };
        assert_eq!(got, want.max(1), "round {round}: the ring was full");
        for value in &out[..got] {
            assert_eq!(*value, make(popped), "message {popped}");
            popped += 1;
        }
    }
    assert!(popped > 800, "only {popped} popped");
}

#[test]
fn batch_pops_return_every_byte_whatever_the_size_and_the_wrap() {
    // Whole 16-byte pairs, pairs and a word, pairs and part of a word, and
    // sizes whose slots are padded (copied slot by slot).
    let bytes = |seq: u64, i: usize| (seq.wrapping_mul(31) as u8) ^ (i as u8).wrapping_mul(7);
    batches_round_trip(msg);
    batches_round_trip(|seq| std::array::from_fn::<u64, 3, _>(|i| seq ^ ((i as u64) << 56)));
    batches_round_trip(|seq| {
        std::array::from_fn::<u32, 10, _>(|i| u32::from(bytes(seq, i)) << (i % 4 * 8))
    });
    batches_round_trip(|seq| std::array::from_fn::<u8, 13, _>(|i| bytes(seq, i)));
    batches_round_trip(|seq| std::array::from_fn::<u8, 17, _>(|i| bytes(seq, i)));
    batches_round_trip(|seq| seq as u32);
    // Runs long enough for the string copy: batches of 3 and more, and
    // one message of 512 bytes alone.
    batches_round_trip(|seq| std::array::from_fn::<u64, 25, _>(|i| seq << 8 | i as u64));
    batches_round_trip(|seq| std::array::from_fn::<u64, 64, _>(|i| seq << 8 | i as u64));
}

#[test]
fn full_ring_refuses_then_accepts_after_a_pop() {
    let queue = Queue::<u64>::anonymous(4, SCHEMA).unwrap();
    let mut tx = queue.producer().unwrap();
    let mut rx = queue.consumer().unwrap();
    for i in 0..4 {
        assert!(tx.try_push(&i).unwrap());
    }
    assert!(!tx.try_push(&4).unwrap());
    assert_eq!(rx.try_pop().unwrap(), Some(0));
    assert!(tx.try_push(&4).unwrap());
    assert_eq!(rx.ready().unwrap(), 4);
}

#[test]
fn odd_sized_messages_round_trip() {
    let queue = Queue::<Odd>::anonymous(4, SCHEMA).unwrap();
    let mut tx = queue.producer().unwrap();
    let mut rx = queue.consumer().unwrap();
    for round in 0..10u8 {
        let m = Odd {
            bytes: std::array::from_fn(|i| round.wrapping_mul(31).wrapping_add(i as u8)),
        };
        assert!(tx.try_push(&m).unwrap());
        assert_eq!(rx.try_pop().unwrap(), Some(m));
    }
}

#[test]
fn batches_reserve_fill_publish_once() {
    let queue = Queue::<Msg>::anonymous(64, SCHEMA).unwrap();
    let mut tx = queue.producer().unwrap();
    let mut rx = queue.consumer().unwrap();
    let mut batch = tx.reserve(100).unwrap().expect("room");
    assert_eq!(batch.reserved(), 64);
    for seq in 0..10 {
        assert!(batch.push(&msg(seq)));
    }
    // Nothing is visible before publish.
    assert_eq!(rx.ready().unwrap(), 0);
    assert_eq!(batch.publish(), 10);
    // An abandoned batch publishes nothing.
    {
        let mut abandoned = tx.reserve(5).unwrap().expect("room");
        assert!(abandoned.push(&msg(999)));
    }
    let mut out = [Msg::zeroed(); 32];
    assert_eq!(rx.try_pop_into(&mut out).unwrap(), 10);
    for (seq, m) in out[..10].iter().enumerate() {
        assert_eq!(*m, msg(seq as u64));
    }
    let values: Vec<Msg> = (10..80).map(msg).collect();
    assert_eq!(tx.try_push_slice(&values).unwrap(), 64);
    assert!(tx.reserve(1).unwrap().is_none());
    assert_eq!(rx.try_pop_into(&mut out).unwrap(), 32);
    assert_eq!(out[31], msg(41));
}

#[test]
fn timed_pop_times_out_and_timed_push_waits_for_room() {
    let _dog = Watchdog::new(
        "timed_pop_times_out_and_timed_push_waits_for_room",
        Duration::from_secs(20),
    );
    let queue = Queue::<u64>::anonymous(2, SCHEMA).unwrap();
    let mut tx = queue.producer().unwrap();
    let mut rx = queue.consumer().unwrap();
    let started = Instant::now();
    match rx.pop_timeout(Duration::from_millis(120)) {
        Err(Error::TimedOut {
            op: "pop", waited, ..
        }) => assert!(waited >= Duration::from_millis(120)),
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(5));
    tx.try_push(&1).unwrap();
    tx.try_push(&2).unwrap();
    assert!(matches!(
        tx.push_timeout(&3, Duration::from_millis(60)),
        Err(Error::TimedOut { op: "push", .. })
    ));
    let consumer = thread::spawn(move || {
        thread::sleep(Duration::from_millis(100));
        let mut got = Vec::new();
        for _ in 0..1000 {
            got.push(rx.pop_timeout(Duration::from_secs(5)).unwrap());
        }
        got
    });
    for i in 3..1001u64 {
        tx.push_timeout(&i, Duration::from_secs(5)).unwrap();
    }
    let got = consumer.join().unwrap();
    assert_eq!(got, (1..1001).collect::<Vec<_>>());
}

#[test]
fn a_parked_consumer_is_woken_by_a_push() {
    let _dog = Watchdog::new(
        "a_parked_consumer_is_woken_by_a_push",
        Duration::from_secs(20),
    );
    let queue = Queue::<u64>::anonymous(16, SCHEMA).unwrap();
    let mut tx = queue.producer().unwrap();
    let mut rx = queue.consumer().unwrap();
    let waiter = thread::spawn(move || {
        let started = Instant::now();
        let v = rx.pop_timeout(Duration::from_secs(10)).unwrap();
        (v, started.elapsed())
    });
    // Long enough for the consumer to pass its spin and park.
    thread::sleep(Duration::from_millis(200));
    tx.try_push(&42).unwrap();
    let (v, waited) = waiter.join().unwrap();
    assert_eq!(v, 42);
    // Woken by the push (200 ms in), not at the 10 s timeout.
    assert!(waited < Duration::from_secs(5), "{waited:?}");
}

#[test]
fn producer_leaving_is_reported_after_draining() {
    let queue = Queue::<u64>::anonymous(16, SCHEMA).unwrap();
    let mut tx = queue.producer().unwrap();
    let mut rx = queue.consumer().unwrap();
    tx.try_push(&1).unwrap();
    tx.try_push(&2).unwrap();
    drop(tx);
    assert_eq!(rx.pop_timeout(Duration::from_secs(1)).unwrap(), 1);
    assert_eq!(rx.pop_timeout(Duration::from_secs(1)).unwrap(), 2);
    assert!(matches!(
        rx.pop_timeout(Duration::from_secs(1)),
        Err(Error::PeerLeft {
            role: Role::Producer,
            ..
        })
    ));
    // A new producer takes the role back and the queue goes on.
    let mut tx = queue.producer().unwrap();
    tx.try_push(&3).unwrap();
    assert_eq!(rx.pop_timeout(Duration::from_secs(1)).unwrap(), 3);
}

#[test]
fn a_second_producer_is_refused_naming_the_holder() {
    let queue = Queue::<u64>::anonymous(16, SCHEMA).unwrap();
    let _tx = queue.producer().unwrap();
    match queue.producer() {
        Err(Error::RoleTaken {
            role: Role::Producer,
            pid,
            queue,
        }) => {
            assert_eq!(pid, std::process::id());
            assert!(!queue.is_empty());
        }
        other => panic!("expected RoleTaken, got {other:?}"),
    }
    let _rx = queue.consumer().unwrap();
    let err = queue.consumer().unwrap_err();
    assert!(
        err.to_string()
            .contains(&format!("held by live process {}", std::process::id())),
        "{err}"
    );
}

#[test]
fn join_checks_name_both_values() {
    let name = unique_name("queue-join-checks");
    let queue = Queue::<Msg>::create(&name, 16, SCHEMA).unwrap();
    let err = Producer::<u64>::open(&name, SCHEMA, Duration::from_secs(1)).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Mismatch {
                field: "element size",
                found: 64,
                expected: 8,
                ..
            }
        ),
        "{err:?}"
    );
    let err = Producer::<Msg>::open(&name, SCHEMA + 1, Duration::from_secs(1)).unwrap_err();
    assert!(
        matches!(err, Error::Mismatch { field: "schema id", found, expected, .. } if found == SCHEMA && expected == SCHEMA + 1),
        "{err:?}"
    );
    assert!(err.to_string().contains(&name), "{err}");
    // The right type and schema join.
    Producer::<Msg>::open(&name, SCHEMA, Duration::from_secs(1)).unwrap();
    drop(queue);
    assert!(nodeipc_testkit::shm_leftovers("queue-join-checks").is_empty());
}

#[test]
fn a_region_that_is_not_a_queue_is_refused() {
    let region = std::sync::Arc::new(Region::anonymous(4096).unwrap());
    region.seal_grow_shrink().unwrap();
    let err = Producer::<u64>::join(region, SCHEMA).unwrap_err();
    assert!(matches!(err, Error::BadHeader { .. }), "{err:?}");
    assert!(err.to_string().contains("magic"), "{err}");
}

#[test]
fn capacity_beyond_the_region_is_refused() {
    let queue = Queue::<u64>::anonymous(16, SCHEMA).unwrap();
    // The capacity word (offset 20) claims a ring the region cannot hold.
    let cap: &AtomicU32 = queue.region().view(20).unwrap();
    cap.store(1 << 20, Ordering::Relaxed);
    let err = queue.producer().unwrap_err();
    assert!(matches!(err, Error::BadHeader { .. }), "{err:?}");
    assert!(err.to_string().contains("the region has"), "{err}");
    cap.store(12, Ordering::Relaxed);
    assert!(matches!(queue.consumer(), Err(Error::BadHeader { .. })));
}

#[test]
fn an_unsealed_memfd_is_refused() {
    // A memfd its sender could still truncate under our mapping.
    let region = Region::anonymous(nodeipc_queue::SLOTS_OFFSET + 64).unwrap();
    let magic: &AtomicU64 = region.view(0).unwrap();
    magic.store(nodeipc_queue::MAGIC, Ordering::Release);
    let err = Producer::<u64>::join(std::sync::Arc::new(region), SCHEMA).unwrap_err();
    assert!(matches!(err, Error::NotSealed { .. }), "{err:?}");
}

#[test]
fn bad_arguments_are_refused() {
    assert!(matches!(
        Queue::<u64>::anonymous(3, SCHEMA),
        Err(Error::InvalidArgument {
            what: "capacity",
            value: 3,
            ..
        })
    ));
    assert!(matches!(
        Queue::<u64>::anonymous(0, SCHEMA),
        Err(Error::InvalidArgument {
            what: "capacity",
            ..
        })
    ));
    assert!(matches!(
        Queue::<()>::anonymous(4, SCHEMA),
        Err(Error::InvalidArgument {
            what: "element size",
            value: 0,
            ..
        })
    ));
}

#[test]
fn wait_any_returns_the_queue_with_data() {
    let _dog = Watchdog::new(
        "wait_any_returns_the_queue_with_data",
        Duration::from_secs(20),
    );
    let a = Queue::<u64>::anonymous(4, SCHEMA).unwrap();
    let b = Queue::<Msg>::anonymous(4, SCHEMA).unwrap();
    let mut rx_a = a.consumer().unwrap();
    let mut rx_b = b.consumer().unwrap();
    let mut tx_b = b.producer().unwrap();
    let _tx_a = a.producer().unwrap();
    assert!(matches!(
        wait_any(&mut [&mut rx_a, &mut rx_b], Duration::from_millis(80)),
        Err(Error::TimedOut { .. })
    ));
    let pusher = thread::spawn(move || {
        thread::sleep(Duration::from_millis(150));
        tx_b.try_push(&msg(7)).unwrap();
        tx_b
    });
    let started = Instant::now();
    let i = wait_any(&mut [&mut rx_a, &mut rx_b], Duration::from_secs(10)).unwrap();
    assert_eq!(i, 1);
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(rx_b.try_pop().unwrap(), Some(msg(7)));
    let _tx_b = pusher.join().unwrap();
    assert!(matches!(
        wait_any(&mut [], Duration::from_millis(1)),
        Err(Error::InvalidArgument { .. })
    ));
}

#[test]
fn huge_pages_fall_back_to_normal_ones_and_say_so() {
    use nodeipc_queue::Pages;
    let queue = Queue::<u64>::anonymous_pages(64, SCHEMA, Pages::HugeOrNormal).unwrap();
    let (mut tx, mut rx) = (queue.producer().unwrap(), queue.consumer().unwrap());
    assert!(tx.try_push(&5).unwrap());
    assert_eq!(rx.try_pop().unwrap(), Some(5));
    if queue.huge_pages() {
        // The system had huge pages to reserve (it/huge_pages tests that).
        return;
    }
    // None reserved (as on this project's machines): the fallback was
    // taken, and asking for huge pages alone says why not.
    let err = Queue::<u64>::anonymous_pages(64, SCHEMA, Pages::Huge).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("huge pages unavailable") && text.contains("nr_hugepages"),
        "{text}"
    );
    assert!(!Queue::<u64>::anonymous(64, SCHEMA).unwrap().huge_pages());
}
