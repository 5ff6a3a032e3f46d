//! One round: watch the ranks until they all succeed, one fails, a monitor
//! fires, a restarted rank stays away too long or a stop signal comes;
//! then stop every rank (SIGTERM, SIGKILL after the stop timeout) and
//! everything they left behind.

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};
use rustix::process::Signal;

use crate::backend::{RoundBackend, RoundPlan};
use crate::events::{Event, Events, describe_status};
use crate::monitors::Monitor;
use crate::options::LaunchOptions;
use crate::rank::Rank;
use crate::reap;
use crate::{Error, Result};
use nodeipc_fdpass::StopSignals;

/// How often the loop wakes with nothing to do: the backend, the restart
/// check and orphans are looked at this often.
const TICK: Duration = Duration::from_millis(100);

/// How often adopted orphans are looked for while a round runs.
const REAP_EVERY: Duration = Duration::from_secs(1);

/// How long a control request to a monitor thread may take.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(1);

/// Longest the launcher waits for processes to die after SIGKILL.
const AFTER_KILL: Duration = Duration::from_secs(5);

/// Why a round is over.
#[derive(Debug)]
pub(crate) enum RoundEnd {
    /// Every rank exited 0.
    Succeeded,
    /// The rank at this index failed, for this reason, this long into the
    /// round; `code` is the exit status it earned, `None` when that is how
    /// it ends once stopped (a rank its monitor signalled).
    Failed {
        index: usize,
        cause: String,
        after: Duration,
        code: Option<i32>,
    },
    /// A stop signal came.
    Interrupted { signal: i32 },
    /// The backend asked for a restart.
    Requested { reason: String },
}

/// What the round loop needs from the launch around it.
pub(crate) struct Ctx<'a> {
    pub(crate) options: &'a LaunchOptions,
    pub(crate) monitors: &'a mut [Monitor],
    pub(crate) signals: Option<&'a StopSignals>,
    pub(crate) events: &'a mut Events,
    pub(crate) backend: &'a mut dyn RoundBackend,
    /// Which local ranks registered with their monitor last round.
    pub(crate) registered_before: Vec<bool>,
}

/// Watches the ranks of `plan` until the round is over.
pub(crate) fn supervise(
    ctx: &mut Ctx<'_>,
    plan: &RoundPlan,
    ranks: &mut [Rank],
) -> Result<RoundEnd> {
    let started = Instant::now();
    let mut back = vec![false; ranks.len()];
    let mut last_reap = started;
    loop {
        let signal = wait(ctx.signals, ranks, TICK)?;
        if let Some(signal) = signal {
            ctx.events.emit(Event::Signal { signal })?;
            return Ok(RoundEnd::Interrupted { signal });
        }
        let mut all_done = true;
        for (index, rank) in ranks.iter_mut().enumerate() {
            let fresh = rank.status.is_none();
            let Some(ended) = rank.poll_exit()? else {
                all_done = false;
                if let Some(cause) = ctx.monitors[index].fired() {
                    // The monitor has signalled it: a failure now, not when
                    // (or whether) the rank gets round to dying.
                    return fired(ctx, plan, rank, index, cause, started);
                }
                continue;
            };
            if !fresh {
                continue;
            }
            let fired_cause = ctx.monitors[index].fired();
            if let Some(cause) = &fired_cause {
                ctx.events.emit(Event::MonitorFired {
                    restart: plan.restart,
                    rank: rank.global_rank,
                    cause: cause.clone(),
                })?;
            }
            ctx.events.emit(Event::RankExited {
                restart: plan.restart,
                rank: rank.global_rank,
                pid: rank.child.id(),
                code: ended.code,
                signal: ended.signal,
                after_s: rank.started.elapsed().as_secs_f64(),
            })?;
            if !ended.success() {
                let mut cause = describe_status(ended.code, ended.signal);
                if let Some(fired) = fired_cause {
                    cause = format!("{cause}: its monitor fired: {fired}");
                }
                let code = Some(ended.exit_code());
                return failed(ctx, plan, rank, index, cause, started, code);
            }
        }
        if all_done {
            return Ok(RoundEnd::Succeeded);
        }
        for (local_rank, monitor) in ctx.monitors.iter_mut().enumerate() {
            if let Some(why) = monitor.ended() {
                // The rank would go unwatched: the launch cannot go on.
                return Err(Error::MonitorEnded {
                    local_rank: u32::try_from(local_rank).unwrap_or(u32::MAX),
                    why,
                });
            }
        }
        if let Some(end) = restart_check(ctx, plan, ranks, &mut back, started)? {
            return Ok(end);
        }
        if let Some(reason) = ctx.backend.restart_requested() {
            ctx.events.emit(Event::RoundStopping {
                restart: plan.restart,
                reason: reason.clone(),
            })?;
            return Ok(RoundEnd::Requested { reason });
        }
        // Adopted orphans that exit while the ranks run are reaped about
        // once a second: each look reads every /proc/<pid>/stat.
        if ctx.options.own_all_children && last_reap.elapsed() >= REAP_EVERY {
            last_reap = Instant::now();
            reap::reap_orphans(&rank_pids(ranks));
        }
    }
}

