//! A wait ended by the thread's cancellation hook (Ctrl-C in a binding):
//! an interrupted barrier poisons the group so no peer waits for a rank
//! that is going down; an interrupted join leaves nothing behind.

use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use nodeipc_barrier::{Error, Group, GroupOptions};
use nodeipc_shm::wait::with_cancel_hook;
use nodeipc_testkit::{Watchdog, shm_leftovers, unique_name};

fn opts(name: &str, rank: u32, world: u32) -> GroupOptions {
    GroupOptions::new(name, rank, world).timeout(Duration::from_secs(20))
}

static STOP_BARRIER: AtomicBool = AtomicBool::new(false);

#[test]
fn an_interrupted_barrier_ends_at_once_and_poisons_the_group() {
    let _dog = Watchdog::new("interrupted barrier", Duration::from_secs(60));
    let name = unique_name("bar-interrupt");
    let n = name.clone();
    let peer = thread::spawn(move || {
        let group = Group::join(opts(&n, 1, 2)).expect("join rank 1");
        // Arrive late: rank 0 is interrupted first, and we must not wait.
        thread::sleep(Duration::from_millis(600));
        let start = Instant::now();
        (group.barrier(), start.elapsed())
    });
    let group = Group::join(opts(&name, 0, 2)).expect("join rank 0");
    let stopper = thread::spawn(|| {
        thread::sleep(Duration::from_millis(200));
        STOP_BARRIER.store(true, Ordering::SeqCst);
    });
    let start = Instant::now();
    let ours = with_cancel_hook(|| STOP_BARRIER.load(Ordering::SeqCst), || group.barrier());
    let waited = start.elapsed();
    stopper.join().unwrap();
    match ours {
        Err(Error::Interrupted { rank: 0, op, .. }) => assert_eq!(op, "barrier"),
        other => panic!("expected Interrupted, got {other:?}"),
    }
    // At once, not at the 20 s timeout (room left for a loaded machine).
    assert!(
        waited < Duration::from_secs(10),
        "interrupted after {waited:?}"
    );
    let (theirs, their_wait) = peer.join().unwrap();
    match theirs {
        Err(Error::Poisoned { rank: 0, cause, .. }) => {
            assert!(cause.contains("interrupted"), "{cause}");
        }
        other => panic!("expected Poisoned by rank 0, got {other:?}"),
    }
    assert!(their_wait < Duration::from_secs(10), "{their_wait:?}");
    // Later calls keep failing: the group is unusable.
    assert!(matches!(group.barrier(), Err(Error::Poisoned { .. })));
    assert!(shm_leftovers(&name).is_empty());
}

#[test]
fn an_interrupted_join_leaves_nothing_behind() {
    let _dog = Watchdog::new("interrupted join", Duration::from_secs(60));
    // Rank 0 creates the vault and waits for a rank 1 that never comes.
    let name = unique_name("bar-interrupt-join0");
    let start = Instant::now();
    let joined = with_cancel_hook(|| true, || Group::join(opts(&name, 0, 2)));
    match joined {
        Err(Error::Interrupted { rank: 0, op, .. }) => assert_eq!(op, "join"),
        other => panic!("expected Interrupted, got {other:?}"),
    }
    assert!(start.elapsed() < Duration::from_secs(10));
    assert!(
        shm_leftovers(&name).is_empty(),
        "{:?}",
        shm_leftovers(&name)
    );

    // Rank 1 waits for a vault rank 0 never creates.
    let name = unique_name("bar-interrupt-join1");
    let joined = with_cancel_hook(|| true, || Group::join(opts(&name, 1, 2)));
    assert!(
        matches!(joined, Err(Error::Interrupted { rank: 1, .. })),
        "{joined:?}"
    );
    assert!(shm_leftovers(&name).is_empty());
}
