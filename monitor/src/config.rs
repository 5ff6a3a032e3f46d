//! [`MonitorConfig`] and the timeouts it carries. Its file form (JSON, and
//! nvidia-resiliency-ext's YAML) is read and written by
//! `nodeipc-monitor-host`.

use std::collections::BTreeMap;
use std::time::Duration;

use nodeipc_fdpass::Signal;
use nodeipc_proto::monitor as pb;
use nodeipc_text::duration;

use crate::limits::{MAX_SECTION_NAME, MAX_SECTIONS};
use crate::refusal::{Refusal, RefusalCode, over_cap};
use crate::{Error, Result};

/// The signals a monitor may be configured to terminate a rank with, by name.
const TERMINATION_SIGNALS: [(&str, Signal); 8] = [
    ("SIGKILL", Signal::KILL),
    ("SIGTERM", Signal::TERM),
    ("SIGINT", Signal::INT),
    ("SIGQUIT", Signal::QUIT),
    ("SIGHUP", Signal::HUP),
    ("SIGABRT", Signal::ABORT),
    ("SIGUSR1", Signal::USR1),
    ("SIGUSR2", Signal::USR2),
];

/// Longest check interval accepted: a monitor that looks less often than
/// this is not watching.
pub const MAX_CHECK_INTERVAL: Duration = Duration::from_secs(3600);

/// Longest a connection deadline may be set to (`connection_wait`,
/// `first_message_timeout`, `reply_timeout`): longer is not a deadline.
pub const MAX_CONNECTION_DEADLINE: Duration = Duration::from_secs(3600);

/// The timeouts a monitor enforces; `None` (or a section not listed) is
/// unlimited. As a change ([`TimeoutUpdate`], what a client sends), `None`
/// keeps a value and `Duration::ZERO` removes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Timeouts {
    /// Longest time from `Init` to the first heartbeat.
    pub initial_heartbeat: Option<Duration>,
    /// Longest time between two heartbeats.
    pub heartbeat: Option<Duration>,
    /// Longest time with no section open, from `Init` or the last close.
    pub out_of_section: Option<Duration>,
    /// Longest time each named section may stay open.
    pub sections: BTreeMap<String, Duration>,
}

/// A change to [`Timeouts`], as `UpdateConfig` carries it: the same
/// fields, read as a change. `None` keeps the current value,
/// `Some(Duration::ZERO)` removes the timeout, any other value replaces it;
/// sections not listed keep theirs (`Duration::ZERO` removes a section's).
pub type TimeoutUpdate = Timeouts;

/// How a monitor watches its rank. `Default` has no timeouts at all, checks
/// every second, terminates with `SIGKILL`, waits 5 s for a second client,
/// gives a new connection 1 s to prove itself and a client 5 s to read a
/// reply, expects restarts and offers the shared-memory heartbeat.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MonitorConfig {
    /// The timeouts enforced (they change with `UpdateConfig` and keep the
    /// change for the life of the server, across rank restarts).
    pub timeouts: Timeouts,
    /// How often the timeouts, the heartbeat region and the health checks
    /// are looked at. A hung rank is detected within its timeout plus one
    /// interval; a rank that exits is detected at once whatever this is.
    pub check_interval: Duration,
    /// Sent to the rank on a timeout, after `SIGCONT`.
    pub termination_signal: Signal,
    /// When set, `SIGKILL` follows the termination signal after this grace
    /// period if the rank is still alive.
    pub kill_after: Option<Duration>,
    /// Send no reply to `Section` messages (the client learns this from the
    /// `Init` reply and does not wait for one).
    pub skip_section_replies: bool,
    /// How long a second client waits while a rank connection is served
    /// before it is refused.
    pub connection_wait: Duration,
    /// How long a new connection may take to prove itself before it is
    /// closed: a control connection to send its first request, the rank
    /// connection to register (a successful `Init`), a client waiting for
    /// the rank slot to send anything. An idle connection never holds a
    /// slot longer than this.
    pub first_message_timeout: Duration,
    /// How long a reply may wait for a client to read it (its socket full)
    /// before the client is closed. Nothing more is read from a client
    /// while its reply waits.
    pub reply_timeout: Duration,
    /// Whether the launcher restarts a rank that goes: a lost connection
    /// then leaves the monitor `Restarting` instead of `Waiting`.
    pub restart_expected: bool,
    /// Hand a rank that asks for it the shared-memory heartbeat region.
    pub heartbeat_region: bool,
}

