//! [`TimeoutEstimator`]: timeouts computed from what a rank was seen doing.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::limits::{MAX_SECTION_NAME, MAX_SECTIONS};
use crate::{Error, Result, TimeoutUpdate};

/// The longest of a series of observed intervals, and how many there were.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Samples {
    /// How many intervals were observed.
    pub count: usize,
    /// The longest of them.
    pub max: Duration,
}

impl Samples {
    fn add(&mut self, d: Duration) {
        self.count += 1;
        self.max = self.max.max(d);
    }

    /// Adds `other`'s observations to these.
    fn absorb(&mut self, other: Samples) {
        self.count = self.count.saturating_add(other.count);
        self.max = self.max.max(other.max);
    }
}

/// What an estimator has observed, and its last proposal: what a rank
/// keeps across a restart (in its heartbeat state or its checkpoint) so
/// that the next run's timeouts are estimated over past runs too, as
/// nvidia-resiliency-ext does through its state dict.
/// `nodeipc-monitor-host` writes it as bytes and reads it back
/// (`EstimatorState`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Observations {
    /// From `Init` to the first heartbeat, one sample a run.
    pub initial_heartbeat: Samples,
    /// Between heartbeats.
    pub heartbeat: Samples,
    /// With no section open.
    pub out_of_section: Samples,
    /// Each section's duration.
    pub sections: BTreeMap<String, Samples>,
    /// The last proposal.
    pub previous: Option<TimeoutUpdate>,
}

/// Records heartbeat intervals, section durations and out-of-section
/// stretches, and proposes timeouts from them: the longest seen times a
/// safety factor, merged with the previous proposal by an exponential
/// average (`smoothing × new + (1 − smoothing) × previous`).
///
/// It refuses to propose a heartbeat timeout before `min_samples`
/// intervals were seen; sections and the out-of-section stretch with too few
/// observations are left out of the proposal (their timeouts stay as they are).
///
/// # Examples
/// ```
/// use std::time::{Duration, Instant};
/// use nodeipc_monitor::{Error, TimeoutEstimator};
///
/// let mut estimator = TimeoutEstimator::new(2.0, 3)?;
/// let t0 = Instant::now();
/// estimator.record_init(t0);
/// for i in 0..3 {
///     estimator.record_heartbeat(t0 + Duration::from_millis(100 * i));
/// }
/// // Two intervals of 100 ms so far: one more is needed.
/// match estimator.propose() {
///     Err(Error::NotEnoughSamples { have: 2, need: 3, .. }) => {}
///     other => panic!("{other:?}"),
/// }
/// estimator.record_heartbeat(t0 + Duration::from_millis(350)); // a 150 ms interval
/// let proposal = estimator.propose()?;
/// assert_eq!(proposal.heartbeat, Some(Duration::from_millis(300)));
/// # Ok::<(), Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct TimeoutEstimator {
    safety_factor: f64,
    min_samples: usize,
    smoothing: f64,
    floor: Duration,
    initial: Samples,
    init_at: Option<Instant>,
    heartbeat: Samples,
    out_of_section: Samples,
    sections: BTreeMap<String, Samples>,
    last_beat: Option<Instant>,
    open: BTreeMap<String, Instant>,
    out_of_section_since: Option<Instant>,
    previous: Option<TimeoutUpdate>,
}

impl TimeoutEstimator {
    /// An estimator proposing `safety_factor` (at least 1) times the longest
    /// interval seen, once it has seen `min_samples` (at least 1). The
    /// smoothing weight starts at 0.5.
    ///
    /// # Errors
    /// [`Error::Config`] for a factor below 1 or not finite, or 0 samples.
    pub fn new(safety_factor: f64, min_samples: usize) -> Result<TimeoutEstimator> {
        if !safety_factor.is_finite() || safety_factor < 1.0 {
            return Err(Error::config(format!(
                "safety factor {safety_factor} must be a finite number of at least 1"
            )));
        }
        if min_samples == 0 {
            return Err(Error::config("the estimator needs at least 1 sample"));
        }
        Ok(TimeoutEstimator {
            safety_factor,
            min_samples,
            smoothing: 0.5,
            floor: Duration::ZERO,
            initial: Samples::default(),
            init_at: None,
            heartbeat: Samples::default(),
            out_of_section: Samples::default(),
            sections: BTreeMap::new(),
            last_beat: None,
            open: BTreeMap::new(),
            out_of_section_since: None,
            previous: None,
        })
    }

