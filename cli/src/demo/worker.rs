//! `nodeipc demo-worker`: one worker of the demo, spawned by `nodeipc demo`.

use std::path::PathBuf;

use clap::Args;
use nodeipc_barrier::{Group, GroupOptions};
use nodeipc_channel::Error as ChannelError;
use nodeipc_monitor::{MonitorClient, RankInfo};
use nodeipc_proto::execute::ExecuteRequest;

use super::{SOCKET_HEARTBEAT_EVERY, STEP_TIMEOUT, answer};
use crate::{CmdResult, Failure};

#[derive(Args)]
pub(crate) struct WorkerArgs {
    /// The coordinator's handshake socket.
    #[arg(long)]
    socket: PathBuf,
    /// This worker's monitor socket.
    #[arg(long)]
    monitor: PathBuf,
    /// This worker's rank in the channel (its group rank is one more).
    #[arg(long)]
    rank: u32,
    /// How many workers there are.
    #[arg(long)]
    workers: u32,
    /// The rank group's name.
    #[arg(long)]
    group: String,
    /// The coordinator's pid: the worker dies with it.
    #[arg(long)]
    parent: i32,
}

pub(crate) fn worker(args: WorkerArgs) -> CmdResult {
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
    if rustix::process::getppid().map(|p| p.as_raw_nonzero().get()) != Some(args.parent) {
        return Err(Failure::Error(
            "the coordinator exited before the worker started".into(),
        ));
    }
    let logon = nodeipc_channel::worker_logon(args.rank);
    let session = nodeipc_channel::connect(&args.socket, &logon, STEP_TIMEOUT)?;
    let mut channel = session.into_worker(args.rank, STEP_TIMEOUT)?;

    let mut group = Group::join(
        GroupOptions::new(&args.group, args.rank + 1, args.workers + 1).timeout(STEP_TIMEOUT),
    )?;
    group.barrier()?;
    group.all_gather(&std::process::id().to_le_bytes())?;

    let mut monitor = MonitorClient::connect(&args.monitor, STEP_TIMEOUT)?;
    monitor.init_with_heartbeat_region(&RankInfo::this_process(args.rank + 1, args.rank))?;
    monitor.heartbeat()?;

    let mut request = ExecuteRequest::default();
    let mut served = 0u64;
    loop {
        match channel.recv_into(&mut request) {
            Ok(()) => {}
            Err(ChannelError::Closed { .. }) => break,
            Err(e) => return Err(e.into()),
        }
        channel.respond(&answer(&request))?;
        served += 1;
        monitor.heartbeat_fast()?;
        if served.is_multiple_of(SOCKET_HEARTBEAT_EVERY) {
            monitor.heartbeat()?;
        }
    }
    // The coordinator read the monitors and met us here before it closed.
    group.barrier()?;
    Ok(())
}
