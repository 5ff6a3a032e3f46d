//! nvidia-resiliency-ext's `ft_launcher` settings: its `--ft-*` options and
//! the fields of its `fault_tolerance:` configuration block, each
//! implemented, accepted with a one-line warning, or refused by name — so
//! that NVRx job scripts and YAML files load, and nothing is silently
//! ignored. `launch/README.md` holds the same table; a test keeps the two
//! equal.
//!
//! Values follow NVRx 0.7.0's `FaultToleranceConfig.from_args`: seconds as
//! `none`/`null`/empty (no limit) or a number, sections as
//! `name:seconds,...`, booleans as NVRx reads each. The file is read first,
//! the options go over it.

use std::path::Path;
use std::time::Duration;

use nodeipc_monitor::MonitorConfig;
use nodeipc_monitor_host::{HealthConfig, MonitorConfigFile, NvrxConfig};
use serde_json::{Map, Number, Value};

use crate::progress::ProgressOptions;
use crate::{Error, Result};

mod table;

pub use table::{FT_SETTINGS, FtSetting, FtSupport, FtValue};

/// What the NVRx settings of a launch come to.
#[derive(Clone, Debug)]
pub struct FtSettings {
    /// The monitors' configuration.
    pub monitor: MonitorConfig,
    /// The health checks (our `health_checks` section, given in the file).
    pub health: HealthConfig,
    /// Progress tracking.
    pub progress: ProgressOptions,
    /// `node_health_check_interval`, when given.
    pub health_interval: Option<Duration>,
    /// `safety_factor`, when given: the ranks' clients get it as
    /// `NODEIPC_FT_SAFETY_FACTOR` (NVRx's clients take it from the config
    /// their launcher hands the rank monitor).
    pub safety_factor: Option<f64>,
    /// One line per setting accepted without effect.
    pub warnings: Vec<String>,
}

/// Reads NVRx's settings: the configuration file (`--ft-cfg-path`), then
/// the `--ft-*` options given (`(option after --ft-, value)`, value `None`
/// for a flag) over it.
///
/// # Errors
/// [`Error::Options`] naming a refused setting and why, an option NVRx does
/// not have, or a value that does not read; the monitor's configuration
/// errors naming the file and field.
pub fn resolve(file: Option<&Path>, options: &[(String, Option<String>)]) -> Result<FtSettings> {
    let mut overrides = Map::new();
    let mut warnings = Vec::new();
    let mut progress = ProgressOptions::default();
    for (option, text) in options {
        let setting = FT_SETTINGS
            .iter()
            .find(|s| s.option == Some(option.as_str()))
            .ok_or_else(|| {
                Error::options(format!("--ft-{option}: not an option of ft_launcher 0.7.0"))
            })?;
        let value = parse(setting, text.as_deref())?;
        match setting.support {
            FtSupport::Refused(why) => {
                return Err(Error::options(format!(
                    "{}: not supported: {why}",
                    setting.name()
                )));
            }
            FtSupport::Warned(why) => {
                warnings.push(format!("{}: accepted, no effect: {why}", setting.name()))
            }
            FtSupport::Implemented => {}
        }
        match (setting.option, setting.field) {
            (Some("no-restart-exit-code"), _) => {
                progress.no_restart_exit_code = value
                    .as_i64()
                    .and_then(|v| i32::try_from(v).ok())
                    .ok_or_else(|| {
                        Error::options(format!(
                            "--ft-no-restart-exit-code {value}: not an exit status"
                        ))
                    })?;
            }
            (Some("restart-policy"), _) if value != "any-failed" => {
                return Err(Error::options(format!(
                    "--ft-restart-policy {value}: the only policy is any-failed (as in nvidia-resiliency-ext)"
                )));
            }
            (_, Some(field)) => {
                overrides.insert(field.to_owned(), value);
            }
            _ => {}
        }
    }
    let nvrx = match file {
        Some(path) => MonitorConfig::load_nvrx_with(path, overrides),
        None => MonitorConfig::from_nvrx_with(None, overrides),
    }
    .map_err(|e| Error::options(format!("nvidia-resiliency-ext settings: {e}")))?;
    let NvrxConfig {
        monitor,
        health,
        others,
        safety_factor,
        ..
    } = nvrx;
    let mut health_interval = None;
    // Where a field came from, for its warning (an option names itself).
    let from = file.map_or(String::new(), |f| {
        format!("{}: ", nodeipc_text::Printable(&f.display().to_string()))
    });
    for (key, value) in &others {
        let Some(setting) = FT_SETTINGS.iter().find(|s| s.field == Some(key.as_str())) else {
            warnings.push(format!(
                "{from}fault_tolerance.{key}: not a field of nvidia-resiliency-ext 0.7.0, ignored"
            ));
            continue;
        };
        let at_default = same(value, &default_of(setting));
        match setting.support {
            FtSupport::Refused(why) if !at_default => {
                return Err(Error::options(format!(
                    "fault_tolerance.{key} = {value}: not supported: {why}"
                )));
            }
            FtSupport::Warned(why) if !at_default && !given(options, setting) => {
                warnings.push(format!(
                    "{from}fault_tolerance.{key}: accepted, no effect: {why}"
                ));
            }
            _ => {}
        }
        match key.as_str() {
            "max_no_progress_cycles" => progress.max_no_progress_cycles = int(key, value)?,
            "min_progress_iterations" => progress.min_progress_iterations = int(key, value)?,
            "checkpoint_iteration_file" => {
                progress.checkpoint_iteration_file = match value {
                    Value::Null => None,
                    Value::String(path) => Some(path.into()),
                    other => {
                        return Err(Error::options(format!(
                            "fault_tolerance.{key} = {other}: not a path"
                        )));
                    }
                };
            }
            "node_health_check_interval" => {
                health_interval = match value {
                    Value::Null => None,
                    v => Some(seconds(key, v)?),
                };
            }
            _ => {}
        }
    }
    Ok(FtSettings {
        monitor,
        health,
        progress,
        health_interval,
        safety_factor,
        warnings,
    })
}

