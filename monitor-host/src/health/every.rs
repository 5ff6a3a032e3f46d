//! A health check run at its own interval rather than at every periodic
//! check of the monitor.

use std::time::{Duration, Instant};

use nodeipc_monitor::{HealthCheck, RankContext};

/// Runs `inner` at most once per `interval` (the first time at the first
/// check); in between it reports healthy without asking. The monitor's
/// check interval still bounds how often anything runs.
#[derive(Debug)]
pub(crate) struct Every<C> {
    inner: C,
    interval: Duration,
    last: Option<Instant>,
}

impl<C: HealthCheck> Every<C> {
    /// `inner`, run at most once per `interval`.
    pub(crate) fn new(inner: C, interval: Duration) -> Every<C> {
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use nodeipc_fdpass::Pidfd;
    use nodeipc_monitor::RankInfo;

    use super::*;

    /// Counts its runs.
    struct Counter(Arc<AtomicUsize>);

    impl HealthCheck for Counter {
        fn name(&self) -> &str {
            "counter"
        }

        fn check(&mut self, _rank: &RankContext<'_>) -> Result<(), String> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    }

    #[test]
    fn every_runs_a_check_at_most_once_per_its_interval() {
        let runs = Arc::new(AtomicUsize::new(0));
        let mut every = Every::new(Counter(Arc::clone(&runs)), Duration::from_millis(200));
        let pidfd = Pidfd::open(std::process::id()).unwrap();
        let info = RankInfo::this_process(0, 0);
        let context = RankContext {
            rank: &info,
            pidfd: &pidfd,
        };
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(500) {
            every.check(&context).unwrap();
            std::thread::sleep(Duration::from_millis(5));
        }
        // At 0, ~200 and ~400 ms: 3 runs (never 1 per call, ~100 of them).
        let n = runs.load(Ordering::SeqCst);
        assert!((2..=3).contains(&n), "{n} runs in 500 ms");
        assert_eq!(every.name(), "counter");
    }
}
