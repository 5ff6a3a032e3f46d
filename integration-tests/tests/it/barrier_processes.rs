//! Rank groups of real processes: 2, 3, 8 and 16 ranks (more than the cores,
//! so waiters must park), both descriptor transports, the automatic choice
//! between them (unprivileged ranks, one of which refuses `pidfd_getfd`),
//! two groups at once, subset barriers beside ranks that are not in them, and
//! a rank killed with SIGKILL in the middle of a barrier.

use std::os::unix::process::CommandExt;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nodeipc_shm::Region;
use nodeipc_testkit::{
    ChildGuard, NOBODY, Watchdog, is_root, shm_leftovers, skip, spawn_child, unique_name,
};

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
        all_done < Duration::from_secs(3),
        "survivors took {all_done:?}"
    );
    assert!(shm_leftovers(&name).is_empty());
}

/// Removes whatever `/dev/shm` holds under a name containing its fragment
/// when dropped: the vault unprivileged ranks create is theirs, not ours, and
/// a failed run must not leave it behind.
struct RemoveLeftovers(String);

impl Drop for RemoveLeftovers {
    fn drop(&mut self) {
        for leftover in shm_leftovers(&self.0) {
            let _ = std::fs::remove_file(format!("/dev/shm/{leftover}"));
        }
    }
}

/// Whether Yama restricts `ptrace` (and so `pidfd_getfd`) between sibling
/// processes even of one uid: then no unprivileged rank may use pidfds.
fn yama_restricts_siblings() -> bool {
    std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .is_ok_and(|scope| scope.trim() != "0")
}

/// `world` ranks of `rank exchange` as `nobody` (no capabilities, so no
/// CAP_SYS_PTRACE), rank `undumpable` made non-dumpable before it joins; the
/// group's transport choice is `transport`. Returns each rank's output, and
/// checks that nothing is left in `/dev/shm`.
fn unprivileged_exchange(world: u32, undumpable: Option<u32>, transport: &str) -> Vec<Output> {
    let name = unique_name(&format!("auto{world}"));
    let _cleanup = RemoveLeftovers(name.clone());
    let undumpable = undumpable.map_or("none".to_owned(), |r| r.to_string());
    let ranks: Vec<_> = (0..world)
        .map(|r| {
            spawn_child(
                Command::new(env!("CARGO_BIN_EXE_rank"))
                    .args([
                        "exchange",
                        &name,
                        &r.to_string(),
                        &world.to_string(),
                        transport,
                        &undumpable,
                    ])
                    .uid(NOBODY.0)
                    .gid(NOBODY.1)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped()),
            )
        })
        .collect();
    let outs = outputs(ranks, Duration::from_secs(120));
    assert!(
        shm_leftovers(&name).is_empty(),
        "left in /dev/shm: {:?}",
        shm_leftovers(&name)
    );
    outs
}

/// Checks one rank's report of a successful `rank exchange`: it ran as
/// `nobody`, dumpable unless it is `undumpable`, its probe of each peer said
/// what the kernel must say (only the non-dumpable rank refuses, and with
/// EPERM), every descriptor arrived with the right content, and the group
/// agreed on `expected`.
fn check_exchange(r: u32, world: u32, undumpable: Option<u32>, out: &Output, expected: &str) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "rank {r} of {world} failed: {stdout}\n{stderr}"
    );
    let lines: Vec<&str> = stdout.lines().collect();
    let dumpable = undumpable != Some(r);
    let me = format!("uid {} dumpable {dumpable}", NOBODY.0);
    assert!(
        lines.contains(&me.as_str()),
        "rank {r}: {stdout:?} lacks {me:?}"
    );
    for peer in (0..world).filter(|&p| p != r) {
        let yes = format!("probe {peer} yes");
        let refused = format!("probe {peer} no (NotPermitted");
        if undumpable == Some(peer) {
            // The point of the test: the kernel's permission check refuses
            // this rank's pidfd_getfd on the non-dumpable peer.
            assert!(
                lines.iter().any(|l| l.starts_with(&refused)),
                "rank {r}'s probe of the non-dumpable rank {peer} was not refused with EPERM: {stdout}"
            );
        } else if !yama_restricts_siblings() {
            assert!(
                lines.contains(&yes.as_str()),
                "rank {r}'s probe of the dumpable rank {peer} failed: {stdout}"
            );
        }
    }
    // Three exchanges bring a descriptor from each peer; 2 × world
    // broadcasts bring one each.
    let verified = format!("verified {} descriptors", 3 * (world - 1) + 2 * world);
    assert!(
        lines.contains(&verified.as_str()),
        "rank {r}: {stdout:?} lacks {verified:?}"
    );
    let transport = format!("transport {expected}");
    assert!(
        lines.contains(&transport.as_str()),
        "rank {r} of {world} did not report {transport:?}: {stdout}"
    );
}

#[test]
fn auto_falls_back_to_scm_rights_when_one_rank_refuses_pidfd_getfd_and_still_passes_descriptors() {
    let _dog = Watchdog::new("auto falls back", Duration::from_secs(240));
    if !is_root() {
        skip(
            "auto_falls_back_to_scm_rights_when_one_rank_refuses_pidfd_getfd",
            "needs root to run the ranks as nobody",
        );
        return;
    }
    // The non-dumpable rank first (it creates the vault and the socket
    // directory), then last.
    for (world, undumpable) in [(3, 0), (4, 3)] {
        let outs = unprivileged_exchange(world, Some(undumpable), "auto");
        for (r, out) in outs.iter().enumerate() {
            check_exchange(r as u32, world, Some(undumpable), out, "ScmRights");
        }
    }
    // The same group with pidfds forced: every rank is told why not, so the
    // probe above did decide something.
    let world = 3;
    let outs = unprivileged_exchange(world, Some(1), "pidfd");
    for (r, out) in outs.iter().enumerate() {
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(2),
            "rank {r} with pidfds forced: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let last = stdout.lines().last().unwrap_or("");
        assert!(
            last.starts_with("Transport:") && last.contains("pidfd_getfd was asked for"),
            "rank {r} with pidfds forced did not refuse the transport: {stdout}"
        );
    }
}

#[test]
fn auto_picks_pidfd_when_every_unprivileged_rank_may_use_pidfd_getfd() {
    let _dog = Watchdog::new("auto picks pidfd", Duration::from_secs(240));
    if !is_root() {
        skip(
            "auto_picks_pidfd_when_every_unprivileged_rank_may_use_pidfd_getfd",
            "needs root to run the ranks as nobody",
        );
        return;
    }
    if yama_restricts_siblings() {
        skip(
            "auto_picks_pidfd_when_every_unprivileged_rank_may_use_pidfd_getfd",
            "Yama's ptrace_scope refuses pidfd_getfd between sibling ranks",
        );
        return;
    }
    let world = 3;
    let outs = unprivileged_exchange(world, None, "auto");
    for (r, out) in outs.iter().enumerate() {
        check_exchange(r as u32, world, None, out, "Pidfd");
    }
}
