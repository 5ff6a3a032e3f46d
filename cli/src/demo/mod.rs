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

mod files;
mod histogram;
mod signals;
mod summary;
mod worker;

use std::collections::VecDeque;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use nodeipc_barrier::{Group, GroupOptions};
use nodeipc_channel::{
    All, Channel, ChannelServer, Coordinator, Error as ChannelError, HandshakeOptions, SemKind,
};
use nodeipc_monitor::{MonitorConfig, Timeouts};
use nodeipc_monitor_host::{MonitorHandle, SpawnOptions};
use nodeipc_proto::execute::{
    ExecuteRequest, ExecuteResponse, ExecuteType, ForwardRequest, execute_request, execute_response,
};
use prost::Message;

pub(crate) use worker::{WorkerArgs, worker};

use self::files::DemoDir;
use self::histogram::Histogram;
use self::signals::Signals;
use self::summary::Summary;
use crate::limits::{u32_in, u64_in};
use crate::{CmdResult, Failure};

/// How long any one step may wait on a peer before the demo gives up.
pub(crate) const STEP_TIMEOUT: Duration = Duration::from_secs(10);
/// A worker heartbeats over its monitor socket once every this many requests
/// (and through the shared-memory fast path on every one).
pub(crate) const SOCKET_HEARTBEAT_EVERY: u64 = 1000;
/// The most workers: one process and one monitor each.
pub(crate) const MAX_WORKERS: u32 = 64;
/// The most requests: about three hours at 10 µs each. A demo longer than
/// that is a mistake, and a bound keeps every sum below overflow.
const MAX_REQUESTS: u64 = 1_000_000_000;
/// The largest payload of one request (64 MiB).
const MAX_PAYLOAD: u32 = 64 << 20;
/// How often a wait for the workers to log on looks for a signal or a worker
/// that exited.
const SETUP_SLICE: Duration = Duration::from_millis(100);

/// Which semaphores the demo's channel uses.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub(crate) enum Sems {
    /// Futex semaphores in the response region (the fast path).
    InRegion,
    /// glibc named semaphores (what C peers can share).
    Named,
}

impl Sems {
    /// The name `--sems` takes (`in-region`, `named`), as printed.
    pub(crate) fn name(self) -> String {
        self.to_possible_value()
            .map_or_else(String::new, |value| value.get_name().to_owned())
    }
}

#[derive(Args)]
pub(crate) struct DemoArgs {
    /// Worker processes to spawn, 1..=64.
    #[arg(long, default_value_t = 2, value_parser = u32_in(1, MAX_WORKERS))]
    workers: u32,
    /// Requests to send, each to every worker, 0..=10^9.
    #[arg(long, default_value_t = 10_000, value_parser = u64_in(0, MAX_REQUESTS))]
    requests: u64,
    /// Bytes of payload in each request, up to 64 MiB (and --depth times
    /// --payload up to 256 MiB).
    #[arg(long, default_value_t = 64, value_parser = u32_in(0, MAX_PAYLOAD))]
    payload: u32,
    /// Requests the coordinator may run ahead of the slowest worker, 1..=64.
    #[arg(long, default_value_t = 1, value_parser = u32_in(1, nodeipc_channel::MAX_DEPTH))]
    depth: u32,
    /// Which semaphores carry the hand-offs.
    #[arg(long, value_enum, default_value_t = Sems::InRegion)]
    sems: Sems,
}

/// Worker processes and monitors that are stopped and reaped however the
/// demo ends.
struct Cleanup {
    workers: Vec<Child>,
    monitors: Vec<MonitorHandle>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for child in &mut self.workers {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.monitors.clear();
    }
}

impl Cleanup {
    /// A worker that exited explains a failure better than the failure.
    fn check_workers(&mut self) -> CmdResult {
        for (rank, child) in self.workers.iter_mut().enumerate() {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(Failure::Error(format!(
                    "worker {rank} exited early ({status}); its reason is on the line above"
                )));
            }
        }
        Ok(())
    }

    /// `error`, or the exit of a worker when one is behind it.
    fn explain(&mut self, error: impl Into<Failure>) -> Failure {
        self.check_workers().err().unwrap_or_else(|| error.into())
    }
}