impl Default for MonitorConfig {
    fn default() -> Self {
        MonitorConfig {
            timeouts: Timeouts::default(),
            check_interval: Duration::from_secs(1),
            termination_signal: Signal::KILL,
            kill_after: None,
            skip_section_replies: false,
            connection_wait: Duration::from_secs(5),
            first_message_timeout: Duration::from_secs(1),
            reply_timeout: Duration::from_secs(5),
            restart_expected: true,
            heartbeat_region: true,
        }
    }
}

impl MonitorConfig {
    /// Checks every value: a check interval between 1 ms and an hour,
    /// non-zero timeouts, connection deadlines of at most an hour (the
    /// first-message and reply timeouts at least 1 ms),
    /// section names of 1 to 256 bytes, at most 64 of them.
    ///
    /// # Errors
    /// [`Error::Config`] naming the value.
    pub fn validate(&self) -> Result<()> {
        if self.check_interval.is_zero() || self.check_interval > MAX_CHECK_INTERVAL {
            return Err(Error::config(format!(
                "check interval {} must be between 1 ms and {}",
                duration(self.check_interval),
                duration(MAX_CHECK_INTERVAL)
            )));
        }
        for (what, value) in [
            ("initial heartbeat timeout", self.timeouts.initial_heartbeat),
            ("heartbeat timeout", self.timeouts.heartbeat),
            ("out-of-section timeout", self.timeouts.out_of_section),
            ("kill_after", self.kill_after),
        ] {
            if value.is_some_and(|d| d.is_zero()) {
                return Err(Error::config(format!(
                    "{what} of 0 ms: leave it out (null) for no limit"
                )));
            }
        }
        if self.timeouts.sections.len() > MAX_SECTIONS {
            return Err(Error::config(format!(
                "{} section timeouts; at most {MAX_SECTIONS}",
                self.timeouts.sections.len()
            )));
        }
        for (name, timeout) in &self.timeouts.sections {
            check_section_name(name).map_err(|r| Error::config(r.cause))?;
            if timeout.is_zero() {
                return Err(Error::config(format!(
                    "section {name:?} has a timeout of 0 ms: leave it out for no limit"
                )));
            }
        }
        if self.connection_wait > MAX_CONNECTION_DEADLINE {
            return Err(Error::config(format!(
                "connection wait {} is longer than {}",
                duration(self.connection_wait),
                duration(MAX_CONNECTION_DEADLINE)
            )));
        }
        for (what, value) in [
            ("first message timeout", self.first_message_timeout),
            ("reply timeout", self.reply_timeout),
        ] {
            if value.is_zero() || value > MAX_CONNECTION_DEADLINE {
                return Err(Error::config(format!(
                    "{what} {} must be between 1 ms and {}",
                    duration(value),
                    duration(MAX_CONNECTION_DEADLINE)
                )));
            }
        }
        signal_by_number(self.termination_signal.as_raw())?;
        Ok(())
    }

    /// The configuration as the protocol's `EffectiveConfig`.
    pub(crate) fn effective(&self) -> pb::EffectiveConfig {
        pb::EffectiveConfig {
            timeouts: Some(self.timeouts.to_proto()),
            termination_signal: self.termination_signal.as_raw(),
            kill_after_ms: self.kill_after.map(ms),
            skip_section_replies: self.skip_section_replies,
            check_interval_ms: Some(ms(self.check_interval)),
        }
    }
}

impl Timeouts {
    /// As the protocol's `Timeouts` (unset = none).
    pub(crate) fn to_proto(&self) -> pb::Timeouts {
        pb::Timeouts {
            initial_heartbeat_ms: self.initial_heartbeat.map(ms),
            heartbeat_ms: self.heartbeat.map(ms),
            out_of_section_ms: self.out_of_section.map(ms),
            section_timeouts_ms: self
                .sections
                .iter()
                .map(|(k, v)| (k.clone(), ms(*v)))
                .collect(),
        }
    }

