//! A range of nodes (`--nnodes N:M`) through a real etcd on loopback:
//! launchers beyond M wait as spares and take a lost node's place, nodes
//! are numbered anew each round, a late launcher with room gets a round
//! of its own (not counted), and too few nodes end with a clear error.

mod etcd_kit;
mod fuse;

use std::time::Duration;

use etcd_kit::etcd::Etcd;
use etcd_kit::{Launcher, Spec, job_id, records, rounds_of, wait_until};
use nodeipc_testkit::{TempDir, Watchdog};

fn main() {
    etcd_kit::main(&[
        (
            "spares_wait_and_one_takes_a_lost_nodes_place_with_nodes_renumbered",
            spares_wait_and_one_takes_a_lost_nodes_place,
            false,
        ),
        (
            "a_late_launcher_with_room_gets_a_round_that_is_not_counted",
            a_late_launcher_with_room_gets_a_round,
            false,
        ),
        (
            "a_lost_node_without_a_spare_leaves_the_others_to_run_on_fewer",
            a_lost_node_without_a_spare_leaves_the_others_to_run_on_fewer,
            false,
        ),
        (
            "too_few_nodes_within_the_rdzv_timeout_end_with_how_many_were_ready",
            too_few_nodes_end_with_how_many_were_ready,
            false,
        ),
        (
            "a_rank_s_shutdown_request_ends_every_node_with_no_restart",
            a_shutdown_request_ends_every_node,
            false,
        ),
        (
            "a_rank_s_exclude_request_takes_its_node_out_and_the_others_go_on",
            an_exclude_request_takes_its_node_out,
            false,
        ),
    ]);
}

/// What every test here starts with.
struct Job {
    _dog: Watchdog,
    etcd: Etcd,
    dir: TempDir,
    id: String,
}

impl Job {
    /// A watchdog of `limit_s`, an etcd, a directory and a job id;
    /// `None` when etcd is missing here (skipped, and said why).
    fn start(test: &str, tag: &str, limit_s: u64) -> Option<Job> {
        let dog = Watchdog::new(test, Duration::from_secs(limit_s));
        Some(Job {
            etcd: Etcd::start(test)?,
            dir: TempDir::new(&format!("etcd-{tag}")),
            id: job_id(tag),
            _dog: dog,
        })
    }
}

/// Each rank saw exactly the rounds given for it.
fn ranks_ran(dir: &TempDir, rounds: &[&[u32]]) {
    let seen = records(&dir.join("record"));
    for (rank, expected) in rounds.iter().enumerate() {
        assert_eq!(
            rounds_of(&seen, rank as u32),
            *expected,
            "rank {rank}: {seen:?}"
        );
    }
}

/// `--nnodes min:max` with a last call of 1 s, no failure round allowed.
fn range(etcd: &Etcd, id: &str, min: u32, max: u32, mode: &str, dir: &TempDir) -> Spec {
    Spec {
        max_nodes: max,
        conf: Some("last_call_timeout=1".into()),
        max_restarts: 0,
        stop_timeout: Duration::from_secs(1),
        ..Spec::new(&etcd.endpoint(), id, min, mode, &dir.join("record"))
    }
}

/// The launchers whose output says `text`.
fn saying(launchers: &[Launcher], text: &str) -> Vec<usize> {
    (0..launchers.len())
        .filter(|&i| launchers[i].output().contains(text))
        .collect()
}