pub(crate) fn run(args: DemoArgs) -> CmdResult {
    // Every number was range-checked by clap; the one bound across two of
    // them is checked here, before anything is made.
    crate::limits::check_ring(args.payload.into(), args.depth)?;
    let signals = Signals::install()?;
    let result = run_until_done(&args, &signals);
    // Everything is stopped and removed by now; a signal explains whatever
    // failed after it arrived (workers killed by the same Ctrl-C, say).
    signals.check()?;
    result
}

fn run_until_done(args: &DemoArgs, signals: &Signals) -> CmdResult {
    // Locals drop in the reverse order of these declarations, however this
    // ends: first the workers are killed and the monitors stopped (so no
    // worker reports "rank 0 left" for a stop of ours), then the group,
    // channel and handshake server close (giving their descriptors back),
    // and last the directory goes (removing it needs descriptors too).
    let demo_dir = DemoDir::create()?;
    let server: ChannelServer;
    let mut coordinator: Coordinator;
    let mut group: Group;
    let mut cleanup = Cleanup {
        workers: Vec::new(),
        monitors: Vec::new(),
    };
    let dir = demo_dir.path().to_owned();
    let tag = demo_dir.tag().to_owned();
    let name = format!("/nodeipc-demo-{tag}");
    let frame = forward(0, payload(0, args.payload as usize)).encoded_len() + 64;
    let config = Channel::anonymous(&name)
        .workers(args.workers)
        .depth(args.depth)
        .sems(match args.sems {
            Sems::InRegion => SemKind::InRegion,
            Sems::Named => SemKind::Named,
        })
        .request_capacity(frame.max(1024))
        .response_slot_size(1024)
        .timeout(STEP_TIMEOUT);
    coordinator = config.create()?;
    let offer = coordinator.offer()?;
    let socket = dir.join("logon.sock");
    server = ChannelServer::bind(&socket, HandshakeOptions::default(), offer)?;

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
    let exe = std::env::current_exe()
        .map_err(|e| Failure::Error(format!("finding this program (/proc/self/exe): {e}")))?;
    let group_name = format!("{name}-group");
    for rank in 0..args.workers {
        signals.check()?;
        let monitor_socket = dir.join(format!("monitor-{rank}.sock"));
        let options = SpawnOptions {
            die_with_parent: true,
            log_file: Some(demo_dir.create_log(rank)?),
            ..SpawnOptions::default()
        };
        cleanup.monitors.push(
            nodeipc_monitor_host::spawn_monitor_with(&monitor_config, &monitor_socket, options)
                .map_err(|e| {
                    Failure::Error(format!("starting the monitor of worker {rank}: {e}"))
                })?,
        );
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
            .spawn()
            .map_err(|e| {
                Failure::Error(format!("starting worker {rank} ({}): {e}", exe.display()))
            })?;
        cleanup.workers.push(child);
    }
    // In slices, so a signal or a worker that exited ends the wait early.
    let setup = Instant::now();
    loop {
        signals.check()?;
        let slice = STEP_TIMEOUT
            .saturating_sub(setup.elapsed())
            .min(SETUP_SLICE);
        match coordinator.wait_for_workers(slice) {
            Ok(()) => break,
            Err(ChannelError::Timeout { .. }) if setup.elapsed() < STEP_TIMEOUT => {
                cleanup.check_workers()?;
            }
            Err(e) => return Err(cleanup.explain(e)),
        }
    }
    signals.check()?;
    // The coordinator is rank 0 of the group, the workers 1..=N.
    group = Group::join(GroupOptions::new(&group_name, 0, args.workers + 1).timeout(STEP_TIMEOUT))
        .map_err(|e| cleanup.explain(e))?;
    group.barrier().map_err(|e| cleanup.explain(e))?;
    let pids = group
        .all_gather(&std::process::id().to_le_bytes())
        .map_err(|e| cleanup.explain(e))?;
    drop(server); // every worker is in: nobody else logs on

    let mut latencies = Histogram::new();
    let mut bytes = 0u64;
    let mut in_flight = VecDeque::with_capacity(args.depth as usize);
    let started = Instant::now();
    for sequence in 0..args.requests {
        signals.check()?;
        let request = forward(sequence, payload(sequence, args.payload as usize));
        let sent_bytes = (request.encoded_len() as u64 + 4) * u64::from(args.workers);
        bytes = bytes.saturating_add(sent_bytes);
        // What is kept of a request in flight: when, which, and its answer.
        in_flight.push_back(Expected {
            sent: Instant::now(),
            sequence,
            digest: digest(&request),
        });
        coordinator.send(&request).map_err(|e| cleanup.explain(e))?;
        if in_flight.len() >= args.depth as usize {
            let answered = gather(&mut coordinator, &mut in_flight, &mut latencies)
                .map_err(|e| cleanup.explain(e))?;
            bytes = bytes.saturating_add(answered);
        }
    }
    while !in_flight.is_empty() {
        signals.check()?;
        let answered = gather(&mut coordinator, &mut in_flight, &mut latencies)
            .map_err(|e| cleanup.explain(e))?;
        bytes = bytes.saturating_add(answered);
    }
    let elapsed = started.elapsed();

    let heartbeats: Vec<u64> = cleanup
        .monitors
        .iter()
        .enumerate()
        .map(|(rank, m)| {
            m.status()
                .map(|s| s.heartbeats)
                .map_err(|e| Failure::Error(format!("asking the monitor of worker {rank}: {e}")))
        })
        .collect::<Result<_, _>>()?;
    drop(coordinator); // closes the channel: the workers finish and meet us once more
    group.barrier().map_err(|e| cleanup.explain(e))?;
    for (rank, child) in cleanup.workers.iter_mut().enumerate() {
        let status = child
            .wait()
            .map_err(|e| Failure::Error(format!("waiting for worker {rank}: {e}")))?;
        if !status.success() {
            return Err(Failure::Error(format!(
                "worker {rank} exited with {status}"
            )));
        }
    }
    let transport = group.transport();
    drop(group);
    for (rank, monitor) in cleanup.monitors.drain(..).enumerate() {
        monitor
            .stop()
            .map_err(|e| Failure::Error(format!("stopping the monitor of worker {rank}: {e}")))?;
    }
    for rank in 0..args.workers {
        let _ = std::fs::remove_file(dir.join(format!("monitor-{rank}.log")));
    }
    signals.check()?;
    Summary {
        workers: args.workers,
        requests: args.requests,
        payload: args.payload,
        depth: args.depth,
        sems: args.sems,
        elapsed,
        latencies: &latencies,
        bytes,
        heartbeats: &heartbeats,
        ranks: pids.len(),
        transport: match transport {
            nodeipc_fdpass::Transport::Pidfd => "pidfd_getfd",
            nodeipc_fdpass::Transport::ScmRights => "SCM_RIGHTS",
        },
        leftovers: summary::leftovers(&tag, &dir),
    }
    .print();
    Ok(())
}

