//! The estimator's observations as bytes a rank persists (in its
//! heartbeat state or its checkpoint) and gives back after a restart, so
//! the initial heartbeat timeout is estimated over past runs, as
//! nvidia-resiliency-ext does through its state dict.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::ms;
use crate::estimator::Samples;
use crate::limits::{MAX_SECTION_NAME, MAX_SECTIONS, MAX_STATE};
use crate::{Error, Result, TimeoutEstimator, TimeoutUpdate};

const VERSION: u32 = 1;

/// `[count, longest in ms]`.
type Wire = (u64, u64);

/// A proposal in ms: initial, heartbeat, out of section, sections.
type Proposal = (Option<u64>, Option<u64>, Option<u64>, BTreeMap<String, u64>);

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct State {
    version: u32,
    initial: Wire,
    heartbeat: Wire,
    out_of_section: Wire,
    sections: BTreeMap<String, Wire>,
    /// The last proposal.
    previous: Option<Proposal>,
}

fn to_wire(s: &Samples) -> Wire {
    (u64::try_from(s.count).unwrap_or(u64::MAX), ms(s.max))
}

fn from_wire(w: Wire) -> Samples {
    Samples {
        count: usize::try_from(w.0).unwrap_or(usize::MAX),
        max: Duration::from_millis(w.1),
    }
}

/// Adds `other`'s observations to `into`'s.
fn merge(into: &mut Samples, other: Samples) {
    into.count = into.count.saturating_add(other.count);
    into.max = into.max.max(other.max);
}

impl TimeoutEstimator {
    /// What has been observed (and the last proposal), as at most
    /// [`MAX_STATE`](crate::MAX_STATE) bytes of JSON.
    pub fn state(&self) -> Vec<u8> {
        let previous = self.previous.as_ref().map(|p| {
            (
                p.initial_heartbeat.map(ms),
                p.heartbeat.map(ms),
                p.out_of_section.map(ms),
                p.sections
                    .iter()
                    .map(|(k, v)| (k.clone(), ms(*v)))
                    .collect(),
            )
        });
        let state = State {
            version: VERSION,
            initial: to_wire(&self.initial),
            heartbeat: to_wire(&self.heartbeat),
            out_of_section: to_wire(&self.out_of_section),
            sections: self
                .sections
                .iter()
                .map(|(k, v)| (k.clone(), to_wire(v)))
                .collect(),
            previous,
        };
        serde_json::to_vec(&state).unwrap_or_default()
    }

    /// Adds the observations of a [`state`](TimeoutEstimator::state) from a
    /// past run to this one's, and takes its last proposal as the previous
    /// one (when this estimator has none).
    ///
    /// # Errors
    /// [`Error::Config`] naming what is wrong: more than `MAX_STATE` bytes,
    /// not this format, more than `MAX_SECTIONS` sections or a name too long.
    /// Nothing is changed then.
    pub fn restore_state(&mut self, bytes: &[u8]) -> Result<()> {
        if bytes.len() > MAX_STATE {
            return Err(Error::config(format!(
                "estimator state of {} bytes; at most {MAX_STATE}",
                bytes.len()
            )));
        }
        let state: State = serde_json::from_slice(bytes)
            .map_err(|e| Error::config(format!("estimator state: {e}")))?;
        if state.version != VERSION {
            return Err(Error::config(format!(
                "estimator state version {}; this build reads {VERSION}",
                state.version
            )));
        }
        let names = state
            .sections
            .keys()
            .chain(state.previous.iter().flat_map(|p| p.3.keys()));
        for name in names {
            if name.is_empty() || name.len() > MAX_SECTION_NAME {
                return Err(Error::config(format!(
                    "estimator state: section name of {} bytes (1 to {MAX_SECTION_NAME})",
                    name.len()
                )));
            }
        }
        let sections = self.sections.len() + state.sections.len();
        if sections > MAX_SECTIONS
            || state
                .previous
                .as_ref()
                .is_some_and(|p| p.3.len() > MAX_SECTIONS)
        {
            return Err(Error::config(format!(
                "estimator state: more than {MAX_SECTIONS} sections"
            )));
        }
        merge(&mut self.initial, from_wire(state.initial));
        merge(&mut self.heartbeat, from_wire(state.heartbeat));
        merge(&mut self.out_of_section, from_wire(state.out_of_section));
        for (name, wire) in state.sections {
            merge(self.sections.entry(name).or_default(), from_wire(wire));
        }
        if self.previous.is_none()
            && let Some((initial, heartbeat, out_of_section, sections)) = state.previous
        {
            let d = |v: Option<u64>| v.filter(|&v| v > 0).map(Duration::from_millis);
            self.previous = Some(TimeoutUpdate {
                initial_heartbeat: d(initial),
                heartbeat: d(heartbeat),
                out_of_section: d(out_of_section),
                sections: sections
                    .into_iter()
                    .filter(|(_, v)| *v > 0)
                    .map(|(k, v)| (k, Duration::from_millis(v)))
                    .collect(),
            });
        }
        Ok(())
    }
}
