//! [`MonitorConfig`], its JSON file form, and the timeouts it carries.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use nodeipc_fdpass::Signal;
use nodeipc_proto::monitor as pb;
use serde::{Deserialize, Serialize};

use crate::limits::{MAX_CONFIG_FILE, MAX_SECTION_NAME, MAX_SECTIONS};
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
/// unlimited.
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

/// A change to [`Timeouts`], as `UpdateConfig` carries it: `None` keeps the
/// current value, `Some(Duration::ZERO)` removes the timeout, any other
/// value replaces it. Sections not listed keep theirs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TimeoutUpdate {
    /// See [`Timeouts::initial_heartbeat`].
    pub initial_heartbeat: Option<Duration>,
    /// See [`Timeouts::heartbeat`].
    pub heartbeat: Option<Duration>,
    /// See [`Timeouts::out_of_section`].
    pub out_of_section: Option<Duration>,
    /// The sections to change (`Duration::ZERO` removes that section's timeout).
    pub sections: BTreeMap<String, Duration>,
}

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

/// The JSON form of [`MonitorConfig`]: flat, durations in milliseconds,
/// absent or `null` meaning "no timeout".
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct ConfigFile {
    initial_heartbeat_timeout_ms: Option<u64>,
    heartbeat_timeout_ms: Option<u64>,
    out_of_section_timeout_ms: Option<u64>,
    section_timeouts_ms: BTreeMap<String, u64>,
    check_interval_ms: Option<u64>,
    termination_signal: Option<SignalSpec>,
    kill_after_ms: Option<u64>,
    skip_section_replies: Option<bool>,
    connection_wait_ms: Option<u64>,
    first_message_timeout_ms: Option<u64>,
    reply_timeout_ms: Option<u64>,
    restart_expected: Option<bool>,
    heartbeat_region: Option<bool>,
}

/// A signal by name (`"SIGTERM"`, `"TERM"`) or number (`15`).
#[derive(Debug, Serialize, Deserialize)]
#[serde(untagged)]
enum SignalSpec {
    Number(i32),
    Name(String),
}

impl MonitorConfig {
    /// Parses the JSON form (see the crate's README for the fields).
    ///
    /// # Errors
    /// [`Error::Config`] naming the field, line and column.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// let config = nodeipc_monitor::MonitorConfig::from_json(
    ///     r#"{ "heartbeat_timeout_ms": 30000, "section_timeouts_ms": { "step": 5000 },
    ///          "termination_signal": "SIGTERM", "kill_after_ms": 2000 }"#,
    /// )?;
    /// assert_eq!(config.timeouts.heartbeat, Some(Duration::from_secs(30)));
    /// assert_eq!(config.kill_after, Some(Duration::from_secs(2)));
    /// # Ok::<(), nodeipc_monitor::Error>(())
    /// ```
    pub fn from_json(text: &str) -> Result<MonitorConfig> {
        let file: ConfigFile =
            serde_json::from_str(text).map_err(|e| Error::config(e.to_string()))?;
        file.into_config()
    }

    /// Reads and parses a JSON configuration file, trusting it only as far
    /// as `ssh` trusts its own: it must be a regular file (a FIFO or a
    /// device is refused without blocking, a symlink is not followed) owned
    /// by our effective uid, not writable by group or others, and at most
    /// [`MAX_CONFIG_FILE`](crate::MAX_CONFIG_FILE) bytes. Whoever can write
    /// the file decides when the rank is killed.
    ///
    /// # Errors
    /// [`Error::File`] naming the path and what was found there (its type,
    /// owner and mode, or its size), with the errno kept;
    /// [`Error::ConfigFile`] naming the file and what does not parse.
    pub fn load(path: impl AsRef<Path>) -> Result<MonitorConfig> {
        let path = path.as_ref();
        let bytes = nodeipc_fs::read_capped(
            path,
            nodeipc_fs::ModeRule::NotWritableByOthers,
            MAX_CONFIG_FILE,
        )
        .map_err(|source| Error::File {
            what: "configuration file",
            source,
        })?;
        let text = String::from_utf8(bytes).map_err(|e| Error::ConfigFile {
            path: path.to_owned(),
            reason: format!("not UTF-8: {e}"),
        })?;
        MonitorConfig::from_json(&text).map_err(|e| Error::ConfigFile {
            path: path.to_owned(),
            reason: match e {
                Error::Config { reason } => reason,
                other => other.to_string(),
            },
        })
    }

