//! Groups whose ranks are threads of this process: the protocol, the
//! collectives, and the refusals. Real processes, deaths and kills are in
//! `integration-tests/tests/it/barrier_processes.rs`.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use nodeipc_barrier::{Error, Group, GroupOptions, Transport, TransportChoice};
use nodeipc_shm::Region;
use nodeipc_testkit::{Watchdog, shm_leftovers, unique_name};

/// Runs `body` as every rank of a group of `world` threads; returns their results.
fn run_group<T: Send + 'static>(
    world: u32,
    options: impl Fn(u32) -> GroupOptions + Send + Sync + 'static,
    body: impl Fn(Group) -> T + Send + Sync + 'static,
) -> Vec<T> {
    let options = Arc::new(options);
    let body = Arc::new(body);
    let handles: Vec<_> = (0..world)
        .map(|rank| {
            let (options, body) = (Arc::clone(&options), Arc::clone(&body));
            thread::spawn(move || body(Group::join(options(rank)).expect("join")))
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().expect("rank thread"))
        .collect()
}

fn opts(name: &str, rank: u32, world: u32) -> GroupOptions {
    GroupOptions::new(name, rank, world).timeout(Duration::from_secs(20))
}

#[test]
fn barriers_let_no_rank_pass_early() {
    let _dog = Watchdog::new("barriers_let_no_rank_pass_early", Duration::from_secs(60));
    let name = unique_name("bar-threads");
    let counter = Arc::new(AtomicU64::new(0));
    const ROUNDS: u64 = 2_000;
    let n = name.clone();
    let c = Arc::clone(&counter);
    run_group(
        3,
        move |r| opts(&n, r, 3),
        move |group| {
            for round in 0..ROUNDS {
                c.fetch_add(1, Ordering::SeqCst);
                group.barrier().unwrap();
                let seen = c.load(Ordering::SeqCst);
                assert!(
                    seen >= (round + 1) * 3,
                    "rank {} passed round {round} early: {seen}",
                    group.rank()
                );
                assert!(
                    seen <= (round + 2) * 3,
                    "a rank ran two rounds ahead: {seen}"
                );
            }
        },
    );
    assert_eq!(counter.load(Ordering::SeqCst), ROUNDS * 3);
    assert!(
        shm_leftovers(&name).is_empty(),
        "the vault's name survived the join"
    );
}

#[test]
fn all_gather_and_broadcast_carry_every_ranks_bytes() {
    let _dog = Watchdog::new("all_gather_and_broadcast", Duration::from_secs(60));
    let name = unique_name("gather");
    let n = name.clone();
    run_group(
        4,
        move |r| opts(&n, r, 4).slot_size(100),
        |mut group| {
            let rank = group.rank();
            for round in 0..50u32 {
                let mine = vec![rank as u8; (rank + round) as usize % 100];
                let all = group.all_gather(&mine).unwrap();
                for (r, got) in all.iter().enumerate() {
                    assert_eq!(got, &vec![r as u8; (r as u32 + round) as usize % 100]);
                }
                let root = round % 4;
                let said = group
                    .broadcast(root, format!("round {round} from {root}").as_bytes())
                    .unwrap();
                assert_eq!(said, format!("round {round} from {root}").as_bytes());
            }
            assert!(matches!(
                group.all_gather(&[0u8; 101]),
                Err(Error::TooLarge {
                    len: 101,
                    slot_size: 100,
                    ..
                })
            ));
            assert!(matches!(
                group.broadcast(9, b""),
                Err(Error::RankOutOfRange { rank: 9, .. })
            ));
        },
    );
}

/// Which file a descriptor refers to: (device, inode).
fn file_identity(fd: BorrowedFd<'_>) -> (u64, u64) {
    let metadata = std::fs::File::from(fd.try_clone_to_owned().expect("dup"))
        .metadata()
        .expect("fstat");
    (metadata.dev(), metadata.ino())
}

fn exchange_memfds(transport: TransportChoice) {
    let _dog = Watchdog::new("exchange_memfds", Duration::from_secs(60));
    let name = unique_name("xfds");
    let n = name.clone();
    let chosen = run_group(
        3,
        move |r| opts(&n, r, 3).transport(transport),
        |mut group| {
            let rank = group.rank();
            for round in 0..5u8 {
                let region = Region::anonymous(4096).unwrap();
                region.write_at(0, &[rank as u8, round]).unwrap();
                let fds = group.exchange_fds(region.as_fd()).unwrap();
                for (r, fd) in fds.into_iter().enumerate() {
                    if r as u32 == rank {
                        assert!(fd.is_none());
                        continue;
                    }
                    let theirs = Region::from_fd(fd.expect("a peer's descriptor")).unwrap();
                    let mut bytes = [0u8; 2];
                    theirs.read_at(0, &mut bytes).unwrap();
                    assert_eq!(
                        bytes,
                        [r as u8, round],
                        "rank {rank} got the wrong file from rank {r}"
                    );
                }
                let root = u32::from(round) % 3;
                // Every rank's file says whose it is: only the root's may come back.
                let shared = Region::anonymous(64).unwrap();
                shared.write_at(0, &[0xB0 + round, rank as u8]).unwrap();
                let fd = group
                    .broadcast_fd(root, (rank == root).then(|| shared.as_fd()))
                    .unwrap();
                if rank == root {
                    // `broadcast_fd` promises the root a duplicate of its own
                    // descriptor: a new descriptor for the same open file.
                    assert_ne!(
                        fd.as_raw_fd(),
                        shared.as_fd().as_raw_fd(),
                        "root {root} got its own descriptor back, not a duplicate"
                    );
                    assert_eq!(
                        file_identity(fd.as_fd()),
                        file_identity(shared.as_fd()),
                        "root {root} got back another file than the one it broadcast"
                    );
                }
                let got = Region::from_fd(fd).unwrap();
                let mut bytes = [0u8; 2];
                got.read_at(0, &mut bytes).unwrap();
                assert_eq!(
                    bytes,
                    [0xB0 + round, root as u8],
                    "rank {rank} got the wrong file from root {root} in round {round}"
                );
                if rank == root {
                    // The same file, not a copy: a write through the duplicate
                    // shows through the original.
                    got.write_at(8, b"dup").unwrap();
                    let mut seen = [0u8; 3];
                    shared.read_at(8, &mut seen).unwrap();
                    assert_eq!(&seen, b"dup", "root {root}'s duplicate is another file");
                }
            }
            group.transport()
        },
    );
    let expected = match transport {
        TransportChoice::ScmRights => Transport::ScmRights,
        _ => Transport::Pidfd,
    };
    assert!(chosen.iter().all(|&t| t == expected), "{chosen:?}");
    assert!(
        std::fs::read_dir("/tmp").unwrap().flatten().all(|e| {
            !e.file_name().to_string_lossy().starts_with(&format!(
                "nodeipc-group-{}-",
                rustix::process::geteuid().as_raw()
            )) || e
                .metadata()
                .map(|m| m.modified().unwrap().elapsed().unwrap() > Duration::from_secs(600))
                .unwrap_or(true)
        }),
        "a socket directory was left in /tmp"
    );
}

#[test]
fn exchange_fds_over_pidfd_getfd() {
    exchange_memfds(TransportChoice::Pidfd);
}

#[test]
fn exchange_fds_over_scm_rights() {
    exchange_memfds(TransportChoice::ScmRights);
}

#[test]
fn exchange_fds_auto_picks_pidfd_here() {
    exchange_memfds(TransportChoice::Auto);
}

#[test]
fn barrier_subset_syncs_only_the_first_ranks() {
    let _dog = Watchdog::new("barrier_subset", Duration::from_secs(60));
    let name = unique_name("subset");
    let n = name.clone();
    run_group(
        4,
        move |r| opts(&n, r, 4),
        |group| {
            if group.rank() < 2 {
                for _ in 0..100 {
                    group.barrier_subset(2).unwrap();
                }
            } else {
                assert!(matches!(
                    group.barrier_subset(2),
                    Err(Error::SubsetOutOfRange { n: 2, .. })
                ));
            }
            group.barrier().unwrap();
        },
    );
}

#[test]
fn a_joiner_with_another_world_size_is_refused_naming_both() {
    let _dog = Watchdog::new("world size mismatch", Duration::from_secs(30));
    let name = unique_name("mismatch");
    let n = name.clone();
    let creator =
        thread::spawn(move || Group::join(opts(&n, 0, 2).timeout(Duration::from_secs(3))));
    thread::sleep(Duration::from_millis(100));
    let err = Group::join(opts(&name, 1, 3)).unwrap_err();
    match &err {
        Error::Mismatch {
            what, ours, theirs, ..
        } => {
            assert_eq!((*what, *ours, *theirs), ("world size", 3, 2));
            assert!(err.to_string().contains(&name));
        }
        other => panic!("expected Mismatch, got {other}"),
    }
    let timed_out = creator.join().unwrap().unwrap_err();
    assert!(
        matches!(
            timed_out,
            Error::Timeout {
                op: "join",
                arrived: 1,
                expected: 2,
                ..
            }
        ),
        "{timed_out}"
    );
}

#[test]
fn a_vault_with_a_wrong_magic_is_refused() {
    let _dog = Watchdog::new("wrong magic", Duration::from_secs(30));
    let name = unique_name("magic");
    let impostor = Region::create(&name, 1 << 16).unwrap();
    impostor.write_at(0, b"NOTAVLT1").unwrap();
    // `init` (offset 20) set, as a finished header would have it.
    impostor.write_at(20, &1u32.to_le_bytes()).unwrap();
    match Group::join(opts(&name, 1, 2).timeout(Duration::from_secs(2))) {
        Err(Error::NotAVault { magic, .. }) => assert_eq!(magic, u64::from_le_bytes(*b"NOTAVLT1")),
        other => panic!("expected NotAVault, got {other:?}"),
    }
    assert!(matches!(
        Group::join(opts(&name, 0, 2)),
        Err(Error::NameTaken { .. })
    ));
}

#[test]
fn a_missing_rank_times_out_the_join_and_the_barrier_says_how_many_came() {
    let _dog = Watchdog::new("missing rank", Duration::from_secs(30));
    let name = unique_name("missing");
    let start = Instant::now();
    let err = Group::join(opts(&name, 0, 2).timeout(Duration::from_millis(300))).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Timeout {
                op: "join",
                arrived: 1,
                expected: 2,
                ..
            }
        ),
        "{err}"
    );
    assert!(start.elapsed() < Duration::from_secs(5));
    assert!(
        shm_leftovers(&name).is_empty(),
        "a failed join left its vault"
    );

    // All three join; one never comes to the barrier.
    let name = unique_name("late");
    let n = name.clone();
    let results = run_group(
        3,
        move |r| opts(&n, r, 3),
        |group| {
            // Late by far more than the others wait, so that even on a
            // loaded machine they time out before it comes.
            if group.rank() == 2 {
                thread::sleep(Duration::from_secs(4));
                return group.barrier().map(|_| 0);
            }
            let start = Instant::now();
            match group.barrier_timeout(Duration::from_millis(1000)) {
                Err(Error::Timeout {
                    arrived,
                    expected: 3,
                    waited,
                    ..
                }) => {
                    assert!(
                        waited >= Duration::from_millis(1000)
                            && start.elapsed() < Duration::from_secs(4)
                    );
                    Ok(arrived)
                }
                Err(Error::Poisoned { .. }) => Ok(99),
                other => panic!("expected a timeout, got {other:?}"),
            }
        },
    );
    // At least one of the two timed out having seen both early ranks arrive.
    assert!(
        results[..2].iter().any(|r| matches!(r, Ok(2))),
        "{results:?}"
    );
    assert!(
        matches!(results[2], Err(Error::Poisoned { .. })),
        "the late rank joined a broken barrier: {results:?}"
    );
}

