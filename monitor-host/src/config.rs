//! The configuration file's form: one serde-derived schema, read and
//! written here only. Strict when read (every unknown field refused by
//! name), flat, durations in milliseconds, absent or `null` meaning "no
//! timeout", the health checks in a section of their own.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nodeipc_monitor::{MonitorConfig, Timeouts, signal_by_name, signal_by_number, signal_name};
use nodeipc_text::whole_ms as ms;
use serde::{Deserialize, Serialize};

use crate::health::{DEFAULT_HEALTH_INTERVAL, GpuHealth, HealthConfig, NicHealth};
use crate::{Error, Result, config_error};

/// Largest configuration file [`MonitorConfigFile::load`] reads.
pub const MAX_CONFIG_FILE: u64 = 1024 * 1024;

/// What a configuration file holds: the monitor's configuration and the
/// health checks run beside it (built by [`HealthChecks`](crate::HealthChecks)
/// for whoever knows the rank's local rank: `nodeipc launch` does, and a
/// monitor process of its own does for whichever rank registers).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostConfig {
    /// How the monitor watches its rank.
    pub monitor: MonitorConfig,
    /// Health checks, each at its own interval (none by default).
    pub health: HealthConfig,
}

impl From<MonitorConfig> for HostConfig {
    fn from(monitor: MonitorConfig) -> HostConfig {
        HostConfig {
            monitor,
            health: HealthConfig::default(),
        }
    }
}

impl HostConfig {
    /// Checks both parts ([`MonitorConfig::validate`], [`HealthConfig::validate`]).
    ///
    /// # Errors
    /// [`Error::Config`] naming the value.
    pub fn validate(&self) -> Result<()> {
        self.monitor.validate()?;
        self.health.validate()
    }
}

/// The JSON form of [`HostConfig`].
#[derive(Debug, Default, Deserialize, Serialize)]
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
    #[serde(skip_serializing_if = "Option::is_none")]
    health_checks: Option<HealthFile>,
}