    /// The JSON form, which [`from_json`](MonitorConfig::from_json) reads back.
    pub fn to_json(&self) -> String {
        let file = ConfigFile {
            initial_heartbeat_timeout_ms: self.timeouts.initial_heartbeat.map(ms),
            heartbeat_timeout_ms: self.timeouts.heartbeat.map(ms),
            out_of_section_timeout_ms: self.timeouts.out_of_section.map(ms),
            section_timeouts_ms: self
                .timeouts
                .sections
                .iter()
                .map(|(k, v)| (k.clone(), ms(*v)))
                .collect(),
            check_interval_ms: Some(ms(self.check_interval)),
            termination_signal: Some(SignalSpec::Name(signal_name(self.termination_signal))),
            kill_after_ms: self.kill_after.map(ms),
            skip_section_replies: Some(self.skip_section_replies),
            connection_wait_ms: Some(ms(self.connection_wait)),
            first_message_timeout_ms: Some(ms(self.first_message_timeout)),
            reply_timeout_ms: Some(ms(self.reply_timeout)),
            restart_expected: Some(self.restart_expected),
            heartbeat_region: Some(self.heartbeat_region),
        };
        serde_json::to_string_pretty(&file).expect("a config always serializes")
    }

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
                "check interval {:?} must be between 1 ms and {MAX_CHECK_INTERVAL:?}",
                self.check_interval
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
                "connection wait {:?} is longer than {MAX_CONNECTION_DEADLINE:?}",
                self.connection_wait
            )));
        }
        for (what, value) in [
            ("first message timeout", self.first_message_timeout),
            ("reply timeout", self.reply_timeout),
        ] {
            if value.is_zero() || value > MAX_CONNECTION_DEADLINE {
                return Err(Error::config(format!(
                    "{what} {value:?} must be between 1 ms and {MAX_CONNECTION_DEADLINE:?}"
                )));
            }
        }
        signal_by_number(self.termination_signal.as_raw()).map_err(Error::config)?;
        Ok(())
    }

    /// The configuration as the protocol's `EffectiveConfig`.
    pub(crate) fn effective(&self) -> pb::EffectiveConfig {
        pb::EffectiveConfig {
            timeouts: Some(self.timeouts.to_proto()),
            termination_signal: self.termination_signal.as_raw(),
            kill_after_ms: self.kill_after.map(ms),
            skip_section_replies: self.skip_section_replies,
        }
    }
}

impl ConfigFile {
    fn into_config(self) -> Result<MonitorConfig> {
        let defaults = MonitorConfig::default();
        let timeout = |what: &str, value: Option<u64>| -> Result<Option<Duration>> {
            match value {
                Some(0) => Err(Error::config(format!(
                    "{what} is 0: leave it out (or null) for no limit"
                ))),
                other => Ok(other.map(Duration::from_millis)),
            }
        };
        let termination_signal = match self.termination_signal {
            None => defaults.termination_signal,
            Some(SignalSpec::Number(n)) => signal_by_number(n).map_err(Error::config)?,
            Some(SignalSpec::Name(name)) => signal_by_name(&name).map_err(Error::config)?,
        };
        let config = MonitorConfig {
            timeouts: Timeouts {
                initial_heartbeat: timeout(
                    "initial_heartbeat_timeout_ms",
                    self.initial_heartbeat_timeout_ms,
                )?,
                heartbeat: timeout("heartbeat_timeout_ms", self.heartbeat_timeout_ms)?,
                out_of_section: timeout(
                    "out_of_section_timeout_ms",
                    self.out_of_section_timeout_ms,
                )?,
                sections: self
                    .section_timeouts_ms
                    .into_iter()
                    .map(|(k, v)| (k, Duration::from_millis(v)))
                    .collect(),
            },
            check_interval: self
                .check_interval_ms
                .map_or(defaults.check_interval, Duration::from_millis),
            termination_signal,
            kill_after: timeout("kill_after_ms", self.kill_after_ms)?,
            skip_section_replies: self
                .skip_section_replies
                .unwrap_or(defaults.skip_section_replies),
            connection_wait: self
                .connection_wait_ms
                .map_or(defaults.connection_wait, Duration::from_millis),
            first_message_timeout: self
                .first_message_timeout_ms
                .map_or(defaults.first_message_timeout, Duration::from_millis),
            reply_timeout: self
                .reply_timeout_ms
                .map_or(defaults.reply_timeout, Duration::from_millis),
            restart_expected: self.restart_expected.unwrap_or(defaults.restart_expected),
            heartbeat_region: self.heartbeat_region.unwrap_or(defaults.heartbeat_region),
        };
        config.validate()?;
        Ok(config)
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

impl TimeoutUpdate {
    /// As the protocol's `Timeouts` in an `UpdateConfig`.
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

/// Whole milliseconds, rounded up so that a non-zero duration never reads as
/// 0 ("no timeout"), saturating at `u64::MAX`.
pub(crate) fn ms(d: Duration) -> u64 {
    let whole = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    if !d.subsec_nanos().is_multiple_of(1_000_000) {
        whole.saturating_add(1)
    } else {
        whole
    }
}

/// The name of a signal, `SIG…`, or its number as text.
pub fn signal_name(signal: Signal) -> String {
    TERMINATION_SIGNALS
        .iter()
        .find(|(_, s)| *s == signal)
        .map_or_else(|| signal.as_raw().to_string(), |(n, _)| (*n).to_owned())
}

fn signal_by_name(name: &str) -> std::result::Result<Signal, String> {
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
        .ok_or_else(|| unknown_signal(name))
}

fn signal_by_number(n: i32) -> std::result::Result<Signal, String> {
    TERMINATION_SIGNALS
        .iter()
        .find(|(_, s)| s.as_raw() == n)
        .map(|(_, s)| *s)
        .ok_or_else(|| unknown_signal(&n.to_string()))
}

fn unknown_signal(what: &str) -> String {
    let names: Vec<&str> = TERMINATION_SIGNALS.iter().map(|(n, _)| *n).collect();
    format!(
        "termination signal {what:?} is not one of {}",
        names.join(", ")
    )
}
