//! nvidia-resiliency-ext's configuration files: their `fault_tolerance:`
//! block (YAML or JSON), its field names read as aliases of ours, seconds
//! turned into our milliseconds. Unknown keys are warned about, not
//! refused (their format grows keys we do not use); our own JSON format
//! stays strict.

use serde_json::{Map, Value};

use nodeipc_monitor::MonitorConfig;

use crate::{HealthConfig, HostConfig, MonitorConfigFile, Result, config_error};

/// Their name, ours, and whether the value is seconds (ours: milliseconds).
const ALIASES: [(&str, &str, bool); 7] = [
    (
        "initial_rank_heartbeat_timeout",
        "initial_heartbeat_timeout_ms",
        true,
    ),
    ("rank_heartbeat_timeout", "heartbeat_timeout_ms", true),
    (
        "rank_out_of_section_timeout",
        "out_of_section_timeout_ms",
        true,
    ),
    ("workload_check_interval", "check_interval_ms", true),
    ("rank_termination_signal", "termination_signal", false),
    ("skip_section_response", "skip_section_replies", false),
    ("rank_section_timeouts", "section_timeouts_ms", true),
];

/// Our own field names (see the README's configuration table).
const OURS: [&str; 14] = [
    "initial_heartbeat_timeout_ms",
    "heartbeat_timeout_ms",
    "out_of_section_timeout_ms",
    "section_timeouts_ms",
    "check_interval_ms",
    "termination_signal",
    "kill_after_ms",
    "skip_section_replies",
    "connection_wait_ms",
    "first_message_timeout_ms",
    "reply_timeout_ms",
    "restart_expected",
    "heartbeat_region",
    "health_checks",
];

/// A nvidia-resiliency-ext configuration, read.
#[derive(Clone, Debug, PartialEq)]
pub struct NvrxConfig {
    /// The monitor's configuration.
    pub monitor: MonitorConfig,
    /// The health checks (ours, `health_checks`: NVRx's own are a
    /// launcher's, in [`others`](NvrxConfig::others)).
    pub health: HealthConfig,
    /// Their `safety_factor`, for a [`TimeoutEstimator`](nodeipc_monitor::TimeoutEstimator).
    pub safety_factor: Option<f64>,
    /// One line per key ignored (unknown to us), naming it.
    pub warnings: Vec<String>,
    /// The keys the monitor does not use, with their values: a launcher
    /// takes its own from them (progress tracking, health check intervals).
    pub others: Map<String, Value>,
}

/// [`MonitorConfigFile::from_nvrx`](crate::MonitorConfigFile::from_nvrx).
pub(crate) fn from_nvrx(text: &str) -> Result<NvrxConfig> {
    from_nvrx_with(Some(text), Map::new())
}

/// [`MonitorConfigFile::from_nvrx_with`](crate::MonitorConfigFile::from_nvrx_with):
/// `overrides` put over the file's block; no file is an empty block.
pub(crate) fn from_nvrx_with(
    text: Option<&str>,
    overrides: Map<String, Value>,
) -> Result<NvrxConfig> {
    let mut block = match text {
        Some(text) => nvrx_block(text)?,
        None => Map::new(),
    };
    block.extend(overrides);
    translate(block)
}

/// The `fault_tolerance` block of a nvidia-resiliency-ext file (else its top
/// level).
fn nvrx_block(text: &str) -> Result<Map<String, Value>> {
    match nvrx_document(text)? {
        Value::Object(mut top) => match top.remove("fault_tolerance") {
            Some(Value::Object(block)) => Ok(block),
            Some(other) => Err(config_error(format!(
                "fault_tolerance is {}, not a mapping",
                kind(&other)
            ))),
            None => Ok(top),
        },
        Value::Null => Ok(Map::new()),
        other => Err(config_error(format!(
            "the document is {}, not a mapping",
            kind(&other)
        ))),
    }
}

