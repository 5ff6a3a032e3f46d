//! A named semaphore copied into a forked child: the child's drop unmaps
//! its copy and leaves the name to the parent that made it.

use std::time::Duration;

use nodeipc_sem::{NamedSemaphore, Semaphore};
use nodeipc_testkit::{Watchdog, fork_child, shm_leftovers, unique_name};

#[test]
fn regression_a_named_semaphore_dropped_in_a_forked_child_keeps_its_name() {
    let _dog = Watchdog::new(
        "semaphore dropped in a forked child",
        Duration::from_secs(60),
    );
    let name = unique_name("fork-sem");
    let mut sem = Some(NamedSemaphore::create(&name, 0).unwrap());
    let code = fork_child("named semaphore", Duration::from_secs(20), || {
        let posted = sem.as_ref().unwrap().post().is_ok();
        drop(sem.take());
        i32::from(!posted)
    });
    assert_eq!(code, 0);
    let sem = sem.unwrap();
    // The child's post arrived, and the name is still the parent's.
    sem.wait_timeout(Duration::from_secs(5)).unwrap();
    let opened = NamedSemaphore::open(&name).expect("the child's drop removed the name");
    drop(opened);
    drop(sem);
    assert!(
        shm_leftovers(&name).is_empty(),
        "{:?}",
        shm_leftovers(&name)
    );
}
