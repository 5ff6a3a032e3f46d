//! Who runs a round. With `--nnodes N` it is every node rank once all are
//! ready. With a range `N:M` the first launcher to see enough of them
//! ready writes the list into the state key (one transaction, so every
//! launcher reads the same list): all of them once M are ready, else the
//! ones ready when the last call ends after N were. Launchers left out
//! wait as spares; one that finds room in a running round (fewer than M
//! nodes) starts a new round for itself, as torchrun's waiting nodes do.

use std::time::{Duration, Instant};

use super::EtcdBackend;
use super::join::backend;
use super::rounds::{POLL, master};
use super::state::JobState;
use crate::backend::Begin;
use crate::{Event, Result};

/// When a round waiting for nodes first says so, and then how often.
const FIRST_NOTICE: Duration = Duration::from_secs(5);
const NOTICE_EVERY: Duration = Duration::from_secs(30);

impl EtcdBackend {
    /// Says on our member key that we are ready for `round` (our ranks
    /// of the earlier rounds all gone), with our `MASTER_ADDR` and a free
    /// `MASTER_PORT` when we may be the round's node 0.
    pub(super) fn get_ready(&mut self, round: u32) -> Result<()> {
        self.round = round;
        self.member.ready = Some(round);
        self.member.running = None;
        self.member.done = None;
        let may_be_first = self.rdzv.elastic() || self.node == 0;
        self.member.master = match may_be_first {
            true => Some(master(self.rdzv.local_addr.as_deref())?),
            false => None,
        };
        self.write_member()?;
        self.barrier_since = Some(Instant::now());
        self.min_reached = None;
        // The first word after 5 s (or half the timeout, if shorter).
        self.next_notice = FIRST_NOTICE.min(self.rdzv.timeout / 2);
        Ok(())
    }

    /// While the round waits for nodes it needs: now and then a word of it
    /// (not while a range of nodes has its fewest and waits out the last
    /// call, which ends on its own).
    pub(super) fn waiting_notice(&mut self, round: u32) -> Begin {
        let waited = self.barrier_since.map_or(Duration::ZERO, |t| t.elapsed());
        if waited < self.next_notice || self.ready_seen >= self.rdzv.min_nodes {
            return Begin::Wait;
        }
        self.next_notice = waited + NOTICE_EVERY;
        Begin::Notice(Event::WaitingForNodes {
            restart: round,
            ready: self.ready_seen,
            needed: self.rdzv.min_nodes,
        })
    }

    /// The round's nodes (member key and create revision, in rank order),
    /// once known; `None` while waiting for them. Fails when too few are
    /// ready within `--rdzv-timeout`.
    pub(super) fn round_nodes(&mut self, state: &JobState) -> Result<Option<Vec<(u32, i64)>>> {
        if let Some(nodes) = &state.nodes {
            return Ok(Some(nodes.clone()));
        }
        let round = state.round;
        let ready: Vec<(u32, i64)> = self
            .members()
            .into_iter()
            .filter(|(_, _, m)| m.ready == Some(round))
            .map(|(n, revision, _)| (n, revision))
            .collect();
        let (min, max) = (self.rdzv.min_nodes, self.rdzv.max_nodes);
        let count = u32::try_from(ready.len()).unwrap_or(u32::MAX);
        self.ready_seen = count;
        if count >= min {
            let since = *self.min_reached.get_or_insert_with(Instant::now);
            let settled = count >= max || since.elapsed() >= self.rdzv.last_call;
            if settled && !self.rdzv.elastic() {
                // Every node rank is ready (member keys stop at N).
                return Ok(Some(ready));
            }
            if settled {
                let nodes: Vec<(u32, i64)> = ready.into_iter().take(max as usize).collect();
                // Whoever wins, the next look reads the list from the state.
                let written = self.cas_state(|s| s.with_nodes(round, &nodes))?;
                return Ok(written.and_then(|s| s.nodes));
            }
            return Ok(None);
        }
        // Fewer again (a node left): the last call starts anew at N.
        self.min_reached = None;
        let waited = self.barrier_since.map_or(Duration::ZERO, |t| t.elapsed());
        if waited > self.rdzv.timeout {
            let missing: Vec<u32> = match self.rdzv.elastic() {
                true => Vec::new(),
                false => (0..min)
                    .filter(|n| !ready.iter().any(|r| r.0 == *n))
                    .collect(),
            };
            let which = match missing.is_empty() {
                true => String::new(),
                false => format!(" (node ranks {missing:?} missing)"),
            };
            return Err(backend(format!(
                "round {round}: {count} of the {min} nodes it needs (--nnodes {}) were ready within --rdzv-timeout ({}){which}",
                self.config.nnodes(),
                nodeipc_text::duration(self.rdzv.timeout)
            )));
        }
        Ok(None)
    }

    /// Our node rank in `nodes`, if we are listed (by our member key as it
    /// is now: a key we took after the list was written is not us).
    pub(super) fn rank_among(&self, nodes: &[(u32, i64)]) -> Option<u32> {
        let ours = self
            .members()
            .into_iter()
            .find(|(n, _, _)| *n == self.node)
            .map(|(_, revision, _)| revision)?;
        let rank = nodes.iter().position(|&entry| entry == (self.node, ours))?;
        u32::try_from(rank).ok()
    }

    /// Left out of the round that `state` settled on `nodes`: take the room
    /// if there is some (a new round, not counted), else wait as a spare
    /// until the job moves to a new round or ends. Said once per round.
    pub(super) fn wait_as_spare(
        &mut self,
        state: &JobState,
        nodes: &[(u32, i64)],
    ) -> Result<Begin> {
        let round = state.round;
        let room = nodes.len() < self.rdzv.max_nodes as usize;
        if room {
            let why = format!(
                "a node joined ({} of at most {} running)",
                nodes.len(),
                self.rdzv.max_nodes
            );
            let _ = self.cas_state(|s| s.after_membership_change(round, &why, false))?;
            return Ok(Begin::Wait);
        }
        let first = self.spare_in != Some(round);
        self.spare_in = Some(round);
        self.session()?.wait_change(POLL);
        Ok(match first {
            true => Begin::Notice(Event::Spare {
                restart: round,
                nodes: u32::try_from(nodes.len()).unwrap_or(u32::MAX),
            }),
            false => Begin::Wait,
        })
    }

    /// A node of `nodes` whose member key is gone (`true`) or now belongs
    /// to another launcher (`false`), and why, for people.
    pub(super) fn listed_but_gone(&self, nodes: &[(u32, i64)]) -> Option<(String, bool)> {
        let members = self.members();
        nodes
            .iter()
            .enumerate()
            .find_map(|(rank, &(node, revision))| {
                match members.iter().find(|(n, _, _)| *n == node) {
                    None => Some((format!("node {rank} left the job (its lease ended)"), true)),
                    Some((_, now, _)) if *now != revision => {
                        Some((format!("node {rank} was replaced"), false))
                    }
                    Some(_) => None,
                }
            })
    }
}
