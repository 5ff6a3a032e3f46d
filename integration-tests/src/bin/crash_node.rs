//! One process of the pipeline the crash harness (`tests/crash.rs`) kills at
//! random points: a coordinator, a worker or a rank monitor, as the demo runs
//! them (handshake, rank group with a descriptor broadcast, execute channel,
//! heartbeats to a monitor per worker), with every wait bounded by one step
//! timeout.
//!
//! `crash_node coordinator DIR GROUP WORKERS REQUESTS`
//! `crash_node worker DIR GROUP WORKERS RANK`
//! `crash_node monitor SOCKET`
//!
//! Each step reached is one line on stdout, `stage NAME`, flushed at once;
//! the last line is `exit ok` or `exit error VARIANT: MESSAGE` (exit codes 0
//! and 1). A process killed by a signal prints no `exit` line.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use nodeipc_barrier::{Group, GroupOptions};
use nodeipc_channel::{
    All, Channel, ChannelServer, Error as ChannelError, HandshakeOptions, Worker,
};
use nodeipc_monitor::{MonitorClient, MonitorConfig, MonitorServer, RankInfo};
use nodeipc_proto::execute::{
    ExecuteRequest, ExecuteResponse, ExecuteType, ForwardRequest, ForwardResponse, execute_request,
    execute_response,
};
use nodeipc_shm::Region;

/// The bound on every wait on a peer: rendezvous with a peer that is not
/// there yet (and may never come) can only end by it.
const STEP: Duration = Duration::from_millis(500);

type Failure = (String, String);

/// `(variant, message)` of any error of the layers.
fn failure<E: std::fmt::Debug + std::fmt::Display>(e: E) -> Failure {
    let debug = format!("{e:?}");
    let variant = debug
        .split([' ', '{', '('])
        .next()
        .unwrap_or("?")
        .to_owned();
    (variant, e.to_string())
}

fn stage(name: impl std::fmt::Display) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "stage {name}");
    let _ = out.flush();
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match args.as_slice() {
        ["coordinator", dir, group, workers, requests] => coordinator(
            Path::new(dir),
            group,
            workers.parse().expect("workers"),
            requests.parse().expect("requests"),
        ),
        ["worker", dir, group, workers, rank] => worker(
            Path::new(dir),
            group,
            workers.parse().expect("workers"),
            rank.parse().expect("rank"),
        ),
        ["monitor", socket] => monitor(Path::new(socket)),
        _ => {
            eprintln!("usage: see the source");
            return ExitCode::from(2);
        }
    };
    let mut out = std::io::stdout().lock();
    match result {
        Ok(()) => {
            let _ = writeln!(out, "exit ok");
            ExitCode::SUCCESS
        }
        Err((variant, message)) => {
            let _ = writeln!(out, "exit error {variant}: {message}");
            ExitCode::FAILURE
        }
    }
}

fn logon_socket(dir: &Path) -> PathBuf {
    dir.join("logon.sock")
}

/// The monitor socket of worker `rank`.
pub fn monitor_socket(dir: &Path, rank: u32) -> PathBuf {
    dir.join(format!("m{rank}.sock"))
}

fn request(sequence: u64) -> ExecuteRequest {
    ExecuteRequest {
        execute_type: ExecuteType::Execute as i32,
        sequence,
        payload: Some(execute_request::Payload::Forward(ForwardRequest {
            request_ids: vec![sequence],
            input: sequence.to_le_bytes().repeat(8).into(),
        })),
    }
}

fn answer(request: &ExecuteRequest, rank: u32) -> ExecuteResponse {
    let input = match &request.payload {
        Some(execute_request::Payload::Forward(f)) => f.input.to_vec(),
        _ => Vec::new(),
    };
    let mut output = rank.to_le_bytes().to_vec();
    output.extend(input);
    ExecuteResponse {
        msg_type: request.execute_type,
        sequence: request.sequence,
        result: Some(execute_response::Result::Forward(ForwardResponse {
            output: output.into(),
        })),
        ..ExecuteResponse::default()
    }
}

