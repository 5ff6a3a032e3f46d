//! Restart rounds across launchers through a real etcd on loopback: a hang
//! on the last node restarts every node once; a rank failing every round
//! ends every launcher with its status; two failures at once make one
//! round; refusals at joining.

mod etcd_kit;
mod fuse;

use std::time::Duration;

use etcd_kit::etcd::Etcd;
use etcd_kit::{Launcher, Spec, job_id, records, rounds_of};
use nodeipc_testkit::{TempDir, Watchdog};

fn main() {
    etcd_kit::main(&[
        (
            "two_nodes_a_hang_on_the_last_node_restarts_every_node_once",
            two_nodes_a_hang_restarts_every_node_once,
            false,
        ),
        (
            "three_nodes_a_hang_on_the_last_node_restarts_every_node_once",
            three_nodes_a_hang_restarts_every_node_once,
            false,
        ),
        (
            "a_rank_failing_every_round_ends_every_launcher_with_its_status_after_k_rounds",
            a_rank_failing_every_round_ends_every_launcher_with_its_status,
            false,
        ),
        (
            "two_failures_at_once_make_one_round",
            two_failures_at_once_make_one_round,
            false,
        ),
        (
            "a_failure_reaches_the_other_nodes_before_its_node_has_stopped",
            a_failure_reaches_the_other_nodes_before_its_node_has_stopped,
            false,
        ),
        (
            "a_launcher_whose_config_differs_is_refused_naming_the_field",
            a_launcher_whose_config_differs_is_refused_naming_the_field,
            false,
        ),
        (
            "a_duplicate_node_rank_is_refused",
            a_duplicate_node_rank_is_refused,
            false,
        ),
        (
            "a_finished_job_id_is_refused_while_its_state_is_kept",
            a_finished_job_id_is_refused_while_its_state_is_kept,
            false,
        ),
    ]);
}

const HANG_MONITOR: &str = r#"{ "initial_heartbeat_timeout_ms": 1500, "heartbeat_timeout_ms": 1500,
    "check_interval_ms": 50, "termination_signal": "SIGTERM" }"#;

fn a_hang_restarts_every_node_once(nnodes: u32) {
    let test = format!("etcd hang {nnodes} nodes");
    let _dog = Watchdog::new(&test, Duration::from_secs(90));
    let Some(etcd) = Etcd::start(&test) else {
        return;
    };
    let dir = TempDir::new("etcd-hang");
    let record = dir.join("record");
    let id = job_id("hang");
    let mut launchers: Vec<Launcher> = (0..nnodes)
        .map(|node| {
            let spec = Spec {
                node_rank: Some(node),
                local_addr: Some(format!("127.0.0.{}", node + 2)),
                monitor: Some(HANG_MONITOR.into()),
                ..Spec::new(&etcd.endpoint(), &id, nnodes, "hang-last", &record)
            };
            Launcher::start(&spec, dir.path(), &format!("node{node}"))
        })
        .collect();
    every_node_exits_0_saying(
        &mut launchers,
        "every rank on every node exited 0 in round 1",
    );
    let seen = records(&record);
    every_rank_ran_rounds_0_and_1(&seen, nnodes * 2);
    let last = launchers.last().unwrap().output();
    assert!(
        last.contains("initial heartbeat timeout"),
        "the last node's monitor fired: {last}"
    );
}

/// Waits for every launcher and checks each exited 0 with `says` in its output.
fn every_node_exits_0_saying(launchers: &mut [Launcher], says: &str) {
    for (node, launcher) in launchers.iter_mut().enumerate() {
        let status = launcher.wait(Duration::from_secs(60));
        let out = launcher.output();
        assert_eq!(status.code(), Some(0), "node {node}: {out}");
        assert!(out.contains(says), "node {node}: {out}");
    }
}

/// Every one of the job's `ranks` saw `NODEIPC_RESTART_COUNT` 0, then 1.
fn every_rank_ran_rounds_0_and_1(seen: &[(u32, u32)], ranks: u32) {
    for rank in 0..ranks {
        assert_eq!(rounds_of(seen, rank), [0, 1], "rank {rank}: {seen:?}");
    }
}

