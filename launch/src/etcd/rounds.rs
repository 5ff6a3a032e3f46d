//! The rounds: a barrier over the members before each, a watch on the
//! state and the members while it runs, one compare-and-swap on the state
//! key to end it.

use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::time::{Duration, Instant};

use super::join::backend;
use super::state::{JobState, Status};
use super::{EtcdBackend, ops};
use crate::backend::{Begin, Decision, RoundBackend, RoundPlan, RoundReport};
use crate::{Error, Result};

/// How long one poll waits for the view to change.
pub(super) const POLL: Duration = Duration::from_millis(100);

/// Attempts at a compare-and-swap before giving up (each loses only to
/// another launcher's change, so a few are plenty).
const CAS_ATTEMPTS: u32 = 8;

impl RoundBackend for EtcdBackend {
    fn begin_round(&mut self, restart: u32, nproc: u32) -> Result<RoundPlan> {
        loop {
            match self.poll_begin(restart, nproc)? {
                Begin::Start(plan) => return Ok(plan),
                Begin::Wait | Begin::Notice(_) => {}
                Begin::Finished { summary, .. } => return Err(backend(summary)),
            }
        }
    }

    fn poll_begin(&mut self, _restart: u32, _nproc: u32) -> Result<Begin> {
        if self.session.is_none() && !self.join()? {
            return Ok(Begin::Wait);
        }
        self.check_lease()?;
        let state = self.state()?;
        if state.is_final() {
            return Ok(finished(&state));
        }
        if self.member.ready != Some(state.round) {
            if state.after_loss {
                self.lost_at.get_or_insert_with(Instant::now);
            }
            if let Some(lost) = self.lost_at {
                if lost.elapsed() < self.stop_timeout + Duration::from_secs(1) {
                    self.session()?.wait_change(POLL);
                    return Ok(Begin::Wait);
                }
                self.lost_at = None;
            }
            self.get_ready(state.round)?;
        }
        let Some(nodes) = self.round_nodes(&state)? else {
            self.session()?.wait_change(POLL);
            return Ok(self.waiting_notice(state.round));
        };
        let Some(group_rank) = self.rank_among(&nodes) else {
            return self.wait_as_spare(&state, &nodes);
        };
        self.spare_in = None;
        if let Some((why, loss)) = self.listed_but_gone(&nodes) {
            let round = self.round;
            let _ = self.cas_state(|s| s.after_membership_change(round, &why, loss));
            return Ok(Begin::Wait);
        }
        let first = nodes.first().map_or(0, |(n, _)| *n);
        let Some((master_addr, master_port)) = self.member_of(first).and_then(|m| m.master) else {
            return Err(backend(format!(
                "round {}: node 0 published no master address",
                self.round
            )));
        };
        let group_world_size = u32::try_from(nodes.len()).unwrap_or(u32::MAX);
        self.group_rank = group_rank;
        self.members_at_start = nodes;
        self.member.running = Some(self.round);
        self.write_member()?;
        self.rounds_started = self.rounds_started.saturating_add(1);
        let nproc = self.config.nproc;
        Ok(Begin::Start(RoundPlan {
            restart: self.round,
            world_size: group_world_size.saturating_mul(nproc),
            rank_offset: group_rank.saturating_mul(nproc),
            master_addr,
            master_port,
            group: format!("/nodeipc-{}-n{group_rank}-r{}", self.rdzv.id, self.round),
            group_rank,
            group_world_size,
            run_id: self.rdzv.id.clone(),
        }))
    }

    fn restart_requested(&mut self) -> Option<String> {
        if let Some(why) = self.cut_off_reason() {
            self.cut_off = true;
            return Some(why);
        }
        let state = match self.state() {
            Ok(state) => state,
            Err(e) => return Some(e.to_string()),
        };
        if state.round != self.round || state.is_final() {
            return Some(match &state.status {
                Status::Failed { cause, .. } => cause.clone(),
                Status::Succeeded => "the job succeeded".to_owned(),
                Status::Running => state.reason.clone(),
            });
        }
        let (why, loss) = self.membership_change()?;
        let round = self.round;
        // Whoever wins this starts the round; the others' attempts find
        // the state moved and drop theirs.
        let _ = self.cas_state(|s| s.after_membership_change(round, &why, loss));
        Some(why)
    }

    fn failure_seen(&mut self, restart: u32, report: &RoundReport) {
        let RoundReport::Failed { rank, cause, code } = report else {
            return;
        };
        let (node, round) = (self.group_rank, restart);
        // A new round only: when restarts are used up the job's end waits
        // for decide() after the stop, which knows the rank's exit status
        // (a hung rank's is its termination signal's).
        let _ = self.cas_state(|s| {
            s.after_failure(round, node, Some(*rank), cause, *code)
                .filter(|next| !next.is_final())
        });
    }

