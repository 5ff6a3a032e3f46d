//! Lost launchers, partitions and a lost etcd, through a real etcd on
//! loopback.

mod etcd_kit;
mod fuse;

use std::time::Duration;

use etcd_kit::etcd::Etcd;
use etcd_kit::proxy::Proxy;
use etcd_kit::{Launcher, Spec, job_id, records, rounds_of, wait_until};
use fuse::StuckMount;
use nodeipc_testkit::{TempDir, Watchdog};

fn main() {
    etcd_kit::main(&[
        (
            "a_launcher_killed_is_replaced_and_the_change_of_members_is_not_counted",
            a_launcher_killed_is_replaced,
            false,
        ),
        (
            "sigterm_to_one_launcher_stops_every_node_with_its_cause",
            sigterm_to_one_launcher_stops_every_node,
            false,
        ),
        (
            "a_node_cut_off_by_the_proxy_stops_its_ranks_and_the_others_go_on",
            a_node_cut_off_stops_its_ranks,
            false,
        ),
        (
            "etcd_restarted_within_the_ttl_the_job_carries_on",
            etcd_restarted_within_the_ttl,
            false,
        ),
        (
            "etcd_gone_every_launcher_stops_its_ranks_and_names_the_endpoints",
            etcd_gone_every_launcher_stops,
            false,
        ),
        (
            "sigterm_while_waiting_for_etcd_ends_the_launcher_at_once",
            sigterm_while_waiting_for_etcd,
            false,
        ),
        (
            "a_node_whose_process_outlives_sigkill_leaves_the_job_and_is_replaced",
            a_node_with_an_unkillable_process_leaves,
            false,
        ),
        (
            "a_rank_failure_on_a_node_that_then_leaves_still_counts_for_the_job",
            a_failure_on_a_node_that_leaves_still_counts,
            false,
        ),
        (
            "regression_a_forged_failure_in_etcd_neither_exits_0_nor_reaches_the_terminal_raw",
            a_forged_failure_in_etcd,
            false,
        ),
    ]);
}

/// Two launchers (node ranks 0 and 1) of `mode`, node 1 through `via`.
fn two(
    etcd: &Etcd,
    dir: &TempDir,
    tag: &str,
    mode: &str,
    adjust: impl Fn(Spec) -> Spec,
    via: Option<&str>,
) -> (Vec<Launcher>, Spec) {
    let id = job_id(tag);
    let record = dir.join("record");
    let base = adjust(Spec::new(&etcd.endpoint(), &id, 2, mode, &record));
    let launchers = (0..2)
        .map(|node| {
            let mut spec = Spec {
                node_rank: Some(node),
                ..base.clone()
            };
            if let (1, Some(endpoint)) = (node, via) {
                spec.endpoint = endpoint.to_owned();
            }
            Launcher::start(&spec, dir.path(), &format!("node{node}"))
        })
        .collect();
    (launchers, base)
}

/// A launcher for node rank 1 of `base`'s job, in place of a lost one.
fn replacement(base: Spec, dir: &TempDir) -> Launcher {
    let spec = Spec {
        node_rank: Some(1),
        ..base
    };
    Launcher::start(&spec, dir.path(), "replacement")
}

fn all_started(dir: &TempDir, round: u32, ranks: u32) -> bool {
    let seen = records(&dir.join("record"));
    (0..ranks).all(|r| seen.contains(&(r, round)))
}

fn a_launcher_killed_is_replaced() {
    let test = "etcd launcher killed";
    let _dog = Watchdog::new(test, Duration::from_secs(90));
    let Some(etcd) = Etcd::start(test) else {
        return;
    };
    let dir = TempDir::new("etcd-kill");
    // No failure round allowed: the round after the loss must not count.
    let (mut launchers, base) = two(
        &etcd,
        &dir,
        "kill",
        "run-long",
        |s| Spec {
            max_restarts: 0,
            stop_timeout: Duration::from_secs(1),
            ..s
        },
        None,
    );
    wait_until("round 0 on both nodes", Duration::from_secs(30), || {
        all_started(&dir, 0, 4)
    });
    launchers[1].signal(libc::SIGKILL);
    launchers[1].wait(Duration::from_secs(10));
    wait_until("node 0 sees the loss", Duration::from_secs(30), || {
        launchers[0].output().contains("restarting 1/0")
    });
    let loss_seen = std::time::Instant::now();
    let mut new = replacement(base, &dir);
    wait_until("round 1 on node 0", Duration::from_secs(30), || {
        records(&dir.join("record")).contains(&(0, 1))
    });
    // The lost node's orphans get --stop-timeout (1 s) + 1 s after the
    // loss is seen before the next round starts (less this test's polls).
    let waited = loss_seen.elapsed();
    assert!(waited >= Duration::from_millis(1800), "{waited:?}");
    for launcher in [&mut launchers[0], &mut new] {
        let status = launcher.wait(Duration::from_secs(40));
        let out = launcher.output();
        assert_eq!(status.code(), Some(0), "{out}");
        assert!(out.contains("in round 1 (0 failure rounds)"), "{out}");
    }
    assert!(launchers[0].output().contains("node 1 left the job"));
    let seen = records(&dir.join("record"));
    for rank in 0..4 {
        assert_eq!(rounds_of(&seen, rank), [0, 1], "rank {rank}: {seen:?}");
    }
}

