//! Ranks in C (`nodeipc_group_join`) and in C++ (`kittens::KittensBroker`,
//! as a ThunderKittens program constructs it) under `nodeipc launch --nproc
//! 2`: each joins the group the launcher names in `NODEIPC_GROUP`, taken as
//! it is, and all-gathers. (Python, Rust and C++ ranks in one launched
//! group: `python/tests/test_launched.py`.)

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use nodeipc_testkit::{TempDir, Watchdog, shm_leftovers, spawn_child};

/// Runs `tests/c/<source>` as the two ranks of `nodeipc launch --nproc 2`;
/// both must print that they gathered `<tag> rank 0|<tag> rank 1` in the
/// same group, a name starting with '/', and leave nothing of it behind.
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
    let gathered = format!(" gathered: {tag} rank 0|{tag} rank 1");
    let mut groups = Vec::new();
    for rank in 0..2 {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("rank {rank} in ")))
            .unwrap_or_else(|| panic!("rank {rank} said nothing:\n{stdout}\n{stderr}"));
        let (group, rest) = line[format!("rank {rank} in ").len()..]
            .split_once(' ')
            .unwrap();
        assert_eq!(format!(" {rest}"), gathered, "rank {rank}");
        groups.push(group.to_owned());
    }
    assert!(
        groups[0] == groups[1] && groups[0].starts_with("/nodeipc-"),
        "{groups:?}"
    );
    assert!(shm_leftovers(&groups[0]).is_empty());
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
