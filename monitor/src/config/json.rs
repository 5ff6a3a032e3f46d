//! Reading the JSON form of [`MonitorConfig`] (feature `json`): strict,
//! every unknown field refused by name.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::{Timeouts, signal_by_name, signal_by_number};
use crate::limits::MAX_CONFIG_FILE;
use crate::{
    DEFAULT_HEALTH_INTERVAL, Error, GpuHealth, HealthConfig, MonitorConfig, NicHealth, Result,
};

/// The JSON form of [`MonitorConfig`]: flat, durations in milliseconds,
/// absent or `null` meaning "no timeout"; the health checks in a section
/// of their own.
#[derive(Debug, Default, Deserialize)]
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
    health_checks: Option<HealthFile>,
}

/// `"health_checks": { "nic": {…}, "gpu": {…} }`: a check is on when its
/// object is there.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct HealthFile {
    nic: Option<NicFile>,
    gpu: Option<GpuFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NicFile {
    devices: Vec<String>,
    #[serde(default)]
    sysfs_root: Option<PathBuf>,
    #[serde(default)]
    interval_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct GpuFile {
    interval_ms: Option<u64>,
    cuda_visible_devices: Option<String>,
}

/// A signal by name (`"SIGTERM"`, `"TERM"`) or number (`15`).
#[derive(Debug, Deserialize)]
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
    ///          "termination_signal": "SIGTERM", "kill_after_ms": 2000,
    ///          "health_checks": { "gpu": { "interval_ms": 10000 } } }"#,
    /// )?;
    /// assert_eq!(config.timeouts.heartbeat, Some(Duration::from_secs(30)));
    /// assert_eq!(config.kill_after, Some(Duration::from_secs(2)));
    /// assert_eq!(config.health.gpu.unwrap().interval, Duration::from_secs(10));
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
        let text = read_config_file(path)?;
        MonitorConfig::from_json(&text).map_err(|e| Error::ConfigFile {
            path: path.to_owned(),
            reason: match e {
                Error::Config { reason } => reason,
                other => other.to_string(),
            },
        })
    }
}

/// A configuration file's text, with the trust rules of
/// [`MonitorConfig::load`]: ours (or root's), not writable by group or
/// others, at most `MAX_CONFIG_FILE` bytes, UTF-8.
pub(crate) fn read_config_file(path: &Path) -> Result<String> {
    let bytes = nodeipc_fs::read_capped(
        path,
        nodeipc_fs::ModeRule::NotWritableByOthers,
        MAX_CONFIG_FILE,
    )
    .map_err(|source| Error::File {
        what: "configuration file",
        source,
    })?;
    String::from_utf8(bytes).map_err(|e| Error::ConfigFile {
        path: path.to_owned(),
        reason: format!("not UTF-8: {e}"),
    })
}

/// An interval in ms: absent is the default, 0 is refused.
fn interval(what: &str, value: Option<u64>) -> Result<Duration> {
    match value {
        None => Ok(DEFAULT_HEALTH_INTERVAL),
        Some(0) => Err(Error::config(format!(
            "{what} is 0: a check needs an interval of at least 1 ms"
        ))),
        Some(ms) => Ok(Duration::from_millis(ms)),
    }
}

impl HealthFile {
    fn into_config(self) -> Result<HealthConfig> {
        let nic = match self.nic {
            None => None,
            Some(nic) => Some(NicHealth {
                devices: nic.devices,
                sysfs_root: nic
                    .sysfs_root
                    .unwrap_or_else(|| NicHealth::default().sysfs_root),
                interval: interval("health_checks.nic.interval_ms", nic.interval_ms)?,
            }),
        };
        let gpu = match self.gpu {
            None => None,
            Some(gpu) => Some(GpuHealth {
                interval: interval("health_checks.gpu.interval_ms", gpu.interval_ms)?,
                cuda_visible_devices: gpu.cuda_visible_devices,
            }),
        };
        Ok(HealthConfig { nic, gpu })
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
            health: self.health_checks.unwrap_or_default().into_config()?,
        };
        config.validate()?;
        Ok(config)
    }
}
