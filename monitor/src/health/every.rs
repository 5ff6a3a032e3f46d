//! A health check run at its own interval rather than at every periodic
//! check of the monitor.

use std::time::{Duration, Instant};

use crate::health::{HealthCheck, RankContext};

/// Runs `inner` at most once per `interval` (the first time at the first
/// check); in between it reports healthy without asking. The monitor's
/// check interval still bounds how often anything runs.
#[derive(Debug)]
pub struct Every<C> {
    inner: C,
    interval: Duration,
    last: Option<Instant>,
}

impl<C: HealthCheck> Every<C> {
    /// `inner`, run at most once per `interval`.
    pub fn new(inner: C, interval: Duration) -> Every<C> {
        Every {
            inner,
            interval,
            last: None,
        }
    }
}

impl<C: HealthCheck> HealthCheck for Every<C> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn check(&mut self, rank: &RankContext<'_>) -> Result<(), String> {
        let now = Instant::now();
        if self
            .last
            .is_some_and(|last| now.saturating_duration_since(last) < self.interval)
        {
            return Ok(());
        }
        self.last = Some(now);
        self.inner.check(rank)
    }
}
