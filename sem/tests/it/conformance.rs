//! One contract, every implementation: the same tests run against
//! `NamedSemaphore` and `ShmSemaphore` (threads here; processes in
//! `integration-tests`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use nodeipc_sem::{NamedSemaphore, Semaphore, ShmSemaphore};
use nodeipc_shm::Region;
use nodeipc_testkit::{Watchdog, unique_name};

/// Owns whatever keeps a semaphore alive and hands out `&dyn Semaphore`.
trait Fixture: Send + Sync + 'static {
    fn new(initial: u32) -> Self;
    fn sem(&self) -> &(dyn Semaphore + Sync);
}

struct Named(NamedSemaphore);
impl Fixture for Named {
    fn new(initial: u32) -> Self {
        Named(NamedSemaphore::create(&unique_name("conf"), initial).unwrap())
    }
    fn sem(&self) -> &(dyn Semaphore + Sync) {
        &self.0
    }
}

struct InRegion(Region);
impl Fixture for InRegion {
    fn new(initial: u32) -> Self {
        let region = Region::anonymous(64).unwrap();
        region.view::<ShmSemaphore>(0).unwrap().init(initial);
        InRegion(region)
    }
    fn sem(&self) -> &(dyn Semaphore + Sync) {
        self.0.view::<ShmSemaphore>(0).unwrap()
    }
}

fn initial_count_is_what_was_asked<F: Fixture>() {
    let f = F::new(3);
    assert_eq!(f.sem().value().unwrap(), 3);
    for _ in 0..3 {
        assert!(f.sem().try_wait().unwrap());
    }
    assert!(!f.sem().try_wait().unwrap());
    assert_eq!(f.sem().value().unwrap(), 0);
}

fn post_then_wait_counts<F: Fixture>() {
    let f = F::new(0);
    for _ in 0..5 {
        f.sem().post().unwrap();
    }
    assert_eq!(f.sem().value().unwrap(), 5);
    for _ in 0..5 {
        f.sem().wait_timeout(Duration::from_millis(10)).unwrap();
    }
    f.sem().post().unwrap();
    f.sem().wait().unwrap();
    assert_eq!(f.sem().value().unwrap(), 0);
}

fn wait_timeout_returns_within_its_deadline<F: Fixture>() {
    let f = F::new(0);
    for limit in [
        Duration::ZERO,
        Duration::from_millis(1),
        Duration::from_millis(80),
    ] {
        let start = Instant::now();
        let err = f.sem().wait_timeout(limit).unwrap_err();
        let waited = start.elapsed();
        assert!(err.is_timeout(), "{err}");
        assert!(waited >= limit, "returned early: {waited:?} < {limit:?}");
        // Not a hang: how close to the limit a wait ends is a benchmark's
        // question, and a loaded machine adds its own delay.
        assert!(
            waited < limit + Duration::from_secs(3),
            "overslept: {waited:?} for {limit:?}"
        );
    }
}

fn a_parked_waiter_is_woken_by_a_post<F: Fixture>() {
    let _dog = Watchdog::new(
        "a_parked_waiter_is_woken_by_a_post",
        Duration::from_secs(20),
    );
    let f = Arc::new(F::new(0));
    let waiter = {
        let f = Arc::clone(&f);
        thread::spawn(move || {
            let start = Instant::now();
            f.sem().wait_timeout(Duration::from_secs(10)).unwrap();
            start.elapsed()
        })
    };
    thread::sleep(Duration::from_millis(100)); // long past the spin: it is parked
    f.sem().post().unwrap();
    let waited = waiter.join().unwrap();
    assert!(
        waited < Duration::from_secs(5),
        "waiter slept through the post: {waited:?}"
    );
}

