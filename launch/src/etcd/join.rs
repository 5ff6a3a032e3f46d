//! Joining the job: connect, create the state key or check ours against
//! it, take a node rank.

use std::time::{Duration, Instant};

use super::session::{KeyFilter, Session};
use super::state::{JobState, Member, Status};
use super::{EtcdBackend, ops};
use crate::{Error, Result};

impl EtcdBackend {
    /// Connects and joins; on return `self.session` is set, our member key
    /// written, `self.round` the job's. `false`: a stop signal came while
    /// waiting for etcd (the launcher reads it next).
    pub(super) fn join(&mut self) -> Result<bool> {
        let slots = self.slots();
        let filter: KeyFilter =
            Box::new(move |key: &str| key == "state" || slot_of(key).is_some_and(|n| n < slots));
        let session = Session::start(
            &self.rdzv.endpoints,
            self.rdzv.tls.as_ref(),
            Self::prefix(&self.rdzv.id),
            self.rdzv.ttl,
            self.rdzv.timeout,
            filter,
        )?;
        let Some(session) = session else {
            return Ok(false);
        };
        let began = Instant::now();
        while !session.view().synced {
            if nodeipc_fdpass::StopSignals::pending() {
                return Ok(false);
            }
            if began.elapsed() > self.rdzv.timeout {
                return Err(backend(format!(
                    "no read of the job's keys from etcd at {} within --rdzv-timeout",
                    session.endpoints
                )));
            }
            session.wait_change(Duration::from_millis(100));
        }
        let state = self.create_or_check(&session)?;
        self.session = Some(session);
        self.take_rank()?;
        self.round = state.round;
        self.group_rank = self.node;
        // A round already under way without us (we replace a lost node):
        // it must start again with us in it (a change of members, not
        // counted). With a range of nodes the round forming decides.
        let underway = !self.rdzv.elastic()
            && self
                .members()
                .iter()
                .any(|(n, _, m)| *n != self.node && m.running == Some(state.round));
        if underway {
            let why = format!("node {} joined", self.node);
            let round = state.round;
            self.cas_state(|s| s.after_membership_change(round, &why, false))?;
        }
        Ok(true)
    }

    /// Creates the state key (first launcher) or reads it and checks that
    /// the job is running and has our configuration.
    fn create_or_check(&mut self, session: &Session) -> Result<JobState> {
        let timeout_secs = i64::try_from(self.rdzv.timeout.as_secs()).unwrap_or(i64::MAX);
        let job_lease = session.grant(timeout_secs)?;
        let first = JobState::first(self.config.clone());
        let key = self.state_key();
        let (created, existing) = ops::txn_or_read(
            session,
            "creating the job's state key",
            ops::absent(&key),
            vec![ops::put_op(&key, first.encode(), job_lease)],
            &key,
        )?;
        if created {
            self.job_lease = job_lease;
            session.keep_alive(job_lease);
            return Ok(first);
        }
        let _ = session.revoke(job_lease);
        let Some(existing) = existing else {
            return Err(backend(
                "the job's state key vanished while joining (its job ended); try again",
            ));
        };
        let state = JobState::decode(&existing.value).map_err(backend)?;
        if let Some(field) = self.config.mismatch(&state.config) {
            return Err(Error::Options {
                reason: format!("job {:?}: {field}", self.rdzv.id),
            });
        }
        if state.is_final() {
            let how = match &state.status {
                Status::Succeeded => "succeeded".to_owned(),
                Status::Failed { cause, .. } => format!("failed: {cause}"),
                Status::Running => unreachable!(),
            };
            return Err(Error::Options {
                reason: format!(
                    "job {:?} has ended already (round {}, {how}); its final state is kept for --rdzv-timeout: give another --rdzv-id",
                    self.rdzv.id, state.round
                ),
            });
        }
        self.job_lease = existing.lease;
        session.keep_alive(existing.lease);
        Ok(state)
    }

