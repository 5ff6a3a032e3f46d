//! A binary of its own, not a module of `tests/it/`: it watches this
//! process's descriptors, mappings and resident memory stay flat, which
//! tests running beside it in one binary would change. CI runs it by name
//! (`--test soak`).
//!
//! Soak: requests through 8 worker processes that leave their rank and log
//! on again through the handshake every so often, while the coordinator's
//! handshake server stays up. Descriptors, shared-memory mappings and
//! resident memory of the coordinator and of every worker must stay flat,
//! and no request may fail.
//!
//! CI runs the short version (20 000 requests, a reconnect every 2 000).
//! The full one — 1 000 000 requests, a reconnect every 10 000 — is
//! `#[ignore]`d; run it with
//! `cargo test --release -p nodeipc-integration-tests --test soak -- --ignored --nocapture`
//! (`NODEIPC_SOAK_REQUESTS` and `NODEIPC_SOAK_RECONNECT_EVERY` change the
//! figures of either).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc::channel;
use std::time::{Duration, Instant};

use nodeipc_channel::{All, Channel, ChannelServer, HandshakeOptions};
use nodeipc_proto::execute::{
    ExecuteRequest, ExecuteType, ForwardRequest, execute_request, execute_response,
};
use nodeipc_testkit::{TempDir, Watchdog, spawn_child, unique_name};

const WORKERS: u32 = 8;

/// Descriptors, shared-memory mappings and resident KiB of this process.
fn usage() -> (usize, usize, u64) {
    let fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count());
    let mapped = std::fs::read_to_string("/proc/self/maps")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("/memfd:") || l.contains("/dev/shm/"))
        .count();
    let rss = std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    (fds, mapped, rss)
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn request(sequence: u64) -> ExecuteRequest {
    ExecuteRequest {
        execute_type: ExecuteType::Execute as i32,
        sequence,
        payload: Some(execute_request::Payload::Forward(ForwardRequest {
            request_ids: vec![sequence],
            input: sequence.to_le_bytes().to_vec().into(),
        })),
    }
}

/// `(fds, mapped, rss KiB)` at a point of the run.
type Usage = (usize, usize, u64);

