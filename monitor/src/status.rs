//! What a monitor reports: the rank's identity, the state machine, and the
//! status a `StatusQuery` answers, in Rust (and, with the feature `serde`,
//! serde's derives: `nodeipc-monitor-host` reads and writes its JSON form).

use std::collections::BTreeMap;

use crate::config::{Timeouts, ms};
use nodeipc_proto::monitor as pb;

/// Who a rank is. `pid` is the process the monitor signals on a timeout: it
/// must be the process that connects, or a descendant of it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct RankInfo {
    /// Rank in the whole job.
    pub global_rank: u32,
    /// Rank on this node.
    pub local_rank: u32,
    /// The rank's process id (0: the connecting process).
    pub pid: u32,
    /// Host name, for reports.
    pub host: String,
}

impl RankInfo {
    /// This process as the rank, with this node's host name.
    pub fn this_process(global_rank: u32, local_rank: u32) -> RankInfo {
        RankInfo {
            global_rank,
            local_rank,
            pid: std::process::id(),
            host: rustix::system::uname()
                .nodename()
                .to_string_lossy()
                .into_owned(),
        }
    }

    pub(crate) fn to_proto(&self) -> pb::RankInfo {
        pb::RankInfo {
            global_rank: self.global_rank,
            local_rank: self.local_rank,
            pid: self.pid,
            host: self.host.clone(),
        }
    }

    pub(crate) fn from_proto(r: &pb::RankInfo) -> RankInfo {
        RankInfo {
            global_rank: r.global_rank,
            local_rank: r.local_rank,
            pid: r.pid,
            host: r.host.clone(),
        }
    }
}

/// Where a monitor's state machine is (see the README for the transitions).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum RankState {
    /// No rank registered yet (or the last one left and no restart is expected).
    Waiting,
    /// `Init` received, no heartbeat yet: the initial heartbeat timeout runs.
    Initialized,
    /// Heartbeats arrive.
    Running,
    /// A timeout or health check fired; the rank is being terminated.
    TimedOut,
    /// The rank was terminated and has exited.
    Terminated,
    /// The rank's connection went while a restart is expected.
    Restarting,
    /// The monitor shut down. Nothing is served after that, so no status
    /// query returns it: a client sees this state as the socket refusing
    /// connections (the log's `shutting down` line records why). It is in
    /// the protocol so that the state machine is complete for anyone who
    /// relays a monitor's states.
    Closed,
}

impl RankState {
    pub(crate) fn to_proto(self) -> pb::MonitorState {
        match self {
            RankState::Waiting => pb::MonitorState::Waiting,
            RankState::Initialized => pb::MonitorState::Initialized,
            RankState::Running => pb::MonitorState::Running,
            RankState::TimedOut => pb::MonitorState::TimedOut,
            RankState::Terminated => pb::MonitorState::Terminated,
            RankState::Restarting => pb::MonitorState::Restarting,
            RankState::Closed => pb::MonitorState::Closed,
        }
    }

    pub(crate) fn from_proto(state: pb::MonitorState) -> Option<RankState> {
        Some(match state {
            pb::MonitorState::Unspecified => return None,
            pb::MonitorState::Waiting => RankState::Waiting,
            pb::MonitorState::Initialized => RankState::Initialized,
            pb::MonitorState::Running => RankState::Running,
            pb::MonitorState::TimedOut => RankState::TimedOut,
            pb::MonitorState::Terminated => RankState::Terminated,
            pb::MonitorState::Restarting => RankState::Restarting,
            pb::MonitorState::Closed => RankState::Closed,
        })
    }
}

/// A section open now.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct OpenSectionStatus {
    /// Its name.
    pub name: String,
    /// Milliseconds since it was opened.
    pub open_ms: u64,
    /// Its timeout in milliseconds, if it has one.
    pub timeout_ms: Option<u64>,
}

/// The timeouts in force, in milliseconds (`None`: no limit).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct TimeoutsMs {
    /// Initial heartbeat timeout.
    pub initial_heartbeat_ms: Option<u64>,
    /// Heartbeat timeout.
    pub heartbeat_ms: Option<u64>,
    /// Out-of-section timeout.
    pub out_of_section_ms: Option<u64>,
    /// Per-section timeouts.
    pub sections_ms: BTreeMap<String, u64>,
}

/// For log lines: the same fields as the JSON form, written without serde so the
/// tracker needs no `json` feature. Section names go through `{:?}` so a name holding
/// quotes or control characters cannot forge log content.
impl std::fmt::Display for TimeoutsMs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        fn opt(f: &mut std::fmt::Formatter<'_>, name: &str, v: Option<u64>) -> std::fmt::Result {
            match v {
                Some(ms) => write!(f, "{name}={ms}ms "),
                None => write!(f, "{name}=none "),
            }
        }
        opt(f, "initial_heartbeat", self.initial_heartbeat_ms)?;
        opt(f, "heartbeat", self.heartbeat_ms)?;
        opt(f, "out_of_section", self.out_of_section_ms)?;
        f.write_str("sections={")?;
        for (i, (name, ms)) in self.sections_ms.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{name:?}: {ms}ms")?;
        }
        f.write_str("}")
    }
}

