//! The cancellation hook: a wait asks it between park slices and between
//! the pacer's pauses, ends with `Interrupted` when it says so, and the
//! hook is gone once the call that set it returns.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use nodeipc_shm::wait::{
    Deadline, Pacer, SLICE, Spin, WaitError, cancelled, wait_while, with_cancel_hook,
};
use nodeipc_shm::{OpenOptions, Region};
use nodeipc_testkit::{Watchdog, unique_name};

static STOP_PARKED: AtomicBool = AtomicBool::new(false);

#[test]
fn a_parked_wait_ends_within_a_slice_of_the_hook_saying_stop() {
    let _dog = Watchdog::new("cancel parked", Duration::from_secs(20));
    let (word, parked) = (AtomicU32::new(0), AtomicU32::new(0));
    let setter = thread::spawn(|| {
        thread::sleep(Duration::from_millis(200));
        STOP_PARKED.store(true, Ordering::SeqCst);
        Instant::now()
    });
    let mut deadline = Deadline::after(Some(Duration::from_secs(10)));
    let waited = with_cancel_hook(
        || STOP_PARKED.load(Ordering::SeqCst),
        || {
            wait_while(&word, &parked, 0, &mut deadline, Spin::DEFAULT, || {
                Ok::<(), ()>(())
            })
        },
    );
    let ended = Instant::now();
    let set_at = setter.join().unwrap();
    match waited {
        Err(WaitError::Interrupted(waited)) => {
            assert!(waited >= Duration::from_millis(190), "{waited:?}");
            assert!(waited < Duration::from_secs(5), "{waited:?}");
        }
        other => panic!("expected Interrupted, got {other:?}"),
    }
    // Asked at least every slice: noticed within one, and whatever a loaded
    // machine adds before this thread runs again (the exact slicing is
    // wait.rs's `the_check_runs_every_slice_and_can_stop_the_wait`).
    let late = ended.saturating_duration_since(set_at);
    assert!(
        late <= SLICE + Duration::from_secs(1),
        "noticed {late:?} late"
    );
    assert_eq!(
        parked.load(Ordering::SeqCst),
        0,
        "the sleeper count is back"
    );
}

#[test]
fn the_hook_is_this_threads_and_only_for_the_call() {
    assert!(!cancelled(), "no hook set: never cancelled");
    with_cancel_hook(
        || true,
        || {
            assert!(cancelled());
            // Another thread has no hook.
            assert!(!thread::spawn(cancelled).join().unwrap());
            // Nested: the inner hook wins, the outer one comes back.
            with_cancel_hook(|| false, || assert!(!cancelled()));
            assert!(cancelled());
        },
    );
    assert!(!cancelled(), "the hook is gone after the call");
    let unwound = std::panic::catch_unwind(|| with_cancel_hook(|| true, || panic!("boom")));
    assert!(unwound.is_err());
    assert!(!cancelled(), "the hook is gone after a panic too");
}

#[test]
fn a_wait_that_sees_its_change_is_not_interrupted() {
    let (word, parked) = (AtomicU32::new(1), AtomicU32::new(0));
    let mut deadline = Deadline::after(Some(Duration::from_secs(1)));
    let waited = with_cancel_hook(
        || true,
        || {
            wait_while(&word, &parked, 0, &mut deadline, Spin::DEFAULT, || {
                Ok::<(), ()>(())
            })
        },
    );
    assert!(waited.is_ok(), "{waited:?}");
}

#[test]
fn the_pacer_asks_the_hook_and_a_region_open_ends_interrupted() {
    let _dog = Watchdog::new("cancel pacer", Duration::from_secs(20));
    let mut pacer = Pacer::new(
        Duration::from_micros(20),
        Duration::from_millis(2),
        Some(Duration::from_secs(10)),
    );
    let start = Instant::now();
    let stopped = with_cancel_hook(
        || true,
        || loop {
            if let Err(stop) = pacer.pause_interruptible() {
                break stop;
            }
        },
    );
    assert!(matches!(stopped, WaitError::Interrupted(_)), "{stopped:?}");
    // At the first pause, not at the 10 s limit.
    assert!(start.elapsed() < Duration::from_secs(5));

    let name = unique_name("cancel-open");
    let start = Instant::now();
    let opened = with_cancel_hook(
        || true,
        || Region::open(&name, OpenOptions::wait(64, Duration::from_secs(10))),
    );
    match opened {
        Err(nodeipc_shm::Error::Interrupted { name: n, what, .. }) => {
            assert_eq!(n, name);
            assert_eq!(what, "appear");
        }
        other => panic!("expected Interrupted, got {other:?}"),
    }
    assert!(start.elapsed() < Duration::from_secs(5));
}