#[test]
fn a_timed_out_join_names_the_ranks_that_never_joined() {
    let _dog = Watchdog::new("join names the missing", Duration::from_secs(60));
    let name = unique_name("never-joined");
    // Ranks 0 and 2 of 3 come; rank 1 never does.
    // Rank 2 waits longer, so that on a loaded machine too it finds rank 0's
    // vault and registers before giving up.
    let ranks: Vec<_> = [(0u32, 2), (2, 4)]
        .into_iter()
        .map(|(rank, secs)| {
            let name = name.clone();
            thread::spawn(move || {
                Group::join(opts(&name, rank, 3).timeout(Duration::from_secs(secs))).unwrap_err()
            })
        })
        .collect();
    let errors: Vec<Error> = ranks
        .into_iter()
        .map(|h| h.join().expect("rank thread"))
        .collect();
    // Both waited at the registration, where the vault says who came.
    for (rank, err) in [0u32, 2].into_iter().zip(&errors) {
        match err {
            Error::Timeout {
                op: "join",
                missing,
                arrived,
                expected: 3,
                ..
            } => {
                assert_eq!(missing, &[1], "rank {rank}: {err}");
                assert_eq!(*arrived, 2, "rank {rank}: {err}");
            }
            other => panic!("rank {rank}: expected a join timeout, got {other}"),
        }
        let message = err.to_string();
        assert!(
            message.contains("(rank 1 never joined)"),
            "rank {rank}: {message}"
        );
        assert!(!message.contains("rank 2 never"), "rank {rank}: {message}");
    }
    assert!(
        shm_leftovers(&name).is_empty(),
        "a failed join left its vault"
    );

    // Alone in a group of 20: the message names 16 of the 19 and counts the rest.
    let name = unique_name("never-joined-many");
    let err = Group::join(opts(&name, 0, 20).timeout(Duration::from_millis(300))).unwrap_err();
    match &err {
        Error::Timeout { missing, .. } => {
            assert_eq!(missing, &(1..20).collect::<Vec<u32>>(), "{err}")
        }
        other => panic!("expected a join timeout, got {other}"),
    }
    let message = err.to_string();
    assert!(
        message.contains(
            "(ranks 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16 and 3 more never joined)"
        ),
        "{message}"
    );
    assert!(
        shm_leftovers(&name).is_empty(),
        "a failed join left its vault"
    );
}

