//! `kittens::KittensBroker` (include/nodeipc/kittens_broker.hpp) in
//! ThunderKittens-style programs: four C++ processes run every call with
//! the original's API and semantics, and a dead rank gives the others an
//! exception instead of a hang.

use crate::common;

use std::process::{Command, Stdio};
use std::time::Duration;

use nodeipc_testkit::{ChildGuard, TempDir, Watchdog, shm_leftovers, spawn_child, unique_name};

fn ranks(program: &std::path::Path, group: &str, world: u32, mode: &str) -> Vec<ChildGuard> {
    (0..world)
        .map(|rank| {
            let mut command = Command::new(program);
            command
                .args([rank.to_string(), world.to_string(), mode.to_owned()])
                .env("NODEIPC_GROUP", group)
                .env("NODEIPC_TIMEOUT_MS", "20000")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            spawn_child(&mut command)
        })
        .collect()
}

#[test]
fn kittens_broker_program_runs_unchanged_across_four_processes() {
    let _dog = Watchdog::new("kittens_broker_all", Duration::from_secs(90));
    let dir = TempDir::new("capi-kittens");
    let Some(program) = common::compile("kittens_ranks.cpp", &dir) else {
        return;
    };
    let group = unique_name("kittens");
    for (rank, child) in ranks(&program, &group, 4, "all").into_iter().enumerate() {
        let out = child.output_timeout(Duration::from_secs(60));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains(&format!("rank {rank} ok")),
            "rank {rank}: {}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(shm_leftovers(&group).is_empty());
}

#[test]
fn a_dead_kittens_rank_gives_the_others_an_exception_not_a_hang() {
    let _dog = Watchdog::new("kittens_broker_die", Duration::from_secs(90));
    let dir = TempDir::new("capi-kittens-die");
    let Some(program) = common::compile("kittens_ranks.cpp", &dir) else {
        return;
    };
    let group = unique_name("kittens-die");
    for (rank, child) in ranks(&program, &group, 3, "die").into_iter().enumerate() {
        let out = child.output_timeout(Duration::from_secs(30));
        let stdout = String::from_utf8_lossy(&out.stdout);
        if rank == 1 {
            assert_eq!(out.status.code(), Some(3), "{stdout}");
            continue;
        }
        assert!(
            out.status.success(),
            "rank {rank}: {}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        // Caught well before the 20 s timeout: through the dead rank's pidfd.
        let ms: u64 = stdout
            .split("after ")
            .nth(1)
            .and_then(|s| s.split(' ').next())
            .and_then(|s| s.parse().ok())
            .unwrap_or(u64::MAX);
        assert!(ms < 5000, "rank {rank} waited {ms} ms: {stdout}");
    }
    assert!(shm_leftovers(&group).is_empty());
}
