//! `barrier_arrivals_timeout(k)`: released by any k ranks, whichever they
//! are (ThunderKittens' `sync(k)`), unlike `barrier_subset(k)`, which is
//! for ranks 0..k only.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use nodeipc_barrier::{Error, Group, GroupOptions};
use nodeipc_testkit::{Watchdog, unique_name};

const LIMIT: Duration = Duration::from_secs(10);

#[test]
fn any_k_ranks_pass_a_barrier_of_k_arrivals() {
    let _dog = Watchdog::new(
        "any_k_ranks_pass_a_barrier_of_k_arrivals",
        Duration::from_secs(60),
    );
    let name = unique_name("arrivals");
    let world = 4u32;
    let passed = Arc::new(AtomicU32::new(0));
    let ranks: Vec<_> = (0..world)
        .map(|rank| {
            let (name, passed) = (name.clone(), Arc::clone(&passed));
            std::thread::spawn(move || -> nodeipc_barrier::Result<()> {
                let group = Group::join(GroupOptions::new(name, rank, world).timeout(LIMIT))?;
                // The two highest ranks meet three times on their own, while
                // ranks 0 and 1 wait at the full barrier.
                if rank >= 2 {
                    for _ in 0..3 {
                        group.barrier_arrivals_timeout(2, LIMIT)?;
                        passed.fetch_add(1, Ordering::SeqCst);
                    }
                } else {
                    assert!(matches!(
                        group.barrier_arrivals_timeout(0, LIMIT),
                        Err(Error::InvalidOptions { .. })
                    ));
                    assert!(matches!(
                        group.barrier_arrivals_timeout(world + 1, LIMIT),
                        Err(Error::InvalidOptions { .. })
                    ));
                }
                group.barrier()?;
                assert_eq!(passed.load(Ordering::SeqCst), 6);
                group.barrier()
            })
        })
        .collect();
    for rank in ranks {
        rank.join().expect("rank thread").expect("rank");
    }
}

#[test]
fn a_barrier_of_k_arrivals_times_out_when_fewer_come() {
    let _dog = Watchdog::new("a_barrier_of_k_arrivals_times_out", Duration::from_secs(60));
    let name = unique_name("arrivals-short");
    let ranks: Vec<_> = (0..3u32)
        .map(|rank| {
            let name = name.clone();
            std::thread::spawn(move || -> nodeipc_barrier::Result<()> {
                let group = Group::join(GroupOptions::new(name, rank, 3).timeout(LIMIT))?;
                if rank == 2 {
                    return match group.barrier_arrivals_timeout(2, Duration::from_millis(200)) {
                        Err(Error::Timeout {
                            arrived: 1,
                            expected: 2,
                            ..
                        }) => Ok(()),
                        other => panic!("alone at a barrier of 2 arrivals: {other:?}"),
                    };
                }
                // Keep the group until rank 2 has timed out (it poisons the group).
                std::thread::sleep(Duration::from_millis(500));
                Ok(())
            })
        })
        .collect();
    for rank in ranks {
        rank.join().expect("rank thread").expect("rank");
    }
}