#[test]
fn a_rank_that_drops_its_group_is_reported_as_left() {
    let _dog = Watchdog::new("left", Duration::from_secs(30));
    let name = unique_name("left");
    let n = name.clone();
    let results = run_group(
        2,
        move |r| opts(&n, r, 2),
        |group| {
            if group.rank() == 1 {
                drop(group);
                return None;
            }
            let start = Instant::now();
            let err = group.barrier().unwrap_err();
            // Told at once, not at the 20 s timeout.
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "took {:?}",
                start.elapsed()
            );
            Some(err)
        },
    );
    assert!(
        matches!(results[0], Some(Error::PeerLeft { rank: 1, .. })),
        "{:?}",
        results[0]
    );
}

#[test]
fn bad_options_are_refused_before_anything_is_created() {
    for (options, fragment) in [
        (GroupOptions::new("no-slash", 0, 2), "start with '/'"),
        (GroupOptions::new("/nodeipc-x", 2, 2), "rank 2"),
        (GroupOptions::new("/nodeipc-x", 0, 0), "world size 0"),
        (GroupOptions::new("/nodeipc-x", 0, 1025), "world size 1025"),
        (
            GroupOptions::new("/nodeipc-x", 0, 2).slot_size(0),
            "slot size 0",
        ),
    ] {
        match Group::join(options) {
            Err(Error::InvalidOptions { reason, .. }) => {
                assert!(reason.contains(fragment), "{reason}")
            }
            other => panic!("expected InvalidOptions ({fragment}), got {other:?}"),
        }
    }
}

