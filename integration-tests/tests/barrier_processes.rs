//! Rank groups of real processes: 2, 3, 8 and 16 ranks (more than the cores,
//! so waiters must park), both descriptor transports, two groups at once,
//! subset barriers beside ranks that are not in them, and a rank killed with
//! SIGKILL in the middle of a barrier.

use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nodeipc_shm::Region;
use nodeipc_testkit::{ChildGuard, Watchdog, shm_leftovers, spawn_child, unique_name};

fn rank(args: &[&str]) -> ChildGuard {
    spawn_child(
        Command::new(env!("CARGO_BIN_EXE_rank"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )
}

fn outputs(ranks: Vec<ChildGuard>, limit: Duration) -> Vec<Output> {
    ranks.into_iter().map(|r| r.output_timeout(limit)).collect()
}

fn soak(world: u32, iters: u64, transport: &str) {
    let name = unique_name(&format!("soak{world}"));
    let counter_name = format!("{name}-counter");
    let counter = Region::create(&counter_name, 4096).unwrap();
    let ranks: Vec<_> = (0..world)
        .map(|r| {
            rank(&[
                "soak",
                &name,
                &r.to_string(),
                &world.to_string(),
                transport,
                &counter_name,
                &iters.to_string(),
            ])
        })
        .collect();
    for (r, out) in outputs(ranks, Duration::from_secs(240)).iter().enumerate() {
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "rank {r} of {world} failed: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let expected = if transport == "scm" {
            "ScmRights"
        } else {
            "Pidfd"
        };
        assert!(
            stdout.contains(&format!("transport {expected}")),
            "rank {r}: {stdout}"
        );
    }
    drop(counter);
    assert!(
        shm_leftovers(&name).is_empty(),
        "{:?}",
        shm_leftovers(&name)
    );
}

#[test]
fn two_ranks_10000_barriers_both_transports() {
    let _dog = Watchdog::new("two ranks", Duration::from_secs(300));
    soak(2, 10_000, "pidfd");
    soak(2, 2_000, "scm");
}

#[test]
fn three_ranks_10000_barriers() {
    let _dog = Watchdog::new("three ranks", Duration::from_secs(300));
    soak(3, 10_000, "auto");
    soak(3, 1_000, "scm");
}

#[test]
fn eight_ranks_on_two_cores_10000_barriers() {
    let _dog = Watchdog::new("eight ranks", Duration::from_secs(300));
    soak(8, 10_000, "pidfd");
    soak(8, 500, "scm");
}

#[test]
fn sixteen_ranks_on_two_cores_10000_barriers() {
    let _dog = Watchdog::new("sixteen ranks", Duration::from_secs(400));
    soak(16, 10_000, "auto");
    soak(16, 200, "scm");
}

#[test]
fn two_groups_at_once_do_not_interfere() {
    let _dog = Watchdog::new("two groups", Duration::from_secs(300));
    let threads: Vec<_> = (0..2)
        .map(|_| std::thread::spawn(|| soak(3, 3_000, "auto")))
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// Ranks `0..n` of `world` do `iters` subset barriers (`rank subset`) while
/// the others wait in the full barrier all then meet in.
fn subset(world: u32, n: u32, iters: u64, transport: &str) {
    let name = unique_name(&format!("subset{n}of{world}"));
    let counter_name = format!("{name}-counter");
    let counter = Region::create(&counter_name, 4096).unwrap();
    let ranks: Vec<_> = (0..world)
        .map(|r| {
            rank(&[
                "subset",
                &name,
                &r.to_string(),
                &world.to_string(),
                transport,
                &counter_name,
                &n.to_string(),
                &iters.to_string(),
            ])
        })
        .collect();
    let expected = format!("subset {} full {world}", u64::from(n) * iters);
    for (r, out) in outputs(ranks, Duration::from_secs(240)).iter().enumerate() {
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "rank {r} of {world} (subset of {n}) failed: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains(&expected),
            "rank {r} of {world} (subset of {n}): {stdout:?} lacks {expected:?}"
        );
    }
    let subset_count = counter.view::<AtomicU64>(0).unwrap().load(Ordering::SeqCst);
    assert_eq!(
        subset_count,
        u64::from(n) * iters,
        "the subset of {n} did not do all its barriers"
    );
    drop(counter);
    assert!(
        shm_leftovers(&name).is_empty(),
        "{:?}",
        shm_leftovers(&name)
    );
}

#[test]
fn a_subset_barrier_of_processes_lets_no_rank_pass_early_and_leaves_the_others_out() {
    let _dog = Watchdog::new("subset barrier", Duration::from_secs(300));
    subset(4, 2, 5_000, "auto");
    // More subset ranks than cores, and outsiders parked in the full barrier.
    subset(8, 5, 2_000, "auto");
    subset(3, 3, 1_000, "scm");
}

#[test]
fn a_rank_killed_mid_barrier_gives_the_others_peer_died_within_a_second() {
    let _dog = Watchdog::new("kill mid-barrier", Duration::from_secs(120));
    let name = unique_name("kill");
    let world = 4u32;
    let mut ranks: Vec<_> = (0..world)
        .map(|r| {
            rank(&[
                "hang-after",
                &name,
                &r.to_string(),
                &world.to_string(),
                "auto",
                "200",
            ])
        })
        .collect();
    // Let the survivors reach the barrier the victim never joins.
    std::thread::sleep(Duration::from_millis(500));
    let mut victim = ranks.pop().unwrap();
    let victim_pid = victim.id();
    let killed = Instant::now();
    victim.kill();
    for (r, out) in outputs(ranks, Duration::from_secs(30)).iter().enumerate() {
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(2), "rank {r}: {stdout}");
        assert!(
            stdout.starts_with("PeerDied") || stdout.starts_with("Poisoned"),
            "rank {r}: {stdout}"
        );
        assert!(
            stdout.contains("rank 3"),
            "rank {r} blamed the wrong rank: {stdout}"
        );
        if stdout.starts_with("PeerDied") {
            assert!(stdout.contains(&format!("pid {victim_pid}")), "{stdout}");
        }
    }
    let all_done = killed.elapsed();
    assert!(
        all_done < Duration::from_secs(1) + Duration::from_millis(500),
        "survivors took {all_done:?}"
    );
    assert!(shm_leftovers(&name).is_empty());
}