fn regression_a_timeout_no_clock_can_hold_waits_without_limit<F: Fixture>() {
    // Before the fix, `ShmSemaphore` panicked adding the timeout to an `Instant`.
    let _dog = Watchdog::new(
        "regression_a_timeout_no_clock_can_hold_waits_without_limit",
        Duration::from_secs(20),
    );
    let f = Arc::new(F::new(0));
    let waiter = {
        let f = Arc::clone(&f);
        thread::spawn(move || {
            f.sem().wait_timeout(Duration::MAX)?;
            f.sem().wait_timeout(Duration::from_millis(u64::MAX))
        })
    };
    thread::sleep(Duration::from_millis(100)); // long past the spin: it is parked
    f.sem().post().unwrap();
    f.sem().post().unwrap();
    waiter.join().unwrap().unwrap();
    assert_eq!(f.sem().value().unwrap(), 0);
}

fn no_post_is_lost_between_many_threads<F: Fixture>() {
    let _dog = Watchdog::new(
        "no_post_is_lost_between_many_threads",
        Duration::from_secs(60),
    );
    const THREADS: usize = 4;
    const ROUNDS: usize = 2_000;
    let f = Arc::new(F::new(0));
    let taken = Arc::new(AtomicUsize::new(0));
    let waiters: Vec<_> = (0..THREADS)
        .map(|_| {
            let (f, taken) = (Arc::clone(&f), Arc::clone(&taken));
            thread::spawn(move || {
                for _ in 0..ROUNDS {
                    f.sem().wait_timeout(Duration::from_secs(20)).unwrap();
                    taken.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for _ in 0..THREADS * ROUNDS {
        f.sem().post().unwrap();
    }
    for w in waiters {
        w.join().unwrap();
    }
    assert_eq!(taken.load(Ordering::Relaxed), THREADS * ROUNDS);
    assert_eq!(f.sem().value().unwrap(), 0);
}

fn ping_pong_alternates_strictly<F: Fixture>() {
    let _dog = Watchdog::new("ping_pong_alternates_strictly", Duration::from_secs(60));
    let ping = Arc::new(F::new(0));
    let pong = Arc::new(F::new(0));
    let turn = Arc::new(AtomicUsize::new(0));
    let peer = {
        let (ping, pong, turn) = (Arc::clone(&ping), Arc::clone(&pong), Arc::clone(&turn));
        thread::spawn(move || {
            for i in 0..5_000 {
                ping.sem().wait_timeout(Duration::from_secs(20)).unwrap();
                assert_eq!(turn.load(Ordering::Acquire), 2 * i + 1);
                turn.store(2 * i + 2, Ordering::Release);
                pong.sem().post().unwrap();
            }
        })
    };
    for i in 0..5_000 {
        assert_eq!(turn.load(Ordering::Acquire), 2 * i);
        turn.store(2 * i + 1, Ordering::Release);
        ping.sem().post().unwrap();
        pong.sem().wait_timeout(Duration::from_secs(20)).unwrap();
    }
    peer.join().unwrap();
    assert_eq!(turn.load(Ordering::Acquire), 10_000);
}

macro_rules! conformance {
    ($module:ident, $fixture:ty) => {
        mod $module {
            use super::*;
            #[test]
            fn initial_count_is_what_was_asked() {
                super::initial_count_is_what_was_asked::<$fixture>();
            }
            #[test]
            fn post_then_wait_counts() {
                super::post_then_wait_counts::<$fixture>();
            }
            #[test]
            fn wait_timeout_returns_within_its_deadline() {
                super::wait_timeout_returns_within_its_deadline::<$fixture>();
            }
            #[test]
            fn a_parked_waiter_is_woken_by_a_post() {
                super::a_parked_waiter_is_woken_by_a_post::<$fixture>();
            }
            #[test]
            fn regression_a_timeout_no_clock_can_hold_waits_without_limit() {
                super::regression_a_timeout_no_clock_can_hold_waits_without_limit::<$fixture>();
            }
            #[test]
            fn no_post_is_lost_between_many_threads() {
                super::no_post_is_lost_between_many_threads::<$fixture>();
            }
            #[test]
            fn ping_pong_alternates_strictly() {
                super::ping_pong_alternates_strictly::<$fixture>();
            }
        }
    };
}

conformance!(named, Named);
conformance!(in_region, InRegion);
