//! [`NvrxState`]: a client's calculated timeouts as a checkpoint keeps
//! them, written in NVRx 0.3's form onward and read in every earlier one.

use serde_json::{Map, Value};

use nodeipc_monitor::MAX_SECTIONS;

use super::{HeartbeatTimeouts, SectionTimeouts, check_name};
use crate::{MAX_CONFIG_FILE, Result, config_error};

/// A client's calculated timeouts as a checkpoint keeps them (NVRx's
/// `state_dict`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NvrxState {
    /// The heartbeat timeouts, when calculated.
    pub heartbeat: Option<HeartbeatTimeouts>,
    /// The section timeouts, when any was calculated.
    pub section: Option<SectionTimeouts>,
}

/// The top-level key of NVRx's form.
const CURRENT: &str = "current_timeouts";

impl NvrxState {
    /// What `state_dict` keeps of the timeouts in force: the heartbeat ones
    /// when both are set and were calculated, the section ones when any was
    /// calculated (NVRx's rule).
    pub fn of(heartbeat: &HeartbeatTimeouts, section: &SectionTimeouts) -> NvrxState {
        NvrxState {
            heartbeat: (heartbeat.are_valid() && heartbeat.were_calculated == Some(true))
                .then(|| heartbeat.clone()),
            section: (!section.calculated_sections.is_empty()
                || section.is_out_of_section_calculated)
                .then(|| section.clone()),
        }
    }

    /// NVRx 0.3 onward's form: `{"current_timeouts": {"heartbeat": {initial,
    /// subsequent, were_calculated}, "section": {section, out_of_section,
    /// calculated_sections (a sorted list), is_out_of_section_calculated}}}`,
    /// each part only when present (`{"current_timeouts": {}}` when neither).
    pub fn to_json(&self) -> String {
        let mut current = Map::new();
        if let Some(hb) = &self.heartbeat {
            let mut m = Map::new();
            m.insert("initial".into(), number(hb.initial));
            m.insert("subsequent".into(), number(hb.subsequent));
            m.insert("were_calculated".into(), hb.were_calculated.into());
            current.insert("heartbeat".into(), Value::Object(m));
        }
        if let Some(st) = &self.section {
            let mut m = Map::new();
            let sections = st
                .section
                .iter()
                .map(|(k, v)| (k.clone(), number(*v)))
                .collect();
            m.insert("section".into(), Value::Object(sections));
            m.insert("out_of_section".into(), number(st.out_of_section));
            m.insert(
                "calculated_sections".into(),
                st.calculated_sections.iter().cloned().collect(),
            );
            m.insert(
                "is_out_of_section_calculated".into(),
                st.is_out_of_section_calculated.into(),
            );
            current.insert("section".into(), Value::Object(m));
        }
        let mut top = Map::new();
        top.insert(CURRENT.into(), Value::Object(current));
        Value::Object(top).to_string()
    }

    /// Reads a state in any form written before: NVRx 0.3 onward's (see
    /// [`to_json`](NvrxState::to_json)), NVRx 0.2's (`{"current_timeouts":
    /// {initial, subsequent, were_calculated}}`), nodeipc's earlier
    /// `{"hb_timeouts": {…}, "section_timeouts": {…}}`, and an empty one
    /// (`{}`, `{"current_timeouts": {}}`).
    ///
    /// # Errors
    /// [`Error::Config`](crate::Error::Config) naming the key that is
    /// missing, unknown or of the wrong kind (a timeout must be a positive
    /// number of seconds or null).
    pub fn from_json(text: &str) -> Result<NvrxState> {
        if text.len() as u64 > MAX_CONFIG_FILE {
            return Err(config_error(format!(
                "a state dict of {} bytes; at most {MAX_CONFIG_FILE}",
                text.len()
            )));
        }
        let value: Value = serde_json::from_str(text)
            .map_err(|e| config_error(format!("the state dict is not JSON: {e}")))?;
        let top = object(&value, "the state dict")?;
        if top.contains_key("hb_timeouts") || top.contains_key("section_timeouts") {
            only(top, "the state dict", &["hb_timeouts", "section_timeouts"])?;
            return Ok(NvrxState {
                heartbeat: top
                    .get("hb_timeouts")
                    .map(|v| heartbeat(v, "hb_timeouts"))
                    .transpose()?,
                section: top
                    .get("section_timeouts")
                    .map(|v| section(v, "section_timeouts"))
                    .transpose()?,
            });
        }
        only(top, "the state dict", &[CURRENT])?;
        let Some(current) = top.get(CURRENT) else {
            return Ok(NvrxState::default());
        };
        let map = object(current, CURRENT)?;
        let v02 = ["initial", "subsequent", "were_calculated"];
        if !map.is_empty() && map.keys().all(|k| v02.contains(&k.as_str())) {
            return Ok(NvrxState {
                heartbeat: Some(heartbeat(current, CURRENT)?),
                section: None,
            });
        }
        only(map, CURRENT, &["heartbeat", "section"])?;
        Ok(NvrxState {
            heartbeat: map
                .get("heartbeat")
                .map(|v| heartbeat(v, "current_timeouts.heartbeat"))
                .transpose()?,
            section: map
                .get("section")
                .map(|v| section(v, "current_timeouts.section"))
                .transpose()?,
        })
    }
}