fn fired(
    ctx: &mut Ctx<'_>,
    plan: &RoundPlan,
    rank: &Rank,
    index: usize,
    cause: String,
    started: Instant,
) -> Result<RoundEnd> {
    ctx.events.emit(Event::MonitorFired {
        restart: plan.restart,
        rank: rank.global_rank,
        cause: cause.clone(),
    })?;
    let cause = format!("its monitor fired: {cause}");
    failed(ctx, plan, rank, index, cause, started, None)
}

#[allow(clippy::too_many_arguments)]
fn failed(
    ctx: &mut Ctx<'_>,
    plan: &RoundPlan,
    rank: &Rank,
    index: usize,
    cause: String,
    started: Instant,
    code: Option<i32>,
) -> Result<RoundEnd> {
    ctx.events.emit(Event::RoundFailed {
        restart: plan.restart,
        rank: rank.global_rank,
        cause: cause.clone(),
        after_s: started.elapsed().as_secs_f64(),
    })?;
    Ok(RoundEnd::Failed {
        index,
        cause,
        after: started.elapsed(),
        code,
    })
}

/// `--rank-restart-timeout`: a rank that registered last round, running
/// again but not registered after the timeout, fails the round. A rank
/// that never spoke the protocol is watched for its exit only.
fn restart_check(
    ctx: &mut Ctx<'_>,
    plan: &RoundPlan,
    ranks: &[Rank],
    back: &mut [bool],
    started: Instant,
) -> Result<Option<RoundEnd>> {
    let Some(limit) = ctx.options.rank_restart_timeout else {
        return Ok(None);
    };
    if plan.restart == 0 || started.elapsed() < limit {
        return Ok(None);
    }
    for (index, rank) in ranks.iter().enumerate() {
        if back[index] || !ctx.registered_before[index] || rank.status.is_some() {
            continue;
        }
        if ctx.monitors[index].registered(CONTROL_TIMEOUT) {
            back[index] = true;
            continue;
        }
        let waited = started.elapsed();
        ctx.events.emit(Event::RankNotBack {
            restart: plan.restart,
            rank: rank.global_rank,
            waited_s: waited.as_secs_f64(),
        })?;
        let cause = format!(
            "did not register with its monitor again within --rank-restart-timeout {}",
            nodeipc_text::duration(limit)
        );
        return failed(ctx, plan, rank, index, cause, started, Some(1)).map(Some);
    }
    Ok(None)
}

/// Polls the live ranks' pidfds and the stop signals for up to `limit`;
/// the stop signal read, if one came.
fn wait(signals: Option<&StopSignals>, ranks: &[Rank], limit: Duration) -> Result<Option<i32>> {
    let mut fds: Vec<PollFd<'_>> = ranks
        .iter()
        .filter(|r| r.status.is_none())
        .map(|r| PollFd::new(&r.pidfd, PollFlags::IN))
        .collect();
    if let Some(signals) = signals {
        fds.push(PollFd::from_borrowed_fd(signals.as_fd(), PollFlags::IN));
    }
    let timeout = nodeipc_shm::wait::timespec(limit);
    match rustix::event::poll(&mut fds, Some(&timeout)) {
        Ok(_) | Err(rustix::io::Errno::INTR) => {}
        Err(e) => return Err(Error::io("poll on the ranks' pidfds", e)),
    }
    Ok(signals.and_then(StopSignals::read))
}

