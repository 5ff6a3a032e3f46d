//! Two real processes per queue: every message checked, a peer killed with
//! SIGKILL noticed within a second after what it published is drained, a
//! role taken back by a restarted peer, a live holder named.

use std::io::{BufRead, BufReader};
use std::thread;
use std::time::{Duration, Instant};

use nodeipc_queue::{Consumer, Error, PeerState, Pod, Producer, Queue, Role, Zeroable};
use nodeipc_testkit::{
    ChildGuard, Watchdog, shm_leftovers, spawn_child, this_test_in_a_child, unique_name,
};

const SCHEMA: u64 = 0x70726f63;
const CHILD: &str = "NODEIPC_QUEUE_CHILD";
const T: Duration = Duration::from_secs(5);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
struct Msg {
    words: [u64; 8],
}

fn msg(seq: u64) -> Msg {
    Msg {
        words: std::array::from_fn(|i| {
            seq.wrapping_mul(0x9e37_79b9_7f4a_7c15)
                .rotate_left(i as u32)
                ^ i as u64
        }),
    }
}

/// What a child does, told by `NODEIPC_QUEUE_CHILD="<action> <name> <from> <count>"`.
/// Run by the parent tests only; alone, it does nothing.
#[test]
fn child_main() {
    let Ok(spec) = std::env::var(CHILD) else {
        return;
    };
    let parts: Vec<&str> = spec.split(' ').collect();
    let (action, name) = (parts[0], parts[1]);
    let from: u64 = parts[2].parse().unwrap();
    let count: u64 = parts[3].parse().unwrap();
    match action {
        "produce" | "produce-then-hang" => {
            let mut tx = Producer::<Msg>::open(name, SCHEMA, T).unwrap();
            for seq in from..from + count {
                tx.push_timeout(&msg(seq), T).unwrap();
            }
            println!("ready");
            if action == "produce-then-hang" {
                thread::sleep(Duration::from_secs(60));
            }
        }
        "consume-parked" => {
            let mut rx = Consumer::<Msg>::open(name, SCHEMA, T).unwrap();
            println!("ready");
            // Nothing comes: it parks on the tail until it is killed.
            let _ = rx.pop_timeout(Duration::from_secs(60));
        }
        "consume-then-hang" => {
            let mut rx = Consumer::<Msg>::open(name, SCHEMA, T).unwrap();
            for seq in from..from + count {
                assert_eq!(rx.pop_timeout(T).unwrap(), msg(seq));
            }
            println!("ready");
            thread::sleep(Duration::from_secs(60));
        }
        other => panic!("unknown child action {other}"),
    }
}

fn child(action: &str, name: &str, from: u64, count: u64) -> ChildGuard {
    let mut command =
        this_test_in_a_child(&nodeipc_testkit::test_path(module_path!(), "child_main"));
    command.env(CHILD, format!("{action} {name} {from} {count}"));
    spawn_child(&mut command)
}

/// Waits for the child's "ready" line.
fn ready(child: &mut ChildGuard) {
    let stdout = child.child().stdout.take().expect("piped stdout");
    let mut line = String::new();
    for l in BufReader::new(stdout).lines() {
        line = l.expect("child stdout");
        if line.ends_with("ready") {
            return;
        }
    }
    panic!("child ended without saying ready (last line {line:?})");
}

#[test]
fn a_stream_between_two_processes_arrives_whole_and_in_order() {
    // Seconds by default; the long CI runs minutes of it.
    let long = std::env::var("NODEIPC_CI_LONG").is_ok_and(|v| v == "1");
    let n: u64 = if long { 200_000_000 } else { 200_000 };
    let limit = Duration::from_secs(if long { 1800 } else { 60 });
    let _dog = Watchdog::new(
        "a_stream_between_two_processes_arrives_whole_and_in_order",
        limit,
    );
    let name = unique_name("queue-stream");
    let queue = Queue::<Msg>::create(&name, 256, SCHEMA).unwrap();
    let mut rx = queue.consumer().unwrap();
    let mut producer = child("produce", &name, 0, n);
    for seq in 0..n {
        assert_eq!(rx.pop_timeout(T).unwrap(), msg(seq), "message {seq}");
    }
    assert!(producer.wait_timeout(T).success());
    assert!(matches!(
        rx.pop_timeout(T),
        Err(Error::PeerLeft {
            role: Role::Producer,
            ..
        })
    ));
    drop((rx, queue));
    assert!(shm_leftovers("queue-stream").is_empty());
}

