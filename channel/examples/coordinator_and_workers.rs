//! A coordinator and two worker processes over the execute channel. The
//! parent creates the channel's regions (anonymous memfds: nothing is
//! named in `/dev/shm`) and serves the logon handshake on a socket; it
//! starts two copies of this program as workers, which log on
//! ([`connect`] with [`worker_logon`]), receive the regions as descriptors
//! and join ([`Session::into_worker`](nodeipc_channel::Session::into_worker)).
//! Then a few requests go round, both ways the channel offers:
//!
//! - typed: [`Coordinator::send`] of an `ExecuteRequest`, `Worker::recv`,
//!   `Worker::respond` with an `ExecuteResponse`, [`Coordinator::recv_all`];
//! - raw bytes, read in place: [`Coordinator::send_bytes`],
//!   `Worker::recv_in_place` (the request's frame itself, no copy),
//!   `InPlace::respond_bytes`, [`Coordinator::recv_all_bytes`].
//!
//! Dropping the coordinator closes the channel: each worker's next `recv`
//! is `Error::Closed`, and it exits 0.
//!
//! ```text
//! cargo run -p nodeipc-channel --example coordinator_and_workers
//! ```
//!
//! The socket lives in a private 0700 directory under the temporary
//! directory, removed at the end; every call is bounded; the workers die
//! with the parent (`PR_SET_PDEATHSIG`) and the parent kills them on every
//! error path. Exits 0 only when every response was checked.

use std::error::Error;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode};
use std::time::{Duration, Instant};

use nodeipc_channel::{
    ChannelConfig, Coordinator, HandshakeOptions, HandshakeServer, Worker, connect, worker_logon,
};
use nodeipc_proto::execute::{
    ExecuteRequest, ExecuteResponse, ExecuteType, ForwardRequest, ForwardResponse, execute_request,
    execute_response,
};

/// Names the handshake socket (and so the role) in a worker.
const SOCKET_ENV: &str = "NODEIPC_EXAMPLE_CHANNEL_SOCKET";
const RANK_ENV: &str = "NODEIPC_EXAMPLE_RANK";
const PARENT_ENV: &str = "NODEIPC_EXAMPLE_PARENT";
const WORKERS: u32 = 2;
const ROUNDS: u64 = 3;
/// The bound on every channel call.
const STEP: Duration = Duration::from_secs(5);

type Result<T> = std::result::Result<T, Box<dyn Error>>;

fn main() -> ExitCode {
    let (who, result) = match std::env::var_os(SOCKET_ENV) {
        Some(socket) => ("worker", worker(Path::new(&socket))),
        None => ("coordinator", coordinator()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("coordinator_and_workers ({who}): {e}");
            ExitCode::FAILURE
        }
    }
}

fn coordinator() -> Result<()> {
    let me = std::process::id();
    // Locals drop in reverse: workers killed (on an error) before the
    // channel and server close, and the directory goes last.
    let dir = PrivateDir::create(&format!("nodeipc-example-channel-{me}"))?;
    let config =
        ChannelConfig::new(format!("/nodeipc-example-channel-{me}"), WORKERS).timeout(STEP);
    let coordinator = Coordinator::create_anonymous(config)?;
    let offer = coordinator.offer()?;
    let server = HandshakeServer::bind(
        dir.0.join("logon.sock"),
        HandshakeOptions::default(),
        move |logon, peer| offer.decide(logon, peer),
    )?;
    let mut workers = Workers(Vec::new());
    let exe = std::env::current_exe()?;
    for rank in 0..WORKERS {
        workers.0.push(
            Command::new(&exe)
                .env(SOCKET_ENV, server.path())
                .env(RANK_ENV, rank.to_string())
                .env(PARENT_ENV, me.to_string())
                .spawn()?,
        );
    }
    // In slices, so a worker that failed to log on ends the wait early.
    let deadline = Instant::now() + STEP;
    loop {
        match coordinator.wait_for_workers(Duration::from_millis(100)) {
            Ok(()) => break,
            Err(nodeipc_channel::Error::Timeout { .. }) if Instant::now() < deadline => {
                workers.check_running()?;
            }
            Err(e) => return Err(e.into()),
        }
    }
    drop(server);
    println!("coordinator {me}: {WORKERS} workers logged on through the handshake");

    for sequence in 1..=ROUNDS {
        let input = format!("prompt {sequence}");
        let request = ExecuteRequest {
            execute_type: ExecuteType::Execute as i32,
            sequence,
            payload: Some(execute_request::Payload::Forward(ForwardRequest {
                request_ids: vec![sequence],
                input: input.clone().into_bytes().into(),
            })),
        };
        coordinator.send(&request)?;
        let responses = coordinator.recv_all()?;
        if responses.len() != WORKERS as usize {
            return Err(format!("{} responses for {WORKERS} workers", responses.len()).into());
        }
        for (rank, response) in responses.iter().enumerate() {
            let expected = forward_output(rank as u32, input.as_bytes());
            let output = match &response.result {
                Some(execute_response::Result::Forward(ForwardResponse { output })) => output,
                other => return Err(format!("worker {rank}: unexpected result {other:?}").into()),
            };
            if response.sequence != sequence || output[..] != expected[..] {
                return Err(format!(
                    "worker {rank}: sequence {} output {:?}, expected {sequence} {:?}",
                    response.sequence,
                    String::from_utf8_lossy(output),
                    String::from_utf8_lossy(&expected)
                )
                .into());
            }
        }
    }
    println!("coordinator: {ROUNDS} typed requests answered by both workers (send, recv_all)");

    for round in 1..=ROUNDS {
        let frame: Vec<u8> = (0..64u64).map(|i| (i * round) as u8).collect();
        coordinator.send_bytes(&frame)?;
        let gathered = coordinator.recv_all_bytes()?;
        for rank in 0..WORKERS {
            let expected = checksum_reply(rank, &frame);
            if gathered.get(rank) != Some(&expected[..]) {
                return Err(format!(
                    "worker {rank}: bytes {:?}, expected {expected:?}",
                    gathered.get(rank)
                )
                .into());
            }
        }
    }
    println!(
        "coordinator: {ROUNDS} raw frames read in place and answered (send_bytes, recv_all_bytes)"
    );

    drop(coordinator);
    workers.wait_success(STEP)?;
    println!("coordinator: channel closed, both workers saw it and exited 0");
    Ok(())
}

