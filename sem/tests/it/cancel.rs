//! The thread's cancellation hook ends a semaphore wait (both kinds) with
//! `Interrupted`, within a slice; without a hook, a sliced named wait still
//! waits its whole timeout, and a post still ends it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use nodeipc_sem::{Error, NamedSemaphore, Semaphore, ShmSemaphore};
use nodeipc_shm::Region;
use nodeipc_shm::wait::with_cancel_hook;
use nodeipc_testkit::{Watchdog, unique_name};

static STOP_NAMED: AtomicBool = AtomicBool::new(false);

#[test]
fn a_named_wait_ends_interrupted_soon_after_the_hook_says_stop() {
    let _dog = Watchdog::new("named cancel", Duration::from_secs(30));
    let sem = NamedSemaphore::create(&unique_name("sem-cancel"), 0).unwrap();
    let stopper = thread::spawn(|| {
        thread::sleep(Duration::from_millis(200));
        STOP_NAMED.store(true, Ordering::SeqCst);
        Instant::now()
    });
    let waited = with_cancel_hook(|| STOP_NAMED.load(Ordering::SeqCst), || sem.wait());
    let ended = Instant::now();
    let said = stopper.join().unwrap();
    match waited {
        Err(Error::Interrupted { name, waited }) => {
            assert_eq!(name, sem.name());
            assert!(waited >= Duration::from_millis(190), "{waited:?}");
        }
        other => panic!("expected Interrupted, got {other:?}"),
    }
    // Within a slice, and what a loaded machine adds before we run again.
    let late = ended.saturating_duration_since(said);
    assert!(late < Duration::from_millis(1200), "noticed {late:?} late");
    // The token count is untouched, and the semaphore still works.
    assert_eq!(sem.value().unwrap(), 0);
    sem.post().unwrap();
    sem.wait_timeout(Duration::from_secs(1)).unwrap();
}

#[test]
fn a_shm_semaphore_wait_ends_interrupted() {
    let _dog = Watchdog::new("shm cancel", Duration::from_secs(30));
    let region = Region::anonymous(64).unwrap();
    let sem: &ShmSemaphore = region.view(0).unwrap();
    sem.init(0);
    let start = Instant::now();
    let waited = with_cancel_hook(|| true, || sem.wait_timeout(Duration::from_secs(20)));
    assert!(
        matches!(waited, Err(Error::Interrupted { .. })),
        "{waited:?}"
    );
    assert!(start.elapsed() < Duration::from_secs(10));
}

#[test]
fn a_sliced_named_wait_keeps_its_deadline_and_sees_a_late_post() {
    let _dog = Watchdog::new("named slices", Duration::from_secs(30));
    let sem = NamedSemaphore::create(&unique_name("sem-slices"), 0).unwrap();
    // With a hook that never says stop: the full 300 ms, over six slices.
    let start = Instant::now();
    let waited = with_cancel_hook(|| false, || sem.wait_timeout(Duration::from_millis(300)));
    assert!(matches!(waited, Err(Error::Timeout { .. })), "{waited:?}");
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(5),
        "{took:?}"
    );
    // A post after several slices ends the wait.
    thread::scope(|s| {
        s.spawn(|| {
            thread::sleep(Duration::from_millis(180));
            sem.post().unwrap();
        });
        sem.wait_timeout(Duration::from_secs(10)).unwrap();
    });
}