    /// The weight of a new proposal against the previous one, in (0, 1]
    /// (1: the previous one is forgotten).
    ///
    /// # Errors
    /// [`Error::Config`] outside (0, 1].
    pub fn with_smoothing(mut self, smoothing: f64) -> Result<TimeoutEstimator> {
        if !(smoothing > 0.0 && smoothing <= 1.0) {
            return Err(Error::config(format!(
                "smoothing {smoothing} must be in (0, 1]"
            )));
        }
        self.smoothing = smoothing;
        Ok(self)
    }

    /// No proposed timeout is ever below `floor` (nvidia-resiliency-ext's
    /// safety floor: a fast warm-up must not leave a timeout that the
    /// first slow step trips).
    pub fn with_floor(mut self, floor: Duration) -> TimeoutEstimator {
        self.floor = floor;
        self
    }

    /// The rank (re)registered at `at`: intervals start over from here, and
    /// the time to the next heartbeat is an initial-heartbeat sample.
    pub fn record_init(&mut self, at: Instant) {
        self.init_at = Some(at);
        self.last_beat = None;
        self.open.clear();
        self.out_of_section_since = Some(at);
    }

    /// A heartbeat at `at`; the interval since the previous one is a sample
    /// (the first one after `Init` is not: it is an initial-heartbeat sample).
    pub fn record_heartbeat(&mut self, at: Instant) {
        if let Some(last) = self.last_beat {
            self.heartbeat.add(at.saturating_duration_since(last));
        } else if let Some(init) = self.init_at.take() {
            self.initial.add(at.saturating_duration_since(init));
        }
        self.last_beat = Some(at);
    }

    /// A section opened at `at`; it ends an out-of-section stretch.
    pub fn record_section_start(&mut self, name: &str, at: Instant) {
        if self.open.is_empty()
            && let Some(since) = self.out_of_section_since.take()
        {
            self.out_of_section.add(at.saturating_duration_since(since));
        }
        self.open.insert(name.to_owned(), at);
    }

    /// A section closed at `at`: its duration is a sample.
    pub fn record_section_end(&mut self, name: &str, at: Instant) {
        if let Some(start) = self.open.remove(name) {
            self.sections
                .entry(name.to_owned())
                .or_default()
                .add(at.saturating_duration_since(start));
        }
        if self.open.is_empty() {
            self.out_of_section_since = Some(at);
        }
    }

    /// Every open section closed at `at`.
    pub fn record_all_sections_end(&mut self, at: Instant) {
        let names: Vec<String> = self.open.keys().cloned().collect();
        for name in names {
            self.record_section_end(&name, at);
        }
        self.out_of_section_since = Some(at);
    }

    /// What has been observed so far, and the last proposal.
    pub fn observations(&self) -> Observations {
        Observations {
            initial_heartbeat: self.initial,
            heartbeat: self.heartbeat,
            out_of_section: self.out_of_section,
            sections: self.sections.clone(),
            previous: self.previous.clone(),
        }
    }

    /// Adds the observations of a past run to this one's, and takes its
    /// last proposal as the previous one when this estimator has none.
    ///
    /// # Errors
    /// [`Error::Config`] for more than [`MAX_SECTIONS`](crate::MAX_SECTIONS)
    /// sections (this run's and the past run's counted apart), or a section
    /// name of 0 or more than [`MAX_SECTION_NAME`](crate::MAX_SECTION_NAME)
    /// bytes; nothing is changed then.
    pub fn add_observations(&mut self, past: Observations) -> Result<()> {
        let names = past
            .sections
            .keys()
            .chain(past.previous.iter().flat_map(|p| p.sections.keys()));
        for name in names {
            if name.is_empty() || name.len() > MAX_SECTION_NAME {
                return Err(Error::config(format!(
                    "estimator state: section name of {} bytes (1 to {MAX_SECTION_NAME})",
                    name.len()
                )));
            }
        }
        if self.sections.len() + past.sections.len() > MAX_SECTIONS
            || past
                .previous
                .as_ref()
                .is_some_and(|p| p.sections.len() > MAX_SECTIONS)
        {
            return Err(Error::config(format!(
                "estimator state: more than {MAX_SECTIONS} sections"
            )));
        }
        self.initial.absorb(past.initial_heartbeat);
        self.heartbeat.absorb(past.heartbeat);
        self.out_of_section.absorb(past.out_of_section);
        for (name, samples) in past.sections {
            self.sections.entry(name).or_default().absorb(samples);
        }
        if self.previous.is_none() {
            self.previous = past.previous;
        }
        Ok(())
    }

