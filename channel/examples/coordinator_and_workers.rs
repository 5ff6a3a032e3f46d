//! A coordinator and two worker processes over the execute channel. The
//! parent creates the channel's regions (anonymous memfds: nothing is
//! named in `/dev/shm`) and serves the logon handshake on a socket
//! ([`ChannelServer`]); it starts two copies of this program as workers,
//! which log on ([`connect`] with [`worker_logon`]), receive the regions as
//! descriptors and join
//! ([`Session::into_worker`](nodeipc_channel::Session::into_worker)).
//! Then requests go round, gathered in the modes of the channel's grid:
//!
//! - [`All`]: every worker's `ExecuteResponse`, in rank order;
//! - [`Rank0AfterAll`]: every answer awaited and checked, rank 0's returned;
//! - [`First`]: the fastest worker's, the other's drained
//!   ([`Coordinator::drain`](nodeipc_channel::Coordinator::drain));
//! - [`Aggregated`] within a timeout of its own (`recv_timeout`): the
//!   execute schema's rule folds the answers into one.
//!
//! The workers take requests both ways a worker can: `Worker::recv`
//! (copied out and decoded), and `Worker::recv_in_place` (the frame itself
//! in the read-only ring, decoded from there, answered through the guard).
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
    Aggregated, All, Channel, ChannelServer, First, HandshakeOptions, Rank0AfterAll, Worker,
    connect, worker_logon,
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
/// One request per gather mode shown.
const ROUNDS: u64 = 4;
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
    let coordinator = Channel::anonymous(format!("/nodeipc-example-channel-{me}"))
        .workers(WORKERS)
        .timeout(STEP)
        .create()?;
    let server = ChannelServer::bind(
        dir.0.join("logon.sock"),
        HandshakeOptions::default(),
        coordinator.offer()?,
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
        coordinator.send(&ExecuteRequest {
            execute_type: ExecuteType::Execute as i32,
            sequence,
            payload: Some(execute_request::Payload::Forward(ForwardRequest {
                request_ids: vec![sequence],
                input: input.clone().into_bytes().into(),
            })),
        })?;
        let (mode, answers) = match sequence {
            1 => (
                "recv(All)",
                coordinator.recv(All)?.into_iter().enumerate().collect(),
            ),
            2 => (
                "recv(Rank0AfterAll)",
                vec![(0, coordinator.recv(Rank0AfterAll)?)],
            ),
            3 => {
                let (rank, first) = coordinator.recv(First)?;
                let drained = coordinator.drain()?;
                if drained != u64::from(WORKERS) - 1 {
                    return Err(format!("drained {drained} answers after the first").into());
                }
                ("recv(First), drain()", vec![(rank as usize, first)])
            }
            // The execute schema's rule: no failed pull-KV result, rank 0's.
            _ => (
                "recv_timeout(Aggregated)",
                vec![(0, coordinator.recv_timeout(Aggregated, STEP)?)],
            ),
        };
        if mode == "recv(All)" && answers.len() != WORKERS as usize {
            return Err(format!("{} responses for {WORKERS} workers", answers.len()).into());
        }
        for (rank, response) in &answers {
            check(*rank as u32, sequence, input.as_bytes(), response)?;
        }
        println!("coordinator: request {sequence} answered, gathered by {mode}");
    }

    drop(coordinator);
    workers.wait_success(STEP)?;
    println!("coordinator: channel closed, both workers saw it and exited 0");
    Ok(())
}

/// Checks worker `rank`'s answer to request `sequence` of `input`.
fn check(rank: u32, sequence: u64, input: &[u8], response: &ExecuteResponse) -> Result<()> {
    let expected = forward_output(rank, input);
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
    Ok(())
}

fn worker(socket: &Path) -> Result<()> {
    die_with_parent()?;
    let rank: u32 = std::env::var(RANK_ENV)?.parse()?;
    let session = connect(socket, &worker_logon(rank), STEP)?;
    let mut worker: Worker = session.into_worker(rank, STEP)?;

    for round in 0..ROUNDS {
        if round % 2 == 0 {
            let request = worker.recv()?;
            let answer = answer(rank, &request)?;
            worker.respond(&answer)?;
        } else {
            // Read where it lies in the ring, decoded from there, answered
            // through the guard (which releases the frame).
            let held = worker.recv_in_place()?;
            let answer = answer(rank, &held.decode()?)?;
            held.respond(&answer)?;
        }
    }
    match worker.recv() {
        Err(nodeipc_channel::Error::Closed { .. }) => {}
        Err(e) => return Err(format!("waiting for the close: {e}").into()),
        Ok(request) => return Err(format!("request {} after the last", request.sequence).into()),
    }
    println!(
        "worker {rank} (pid {}): answered {ROUNDS} requests, saw the close",
        std::process::id(),
    );
    Ok(())
}

/// Worker `rank`'s answer to a forward request.
fn answer(rank: u32, request: &ExecuteRequest) -> Result<ExecuteResponse> {
    let Some(execute_request::Payload::Forward(forward)) = &request.payload else {
        return Err(format!("request {}: not a forward", request.sequence).into());
    };
    Ok(ExecuteResponse {
        msg_type: ExecuteType::Execute as i32,
        sequence: request.sequence,
        result: Some(execute_response::Result::Forward(ForwardResponse {
            output: forward_output(rank, &forward.input).into(),
        })),
        ..ExecuteResponse::default()
    })
}

/// What worker `rank` answers to a forward request's input.
fn forward_output(rank: u32, input: &[u8]) -> Vec<u8> {
    let mut output = format!("worker {rank} read ").into_bytes();
    output.extend_from_slice(input);
    output
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