/// Regression: a rank that looked at its peers between two wait slices just
/// as the barrier completed found the last arriver already gone (it passed
/// and dropped its handle) and failed the barrier it had in fact passed,
/// poisoning the group ("rank 1 left the group"; seen in the demo's last
/// barrier). A peer that leaves after the barrier is passed is no failure.
#[test]
fn regression_a_peer_leaving_right_after_the_barrier_does_not_fail_it() {
    let _dog = Watchdog::new("leave after barrier", Duration::from_secs(120));
    let prefix = unique_name("bar-leave");
    for i in 0..300u64 {
        let name = format!("{prefix}-{i}");
        // Rank 1 arrives when rank 0 is about done polling and yielding and
        // looks at its peers: the window the race needs, swept across runs.
        let delay = Duration::from_micros(60 + (i * 7) % 120);
        let results = run_group(
            2,
            move |rank| opts(&name, rank, 2),
            move |group| {
                if group.rank() == 1 {
                    let start = Instant::now();
                    while start.elapsed() < delay {
                        std::hint::spin_loop();
                    }
                }
                let passed = group.barrier().map_err(|e| e.to_string());
                drop(group); // leaves at once: LEFT is set
                passed
            },
        );
        for (rank, result) in results.iter().enumerate() {
            assert!(result.is_ok(), "run {i}, rank {rank}: {result:?}");
        }
    }
    assert!(shm_leftovers(&prefix).is_empty());
}

