//! nvidia-resiliency-ext's workload control: what the ranks asked for
//! (`RankMonitorClient.send_workload_control_request`, over their monitor
//! connections), read from the monitors when a round ends, as NVRx's
//! launcher applies them at its next rendezvous. `ShutdownWorkload` ends
//! the job with no restart, on every node (across nodes, through the job's
//! state in etcd); `ExcludeThisNode` takes this node out (its launcher
//! leaves: the other nodes go on where `--nnodes` allows, and on one node
//! the job ends, saying why); `Continue` is acknowledged. Of several, a
//! shutdown comes first.

use std::time::Duration;

use crate::Result;
use crate::events::Event;
use crate::round::Ctx;

/// How long a monitor may take to answer the status query.
const STATUS_TIMEOUT: Duration = Duration::from_secs(5);

/// What the requests come to.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Nothing stops the launch.
    Go,
    /// The launch ends: its exit status, why, and whether for the whole
    /// job (a shutdown) or for this node only (an exclusion).
    Finish {
        exit_code: i32,
        summary: String,
        shutdown: bool,
    },
}

/// `WorkloadAction`'s name in events.
fn name(action: i32) -> &'static str {
    match action {
        2 => "shutdown_workload",
        1 => "exclude_this_node",
        _ => "continue",
    }
}

/// Reads every local monitor's request (local rank `i` is global rank
/// `rank_offset + i`), reports each, and says what they come to for a
/// round that would end with `round_code`.
pub(crate) fn requested(ctx: &mut Ctx<'_>, rank_offset: u32, round_code: i32) -> Result<Verdict> {
    let mut worst: Option<(i32, u32, String)> = None;
    let asked: Vec<(u32, (i32, String))> = ctx
        .monitors
        .iter()
        .enumerate()
        .filter_map(|(local, monitor)| {
            let request = monitor.status(STATUS_TIMEOUT).ok()?.workload_request?;
            Some((rank_offset.saturating_add(local as u32), request))
        })
        .collect();
    for (rank, (action, description)) in asked {
        ctx.events.emit(Event::WorkloadRequest {
            rank,
            action: name(action),
            description: description.clone(),
        })?;
        if worst.as_ref().is_none_or(|(a, ..)| action > *a) {
            worst = Some((action, rank, description));
        }
    }
    Ok(match worst {
        Some((2, rank, why)) => Verdict::Finish {
            exit_code: round_code,
            summary: format!("not restarted: rank {rank} asked to shut the workload down: {why}"),
            shutdown: true,
        },
        Some((1, rank, why)) => Verdict::Finish {
            exit_code: 1,
            summary: format!(
                "rank {rank} asked to exclude this node ({why}): this node leaves the job, \
                 which on one node ends it"
            ),
            shutdown: false,
        },
        _ => Verdict::Go,
    })
}
