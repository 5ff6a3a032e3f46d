//! `nodeipc demo-worker`: one worker of the demo, spawned by `nodeipc demo`.

use std::path::PathBuf;

use clap::Args;
use nodeipc_barrier::{Group, GroupOptions};
use nodeipc_channel::Error as ChannelError;
use nodeipc_monitor::{MonitorClient, RankInfo};
use nodeipc_proto::execute::ExecuteRequest;

use super::{MAX_WORKERS, SOCKET_HEARTBEAT_EVERY, STEP_TIMEOUT, answer};
use crate::limits::u32_in;
use crate::{CmdResult, Failure};

#[derive(Args)]
pub(crate) struct WorkerArgs {
    /// The coordinator's handshake socket.
    #[arg(long)]
    socket: PathBuf,
    /// This worker's monitor socket.
    #[arg(long)]
    monitor: PathBuf,
    /// This worker's rank in the channel (its group rank is one more),
    /// below --workers.
    #[arg(long, value_parser = u32_in(0, MAX_WORKERS - 1))]
    rank: u32,
    /// How many workers there are.
    #[arg(long, value_parser = u32_in(1, MAX_WORKERS))]
    workers: u32,
    /// The rank group's name.
    #[arg(long)]
    group: String,
    /// The coordinator's pid: the worker dies with it.
    #[arg(long, value_parser = pid)]
    parent: i32,
}

/// A pid: 1 to `i32::MAX`, as `pid_t` holds it.
fn pid(text: &str) -> Result<i32, String> {
    let max = i32::MAX.unsigned_abs();
    u32_in(1, max)(text).and_then(|n| i32::try_from(n).map_err(|e| e.to_string()))
}

/// Every error a worker reports says it is a worker's, which one, and at
/// which step: a failed heartbeat is the monitor's connection failing, not
/// the channel's.
pub(crate) fn worker(args: WorkerArgs) -> CmdResult {
    let rank = args.rank;
    serve(args).map_err(|failure| match failure {
        Failure::Error(line) => Failure::Error(format!("demo worker {rank}: {line}")),
        other => other,
    })
}

fn serve(args: WorkerArgs) -> CmdResult {
    if args.rank >= args.workers {
        return Err(Failure::Error(format!(
            "--rank {} is not below --workers {}",
            args.rank, args.workers
        )));
    }
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
        .map_err(|e| failed("asking to die with the coordinator (prctl)", e))?;
    if rustix::process::getppid().map(|p| p.as_raw_nonzero().get()) != Some(args.parent) {
        return Err(Failure::Error(
            "the coordinator exited before the worker started".into(),
        ));
    }
    let logon = nodeipc_channel::worker_logon(args.rank);
    let session = nodeipc_channel::connect(&args.socket, &logon, STEP_TIMEOUT)
        .map_err(|e| failed(format!("logging on at {}", args.socket.display()), e))?;
    let mut channel: nodeipc_channel::Worker = session
        .into_worker(args.rank, STEP_TIMEOUT)
        .map_err(|e| failed("joining the channel", e))?;

    // Both below MAX_WORKERS + 1: no overflow.
    let mut group = Group::join(
        GroupOptions::new(&args.group, args.rank + 1, args.workers + 1).timeout(STEP_TIMEOUT),
    )
    .map_err(|e| failed("joining the rank group", e))?;
    group
        .barrier()
        .map_err(|e| failed("at the group's first barrier", e))?;
    group
        .all_gather(&std::process::id().to_le_bytes())
        .map_err(|e| failed("gathering the group's pids", e))?;

    let monitor_path = args.monitor.display().to_string();
    let to_monitor = |what: &str| format!("{what} its monitor at {monitor_path}");
    let mut monitor = MonitorClient::connect(&args.monitor, STEP_TIMEOUT)
        .map_err(|e| failed(to_monitor("connecting to"), e))?;
    monitor
        .init_with_heartbeat_region(&RankInfo::this_process(args.rank + 1, args.rank))
        .map_err(|e| failed(to_monitor("registering with"), e))?;
    monitor
        .heartbeat()
        .map_err(|e| failed(to_monitor("the first heartbeat to"), e))?;

    let mut request = ExecuteRequest::default();
    let mut served = 0u64;
    loop {
        match channel.recv_into(&mut request) {
            Ok(()) => {}
            Err(ChannelError::Closed { .. }) => break,
            Err(e) => return Err(failed(format!("receiving request {served}"), e)),
        }
        channel
            .respond(&answer(&request))
            .map_err(|e| failed(format!("answering request {}", request.sequence), e))?;
        served += 1;
        monitor.heartbeat_fast().map_err(|e| {
            failed(
                to_monitor(&format!("heartbeat {served} (shared memory) to")),
                e,
            )
        })?;
        if served.is_multiple_of(SOCKET_HEARTBEAT_EVERY) {
            monitor
                .heartbeat()
                .map_err(|e| failed(to_monitor(&format!("heartbeat {served} (socket) to")), e))?;
        }
    }
    // The coordinator read the monitors and met us here before it closed.
    group
        .barrier()
        .map_err(|e| failed("at the group's last barrier", e))?;
    Ok(())
}

fn failed(what: impl std::fmt::Display, error: impl std::fmt::Display) -> Failure {
    Failure::Error(format!("{what}: {error}"))
}