#[test]
fn regression_a_second_thread_in_a_barrier_of_the_same_rank_is_refused_by_name() {
    let _dog = Watchdog::new("second thread in a barrier", Duration::from_secs(60));
    let name = unique_name("busy");
    let second = {
        let name = name.clone();
        thread::spawn(move || Group::join(opts(&name, 1, 2)).unwrap())
    };
    let rank0 = Arc::new(Group::join(opts(&name, 0, 2)).unwrap());
    let rank1 = second.join().unwrap();
    let waiting = {
        let rank0 = Arc::clone(&rank0);
        thread::spawn(move || rank0.barrier())
    };
    // Let the first thread arrive and wait for rank 1.
    thread::sleep(Duration::from_millis(100));
    match rank0.barrier() {
        Err(Error::Busy { rank: 0, op, .. }) => assert_eq!(op, "barrier"),
        other => panic!("a second thread's barrier of rank 0 was not refused: {other:?}"),
    }
    let refused = rank0.barrier_subset(1).unwrap_err().to_string();
    assert!(
        refused.contains(&name) && refused.contains("one thread at a time"),
        "{refused}"
    );
    // Nothing was counted or poisoned: rank 1 releases the first thread.
    rank1.barrier().unwrap();
    waiting.join().unwrap().unwrap();
    let again = thread::spawn(move || rank1.barrier());
    rank0.barrier().unwrap();
    again.join().unwrap().unwrap();
}

#[test]
fn regression_a_barrier_of_the_first_ranks_says_what_is_wrong_with_n() {
    let _dog = Watchdog::new("barrier_subset messages", Duration::from_secs(60));
    let name = unique_name("subset-words");
    let messages = run_group(
        2,
        {
            let name = name.clone();
            move |r| opts(&name, r, 2)
        },
        |group| {
            let said = |n| match group.barrier_subset(n) {
                Err(e @ Error::SubsetOutOfRange { .. }) => e.to_string(),
                other => panic!("barrier_subset({n}): {other:?}"),
            };
            let words = (said(0), said(99), (group.rank() == 1).then(|| said(1)));
            group.barrier().unwrap();
            words
        },
    );
    let (none, too_many, _) = &messages[0];
    assert!(none.contains("the first 0 ranks in a group of 2"), "{none}");
    assert!(
        too_many.contains("the first 99 ranks in a group of 2"),
        "{too_many}"
    );
    assert_ne!(none, too_many);
    for said in [none, too_many] {
        assert!(said.contains("it takes 1 to 2 ranks"), "{said}");
        assert!(!said.contains("outside a group"), "{said}");
    }
    let outside = messages[1].2.as_ref().unwrap();
    assert!(
        outside.contains("rank 1: not among the first 1 ranks (0..1)"),
        "{outside}"
    );
}
