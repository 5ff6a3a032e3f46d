//! One line per event on stderr, and optionally one JSON object per event
//! in a file (`--json-events`), for tools.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nodeipc_text::{Printable, duration, signal_name};
use serde::Serialize;

use crate::{Error, Result};

/// Something that happened to the launch, in the order it happened.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Event {
    /// The monitors are up, the first round is about to start.
    Launched {
        /// Local ranks.
        nproc: u32,
        /// Restarts allowed.
        max_restarts: u32,
        /// The private run directory (the monitors' sockets).
        run_dir: String,
        /// Whether the monitors run as threads of the launcher.
        monitors: &'static str,
    },
    /// A health check asked for cannot run on this machine (no NVML, say).
    HealthUnavailable {
        /// Which check.
        check: String,
        /// Why, for people.
        reason: String,
    },
    /// A round begins: every rank is started with this restart count.
    RoundStarted {
        /// `NODEIPC_RESTART_COUNT` of this round.
        restart: u32,
        /// `NODEIPC_GROUP` of this round.
        group: String,
        /// `MASTER_PORT` of this round.
        master_port: u16,
    },
    /// This node waits as a spare: the round runs on as many nodes as the
    /// job may have (`--nnodes N:M`).
    Spare {
        /// The round that runs without this node.
        restart: u32,
        /// Nodes it runs on.
        nodes: u32,
    },
    /// The round has waited a while for the other nodes (said now and
    /// then until it starts or `--rdzv-timeout` ends the wait).
    WaitingForNodes {
        /// The round.
        restart: u32,
        /// Nodes ready for it.
        ready: u32,
        /// Nodes it needs at least.
        needed: u32,
    },
    /// A rank's process is running.
    RankStarted {
        /// Round.
        restart: u32,
        /// Global rank.
        rank: u32,
        /// Its pid.
        pid: u32,
    },
    /// A rank's monitor terminated it (a timeout or a failed health check).
    MonitorFired {
        /// Round.
        restart: u32,
        /// Global rank.
        rank: u32,
        /// The monitor's words: which timeout or check, elapsed and limit.
        cause: String,
    },
    /// A rank's process ended.
    RankExited {
        /// Round.
        restart: u32,
        /// Global rank.
        rank: u32,
        /// Its pid.
        pid: u32,
        /// Its exit code, when it exited.
        code: Option<i32>,
        /// The signal that killed it, when one did.
        signal: Option<i32>,
        /// Seconds since the round started.
        after_s: f64,
    },
    /// A restarted rank that had registered before has not come back.
    RankNotBack {
        /// Round.
        restart: u32,
        /// Global rank.
        rank: u32,
        /// Seconds waited.
        waited_s: f64,
    },
    /// The round failed: every rank is being stopped.
    RoundFailed {
        /// Round.
        restart: u32,
        /// The rank that failed first.
        rank: u32,
        /// Why, for people.
        cause: String,
        /// Seconds since the round started.
        after_s: f64,
    },
    /// The round backend stopped the round (another node's failure, a
    /// change of members, this node cut off from the store): not a
    /// failure of this node.
    RoundStopping {
        /// Round.
        restart: u32,
        /// The backend's words.
        reason: String,
    },
    /// The round's stop is over: every rank gone, or given up on.
    RoundStopped {
        /// Round.
        restart: u32,
        /// Milliseconds from the decision to stop to the last rank reaped.
        stop_ms: f64,
        /// Processes that needed SIGKILL after the stop timeout.
        killed: u32,
        /// Processes still alive a bound after SIGKILL (stuck in the
        /// kernel): not waited for, left behind.
        stuck: u32,
    },
    /// A new round is about to start.
    Restarting {
        /// Its number, from 1.
        restart: u32,
        /// Restarts allowed.
        max_restarts: u32,
    },
    /// The launcher was asked to stop.
    Signal {
        /// The signal's number.
        signal: i32,
    },
    /// Where the ranks' output files are kept (`--redirects`, `--tee`).
    Logs {
        /// The run's log directory.
        dir: String,
    },
    /// Something the launcher does differently from what was asked, or
    /// could not read (an unreadable checkpoint iteration file, say).
    Warning {
        /// Why, for people.
        reason: String,
    },
    /// A rank's workload control request (nvidia-resiliency-ext's), read
    /// from its monitor when the round ended.
    WorkloadRequest {
        /// The rank's global rank.
        rank: u32,
        /// `continue`, `exclude_this_node` or `shutdown_workload`.
        action: &'static str,
        /// The rank's reason.
        description: String,
    },
    /// The launch is over.
    Finished {
        /// The launcher's exit status.
        exit_code: i32,
        /// Why, for people.
        summary: String,
    },
}

