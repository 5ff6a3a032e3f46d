//! nvidia-resiliency-ext's timeout calculation and checkpoint form, for a
//! client that keeps NVRx 0.7.0's meanings (the Python package's
//! `nodeipc.fault_tolerance`):
//!
//! - [`NvrxCalc`]: the longest interval seen of each kind (the initial
//!   heartbeat, between heartbeats, each section, out of section), ready
//!   once two heartbeats (or one completed section) were seen, times the
//!   safety factor, averaged half and half with the timeouts already
//!   calculated. [`maxima`](NvrxCalc::maxima) and
//!   [`merge_maxima`](NvrxCalc::merge_maxima) take the maximum over ranks
//!   (NVRx's all-reduce), so every rank calculates the same timeouts.
//! - [`NvrxState`]: the `state_dict` a checkpoint keeps, written in the
//!   form of NVRx 0.3 onward and read in every form written before
//!   (NVRx 0.2's, 0.3's onward, nodeipc's own earlier one, an empty one).
//!
//! Times are seconds (`f64`), as NVRx's are.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use nodeipc_monitor::{MAX_SECTION_NAME, MAX_SECTIONS};

use crate::{Result, config_error};

mod state;

pub use state::NvrxState;

/// What an interval not yet seen counts as (NVRx's sentinel).
const UNSEEN: f64 = -1.0;

/// Half the new value, half the one calculated before (NVRx 0.3 onward).
const MERGE: f64 = 0.5;

/// Heartbeat timeouts in seconds (`None`: no limit), as NVRx's
/// `HeartbeatTimeouts`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HeartbeatTimeouts {
    /// From `Init` to the first heartbeat.
    pub initial: Option<f64>,
    /// Between two heartbeats.
    pub subsequent: Option<f64>,
    /// Calculated from observations (`Some(false)`: from the
    /// configuration; `None`: not said).
    pub were_calculated: Option<bool>,
}

impl HeartbeatTimeouts {
    /// Both timeouts are set.
    pub fn are_valid(&self) -> bool {
        self.initial.is_some() && self.subsequent.is_some()
    }
}

/// Section timeouts in seconds (`None`: no limit), as NVRx's
/// `SectionTimeouts`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SectionTimeouts {
    /// Each section's timeout.
    pub section: BTreeMap<String, Option<f64>>,
    /// While no section is open.
    pub out_of_section: Option<f64>,
    /// The sections whose timeout was calculated.
    pub calculated_sections: BTreeSet<String>,
    /// Whether the out-of-section timeout was calculated.
    pub is_out_of_section_calculated: bool,
}

impl SectionTimeouts {
    /// Every timeout is set.
    pub fn are_valid(&self) -> bool {
        self.section.values().all(Option::is_some) && self.out_of_section.is_some()
    }

    /// Every section's timeout and the out-of-section one were calculated.
    pub fn were_calculated(&self) -> bool {
        self.is_out_of_section_calculated && self.calculated_sections.iter().eq(self.section.keys())
    }
}

/// NVRx's timeout calculation (its `TimeoutsCalc`): what one rank saw, and
/// the timeouts it comes to.
#[derive(Clone, Debug)]
pub struct NvrxCalc {
    safety_factor: f64,
    /// The configured sections, in order (the order of [`maxima`](NvrxCalc::maxima)).
    sections: Vec<String>,
    start: Instant,
    initial: f64,
    subsequent: f64,
    out_of_section: f64,
    section: BTreeMap<String, f64>,
    last_heartbeat: Option<Instant>,
    open: BTreeMap<String, Instant>,
    /// When the last section closed with none left open (or `start`).
    last_close: Instant,
}

/// Seconds from `from` to `to`.
fn seconds(from: Instant, to: Instant) -> f64 {
    to.saturating_duration_since(from).as_secs_f64()
}

