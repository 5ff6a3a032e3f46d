//! The one wait primitive: a change wakes a parked waiter, a deadline ends
//! the wait, the caller's check runs between slices and can stop it.

use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use nodeipc_shm::wait::{Deadline, Pacer, SLICE, Spin, WaitError, wait_while, wake_if_parked};
use nodeipc_testkit::Watchdog;

#[test]
fn a_change_wakes_a_parked_waiter_and_wakes_cost_nothing_without_sleepers() {
    let _dog = Watchdog::new("wait wake", Duration::from_secs(20));
    let word = AtomicU32::new(0);
    let parked = AtomicU32::new(0);
    assert_eq!(
        wake_if_parked(&word, &parked, 1).unwrap(),
        0,
        "nobody parked: no wake-up"
    );
    thread::scope(|s| {
        let waiter = s.spawn(|| {
            let mut deadline = Deadline::after(Some(Duration::from_secs(10)));
            wait_while(&word, &parked, 0, &mut deadline, Spin::DEFAULT, || {
                Ok::<(), ()>(())
            })
        });
        // Let it get past polling and yielding into the futex.
        while parked.load(Ordering::SeqCst) == 0 {
            thread::sleep(Duration::from_millis(1));
        }
        word.store(1, Ordering::SeqCst);
        assert_eq!(wake_if_parked(&word, &parked, 1).unwrap(), 1);
        waiter.join().unwrap().expect("woken by the change");
    });
    assert_eq!(
        parked.load(Ordering::SeqCst),
        0,
        "the sleeper took its count back"
    );
}

#[test]
fn a_deadline_ends_the_wait_and_a_zero_one_ends_it_before_parking() {
    let word = AtomicU32::new(7);
    let parked = AtomicU32::new(0);
    let mut deadline = Deadline::after(Some(Duration::from_millis(120)));
    let start = Instant::now();
    match wait_while(&word, &parked, 7, &mut deadline, Spin::DEFAULT, || {
        Ok::<(), ()>(())
    }) {
        Err(WaitError::TimedOut(waited)) => assert!(waited >= Duration::from_millis(120)),
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(start.elapsed() < Duration::from_secs(5));
    // Short and zero limits, in both yield phases (short spins, then
    // yields; yields at once): the clock, read only every few turns of a
    // long wait, is read on every turn of these.
    for spin in [Spin::DEFAULT, Spin::OVERSUBSCRIBED] {
        let mut zero = Deadline::after(Some(Duration::ZERO));
        let waited = wait_while(&word, &parked, 7, &mut zero, spin, || {
            panic!("a zero deadline ends the wait before any slice")
        });
        assert!(matches!(waited, Err(WaitError::<()>::TimedOut(_))));
        let mut short = Deadline::after(Some(Duration::from_micros(30)));
        match wait_while(&word, &parked, 7, &mut short, spin, || -> Result<(), ()> {
            panic!("a 30 µs deadline ends the wait before any slice")
        }) {
            Err(WaitError::TimedOut(waited)) => assert!(waited >= Duration::from_micros(30)),
            other => panic!("expected a timeout, got {other:?}"),
        }
        let mut long = Deadline::after(Some(Duration::from_millis(3)));
        match wait_while(&word, &parked, 7, &mut long, spin, || Ok::<(), ()>(())) {
            Err(WaitError::TimedOut(waited)) => assert!(waited >= Duration::from_millis(3)),
            other => panic!("expected a timeout, got {other:?}"),
        }
    }
    // A limit too large for the clock is no limit, not a panic.
    assert!(
        Deadline::after(Some(Duration::MAX))
            .left()
            .unwrap()
            .is_some()
    );
}

#[test]
fn the_check_runs_every_slice_and_can_stop_the_wait() {
    let _dog = Watchdog::new("wait check", Duration::from_secs(20));
    let word = AtomicU32::new(0);
    let parked = AtomicU32::new(0);
    let mut calls = 0;
    let mut deadline = Deadline::after(None);
    let start = Instant::now();
    let waited = wait_while(&word, &parked, 0, &mut deadline, Spin::DEFAULT, || {
        calls += 1;
        if calls == 4 { Err("cancelled") } else { Ok(()) }
    });
    assert!(
        matches!(waited, Err(WaitError::Stopped("cancelled"))),
        "{waited:?}"
    );
    // Three full slices slept between the four checks, no more.
    let elapsed = start.elapsed();
    assert!(
        elapsed >= SLICE * 3 - Duration::from_millis(5),
        "{elapsed:?}"
    );
    assert!(elapsed < SLICE * 3 + Duration::from_secs(2), "{elapsed:?}");
    assert_eq!(parked.load(Ordering::SeqCst), 0);
}

#[test]
fn a_pacer_stops_at_its_limit_and_never_sleeps_past_it() {
    let mut pacer = Pacer::new(
        Duration::from_millis(1),
        Duration::from_secs(10),
        Some(Duration::from_millis(30)),
    );
    let start = Instant::now();
    let waited = loop {
        if let Err(waited) = pacer.pause() {
            break waited;
        }
    };
    assert!(waited >= Duration::from_millis(30));
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "a 10 s ceiling was cut to the limit"
    );
}

