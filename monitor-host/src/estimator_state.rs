//! The estimator's observations as bytes a rank persists (in its
//! heartbeat state or its checkpoint) and gives back after a restart, so
//! the initial heartbeat timeout is estimated over past runs, as
//! nvidia-resiliency-ext does through its state dict.
//!
//! One form is written: binary and versioned (see [`crate::codec`]),
//! magic `NIES`, version 2. Every form written before is read: version 1
//! was JSON (a rank restarted across an upgrade keeps its history).

use std::collections::BTreeMap;
use std::time::Duration;

use nodeipc_monitor::{
    MAX_SECTION_NAME, MAX_SECTIONS, MAX_STATE, Observations, Samples, TimeoutEstimator,
    TimeoutUpdate,
};
use nodeipc_text::whole_ms as ms;

use crate::codec::{Reader, Writer};
use crate::{Result, config_error};

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
            "{WHAT} version {version}; this build reads {VERSION} (and 1, the JSON form)"
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

/// Version 1, the JSON form.
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

/// A [`TimeoutEstimator`]'s [`Observations`] as bytes a rank persists (in
/// its heartbeat state or its checkpoint) and gives back after a restart.
pub trait EstimatorState {
    /// What has been observed (and the last proposal), as at most
    /// [`MAX_STATE`] bytes in a versioned binary form that
    /// [`restore_state`](EstimatorState::restore_state) reads back. Past the
    /// cap (dozens of sections with long names, or more than
    /// [`MAX_SECTIONS`]), the previous proposal's section timeouts are left
    /// out, then the sections seen least often.
    fn state(&self) -> Vec<u8>;

    /// Adds the observations of a [`state`](EstimatorState::state) from a
    /// past run to this one's, and takes its last proposal as the previous
    /// one (when this estimator has none). Every form written before is
    /// read: the JSON form of version 1 too.
    ///
    /// # Errors
    /// [`Error::Config`](nodeipc_monitor::Error::Config) naming what is
    /// wrong: more than `MAX_STATE` bytes, not this format (the field that
    /// does not read), an unknown version, more than `MAX_SECTIONS`
    /// sections or a name too long. Nothing is changed then.
    fn restore_state(&mut self, bytes: &[u8]) -> Result<()>;
}

impl EstimatorState for TimeoutEstimator {
    fn state(&self) -> Vec<u8> {
        let seen = self.observations();
        let previous = seen.previous.as_ref().map(|p| {
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
            initial: to_wire(&seen.initial_heartbeat),
            heartbeat: to_wire(&seen.heartbeat),
            out_of_section: to_wire(&seen.out_of_section),
            sections: seen
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

    fn restore_state(&mut self, bytes: &[u8]) -> Result<()> {
        if bytes.len() > MAX_STATE {
            return Err(config_error(format!(
                "{WHAT} of {} bytes; at most {MAX_STATE}",
                bytes.len()
            )));
        }
        let state = match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
            Some(b'{') => decode_v1(bytes),
            _ => decode(bytes),
        }
        .map_err(config_error)?;
        let d = |v: Option<u64>| v.filter(|&v| v > 0).map(Duration::from_millis);
        Ok(self.add_observations(Observations {
            initial_heartbeat: from_wire(state.initial),
            heartbeat: from_wire(state.heartbeat),
            out_of_section: from_wire(state.out_of_section),
            sections: state
                .sections
                .into_iter()
                .map(|(k, w)| (k, from_wire(w)))
                .collect(),
            previous: state
                .previous
                .map(
                    |(initial, heartbeat, out_of_section, sections)| TimeoutUpdate {
                        initial_heartbeat: d(initial),
                        heartbeat: d(heartbeat),
                        out_of_section: d(out_of_section),
                        sections: sections
                            .into_iter()
                            .filter(|(_, v)| *v > 0)
                            .map(|(k, v)| (k, Duration::from_millis(v)))
                            .collect(),
                    },
                ),
        })?)
    }
}
