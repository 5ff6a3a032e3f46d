//! The scale simulation (ignored by default; run it alone on a quiet
//! machine): N launchers with one short rank each against one etcd. Rank 0
//! fails 2 s into round 0; the figures are the time from that failure to
//! every other rank stopped and to every rank of round 1 started, and the
//! etcd requests per launcher per round.
//!
//! `cargo test --release -p nodeipc-launch --features etcd --test etcd_scale -- --ignored`
//! (`NODEIPC_SCALE=16,32` for other sizes).

mod etcd_kit;
mod fuse;

use std::time::Duration;

use etcd_kit::etcd::Etcd;
use etcd_kit::{Launcher, Spec, job_id};
use nodeipc_testkit::{TempDir, Watchdog};

fn main() {
    etcd_kit::main(&[(
        "restart_rounds_at_16_32_64_launchers",
        restart_rounds_at_scale,
        true,
    )]);
}

fn restart_rounds_at_scale() {
    let sizes: Vec<u32> = std::env::var("NODEIPC_SCALE")
        .unwrap_or_else(|_| "16,32,64".into())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    println!(
        "| launchers | failure → all stopped (ms) | failure → all restarted (ms) | etcd requests / launcher / round |"
    );
    println!("|---|---|---|---|");
    for n in sizes {
        one_size(n);
    }
}

fn one_size(n: u32) {
    let test = format!("etcd scale {n}");
    let _dog = Watchdog::new(&test, Duration::from_secs(300));
    let Some(etcd) = Etcd::start(&test) else {
        return;
    };
    let dir = TempDir::new("etcd-scale");
    let record = dir.join("record");
    let id = job_id("scale");
    let mut launchers: Vec<Launcher> = (0..n)
        .map(|node| {
            let spec = Spec {
                nproc: 1,
                max_restarts: 1,
                stop_timeout: Duration::from_secs(5),
                ttl_s: 10,
                timeout_s: 120,
                node_rank: Some(node),
                ..Spec::new(&etcd.endpoint(), &id, n, "sim", &record)
            };
            Launcher::start(&spec, dir.path(), &format!("node{node}"))
        })
        .collect();
    let mut requests = 0u64;
    let mut rounds = 0u64;
    for (node, launcher) in launchers.iter_mut().enumerate() {
        let status = launcher.wait(Duration::from_secs(200));
        let out = launcher.output();
        assert_eq!(status.code(), Some(0), "node {node}: {out}");
        let line = out
            .lines()
            .find(|l| l.contains("etcd requests over"))
            .expect("the launcher's request count");
        let numbers: Vec<u64> = line
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        requests += numbers[0];
        rounds += numbers[1];
    }
    let times = std::fs::read_to_string(dir.join("record.times")).expect("times");
    let at = |kind: &str| -> Vec<u128> {
        times
            .lines()
            .filter(|l| l.starts_with(kind))
            .filter_map(|l| l.split_whitespace().nth(3)?.parse().ok())
            .collect()
    };
    let fail = *at("fail").first().expect("the failure");
    let stops = at("stop");
    let starts = at("start");
    assert_eq!(stops.len() as u32, n - 1, "{times}");
    assert_eq!(starts.len() as u32, n, "{times}");
    let ms = |t: u128| (t.saturating_sub(fail)) as f64 / 1e6;
    println!(
        "| {n} | {:.0} | {:.0} | {:.1} |",
        ms(*stops.iter().max().unwrap()),
        ms(*starts.iter().max().unwrap()),
        // Both summed over launchers: per launcher and round.
        requests as f64 / rounds as f64,
    );
}