impl NvrxCalc {
    /// A calculation for the configured `sections` (at most
    /// [`MAX_SECTIONS`], names of 1 to [`MAX_SECTION_NAME`] bytes), with
    /// `safety_factor` (finite, above 0), observing from `start` (the
    /// rank's `Init`).
    ///
    /// # Errors
    /// [`Error::Config`](crate::Error::Config) naming the bad value.
    pub fn new(
        sections: impl IntoIterator<Item = String>,
        safety_factor: f64,
        start: Instant,
    ) -> Result<NvrxCalc> {
        if !(safety_factor.is_finite() && safety_factor > 0.0) {
            return Err(config_error(format!(
                "safety_factor {safety_factor} must be a finite number above 0"
            )));
        }
        let mut names = Vec::new();
        for name in sections {
            check_name("a section", &name)?;
            if !names.contains(&name) {
                names.push(name);
            }
        }
        if names.len() > MAX_SECTIONS {
            return Err(config_error(format!(
                "{} sections; at most {MAX_SECTIONS}",
                names.len()
            )));
        }
        Ok(NvrxCalc {
            safety_factor,
            section: names.iter().map(|n| (n.clone(), UNSEEN)).collect(),
            sections: names,
            start,
            initial: UNSEEN,
            subsequent: UNSEEN,
            out_of_section: UNSEEN,
            last_heartbeat: None,
            open: BTreeMap::new(),
            last_close: start,
        })
    }

    /// The configured sections, in order.
    pub fn sections(&self) -> &[String] {
        &self.sections
    }

    /// Whether `name` is a configured section.
    pub fn knows(&self, name: &str) -> bool {
        self.section.contains_key(name)
    }

    /// A heartbeat at `at`: the first one's time since the start, or the
    /// interval since the last one.
    pub fn heartbeat(&mut self, at: Instant) {
        match self.last_heartbeat {
            None => self.initial = self.initial.max(seconds(self.start, at)),
            Some(last) => self.subsequent = self.subsequent.max(seconds(last, at)),
        }
        self.last_heartbeat = Some(at);
    }

    /// Section `name` opens at `at`; the stretch out of sections that it
    /// ends is counted.
    ///
    /// # Errors
    /// An unknown section, or one already open, named.
    pub fn open(&mut self, name: &str, at: Instant) -> std::result::Result<(), String> {
        self.known(name)?;
        if self.open.contains_key(name) {
            return Err(format!(
                "tried to open section {name:?}, which is already open"
            ));
        }
        self.bump_out_of_section(at);
        self.open.insert(name.to_owned(), at);
        Ok(())
    }

    /// Section `name` closes at `at`.
    ///
    /// # Errors
    /// An unknown section, or one not open, named.
    pub fn close(&mut self, name: &str, at: Instant) -> std::result::Result<(), String> {
        self.known(name)?;
        let Some(opened) = self.open.remove(name) else {
            return Err(format!(
                "tried to close section {name:?}, which is not open"
            ));
        };
        if let Some(longest) = self.section.get_mut(name) {
            *longest = longest.max(seconds(opened, at));
        }
        if self.open.is_empty() {
            self.last_close = at;
        }
        Ok(())
    }

    /// Every open section closes at `at`.
    pub fn close_all(&mut self, at: Instant) {
        let open: Vec<String> = self.open.keys().cloned().collect();
        for name in open {
            let _ = self.close(&name, at);
        }
    }

    /// With no section open, the stretch since the last close (or the
    /// start) counts as out of section up to `at` (NVRx does this before
    /// it calculates section timeouts, so the last stretch is not missed).
    pub fn bump_out_of_section(&mut self, at: Instant) {
        if self.open.is_empty() {
            self.out_of_section = self.out_of_section.max(seconds(self.last_close, at));
        }
    }

    fn known(&self, name: &str) -> std::result::Result<(), String> {
        if self.knows(name) {
            Ok(())
        } else {
            Err(format!(
                "unknown section {name:?}: it has no entry in the configuration's section timeouts"
            ))
        }
    }

    /// The longest intervals seen, in seconds (-1: none seen): initial,
    /// between heartbeats, out of section, then each configured section in
    /// order. What ranks exchange to take the maximum over them.
    pub fn maxima(&self) -> Vec<f64> {
        let mut all = vec![self.initial, self.subsequent, self.out_of_section];
        all.extend(self.sections.iter().map(|n| self.section[n]));
        all
    }