fn a_failure_reaches_the_other_nodes_before_its_node_has_stopped() {
    let test = "etcd failure before the stop";
    let _dog = Watchdog::new(test, Duration::from_secs(90));
    let Some(etcd) = Etcd::start(test) else {
        return;
    };
    let dir = TempDir::new("etcd-early");
    let record = dir.join("record");
    let id = job_id("early");
    let mut launchers: Vec<Launcher> = (0..2)
        .map(|node| {
            let spec = Spec {
                node_rank: Some(node),
                stop_timeout: Duration::from_secs(4),
                ..Spec::new(&etcd.endpoint(), &id, 2, "fail-stubborn", &record)
            };
            Launcher::start(&spec, dir.path(), &format!("node{node}"))
        })
        .collect();
    // Node 1's stop lasts the stop timeout (4 s: a rank ignores SIGTERM);
    // node 0 must be told of the failure before that stop is over.
    etcd_kit::wait_until("node 0 stopping", Duration::from_secs(30), || {
        launchers[0].output().contains("round 0 stopping")
    });
    let failing = launchers[1].output();
    assert!(
        !failing.contains("round 0 stopped"),
        "node 0 heard of the failure only after node 1's stop: {failing}"
    );
    every_node_exits_0_saying(
        &mut launchers,
        "every rank on every node exited 0 in round 1 (1 failure rounds)",
    );
    let last = launchers[1].output();
    assert!(last.contains("1 needed SIGKILL"), "{last}");
}

fn two_nodes_a_hang_restarts_every_node_once() {
    a_hang_restarts_every_node_once(2);
}

fn three_nodes_a_hang_restarts_every_node_once() {
    a_hang_restarts_every_node_once(3);
}

fn a_rank_failing_every_round_ends_every_launcher_with_its_status() {
    let test = "etcd fail every round";
    let _dog = Watchdog::new(test, Duration::from_secs(90));
    let Some(etcd) = Etcd::start(test) else {
        return;
    };
    let dir = TempDir::new("etcd-fail");
    let record = dir.join("record");
    let id = job_id("fail");
    let k = 2;
    let mut launchers: Vec<Launcher> = (0..2)
        .map(|node| {
            let spec = Spec {
                max_restarts: k,
                ..Spec::new(&etcd.endpoint(), &id, 2, "fail-last", &record)
            };
            Launcher::start(&spec, dir.path(), &format!("node{node}"))
        })
        .collect();
    for (node, launcher) in launchers.iter_mut().enumerate() {
        let status = launcher.wait(Duration::from_secs(60));
        let out = launcher.output();
        assert_eq!(status.code(), Some(3), "node {node}: {out}");
        assert!(
            out.contains("restarts exhausted (2/2)")
                && out.contains("rank 3 (local 1) exited with 3"),
            "node {node}: {out}"
        );
    }
    let seen = records(&record);
    assert_eq!(rounds_of(&seen, 3), [0, 1, 2], "{seen:?}");
}

fn two_failures_at_once_make_one_round() {
    let test = "etcd two failures";
    let _dog = Watchdog::new(test, Duration::from_secs(90));
    let Some(etcd) = Etcd::start(test) else {
        return;
    };
    let dir = TempDir::new("etcd-two");
    let record = dir.join("record");
    let id = job_id("two");
    let mut launchers: Vec<Launcher> = (0..2)
        .map(|node| {
            let spec = Spec {
                max_restarts: 1,
                ..Spec::new(&etcd.endpoint(), &id, 2, "fail-two", &record)
            };
            Launcher::start(&spec, dir.path(), &format!("node{node}"))
        })
        .collect();
    // One failure round out of one allowed: a second would have exhausted
    // the restarts.
    every_node_exits_0_saying(&mut launchers, "in round 1 (1 failure rounds)");
    let seen = records(&record);
    every_rank_ran_rounds_0_and_1(&seen, 4);
}

