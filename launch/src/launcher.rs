//! The launch: a private run directory, one monitor per local rank, then
//! rounds of N ranks until one round succeeds, restarts run out, or a stop
//! signal comes.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nodeipc_fdpass::StopSignals;
use nodeipc_fs::PrivateDir;
use nodeipc_monitor::HealthCheck;
use nodeipc_text::{duration, signal_name};

use crate::backend::{Begin, Decision, LocalBackend, RoundBackend, RoundReport, RoundResult};
use crate::events::{Event, Events};
use crate::monitors::Monitor;
use crate::options::LaunchOptions;
use crate::output::{self, Logs};
use crate::progress::{ProgressTracker, Verdict};
use crate::rank::Rank;
use crate::round::{self, Ctx, RoundEnd};
use crate::{Error, Result, health, reap, workload};

/// How long the launcher waits for a stop signal between two asks of a
/// backend that is waiting for the other nodes.
const POLL: Duration = Duration::from_millis(100);

/// How a launch ended.
#[derive(Debug)]
pub struct Outcome {
    /// The launcher's exit status: 0 when every rank of a round exited 0;
    /// the failing rank's exit status, or 128 + the signal that killed
    /// it, when restarts ran out; 128 + the signal that stopped the launch.
    pub exit_code: i32,
    /// Why, for people (names the rank and the cause on failure).
    pub summary: String,
    /// Restarts done.
    pub restarts: u32,
    /// Every event, in order.
    pub events: Vec<Event>,
}

/// Health checks for one local rank's monitor.
pub type HealthChecks<'a> = &'a dyn Fn(u32) -> Vec<Box<dyn HealthCheck>>;

/// Runs the launch with the local backend (this node alone) and the
/// health checks of `options.health`.
///
/// # Errors
/// Bad options, or a failure of the launcher itself (run directory,
/// monitor, spawn, events file); the ranks' own failures are an
/// [`Outcome`].
pub fn launch(options: &LaunchOptions) -> Result<Outcome> {
    let mut backend = LocalBackend::new(launch_id());
    launch_with(options, &mut backend, &|_| Vec::new())
}

/// A name unique to this launch: our pid and the time.
pub fn launch_id() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{}-{:x}", std::process::id(), nanos & 0xffff_ffff_ffff)
}

/// Runs the launch with `backend` deciding each round and `checks` giving
/// each local rank's monitor health checks beyond those of `options.health`.
///
/// # Errors
/// As [`launch`].
pub fn launch_with(
    options: &LaunchOptions,
    backend: &mut dyn RoundBackend,
    checks: HealthChecks<'_>,
) -> Result<Outcome> {
    options.validate()?;
    let mut events = Events::new(options.stderr_events, options.json_events.as_deref())?;
    let signals = match options.handle_signals {
        true => {
            Some(StopSignals::install().map_err(|e| Error::io("blocking the stop signals", e))?)
        }
        false => None,
    };
    if options.own_all_children {
        reap::become_subreaper().map_err(|e| Error::io("prctl(PR_SET_CHILD_SUBREAPER)", e))?;
    }
    let run_dir = run_dir(options)?;
    // A second set of the node's checks, run before each round (the
    // monitors' own run while ranks are registered). What cannot run was
    // reported once, below.
    let mut preflight = Vec::new();
    for local in 0..options.nproc {
        preflight.push(health::checks_for(options, local, &mut Events::discard())?);
    }
    let mut monitors = Vec::new();
    for local in 0..options.nproc {
        let socket = run_dir.path().join(format!("rank{local}.sock"));
        let mut local_checks = checks(local);
        local_checks.extend(health::checks_for(options, local, &mut events)?);
        monitors.push(Monitor::start(
            local,
            &socket,
            &options.monitor,
            local_checks,
            options.stderr_events,
        )?);
    }
    events.emit(Event::Launched {
        nproc: options.nproc,
        max_restarts: options.max_restarts,
        run_dir: run_dir.path().display().to_string(),
        monitors: "threads",
    })?;
    let mut ctx = Ctx {
        options,
        monitors: &mut monitors,
        signals: signals.as_ref(),
        events: &mut events,
        backend,
        registered_before: vec![false; options.nproc as usize],
    };
    let (exit_code, summary, restarts) = rounds(&mut ctx, &mut preflight)?;
    ctx.events.emit(Event::Finished {
        exit_code,
        summary: summary.clone(),
    })?;
    drop(ctx);
    for monitor in &mut monitors {
        monitor.stop();
    }
    drop(run_dir);
    Ok(Outcome {
        exit_code,
        summary,
        restarts,
        events: events.into_kept(),
    })
}