    /// Takes, for each interval, the larger of ours and `other`'s (another
    /// rank's [`maxima`](NvrxCalc::maxima)).
    ///
    /// # Errors
    /// [`Error::Config`](crate::Error::Config) when `other` is not as long
    /// as ours (another rank configured other sections) or holds a value
    /// that is not a finite number of at least -1.
    pub fn merge_maxima(&mut self, other: &[f64]) -> Result<()> {
        let ours = 3 + self.sections.len();
        if other.len() != ours {
            return Err(config_error(format!(
                "another rank's observations have {} values, ours {ours}: are its sections the same ({})?",
                other.len(),
                self.sections.join(", ")
            )));
        }
        if let Some(bad) = other.iter().find(|v| !(v.is_finite() && **v >= UNSEEN)) {
            return Err(config_error(format!(
                "another rank's observations hold {bad}, not a number of seconds"
            )));
        }
        self.initial = self.initial.max(other[0]);
        self.subsequent = self.subsequent.max(other[1]);
        self.out_of_section = self.out_of_section.max(other[2]);
        for (name, value) in self.sections.iter().zip(&other[3..]) {
            if let Some(longest) = self.section.get_mut(name) {
                *longest = longest.max(*value);
            }
        }
        Ok(())
    }

    /// Whether heartbeat timeouts can be calculated: a first heartbeat and
    /// an interval between two were seen.
    pub fn heartbeats_ready(&self) -> bool {
        self.initial > 0.0 && self.subsequent > 0.0
    }

    /// Heartbeat timeouts from what was seen, merged with `current` when it
    /// was calculated; `None` when not [`heartbeats_ready`](NvrxCalc::heartbeats_ready).
    pub fn heartbeat_timeouts(&self, current: &HeartbeatTimeouts) -> Option<HeartbeatTimeouts> {
        if !self.heartbeats_ready() {
            return None;
        }
        let mut initial = self.safety_factor * self.initial;
        let mut subsequent = self.safety_factor * self.subsequent;
        if let (Some(true), Some(ci), Some(cs)) =
            (current.were_calculated, current.initial, current.subsequent)
        {
            initial = MERGE * initial + (1.0 - MERGE) * ci;
            subsequent = MERGE * subsequent + (1.0 - MERGE) * cs;
        }
        Some(HeartbeatTimeouts {
            initial: Some(initial),
            subsequent: Some(subsequent),
            were_calculated: Some(true),
        })
    }

    /// The sections `selected` names (`None`: every configured one).
    ///
    /// # Errors
    /// [`Error::Config`](crate::Error::Config) naming a section that is
    /// not configured.
    fn selection(&self, selected: Option<&[String]>) -> Result<Vec<String>> {
        let Some(selected) = selected else {
            return Ok(self.sections.clone());
        };
        for name in selected {
            if !self.knows(name) {
                return Err(config_error(format!(
                    "section {name:?} is not configured (configured: {})",
                    self.sections.join(", ")
                )));
            }
        }
        Ok(selected.to_vec())
    }

    /// Whether the timeouts of `selected` (`None` or empty: every
    /// configured section, as NVRx checks) and, with `out_of_section`, the
    /// out-of-section one can be calculated: each was seen at least once.
    ///
    /// # Errors
    /// As [`section_timeouts`](NvrxCalc::section_timeouts).
    pub fn sections_ready(
        &self,
        selected: Option<&[String]>,
        out_of_section: bool,
    ) -> Result<bool> {
        let checked = match selected {
            Some(s) if !s.is_empty() => self.selection(Some(s))?,
            _ => self.sections.clone(),
        };
        Ok(checked.iter().all(|n| self.section[n] > 0.0)
            && (!out_of_section || self.out_of_section > 0.0))
    }

    /// Section timeouts from what was seen for `selected` (`None`: every
    /// configured section; empty: none, only the out-of-section one) and,
    /// with `out_of_section`, the out-of-section one, merged with `current`:
    /// a value calculated before and now is averaged, one calculated only
    /// now replaces the configured one, the others are kept. `None` when
    /// not [`sections_ready`](NvrxCalc::sections_ready).
    ///
    /// # Errors
    /// [`Error::Config`](crate::Error::Config) naming a selected section
    /// that is not configured.
    pub fn section_timeouts(
        &self,
        current: &SectionTimeouts,
        selected: Option<&[String]>,
        out_of_section: bool,
    ) -> Result<Option<SectionTimeouts>> {
        if !self.sections_ready(selected, out_of_section)? {
            return Ok(None);
        }
        let selected = self.selection(selected)?;
        let merge = |was: bool, old: Option<f64>, new: f64| match (was, old) {
            (true, Some(old)) => MERGE * new + (1.0 - MERGE) * old,
            _ => new,
        };
        let mut next = current.clone();
        for name in &self.sections {
            next.section
                .entry(name.clone())
                .or_insert_with(|| current.section.get(name).copied().flatten());
        }
        for name in &selected {
            let new = self.safety_factor * self.section[name];
            let was = current.calculated_sections.contains(name);
            let old = current.section.get(name).copied().flatten();
            next.section
                .insert(name.clone(), Some(merge(was, old, new)));
            next.calculated_sections.insert(name.clone());
        }
        if out_of_section {
            let new = self.safety_factor * self.out_of_section;
            next.out_of_section = Some(merge(
                current.is_out_of_section_calculated,
                current.out_of_section,
                new,
            ));
            next.is_out_of_section_calculated = true;
        }
        Ok(Some(next))
    }
}