fn number(v: Option<f64>) -> Value {
    v.and_then(serde_json::Number::from_f64)
        .map_or(Value::Null, Value::Number)
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

fn object<'a>(value: &'a Value, at: &str) -> Result<&'a Map<String, Value>> {
    value
        .as_object()
        .ok_or_else(|| config_error(format!("{at} is {}, not a mapping", kind(value))))
}

/// Refuses a key of `map` not in `known`, naming it.
fn only(map: &Map<String, Value>, at: &str, known: &[&str]) -> Result<()> {
    match map.keys().find(|k| !known.contains(&k.as_str())) {
        Some(key) => Err(config_error(format!(
            "{at} has key {key:?}, not one of {}",
            known.join(", ")
        ))),
        None => Ok(()),
    }
}

/// A timeout: a positive finite number of seconds, or null.
fn timeout(value: Option<&Value>, at: &str) -> Result<Option<f64>> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_f64() {
            Some(s) if s.is_finite() && s > 0.0 => Ok(Some(s)),
            _ => Err(config_error(format!(
                "{at} is {v}: a timeout is a positive number of seconds or null"
            ))),
        },
    }
}

fn flag(value: Option<&Value>, at: &str) -> Result<Option<bool>> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(config_error(format!("{at} is {}, not a boolean", kind(v)))),
    }
}

fn heartbeat(value: &Value, at: &str) -> Result<HeartbeatTimeouts> {
    let map = object(value, at)?;
    only(map, at, &["initial", "subsequent", "were_calculated"])?;
    Ok(HeartbeatTimeouts {
        initial: timeout(map.get("initial"), &format!("{at}.initial"))?,
        subsequent: timeout(map.get("subsequent"), &format!("{at}.subsequent"))?,
        were_calculated: flag(map.get("were_calculated"), &format!("{at}.were_calculated"))?,
    })
}

fn section(value: &Value, at: &str) -> Result<SectionTimeouts> {
    let map = object(value, at)?;
    only(
        map,
        at,
        &[
            "section",
            "out_of_section",
            "calculated_sections",
            "is_out_of_section_calculated",
        ],
    )?;
    let mut st = SectionTimeouts {
        out_of_section: timeout(map.get("out_of_section"), &format!("{at}.out_of_section"))?,
        is_out_of_section_calculated: flag(
            map.get("is_out_of_section_calculated"),
            &format!("{at}.is_out_of_section_calculated"),
        )?
        .unwrap_or(false),
        ..SectionTimeouts::default()
    };
    if let Some(sections) = map.get("section") {
        let at = format!("{at}.section");
        let sections = object(sections, &at)?;
        if sections.len() > MAX_SECTIONS {
            return Err(config_error(format!(
                "{at} has {} sections; at most {MAX_SECTIONS}",
                sections.len()
            )));
        }
        for (name, limit) in sections {
            check_name(&at, name)?;
            let limit = timeout(Some(limit), &format!("{at}.{name}"))?;
            st.section.insert(name.clone(), limit);
        }
    }
    if let Some(names) = map.get("calculated_sections") {
        let at = format!("{at}.calculated_sections");
        let Value::Array(names) = names else {
            return Err(config_error(format!("{at} is {}, not a list", kind(names))));
        };
        for name in names {
            let Value::String(name) = name else {
                return Err(config_error(format!(
                    "{at} holds {}, not a section name",
                    kind(name)
                )));
            };
            if !st.section.contains_key(name) {
                return Err(config_error(format!(
                    "{at} names {name:?}, which has no entry in the section timeouts"
                )));
            }
            st.calculated_sections.insert(name.clone());
        }
    }
    Ok(st)
}