#[test]
fn a_killed_producer_is_reported_within_a_second_after_its_messages() {
    let _dog = Watchdog::new(
        "a_killed_producer_is_reported_within_a_second_after_its_messages",
        Duration::from_secs(60),
    );
    let name = unique_name("queue-killed-producer");
    let queue = Queue::<Msg>::create(&name, 64, SCHEMA).unwrap();
    let mut rx = queue.consumer().unwrap();
    let mut producer = child("produce-then-hang", &name, 0, 50);
    ready(&mut producer);
    let pid = producer.id();
    assert_eq!(rx.peer(), PeerState::Alive(pid));
    // Half now, half after the death: what it published is still delivered.
    for seq in 0..25 {
        assert_eq!(rx.pop_timeout(T).unwrap(), msg(seq));
    }
    let killer = thread::spawn(move || {
        thread::sleep(Duration::from_millis(200));
        producer.kill();
        Instant::now()
    });
    let killed_at = killer.join().unwrap();
    for seq in 25..50 {
        assert_eq!(rx.pop_timeout(T).unwrap(), msg(seq));
    }
    match rx.pop_timeout(T) {
        Err(Error::PeerDied {
            role: Role::Producer,
            pid: dead,
            ..
        }) => assert_eq!(dead, pid),
        other => panic!("expected PeerDied, got {other:?}"),
    }
    let noticed = killed_at.elapsed();
    assert!(
        noticed < Duration::from_secs(1),
        "death noticed after {noticed:?}"
    );
    assert!(!rx.peer_alive());
    eprintln!("killed producer noticed {noticed:?} after SIGKILL");
}

#[test]
fn a_parked_consumer_learns_of_a_killed_producer_within_a_second() {
    let _dog = Watchdog::new(
        "a_parked_consumer_learns_of_a_killed_producer_within_a_second",
        Duration::from_secs(60),
    );
    let name = unique_name("queue-parked-consumer");
    let queue = Queue::<Msg>::create(&name, 64, SCHEMA).unwrap();
    let mut rx = queue.consumer().unwrap();
    let mut producer = child("produce-then-hang", &name, 0, 3);
    ready(&mut producer);
    for seq in 0..3 {
        assert_eq!(rx.pop_timeout(T).unwrap(), msg(seq));
    }
    let killer = thread::spawn(move || {
        thread::sleep(Duration::from_millis(300)); // the consumer is parked by now
        producer.kill();
        Instant::now()
    });
    let err = rx.pop_timeout(Duration::from_secs(10)).unwrap_err();
    let killed_at = killer.join().unwrap();
    assert!(matches!(err, Error::PeerDied { .. }), "{err:?}");
    let noticed = killed_at.elapsed();
    assert!(
        noticed < Duration::from_secs(1),
        "death noticed after {noticed:?}"
    );
    eprintln!("parked consumer noticed the death {noticed:?} after SIGKILL");
}