fn soak(requests: u64, every: u64) {
    let requests = env_or("NODEIPC_SOAK_REQUESTS", requests);
    let every = env_or("NODEIPC_SOAK_RECONNECT_EVERY", every);
    assert!(requests >= 4 * every, "the soak needs a few reconnects");
    let _dog = Watchdog::new(
        "soak",
        Duration::from_secs(120) + Duration::from_millis(requests),
    );
    let dir = TempDir::new("soak");
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    let config = Channel::anonymous(unique_name("soak"))
        .workers(WORKERS)
        .request_capacity(256)
        .response_slot_size(256)
        .timeout(Duration::from_secs(30));
    let coordinator = config.create().unwrap();
    let offer = coordinator.offer().unwrap();
    let socket = dir.join("logon.sock");
    let server = ChannelServer::bind(&socket, HandshakeOptions::default(), offer).unwrap();

    let (tx, lines) = channel::<(u32, String)>();
    let workers: Vec<_> = (0..WORKERS)
        .map(|rank| {
            let mut child = spawn_child(
                Command::new(env!("CARGO_BIN_EXE_soak_worker"))
                    .args([
                        socket.to_str().unwrap(),
                        &rank.to_string(),
                        &every.to_string(),
                    ])
                    .stdout(Stdio::piped()),
            );
            let stdout = child.child().stdout.take().unwrap();
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    let _ = tx.send((rank, line));
                }
            });
            (child.id(), child)
        })
        .collect();
    drop(tx);
    coordinator
        .wait_for_workers(Duration::from_secs(60))
        .unwrap();

    // Checkpoints mid-stint, once every worker has logged on again: after
    // the first reconnect and after the last.
    let first_check = every + every / 2;
    let last_check = (requests / every - 1) * every + every / 2;
    let mut at_start: Option<Usage> = None;
    let mut after_first: Option<Usage> = None;
    let mut after_last: Option<Usage> = None;
    // The coordinator's RSS mid-stint of every reconnect cycle.
    let mut rss_series: Vec<u64> = Vec::new();
    let started = Instant::now();
    at_start.get_or_insert_with(usage);
    for sequence in 0..requests {
        coordinator.send(&request(sequence)).unwrap();
        let responses = coordinator
            .recv(All)
            .unwrap_or_else(|e| panic!("request {sequence}: {e}"));
        for (rank, response) in responses.iter().enumerate() {
            let echoed = match &response.result {
                Some(execute_response::Result::Forward(f)) => f.output.as_ref(),
                _ => &[],
            };
            assert!(
                response.sequence == sequence && echoed == sequence.to_le_bytes(),
                "worker {rank} answered request {sequence} with {response:?}"
            );
        }
        if sequence % every == every / 2 {
            rss_series.push(usage().2);
        }
        if sequence == first_check {
            after_first = Some(usage());
        }
        if sequence == last_check {
            after_last = Some(usage());
        }
    }
    let elapsed = started.elapsed();
    drop(coordinator); // closes: every worker ends its last stint
    let mut served = 0;
    let mut worker_usage: Vec<Vec<Usage>> = vec![Vec::new(); WORKERS as usize];
    for (rank, line) in lines.iter() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            ["stats", _stint, fds, mapped, rss] => worker_usage[rank as usize].push((
                fds.parse().unwrap(),
                mapped.parse().unwrap(),
                rss.parse().unwrap(),
            )),
            ["served", n] => served += n.parse::<u64>().unwrap(),
            _ => panic!("worker {rank}: {line}"),
        }
    }
    for (_, mut child) in workers {
        assert!(child.wait_timeout(Duration::from_secs(30)).success());
    }
    let stats = server.stats();
    drop(server);

    let (c0, c1, c2) = (at_start.unwrap(), after_first.unwrap(), after_last.unwrap());
    println!(
        "soak: {requests} requests through {WORKERS} workers, a reconnect every {every}: {elapsed:.1?} ({:.0} requests/s); {} logons accepted, {} rejected, {} dropped",
        requests as f64 / elapsed.as_secs_f64(),
        stats.accepted,
        stats.rejected,
        stats.dropped
    );
    println!(
        "coordinator: fds {} / {} / {}, mapped regions {} / {} / {}, RSS {} / {} / {} KiB (start / after the first reconnect / after the last)",
        c0.0, c1.0, c2.0, c0.1, c1.1, c2.1, c0.2, c1.2, c2.2
    );
    let half = rss_series.len() / 2;
    println!(
        "coordinator RSS at each cycle (KiB): first {:?} … last {:?}; growth over the second half {} KiB",
        &rss_series[..rss_series.len().min(5)],
        &rss_series[rss_series.len().saturating_sub(5)..],
        rss_series[rss_series.len() - 1].saturating_sub(rss_series[half])
    );
    for (rank, seen) in worker_usage.iter().enumerate() {
        let (first, second, last) = (seen[0], seen[1], seen[seen.len() - 1]);
        println!(
            "worker {rank}: {} logons; fds {} / {} / {}, mapped regions {} / {} / {}, RSS {} / {} / {} KiB (first logon / second / last)",
            seen.len(),
            first.0,
            second.0,
            last.0,
            first.1,
            second.1,
            last.1,
            first.2,
            second.2,
            last.2
        );
        assert_eq!(
            seen.len() as u64,
            requests / every + 1,
            "worker {rank} logons"
        );
        assert_eq!(last.0, second.0, "worker {rank}: descriptors grew");
        assert_eq!(last.1, second.1, "worker {rank}: mappings grew");
        assert!(last.2 <= second.2 + 1024, "worker {rank}: RSS grew");
    }
    assert_eq!(served, requests * u64::from(WORKERS));
    assert_eq!(stats.accepted, u64::from(WORKERS) * (requests / every + 1));
    assert_eq!(stats.rejected + stats.dropped, 0);
    assert_eq!(c2.0, c1.0, "coordinator: descriptors grew");
    assert_eq!(c2.1, c1.1, "coordinator: mappings grew");
    assert!(c2.2 <= c1.2 + 2048, "coordinator: RSS grew");
}

#[test]
fn soak_short_20_000_requests_8_workers_reconnecting_every_2_000() {
    soak(20_000, 2_000);
}

#[test]
#[ignore = "the full soak: minutes in release; run with --ignored"]
fn soak_full_1_000_000_requests_8_workers_reconnecting_every_10_000() {
    soak(1_000_000, 10_000);
}