fn translate(block: Map<String, Value>) -> Result<NvrxConfig> {
    let mut ours = Map::new();
    let mut aliased = Map::new();
    let mut safety_factor = None;
    let mut warnings = Vec::new();
    let mut others = Map::new();
    for (key, value) in block {
        if OURS.contains(&key.as_str()) {
            ours.insert(key, value);
        } else if key == "safety_factor" {
            safety_factor = match value {
                Value::Null => None,
                v => Some(
                    v.as_f64()
                        .filter(|f| f.is_finite() && *f >= 1.0)
                        .ok_or_else(|| {
                            config_error(format!("safety_factor {v} is not a number >= 1"))
                        })?,
                ),
            };
        } else if let Some((_, name, seconds)) = ALIASES.iter().find(|(theirs, ..)| *theirs == key)
        {
            let value = match (*seconds, value) {
                (_, Value::Null) => continue,
                (true, Value::Object(sections)) => {
                    let mut ms = Map::new();
                    for (section, v) in sections {
                        if v.is_null() {
                            continue;
                        }
                        let what = format!("{key}.{section}");
                        ms.insert(section, Value::from(seconds_to_ms(&what, &v)?));
                    }
                    Value::Object(ms)
                }
                (true, v) => Value::from(seconds_to_ms(&key, &v)?),
                (false, v) => v,
            };
            aliased.insert((*name).to_owned(), value);
        } else {
            warnings.push(format!(
                "nvidia-resiliency-ext key {key:?} is not used by nodeipc: ignored"
            ));
            others.insert(key, value);
        }
    }
    // Ours wins over an alias naming the same field.
    for (name, value) in ours {
        aliased.insert(name, value);
    }
    let HostConfig { monitor, health } =
        HostConfig::from_json(&Value::Object(aliased).to_string())?;
    Ok(NvrxConfig {
        monitor,
        health,
        safety_factor,
        warnings,
        others,
    })
}

/// A nvidia-resiliency-ext configuration document, whole: YAML (or JSON,
/// when its first non-blank character is `{`) in JSON's model, refusing
/// what JSON cannot hold (a NaN, a key that is not a string, a tag).
///
/// # Errors
/// [`Error::Config`](crate::Error::Config) naming what does not parse.
pub fn nvrx_document(text: &str) -> Result<Value> {
    if text.trim_start().starts_with('{') {
        serde_json::from_str(text).map_err(|e| config_error(format!("JSON: {e}")))
    } else {
        let yaml: serde_yaml_ng::Value =
            serde_yaml_ng::from_str(text).map_err(|e| config_error(format!("YAML: {e}")))?;
        from_yaml(yaml, "the document")
    }
}

/// Their seconds (an integer or a fraction) as our whole milliseconds,
/// rounded up so that a short timeout never becomes 0 (no limit).
fn seconds_to_ms(what: &str, value: &Value) -> Result<u64> {
    let seconds = value
        .as_f64()
        .ok_or_else(|| config_error(format!("{what} is {}, not seconds", kind(value))))?;
    // An hour's worth of years is far beyond any timeout; the bound keeps
    // the cast below exact.
    const MAX_SECONDS: f64 = 1.0e12;
    if !(seconds > 0.0 && seconds <= MAX_SECONDS) {
        return Err(config_error(format!(
            "{what} = {value} s is out of range: more than 0, at most {MAX_SECONDS} (null: no limit)"
        )));
    }
    // In range by the check above: at most 1e15 ms, exact in f64 and u64.
    Ok((seconds * 1000.0).ceil() as u64)
}

/// YAML to JSON's model, refusing what JSON cannot hold: a NaN or an
/// infinity (serde would turn it into `null`, "no limit"), a key that is
/// not a string, a tagged value.
fn from_yaml(value: serde_yaml_ng::Value, at: &str) -> Result<Value> {
    use serde_yaml_ng::Value as Y;
    Ok(match value {
        Y::Null => Value::Null,
        Y::Bool(b) => Value::Bool(b),
        Y::Number(n) => {
            if let Some(i) = n.as_u64() {
                Value::from(i)
            } else if let Some(i) = n.as_i64() {
                Value::from(i)
            } else {
                let f = n.as_f64().unwrap_or(f64::NAN);
                serde_json::Number::from_f64(f)
                    .map(Value::Number)
                    .ok_or_else(|| config_error(format!("{at} is {f}, not a finite number")))?
            }
        }
        Y::String(s) => Value::String(s),
        Y::Sequence(items) => Value::Array(
            items
                .into_iter()
                .map(|v| from_yaml(v, at))
                .collect::<Result<_>>()?,
        ),
        Y::Mapping(map) => {
            let mut out = Map::new();
            for (k, v) in map {
                let Y::String(key) = k else {
                    return Err(config_error(format!("{at} has a key that is not a string")));
                };
                let value = from_yaml(v, &key)?;
                out.insert(key, value);
            }
            Value::Object(out)
        }
        Y::Tagged(tagged) => {
            return Err(config_error(format!(
                "{at} has a YAML tag ({}), which is not read",
                tagged.tag
            )));
        }
    })
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}