/// A timeout past what a `timespec` holds becomes the largest one, never a
/// panic or a wrap: `Duration::from_secs(u64::MAX)` kept no nanoseconds
/// (a shorter wait than the largest), and copies elsewhere cast the seconds.
/// The kernel takes the largest as a wait a wake-up still ends.
#[test]
fn regression_timeouts_past_a_timespec_saturate_to_the_largest() {
    use nodeipc_shm::wait::{Parked, TIMESPEC_MAX, park_for, timespec};
    let _dog = Watchdog::new("timespec_saturates", Duration::from_secs(30));
    assert_eq!(TIMESPEC_MAX.tv_sec, i64::MAX);
    assert_eq!(TIMESPEC_MAX.tv_nsec, 999_999_999);
    for huge in [
        Duration::MAX,
        Duration::from_secs(u64::MAX),
        Duration::from_secs(i64::MAX as u64 + 1),
    ] {
        assert_eq!(timespec(huge), TIMESPEC_MAX, "{huge:?}");
    }
    let exact = timespec(Duration::new(i64::MAX as u64, 5));
    assert_eq!((exact.tv_sec, exact.tv_nsec), (i64::MAX, 5));
    let small = timespec(Duration::from_millis(1500));
    assert_eq!((small.tv_sec, small.tv_nsec), (1, 500_000_000));

    let word = AtomicU32::new(0);
    thread::scope(|s| {
        s.spawn(|| {
            thread::sleep(Duration::from_millis(20));
            word.store(1, Ordering::SeqCst);
            nodeipc_shm::wait::unpark(&word, 1).unwrap();
        });
        while word.load(Ordering::SeqCst) == 0 {
            assert_eq!(park_for(&word, 0, Some(Duration::MAX)), Ok(Parked::Woken));
        }
    });
}

/// `unpark(word, u32::MAX)` wakes every sleeper. The kernel reads the count
/// as an `int`: passed through as it is, `u32::MAX` is -1 and `FUTEX_WAKE`
/// stopped after the first waiter, leaving the others asleep until their
/// slice ended (50 ms a message for vLLM's MessageQueue with 4 readers).
#[test]
fn regression_a_wake_of_all_wakes_every_sleeper_not_one() {
    let _dog = Watchdog::new("wake all", Duration::from_secs(60));
    const SLEEPERS: usize = 3;
    let word = AtomicU32::new(0);
    let tids = std::sync::Mutex::new(Vec::new());
    thread::scope(|s| {
        for _ in 0..SLEEPERS {
            s.spawn(|| {
                tids.lock()
                    .unwrap()
                    .push(rustix::thread::gettid().as_raw_nonzero());
                while word.load(Ordering::Acquire) == 0 {
                    nodeipc_shm::wait::park_for(&word, 0, None).unwrap();
                }
            });
        }
        // Every sleeper in FUTEX_WAIT (its wait channel says so).
        let asleep = |tid: &std::num::NonZeroI32| {
            std::fs::read_to_string(format!("/proc/self/task/{tid}/wchan"))
                .is_ok_and(|w| w.contains("futex"))
        };
        let start = Instant::now();
        loop {
            let tids = tids.lock().unwrap();
            if tids.len() == SLEEPERS && tids.iter().all(asleep) {
                break;
            }
            drop(tids);
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the sleepers never parked"
            );
            thread::sleep(Duration::from_millis(5));
        }
        word.store(1, Ordering::Release);
        let woken = nodeipc_shm::wait::unpark(&word, u32::MAX).unwrap();
        // Whatever was asserted, nobody is left asleep when the scope joins.
        while nodeipc_shm::wait::unpark(&word, u32::MAX).unwrap() > 0 {}
        assert_eq!(
            woken, SLEEPERS,
            "a wake of all woke {woken} of {SLEEPERS} sleepers"
        );
    });
}