#[test]
fn a_restarted_producer_takes_the_role_back_with_the_contents_intact() {
    let _dog = Watchdog::new(
        "a_restarted_producer_takes_the_role_back_with_the_contents_intact",
        Duration::from_secs(60),
    );
    let name = unique_name("queue-takeover");
    let queue = Queue::<Msg>::create(&name, 64, SCHEMA).unwrap();
    let mut rx = queue.consumer().unwrap();
    let mut first = child("produce-then-hang", &name, 0, 40);
    ready(&mut first);
    let first_pid = first.id();
    // A live producer holds the role: a second is refused, naming its pid.
    match Producer::<Msg>::open(&name, SCHEMA, T) {
        Err(
            e @ Error::RoleTaken {
                role: Role::Producer,
                pid,
                ..
            },
        ) => {
            assert_eq!(pid, first_pid);
            assert!(e.to_string().contains(&name), "{e}");
        }
        other => panic!("expected RoleTaken, got {other:?}"),
    }
    first.kill();
    // 40 messages wait in the ring; a new producer resumes after them.
    let mut second = child("produce", &name, 40, 20);
    assert!(second.wait_timeout(T).success());
    assert_ne!(second.id(), first_pid);
    for seq in 0..60 {
        assert_eq!(rx.pop_timeout(T).unwrap(), msg(seq), "message {seq}");
    }
    // The second producer left cleanly: that, not the first one's death, is reported.
    assert!(matches!(rx.pop_timeout(T), Err(Error::PeerLeft { .. })));
}

#[test]
fn a_restarted_consumer_resumes_where_the_dead_one_stopped() {
    let _dog = Watchdog::new(
        "a_restarted_consumer_resumes_where_the_dead_one_stopped",
        Duration::from_secs(60),
    );
    let name = unique_name("queue-consumer-takeover");
    let queue = Queue::<Msg>::create(&name, 64, SCHEMA).unwrap();
    let mut tx = queue.producer().unwrap();
    for seq in 0..30 {
        tx.try_push(&msg(seq)).unwrap();
    }
    let mut consumer = child("consume-then-hang", &name, 0, 10);
    ready(&mut consumer);
    let pid = consumer.id();
    // A live consumer holds the role: a second is refused, naming it.
    match Consumer::<Msg>::open(&name, SCHEMA, T) {
        Err(Error::RoleTaken {
            role: Role::Consumer,
            pid: holder,
            ..
        }) => assert_eq!(holder, pid),
        other => panic!("expected RoleTaken, got {other:?}"),
    }
    consumer.kill();
    let mut rx = Consumer::<Msg>::open(&name, SCHEMA, T).unwrap();
    for seq in 10..30 {
        assert_eq!(rx.try_pop().unwrap(), Some(msg(seq)));
    }
    assert_eq!(rx.try_pop().unwrap(), None);
}

#[test]
fn a_producer_blocked_on_a_killed_consumer_is_told_within_a_second() {
    let _dog = Watchdog::new(
        "a_producer_blocked_on_a_killed_consumer_is_told_within_a_second",
        Duration::from_secs(60),
    );
    let name = unique_name("queue-killed-consumer");
    let queue = Queue::<Msg>::create(&name, 8, SCHEMA).unwrap();
    let mut tx = queue.producer().unwrap();
    let mut consumer = child("consume-then-hang", &name, 0, 0);
    ready(&mut consumer);
    let pid = consumer.id();
    for seq in 0..8 {
        assert!(tx.try_push(&msg(seq)).unwrap());
    }
    let killer = thread::spawn(move || {
        thread::sleep(Duration::from_millis(300));
        consumer.kill();
        Instant::now()
    });
    let err = tx
        .push_timeout(&msg(8), Duration::from_secs(10))
        .unwrap_err();
    let killed_at = killer.join().unwrap();
    match err {
        Error::PeerDied {
            role: Role::Consumer,
            pid: dead,
            ..
        } => assert_eq!(dead, pid),
        other => panic!("expected PeerDied, got {other:?}"),
    }
    assert!(killed_at.elapsed() < Duration::from_secs(1));
}

/// A consumer killed while parked leaves its announcement in the parked
/// count (offset 512); the consumer that takes the role over resets it, so
/// the producer's pushes go back to waking nobody.
#[test]
fn a_takeover_resets_the_dead_holders_parked_count() {
    let _dog = Watchdog::new(
        "a_takeover_resets_the_dead_holders_parked_count",
        Duration::from_secs(60),
    );
    let name = unique_name("queue-parked-takeover");
    let queue = Queue::<Msg>::create(&name, 64, SCHEMA).unwrap();
    let parked = || {
        let mut word = [0u8; 4];
        queue.region().read_at(512, &mut word).unwrap();
        u32::from_ne_bytes(word)
    };
    let mut doomed = child("consume-parked", &name, 0, 0);
    ready(&mut doomed);
    let deadline = Instant::now() + T;
    while parked() == 0 {
        assert!(Instant::now() < deadline, "the child never parked");
        thread::sleep(Duration::from_millis(5));
    }
    doomed.kill();
    assert_eq!(
        parked(),
        1,
        "a killed waiter cannot withdraw its announcement"
    );
    let mut rx = Consumer::<Msg>::open(&name, SCHEMA, T).unwrap();
    assert_eq!(parked(), 0, "the takeover reset the parked count");
    let mut tx = queue.producer().unwrap();
    tx.try_push(&msg(1)).unwrap();
    assert_eq!(rx.try_pop().unwrap(), Some(msg(1)));
}

