//! `nodeipc demo`: the main job, end to end, with nothing to set up.
//!
//! The coordinator (this process) makes an execute channel over anonymous
//! regions and serves its handshake on a socket in a private directory; it
//! spawns one rank monitor per worker and N worker processes (this same
//! binary, `demo-worker`). Each worker logs on and receives the regions as
//! descriptors, joins the rank group (coordinator and workers meet at a
//! barrier and all-gather their pids), connects to its monitor, then serves
//! M execute requests, heartbeating as it goes. The coordinator checks every
//! answer, prints requests per second, latency percentiles, bytes moved and
//! heartbeats, and removes everything it made — nothing it makes has a name
//! by the time requests flow, so a crash leaves nothing either.

mod worker;

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use nodeipc_barrier::{Group, GroupOptions};
use nodeipc_channel::{ChannelConfig, Coordinator, HandshakeOptions, HandshakeServer, SemKind};
use nodeipc_monitor::{MonitorConfig, MonitorHandle, SpawnOptions, Timeouts};
use nodeipc_proto::execute::{
    ExecuteRequest, ExecuteResponse, ExecuteType, ForwardRequest, execute_request, execute_response,
};
use prost::Message;

pub(crate) use worker::{WorkerArgs, worker};

use crate::{CmdResult, Failure};

/// How long any one step may wait on a peer before the demo gives up.
pub(crate) const STEP_TIMEOUT: Duration = Duration::from_secs(10);
/// A worker heartbeats over its monitor socket once every this many requests
/// (and through the shared-memory fast path on every one).
pub(crate) const SOCKET_HEARTBEAT_EVERY: u64 = 1000;

/// Which semaphores the demo's channel uses.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub(crate) enum Sems {
    /// Futex semaphores in the response region (the fast path).
    InRegion,
    /// glibc named semaphores (what C peers can share).
    Named,
}

#[derive(Args)]
pub(crate) struct DemoArgs {
    /// Worker processes to spawn.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    workers: u32,
    /// Requests to send, each to every worker.
    #[arg(long, default_value_t = 10_000)]
    requests: u64,
    /// Bytes of payload in each request.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(0..=(64 << 20)))]
    payload: u32,
    /// Requests the coordinator may run ahead of the slowest worker.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    depth: u32,
    /// Which semaphores carry the hand-offs.
    #[arg(long, value_enum, default_value_t = Sems::InRegion)]
    sems: Sems,
}