/// Waits up to `limit` for a stop signal (without ranks to watch).
pub(crate) fn wait_signal(signals: Option<&StopSignals>, limit: Duration) -> Result<Option<i32>> {
    match signals {
        Some(_) => wait(signals, &[], limit),
        None => {
            std::thread::sleep(limit);
            Ok(None)
        }
    }
}

fn rank_pids(ranks: &[Rank]) -> Vec<u32> {
    ranks.iter().map(|r| r.child.id()).collect()
}

/// What stopping a round took.
pub(crate) struct Stopped {
    /// A stop signal that came while stopping.
    pub(crate) signal: Option<i32>,
    /// Processes still alive after SIGKILL and [`AFTER_KILL`].
    pub(crate) stuck: u32,
}

/// Stops every rank and what they left: SIGTERM to each rank's process
/// group (and, when the launcher owns its children, to every orphan it
/// adopted), SIGKILL to what remains after the stop timeout (or at once on
/// a second stop signal); then every rank is reaped and every monitor told
/// (`close_connection`).
pub(crate) fn stop(ctx: &mut Ctx<'_>, plan: &RoundPlan, ranks: &mut [Rank]) -> Result<Stopped> {
    let began = Instant::now();
    let own = ctx.options.own_all_children;
    let pids = rank_pids(ranks);
    let mut signal = None;
    // Live ranks are counted by their pidfds, not found in /proc: a rank
    // that left its process group is still ours, and one that exits
    // between two looks is never taken for reaped.
    let remaining = |ranks: &mut [Rank]| -> Result<(usize, Vec<reap::Proc>)> {
        let mut live = 0;
        for rank in ranks.iter_mut() {
            if rank.poll_exit()?.is_none() {
                live += 1;
            }
        }
        Ok((live, reap::leftovers(&pids, own)))
    };
    let signal_ranks = |ranks: &[Rank], signal: Signal| {
        for rank in ranks.iter().filter(|r| r.status.is_none()) {
            rank.signal_group(signal);
            // ESRCH: it has just exited.
            let _ = rank.pidfd.send_signal(signal);
        }
    };
    signal_ranks(ranks, Signal::TERM);
    let deadline = began + ctx.options.stop_timeout;
    let (mut live, mut left) = remaining(ranks)?;
    let mut termed: Vec<u32> = Vec::new();
    while (live > 0 || !left.is_empty()) && Instant::now() < deadline && signal.is_none() {
        // Orphans adopted since the last look (a rank died and left them to
        // us) get their SIGTERM too, with the time that is left.
        let fresh: Vec<reap::Proc> = left
            .iter()
            .filter(|p| !termed.contains(&p.pid))
            .copied()
            .collect();
        reap::signal_all(&fresh, Signal::TERM);
        termed.extend(fresh.iter().map(|p| p.pid));
        let slice = deadline
            .saturating_duration_since(Instant::now())
            .min(Duration::from_millis(10));
        signal = wait(ctx.signals, ranks, slice)?;
        if own {
            reap::reap_orphans(&pids);
        }
        (live, left) = remaining(ranks)?;
    }
    let killed = u32::try_from(live + left.len()).unwrap_or(u32::MAX);
    let kill_deadline = Instant::now() + AFTER_KILL;
    while (live > 0 || !left.is_empty()) && Instant::now() < kill_deadline {
        signal_ranks(ranks, Signal::KILL);
        reap::signal_all(&left, Signal::KILL);
        std::thread::sleep(Duration::from_millis(5));
        if own {
            reap::reap_orphans(&pids);
        }
        (live, left) = remaining(ranks)?;
    }
    // A rank still alive after SIGKILL and AFTER_KILL (stuck in the
    // kernel) is not waited for: it would hang the launcher.
    let stuck = u32::try_from(live + left.len()).unwrap_or(u32::MAX);
    for rank in ranks.iter_mut() {
        if rank.status.is_some() {
            rank.reap();
        }
    }
    if own {
        reap::reap_orphans(&[]);
    }
    for monitor in ctx.monitors.iter() {
        // The rank is gone; the monitor may have seen it already. Either
        // way it now waits for the next round's rank.
        let _ = monitor.close_connection(CONTROL_TIMEOUT);
    }
    ctx.events.emit(Event::RoundStopped {
        restart: plan.restart,
        stop_ms: began.elapsed().as_secs_f64() * 1000.0,
        killed,
        stuck,
    })?;
    Ok(Stopped { signal, stuck })
}