#[test]
fn regression_a_killed_peer_not_yet_reaped_is_dead_on_the_first_look_and_its_role_free() {
    let _dog = Watchdog::new(
        "regression_a_killed_peer_not_yet_reaped_is_dead_on_the_first_look_and_its_role_free",
        Duration::from_secs(60),
    );
    let name = unique_name("queue-zombie");
    let queue = Queue::<Msg>::create(&name, 64, SCHEMA).unwrap();
    let mut doomed = child("produce-then-hang", &name, 0, 1);
    ready(&mut doomed);
    let pid = doomed.child().id();
    // SIGKILL without a wait: the child stays a zombie, its pid and start
    // time unchanged, until the guard reaps it at the end.
    doomed.kill_unreaped(T);
    // The first look opens a pidfd: it must say the process has exited
    // (a fresh pidfd was once taken as alive).
    let mut rx = Consumer::<Msg>::open(&name, SCHEMA, T).unwrap();
    assert_eq!(rx.peer(), PeerState::Died(pid));
    assert_eq!(
        rx.try_pop().unwrap(),
        Some(msg(0)),
        "what it published stays"
    );
    // Its role is free before its parent reaps it.
    let mut tx = Producer::<Msg>::open(&name, SCHEMA, T).unwrap();
    tx.try_push(&msg(1)).unwrap();
    assert_eq!(rx.try_pop().unwrap(), Some(msg(1)));
    drop(doomed);
    drop(queue);
    assert!(shm_leftovers(&name).is_empty());
}

/// A consumer killed while the ring has room: pushes fail with `PeerDied`
/// within a slice (50 ms, checked on the coarse clock) instead of going on
/// succeeding into a ring nobody will read (**fixed here**: they succeeded
/// until the ring was full, then reported it full for ever).
#[test]
fn regression_a_push_to_a_killed_consumer_fails_while_there_is_room() {
    let _dog = Watchdog::new("push to a killed consumer", Duration::from_secs(60));
    let name = unique_name("queue-push-dead");
    let queue = Queue::<Msg>::create(&name, 1024, SCHEMA).unwrap();
    let mut tx = queue.producer().unwrap();
    let mut consumer = child("consume-then-hang", &name, 0, 0);
    ready(&mut consumer);
    let pid = consumer.id();
    assert!(tx.try_push(&msg(0)).unwrap(), "alive: pushes succeed");
    consumer.kill();
    let killed = Instant::now();
    let mut pushed = 1u64;
    let err = loop {
        match tx.try_push(&msg(pushed)) {
            Ok(true) => pushed += 1,
            Ok(false) => panic!("the ring filled ({pushed} pushed) before the death was seen"),
            Err(e) => break e,
        }
        // A slow pusher: a message a millisecond, room for a second.
        thread::sleep(Duration::from_millis(1));
    };
    let seen = killed.elapsed();
    match err {
        Error::PeerDied {
            role: Role::Consumer,
            pid: dead,
            ..
        } => assert_eq!(dead, pid),
        other => panic!("expected PeerDied, got {other:?}"),
    }
    assert!(pushed < 1024, "seen with room left");
    // 50 ms on a quiet machine; generous here for a loaded one.
    assert!(seen < Duration::from_millis(500), "seen after {seen:?}");
    println!("a push saw the killed consumer after {seen:?} ({pushed} pushed)");
}
