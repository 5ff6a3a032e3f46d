//! Open-loop load: requests sent on a fixed schedule whatever the answers
//! do, each one's latency counted from when it was *due*, not from when it
//! went out. A sender that falls behind (a full ring, a lock-step gather
//! still waiting) makes the requests behind it late, and their lateness is
//! in their latency: coordinated omission is not hidden.
//!
//! Times are `CLOCK_MONOTONIC` nanoseconds, the clock the C++ rows stamp
//! their answers with too.

use std::io;
use std::num::NonZeroU64;
use std::time::Duration;

use rustix::thread::{current_timer_slack, set_current_timer_slack};
use rustix::time::{ClockId, clock_gettime};

use nodeipc_channel::All;

use super::{ChannelSession, Side};

/// The most requests one open-loop batch may schedule: each one's latency
/// is kept until the row is summarised.
pub const MAX_OPEN_LOOP_ITERS: u64 = 100_000;

/// The highest rate a schedule may offer, in requests a second (one every
/// nanosecond).
pub const MAX_RATE: f64 = 1e9;

/// Within this much of a deadline the sender yields instead of sleeping:
/// a sleep overshoots by the wake-up latency (and the timer slack, which
/// [`TightTimer`] lowers to 1 µs for the batch).
const SPIN: u64 = 50_000;

/// The calling thread's timer slack lowered to 1 µs (from the default
/// 50 µs) so that its sleeps end close to the schedule; restored on drop.
pub struct TightTimer {
    before: Option<NonZeroU64>,
}

impl TightTimer {
    /// Lowers the calling thread's timer slack (where the kernel lets it:
    /// otherwise sleeps are only less exact).
    pub fn new() -> TightTimer {
        let before = current_timer_slack().ok().and_then(NonZeroU64::new);
        if before.is_some() {
            let _ = set_current_timer_slack(NonZeroU64::new(1_000));
        }
        TightTimer { before }
    }
}

impl Default for TightTimer {
    fn default() -> Self {
        TightTimer::new()
    }
}

impl Drop for TightTimer {
    fn drop(&mut self) {
        if self.before.is_some() {
            let _ = set_current_timer_slack(self.before);
        }
    }
}

/// `CLOCK_MONOTONIC` now, in nanoseconds.
pub fn now_ns() -> u64 {
    let t = clock_gettime(ClockId::Monotonic);
    // Both fields are non-negative for the monotonic clock.
    (t.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec as u64)
}

/// Request `i` of a batch is due at `start + i × interval`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Schedule {
    start_ns: u64,
    interval_ns: u64,
}

impl Schedule {
    /// A schedule of `rate` requests a second from `start_ns` on.
    ///
    /// # Errors
    /// A rate that is not a number from 1 to [`MAX_RATE`].
    pub fn new(start_ns: u64, rate: f64) -> io::Result<Schedule> {
        if !(1.0..=MAX_RATE).contains(&rate) {
            return Err(io::Error::other(format!(
                "an open-loop rate of {rate} requests a second; it must be 1 to {MAX_RATE}"
            )));
        }
        // 1 ns to 1 s: the range check above keeps the cast exact enough.
        let interval_ns = (1e9 / rate).round().max(1.0) as u64;
        Ok(Schedule {
            start_ns,
            interval_ns,
        })
    }

    /// When request `i` is due.
    pub fn due(&self, i: u64) -> u64 {
        self.start_ns
            .saturating_add(self.interval_ns.saturating_mul(i))
    }

    /// Nanoseconds between requests.
    pub fn interval_ns(&self) -> u64 {
        self.interval_ns
    }