    /// From the protocol's `Timeouts` in an `EffectiveConfig` (unset or 0 = none).
    pub(crate) fn from_proto(t: &pb::Timeouts) -> Timeouts {
        let d = |v: Option<u64>| v.filter(|&v| v > 0).map(Duration::from_millis);
        Timeouts {
            initial_heartbeat: d(t.initial_heartbeat_ms),
            heartbeat: d(t.heartbeat_ms),
            out_of_section: d(t.out_of_section_ms),
            sections: t
                .section_timeouts_ms
                .iter()
                .filter(|(_, v)| **v > 0)
                .map(|(k, v)| (k.clone(), Duration::from_millis(*v)))
                .collect(),
        }
    }

    /// Applies an update (the rules of [`TimeoutUpdate`]); nothing changes
    /// when it is refused.
    ///
    /// # Errors
    /// A sentence naming the bad section name or the section count.
    pub(crate) fn apply(&mut self, update: &pb::Timeouts) -> std::result::Result<(), Refusal> {
        let mut next = self.clone();
        let set = |slot: &mut Option<Duration>, value: Option<u64>| match value {
            None => {}
            Some(0) => *slot = None,
            Some(v) => *slot = Some(Duration::from_millis(v)),
        };
        set(&mut next.initial_heartbeat, update.initial_heartbeat_ms);
        set(&mut next.heartbeat, update.heartbeat_ms);
        set(&mut next.out_of_section, update.out_of_section_ms);
        for (name, value) in &update.section_timeouts_ms {
            check_section_name(name)?;
            if *value == 0 {
                next.sections.remove(name);
            } else {
                next.sections
                    .insert(name.clone(), Duration::from_millis(*value));
            }
        }
        if next.sections.len() > MAX_SECTIONS {
            return Err(Refusal::new(
                RefusalCode::TooManySections,
                format!(
                    "{} section timeouts; at most {MAX_SECTIONS}",
                    next.sections.len()
                ),
            ));
        }
        *self = next;
        Ok(())
    }
}

/// A section name the server accepts: 1 to 256 bytes.
pub(crate) fn check_section_name(name: &str) -> std::result::Result<(), Refusal> {
    if name.is_empty() {
        return Err(Refusal::new(
            RefusalCode::InvalidArgument,
            "a section needs a non-empty name",
        ));
    }
    if name.len() > MAX_SECTION_NAME {
        return Err(over_cap("section name", name.len(), MAX_SECTION_NAME));
    }
    Ok(())
}

/// Whole milliseconds, rounded up ([`nodeipc_text::whole_ms`]).
pub(crate) use nodeipc_text::whole_ms as ms;

/// The name of a signal, `SIG…` ([`nodeipc_text::signal_name`]).
pub fn signal_name(signal: Signal) -> String {
    nodeipc_text::signal_name(signal.as_raw())
}

/// A termination signal a monitor accepts, by name: `SIGTERM` or `TERM`,
/// in any case.
///
/// # Errors
/// [`Error::Config`] listing the accepted names.
pub fn signal_by_name(name: &str) -> Result<Signal> {
    let upper = name.to_ascii_uppercase();
    let full = if upper.starts_with("SIG") {
        upper
    } else {
        format!("SIG{upper}")
    };
    TERMINATION_SIGNALS
        .iter()
        .find(|(n, _)| *n == full)
        .map(|(_, s)| *s)
        .ok_or_else(|| Error::config(unknown_signal(name)))
}

/// A termination signal a monitor accepts, by number (`15`).
///
/// # Errors
/// [`Error::Config`] listing the accepted names.
pub fn signal_by_number(n: i32) -> Result<Signal> {
    TERMINATION_SIGNALS
        .iter()
        .find(|(_, s)| s.as_raw() == n)
        .map(|(_, s)| *s)
        .ok_or_else(|| Error::config(unknown_signal(&n.to_string())))
}

fn unknown_signal(what: &str) -> String {
    let names: Vec<&str> = TERMINATION_SIGNALS.iter().map(|(n, _)| *n).collect();
    format!(
        "termination signal {what:?} is not one of {}",
        names.join(", ")
    )
}