/// The rounds; (exit code, summary, restarts done).
fn rounds(
    ctx: &mut Ctx<'_>,
    preflight: &mut [Vec<Box<dyn HealthCheck>>],
) -> Result<(i32, String, u32)> {
    let options = ctx.options;
    let launch_started = Instant::now();
    let mut restart = 0;
    let mut logs: Option<Logs> = None;
    let (mut progress, warning) = ProgressTracker::start(&options.progress);
    if let Some(reason) = warning {
        ctx.events.emit(Event::Warning { reason })?;
    }
    loop {
        let plan = match begin(ctx, restart)? {
            Begin::Start(plan) => plan,
            Begin::Finished { exit_code, summary } => return Ok((exit_code, summary, restart)),
            Begin::Wait | Begin::Notice(_) => unreachable!("begin() waits"),
        };
        restart = plan.restart;
        // A node that fails its checks starts no rank, and says why.
        if let Err(why) = health::before_round(preflight)? {
            let summary = format!("this node is unhealthy, round {restart} not started: {why}");
            let _ = ctx.backend.end_round(restart, &RoundResult::Failed(why));
            return Ok((1, summary, restart));
        }
        if logs.is_none() {
            let made = Logs::create(&options.output, &plan.run_id)?;
            if let Some(path) = made.path() {
                ctx.events.emit(Event::Logs {
                    dir: path.display().to_string(),
                })?;
            }
            logs = Some(made);
        }
        let logs = logs.as_ref().expect("made above");
        for monitor in ctx.monitors.iter() {
            monitor.take_heard();
        }
        ctx.events.emit(Event::RoundStarted {
            restart,
            group: plan.group.clone(),
            master_port: plan.master_port,
        })?;
        let mut ranks = Vec::new();
        let mut end = None;
        for local in 0..options.nproc {
            let socket = ctx.monitors[local as usize].socket();
            // A failure here ends the round through the stop below, so
            // that no rank started so far is left running.
            let node = (plan.group_world_size > 1).then_some(plan.group_rank);
            let global = plan.rank_offset.saturating_add(local);
            let started = logs
                .rank_streams(
                    &options.output,
                    restart,
                    local,
                    output::prefix(global, node),
                )
                .and_then(|streams| Rank::spawn(options, &plan, local, socket, streams))
                .and_then(|rank| {
                    let event = Event::RankStarted {
                        restart,
                        rank: rank.global_rank,
                        pid: rank.child.id(),
                    };
                    ranks.push(rank);
                    ctx.events.emit(event)
                });
            if let Err(e) = started {
                end = Some(Err(e));
                break;
            }
        }
        let end = match end {
            Some(error) => error,
            None => round::supervise(ctx, &plan, &mut ranks),
        };
        // A local failure, as the other nodes are told of it: now, before
        // the stop, and again if this node must leave.
        let failed = match &end {
            Ok(RoundEnd::Failed {
                index,
                cause,
                after,
                code,
            }) => {
                let since_launch = launch_started.elapsed();
                Some(failure(&ranks[*index], cause, *after, *code, restart, since_launch).2)
            }
            _ => None,
        };
        if let Some(report) = &failed {
            ctx.backend.failure_seen(restart, report);
        }
        let stopped = round::stop(ctx, &plan, &mut ranks)?;
        let deadline = output::drain_deadline();
        for rank in &mut ranks {
            for tee in rank.tees.drain(..) {
                tee.drain(deadline);
            }
        }
        ctx.registered_before = ctx
            .monitors
            .iter()
            .map(|m| m.take_heard().registered)
            .collect();
        if stopped.stuck > 0 {
            // A local failure is the job's news before this node leaves:
            // the other nodes would take the leaving alone for a change of
            // nodes, which does not count against --max-restarts. Best
            // effort, as the leaving is; its decision is not waited for.
            if let Some(report) = &failed {
                let _ = ctx.backend.decide(restart, report);
            }
            let stuck = RoundReport::Stuck {
                processes: stopped.stuck,
            };
            if let Decision::Finished { exit_code, summary } = decide(ctx, restart, &stuck)? {
                return Ok((exit_code, summary, restart));
            }
        }
        let end = end?;
        let result = match &end {
            RoundEnd::Succeeded => RoundResult::Succeeded,
            RoundEnd::Interrupted { .. } => RoundResult::Interrupted,
            RoundEnd::Failed { cause, .. } => RoundResult::Failed(cause.clone()),
            RoundEnd::Requested { reason } => RoundResult::Failed(reason.clone()),
        };
        ctx.backend.end_round(restart, &result)?;
        let (code, summary, report) = match end {
            RoundEnd::Succeeded => (
                0,
                format!("every rank exited 0 (restarts: {restart})"),
                RoundReport::Succeeded,
            ),
            RoundEnd::Interrupted { signal } => (
                128 + signal,
                format!("stopped by {}", signal_name(signal)),
                RoundReport::Interrupted { signal },
            ),
            RoundEnd::Failed {
                index,
                cause,
                after,
                code,
            } => failure(
                &ranks[index],
                &cause,
                after,
                code,
                restart,
                launch_started.elapsed(),
            ),
            RoundEnd::Requested { reason } => (
                1,
                format!("restart requested: {reason}"),
                RoundReport::Requested { reason },
            ),
        };
        let report = match stopped.signal {
            Some(signal) => {
                ctx.events.emit(Event::Signal { signal })?;
                RoundReport::Interrupted { signal }
            }
            None => report,
        };
        // nvidia-resiliency-ext's workload control, applied where its
        // launcher applies it: when the round is over.
        if !matches!(report, RoundReport::Interrupted { .. })
            && let workload::Verdict::Finish {
                exit_code,
                summary,
                shutdown,
            } = workload::requested(ctx, plan.rank_offset, code)?
        {
            ctx.backend.workload_ends(shutdown, exit_code, &summary);
            return Ok((exit_code, summary, restart));
        }
        // Progress comes before the restarts left, as in
        // nvidia-resiliency-ext: a job that keeps failing in place is not
        // restarted even with restarts to spare. Across nodes each launcher
        // reads the file itself (on a shared file system, the same answer).
        if let RoundReport::Failed { .. } | RoundReport::Requested { .. } = report {
            let (verdict, warning) = progress.cycle_failed();
            if let Some(reason) = warning {
                ctx.events.emit(Event::Warning { reason })?;
            }
            if let Verdict::Stop { cycles } = verdict {
                let summary = format!(
                    "not restarted: {cycles} cycles in a row made no progress \
                     (max_no_progress_cycles {}): {summary}",
                    options.progress.max_no_progress_cycles
                );
                return Ok((options.progress.no_restart_exit_code, summary, restart));
            }
        }
        match decide(ctx, restart, &report)? {
            Decision::Next { restart: next } => {
                restart = next;
                ctx.events.emit(Event::Restarting {
                    restart,
                    max_restarts: options.max_restarts,
                })?;
                continue;
            }
            Decision::Finished { exit_code, summary } => return Ok((exit_code, summary, restart)),
            Decision::Local | Decision::Pending => {}
        }
        if let RoundReport::Succeeded | RoundReport::Interrupted { .. } = report {
            let summary = match report {
                RoundReport::Interrupted { signal } => {
                    format!("stopped by {}", signal_name(signal))
                }
                _ => summary,
            };
            let code = match report {
                RoundReport::Interrupted { signal } => 128 + signal,
                _ => code,
            };
            return Ok((code, summary, restart));
        }
        if restart >= options.max_restarts {
            let summary = format!(
                "restarts exhausted ({restart}/{}): {summary}",
                options.max_restarts
            );
            return Ok((code, summary, restart));
        }
        restart += 1;
        ctx.events.emit(Event::Restarting {
            restart,
            max_restarts: options.max_restarts,
        })?;
    }
}

