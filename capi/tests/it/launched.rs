//! Ranks in C (`nodeipc_group_join`) and in C++ (`kittens::KittensBroker`,
//! as a ThunderKittens program constructs it) under `nodeipc launch --nproc
//! 2`: each joins the group the launcher names in `NODEIPC_GROUP`, taken as
//! it is, and all-gathers. (Python, Rust and C++ ranks in one launched
//! group: `python/tests/test_launched.py`.)

use crate::common;

use std::process::{Command, Stdio};
use std::time::Duration;

use nodeipc_testkit::{TempDir, Watchdog, shm_leftovers, spawn_child};

/// Runs `tests/c/<source>` as the two ranks of `nodeipc launch --nproc 2`;
/// both must print that they gathered `<tag> rank 0 pid P0|<tag> rank 1
/// pid P1` (P0 and P1 the pids the two ranks print for themselves, two
/// processes) in the same group, a name starting with '/', and leave
/// nothing of it behind.
fn two_ranks_under_launch(source: &str, tag: &str) {
    let dir = TempDir::new("capi-launched");
    let Some(program) = common::compile(source, &dir) else {
        return;
    };
    let mut command = Command::new(common::nodeipc_program());
    command
        .args(["launch", "--nproc", "2", "--stop-timeout", "5", "--run-dir"])
        .arg(dir.path())
        .arg("--")
        .arg(&program)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = spawn_child(&mut command).output_timeout(Duration::from_secs(60));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}\n{stdout}\n{stderr}", out.status);
    // Each rank's (pid, group, gathering).
    let said: Vec<(String, String, String)> = (0..2)
        .map(|rank| {
            let line = stdout
                .lines()
                .find_map(|l| l.strip_prefix(&format!("rank {rank} pid ")))
                .unwrap_or_else(|| panic!("rank {rank} said nothing:\n{stdout}\n{stderr}"));
            let (pid, rest) = line.split_once(" in ").expect("rank R pid P in G");
            let (group, gathered) = rest.split_once(" gathered: ").expect("gathered");
            (pid.to_owned(), group.to_owned(), gathered.to_owned())
        })
        .collect();
    let expected = format!(
        "{tag} rank 0 pid {}|{tag} rank 1 pid {}",
        said[0].0, said[1].0
    );
    assert_ne!(said[0].0, said[1].0, "one process, two ranks?");
    for (rank, (_, group, gathered)) in said.iter().enumerate() {
        assert_eq!(gathered, &expected, "rank {rank}");
        assert_eq!(group, &said[0].1, "rank {rank}");
    }
    assert!(said[0].1.starts_with("/nodeipc-"), "{said:?}");
    assert!(shm_leftovers(&said[0].1).is_empty());
}

#[test]
fn c_ranks_join_the_launchers_group_verbatim() {
    let _dog = Watchdog::new("c_ranks_under_launch", Duration::from_secs(120));
    two_ranks_under_launch("launched_rank.c", "c");
}

#[test]
fn kittens_broker_ranks_run_under_nodeipc_launch() {
    let _dog = Watchdog::new("kittens_ranks_under_launch", Duration::from_secs(120));
    two_ranks_under_launch("launched_rank.cpp", "c++");
}
