//! A group membership copied into a forked child: the child's drop tells
//! the peers nothing (the rank is the parent's), even while another thread
//! of the parent waits in a barrier on it.

use std::thread;
use std::time::Duration;

use nodeipc_barrier::{Group, GroupOptions};
use nodeipc_testkit::{Watchdog, fork_child, shm_leftovers, unique_name};

#[test]
fn regression_a_group_dropped_in_a_forked_child_does_not_leave_it() {
    let _dog = Watchdog::new("group dropped in a forked child", Duration::from_secs(60));
    let name = unique_name("fork-group");
    let options = |rank| GroupOptions::new(&name, rank, 2).timeout(Duration::from_secs(20));
    let second = {
        let options = options(1);
        thread::spawn(move || Group::join(options).unwrap())
    };
    let mut rank0 = Some(Group::join(options(0)).unwrap());
    let rank1 = second.join().unwrap();
    // Another thread of the parent waits in a barrier as rank 1 while this
    // one forks.
    let waiting = thread::spawn(move || {
        let result = rank1.barrier();
        (rank1, result)
    });
    thread::sleep(Duration::from_millis(50));
    let code = fork_child("group", Duration::from_secs(20), || {
        drop(rank0.take());
        0
    });
    assert_eq!(code, 0);
    // Rank 0 is still in the group for its peer: the barrier completes.
    let rank0 = rank0.unwrap();
    rank0.barrier().expect("the child's drop made rank 0 leave");
    let (rank1, result) = waiting.join().unwrap();
    result.expect("rank 1 saw rank 0 leave");
    drop(rank1);
    drop(rank0);
    assert!(
        shm_leftovers(&name).is_empty(),
        "{:?}",
        shm_leftovers(&name)
    );
}