fn coordinator(dir: &Path, group: &str, workers: u32, requests: u64) -> Result<(), Failure> {
    let config = Channel::anonymous(format!("{group}-chan"))
        .workers(workers)
        .request_capacity(1024)
        .response_slot_size(1024)
        .timeout(STEP);
    let channel = config.create().map_err(failure)?;
    let offer = channel.offer().map_err(failure)?;
    let options = HandshakeOptions {
        logon_timeout: STEP,
        ..HandshakeOptions::default()
    };
    let server = ChannelServer::bind(logon_socket(dir), options, offer).map_err(failure)?;
    stage("listening");
    channel.wait_for_workers(STEP).map_err(failure)?;
    stage("workers-joined");
    let mut group =
        Group::join(GroupOptions::new(group, 0, workers + 1).timeout(STEP)).map_err(failure)?;
    stage("group-joined");
    group.barrier().map_err(failure)?;
    stage("barrier");
    drop(server); // every worker is in
    let shared = Region::anonymous(4096).map_err(failure)?;
    shared.write_at(0, b"broadcast").map_err(failure)?;
    let _mine = group
        .broadcast_fd(0, Some(shared.as_fd()))
        .map_err(failure)?;
    stage("fd-broadcast");
    for sequence in 0..requests {
        channel.send(&request(sequence)).map_err(failure)?;
        let responses = channel.recv(All).map_err(failure)?;
        for (rank, response) in responses.iter().enumerate() {
            if response != &answer(&request(sequence), rank as u32) {
                return Err((
                    "WrongAnswer".to_owned(),
                    format!("worker {rank} answered request {sequence} wrongly"),
                ));
            }
        }
        stage(format_args!("request {sequence}"));
    }
    drop(channel); // closes the channel: the workers finish and meet us once more
    stage("closed");
    group.barrier().map_err(failure)?;
    stage("done");
    Ok(())
}

fn worker(dir: &Path, group: &str, workers: u32, rank: u32) -> Result<(), Failure> {
    let session = nodeipc_channel::connect(
        logon_socket(dir),
        &nodeipc_channel::worker_logon(rank),
        STEP,
    )
    .map_err(failure)?;
    stage("logged-on");
    let mut channel: Worker = session.into_worker(rank, STEP).map_err(failure)?;
    stage("channel-joined");
    let mut group = Group::join(GroupOptions::new(group, rank + 1, workers + 1).timeout(STEP))
        .map_err(failure)?;
    stage("group-joined");
    group.barrier().map_err(failure)?;
    stage("barrier");
    let shared = Region::from_fd(group.broadcast_fd(0, None).map_err(failure)?).map_err(failure)?;
    let mut word = [0u8; 9];
    shared.read_at(0, &mut word).map_err(failure)?;
    if &word != b"broadcast" {
        return Err((
            "WrongFd".to_owned(),
            "the broadcast region holds other bytes".to_owned(),
        ));
    }
    drop(shared);
    stage("fd-received");
    let mut monitor = MonitorClient::connect(monitor_socket(dir, rank), STEP).map_err(failure)?;
    monitor
        .init_with_heartbeat_region(&RankInfo::this_process(rank + 1, rank))
        .map_err(failure)?;
    monitor.heartbeat().map_err(failure)?;
    stage("monitor-init");
    loop {
        let request = match channel.recv() {
            Ok(request) => request,
            Err(ChannelError::Closed { .. }) => break,
            Err(e) => return Err(failure(e)),
        };
        channel.respond(&answer(&request, rank)).map_err(failure)?;
        monitor.heartbeat_fast().map_err(failure)?;
        monitor.heartbeat().map_err(failure)?;
        stage(format_args!("request {}", request.sequence));
    }
    stage("closed");
    group.barrier().map_err(failure)?;
    // A monitor that died after the last request is noticed even now.
    monitor.heartbeat().map_err(failure)?;
    stage("done");
    Ok(())
}

fn monitor(socket: &Path) -> Result<(), Failure> {
    let config = MonitorConfig {
        check_interval: Duration::from_millis(50),
        ..MonitorConfig::default()
    };
    let mut server = MonitorServer::bind(socket, config).map_err(failure)?;
    server.handle_shutdown_signals().map_err(failure)?;
    stage("listening");
    server.run().map_err(failure)?;
    Ok(())
}