/// Worker processes and monitors that are stopped and reaped however the
/// demo ends; the private directory goes with them.
struct Cleanup {
    workers: Vec<Child>,
    monitors: Vec<MonitorHandle>,
    dir: PathBuf,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for child in &mut self.workers {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.monitors.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Cleanup {
    fn check_workers(&mut self) -> CmdResult {
        for (rank, child) in self.workers.iter_mut().enumerate() {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(Failure::Error(format!(
                    "worker {rank} exited early: {status}"
                )));
            }
        }
        Ok(())
    }
}

pub(crate) fn run(args: DemoArgs) -> CmdResult {
    let tag = format!("{}-{:x}", std::process::id(), nonce());
    let dir = private_dir(&tag)?;
    let mut cleanup = Cleanup {
        workers: Vec::new(),
        monitors: Vec::new(),
        dir: dir.clone(),
    };
    let name = format!("/nodeipc-demo-{tag}");
    let frame = forward(0, &payload(0, args.payload as usize)).encoded_len() + 64;
    let config = ChannelConfig::new(&name, args.workers)
        .depth(args.depth)
        .sems(match args.sems {
            Sems::InRegion => SemKind::InRegion,
            Sems::Named => SemKind::Named,
        })
        .request_capacity(frame.max(1024))
        .response_slot_size(1024)
        .timeout(STEP_TIMEOUT);
    let mut coordinator = Coordinator::create_anonymous(config)?;
    let offer = coordinator.offer()?;
    let socket = dir.join("logon.sock");
    let server =
        HandshakeServer::bind(&socket, HandshakeOptions::default(), move |logon, peer| {
            offer.decide(logon, peer)
        })?;

    let monitor_config = MonitorConfig {
        timeouts: Timeouts {
            initial_heartbeat: Some(Duration::from_secs(30)),
            heartbeat: Some(Duration::from_secs(30)),
            ..Timeouts::default()
        },
        check_interval: Duration::from_millis(100),
        restart_expected: false,
        ..MonitorConfig::default()
    };
    let exe = std::env::current_exe()?;
    let group_name = format!("{name}-group");
    for rank in 0..args.workers {
        let monitor_socket = dir.join(format!("monitor-{rank}.sock"));
        let options = SpawnOptions {
            die_with_parent: true,
            log_file: Some(dir.join(format!("monitor-{rank}.log"))),
            ..SpawnOptions::default()
        };
        cleanup.monitors.push(nodeipc_monitor::spawn_monitor_with(
            &monitor_config,
            &monitor_socket,
            options,
        )?);
        let child = Command::new(&exe)
            .arg("demo-worker")
            .arg("--socket")
            .arg(&socket)
            .arg("--monitor")
            .arg(&monitor_socket)
            .args([
                "--rank",
                &rank.to_string(),
                "--workers",
                &args.workers.to_string(),
            ])
            .args([
                "--group",
                &group_name,
                "--parent",
                &std::process::id().to_string(),
            ])
            .spawn()?;
        cleanup.workers.push(child);
    }
    coordinator.wait_for_workers(STEP_TIMEOUT).map_err(|e| {
        cleanup
            .check_workers()
            .err()
            .unwrap_or(Failure::Error(e.to_string()))
    })?;
    // The coordinator is rank 0 of the group, the workers 1..=N.
    let mut group =
        Group::join(GroupOptions::new(&group_name, 0, args.workers + 1).timeout(STEP_TIMEOUT))?;
    group.barrier()?;
    let pids = group.all_gather(&std::process::id().to_le_bytes())?;
    drop(server); // every worker is in: nobody else logs on

    let mut latencies = Vec::with_capacity(args.requests as usize);
    let mut bytes = 0u64;
    let mut in_flight = std::collections::VecDeque::new();
    let started = Instant::now();
    for sequence in 0..args.requests {
        let request = forward(sequence, &payload(sequence, args.payload as usize));
        bytes += (request.encoded_len() as u64 + 4) * u64::from(args.workers);
        in_flight.push_back((Instant::now(), request));
        coordinator.send(&in_flight.back().expect("just pushed").1)?;
        if in_flight.len() >= args.depth as usize {
            bytes += gather(&mut coordinator, &mut in_flight, &mut latencies)?;
        }
    }
    while !in_flight.is_empty() {
        bytes += gather(&mut coordinator, &mut in_flight, &mut latencies)?;
    }
    let elapsed = started.elapsed();

    let heartbeats: Vec<u64> = cleanup
        .monitors
        .iter()
        .map(|m| m.status().map(|s| s.heartbeats))
        .collect::<Result<_, _>>()?;
    drop(coordinator); // closes the channel: the workers finish and meet us once more
    group.barrier()?;
    for (rank, child) in cleanup.workers.iter_mut().enumerate() {
        let status = child.wait()?;
        if !status.success() {
            return Err(Failure::Error(format!(
                "worker {rank} exited with {status}"
            )));
        }
    }
    let transport = group.transport();
    drop(group);
    for monitor in cleanup.monitors.drain(..) {
        monitor.stop()?;
    }
    for rank in 0..args.workers {
        let _ = std::fs::remove_file(dir.join(format!("monitor-{rank}.log")));
    }
    let leftovers = leftovers(&tag, &dir);
    Summary {
        args: &args,
        elapsed,
        latencies: &mut latencies,
        bytes,
        heartbeats: &heartbeats,
        ranks: pids.len(),
        transport: format!("{transport:?}"),
        leftovers,
    }
    .print();
    Ok(())
}

/// Gathers the oldest request's answers and checks every one of them.
fn gather(
    coordinator: &mut Coordinator,
    in_flight: &mut std::collections::VecDeque<(Instant, ExecuteRequest)>,
    latencies: &mut Vec<Duration>,
) -> Result<u64, Failure> {
    let (sent, request) = in_flight.pop_front().expect("a request in flight");
    let responses = coordinator.recv_all()?;
    latencies.push(sent.elapsed());
    let expected = digest(&request);
    let mut bytes = 0;
    for (rank, response) in responses.iter().enumerate() {
        bytes += response.encoded_len() as u64 + 4;
        let output = match &response.result {
            Some(execute_response::Result::Forward(forward)) => &forward.output[..],
            _ => &[],
        };
        if response.sequence != request.sequence || output != expected {
            return Err(Failure::Error(format!(
                "worker {rank} answered request {} wrongly (sequence {}, digest {output:?})",
                request.sequence, response.sequence
            )));
        }
    }
    Ok(bytes)
}

pub(crate) fn forward(sequence: u64, input: &[u8]) -> ExecuteRequest {
    ExecuteRequest {
        execute_type: ExecuteType::Execute as i32,
        sequence,
        payload: Some(execute_request::Payload::Forward(ForwardRequest {
            request_ids: vec![sequence],
            input: input.to_vec().into(),
        })),
    }
}

/// Deterministic bytes that differ from one request to the next.
fn payload(sequence: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64 ^ sequence.wrapping_mul(0x9e37_79b9)) as u8)
        .collect()
}