fn check_name(what: &str, name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_SECTION_NAME {
        return Err(config_error(format!(
            "{what} name of {} bytes: 1 to {MAX_SECTION_NAME}",
            name.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn at(start: Instant, ms: u64) -> Instant {
        start + Duration::from_millis(ms)
    }

    fn calc(sections: &[&str], start: Instant) -> NvrxCalc {
        NvrxCalc::new(sections.iter().map(|s| (*s).to_owned()), 5.0, start).unwrap()
    }

    #[test]
    fn heartbeats_need_a_first_and_an_interval_then_are_five_times_the_longest() {
        let t = Instant::now();
        let mut c = calc(&[], t);
        assert_eq!(c.heartbeat_timeouts(&HeartbeatTimeouts::default()), None);
        c.heartbeat(at(t, 1000));
        assert!(!c.heartbeats_ready());
        c.heartbeat(at(t, 1200));
        c.heartbeat(at(t, 1300));
        let hb = c.heartbeat_timeouts(&HeartbeatTimeouts::default()).unwrap();
        assert_eq!(hb.initial, Some(5.0));
        assert!((hb.subsequent.unwrap() - 1.0).abs() < 1e-9, "{hb:?}");
        assert_eq!(hb.were_calculated, Some(true));
        // Merged half and half with a calculated one; a configured one is replaced.
        let before = HeartbeatTimeouts {
            initial: Some(15.0),
            subsequent: Some(3.0),
            were_calculated: Some(true),
        };
        let merged = c.heartbeat_timeouts(&before).unwrap();
        assert_eq!(merged.initial, Some(10.0));
        assert!((merged.subsequent.unwrap() - 2.0).abs() < 1e-9);
        let configured = HeartbeatTimeouts {
            were_calculated: Some(false),
            ..before
        };
        assert_eq!(
            c.heartbeat_timeouts(&configured).unwrap().initial,
            Some(5.0)
        );
    }

    #[test]
    fn one_observed_section_is_enough_and_out_of_section_counts_the_stretches_between() {
        let t = Instant::now();
        let mut c = calc(&["init", "step"], t);
        c.open("init", at(t, 100)).unwrap();
        c.close("init", at(t, 600)).unwrap();
        let init = ["init".to_owned()];
        // The restart case of the sections example: only `init` was seen.
        assert!(c.sections_ready(Some(&init), false).unwrap());
        assert!(!c.sections_ready(None, false).unwrap());
        assert!(
            !c.sections_ready(Some(&[]), false).unwrap(),
            "[] checks every section"
        );
        let current = SectionTimeouts {
            section: [("init".into(), Some(20.0)), ("step".into(), Some(10.0))].into(),
            out_of_section: Some(30.0),
            ..SectionTimeouts::default()
        };
        let st = c
            .section_timeouts(&current, Some(&init), false)
            .unwrap()
            .unwrap();
        assert_eq!(st.section["init"], Some(2.5));
        assert_eq!(st.section["step"], Some(10.0), "kept");
        assert_eq!(st.out_of_section, Some(30.0));
        assert_eq!(st.calculated_sections, ["init".to_owned()].into());
        assert!(!st.were_calculated());
        // Out of section: start -> first open, and last close -> now.
        c.bump_out_of_section(at(t, 1600));
        assert!((c.maxima()[2] - 1.0).abs() < 1e-9, "{:?}", c.maxima());
        assert!(c.open("init", at(t, 1700)).is_ok());
        assert!(
            c.open("init", at(t, 1800))
                .unwrap_err()
                .contains("already open")
        );
        assert!(
            c.close("step", at(t, 1800))
                .unwrap_err()
                .contains("not open")
        );
        assert!(
            c.open("other", at(t, 1800))
                .unwrap_err()
                .contains("unknown section")
        );
        assert!(
            c.section_timeouts(&current, Some(&["x".into()]), false)
                .is_err()
        );
    }

    #[test]
    fn the_maximum_over_ranks_is_taken_value_by_value() {
        let t = Instant::now();
        let mut c = calc(&["step"], t);
        c.heartbeat(at(t, 100));
        let mut other = calc(&["step"], t);
        other.heartbeat(at(t, 400));
        other.heartbeat(at(t, 500));
        c.merge_maxima(&other.maxima()).unwrap();
        assert!(c.heartbeats_ready());
        assert_eq!(c.maxima()[3], UNSEEN);
        assert!(c.merge_maxima(&[1.0]).is_err());
        assert!(c.merge_maxima(&[f64::NAN, 0.0, 0.0, 0.0]).is_err());
    }

    #[test]
    fn the_state_round_trips_in_nvrx_form_and_reads_every_earlier_one() {
        let hb = HeartbeatTimeouts {
            initial: Some(30.5),
            subsequent: Some(7.25),
            were_calculated: Some(true),
        };
        let st = SectionTimeouts {
            section: [("init".into(), Some(20.0)), ("step".into(), None)].into(),
            out_of_section: Some(12.0),
            calculated_sections: ["init".to_owned()].into(),
            is_out_of_section_calculated: true,
        };
        let state = NvrxState::of(&hb, &st);
        let json = state.to_json();
        assert_eq!(NvrxState::from_json(&json).unwrap(), state);
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(
            value["current_timeouts"]["section"]["calculated_sections"],
            serde_json::json!(["init"])
        );
        // Nothing calculated: the key alone.
        let empty = NvrxState::of(&HeartbeatTimeouts::default(), &SectionTimeouts::default());
        assert_eq!(empty.to_json(), r#"{"current_timeouts":{}}"#);
        for text in ["{}", r#"{"current_timeouts": {}}"#] {
            assert_eq!(NvrxState::from_json(text).unwrap(), NvrxState::default());
        }
        // NVRx 0.2.
        let v02 = NvrxState::from_json(
            r#"{"current_timeouts": {"initial": 30.5, "subsequent": 7.25, "were_calculated": true}}"#,
        )
        .unwrap();
        assert_eq!(v02.heartbeat, Some(hb.clone()));
        // Ours before.
        let old = NvrxState::from_json(
            r#"{"hb_timeouts": {"initial": 30.5, "subsequent": 7.25, "were_calculated": true},
                "section_timeouts": {"section": {"init": 20.0, "step": null}, "out_of_section": 12.0,
                "calculated_sections": ["init"], "is_out_of_section_calculated": true}}"#,
        )
        .unwrap();
        assert_eq!(old, state);
    }

    #[test]
    fn a_malformed_state_is_refused_naming_the_key() {
        for (text, fragment) in [
            ("[]", "the state dict is a list"),
            (r#"{"current_timeouts": 5}"#, "current_timeouts is a number"),
            (r#"{"foo": {}}"#, "key \"foo\""),
            (
                r#"{"current_timeouts": {"heartbeat": {"initial": "x"}}}"#,
                "current_timeouts.heartbeat.initial",
            ),
            (
                r#"{"current_timeouts": {"heartbeat": {"initial": 1, "extra": 2}}}"#,
                "key \"extra\"",
            ),
            (
                r#"{"current_timeouts": {"section": {"section": {"a": -1}}}}"#,
                "current_timeouts.section.section.a",
            ),
            (
                r#"{"current_timeouts": {"section": {"calculated_sections": ["b"]}}}"#,
                "calculated_sections names \"b\"",
            ),
            (
                r#"{"hb_timeouts": {"were_calculated": 1}}"#,
                "hb_timeouts.were_calculated is a number",
            ),
        ] {
            let error = NvrxState::from_json(text).unwrap_err().to_string();
            assert!(error.contains(fragment), "{text}: {error}");
        }
    }
}