/// What the coordinator keeps of a request until its answers are in.
struct Expected {
    sent: Instant,
    sequence: u64,
    digest: Vec<u8>,
}

/// Gathers the oldest request's answers and checks every one of them.
fn gather(
    coordinator: &mut Coordinator,
    in_flight: &mut VecDeque<Expected>,
    latencies: &mut Histogram,
) -> Result<u64, Failure> {
    let Some(expected) = in_flight.pop_front() else {
        return Ok(0);
    };
    let responses = coordinator.recv(All)?;
    let nanos = u64::try_from(expected.sent.elapsed().as_nanos()).unwrap_or(u64::MAX);
    latencies.record(nanos);
    let mut bytes = 0u64;
    for (rank, response) in responses.iter().enumerate() {
        bytes = bytes.saturating_add(response.encoded_len() as u64 + 4);
        let output = match &response.result {
            Some(execute_response::Result::Forward(forward)) => &forward.output[..],
            _ => &[],
        };
        if response.sequence != expected.sequence || output != expected.digest {
            return Err(Failure::Error(format!(
                "worker {rank} answered request {} wrongly (sequence {}, digest {})",
                expected.sequence,
                response.sequence,
                hex(output)
            )));
        }
    }
    Ok(bytes)
}

/// Bytes as lowercase hex digits, the first 64 bytes at most.
fn hex(bytes: &[u8]) -> String {
    let shown: String = bytes.iter().take(64).map(|b| format!("{b:02x}")).collect();
    if bytes.len() > 64 {
        format!("{shown}… ({} bytes)", bytes.len())
    } else {
        shown
    }
}

pub(crate) fn forward(sequence: u64, input: Vec<u8>) -> ExecuteRequest {
    ExecuteRequest {
        execute_type: ExecuteType::Execute as i32,
        sequence,
        payload: Some(execute_request::Payload::Forward(ForwardRequest {
            request_ids: vec![sequence],
            input: input.into(),
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