    /// Heartbeat intervals seen so far.
    pub fn heartbeat_samples(&self) -> usize {
        self.heartbeat.count
    }

    /// Durations of `section` seen so far.
    pub fn section_samples(&self, section: &str) -> usize {
        self.sections.get(section).map_or(0, |s| s.count)
    }

    /// Initial-heartbeat samples (one per run; past runs come back through
    /// [`add_observations`](TimeoutEstimator::add_observations)).
    pub fn initial_samples(&self) -> usize {
        self.initial.count
    }

    /// Proposes timeouts: heartbeat always, each section and the
    /// out-of-section stretch when they have enough samples, the initial
    /// heartbeat once one run (this one or a restored one) has given its
    /// sample. None is below the floor. The proposal becomes the
    /// "previous" the next one is averaged with.
    ///
    /// # Errors
    /// [`Error::NotEnoughSamples`] saying how many heartbeat intervals are missing.
    pub fn propose(&mut self) -> Result<TimeoutUpdate> {
        if self.heartbeat.count < self.min_samples {
            return Err(Error::NotEnoughSamples {
                what: "heartbeat".to_owned(),
                have: self.heartbeat.count,
                need: self.min_samples,
            });
        }
        let previous = self.previous.clone().unwrap_or_default();
        let mut proposal = self.sections_proposal(&previous);
        proposal.initial_heartbeat = (self.initial.count > 0)
            .then(|| self.merge(self.initial.max, previous.initial_heartbeat));
        proposal.heartbeat = Some(self.merge(self.heartbeat.max, previous.heartbeat));
        self.previous = Some(proposal.clone());
        Ok(proposal)
    }

    /// Proposes the section and out-of-section timeouts alone, however few
    /// heartbeats were seen: for a rank that reports sections and sends no
    /// heartbeats (nvidia-resiliency-ext's section-only use). Sections and
    /// the out-of-section stretch with fewer than `min_samples`
    /// observations are left out; the heartbeat is never proposed. What it
    /// proposes is averaged with, and becomes, the previous proposal of
    /// those timeouts.
    pub fn propose_sections(&mut self) -> TimeoutUpdate {
        let mut previous = self.previous.clone().unwrap_or_default();
        let proposal = self.sections_proposal(&previous);
        if proposal.out_of_section.is_some() {
            previous.out_of_section = proposal.out_of_section;
        }
        previous.sections.extend(proposal.sections.clone());
        self.previous = Some(previous);
        proposal
    }

    /// The sections and the out-of-section stretch that have enough
    /// samples, each merged with its previous proposal.
    fn sections_proposal(&self, previous: &TimeoutUpdate) -> TimeoutUpdate {
        let enough = |s: &Samples| s.count >= self.min_samples;
        TimeoutUpdate {
            initial_heartbeat: None,
            heartbeat: None,
            out_of_section: enough(&self.out_of_section)
                .then(|| self.merge(self.out_of_section.max, previous.out_of_section)),
            sections: self
                .sections
                .iter()
                .filter(|(_, s)| enough(s))
                .map(|(name, s)| {
                    (
                        name.clone(),
                        self.merge(s.max, previous.sections.get(name).copied()),
                    )
                })
                .collect(),
        }
    }

    /// `max × factor`, averaged with `previous` when there is one; at least 1 ms.
    fn merge(&self, max: Duration, previous: Option<Duration>) -> Duration {
        let candidate = max.as_secs_f64() * self.safety_factor;
        let merged = match previous {
            Some(p) => self.smoothing * candidate + (1.0 - self.smoothing) * p.as_secs_f64(),
            None => candidate,
        };
        // Whole milliseconds (what the protocol carries), at least one; the
        // cast saturates for absurd values.
        Duration::from_millis(((merged * 1000.0).round() as u64).max(1)).max(self.floor)
    }
}