/// A local rank's failure: the exit status it earns the launcher, the
/// summary naming it, and the report for the backend.
fn failure(
    rank: &Rank,
    cause: &str,
    after: Duration,
    code: Option<i32>,
    restart: u32,
    since_launch: Duration,
) -> (i32, String, RoundReport) {
    let code = match code.or(rank.status.map(|s| s.exit_code())) {
        Some(0) | None => 1,
        Some(code) => code,
    };
    let summary = format!(
        "rank {} (local {}) {cause}, {} into round {restart} ({} since launch)",
        rank.global_rank,
        rank.local_rank,
        duration(after),
        duration(since_launch),
    );
    let report = RoundReport::Failed {
        rank: rank.global_rank,
        cause: summary.clone(),
        code,
    };
    (code, summary, report)
}

/// Asks the backend for the round's plan until it gives one, reading stop
/// signals between two asks: a signal while waiting for the other nodes
/// ends the launch as it would a round.
fn begin(ctx: &mut Ctx<'_>, restart: u32) -> Result<Begin> {
    loop {
        match ctx.backend.poll_begin(restart, ctx.options.nproc)? {
            Begin::Wait => {}
            Begin::Notice(event) => ctx.events.emit(event)?,
            done => return Ok(done),
        }
        if let Some(signal) = round::wait_signal(ctx.signals, POLL)? {
            ctx.events.emit(Event::Signal { signal })?;
            return match decide(ctx, restart, &RoundReport::Interrupted { signal })? {
                Decision::Finished { exit_code, summary } => {
                    Ok(Begin::Finished { exit_code, summary })
                }
                _ => Ok(Begin::Finished {
                    exit_code: 128 + signal,
                    summary: format!("stopped by {}", signal_name(signal)),
                }),
            };
        }
    }
}

/// The backend's decision, waited for (stop signals read meanwhile).
fn decide(ctx: &mut Ctx<'_>, restart: u32, report: &RoundReport) -> Result<Decision> {
    let mut decision = ctx.backend.decide(restart, report)?;
    while decision == Decision::Pending {
        if let Some(signal) = round::wait_signal(ctx.signals, POLL)? {
            ctx.events.emit(Event::Signal { signal })?;
            return ctx
                .backend
                .decide(restart, &RoundReport::Interrupted { signal })
                .map(|d| match d {
                    Decision::Finished { .. } => d,
                    _ => Decision::Finished {
                        exit_code: 128 + signal,
                        summary: format!("stopped by {}", signal_name(signal)),
                    },
                });
        }
        decision = ctx.backend.poll_decision(restart)?;
    }
    Ok(decision)
}

/// The private run directory, removed (with whatever the monitors left,
/// which is nothing once they have stopped) when dropped.
fn run_dir(options: &LaunchOptions) -> Result<PrivateDir> {
    let parent = options.run_parent();
    PrivateDir::create(&parent, "nodeipc-launch-")
        .map_err(|source| Error::RunDir { parent, source })
}