    /// Returns once request `i` is due (at once if it is late).
    pub fn wait_for(&self, i: u64) {
        let deadline = self.due(i);
        loop {
            let now = now_ns();
            if now >= deadline {
                return;
            }
            let left = deadline - now;
            if left > SPIN {
                std::thread::sleep(Duration::from_nanos(left - SPIN));
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Request `i`'s latency in nanoseconds: from when it was due to
    /// `answered_ns`.
    ///
    /// # Errors
    /// An answer stamped 0 (never heard).
    pub fn latency(&self, i: u64, answered_ns: u64) -> io::Result<f64> {
        if answered_ns == 0 {
            return Err(io::Error::other(format!(
                "request {i} of the open-loop batch was never answered"
            )));
        }
        Ok(answered_ns.saturating_sub(self.due(i)) as f64)
    }

    /// Every request's latency, request `i` answered at `answered_ns[i]`.
    ///
    /// # Errors
    /// As [`latency`](Schedule::latency).
    pub fn latencies(&self, answered_ns: &[u64]) -> io::Result<Vec<f64>> {
        (0u64..)
            .zip(answered_ns)
            .map(|(i, &at)| self.latency(i, at))
            .collect()
    }
}

/// `iters` as the length of an open-loop batch.
///
/// # Errors
/// Zero, or more than [`MAX_OPEN_LOOP_ITERS`].
pub fn batch_len(iters: u64) -> io::Result<usize> {
    if !(1..=MAX_OPEN_LOOP_ITERS).contains(&iters) {
        return Err(io::Error::other(format!(
            "an open-loop batch of {iters} requests; it must be 1 to {MAX_OPEN_LOOP_ITERS}"
        )));
    }
    Ok(iters as usize)
}

impl ChannelSession {
    /// `rounds` requests on an open-loop schedule of `rate` a second, their
    /// latencies in nanoseconds (see [`open_loop`]): with a response thread,
    /// this thread sends each when due (waiting only while the ring is
    /// full) and the thread stamps its answers; in lock-step, each is sent
    /// when due or at once if it is late, then gathered.
    ///
    /// # Errors
    /// A session that is neither a response-thread nor an in-place
    /// lock-step one, a bad `rate` or `rounds`, a worker that failed or
    /// answered wrongly.
    pub fn run_open_loop(&mut self, rounds: u64, rate: f64) -> io::Result<Vec<f64>> {
        let n = batch_len(rounds)?;
        let _timer = TightTimer::new();
        let first = self.sent;
        let sent = |i: u64, id: u64| {
            if id == first + i {
                Ok(())
            } else {
                Err(io::Error::other(format!(
                    "request {i} of the batch got id {id}, not {}",
                    first + i
                )))
            }
        };
        let latencies = match &mut self.side {
            Side::NodeipcThread(coordinator, bytes, progress) => {
                progress.record(first, n);
                let schedule = Schedule::new(now_ns(), rate)?;
                for i in 0..rounds {
                    schedule.wait_for(i);
                    sent(i, coordinator.send(bytes)?)?;
                }
                schedule.latencies(&progress.collect(first + rounds)?)?
            }
            Side::Cpp(bench, bytes) => {
                bench.record(first, rounds)?;
                let schedule = Schedule::new(now_ns(), rate)?;
                for i in 0..rounds {
                    schedule.wait_for(i);
                    sent(i, bench.send(bytes)?)?;
                }
                schedule.latencies(&bench.collect(first + rounds, n)?)?
            }
            Side::NodeipcBytes(coordinator, bytes, expected) if self.depth == 1 => {
                let schedule = Schedule::new(now_ns(), rate)?;
                let mut latencies = Vec::with_capacity(n);
                for i in 0..rounds {
                    schedule.wait_for(i);
                    sent(i, coordinator.send(bytes)?)?;
                    for (rank, answer) in coordinator.recv(All)?.iter() {
                        if answer != expected.as_slice() {
                            return Err(io::Error::other(format!(
                                "worker {rank} answered a wrong digest"
                            )));
                        }
                    }
                    latencies.push(schedule.latency(i, now_ns())?);
                }
                latencies
            }
            Side::CppLockstep(bench, bytes) => {
                let schedule = Schedule::new(now_ns(), rate)?;
                let mut latencies = Vec::with_capacity(n);
                for i in 0..rounds {
                    schedule.wait_for(i);
                    bench.lockstep_round(bytes)?;
                    latencies.push(schedule.latency(i, now_ns())?);
                }
                latencies
            }
            _ => {
                return Err(io::Error::other(format!(
                    "{} has no open-loop run (response-thread and in-place lock-step only)",
                    self.which.name()
                )));
            }
        };
        self.sent += rounds;
        self.gathered += rounds;
        Ok(latencies)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_counts_from_the_schedule_not_from_the_send() {
        // 1000 a second: request 3 is due 3 ms after the start.
        let s = Schedule::new(1_000_000, 1000.0).unwrap();
        assert_eq!(s.interval_ns(), 1_000_000);
        assert_eq!(s.due(3), 4_000_000);
        // Answered 2.5 ms after it was due, however late it was sent.
        assert_eq!(s.latency(3, 6_500_000).unwrap(), 2_500_000.0);
        let all = s.latencies(&[1_000_010, 2_000_020, 3_500_000]).unwrap();
        assert_eq!(all, vec![10.0, 20.0, 500_000.0]);
    }

    #[test]
    fn an_unanswered_request_and_a_bad_rate_are_errors() {
        let s = Schedule::new(5, 10.0).unwrap();
        let e = s.latencies(&[10, 0]).unwrap_err().to_string();
        assert!(
            e.contains("request 1") && e.contains("never answered"),
            "{e}"
        );
        for rate in [0.0, 0.5, -1.0, f64::NAN, f64::INFINITY, 2e9] {
            let e = Schedule::new(0, rate).unwrap_err().to_string();
            assert!(e.contains("open-loop rate"), "{rate}: {e}");
        }
        assert_eq!(Schedule::new(0, MAX_RATE).unwrap().interval_ns(), 1);
        assert!(batch_len(0).is_err() && batch_len(MAX_OPEN_LOOP_ITERS + 1).is_err());
        assert_eq!(batch_len(7).unwrap(), 7);
    }

    #[test]
    fn wait_for_returns_at_once_for_a_late_request_and_not_before_it_is_due() {
        let s = Schedule::new(now_ns(), 1000.0).unwrap();
        s.wait_for(0);
        s.wait_for(2);
        assert!(now_ns() >= s.due(2));
    }

    #[test]
    fn a_tight_timer_lowers_the_slack_and_restores_it() {
        let before = current_timer_slack().unwrap();
        {
            let _tight = TightTimer::new();
            assert_eq!(current_timer_slack().unwrap(), 1_000);
        }
        assert_eq!(current_timer_slack().unwrap(), before);
    }
}
