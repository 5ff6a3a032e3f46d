//! The estimator's observations as bytes a rank persists (in its
//! heartbeat state or its checkpoint) and gives back after a restart, so
//! the initial heartbeat timeout is estimated over past runs, as
//! nvidia-resiliency-ext does through its state dict.
//!
//! The form is binary and versioned (see [`crate::codec`]): magic `NIES`,
//! version 2. Version 1 was JSON; it is still read when the `json` feature
//! is on (a rank restarted across an upgrade keeps its history), and
//! refused by name without it.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::codec::{Reader, Writer};
use crate::config::ms;
use crate::estimator::Samples;
use crate::limits::{MAX_SECTION_NAME, MAX_SECTIONS, MAX_STATE};
use crate::{Error, Result, TimeoutEstimator, TimeoutUpdate};

const MAGIC: &[u8; 4] = b"NIES";
const VERSION: u16 = 2;
const WHAT: &str = "estimator state";

/// `(count, longest in ms)`.
pub(crate) type Wire = (u64, u64);

/// A proposal in ms: initial, heartbeat, out of section, sections.
pub(crate) type Proposal = (Option<u64>, Option<u64>, Option<u64>, BTreeMap<String, u64>);

/// What a state holds, whichever form it came in.
pub(crate) struct State {
    pub(crate) initial: Wire,
    pub(crate) heartbeat: Wire,
    pub(crate) out_of_section: Wire,
    pub(crate) sections: BTreeMap<String, Wire>,
    /// The last proposal.
    pub(crate) previous: Option<Proposal>,
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

fn encode(state: &State) -> Vec<u8> {
    let mut w = Writer::new(MAGIC, VERSION);
    for (count, max) in [state.initial, state.heartbeat, state.out_of_section] {
        w.u64(count);
        w.u64(max);
    }
    w.len(state.sections.len());
    for (name, (count, max)) in &state.sections {
        w.str(name);
        w.u64(*count);
        w.u64(*max);
    }
    match &state.previous {
        None => w.bool(false),
        Some((initial, heartbeat, out_of_section, sections)) => {
            w.bool(true);
            w.opt_u64(*initial);
            w.opt_u64(*heartbeat);
            w.opt_u64(*out_of_section);
            w.len(sections.len());
            for (name, v) in sections {
                w.str(name);
                w.u64(*v);
            }
        }
    }
    w.finish()
}

fn decode(bytes: &[u8]) -> std::result::Result<State, String> {
    let (version, mut r) = Reader::open(bytes, MAGIC, WHAT)?;
    if version != VERSION {
        return Err(format!(
            "{WHAT} version {version}; this build reads {VERSION} (and 1, the JSON form, with the `json` feature)"
        ));
    }
    fn wire(r: &mut Reader<'_>, what: &str) -> std::result::Result<Wire, String> {
        Ok((r.u64(what)?, r.u64(what)?))
    }
    let initial = wire(&mut r, "initial heartbeat samples")?;
    let heartbeat = wire(&mut r, "heartbeat samples")?;
    let out_of_section = wire(&mut r, "out-of-section samples")?;
    // A section is at least its 4-byte length, 1 byte of name, 16 of samples.
    let n = r.len("sections", MAX_SECTIONS, 21)?;
    let mut sections = BTreeMap::new();
    for _ in 0..n {
        let name = r.string("section name", MAX_SECTION_NAME)?;
        let samples = wire(&mut r, "section samples")?;
        if sections.insert(name, samples).is_some() {
            return Err(format!("{WHAT}: a section is listed twice"));
        }
    }
    let previous = match r.bool("previous proposal")? {
        false => None,
        true => {
            let initial = r.opt_u64("previous initial heartbeat")?;
            let heartbeat = r.opt_u64("previous heartbeat")?;
            let out_of_section = r.opt_u64("previous out-of-section")?;
            let n = r.len("previous sections", MAX_SECTIONS, 13)?;
            let mut sections = BTreeMap::new();
            for _ in 0..n {
                let name = r.string("previous section name", MAX_SECTION_NAME)?;
                sections.insert(name, r.u64("previous section timeout")?);
            }
            Some((initial, heartbeat, out_of_section, sections))
        }
    };
    r.end()?;
    Ok(State {
        initial,
        heartbeat,
        out_of_section,
        sections,
        previous,
    })
}

/// Version 1, the JSON form: read with the `json` feature only.
#[cfg(feature = "json")]
fn decode_v1(bytes: &[u8]) -> std::result::Result<State, String> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct V1 {
        version: u32,
        initial: Wire,
        heartbeat: Wire,
        out_of_section: Wire,
        sections: BTreeMap<String, Wire>,
        previous: Option<Proposal>,
    }
    let v1: V1 = serde_json::from_slice(bytes).map_err(|e| format!("{WHAT}: {e}"))?;
    if v1.version != 1 {
        return Err(format!(
            "{WHAT} version {} in the JSON form; only version 1 was JSON",
            v1.version
        ));
    }
    Ok(State {
        initial: v1.initial,
        heartbeat: v1.heartbeat,
        out_of_section: v1.out_of_section,
        sections: v1.sections,
        previous: v1.previous,
    })
}