    /// Takes `--node-rank`, or the first free member key.
    fn take_rank(&mut self) -> Result<()> {
        let fixed = self.rdzv.node_rank.is_some();
        self.member = Member {
            id: self.launcher_id.clone(),
            fixed,
            ..Member::default()
        };
        let taken: Vec<u32> = self.members().iter().map(|(n, _, _)| *n).collect();
        let candidates: Vec<u32> = match self.rdzv.node_rank {
            Some(rank) => vec![rank],
            // Free as far as we know; one taken meanwhile fails its
            // transaction and the next is tried.
            None => (0..self.slots()).filter(|n| !taken.contains(n)).collect(),
        };
        let mut holder = None;
        for node in candidates {
            let key = self.member_key(node);
            let session = self.session()?;
            let (taken, existing) = ops::txn_or_read(
                session,
                "taking a node rank",
                ops::absent(&key),
                vec![ops::put_op(&key, self.member.encode(), session.lease_id)],
                &key,
            )?;
            if taken {
                self.node = node;
                return self.check_rank_mode();
            }
            holder = existing.and_then(|kv| Member::decode(&kv.value).ok());
        }
        Err(Error::Options {
            reason: match (self.rdzv.node_rank, holder) {
                (Some(rank), Some(holder)) => format!(
                    "job {:?}: --node-rank {rank} is taken by launcher {} (a duplicate --node-rank?)",
                    self.rdzv.id, holder.id
                ),
                (Some(rank), None) => {
                    format!("job {:?}: --node-rank {rank} is taken", self.rdzv.id)
                }
                (None, _) => format!(
                    "job {:?} has {} launchers already (--nnodes {})",
                    self.rdzv.id,
                    self.slots(),
                    self.config.nnodes()
                ),
            },
        })
    }

    /// `--node-rank` on every launcher or on none.
    fn check_rank_mode(&mut self) -> Result<()> {
        let fixed = self.member.fixed;
        let other = self
            .members()
            .into_iter()
            .find(|(n, _, m)| *n != self.node && m.fixed != fixed)
            .map(|(n, _, _)| n);
        let Some(other) = other else {
            return Ok(());
        };
        let session = self.session()?;
        let _ = session.revoke(session.lease_id);
        let (here, there) = match fixed {
            true => ("given here", "not on node"),
            false => ("not given here", "given on node"),
        };
        Err(Error::Options {
            reason: format!(
                "job {:?}: --node-rank is {here} but {there} {other}: give it on every launcher or on none",
                self.rdzv.id
            ),
        })
    }

    pub(super) fn session(&self) -> Result<&Session> {
        self.session
            .as_ref()
            .ok_or_else(|| backend("not connected to etcd"))
    }

    /// Node `node`'s member value, if its key is there and ours.
    pub(super) fn member_of(&self, node: u32) -> Option<Member> {
        let session = self.session.as_ref()?;
        let view = session.view();
        let entry = view.keys.get(&format!("member/{node}"))?;
        Member::decode(&entry.value).ok()
    }

    /// Every member key as last seen that holds a launcher's value: its
    /// number, create revision and value, in order of number.
    pub(super) fn members(&self) -> Vec<(u32, i64, Member)> {
        let Some(session) = self.session.as_ref() else {
            return Vec::new();
        };
        let view = session.view();
        let mut members: Vec<(u32, i64, Member)> = view
            .keys
            .iter()
            .filter_map(|(key, entry)| {
                let member = Member::decode(&entry.value).ok()?;
                Some((slot_of(key)?, entry.create_revision, member))
            })
            .collect();
        members.sort_by_key(|(n, _, _)| *n);
        members
    }
}

/// The number of a member key (`member/<n>`, decimal, no sign or zeros
/// in front), relative to the job's prefix.
fn slot_of(key: &str) -> Option<u32> {
    let digits = key.strip_prefix("member/")?;
    let canonical = !digits.is_empty()
        && digits.len() <= 10
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'));
    canonical.then(|| digits.parse().ok()).flatten()
}

pub(super) fn backend(reason: impl Into<String>) -> Error {
    Error::Backend {
        reason: reason.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::slot_of;

    #[test]
    fn only_canonical_member_keys_name_a_slot() {
        assert_eq!(slot_of("member/0"), Some(0));
        assert_eq!(slot_of("member/4095"), Some(4095));
        for planted in [
            "member/",
            "member/007",
            "member/+1",
            "member/-1",
            "member/1 ",
            "member/99999999999",
            "member/4294967296",
            "state",
            "members/1",
        ] {
            assert_eq!(slot_of(planted), None, "{planted:?}");
        }
    }
}