fn worker(socket: &Path) -> Result<()> {
    die_with_parent()?;
    let rank: u32 = std::env::var(RANK_ENV)?.parse()?;
    let session = connect(socket, &worker_logon(rank), STEP)?;
    let mut worker: Worker = session.into_worker(rank, STEP)?;

    for _ in 0..ROUNDS {
        let request = worker.recv()?;
        let Some(execute_request::Payload::Forward(forward)) = &request.payload else {
            return Err(format!("request {}: not a forward", request.sequence).into());
        };
        worker.respond(&ExecuteResponse {
            msg_type: ExecuteType::Execute as i32,
            sequence: request.sequence,
            result: Some(execute_response::Result::Forward(ForwardResponse {
                output: forward_output(rank, &forward.input).into(),
            })),
            ..ExecuteResponse::default()
        })?;
    }
    for _ in 0..ROUNDS {
        let request = worker.recv_in_place()?;
        let reply = checksum_reply(rank, request.bytes());
        request.respond_bytes(&reply)?;
    }
    match worker.recv() {
        Err(nodeipc_channel::Error::Closed { .. }) => {}
        Err(e) => return Err(format!("waiting for the close: {e}").into()),
        Ok(request) => return Err(format!("request {} after the last", request.sequence).into()),
    }
    println!(
        "worker {rank} (pid {}): answered {} requests, saw the close",
        std::process::id(),
        2 * ROUNDS
    );
    Ok(())
}

/// What worker `rank` answers to a forward request's input.
fn forward_output(rank: u32, input: &[u8]) -> Vec<u8> {
    let mut output = format!("worker {rank} read ").into_bytes();
    output.extend_from_slice(input);
    output
}

/// What worker `rank` answers to a raw frame: its rank, the frame's length
/// and the sum of its bytes, little-endian.
fn checksum_reply(rank: u32, frame: &[u8]) -> [u8; 12] {
    let sum: u32 = frame.iter().map(|&b| u32::from(b)).sum();
    let mut reply = [0u8; 12];
    reply[0..4].copy_from_slice(&rank.to_le_bytes());
    reply[4..8].copy_from_slice(&(frame.len() as u32).to_le_bytes());
    reply[8..12].copy_from_slice(&sum.to_le_bytes());
    reply
}

/// The worker asks the kernel to kill it when its parent goes, then checks
/// the parent had not already gone before it asked.
fn die_with_parent() -> Result<()> {
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
    let parent: i32 = std::env::var(PARENT_ENV)?.parse()?;
    if rustix::process::getppid().map(|p| p.as_raw_nonzero().get()) != Some(parent) {
        return Err("the coordinator exited before the worker started".into());
    }
    Ok(())
}

/// A 0700 directory of ours under the temporary directory, removed on drop.
struct PrivateDir(PathBuf);

impl PrivateDir {
    fn create(name: &str) -> Result<PrivateDir> {
        let path = std::env::temp_dir().join(name);
        std::fs::DirBuilder::new().mode(0o700).create(&path)?;
        Ok(PrivateDir(path))
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The worker processes: any still running when this is dropped are
/// killed and reaped.
struct Workers(Vec<Child>);

impl Workers {
    fn check_running(&mut self) -> Result<()> {
        for child in &mut self.0 {
            if let Some(status) = child.try_wait()? {
                return Err(format!("worker {} exited early ({status})", child.id()).into());
            }
        }
        Ok(())
    }

    /// Waits up to `limit` for every worker to exit with status 0.
    fn wait_success(&mut self, limit: Duration) -> Result<()> {
        let deadline = Instant::now() + limit;
        while let Some(child) = self.0.last_mut() {
            if let Some(status) = child.try_wait()? {
                let pid = child.id();
                self.0.pop();
                if !status.success() {
                    return Err(format!("worker {pid} exited with {status}").into());
                }
                continue;
            }
            if Instant::now() >= deadline {
                return Err(format!("a worker still running after {limit:?}").into());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
