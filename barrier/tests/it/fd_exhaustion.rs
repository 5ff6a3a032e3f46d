//! A rank out of descriptors while it waits for the others to join cannot
//! open a pidfd for, or read `/proc/<pid>/stat` of, the ranks already there:
//! it fails with that error (naming the pid, the call and the errno), and
//! never reports a live rank as dead ("rank 0 died").
//!
//! Runs in a child (this test binary again) whose descriptor table is
//! filled while two ranks, threads of it, wait for a third that never comes.

use std::time::Duration;

use nodeipc_barrier::{Error, Group, GroupOptions};
use nodeipc_testkit::{FullFdTable, Watchdog, shm_leftovers, spawn_child, unique_name};
use rustix::io::Errno;

/// Set in the child: the group name.
const CHILD: &str = "NODEIPC_BARRIER_TEST_FD_EXHAUSTION_CHILD";
const TEST: &str = "regression_a_rank_out_of_descriptors_reports_that_not_a_dead_peer";

fn child(name: &str) {
    println!(); // our lines start after the harness's "test … ..."
    let join = |rank| {
        let name = name.to_owned();
        std::thread::spawn(move || {
            Group::join(GroupOptions::new(name, rank, 3).timeout(Duration::from_secs(2))).map(drop)
        })
    };
    let ranks = [join(0), join(1)];
    // Both register within milliseconds, then wait for rank 2.
    std::thread::sleep(Duration::from_millis(500));
    let table = FullFdTable::fill(0);
    let results: Vec<_> = ranks.into_iter().map(|r| r.join().unwrap()).collect();
    drop(table);
    for (rank, result) in results.into_iter().enumerate() {
        match result {
            Err(Error::PeerDied { rank: dead, .. }) => {
                println!("rank {rank}: said rank {dead} died")
            }
            Err(e) => println!("rank {rank}: {e}"),
            Ok(()) => println!("rank {rank}: joined"),
        }
    }
}

#[test]
fn regression_a_rank_out_of_descriptors_reports_that_not_a_dead_peer() {
    if let Ok(name) = std::env::var(CHILD) {
        return child(&name);
    }
    let _dog = Watchdog::new(TEST, Duration::from_secs(60));
    let name = unique_name("emfile-join");
    let out = spawn_child(
        nodeipc_testkit::this_test_in_a_child(&nodeipc_testkit::test_path(module_path!(), TEST))
            .env(CHILD, &name),
    )
    .output_timeout(Duration::from_secs(30));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let context = format!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the child failed: {context}");
    let emfile = std::io::Error::from_raw_os_error(Errno::MFILE.raw_os_error()).to_string();
    // The first rank to fail frees descriptors as it goes (its vault
    // mapping): the other may then read /proc again and wait out its timeout.
    let lines: Vec<&str> = stdout.lines().filter(|l| l.starts_with("rank ")).collect();
    assert_eq!(lines.len(), 2, "{context}");
    for line in &lines {
        assert!(
            !line.contains("died"),
            "a live rank was called dead: {line}"
        );
        assert!(
            ((line.contains("read /proc/<pid>/stat failed for process")
                || line.contains("pidfd_open failed for process"))
                && line.contains(&emfile))
                || line.contains("timed out"),
            "{line}"
        );
    }
    assert!(
        lines.iter().any(|l| l.contains(&emfile)),
        "nobody ran out of descriptors: {context}"
    );
    assert!(
        shm_leftovers(&name).is_empty(),
        "{:?}",
        shm_leftovers(&name)
    );
}