/// What a worker answers: the payload's length and a checksum of it, so the
/// coordinator knows every byte arrived.
pub(crate) fn digest(request: &ExecuteRequest) -> Vec<u8> {
    let input = match &request.payload {
        Some(execute_request::Payload::Forward(f)) => &f.input[..],
        _ => &[],
    };
    let sum = input
        .iter()
        .fold(0u32, |acc, &b| acc.rotate_left(5) ^ u32::from(b));
    let mut out = (input.len() as u32).to_le_bytes().to_vec();
    out.extend(sum.to_le_bytes());
    out
}

pub(crate) fn answer(request: &ExecuteRequest) -> ExecuteResponse {
    ExecuteResponse {
        msg_type: request.execute_type,
        sequence: request.sequence,
        result: Some(execute_response::Result::Forward(
            nodeipc_proto::execute::ForwardResponse {
                output: digest(request).into(),
            },
        )),
        ..ExecuteResponse::default()
    }
}

fn private_dir(tag: &str) -> Result<PathBuf, Failure> {
    let dir = std::env::temp_dir().join(format!("nodeipc-demo-{tag}"));
    std::fs::create_dir(&dir)?;
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
    Ok(dir)
}

/// What the demo left under `/dev/shm` or in its directory (nothing, we hope).
fn leftovers(tag: &str, dir: &Path) -> Vec<String> {
    let mut found: Vec<String> = std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.contains(tag))
                .collect()
        })
        .unwrap_or_default();
    if let Ok(entries) = std::fs::read_dir(dir) {
        found.extend(entries.flatten().map(|e| e.path().display().to_string()));
    }
    found
}

struct Summary<'a> {
    args: &'a DemoArgs,
    elapsed: Duration,
    latencies: &'a mut [Duration],
    bytes: u64,
    heartbeats: &'a [u64],
    ranks: usize,
    transport: String,
    leftovers: Vec<String>,
}

impl Summary<'_> {
    fn print(self) {
        self.latencies.sort_unstable();
        let percentile = |p: f64| {
            if self.latencies.is_empty() {
                Duration::ZERO
            } else {
                self.latencies[((self.latencies.len() - 1) as f64 * p).round() as usize]
            }
        };
        let args = self.args;
        println!(
            "nodeipc demo: {} workers, {} requests of {} payload bytes, depth {}, {:?} semaphores",
            args.workers, args.requests, args.payload, args.depth, args.sems
        );
        println!(
            "  handshake      {} workers logged on, regions passed as memfds",
            args.workers
        );
        println!(
            "  rank group     {} ranks met at a barrier (fd transport {})",
            self.ranks, self.transport
        );
        println!(
            "  requests/s     {:.0}",
            args.requests as f64 / self.elapsed.as_secs_f64().max(f64::MIN_POSITIVE)
        );
        println!(
            "  latency p50    {:.2} us",
            percentile(0.50).as_secs_f64() * 1e6
        );
        println!(
            "  latency p99    {:.2} us",
            percentile(0.99).as_secs_f64() * 1e6
        );
        println!(
            "  bytes moved    {} ({:.1} MiB)",
            self.bytes,
            self.bytes as f64 / (1 << 20) as f64
        );
        let beats: Vec<String> = self.heartbeats.iter().map(u64::to_string).collect();
        println!(
            "  heartbeats     {} (per worker, seen by its monitor)",
            beats.join(" ")
        );
        if self.leftovers.is_empty() {
            println!("  left behind    nothing");
        } else {
            println!("  left behind    {}", self.leftovers.join(" "));
        }
    }
}

fn nonce() -> u32 {
    let mut bytes = [0u8; 4];
    let _ = rustix::rand::getrandom(&mut bytes, rustix::rand::GetRandomFlags::empty());
    u32::from_le_bytes(bytes)
}
