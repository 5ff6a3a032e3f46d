//! The rank's process, which the tracker never touches: the pid check of
//! an `Init`, the pidfd every signal goes through, the heartbeat region, the
//! health checks, and the [`Action`]s the tracker decides.

use std::os::fd::{AsFd, OwnedFd};
use std::time::Instant;

use nodeipc_fdpass::{Pidfd, Signal};
use nodeipc_proto::monitor as pb;

use super::{MonitorServer, Process};
use crate::config::signal_name;
use crate::conn::PeerStart;
use crate::fastpath::ServerRegion;
use crate::health::RankContext;
use crate::refusal::{Refusal, RefusalCode};
use crate::tracker::{Action, Registration, ok};
use crate::{LogLevel, MonitorStatus, RankInfo, procfs};

impl MonitorServer {
    /// Registers the rank an `Init` names once its process passes the pid
    /// check: the reply, with the heartbeat region's descriptor if one goes.
    pub(super) fn register(
        &mut self,
        registration: Registration,
    ) -> (pb::ServerMessage, Option<OwnedFd>) {
        let (rank, pidfd, start_time) = match self.verify(registration.rank) {
            Ok(verified) => verified,
            Err(refusal) => return (self.tracker.refuse_init(refusal), None),
        };
        let pid = rank.pid;
        let region = if registration.want_heartbeat_region && self.config().heartbeat_region {
            match ServerRegion::create() {
                Ok(region) => Some(region),
                Err(e) => {
                    self.log.warn_limited(
                        "heartbeat region",
                        &format!("no heartbeat region for pid {pid}: {e}"),
                    );
                    None
                }
            }
        } else {
            None
        };
        let fd = region
            .as_ref()
            .and_then(|r| r.as_fd().try_clone_to_owned().ok());
        let shm_heartbeat = fd.as_ref().and(region.as_ref().map(ServerRegion::describe));
        if let Some(conn) = self.conn.as_mut() {
            // Registered: the connection holds the rank slot by right now.
            conn.settle();
        }
        let mut reply = self
            .tracker
            .register(rank, start_time, fd.is_some(), Instant::now());
        reply.heartbeat_region_attached = fd.is_some();
        reply.shm_heartbeat = shm_heartbeat;
        self.process = Some(Process { pidfd, region });
        (ok(reply), fd)
    }

    /// Checks the pid an `Init` names against the process that connected:
    /// the rank (pid resolved), its pidfd and its start time.
    ///
    /// The pidfd is opened first and the process checked alive last: if it
    /// is alive then, the pid named it all along, so the ancestry read from
    /// `/proc` in between was its own and not a recycled pid's.
    fn verify(&self, rank: RankInfo) -> Result<(RankInfo, Pidfd, u64), Refusal> {
        let Some((peer, peer_start)) = self.conn.as_ref().map(|c| (c.peer, c.peer_start.clone()))
        else {
            return Err(Refusal::new(RefusalCode::Internal, "no connection"));
        };
        if peer.pid == 0 {
            return Err(Refusal::new(
                RefusalCode::PidNamespace,
                "the connecting process lives in a pid namespace the monitor cannot see (SO_PEERCRED pid 0); run the monitor in the rank's pid namespace",
            ));
        }
        // SO_PEERCRED's pid was read when the client connected (it may have
        // waited for the rank connection since): the process must still be
        // the one that connected, not another that got its pid since. Only
        // the kernel saying so (no such process, another start time) means
        // it has gone; failing to look (EMFILE, say) is refused as that.
        let exited_since = || {
            Refusal::new(
                RefusalCode::ProcessGone,
                format!(
                    "the connecting process (pid {}) has exited since it connected; a process that holds its socket now cannot register in its name",
                    peer.pid
                ),
            )
        };
        let cannot_check = |e: &dyn std::fmt::Display| {
            Refusal::new(
                RefusalCode::Internal,
                format!(
                    "cannot check the connecting process (pid {}): {e}; retry once the monitor has descriptors again",
                    peer.pid
                ),
            )
        };
        match peer_start {
            PeerStart::Known(then) => match nodeipc_fdpass::process_start_time(peer.pid) {
                Ok(now) if now == then => {}
                Ok(_) | Err(nodeipc_fdpass::Error::ProcessGone { .. }) => {
                    return Err(exited_since());
                }
                Err(e) => return Err(cannot_check(&e)),
            },
            PeerStart::Gone | PeerStart::Hidden => return Err(exited_since()),
            PeerStart::Unreadable(e) => {
                return Err(cannot_check(&format!("when it connected, {e}")));
            }
        }
        let pid = if rank.pid == 0 { peer.pid } else { rank.pid };
        let pidfd = Pidfd::open(pid).map_err(|e| {
            Refusal::new(
                RefusalCode::ProcessGone,
                format!("cannot watch pid {pid}: {e}"),
            )
        })?;
        if !procfs::is_self_or_descendant(pid, peer.pid).map_err(|e| cannot_check(&e))? {
            return Err(Refusal::new(
                RefusalCode::PidNotAllowed,
                format!(
                    "pid {pid} is neither the connecting process (pid {}, from SO_PEERCRED) nor a descendant of it; a client may only name itself or its own descendants",
                    peer.pid
                ),
            ));
        }
        let exited = || {
            Refusal::new(
                RefusalCode::ProcessGone,
                format!("process {pid} exited during registration"),
            )
        };
        let start_time = match nodeipc_fdpass::process_start_time(pid) {
            Ok(start_time) => start_time,
            Err(nodeipc_fdpass::Error::ProcessGone { .. }) => return Err(exited()),
            Err(e) => return Err(cannot_check(&e)),
        };
        if pidfd.has_exited().map_err(|e| cannot_check(&e))? {
            return Err(exited());
        }
        Ok((RankInfo { pid, ..rank }, pidfd, start_time))
    }