fn a_launcher_whose_config_differs_is_refused_naming_the_field() {
    let test = "etcd config mismatch";
    let _dog = Watchdog::new(test, Duration::from_secs(60));
    let Some(etcd) = Etcd::start(test) else {
        return;
    };
    let dir = TempDir::new("etcd-mismatch");
    let record = dir.join("record");
    let id = job_id("mismatch");
    let first = Spec::new(&etcd.endpoint(), &id, 2, "run-long", &record);
    let mut one = Launcher::start(&first, dir.path(), "first");
    let key = format!("/nodeipc/{id}/member/0");
    etcd_kit::wait_until("the first launcher's rank", Duration::from_secs(20), || {
        etcd.has_key(&key)
    });
    for (field, spec) in [
        (
            "--nproc",
            Spec {
                nproc: 3,
                ..first.clone()
            },
        ),
        (
            "--max-restarts",
            Spec {
                max_restarts: 7,
                ..first.clone()
            },
        ),
    ] {
        let mut other = Launcher::start(&spec, dir.path(), "other");
        let status = other.wait(Duration::from_secs(20));
        let out = other.output();
        assert_eq!(status.code(), Some(99), "{out}");
        assert!(
            out.contains(&format!("{field} ")) && out.contains("differs from the job's"),
            "{out}"
        );
    }
    one.signal(libc::SIGTERM);
    one.wait(Duration::from_secs(20));
}

fn a_duplicate_node_rank_is_refused() {
    let test = "etcd duplicate node rank";
    let _dog = Watchdog::new(test, Duration::from_secs(60));
    let Some(etcd) = Etcd::start(test) else {
        return;
    };
    let dir = TempDir::new("etcd-dup");
    let record = dir.join("record");
    let id = job_id("dup");
    let spec = Spec {
        node_rank: Some(1),
        ..Spec::new(&etcd.endpoint(), &id, 2, "run-long", &record)
    };
    let mut one = Launcher::start(&spec, dir.path(), "first");
    let key = format!("/nodeipc/{id}/member/1");
    etcd_kit::wait_until("the first launcher's rank", Duration::from_secs(20), || {
        etcd.has_key(&key)
    });
    let mut two = Launcher::start(&spec, dir.path(), "second");
    let status = two.wait(Duration::from_secs(20));
    let out = two.output();
    assert_eq!(status.code(), Some(99), "{out}");
    assert!(out.contains("--node-rank 1 is taken by launcher"), "{out}");
    // Without --node-rank while another launcher gave one: refused too.
    let unranked = Spec {
        node_rank: None,
        ..spec.clone()
    };
    let mut three = Launcher::start(&unranked, dir.path(), "third");
    let status = three.wait(Duration::from_secs(20));
    let out = three.output();
    assert_eq!(status.code(), Some(99), "{out}");
    assert!(out.contains("on every launcher or on none"), "{out}");
    one.signal(libc::SIGTERM);
    one.wait(Duration::from_secs(20));
}

fn a_finished_job_id_is_refused_while_its_state_is_kept() {
    let test = "etcd id reused";
    let _dog = Watchdog::new(test, Duration::from_secs(60));
    let Some(etcd) = Etcd::start(test) else {
        return;
    };
    let dir = TempDir::new("etcd-reuse");
    let record = dir.join("record");
    let id = job_id("reuse");
    let spec = Spec::new(&etcd.endpoint(), &id, 1, "quick", &record);
    let mut one = Launcher::start(&spec, dir.path(), "first");
    let status = one.wait(Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "{}", one.output());
    let mut again = Launcher::start(&spec, dir.path(), "again");
    let status = again.wait(Duration::from_secs(30));
    let out = again.output();
    assert_eq!(status.code(), Some(99), "{out}");
    assert!(
        out.contains("has ended already (round 0, succeeded)"),
        "{out}"
    );
    assert!(out.contains("give another --rdzv-id"), "{out}");
}
