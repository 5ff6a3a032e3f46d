//! The periodic check (timeouts, heartbeat region, health checks) and what
//! follows a failure: `SIGCONT`, the termination signal and, if configured,
//! `SIGKILL` after the grace period, all through the rank's pidfd.

use std::time::{Duration, Instant};

use nodeipc_fdpass::Signal;

use crate::config::signal_name;
use crate::health::RankContext;
use crate::limits::{MAX_CAUSE, truncate};
use crate::session::Termination;
use crate::{MonitorServer, RankState};

impl MonitorServer {
    /// Reads the heartbeat region, then fires the first timeout or health
    /// check that fails, if any.
    pub(crate) fn periodic_check(&mut self, now: Instant) {
        if !matches!(self.state, RankState::Initialized | RankState::Running) {
            return;
        }
        let Some(rank) = self.rank.as_mut() else {
            return;
        };
        rank.sample_region(now);
        if rank.heartbeats > 0 {
            self.state = RankState::Running;
        }
        if let Some(what) = self.expired(now).or_else(|| self.failed_health_check()) {
            self.fire(what, now);
        }
    }

    /// The first timeout that has run out, described with elapsed and limit.
    fn expired(&self, now: Instant) -> Option<String> {
        let rank = self.rank.as_ref()?;
        let t = &self.config.timeouts;
        let over = |what: String, since: Instant, limit: Option<Duration>| {
            let limit = limit?;
            let elapsed = now.duration_since(since);
            (elapsed > limit).then(|| {
                format!(
                    "{what} timeout: {} ms elapsed, limit {} ms",
                    elapsed.as_millis(),
                    limit.as_millis()
                )
            })
        };
        let heartbeat = match rank.last_heartbeat {
            None => over(
                "initial heartbeat".to_owned(),
                rank.init_at,
                t.initial_heartbeat,
            ),
            Some(last) => over("heartbeat".to_owned(), last, t.heartbeat),
        };
        heartbeat
            .or_else(|| {
                rank.sections.iter().find_map(|(name, since)| {
                    over(
                        format!("section {name:?}"),
                        *since,
                        t.sections.get(name).copied(),
                    )
                })
            })
            .or_else(|| {
                rank.out_of_section_since
                    .and_then(|since| over("out-of-section".to_owned(), since, t.out_of_section))
            })
    }

    fn failed_health_check(&mut self) -> Option<String> {
        let rank = self.rank.as_ref()?;
        let context = RankContext {
            rank: &rank.info,
            pidfd: &rank.pidfd,
        };
        self.health_checks.iter_mut().find_map(|check| {
            check
                .check(&context)
                .err()
                .map(|reason| format!("health check {:?} failed: {reason}", check.name()))
        })
    }

    /// Terminates the rank: `SIGCONT` (a stopped rank must be able to die),
    /// then the termination signal, through its pidfd.
    pub(crate) fn fire(&mut self, what: String, now: Instant) {
        let Some(rank) = self.rank.as_ref() else {
            return;
        };
        // A health check's reason has no bound of its own; the status
        // echoes this text, and every status must fit in one frame.
        let what = truncate(what, MAX_CAUSE);
        let signal = self.config.termination_signal;
        let open = rank.describe_sections();
        // Limited like every line a client can repeat: a client may set
        // tiny timeouts for a child it registers, again and again.
        self.log.warn_limited("timeout", &format!(
            "{what}; terminating global rank {} (local {}) pid {} (start time {}) with SIGCONT then {}{}{}",
            rank.info.global_rank,
            rank.info.local_rank,
            rank.info.pid,
            rank.start_time,
            signal_name(signal),
            self.config
                .kill_after
                .map(|d| format!(", SIGKILL after {} ms", d.as_millis()))
                .unwrap_or_default(),
            if open.is_empty() {
                String::new()
            } else {
                format!("; open sections: {open}")
            }
        ));
        let mut problems = Vec::new();
        for s in [Signal::CONT, signal] {
            if let Err(e) = rank.pidfd.send_signal(s) {
                problems.push(format!("{}: {e}", signal_name(s)));
            }
        }
        if !problems.is_empty() {
            let line = problems.join("; ");
            self.log
                .warn(&format!("signalling the rank failed: {line}"));
        }
        let escalate_at = match (signal, self.config.kill_after) {
            (Signal::KILL, _) | (_, None) => None,
            (_, Some(grace)) => now.checked_add(grace),
        };
        self.termination = Some(Termination {
            signalled_at: now,
            escalate_at,
        });
        self.last_timeout = Some(what);
        self.state = RankState::TimedOut;
    }

    /// Sends `SIGKILL` when the grace period after the termination signal is over.
    pub(crate) fn escalate_if_due(&mut self, now: Instant) {
        let Some(termination) = self.termination.as_mut() else {
            return;
        };
        if termination.escalate_at.is_none_or(|at| now < at) {
            return;
        }
        termination.escalate_at = None;
        let waited = now.duration_since(termination.signalled_at);
        let Some(rank) = self.rank.as_ref() else {
            return;
        };
        let result = rank.pidfd.send_signal(Signal::KILL);
        let pid = rank.info.pid;
        match result {
            Ok(()) => self.log.warn(&format!(
                "rank pid {pid} still alive {} ms after {}: SIGKILL sent",
                waited.as_millis(),
                signal_name(self.config.termination_signal)
            )),
            Err(e) => self
                .log
                .warn(&format!("SIGKILL to rank pid {pid} failed: {e}")),
        }
    }

    /// The rank's pidfd became readable: its process exited.
    pub(crate) fn on_rank_exit(&mut self) {
        let Some(rank) = self.rank.as_ref() else {
            return;
        };
        let pid = rank.info.pid;
        match self.state {
            RankState::TimedOut => {
                let after = self
                    .termination
                    .as_ref()
                    .map(|t| t.signalled_at.elapsed().as_millis())
                    .unwrap_or_default();
                self.log.warn_limited(
                    "rank exit",
                    &format!(
                        "rank pid {pid} exited {after} ms after it was signalled; state Terminated"
                    ),
                );
                self.rank = None;
                self.termination = None;
                self.state = RankState::Terminated;
                // Its connection (or its parent's) has nothing left to say.
                self.connection_lost("rank terminated");
            }
            _ => {
                let open = rank.describe_sections();
                self.log.warn_limited(
                    "rank exit",
                    &format!(
                        "rank pid {pid} exited without a timeout{}",
                        if open.is_empty() {
                            String::new()
                        } else {
                            format!(" with sections still open: {open}")
                        }
                    ),
                );
                self.connection_lost("the rank's process exited");
                // The connection may have been someone else's (a parent's):
                // the registration goes in any case.
                if self.rank.is_some() {
                    self.rank = None;
                    self.state = if self.config.restart_expected {
                        RankState::Restarting
                    } else {
                        RankState::Waiting
                    };
                }
            }
        }
    }
}