    fn decide(&mut self, restart: u32, report: &RoundReport) -> Result<Decision> {
        match report {
            RoundReport::Interrupted { signal } => {
                let code = 128 + signal;
                if self.spare_in.is_some() {
                    // A spare leaving takes nothing from the job.
                    self.leave();
                    return Ok(Decision::Finished {
                        exit_code: code,
                        summary: format!(
                            "stopped by {} while waiting as a spare (the job goes on)",
                            nodeipc_text::signal_name(*signal)
                        ),
                    });
                }
                let cause = match self.session {
                    Some(_) => format!(
                        "stopped by {} on node {}",
                        nodeipc_text::signal_name(*signal),
                        self.group_rank
                    ),
                    None => format!(
                        "stopped by {} while joining the job",
                        nodeipc_text::signal_name(*signal)
                    ),
                };
                // Best effort: etcd may be why we are stopping.
                self.end_job(&cause, code);
                self.leave();
                Ok(Decision::Finished {
                    exit_code: code,
                    summary: cause,
                })
            }
            RoundReport::Failed { rank, cause, code } => {
                let (node, round) = (self.group_rank, restart);
                // Losing means another node moved the round first: our
                // failure is dropped, its round is ours.
                self.cas_state_patiently(|s| {
                    s.after_failure(round, node, Some(*rank), cause, *code)
                })?;
                self.poll_decision(restart)
            }
            RoundReport::Stuck { processes } => {
                // Our lease goes: the others see a change of nodes and do
                // not wait for processes that will not die.
                self.leave();
                Ok(Decision::Finished {
                    exit_code: 1,
                    summary: format!(
                        "{processes} {} of round {restart} still alive after SIGKILL: node {} leaves the job (its lease revoked)",
                        if *processes == 1 {
                            "process"
                        } else {
                            "processes"
                        },
                        self.group_rank
                    ),
                })
            }
            RoundReport::Requested { .. } => self.poll_decision(restart),
            RoundReport::Succeeded => {
                self.member.done = Some(restart);
                self.write_member()?;
                self.poll_decision(restart)
            }
        }
    }

    fn workload_ends(&mut self, shutdown: bool, exit_code: i32, cause: &str) {
        if shutdown {
            let cause = format!("node {}: {cause}", self.group_rank);
            self.end_job(&cause, exit_code);
        }
        self.leave();
    }

    fn poll_decision(&mut self, _restart: u32) -> Result<Decision> {
        if self.cut_off {
            self.check_lease()?;
            let waited = self.session()?.view().last_ack.elapsed();
            if waited > self.rdzv.ttl / 2 {
                self.session()?.wait_change(POLL);
                return Ok(Decision::Pending);
            }
            self.cut_off = false;
            let (round, why) = (
                self.round,
                format!("node {} was cut off from etcd", self.group_rank),
            );
            self.cas_state(|s| s.after_membership_change(round, &why, false))?;
        }
        let state = self.state()?;
        if state.is_final() {
            self.leave_job_lease();
            return Ok(match finished(&state) {
                Begin::Finished { exit_code, summary } => Decision::Finished { exit_code, summary },
                _ => unreachable!(),
            });
        }
        if state.round != self.round {
            return Ok(Decision::Next {
                restart: state.round,
            });
        }
        if self.member.done == Some(self.round) {
            let round = self.round;
            let all_done = self
                .members_at_start
                .iter()
                .all(|(n, _)| self.member_of(*n).is_some_and(|m| m.done == Some(round)));
            if all_done {
                self.cas_state(|s| {
                    (s.round == round && !s.is_final()).then(|| JobState {
                        status: Status::Succeeded,
                        ..s.clone()
                    })
                })?;
            } else if let Some((why, loss)) = self.membership_change() {
                let _ = self.cas_state(|s| s.after_membership_change(round, &why, loss));
            }
        }
        self.session()?.wait_change(POLL);
        Ok(Decision::Pending)
    }
}

impl EtcdBackend {
    /// Ends the job for every launcher with `code` and `cause` (unless it
    /// has ended already). Best effort: etcd may be unreachable.
    fn end_job(&mut self, cause: &str, code: i32) {
        let node = self.group_rank;
        let _ = self.cas_state(|s| {
            (!s.is_final()).then(|| JobState {
                status: Status::Failed {
                    node,
                    rank: None,
                    cause: cause.to_owned(),
                    code,
                },
                ..s.clone()
            })
        });
    }

    /// The job's state as last seen.
    pub(super) fn state(&self) -> Result<JobState> {
        let session = self.session()?;
        let view = session.view();
        let entry = view.keys.get("state").ok_or_else(|| {
            backend(format!(
                "job {:?}: its state key is gone from etcd at {} (the job lease expired?)",
                self.rdzv.id, session.endpoints
            ))
        })?;
        JobState::decode(&entry.value).map_err(backend)
    }

