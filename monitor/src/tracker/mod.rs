//! [`RankTracker`]: the monitor's state machine with no socket, process or
//! clock of its own. It holds the state (`monitor.proto`'s
//! `MonitorState`), the registered rank, its open sections, heartbeats and
//! the timeouts in force, answers the rank's messages, and decides when the
//! rank must be terminated; every call is given the time (`now`).
//!
//! This is the API for driving the state machine without a server: with a
//! clock of one's own (the crate's tests give it `base + Duration`s and
//! check every transition below without waiting), or from an event loop
//! that is not [`MonitorServer`](crate::MonitorServer)'s. It speaks the
//! protocol's messages ([`nodeipc_proto::monitor`]) as they arrive.
//!
//! The server owns one and does what it cannot: it checks the process an
//! `Init` names ([`Handled::Register`] asks for that), reads the
//! shared-memory heartbeat region ([`RankTracker::beats`]), runs the health
//! checks ([`RankTracker::fail`]), sends the signals an [`Action`] asks for,
//! and writes the [`Note`]s to its rate-limited log.
//!
//! ```text
//! Waiting ──register──▶ Initialized ──heartbeat──▶ Running
//! Initialized, Running ──check: a timeout / fail: a health check──▶ TimedOut ──rank_exited──▶ Terminated
//! Initialized, Running ──connection_lost / rank_exited──▶ Restarting (Waiting without restarts)
//! Terminated, Restarting, Waiting ──register──▶ Initialized
//! any ──close──▶ Closed
//! ```

mod messages;
mod restart_wait;

use std::time::{Duration, Instant};

use nodeipc_fdpass::Signal;

use crate::config::{ms, signal_name};
use crate::limits::{MAX_CAUSE, truncate};
use crate::status::TimeoutsMs;
use crate::{LogLevel, MonitorConfig, MonitorStatus, OpenSectionStatus, RankInfo, RankState};

pub use crate::refusal::{Refusal, RefusalCode};
pub use messages::{Handled, Registration};

/// What the tracker asks the server to do to the rank's process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// A timeout fired or a health check failed: send `SIGCONT` (a stopped
    /// rank must be able to die), then `signal`. The state is `TimedOut`.
    Terminate {
        /// Which timeout, its limit and the time elapsed (what
        /// `Status.last_timeout` says).
        cause: String,
        /// The configured termination signal.
        signal: Signal,
    },
    /// The grace period after the termination signal is over: send `SIGKILL`.
    Escalate {
        /// Since the termination signal.
        waited: Duration,
    },
}

/// A line for the server's log. `kind` set: a line a client can cause at
/// will, rate-limited by that kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    /// How much it matters.
    pub level: LogLevel,
    /// The rate limit's kind, for lines a client can repeat.
    pub kind: Option<&'static str>,
    /// The line.
    pub line: String,
}

/// A registered rank and what its timeouts measure from.
#[derive(Debug)]
struct Tracked {
    /// Who it is (`pid` resolved: never 0).
    info: RankInfo,
    /// Its start time in clock ticks since boot, for reports.
    start_time: u64,
    init_at: Instant,
    last_heartbeat: Option<Instant>,
    heartbeats: u64,
    /// Open sections, in the order they were opened.
    sections: Vec<(String, Instant)>,
    /// Since when no section is open (`None` while one is).
    out_of_section_since: Option<Instant>,
    last_state: Option<Vec<u8>>,
}