fn sigterm_to_one_launcher_stops_every_node() {
    let test = "etcd launcher sigterm";
    let _dog = Watchdog::new(test, Duration::from_secs(60));
    let Some(etcd) = Etcd::start(test) else {
        return;
    };
    let dir = TempDir::new("etcd-term");
    let (mut launchers, _) = two(&etcd, &dir, "term", "run-long", |s| s, None);
    wait_until("round 0 on both nodes", Duration::from_secs(30), || {
        all_started(&dir, 0, 4)
    });
    launchers[1].signal(libc::SIGTERM);
    for (node, launcher) in launchers.iter_mut().enumerate() {
        let status = launcher.wait(Duration::from_secs(30));
        let out = launcher.output();
        assert_eq!(
            status.code(),
            Some(128 + libc::SIGTERM),
            "node {node}: {out}"
        );
        assert!(
            out.contains("stopped by SIGTERM on node 1"),
            "node {node}: {out}"
        );
    }
    let seen = records(&dir.join("record"));
    assert!(seen.iter().all(|(_, round)| *round == 0), "{seen:?}");
}

fn a_node_cut_off_stops_its_ranks() {
    let test = "etcd partition";
    let _dog = Watchdog::new(test, Duration::from_secs(90));
    let Some(etcd) = Etcd::start(test) else {
        return;
    };
    let dir = TempDir::new("etcd-cut");
    let proxy = Proxy::start(etcd.client_port());
    let adjust = |s| Spec {
        ttl_s: 4,
        stop_timeout: Duration::from_secs(1),
        ..s
    };
    let (mut launchers, base) = two(
        &etcd,
        &dir,
        "cut",
        "run-long",
        adjust,
        Some(&proxy.endpoint()),
    );
    wait_until("round 0 on both nodes", Duration::from_secs(30), || {
        all_started(&dir, 0, 4)
    });
    proxy.cut();
    // The cut-off node stops its ranks and, without etcd for the whole
    // TTL, exits naming the endpoint it was given.
    let status = launchers[1].wait(Duration::from_secs(20));
    let out = launchers[1].output();
    assert_eq!(status.code(), Some(99), "{out}");
    assert!(out.contains("round 0 stopped"), "{out}");
    assert!(
        out.contains(&format!("lost etcd at {}", proxy.endpoint())),
        "{out}"
    );
    wait_until("node 0 sees the loss", Duration::from_secs(30), || {
        launchers[0].output().contains("restarting 1/3")
    });
    let mut new = replacement(base, &dir);
    for launcher in [&mut launchers[0], &mut new] {
        let status = launcher.wait(Duration::from_secs(40));
        assert_eq!(status.code(), Some(0), "{}", launcher.output());
    }
    // Each rank ran round 0 once and round 1 once: nothing twice.
    let seen = records(&dir.join("record"));
    for rank in 0..4 {
        assert_eq!(rounds_of(&seen, rank), [0, 1], "rank {rank}: {seen:?}");
    }
}

fn etcd_restarted_within_the_ttl() {
    let test = "etcd restarted";
    let _dog = Watchdog::new(test, Duration::from_secs(60));
    let Some(mut etcd) = Etcd::start(test) else {
        return;
    };
    let dir = TempDir::new("etcd-restart");
    let (mut launchers, _) = two(
        &etcd,
        &dir,
        "restart",
        "steady",
        |s| Spec { ttl_s: 10, ..s },
        None,
    );
    wait_until("round 0 on both nodes", Duration::from_secs(30), || {
        all_started(&dir, 0, 4)
    });
    etcd.kill();
    std::thread::sleep(Duration::from_millis(300));
    etcd.run();
    for (node, launcher) in launchers.iter_mut().enumerate() {
        let status = launcher.wait(Duration::from_secs(30));
        let out = launcher.output();
        assert_eq!(status.code(), Some(0), "node {node}: {out}");
        assert!(out.contains("exited 0 in round 0"), "node {node}: {out}");
    }
}