fn spares_wait_and_one_takes_a_lost_nodes_place() {
    let Some(Job {
        etcd,
        dir,
        id,
        _dog,
    }) = Job::start("etcd spares", "spares", 120)
    else {
        return;
    };
    let spec = range(&etcd, &id, 1, 2, "run-long", &dir);
    let mut launchers: Vec<Launcher> = (0..4)
        .map(|i| Launcher::start(&spec, dir.path(), &format!("launcher{i}")))
        .collect();
    wait_until(
        "round 0 on 2 nodes, 2 spares",
        Duration::from_secs(30),
        || {
            saying(
                &launchers,
                "waiting as a spare: round 0 runs on 2 other nodes",
            )
            .len()
                == 2
                && (0..4).all(|r| records(&dir.join("record")).contains(&(r, 0)))
        },
    );
    let spares = saying(&launchers, "waiting as a spare");
    let first = saying(&launchers, &format!("group /nodeipc-{id}-n0-r0"));
    let second = saying(&launchers, &format!("group /nodeipc-{id}-n1-r0"));
    assert_eq!(
        (first.len(), second.len()),
        (1, 1),
        "one node 0, one node 1"
    );
    let (first, second) = (first[0], second[0]);

    // A spare stopped by SIGTERM leaves; the job does not notice.
    let (gone, promoted) = (spares[0], spares[1]);
    launchers[gone].signal(libc::SIGTERM);
    let status = launchers[gone].wait(Duration::from_secs(20));
    let out = launchers[gone].output();
    assert_eq!(status.code(), Some(143), "{out}");
    assert!(
        out.contains("while waiting as a spare (the job goes on)"),
        "{out}"
    );
    assert!(
        !out.contains("rank 0 started"),
        "a spare started ranks: {out}"
    );

    // Node 0 is lost: the other node and the spare run round 1, renumbered.
    launchers[first].signal(libc::SIGKILL);
    launchers[first].wait(Duration::from_secs(10));
    wait_until("the loss seen", Duration::from_secs(30), || {
        launchers[second].output().contains("node 0 left the job")
    });
    let loss_seen = std::time::Instant::now();
    wait_until("round 1 started", Duration::from_secs(30), || {
        records(&dir.join("record"))
            .iter()
            .any(|&(_, round)| round == 1)
    });
    // The lost node's orphans get --stop-timeout (1 s) + 1 s, the spare
    // waiting as long as the node that saw the loss (else it could start
    // round 1 alone after its last call).
    let waited = loss_seen.elapsed();
    assert!(waited >= Duration::from_millis(1800), "{waited:?}");
    for i in [second, promoted] {
        let status = launchers[i].wait(Duration::from_secs(60));
        let out = launchers[i].output();
        assert_eq!(status.code(), Some(0), "launcher {i}: {out}");
        assert!(
            out.contains("in round 1 (0 failure rounds)"),
            "launcher {i}: {out}"
        );
    }
    let renumbered = launchers[second].output();
    assert!(
        renumbered.contains(&format!("group /nodeipc-{id}-n0-r1")),
        "node 1 of round 0 is node 0 of round 1: {renumbered}"
    );
    assert!(
        launchers[promoted]
            .output()
            .contains(&format!("group /nodeipc-{id}-n1-r1")),
        "{}",
        launchers[promoted].output()
    );
    ranks_ran(&dir, &[&[0, 1], &[0, 1], &[0, 1], &[0, 1]]);
}

fn a_late_launcher_with_room_gets_a_round() {
    let Some(Job {
        etcd,
        dir,
        id,
        _dog,
    }) = Job::start("etcd late launcher", "late", 90)
    else {
        return;
    };
    let spec = range(&etcd, &id, 1, 2, "run-long", &dir);
    let mut first = Launcher::start(&spec, dir.path(), "first");
    wait_until("round 0 on one node", Duration::from_secs(30), || {
        let seen = records(&dir.join("record"));
        seen.contains(&(0, 0)) && seen.contains(&(1, 0))
    });
    let mut late = Launcher::start(&spec, dir.path(), "late");
    for launcher in [&mut first, &mut late] {
        let status = launcher.wait(Duration::from_secs(60));
        let out = launcher.output();
        // --max-restarts 0: the round for the newcomer was not a failure.
        assert_eq!(status.code(), Some(0), "{out}");
        assert!(out.contains("in round 1 (0 failure rounds)"), "{out}");
    }
    assert!(
        first
            .output()
            .contains("a node joined (1 of at most 2 running)"),
        "{}",
        first.output()
    );
    // World size 4 in round 1 only.
    ranks_ran(&dir, &[&[0, 1], &[0, 1], &[1], &[1]]);
}

fn a_lost_node_without_a_spare_leaves_the_others_to_run_on_fewer() {
    let Some(Job {
        etcd,
        dir,
        id,
        _dog,
    }) = Job::start("etcd scale down", "down", 90)
    else {
        return;
    };
    let spec = range(&etcd, &id, 1, 3, "run-long", &dir);
    let mut launchers: Vec<Launcher> = (0..2)
        .map(|i| Launcher::start(&spec, dir.path(), &format!("launcher{i}")))
        .collect();
    wait_until("round 0 on 2 nodes", Duration::from_secs(30), || {
        (0..4).all(|r| records(&dir.join("record")).contains(&(r, 0)))
    });
    let lost = saying(&launchers, &format!("group /nodeipc-{id}-n1-r0"));
    assert_eq!(lost.len(), 1);
    let (lost, kept) = (lost[0], 1 - lost[0]);
    launchers[lost].signal(libc::SIGKILL);
    launchers[lost].wait(Duration::from_secs(10));
    let status = launchers[kept].wait(Duration::from_secs(60));
    let out = launchers[kept].output();
    assert_eq!(status.code(), Some(0), "{out}");
    assert!(out.contains("node 1 left the job"), "{out}");
    assert!(out.contains("in round 1 (0 failure rounds)"), "{out}");
    // Round 1 runs on one node: world size 2.
    ranks_ran(&dir, &[&[0, 1], &[0, 1], &[0], &[0]]);
}