impl Tracked {
    /// `"a" (1200 ms), "b" (30 ms)`, or empty when none is open.
    fn describe_sections(&self, now: Instant) -> String {
        self.sections
            .iter()
            .map(|(name, since)| {
                format!(
                    "{name:?} ({} ms)",
                    now.saturating_duration_since(*since).as_millis()
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// A termination in progress: the signal went at `signalled_at`; `SIGKILL`
/// follows at `escalate_at` if the rank still lives.
#[derive(Debug)]
struct Termination {
    signalled_at: Instant,
    escalate_at: Option<Instant>,
}

/// The monitor's state machine for its one rank (see the module's
/// documentation).
#[derive(Debug)]
pub struct RankTracker {
    config: MonitorConfig,
    state: RankState,
    rank: Option<Tracked>,
    termination: Option<Termination>,
    last_timeout: Option<String>,
    workload: Option<(i32, String)>,
    notes: Vec<Note>,
    restart_wait: restart_wait::RestartWait,
}

impl RankTracker {
    /// A tracker `Waiting` for its first rank, enforcing `config` (which
    /// the caller has validated).
    pub fn new(config: MonitorConfig) -> RankTracker {
        RankTracker {
            config,
            state: RankState::Waiting,
            rank: None,
            termination: None,
            last_timeout: None,
            workload: None,
            notes: Vec::new(),
            restart_wait: restart_wait::RestartWait::default(),
        }
    }

    /// The configuration in force (`UpdateConfig` changes its timeouts).
    pub fn config(&self) -> &MonitorConfig {
        &self.config
    }

    /// Where the state machine is.
    pub fn state(&self) -> RankState {
        self.state
    }

    /// The registered rank (its pid resolved), if any.
    pub fn rank(&self) -> Option<&RankInfo> {
        self.rank.as_ref().map(|r| &r.info)
    }

    /// The last timeout that fired, for people.
    pub fn last_timeout(&self) -> Option<&str> {
        self.last_timeout.as_deref()
    }

    /// Whether the timeouts are watched now (`Initialized` or `Running`):
    /// the periodic check reads the heartbeat region and runs the health
    /// checks only then.
    pub fn is_watching(&self) -> bool {
        matches!(self.state, RankState::Initialized | RankState::Running)
    }

    /// The lines to log since the last call, in order.
    pub fn take_notes(&mut self) -> Vec<Note> {
        std::mem::take(&mut self.notes)
    }

    fn note(&mut self, level: LogLevel, line: String) {
        self.notes.push(Note {
            level,
            kind: None,
            line,
        });
    }

    fn note_limited(&mut self, level: LogLevel, kind: &'static str, line: String) {
        self.notes.push(Note {
            level,
            kind: Some(kind),
            line,
        });
    }

    /// Registers the rank whose process the server has checked (`rank.pid`
    /// resolved, the process pinned); `heartbeat_region` says whether a
    /// shared-memory region goes with the reply. Returns the `Ok` to send
    /// (the server fills in the region's description).
    pub fn register(
        &mut self,
        rank: RankInfo,
        start_time: u64,
        heartbeat_region: bool,
        now: Instant,
    ) -> nodeipc_proto::monitor::Ok {
        // Limited: a client may register and leave in a loop.
        self.note_limited(
            LogLevel::Info,
            "registration",
            format!(
                "registered global rank {} (local {}) pid {} on {:?}{}",
                rank.global_rank,
                rank.local_rank,
                rank.pid,
                rank.host,
                if heartbeat_region {
                    ", shared-memory heartbeat attached"
                } else {
                    ""
                }
            ),
        );
        self.rank = Some(Tracked {
            info: rank,
            start_time,
            init_at: now,
            last_heartbeat: None,
            heartbeats: 0,
            sections: Vec::new(),
            out_of_section_since: Some(now),
            last_state: None,
        });
        self.termination = None;
        self.workload = None;
        self.state = RankState::Initialized;
        self.restart_wait.stop();
        nodeipc_proto::monitor::Ok {
            config: Some(self.config.effective()),
            ..Default::default()
        }
    }

    /// Refuses an `Init` the server's process check failed: the `Error` to send.
    pub fn refuse_init(&mut self, refusal: Refusal) -> nodeipc_proto::monitor::ServerMessage {
        self.note_limited(
            LogLevel::Warn,
            "refused Init",
            format!("Init refused: {refusal}"),
        );
        refusal.to_message()
    }

    /// `count` heartbeats seen in the shared-memory region at `now`.
    pub fn beats(&mut self, count: u64, now: Instant) {
        let Some(rank) = self.rank.as_mut() else {
            return;
        };
        if count == 0 {
            return;
        }
        rank.heartbeats = rank.heartbeats.saturating_add(count);
        rank.last_heartbeat = Some(now);
        if self.state == RankState::Initialized {
            self.state = RankState::Running;
        }
    }

    /// The periodic check. Watching (`Initialized`, `Running`): the first
    /// timeout that has run out terminates the rank. `TimedOut`: `SIGKILL`
    /// once the grace period is over. Otherwise nothing.
    pub fn check(&mut self, now: Instant) -> Option<Action> {
        if let Some(line) = self.restart_wait.report(now, self.config.check_interval) {
            self.note(LogLevel::Info, line);
        }
        match self.state {
            RankState::Initialized | RankState::Running => {
                let cause = self.expired(now)?;
                self.fire(cause, now)
            }
            RankState::TimedOut => self.escalate_if_due(now),
            _ => None,
        }
    }

    /// A health check failed: terminates the rank as a timeout does, when
    /// it is watched.
    pub fn fail(&mut self, cause: String, now: Instant) -> Option<Action> {
        if !self.is_watching() {
            return None;
        }
        self.fire(cause, now)
    }

    /// When [`check`](RankTracker::check) has something to do before the
    /// next periodic check: the escalation's moment.
    pub fn next_due(&self) -> Option<Instant> {
        self.termination.as_ref().and_then(|t| t.escalate_at)
    }

    /// The first timeout that has run out, described with elapsed and limit.
    fn expired(&self, now: Instant) -> Option<String> {
        let rank = self.rank.as_ref()?;
        let t = &self.config.timeouts;
        let over = |what: String, since: Instant, limit: Option<Duration>| {
            let limit = limit?;
            let elapsed = now.saturating_duration_since(since);
            (elapsed > limit).then(|| {
                format!(
                    "{what} timeout: {} ms elapsed, limit {} ms",
                    elapsed.as_millis(),
                    limit.as_millis()
                )
            })
        };
        let heartbeat = match rank.last_heartbeat {
            None => over(
                "initial heartbeat".to_owned(),
                rank.init_at,
                t.initial_heartbeat,
            ),
            Some(last) => over("heartbeat".to_owned(), last, t.heartbeat),
        };
        heartbeat
            .or_else(|| {
                rank.sections.iter().find_map(|(name, since)| {
                    over(
                        format!("section {name:?}"),
                        *since,
                        t.sections.get(name).copied(),
                    )
                })
            })
            .or_else(|| {
                rank.out_of_section_since
                    .and_then(|since| over("out-of-section".to_owned(), since, t.out_of_section))
            })
    }

    /// `TimedOut`: the termination starts now.
    fn fire(&mut self, what: String, now: Instant) -> Option<Action> {
        let rank = self.rank.as_ref()?;
        // A health check's reason has no bound of its own; the status
        // echoes this text, and every status must fit in one frame.
        let what = truncate(what, MAX_CAUSE);
        let signal = self.config.termination_signal;
        let open = rank.describe_sections(now);
        let line = format!(
            "{what}; terminating global rank {} (local {}) pid {} (start time {}) with SIGCONT then {}{}{}",
            rank.info.global_rank,
            rank.info.local_rank,
            rank.info.pid,
            rank.start_time,
            signal_name(signal),
            self.config
                .kill_after
                .map(|d| format!(", SIGKILL after {} ms", d.as_millis()))
                .unwrap_or_default(),
            if open.is_empty() {
                String::new()
            } else {
                format!("; open sections: {open}")
            }
        );
        // Limited like every line a client can repeat: a client may set
        // tiny timeouts for a child it registers, again and again.
        self.note_limited(LogLevel::Warn, "timeout", line);
        let escalate_at = match (signal, self.config.kill_after) {
            (Signal::KILL, _) | (_, None) => None,
            (_, Some(grace)) => now.checked_add(grace),
        };
        self.termination = Some(Termination {
            signalled_at: now,
            escalate_at,
        });
        self.last_timeout = Some(what.clone());
        self.state = RankState::TimedOut;
        Some(Action::Terminate {
            cause: what,
            signal,
        })
    }

    fn escalate_if_due(&mut self, now: Instant) -> Option<Action> {
        let termination = self.termination.as_mut()?;
        if termination.escalate_at.is_none_or(|at| now < at) {
            return None;
        }
        termination.escalate_at = None;
        self.rank.as_ref()?;
        Some(Action::Escalate {
            waited: now.saturating_duration_since(termination.signalled_at),
        })
    }

    /// Whether a `SIGKILL` is still to follow the termination signal (the
    /// server sends it at once when it shuts down).
    pub fn escalation_pending(&self) -> bool {
        self.rank.is_some() && self.next_due().is_some()
    }

    /// The rank's connection is gone (closed by it, dropped by the launcher
    /// or by the server): `pid` is the process that held it. A watched rank
    /// is forgotten and the state becomes `Restarting` (`Waiting` when no
    /// restart is expected); a rank being terminated is kept until it exits.
    pub fn connection_lost(&mut self, why: &str, pid: u32, now: Instant) {
        match self.state {
            RankState::Initialized | RankState::Running => {
                let open = self
                    .rank
                    .take()
                    .map(|r| r.describe_sections(now))
                    .unwrap_or_default();
                let next = self.after_rank();
                // Limited: a client may register and leave in a loop.
                if open.is_empty() {
                    self.note_limited(
                        LogLevel::Info,
                        "lost rank connection",
                        format!("{why} (pid {pid}); state cleared, now {next:?}"),
                    );
                } else {
                    self.note_limited(
                        LogLevel::Warn,
                        "lost rank connection",
                        format!(
                            "{why} (pid {pid}) with sections still open: {open}; state cleared, now {next:?}"
                        ),
                    );
                }
                self.state = next;
                if next == RankState::Restarting {
                    self.restart_wait.start(now);
                }
            }
            // A termination in progress keeps the rank until it exits.
            RankState::TimedOut => self.note_limited(
                LogLevel::Info,
                "closed connection",
                format!("{why} (pid {pid}) while the rank is being terminated"),
            ),
            _ => self.note_limited(
                LogLevel::Info,
                "closed connection",
                format!("{why} (pid {pid})"),
            ),
        }
    }

    /// The rank's process exited; `connection` is the pid holding the rank
    /// connection, if one does (the server closes it after this call). A
    /// rank being terminated is now `Terminated`; one that exited on its
    /// own is forgotten as if its connection were lost.
    pub fn rank_exited(&mut self, connection: Option<u32>, now: Instant) {
        let Some(rank) = self.rank.as_ref() else {
            return;
        };
        let pid = rank.info.pid;
        if self.state == RankState::TimedOut {
            let after = self
                .termination
                .as_ref()
                .map(|t| now.saturating_duration_since(t.signalled_at).as_millis())
                .unwrap_or_default();
            self.note_limited(
                LogLevel::Warn,
                "rank exit",
                format!(
                    "rank pid {pid} exited {after} ms after it was signalled; state Terminated"
                ),
            );
            self.rank = None;
            self.termination = None;
            self.state = RankState::Terminated;
            self.restart_wait.start(now);
            // Its connection (or its parent's) has nothing left to say.
            if let Some(holder) = connection {
                self.connection_lost("rank terminated", holder, now);
            }
            return;
        }
        let open = rank.describe_sections(now);
        self.note_limited(
            LogLevel::Warn,
            "rank exit",
            format!(
                "rank pid {pid} exited without a timeout{}",
                if open.is_empty() {
                    String::new()
                } else {
                    format!(" with sections still open: {open}")
                }
            ),
        );
        if let Some(holder) = connection {
            self.connection_lost("the rank's process exited", holder, now);
        }
        // The connection may have been someone else's (a parent's): the
        // registration goes in any case.
        if self.rank.take().is_some() {
            self.state = self.after_rank();
            if self.state == RankState::Restarting {
                self.restart_wait.start(now);
            }
        }
    }

    /// Where a rank that left without a timeout leaves the monitor.
    fn after_rank(&self) -> RankState {
        if self.config.restart_expected {
            RankState::Restarting
        } else {
            RankState::Waiting
        }
    }

    /// The monitor shuts down: open sections are reported, the rank
    /// forgotten, the state `Closed`.
    pub fn close(&mut self, now: Instant) {
        if let Some(rank) = &self.rank {
            let open = rank.describe_sections(now);
            if !open.is_empty() {
                self.note(
                    LogLevel::Warn,
                    format!("shutting down with sections still open: {open}"),
                );
            }
        }
        self.rank = None;
        self.termination = None;
        self.state = RankState::Closed;
        self.restart_wait.stop();
    }

    /// The status a query answers, as of `now` (the server reads the
    /// heartbeat region first).
    pub fn status(&self, now: Instant) -> MonitorStatus {
        let since = |t: Instant| ms(now.saturating_duration_since(t));
        let rank = self.rank.as_ref();
        let effective = self.config.effective();
        MonitorStatus {
            state: self.state,
            rank: rank.map(|r| r.info.clone()),
            heartbeats: rank.map_or(0, |r| r.heartbeats),
            open_sections: rank
                .map(|r| {
                    r.sections
                        .iter()
                        .map(|(name, at)| OpenSectionStatus {
                            name: name.clone(),
                            open_ms: since(*at),
                            timeout_ms: self.config.timeouts.sections.get(name).map(|d| ms(*d)),
                        })
                        .collect()
                })
                .unwrap_or_default(),
            ms_since_last_heartbeat: rank.and_then(|r| r.last_heartbeat).map(since),
            ms_since_init: rank.map(|r| since(r.init_at)),
            ms_out_of_section: rank.and_then(|r| r.out_of_section_since).map(since),
            last_timeout: self.last_timeout.clone(),
            timeouts: TimeoutsMs::from(&self.config.timeouts),
            termination_signal: effective.termination_signal,
            kill_after_ms: effective.kill_after_ms,
            skip_section_replies: effective.skip_section_replies,
            last_state: rank.and_then(|r| r.last_state.clone()),
            ms_restarting: self.restart_wait.waited(now).map(ms),
            workload_request: self.workload.clone(),
        }
    }
}

/// An `Ok` reply.
pub(crate) fn ok(ok: nodeipc_proto::monitor::Ok) -> nodeipc_proto::monitor::ServerMessage {
    nodeipc_proto::monitor::ServerMessage {
        msg: Some(nodeipc_proto::monitor::server_message::Msg::Ok(ok)),
    }
}

/// A `Status` reply.
pub(crate) fn status_reply(status: &MonitorStatus) -> nodeipc_proto::monitor::ServerMessage {
    nodeipc_proto::monitor::ServerMessage {
        msg: Some(nodeipc_proto::monitor::server_message::Msg::Status(
            status.to_proto(),
        )),
    }
}