impl Event {
    /// The line for people, without the `nodeipc launch:` prefix.
    pub fn line(&self) -> String {
        match self {
            Event::Launched {
                nproc,
                max_restarts,
                run_dir,
                monitors,
            } => format!(
                "{nproc} ranks, up to {max_restarts} restarts, monitors as {monitors} in {run_dir}"
            ),
            Event::Warning { reason } => format!("warning: {reason}"),
            Event::WorkloadRequest {
                rank,
                action,
                description,
            } => format!(
                "rank {rank} asked to {}: {}",
                action.replace('_', " "),
                Printable(description)
            ),
            Event::Logs { dir } => format!("ranks' output files under {dir}"),
            Event::HealthUnavailable { check, reason } => {
                format!("{check} health check unavailable, not run: {reason}")
            }
            Event::RoundStarted {
                restart,
                group,
                master_port,
            } => format!("round {restart} started: group {group}, MASTER_PORT {master_port}"),
            Event::Spare { restart, nodes } => {
                format!("waiting as a spare: round {restart} runs on {nodes} other nodes")
            }
            Event::WaitingForNodes {
                restart,
                ready,
                needed,
            } => format!(
                "round {restart} waits for nodes: {ready} of {needed} ready (up to --rdzv-timeout)"
            ),
            Event::RankStarted { rank, pid, .. } => format!("rank {rank} started (pid {pid})"),
            Event::MonitorFired { rank, cause, .. } => {
                format!("monitor of rank {rank} terminated it: {cause}")
            }
            Event::RankExited {
                rank,
                pid,
                code,
                signal,
                after_s,
                ..
            } => format!(
                "rank {rank} (pid {pid}) {} after {}",
                describe_status(*code, *signal),
                seconds(*after_s)
            ),
            Event::RankNotBack { rank, waited_s, .. } => {
                format!(
                    "rank {rank} has not registered again after {}",
                    seconds(*waited_s)
                )
            }
            Event::RoundFailed {
                restart,
                rank,
                cause,
                after_s,
            } => format!(
                "round {restart} failed after {}: rank {rank} {cause}",
                seconds(*after_s)
            ),
            Event::RoundStopping { restart, reason } => {
                format!("round {restart} stopping: {reason}")
            }
            Event::RoundStopped {
                restart,
                stop_ms,
                killed,
                stuck: 0,
            } => format!(
                "round {restart} stopped in {} ({killed} needed SIGKILL)",
                seconds(stop_ms / 1000.0)
            ),
            Event::RoundStopped {
                restart,
                stop_ms,
                killed,
                stuck,
            } => format!(
                "round {restart} stopped in {} ({killed} needed SIGKILL, {stuck} still alive after SIGKILL: left behind)",
                seconds(stop_ms / 1000.0)
            ),
            Event::Restarting {
                restart,
                max_restarts,
            } => format!("restarting {restart}/{max_restarts}"),
            Event::Signal { signal } => format!("{} received: stopping", signal_name(*signal)),
            Event::Finished { exit_code, summary } => format!("exit {exit_code}: {summary}"),
        }
    }
}

/// "exited with 3", "killed by SIGKILL".
pub(crate) fn describe_status(code: Option<i32>, signal: Option<i32>) -> String {
    match (code, signal) {
        (Some(code), _) => format!("exited with {code}"),
        (None, Some(signal)) => format!("killed by {}", signal_name(signal)),
        (None, None) => "ended".to_owned(),
    }
}

/// Seconds (an event's field) in words: "1.2 s", "400 ms".
fn seconds(secs: f64) -> String {
    duration(Duration::try_from_secs_f64(secs).unwrap_or_default())
}

/// Creates the events file (0600), or appends to it when it is already a
/// regular file of ours that only we may write (several launches may share
/// one): a symlink, a FIFO, someone else's file or a kernel interface file
/// planted at the path is refused, never written through (the path may be
/// in a shared directory, the launcher may run as root). See
/// [`nodeipc_fs::create_output`].
fn open_events_file(path: &Path) -> Result<File> {
    nodeipc_fs::create_output(path, 0o600, nodeipc_fs::Existing::Append)
        .map(File::from)
        .map_err(|source| Error::Events {
            path: path.to_owned(),
            source: std::io::Error::other(source.to_string()),
        })
}

/// Where events go: stderr lines, a JSON-lines file, and a copy kept for
/// the caller.
pub(crate) struct Events {
    start: Instant,
    stderr: bool,
    file: Option<(PathBuf, File)>,
    kept: Vec<Event>,
}

impl Events {
    pub(crate) fn new(stderr: bool, json: Option<&Path>) -> Result<Events> {
        let file = match json {
            None => None,
            Some(path) => Some((path.to_owned(), open_events_file(path)?)),
        };
        Ok(Events {
            start: Instant::now(),
            stderr,
            file,
            kept: Vec::new(),
        })
    }

    /// Events that go nowhere: for work whose events were already told.
    pub(crate) fn discard() -> Events {
        Events {
            start: Instant::now(),
            stderr: false,
            file: None,
            kept: Vec::new(),
        }
    }

    /// Writes `event` everywhere. A failed write to the events file is an
    /// error (a tool waits on it); stderr is best effort.
    pub(crate) fn emit(&mut self, event: Event) -> Result<()> {
        if self.stderr {
            // Causes, reasons and summaries carry what ranks, monitors and
            // other nodes (through etcd) said: escaped, one event one line.
            let _ = writeln!(
                std::io::stderr(),
                "nodeipc launch: {}",
                Printable(&event.line())
            );
        }
        if let Some((path, file)) = &mut self.file {
            #[derive(Serialize)]
            struct Record<'a> {
                t: f64,
                #[serde(flatten)]
                event: &'a Event,
            }
            let mut text = serde_json::to_string(&Record {
                t: self.start.elapsed().as_secs_f64(),
                event: &event,
            })
            .map_err(|e| Error::Events {
                path: path.clone(),
                source: e.into(),
            })?;
            text.push('\n');
            file.write_all(text.as_bytes())
                .map_err(|source| Error::Events {
                    path: path.clone(),
                    source,
                })?;
        }
        self.kept.push(event);
        Ok(())
    }

    pub(crate) fn into_kept(self) -> Vec<Event> {
        self.kept
    }
}