impl From<&Timeouts> for TimeoutsMs {
    fn from(t: &Timeouts) -> Self {
        TimeoutsMs {
            initial_heartbeat_ms: t.initial_heartbeat.map(ms),
            heartbeat_ms: t.heartbeat.map(ms),
            out_of_section_ms: t.out_of_section.map(ms),
            sections_ms: t
                .sections
                .iter()
                .map(|(k, v)| (k.clone(), ms(*v)))
                .collect(),
        }
    }
}

/// The answer to a status query: what `nodeipc monitor status --json` prints.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct MonitorStatus {
    /// Where the state machine is.
    pub state: RankState,
    /// The registered rank, if any.
    pub rank: Option<RankInfo>,
    /// Heartbeats since `Init` (messages and shared-memory beats).
    pub heartbeats: u64,
    /// Sections open now, in the order they were opened.
    pub open_sections: Vec<OpenSectionStatus>,
    /// Milliseconds since the last heartbeat.
    pub ms_since_last_heartbeat: Option<u64>,
    /// Milliseconds since `Init`.
    pub ms_since_init: Option<u64>,
    /// Milliseconds with no section open (unset while one is).
    pub ms_out_of_section: Option<u64>,
    /// The last timeout that fired: which, its limit and the time elapsed.
    pub last_timeout: Option<String>,
    /// The timeouts in force.
    pub timeouts: TimeoutsMs,
    /// The termination signal's number.
    pub termination_signal: i32,
    /// Grace period before `SIGKILL`, if escalation is configured.
    pub kill_after_ms: Option<u64>,
    /// Whether `Section` messages go unanswered.
    pub skip_section_replies: bool,
    /// The state bytes of the last heartbeat that carried some.
    pub last_state: Option<Vec<u8>>,
    /// Milliseconds the monitor has waited for its rank to come back
    /// (`restarting` or `terminated`); unset otherwise or from an older server.
    #[cfg_attr(feature = "serde", serde(default))]
    pub ms_restarting: Option<u64>,
    /// The rank's workload control request since its `Init` (the action's
    /// number, `monitor.proto`'s `WorkloadAction`, and why).
    #[cfg_attr(feature = "serde", serde(default))]
    pub workload_request: Option<(i32, String)>,
}

impl MonitorStatus {
    pub(crate) fn to_proto(&self) -> pb::Status {
        pb::Status {
            state: self.state.to_proto().into(),
            rank: self.rank.as_ref().map(RankInfo::to_proto),
            heartbeats: self.heartbeats,
            open_sections: self
                .open_sections
                .iter()
                .map(|s| pb::OpenSection {
                    name: s.name.clone(),
                    ms_open: s.open_ms,
                    timeout_ms: s.timeout_ms,
                })
                .collect(),
            ms_since_last_heartbeat: self.ms_since_last_heartbeat,
            last_timeout: self.last_timeout.clone().unwrap_or_default(),
            ms_since_init: self.ms_since_init,
            ms_out_of_section: self.ms_out_of_section,
            config: Some(pb::EffectiveConfig {
                timeouts: Some(pb::Timeouts {
                    initial_heartbeat_ms: self.timeouts.initial_heartbeat_ms,
                    heartbeat_ms: self.timeouts.heartbeat_ms,
                    out_of_section_ms: self.timeouts.out_of_section_ms,
                    section_timeouts_ms: self.timeouts.sections_ms.clone(),
                }),
                termination_signal: self.termination_signal,
                kill_after_ms: self.kill_after_ms,
                skip_section_replies: self.skip_section_replies,
                check_interval_ms: None,
            }),
            last_state: self.last_state.clone(),
            ms_restarting: self.ms_restarting,
            workload_request: (self.workload_request.clone()).map(|(action, description)| {
                pb::WorkloadControl {
                    action,
                    description,
                }
            }),
        }
    }

    /// From the protocol's `Status`; `None` for an unknown state.
    pub(crate) fn from_proto(s: &pb::Status) -> Option<MonitorStatus> {
        let state = RankState::from_proto(pb::MonitorState::try_from(s.state).ok()?)?;
        let config = s.config.clone().unwrap_or_default();
        let timeouts = Timeouts::from_proto(&config.timeouts.unwrap_or_default());
        Some(MonitorStatus {
            state,
            rank: s.rank.as_ref().map(RankInfo::from_proto),
            heartbeats: s.heartbeats,
            open_sections: s
                .open_sections
                .iter()
                .map(|o| OpenSectionStatus {
                    name: o.name.clone(),
                    open_ms: o.ms_open,
                    timeout_ms: o.timeout_ms,
                })
                .collect(),
            ms_since_last_heartbeat: s.ms_since_last_heartbeat,
            ms_since_init: s.ms_since_init,
            ms_out_of_section: s.ms_out_of_section,
            last_timeout: Some(s.last_timeout.clone()).filter(|t| !t.is_empty()),
            timeouts: TimeoutsMs::from(&timeouts),
            termination_signal: config.termination_signal,
            kill_after_ms: config.kill_after_ms,
            skip_section_replies: config.skip_section_replies,
            last_state: s.last_state.clone(),
            ms_restarting: s.ms_restarting,
            workload_request: (s.workload_request.as_ref())
                .map(|w| (w.action, w.description.clone())),
        })
    }
}
