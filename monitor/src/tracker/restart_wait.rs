//! How long the monitor has waited for its rank to come back after it
//! left (`Restarting`) or was terminated (`Terminated`): reported in the
//! status (`ms_restarting`) and, now and then, as a log line, so that a
//! launcher or a person sees a restart that does not come.

use std::time::{Duration, Instant};

/// Shortest and longest time between two "not back yet" lines.
const REPORT_MIN: Duration = Duration::from_secs(1);
const REPORT_MAX: Duration = Duration::from_secs(60);

#[derive(Debug, Default)]
pub(crate) struct RestartWait {
    since: Option<Instant>,
    next_report: Option<Instant>,
}

impl RestartWait {
    /// The rank went at `now`; the wait starts (a wait already running goes on).
    pub(crate) fn start(&mut self, now: Instant) {
        if self.since.is_none() {
            self.since = Some(now);
            self.next_report = None;
        }
    }

    /// A rank registered, or the monitor closed: no wait.
    pub(crate) fn stop(&mut self) {
        self.since = None;
        self.next_report = None;
    }

    /// How long the wait has lasted, while there is one.
    pub(crate) fn waited(&self, now: Instant) -> Option<Duration> {
        self.since.map(|s| now.saturating_duration_since(s))
    }

    /// A line to log when one is due: every ten check intervals (at least
    /// a second, at most a minute).
    pub(crate) fn report(&mut self, now: Instant, check_interval: Duration) -> Option<String> {
        let since = self.since?;
        let every = check_interval
            .saturating_mul(10)
            .clamp(REPORT_MIN, REPORT_MAX);
        let due = *self.next_report.get_or_insert(since + every);
        if now < due {
            return None;
        }
        self.next_report = Some(now + every);
        Some(format!(
            "the rank has not come back: waiting {} since it went",
            nodeipc_text::duration(now.saturating_duration_since(since))
        ))
    }
}