fn given(options: &[(String, Option<String>)], setting: &FtSetting) -> bool {
    options
        .iter()
        .any(|(o, _)| setting.option == Some(o.as_str()))
}

fn default_of(setting: &FtSetting) -> Value {
    serde_json::from_str(setting.default).unwrap_or(Value::Null)
}

/// Equal as NVRx would see them: numbers by value (5 is 5.0).
fn same(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

fn int(key: &str, value: &Value) -> Result<i64> {
    value.as_i64().ok_or_else(|| {
        Error::options(format!(
            "fault_tolerance.{key} = {value}: not a whole number"
        ))
    })
}

fn seconds(key: &str, value: &Value) -> Result<Duration> {
    value
        .as_f64()
        .filter(|s| *s > 0.0 && *s <= crate::MAX_STOP_TIMEOUT.as_secs_f64())
        .map(Duration::from_secs_f64)
        .ok_or_else(|| {
            Error::options(format!(
                "fault_tolerance.{key} = {value}: not a number of seconds from 0 to {}",
                crate::MAX_STOP_TIMEOUT.as_secs()
            ))
        })
}

/// An option's value, read as NVRx's `from_args` reads it.
fn parse(setting: &FtSetting, text: Option<&str>) -> Result<Value> {
    let name = setting.name();
    let refused = |what: &str| {
        Error::options(format!(
            "{name} {:?}: {what}",
            nodeipc_text::Printable(text.unwrap_or("")).to_string()
        ))
    };
    let Some(text) = text else {
        return match setting.value {
            FtValue::Flag => Ok(Value::Bool(true)),
            _ => Err(refused("needs a value")),
        };
    };
    let trimmed = text.trim();
    let none = matches!(trimmed.to_ascii_lowercase().as_str(), "none" | "null" | "");
    Ok(match setting.value {
        FtValue::Flag => return Err(refused("takes no value")),
        FtValue::Seconds if none => Value::Null,
        FtValue::Seconds => number(trimmed).ok_or_else(|| refused("not a number (or none)"))?,
        FtValue::Sections => {
            let mut sections = Map::new();
            if !trimmed.is_empty() {
                for item in trimmed.split(',') {
                    let (name, seconds) = item
                        .split_once(':')
                        .filter(|(_, s)| !s.contains(':'))
                        .ok_or_else(|| refused("not name:seconds,... (setup:600,step:180)"))?;
                    let seconds = seconds.trim();
                    let value =
                        if matches!(seconds.to_ascii_lowercase().as_str(), "none" | "null" | "") {
                            Value::Null
                        } else {
                            number(seconds)
                                .ok_or_else(|| refused("a section's seconds are not a number"))?
                        };
                    sections.insert(name.trim().to_owned(), value);
                }
            }
            Value::Object(sections)
        }
        FtValue::Int => Value::from(
            trimmed
                .parse::<i64>()
                .map_err(|_| refused("not a whole number"))?,
        ),
        FtValue::Text => Value::from(text),
        FtValue::TrueUnlessNo => Value::Bool(!matches!(
            trimmed.to_ascii_lowercase().as_str(),
            "false" | "0" | "no"
        )),
        FtValue::TrueOnlyIfYes => Value::Bool(matches!(
            trimmed.to_ascii_lowercase().as_str(),
            "true" | "1" | "yes"
        )),
    })
}

fn number(text: &str) -> Option<Value> {
    let value: f64 = text.parse().ok()?;
    Number::from_f64(value).map(Value::Number)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opt(option: &str, value: &str) -> (String, Option<String>) {
        (option.to_owned(), Some(value.to_owned()))
    }

    #[test]
    fn job_script_options_reach_the_monitor_and_progress_tracking() {
        let settings = resolve(
            None,
            &[
                opt("initial-rank-heartbeat-timeout", "none"),
                opt("rank-heartbeat-timeout", "15"),
                opt("rank-section-timeouts", "setup:600,step:180"),
                opt("rank-out-of-section-timeout", "30.5"),
                opt("max-no-progress-cycles", "2"),
                opt("checkpoint-iteration-file", "/tmp/iter"),
                opt("no-restart-exit-code", "94"),
            ],
        )
        .unwrap();
        let timeouts = &settings.monitor.timeouts;
        assert_eq!(timeouts.initial_heartbeat, None);
        assert_eq!(timeouts.heartbeat, Some(Duration::from_secs(15)));
        assert_eq!(timeouts.sections["setup"], Duration::from_secs(600));
        assert_eq!(timeouts.sections["step"], Duration::from_secs(180));
        assert_eq!(timeouts.out_of_section, Some(Duration::from_millis(30_500)));
        assert_eq!(settings.progress.max_no_progress_cycles, 2);
        assert_eq!(settings.progress.no_restart_exit_code, 94);
        assert_eq!(
            settings.progress.checkpoint_iteration_file.as_deref(),
            Some(Path::new("/tmp/iter"))
        );
        assert!(settings.warnings.is_empty(), "{:?}", settings.warnings);
    }

    #[test]
    fn warned_options_say_why_and_refused_ones_name_themselves() {
        let settings = resolve(None, &[opt("log-level", "DEBUG")]).unwrap();
        assert_eq!(settings.warnings.len(), 1);
        assert!(settings.warnings[0].starts_with("--ft-log-level: accepted, no effect"));
        let error = resolve(None, &[opt("segment", "4")])
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("--ft-segment: not supported: no hot-spare segments"),
            "{error}"
        );
        let error = resolve(None, &[opt("rank-heartbeat-timeout", "soon")])
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("--ft-rank-heartbeat-timeout \"soon\": not a number"),
            "{error}"
        );
        let error = resolve(None, &[opt("rank-section-timeouts", "a:1:2")])
            .unwrap_err()
            .to_string();
        assert!(error.contains("not name:seconds"), "{error}");
    }

    #[test]
    fn every_option_has_its_nvrx_spellings() {
        let s = FT_SETTINGS
            .iter()
            .find(|s| s.option == Some("rank-heartbeat-timeout"))
            .unwrap();
        assert_eq!(s.long().unwrap(), "ft-rank-heartbeat-timeout");
        assert_eq!(
            s.aliases(),
            ["ft-rank_heartbeat_timeout", "ft_rank_heartbeat_timeout"]
        );
        let s = FT_SETTINGS
            .iter()
            .find(|s| s.option == Some("segment"))
            .unwrap();
        assert_eq!(s.aliases(), ["ft_segment"]);
        for setting in FT_SETTINGS {
            assert!(setting.option.is_some() || setting.field.is_some());
            assert!(
                serde_json::from_str::<Value>(setting.default).is_ok(),
                "{}: default {}",
                setting.name(),
                setting.default
            );
        }
    }
}