fn etcd_gone_every_launcher_stops() {
    let test = "etcd gone";
    let _dog = Watchdog::new(test, Duration::from_secs(60));
    let Some(mut etcd) = Etcd::start(test) else {
        return;
    };
    let dir = TempDir::new("etcd-gone");
    let (mut launchers, _) = two(&etcd, &dir, "gone", "run-long", |s| s, None);
    wait_until("round 0 on both nodes", Duration::from_secs(30), || {
        all_started(&dir, 0, 4)
    });
    etcd.kill();
    for (node, launcher) in launchers.iter_mut().enumerate() {
        let status = launcher.wait(Duration::from_secs(20));
        let out = launcher.output();
        assert_eq!(status.code(), Some(99), "node {node}: {out}");
        assert!(out.contains("round 0 stopped"), "node {node}: {out}");
        assert!(
            out.contains(&format!("lost etcd at {}", etcd.endpoint())),
            "node {node}: {out}"
        );
    }
}

fn sigterm_while_waiting_for_etcd() {
    let _dog = Watchdog::new("etcd sigterm while joining", Duration::from_secs(60));
    let dir = TempDir::new("etcd-join-term");
    // Nothing listens there: the launcher keeps trying for --rdzv-timeout.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap();
    let spec = Spec {
        timeout_s: 600,
        ..Spec::new(
            &format!("127.0.0.1:{closed}"),
            &job_id("join"),
            2,
            "quick",
            &dir.join("record"),
        )
    };
    let mut launcher = Launcher::start(&spec, dir.path(), "node");
    wait_until("the launcher is up", Duration::from_secs(20), || {
        launcher.output().contains("monitors as threads")
    });
    std::thread::sleep(Duration::from_millis(500));
    let sent = std::time::Instant::now();
    launcher.signal(libc::SIGTERM);
    let status = launcher.wait(Duration::from_secs(10));
    let out = launcher.output();
    assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{out}");
    assert!(
        out.contains("stopped by SIGTERM while joining the job"),
        "{out}"
    );
    assert!(
        sent.elapsed() < Duration::from_secs(5),
        "{:?}",
        sent.elapsed()
    );
}

/// Two launchers (`--stop-timeout 1`, `max_restarts`) whose ranks run
/// `MODE:<mount>` on a FUSE mount of the test's: once round 0 runs on both
/// nodes and rank 3's child hangs on the mount, the ranks are told to go
/// on (`record.go`).
struct StuckJob {
    etcd: Etcd,
    mount: StuckMount,
    dir: TempDir,
    launchers: Vec<Launcher>,
    base: Spec,
    /// The hung child's pid.
    stuck: u32,
}

impl StuckJob {
    fn start(test: &str, tag: &str, mode: &str, max_restarts: u32) -> Option<StuckJob> {
        let etcd = Etcd::start(test)?;
        let mount = StuckMount::new(test)?;
        let dir = TempDir::new(&format!("etcd-{tag}"));
        let mode = format!("{mode}:{}", mount.dir().display());
        let adjust = |s| Spec {
            stop_timeout: Duration::from_secs(1),
            max_restarts,
            ..s
        };
        let (launchers, base) = two(&etcd, &dir, tag, &mode, adjust, None);
        wait_until("round 0 on both nodes", Duration::from_secs(30), || {
            all_started(&dir, 0, 4)
        });
        let stuck = mount
            .wait_for_stuck(Duration::from_secs(20))
            .expect("rank 3's child hangs on the FUSE mount");
        std::fs::write(dir.join("record.go"), b"").expect("go file");
        Some(StuckJob {
            etcd,
            mount,
            dir,
            launchers,
            base,
            stuck,
        })
    }
}

/// Ends the mount's connection and waits for the hung child `stuck` to be
/// gone (it dies of its pending SIGKILL).
fn release(mount: StuckMount, stuck: u32) {
    drop(mount);
    wait_until("the stuck child gone", Duration::from_secs(10), || {
        !fuse::alive(stuck)
    });
}