#[cfg(not(feature = "json"))]
fn decode_v1(_: &[u8]) -> std::result::Result<State, String> {
    Err(format!(
        "{WHAT} in the JSON form of version 1: this build reads it only with the `json` feature"
    ))
}

impl TimeoutEstimator {
    /// What has been observed (and the last proposal), as at most
    /// [`MAX_STATE`](crate::MAX_STATE) bytes in a versioned binary form
    /// that [`restore_state`](TimeoutEstimator::restore_state) reads back.
    /// Past the cap (dozens of sections with long names, or more than
    /// [`MAX_SECTIONS`](crate::MAX_SECTIONS)), the previous proposal's
    /// section timeouts are left out, then the sections seen least often.
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
        let mut state = State {
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
        let mut bytes = encode(&state);
        // Many sections, or long names, do not fit in what a rank may keep
        // (and `restore_state` would refuse): the previous proposal's
        // sections go first, then the sections seen least often, so what
        // is written always reads back.
        if let Some(previous) = state.previous.as_mut()
            && (bytes.len() > MAX_STATE || previous.3.len() > MAX_SECTIONS)
        {
            previous.3.clear();
            bytes = encode(&state);
        }
        while bytes.len() > MAX_STATE || state.sections.len() > MAX_SECTIONS {
            let Some(rarest) = state
                .sections
                .iter()
                .min_by_key(|(_, (count, _))| *count)
                .map(|(name, _)| name.clone())
            else {
                break;
            };
            state.sections.remove(&rarest);
            bytes = encode(&state);
        }
        bytes
    }

    /// Adds the observations of a [`state`](TimeoutEstimator::state) from a
    /// past run to this one's, and takes its last proposal as the previous
    /// one (when this estimator has none). The JSON form earlier builds
    /// wrote (version 1) is read too when the `json` feature is on.
    ///
    /// # Errors
    /// [`Error::Config`] naming what is wrong: more than `MAX_STATE` bytes,
    /// not this format (the field that does not read), an unknown version,
    /// more than `MAX_SECTIONS` sections or a name too long. Nothing is
    /// changed then.
    pub fn restore_state(&mut self, bytes: &[u8]) -> Result<()> {
        if bytes.len() > MAX_STATE {
            return Err(Error::config(format!(
                "{WHAT} of {} bytes; at most {MAX_STATE}",
                bytes.len()
            )));
        }
        let state = match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
            Some(b'{') => decode_v1(bytes),
            _ => decode(bytes),
        }
        .map_err(Error::config)?;
        let names = state
            .sections
            .keys()
            .chain(state.previous.iter().flat_map(|p| p.3.keys()));
        for name in names {
            if name.is_empty() || name.len() > MAX_SECTION_NAME {
                return Err(Error::config(format!(
                    "{WHAT}: section name of {} bytes (1 to {MAX_SECTION_NAME})",
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
                "{WHAT}: more than {MAX_SECTIONS} sections"
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