fn too_few_nodes_end_with_how_many_were_ready() {
    let Some(Job {
        etcd,
        dir,
        id,
        _dog,
    }) = Job::start("etcd too few nodes", "few", 60)
    else {
        return;
    };
    let spec = Spec {
        timeout_s: 3,
        ..range(&etcd, &id, 2, 3, "quick", &dir)
    };
    let mut alone = Launcher::start(&spec, dir.path(), "alone");
    let status = alone.wait(Duration::from_secs(30));
    let out = alone.output();
    assert_eq!(status.code(), Some(99), "{out}");
    assert!(
        out.contains(
            "round 0: 1 of the 2 nodes it needs (--nnodes 2:3) were ready within --rdzv-timeout"
        ),
        "{out}"
    );
    // Said while it waited (half the 3 s timeout in).
    assert!(
        out.contains("round 0 waits for nodes: 1 of 2 ready"),
        "{out}"
    );
    assert!(records(&dir.join("record")).is_empty(), "no rank ran");
}

/// nvidia-resiliency-ext's `ShutdownWorkload` from a rank of one node ends
/// the job on every node, with the round's status and no restart (though
/// restarts are left): the other launcher is told through etcd.
fn a_shutdown_request_ends_every_node() {
    let Some(Job {
        etcd,
        dir,
        id,
        _dog,
    }) = Job::start("etcd workload shutdown", "wl-stop", 90)
    else {
        return;
    };
    let spec = Spec {
        max_restarts: 3,
        ..Spec::new(&etcd.endpoint(), &id, 2, "workload:2", &dir.join("record"))
    };
    let mut launchers: Vec<Launcher> = (0..2)
        .map(|i| Launcher::start(&spec, dir.path(), &format!("launcher{i}")))
        .collect();
    for (i, launcher) in launchers.iter_mut().enumerate() {
        let status = launcher.wait(Duration::from_secs(60));
        let out = launcher.output();
        assert_eq!(status.code(), Some(7), "launcher {i}: {out}");
        assert!(
            out.contains("rank 3 asked to shut the workload down: asked by the test"),
            "launcher {i}: {out}"
        );
    }
    ranks_ran(&dir, &[&[0], &[0], &[0], &[0]]);
}

/// `ExcludeThisNode` from a rank of one node takes that node out: its
/// launcher exits 1 saying so, and the other, on `--nnodes 1:2`, runs the
/// next round alone (world size 2) and finishes.
fn an_exclude_request_takes_its_node_out() {
    let Some(Job {
        etcd,
        dir,
        id,
        _dog,
    }) = Job::start("etcd workload exclude", "wl-out", 90)
    else {
        return;
    };
    let spec = Spec {
        max_restarts: 1,
        ..range(&etcd, &id, 1, 2, "workload:1", &dir)
    };
    let mut launchers: Vec<Launcher> = (0..2)
        .map(|i| Launcher::start(&spec, dir.path(), &format!("launcher{i}")))
        .collect();
    let statuses: Vec<Option<i32>> = launchers
        .iter_mut()
        .map(|l| l.wait(Duration::from_secs(60)).code())
        .collect();
    let out: Vec<String> = launchers.iter().map(Launcher::output).collect();
    let excluded = saying(&launchers, "asked to exclude this node (asked by the test)");
    assert_eq!(excluded.len(), 1, "{out:?}");
    let (gone, kept) = (excluded[0], 1 - excluded[0]);
    assert_eq!(statuses[gone], Some(1), "{}", out[gone]);
    assert_eq!(statuses[kept], Some(0), "{}", out[kept]);
    // Round 1 (or later) ran on the one node left: ranks 0 and 1 only.
    let seen = records(&dir.join("record"));
    let after: Vec<u32> = seen
        .iter()
        .filter(|(_, r)| *r > 0)
        .map(|(k, _)| *k)
        .collect();
    assert!(
        !after.is_empty() && after.iter().all(|&k| k < 2),
        "{seen:?}"
    );
}