    /// Counts the beats the fast path saw since the last look.
    pub(super) fn sample_region(&mut self, now: Instant) {
        let beats = self
            .process
            .as_mut()
            .and_then(|p| p.region.as_mut())
            .map_or(0, ServerRegion::take_beats);
        self.tracker.beats(beats, now);
    }

    /// The status a query answers, the heartbeat region read first.
    pub(super) fn status(&mut self, now: Instant) -> MonitorStatus {
        self.sample_region(now);
        self.tracker.status(now)
    }

    /// Reads the heartbeat region, then lets the tracker fire the first
    /// timeout that ran out or carry out an escalation; failing that, the
    /// first failed health check terminates the rank.
    pub(super) fn periodic_check(&mut self, now: Instant) {
        if self.tracker.is_watching() {
            self.sample_region(now);
        }
        let mut action = self.tracker.check(now);
        if action.is_none()
            && self.tracker.is_watching()
            && let Some(cause) = self.failed_health_check()
        {
            action = self.tracker.fail(cause, now);
        }
        self.execute(action);
    }

    fn failed_health_check(&mut self) -> Option<String> {
        let (Some(rank), Some(process)) = (self.tracker.rank(), self.process.as_ref()) else {
            return None;
        };
        let context = RankContext {
            rank,
            pidfd: &process.pidfd,
        };
        self.health_checks.iter_mut().find_map(|check| {
            check
                .check(&context)
                .err()
                .map(|reason| format!("health check {:?} failed: {reason}", check.name()))
        })
    }

    /// Does what the tracker decided, through the rank's pidfd.
    pub(super) fn execute(&mut self, action: Option<Action>) {
        // The tracker's line (why the rank is terminated) goes first.
        self.drain_notes();
        let (Some(action), Some(process)) = (action, self.process.as_ref()) else {
            return;
        };
        let pid = process.pidfd.pid();
        match action {
            Action::Terminate { signal, .. } => {
                // SIGCONT first: a stopped rank must be able to die.
                let problems: Vec<String> = [Signal::CONT, signal]
                    .into_iter()
                    .filter_map(|s| {
                        process
                            .pidfd
                            .send_signal(s)
                            .err()
                            .map(|e| format!("{}: {e}", signal_name(s)))
                    })
                    .collect();
                if !problems.is_empty() {
                    self.log.warn(&format!(
                        "signalling the rank failed: {}",
                        problems.join("; ")
                    ));
                }
            }
            Action::Escalate { waited } => match process.pidfd.send_signal(Signal::KILL) {
                Ok(()) => self.log.warn(&format!(
                    "rank pid {pid} still alive {} ms after {}: SIGKILL sent",
                    waited.as_millis(),
                    signal_name(self.config().termination_signal)
                )),
                Err(e) => self
                    .log
                    .warn(&format!("SIGKILL to rank pid {pid} failed: {e}")),
            },
        }
    }

    /// The rank's pidfd became readable: its process exited. The tracker
    /// moves on and the rank connection, if any, is closed.
    pub(super) fn on_rank_exit(&mut self) {
        let holder = self.conn.as_ref().map(|c| c.peer.pid);
        self.tracker.rank_exited(holder, Instant::now());
        self.conn = None;
        self.drain_notes();
        self.sync_process();
    }

    /// Lets the rank's process go once the tracker has forgotten the rank.
    pub(super) fn sync_process(&mut self) {
        if self.tracker.rank().is_none() {
            self.process = None;
        }
    }

    /// Writes the tracker's lines to the log, rate-limited as they ask.
    pub(super) fn drain_notes(&mut self) {
        for note in self.tracker.take_notes() {
            match (note.kind, note.level) {
                (Some(kind), LogLevel::Info) => self.log.info_limited(kind, &note.line),
                (Some(kind), LogLevel::Warn) => self.log.warn_limited(kind, &note.line),
                (None, LogLevel::Info) => self.log.info(&note.line),
                (None, LogLevel::Warn) => self.log.warn(&note.line),
            }
        }
    }
}