    /// Changes the state key by `change` of its current value, on its
    /// revision, until that holds or `change` says no (`None`). The state
    /// written, if any.
    pub(super) fn cas_state(
        &mut self,
        change: impl Fn(&JobState) -> Option<JobState>,
    ) -> Result<Option<JobState>> {
        let key = self.state_key();
        let session = self.session()?;
        let (mut current, mut revision) = {
            let view = session.view();
            match view.keys.get("state") {
                Some(e) => (JobState::decode(&e.value).map_err(backend)?, e.mod_revision),
                None => return Ok(None),
            }
        };
        for _ in 0..CAS_ATTEMPTS {
            let Some(next) = change(&current) else {
                return Ok(None);
            };
            let (done, read) = ops::txn_or_read(
                session,
                "changing the job's state",
                ops::mod_revision_is(&key, revision),
                vec![ops::put_op(&key, next.encode(), self.job_lease)],
                &key,
            )?;
            if done {
                return Ok(Some(next));
            }
            let Some(read) = read else {
                return Ok(None);
            };
            current = JobState::decode(&read.value).map_err(backend)?;
            revision = read.mod_revision;
        }
        Err(backend(format!(
            "the job's state changed {CAS_ATTEMPTS} times under this launcher's change"
        )))
    }

    /// As [`cas_state`](Self::cas_state), tried again while etcd does not
    /// answer but our lease still stands (a blip, an etcd restarting):
    /// a failure is not lost to a moment without etcd.
    fn cas_state_patiently(
        &mut self,
        change: impl Fn(&JobState) -> Option<JobState>,
    ) -> Result<Option<JobState>> {
        let began = Instant::now();
        loop {
            match self.cas_state(&change) {
                Ok(written) => return Ok(written),
                Err(error) => {
                    if self.check_lease().is_err() || began.elapsed() > self.rdzv.ttl {
                        return Err(error);
                    }
                    std::thread::sleep(POLL);
                }
            }
        }
    }

    pub(super) fn write_member(&self) -> Result<()> {
        let session = self.session()?;
        ops::put(
            session,
            &self.member_key(self.node),
            self.member.encode(),
            session.lease_id,
        )
    }

    /// A member that started the round is gone or replaced: why, whether
    /// it is gone (the time of the loss noted).
    fn membership_change(&mut self) -> Option<(String, bool)> {
        let (why, gone) = self.listed_but_gone(&self.members_at_start)?;
        if gone {
            self.lost_at.get_or_insert_with(Instant::now);
        }
        Some((why, gone))
    }

    /// Why this node must stop its ranks for want of etcd, if it must.
    fn cut_off_reason(&self) -> Option<String> {
        let session = self.session.as_ref()?;
        let view = session.view();
        if view.lease_lost {
            return Some(format!(
                "this launcher's lease has expired in etcd at {}",
                session.endpoints
            ));
        }
        let waited = view.last_ack.elapsed();
        (waited > self.rdzv.ttl / 2).then(|| {
            format!(
                "no keepalive acknowledged by etcd at {} for {} (--rdzv-ttl {} s): this node may be cut off",
                session.endpoints,
                nodeipc_text::duration(waited),
                self.rdzv.ttl.as_secs()
            )
        })
    }

    /// Fails when the lease is gone, or has gone unacknowledged for the
    /// whole TTL: the others have taken this node for lost.
    fn check_lease(&self) -> Result<()> {
        let session = self.session()?;
        let view = session.view();
        let waited = view.last_ack.elapsed();
        if view.lease_lost || waited >= self.rdzv.ttl {
            return Err(backend(format!(
                "lost etcd at {}: no keepalive acknowledged for {} (--rdzv-ttl {} s); this node's ranks are stopped",
                session.endpoints,
                nodeipc_text::duration(waited),
                self.rdzv.ttl.as_secs()
            )));
        }
        Ok(())
    }

    /// Stops keeping the job's lease alive: the final state stays until
    /// it expires (`--rdzv-timeout`).
    fn leave_job_lease(&self) {
        if let Some(session) = &self.session {
            session.let_expire(self.job_lease);
        }
    }

    /// Leaves the job: our member key goes with our lease.
    fn leave(&mut self) {
        self.leave_job_lease();
        if let Some(session) = &self.session {
            let _ = session.revoke(session.lease_id);
        }
    }
}

/// How a final state ends every launcher.
fn finished(state: &JobState) -> Begin {
    match &state.status {
        Status::Succeeded => Begin::Finished {
            exit_code: 0,
            summary: format!(
                "every rank on every node exited 0 in round {} ({} failure rounds)",
                state.round, state.failures
            ),
        },
        Status::Failed { cause, code, .. } => Begin::Finished {
            exit_code: *code,
            summary: cause.clone(),
        },
        Status::Running => Begin::Wait,
    }
}

/// Node 0's `MASTER_ADDR` (`--local-addr`, else its host name) and a
/// `MASTER_PORT` free on it now: a new one each round.
pub(super) fn master(local_addr: Option<&str>) -> Result<(String, u16)> {
    let bind_ip = local_addr
        .and_then(|a| a.parse::<IpAddr>().ok())
        .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    let listener =
        TcpListener::bind((bind_ip, 0)).map_err(|e| Error::io("bind for MASTER_PORT", e))?;
    let port = listener
        .local_addr()
        .map_err(|e| Error::io("getsockname for MASTER_PORT", e))?
        .port();
    let addr = match local_addr {
        Some(addr) => addr.to_owned(),
        None => std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .ok()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| Ipv4Addr::LOCALHOST.to_string()),
    };
    Ok((addr, port))
}