/// `"health_checks": { "nic": {…}, "gpu": {…} }`: a check is on when its
/// object is there.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
struct HealthFile {
    #[serde(skip_serializing_if = "Option::is_none")]
    nic: Option<NicFile>,
    #[serde(skip_serializing_if = "Option::is_none")]
    gpu: Option<GpuFile>,
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct NicFile {
    devices: Vec<String>,
    #[serde(default)]
    sysfs_root: Option<PathBuf>,
    #[serde(default)]
    interval_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
struct GpuFile {
    interval_ms: Option<u64>,
    cuda_visible_devices: Option<String>,
}

/// A signal by name (`"SIGTERM"`, `"TERM"`) or number (`15`).
#[derive(Debug, Deserialize, Serialize)]
#[serde(untagged)]
enum SignalSpec {
    Number(i32),
    Name(String),
}

/// The file form of [`HostConfig`] (and of a [`MonitorConfig`] alone: one
/// with a `health_checks` section is refused, naming `HostConfig`): JSON
/// (see the crate's README for the fields) and nvidia-resiliency-ext's
/// YAML or JSON.
pub trait MonitorConfigFile: Sized {
    /// Parses the JSON form.
    ///
    /// # Errors
    /// [`Error::Config`] naming the field, line and column.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use nodeipc_monitor_host::{HostConfig, MonitorConfigFile};
    ///
    /// let config = HostConfig::from_json(
    ///     r#"{ "heartbeat_timeout_ms": 30000, "section_timeouts_ms": { "step": 5000 },
    ///          "termination_signal": "SIGTERM", "kill_after_ms": 2000,
    ///          "health_checks": { "gpu": { "interval_ms": 10000 } } }"#,
    /// )?;
    /// assert_eq!(config.monitor.timeouts.heartbeat, Some(Duration::from_secs(30)));
    /// assert_eq!(config.monitor.kill_after, Some(Duration::from_secs(2)));
    /// assert_eq!(config.health.gpu.unwrap().interval, Duration::from_secs(10));
    /// # Ok::<(), nodeipc_monitor_host::Error>(())
    /// ```
    fn from_json(text: &str) -> Result<Self>;

    /// The JSON form, every field written (`null` for "no timeout"), which
    /// [`from_json`](MonitorConfigFile::from_json) reads back.
    fn to_json(&self) -> String;

    /// Reads and parses a JSON configuration file, trusting it only as far
    /// as `ssh` trusts its own: it must be a regular file (a FIFO or a
    /// device is refused without blocking, a symlink is not followed) owned
    /// by our effective uid, not writable by group or others, and at most
    /// [`MAX_CONFIG_FILE`] bytes. Whoever can write the file decides when
    /// the rank is killed.
    ///
    /// # Errors
    /// [`Error::File`] naming the path and what was found there (its type,
    /// owner and mode, or its size), with the errno kept;
    /// [`Error::ConfigFile`] naming the file and what does not parse.
    fn load(path: impl AsRef<Path>) -> Result<Self>;

    /// Parses a nvidia-resiliency-ext configuration: the `fault_tolerance`
    /// block when there is one (else the top level), their names
    /// (`initial_rank_heartbeat_timeout`, `rank_heartbeat_timeout`,
    /// `rank_section_timeouts`, `rank_out_of_section_timeout`,
    /// `workload_check_interval`, `rank_termination_signal`,
    /// `skip_section_response`, `safety_factor`; seconds, `null` for no
    /// limit) beside ours; where both name a field, ours wins. Other keys
    /// are ignored, each with a warning.
    ///
    /// # Errors
    /// [`Error::Config`] naming the field and what is wrong with it.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use nodeipc_monitor::MonitorConfig;
    /// use nodeipc_monitor_host::MonitorConfigFile;
    ///
    /// let nvrx = MonitorConfig::from_nvrx(
    ///     "fault_tolerance:\n  rank_heartbeat_timeout: 30.5\n  rank_section_timeouts:\n    step: 5\n  log_level: INFO\n",
    /// )?;
    /// assert_eq!(nvrx.monitor.timeouts.heartbeat, Some(Duration::from_millis(30_500)));
    /// assert_eq!(nvrx.monitor.timeouts.sections["step"], Duration::from_secs(5));
    /// assert_eq!(nvrx.warnings.len(), 1); // log_level
    /// # Ok::<(), nodeipc_monitor_host::Error>(())
    /// ```
    fn from_nvrx(text: &str) -> Result<crate::NvrxConfig>;

    /// Reads a nvidia-resiliency-ext configuration file (YAML, or JSON: a
    /// file whose first non-blank character is `{`), with the same trust
    /// rules as [`load`](MonitorConfigFile::load). See
    /// [`from_nvrx`](MonitorConfigFile::from_nvrx).
    ///
    /// # Errors
    /// As `load`; [`Error::ConfigFile`] naming the file and the field.
    fn load_nvrx(path: impl AsRef<Path>) -> Result<crate::NvrxConfig>;

    /// As [`from_nvrx`](MonitorConfigFile::from_nvrx), with `overrides`
    /// (their field names and values, as a launcher's `--ft-*` options give
    /// them) put over the file's block; no file is an empty block.
    ///
    /// # Errors
    /// As `from_nvrx`.
    fn from_nvrx_with(
        text: Option<&str>,
        overrides: serde_json::Map<String, serde_json::Value>,
    ) -> Result<crate::NvrxConfig>;

    /// As [`load_nvrx`](MonitorConfigFile::load_nvrx), with `overrides` put
    /// over the file's block.
    ///
    /// # Errors
    /// As `load_nvrx`.
    fn load_nvrx_with(
        path: &Path,
        overrides: serde_json::Map<String, serde_json::Value>,
    ) -> Result<crate::NvrxConfig>;
}

impl MonitorConfigFile for HostConfig {
    fn from_json(text: &str) -> Result<HostConfig> {
        let file: ConfigFile =
            serde_json::from_str(text).map_err(|e| config_error(e.to_string()))?;
        file.into_config()
    }

    fn to_json(&self) -> String {
        serde_json::to_string_pretty(&ConfigFile::from(self))
            .expect("a configuration always serializes")
    }

    fn load(path: impl AsRef<Path>) -> Result<HostConfig> {
        let path = path.as_ref();
        let text = read_config_file(path)?;
        HostConfig::from_json(&text).map_err(|e| in_file(path, e))
    }

    fn from_nvrx(text: &str) -> Result<crate::NvrxConfig> {
        crate::nvrx::from_nvrx(text)
    }

    fn load_nvrx(path: impl AsRef<Path>) -> Result<crate::NvrxConfig> {
        Self::load_nvrx_with(path.as_ref(), serde_json::Map::new())
    }

    fn from_nvrx_with(
        text: Option<&str>,
        overrides: serde_json::Map<String, serde_json::Value>,
    ) -> Result<crate::NvrxConfig> {
        crate::nvrx::from_nvrx_with(text, overrides)
    }

    fn load_nvrx_with(
        path: &Path,
        overrides: serde_json::Map<String, serde_json::Value>,
    ) -> Result<crate::NvrxConfig> {
        let text = read_config_file(path)?;
        crate::nvrx::from_nvrx_with(Some(&text), overrides).map_err(|e| in_file(path, e))
    }
}

/// The monitor's part alone: as [`HostConfig`]'s, refusing a
/// `health_checks` section (it would be dropped).
impl MonitorConfigFile for MonitorConfig {
    fn from_json(text: &str) -> Result<MonitorConfig> {
        monitor_only(HostConfig::from_json(text)?)
    }

    fn to_json(&self) -> String {
        HostConfig::from(self.clone()).to_json()
    }

    fn load(path: impl AsRef<Path>) -> Result<MonitorConfig> {
        let path = path.as_ref();
        monitor_only(HostConfig::load(path)?).map_err(|e| in_file(path, e))
    }

    fn from_nvrx(text: &str) -> Result<crate::NvrxConfig> {
        HostConfig::from_nvrx(text)
    }

    fn load_nvrx(path: impl AsRef<Path>) -> Result<crate::NvrxConfig> {
        HostConfig::load_nvrx(path)
    }

    fn from_nvrx_with(
        text: Option<&str>,
        overrides: serde_json::Map<String, serde_json::Value>,
    ) -> Result<crate::NvrxConfig> {
        HostConfig::from_nvrx_with(text, overrides)
    }

    fn load_nvrx_with(
        path: &Path,
        overrides: serde_json::Map<String, serde_json::Value>,
    ) -> Result<crate::NvrxConfig> {
        HostConfig::load_nvrx_with(path, overrides)
    }
}

/// The monitor's part of `config`, which must have no health checks.
fn monitor_only(config: HostConfig) -> Result<MonitorConfig> {
    if !config.health.is_empty() {
        return Err(config_error(
            "health_checks: a MonitorConfig holds none; read the file as a HostConfig",
        ));
    }
    Ok(config.monitor)
}

/// A configuration error as one of the file at `path`.
fn in_file(path: &Path, e: Error) -> Error {
    match e {
        Error::Config { reason } => Error::ConfigFile {
            path: path.to_owned(),
            reason,
        },
        other => other,
    }
}

/// A configuration file's text, with the trust rules of
/// [`MonitorConfigFile::load`]: ours (or root's), not writable by group or
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
        Some(0) => Err(config_error(format!(
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

impl From<&HealthConfig> for HealthFile {
    fn from(health: &HealthConfig) -> HealthFile {
        HealthFile {
            nic: health.nic.as_ref().map(|nic| NicFile {
                devices: nic.devices.clone(),
                sysfs_root: Some(nic.sysfs_root.clone()),
                interval_ms: Some(ms(nic.interval)),
            }),
            gpu: health.gpu.as_ref().map(|gpu| GpuFile {
                interval_ms: Some(ms(gpu.interval)),
                cuda_visible_devices: gpu.cuda_visible_devices.clone(),
            }),
        }
    }
}

impl From<&HostConfig> for ConfigFile {
    fn from(host: &HostConfig) -> ConfigFile {
        let c = &host.monitor;
        let t = &c.timeouts;
        ConfigFile {
            initial_heartbeat_timeout_ms: t.initial_heartbeat.map(ms),
            heartbeat_timeout_ms: t.heartbeat.map(ms),
            out_of_section_timeout_ms: t.out_of_section.map(ms),
            section_timeouts_ms: t
                .sections
                .iter()
                .map(|(k, v)| (k.clone(), ms(*v)))
                .collect(),
            check_interval_ms: Some(ms(c.check_interval)),
            termination_signal: Some(SignalSpec::Name(signal_name(c.termination_signal))),
            kill_after_ms: c.kill_after.map(ms),
            skip_section_replies: Some(c.skip_section_replies),
            connection_wait_ms: Some(ms(c.connection_wait)),
            first_message_timeout_ms: Some(ms(c.first_message_timeout)),
            reply_timeout_ms: Some(ms(c.reply_timeout)),
            restart_expected: Some(c.restart_expected),
            heartbeat_region: Some(c.heartbeat_region),
            health_checks: (!host.health.is_empty()).then(|| HealthFile::from(&host.health)),
        }
    }
}

impl ConfigFile {
    fn into_config(self) -> Result<HostConfig> {
        let defaults = MonitorConfig::default();
        let timeout = |what: &str, value: Option<u64>| -> Result<Option<Duration>> {
            match value {
                Some(0) => Err(config_error(format!(
                    "{what} is 0: leave it out (or null) for no limit"
                ))),
                other => Ok(other.map(Duration::from_millis)),
            }
        };
        let termination_signal = match self.termination_signal {
            None => defaults.termination_signal,
            Some(SignalSpec::Number(n)) => signal_by_number(n)?,
            Some(SignalSpec::Name(name)) => signal_by_name(&name)?,
        };
        let monitor = MonitorConfig {
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
        let config = HostConfig {
            monitor,
            health: self.health_checks.unwrap_or_default().into_config()?,
        };
        config.validate()?;
        Ok(config)
    }
}