fn a_node_with_an_unkillable_process_leaves() {
    let test = "etcd node with an unkillable process";
    let _dog = Watchdog::new(test, Duration::from_secs(90));
    // Rank 3's child hangs on the mount; then rank 0 (node 0) fails.
    let Some(StuckJob {
        etcd,
        mount,
        dir,
        mut launchers,
        base,
        stuck,
    }) = StuckJob::start(test, "stuck", "stuck", 3)
    else {
        return;
    };
    // Node 1 stops its ranks (SIGTERM, SIGKILL after 1 s), waits the
    // launcher's bound after SIGKILL for the child, then leaves.
    let mut stop_seen = None;
    let mut node0_stopped = None;
    let began = std::time::Instant::now();
    let status = loop {
        if let Some(status) = launchers[1].child.child().try_wait().expect("try_wait") {
            break status;
        }
        if stop_seen.is_none() && launchers[1].output().contains("round 0 stopping") {
            stop_seen = Some(std::time::Instant::now());
        }
        if node0_stopped.is_none() && launchers[0].output().contains("restarting 1/3") {
            node0_stopped = Some(std::time::Instant::now());
        }
        assert!(
            began.elapsed() < Duration::from_secs(30),
            "node 1 still running after 30 s:\n{}",
            launchers[1].output()
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    let exited = std::time::Instant::now();
    let out = launchers[1].output();
    assert_eq!(status.code(), Some(1), "{out}");
    assert!(
        out.contains("1 process of round 0 still alive after SIGKILL"),
        "{out}"
    );
    assert!(
        out.contains("node 1 leaves the job (its lease revoked)"),
        "{out}"
    );
    assert!(
        out.contains("1 still alive after SIGKILL: left behind"),
        "{out}"
    );
    let stop_seen = stop_seen.expect("node 1 said it stopped round 0");
    let stop_to_exit = exited - stop_seen;
    // --stop-timeout (1 s) + the bound after SIGKILL (5 s), loosely.
    assert!(
        stop_to_exit > Duration::from_secs(5) && stop_to_exit < Duration::from_secs(15),
        "{stop_to_exit:?}"
    );
    // The child is still there, in uninterruptible sleep, SIGKILL and all:
    // a real unkillable process, not one that merely took its time.
    assert_eq!(fuse::state(stuck), Some('D'), "pid {stuck}");
    // Its lease revoked before it exited, node 1's member key is gone now,
    // not a TTL (3 s) later; node 0 is still waiting for a node 1, not
    // exited nor wedged on the old one.
    let member = |node: u32| format!("/nodeipc/{}/member/{node}", base.id);
    assert!(etcd.has_key(&member(0)), "etcd's gateway answers");
    assert!(!etcd.has_key(&member(1)), "{} still in etcd", member(1));
    assert!(
        launchers[0]
            .child
            .child()
            .try_wait()
            .expect("try_wait")
            .is_none(),
        "{}",
        launchers[0].output()
    );
    let node0_stopped = node0_stopped.expect("node 0 stopped round 0");
    let replaced = exited.elapsed();
    let mut new = replacement(base, &dir);
    wait_until("round 1 on node 0", Duration::from_secs(30), || {
        records(&dir.join("record")).contains(&(0, 1))
    });
    let node0_waited = node0_stopped.elapsed();
    for launcher in [&mut launchers[0], &mut new] {
        let status = launcher.wait(Duration::from_secs(40));
        let out = launcher.output();
        assert_eq!(status.code(), Some(0), "{out}");
        assert!(out.contains("in round 1 (1 failure rounds)"), "{out}");
    }
    // Each rank ran round 0 once and round 1 once; the stuck child, still
    // hung in round 1, never ran again.
    assert!(fuse::alive(stuck), "pid {stuck}");
    let seen = records(&dir.join("record"));
    for rank in 0..4 {
        assert_eq!(rounds_of(&seen, rank), [0, 1], "rank {rank}: {seen:?}");
    }
    // The connection ends with the mount: the child dies of its pending
    // SIGKILL without coming back to user space (no `woke` line).
    release(mount, stuck);
    let record = std::fs::read_to_string(dir.join("record")).unwrap_or_default();
    assert!(!record.contains("woke"), "{record}");
    eprintln!(
        "figures: node 1 exited {:.2} s after its round-0 stop began; node 0 waited {:.2} s from its stop to round 1 (node 1 gone {:.2} s into it; the replacement started {:.2} s after that)",
        stop_to_exit.as_secs_f64(),
        node0_waited.as_secs_f64(),
        exited
            .saturating_duration_since(node0_stopped)
            .as_secs_f64(),
        replaced.as_secs_f64()
    );
}

fn a_failure_on_a_node_that_leaves_still_counts() {
    let test = "etcd failure on a node that leaves";
    let _dog = Watchdog::new(test, Duration::from_secs(60));
    // Rank 3 (node 1) leaves a child hung on the mount, then fails; no
    // restart is allowed.
    let Some(StuckJob {
        etcd: _etcd,
        mount,
        dir,
        mut launchers,
        stuck,
        ..
    }) = StuckJob::start(test, "stuck-fail", "stuck-fail", 0)
    else {
        return;
    };
    let status = launchers[1].wait(Duration::from_secs(20));
    let out = launchers[1].output();
    assert_eq!(status.code(), Some(1), "{out}");
    assert!(out.contains("node 1 leaves the job"), "{out}");
    // The failure is the job's, though its node left: with no restart
    // left, node 0 ends with rank 3's status and cause at once, rather
    // than take the loss for a change of nodes and wait for a replacement.
    let status = launchers[0].wait(Duration::from_secs(10));
    let out = launchers[0].output();
    assert_eq!(status.code(), Some(5), "{out}");
    assert!(
        out.contains("restarts exhausted (0/0): node 1: rank 3 (local 1) exited with 5"),
        "{out}"
    );
    let seen = records(&dir.join("record"));
    assert!(seen.iter().all(|(_, round)| *round == 0), "{seen:?}");
    release(mount, stuck);
}

/// Another client that can write the job's prefix forges its state while
/// round 0 runs. A failure with exit status 0 is no launcher's: every
/// launcher ends with an error naming the bad number, never exit 0
/// (regression: both printed the failure and exited 0, so the scheduler saw
/// success). A failure with a cause holding a newline and `ESC[2J` ends the
/// job with its status, the cause printed escaped (regression: the newline
/// forged an "every rank on every node exited 0" line and the escape
/// reached the terminal).
fn a_forged_failure_in_etcd() {
    let test = "etcd forged failure";
    let _dog = Watchdog::new(test, Duration::from_secs(120));
    let Some(etcd) = Etcd::start(test) else {
        return;
    };
    let forged_cause = "forged\nnodeipc launch: exit 0: every rank on every node exited 0\u{1b}[2J";
    for (tag, code) in [("forged0", 0), ("forged3", 3)] {
        let dir = TempDir::new(&format!("etcd-{tag}"));
        let (mut launchers, base) = two(&etcd, &dir, tag, "run-long", |s| s, None);
        wait_until("round 0 on both nodes", Duration::from_secs(30), || {
            all_started(&dir, 0, 4)
        });
        let state = serde_json::json!({
            "config": {
                "min_nodes": base.nnodes, "max_nodes": base.max_nodes,
                "nproc": base.nproc, "max_restarts": base.max_restarts,
            },
            "round": 0, "failures": 0, "reason": "",
            "status": "failed", "node": 0, "rank": null,
            "cause": forged_cause, "code": code,
        });
        let key = format!("/nodeipc/{}/state", base.id);
        assert!(etcd.put(&key, state.to_string().as_bytes()), "{tag}: put");
        for (node, launcher) in launchers.iter_mut().enumerate() {
            let status = launcher.wait(Duration::from_secs(60));
            let out = launcher.output();
            let forged_line = out
                .lines()
                .any(|l| l.starts_with("nodeipc launch: exit 0: every rank on every node"));
            assert!(
                !out.contains('\u{1b}') && !forged_line,
                "{tag} node {node}: what etcd held reached the output raw:\n{out}"
            );
            if code == 0 {
                assert!(
                    !status.success(),
                    "{tag} node {node}: a forged failure with exit status 0 ended the launcher with 0:\n{out}"
                );
                assert!(out.contains("exit status 0"), "{tag} node {node}: {out}");
            } else {
                assert_eq!(status.code(), Some(code), "{tag} node {node}: {out}");
                assert!(
                    out.contains("forged\\nnodeipc launch: exit 0: every rank on every node exited 0\\u{1b}[2J"),
                    "{tag} node {node}: the cause is not shown escaped:\n{out}"
                );
            }
        }
    }
}
