//! What the launchers keep in etcd, as JSON: the job's one state key and
//! one member key per node. Everything read back is checked: a value
//! another process wrote is parsed, never trusted to be well formed.

use serde::{Deserialize, Serialize};

use crate::options::{MAX_NPROC, MAX_RESTARTS};
use crate::rdzv::MAX_NNODES;

/// Longest value the launcher reads from a key of its job: bigger is not
/// one of ours.
pub(crate) const MAX_VALUE: usize = 16 * 1024;

/// What every launcher of the job must agree on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct JobConfig {
    pub(crate) min_nodes: u32,
    pub(crate) max_nodes: u32,
    pub(crate) nproc: u32,
    pub(crate) max_restarts: u32,
}

impl JobConfig {
    /// The first field where `theirs` (the job's) differs from ours, as
    /// the refusal names it.
    pub(crate) fn mismatch(&self, theirs: &JobConfig) -> Option<String> {
        let fields = [
            ("--nnodes", self.nnodes(), theirs.nnodes()),
            ("--nproc", self.nproc.to_string(), theirs.nproc.to_string()),
            (
                "--max-restarts",
                self.max_restarts.to_string(),
                theirs.max_restarts.to_string(),
            ),
        ];
        fields
            .iter()
            .find(|(_, ours, job)| ours != job)
            .map(|(name, ours, job)| {
                format!(
                    "{name} {ours} differs from the job's {name} {job} (set by its first launcher)"
                )
            })
    }

    /// `--nnodes` as given: `N` or `N:M`.
    pub(crate) fn nnodes(&self) -> String {
        match self.min_nodes == self.max_nodes {
            true => self.min_nodes.to_string(),
            false => format!("{}:{}", self.min_nodes, self.max_nodes),
        }
    }
}

/// Where the job is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub(crate) enum Status {
    /// Round `round` runs (or is about to).
    Running,
    /// Every rank of every node exited 0 in `round`.
    Succeeded,
    /// The job is over without success.
    Failed {
        /// The node rank that failed (or was stopped).
        node: u32,
        /// The global rank that failed, when one did.
        rank: Option<u32>,
        /// Why, for people.
        cause: String,
        /// The exit status every launcher exits with.
        code: i32,
    },
}

/// The job's state key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct JobState {
    pub(crate) config: JobConfig,
    /// The job's round: `NODEIPC_RESTART_COUNT`.
    pub(crate) round: u32,
    /// Rounds started because of a failure (counted against
    /// `--max-restarts`; rounds for a change of members are not).
    pub(crate) failures: u32,
    /// Why the current round was started (empty for round 0).
    pub(crate) reason: String,
    /// The round was started because a member was lost: its orphaned
    /// ranks get the stop timeout and a second before the round starts.
    #[serde(default)]
    pub(crate) after_loss: bool,
    /// With a range of nodes: who runs this round, once one launcher has
    /// settled it: each member key's slot and create revision (a launcher
    /// that later takes a freed slot is not the one listed), in node-rank
    /// order.
    #[serde(default)]
    pub(crate) nodes: Option<Vec<(u32, i64)>>,
    #[serde(flatten)]
    pub(crate) status: Status,
}

impl JobState {
    pub(crate) fn first(config: JobConfig) -> JobState {
        JobState {
            config,
            round: 0,
            failures: 0,
            reason: String::new(),
            after_loss: false,
            nodes: None,
            status: Status::Running,
        }
    }

    pub(crate) fn is_final(&self) -> bool {
        !matches!(self.status, Status::Running)
    }

    /// After a failure in `round` on `node`: the next round, or `failed`
    /// when restarts are used up. `None` when the state has moved past
    /// `round` already (the failure is dropped).
    pub(crate) fn after_failure(
        &self,
        round: u32,
        node: u32,
        rank: Option<u32>,
        cause: &str,
        code: i32,
    ) -> Option<JobState> {
        if self.round != round || self.is_final() {
            return None;
        }
        let mut next = self.clone();
        if self.failures >= self.config.max_restarts {
            next.status = Status::Failed {
                node,
                rank,
                cause: format!(
                    "restarts exhausted ({}/{}): node {node}: {cause}",
                    self.failures, self.config.max_restarts
                ),
                code,
            };
        } else {
            next = next.next_round(format!("node {node}: {cause}"), false);
            next.failures = self.failures.saturating_add(1);
        }
        Some(next)
    }

    /// A new round for a change of members (not counted); `loss`: a
    /// member is gone, and its orphans must be given time to die.
    pub(crate) fn after_membership_change(
        &self,
        round: u32,
        why: &str,
        loss: bool,
    ) -> Option<JobState> {
        if self.round != round || self.is_final() {
            return None;
        }
        Some(self.next_round(why.to_owned(), loss))
    }

    /// With a range of nodes: `nodes` run round `round`, unless another
    /// launcher has settled it first.
    pub(crate) fn with_nodes(&self, round: u32, nodes: &[(u32, i64)]) -> Option<JobState> {
        if self.round != round || self.is_final() || self.nodes.is_some() {
            return None;
        }
        Some(JobState {
            nodes: Some(nodes.to_vec()),
            ..self.clone()
        })
    }

    fn next_round(&self, reason: String, after_loss: bool) -> JobState {
        JobState {
            round: self.round.saturating_add(1),
            reason,
            after_loss,
            nodes: None,
            ..self.clone()
        }
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// The job's state as read from etcd, every number checked against
    /// what a launcher can have written: another client that can write the
    /// job's prefix must not make every launcher exit 0 with a forged
    /// `{"status":"failed","code":0}`, nor hand it a node or rank past the
    /// job's size.
    pub(crate) fn decode(bytes: &[u8]) -> Result<JobState, String> {
        let state: JobState = decode(bytes, "the job's state key")?;
        let config = &state.config;
        if config.min_nodes == 0
            || config.min_nodes > config.max_nodes
            || config.max_nodes > MAX_NNODES
        {
            return Err(format!(
                "the job's state key says --nnodes {}: not a launcher's (1 to {MAX_NNODES})",
                config.nnodes()
            ));
        }
        if config.nproc == 0 || config.nproc > MAX_NPROC {
            return Err(format!(
                "the job's state key says --nproc {}: not a launcher's (1 to {MAX_NPROC})",
                config.nproc
            ));
        }
        if config.max_restarts > MAX_RESTARTS {
            return Err(format!(
                "the job's state key says --max-restarts {}: not a launcher's (at most {MAX_RESTARTS})",
                config.max_restarts
            ));
        }
        if state.failures > config.max_restarts {
            return Err(format!(
                "the job's state key counts {} failure rounds of the {} restarts allowed: not a launcher's",
                state.failures, config.max_restarts
            ));
        }
        if let Status::Failed {
            node, rank, code, ..
        } = &state.status
        {
            if !(1..=255).contains(code) {
                return Err(format!(
                    "the job's state key says the job failed with exit status {code}: not a failure's (1 to 255)"
                ));
            }
            if *node >= config.max_nodes {
                return Err(format!(
                    "the job's state key says node {node} failed, past --nnodes {}",
                    config.nnodes()
                ));
            }
            let world = config.max_nodes.saturating_mul(config.nproc);
            if let Some(rank) = rank.filter(|&r| r >= world) {
                return Err(format!(
                    "the job's state key says rank {rank} failed, past the {world} ranks of --nnodes {} --nproc {}",
                    config.nnodes(),
                    config.nproc
                ));
            }
        }
        if let Some(nodes) = &state.nodes {
            let ordered = nodes.windows(2).all(|w| w[0].0 < w[1].0);
            let fits =
                (config.min_nodes as usize..=config.max_nodes as usize).contains(&nodes.len());
            let slots = nodes
                .iter()
                .all(|&(slot, revision)| slot < MAX_NNODES && revision > 0);
            if !ordered || !fits || !slots {
                return Err(format!(
                    "the job's state key lists {} nodes for round {} (--nnodes {}), or not in order: not a launcher's",
                    nodes.len(),
                    state.round,
                    config.nnodes()
                ));
            }
        }
        Ok(state)
    }
}

/// One node's member key (bound to its launcher's lease).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Member {
    /// The launcher (unique per process and start).
    pub(crate) id: String,
    /// Its rank was given (`--node-rank`) rather than taken in order.
    #[serde(default)]
    pub(crate) fixed: bool,
    /// Ready (its ranks of earlier rounds all gone) to start this round.
    pub(crate) ready: Option<u32>,
    /// Its ranks run this round.
    pub(crate) running: Option<u32>,
    /// Its ranks all exited 0 in this round.
    pub(crate) done: Option<u32>,
    /// Node 0: `MASTER_ADDR` and `MASTER_PORT` of the round it is ready for.
    pub(crate) master: Option<(String, u16)>,
}

impl Member {
    pub(crate) fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Member, String> {
        let member: Member = decode(bytes, "a member key")?;
        if let Some((_, 0)) = &member.master {
            return Err("a member key's MASTER_PORT is 0: not a launcher's".to_owned());
        }
        if let Some((addr, _)) = &member.master {
            // It becomes every rank's MASTER_ADDR.
            let bad = |c: char| c.is_whitespace() || c.is_control();
            if addr.is_empty() || addr.len() > 253 || addr.chars().any(bad) {
                return Err(format!(
                    "a member key's master address {addr:?} is not a host name or address"
                ));
            }
        }
        Ok(member)
    }
}

fn decode<T: for<'de> Deserialize<'de>>(bytes: &[u8], what: &str) -> Result<T, String> {
    if bytes.len() > MAX_VALUE {
        return Err(format!(
            "{what} holds {} bytes, more than the {MAX_VALUE} a launcher writes",
            bytes.len()
        ));
    }
    serde_json::from_slice(bytes).map_err(|e| format!("{what} is not a launcher's: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(max_restarts: u32) -> JobConfig {
        JobConfig {
            min_nodes: 2,
            max_nodes: 2,
            nproc: 2,
            max_restarts,
        }
    }

    #[test]
    fn a_mismatch_names_the_first_field_that_differs() {
        let ours = config(3);
        assert_eq!(ours.mismatch(&config(3)), None);
        let why = ours.mismatch(&config(1)).unwrap();
        assert!(why.contains("--max-restarts 3"), "{why}");
        assert!(why.contains("--max-restarts 1"), "{why}");
        let other = JobConfig {
            nproc: 4,
            ..config(3)
        };
        assert!(ours.mismatch(&other).unwrap().starts_with("--nproc 2"));
        let range = JobConfig {
            max_nodes: 4,
            ..config(3)
        };
        let why = ours.mismatch(&range).unwrap();
        assert!(
            why.starts_with("--nnodes 2 differs from the job's --nnodes 2:4"),
            "{why}"
        );
    }

    #[test]
    fn a_failure_moves_to_the_next_round_until_restarts_run_out() {
        let state = JobState::first(config(1));
        let next = state.after_failure(0, 1, Some(3), "exit 7", 7).unwrap();
        assert_eq!((next.round, next.failures), (1, 1));
        assert_eq!(next.status, Status::Running);
        let last = next.after_failure(1, 0, Some(0), "exit 9", 9).unwrap();
        assert_eq!(last.round, 1);
        match &last.status {
            Status::Failed {
                node, rank, code, ..
            } => assert_eq!((*node, *rank, *code), (0, Some(0), 9)),
            other => panic!("{other:?}"),
        }
        assert!(last.after_failure(1, 0, None, "again", 1).is_none());
    }

    #[test]
    fn a_failure_in_a_round_already_left_is_dropped() {
        let state = JobState::first(config(5))
            .after_failure(0, 0, None, "x", 1)
            .unwrap();
        assert!(state.after_failure(0, 1, None, "late", 1).is_none());
        assert!(state.after_membership_change(0, "late", false).is_none());
    }

    #[test]
    fn a_change_of_members_is_not_counted() {
        let state = JobState::first(config(0));
        let next = state
            .after_membership_change(0, "node 1 left", true)
            .unwrap();
        assert_eq!((next.round, next.failures, next.after_loss), (1, 0, true));
        let encoded = next.encode();
        assert_eq!(JobState::decode(&encoded).unwrap(), next);
    }

    #[test]
    fn a_rounds_nodes_are_settled_once_and_dropped_by_the_next_round() {
        let elastic = JobConfig {
            min_nodes: 1,
            max_nodes: 3,
            ..config(2)
        };
        assert_eq!(elastic.nnodes(), "1:3");
        let state = JobState::first(elastic);
        let settled = state.with_nodes(0, &[(0, 7), (2, 9)]).unwrap();
        assert!(settled.with_nodes(0, &[(1, 8)]).is_none());
        assert_eq!(JobState::decode(&settled.encode()).unwrap(), settled);
        let next = settled.after_failure(0, 1, None, "x", 1).unwrap();
        assert_eq!((next.round, next.nodes.clone()), (1, None));
        let reordered = JobState {
            nodes: Some(vec![(2, 9), (0, 7)]),
            ..settled.clone()
        };
        assert!(JobState::decode(&reordered.encode()).is_err());
        let too_many = JobState {
            nodes: Some(vec![(0, 1), (1, 2), (2, 3), (3, 4)]),
            ..settled
        };
        assert!(
            JobState::decode(&too_many.encode())
                .unwrap_err()
                .contains("4 nodes")
        );
    }

    /// Every number read from the state key is one a launcher could have
    /// written (regression: a forged `{"status":"failed","code":0}` made
    /// every launcher exit 0).
    #[test]
    fn regression_numbers_read_from_etcd_are_range_checked() {
        let failed = |node, rank, code| JobState {
            status: Status::Failed {
                node,
                rank,
                cause: "x".into(),
                code,
            },
            ..JobState::first(config(3))
        };
        for code in [1, 3, 143, 255] {
            let state = failed(1, Some(3), code);
            assert_eq!(JobState::decode(&state.encode()).unwrap(), state);
        }
        for code in [0, -1, 256, i32::MIN, i32::MAX] {
            let why = JobState::decode(&failed(0, None, code).encode()).unwrap_err();
            assert!(why.contains(&format!("exit status {code}")), "{why}");
        }
        let why = JobState::decode(&failed(2, None, 1).encode()).unwrap_err();
        assert!(why.contains("node 2"), "{why}");
        let why = JobState::decode(&failed(0, Some(4), 1).encode()).unwrap_err();
        assert!(why.contains("rank 4"), "{why}");
        let with = |config: JobConfig| JobState::first(config).encode();
        for (bad, field) in [
            (
                JobConfig {
                    nproc: 0,
                    ..config(3)
                },
                "--nproc 0",
            ),
            (
                JobConfig {
                    nproc: 5000,
                    ..config(3)
                },
                "--nproc 5000",
            ),
            (
                JobConfig {
                    max_restarts: u32::MAX,
                    ..config(3)
                },
                "--max-restarts",
            ),
            (
                JobConfig {
                    min_nodes: 1,
                    max_nodes: u32::MAX,
                    ..config(3)
                },
                "--nnodes",
            ),
        ] {
            let why = JobState::decode(&with(bad)).unwrap_err();
            assert!(why.contains(field), "{why}");
        }
        let counted = JobState {
            failures: 4,
            ..JobState::first(config(3))
        };
        assert!(
            JobState::decode(&counted.encode())
                .unwrap_err()
                .contains("4 failure rounds")
        );
        let elastic = JobState::first(JobConfig {
            min_nodes: 1,
            max_nodes: 3,
            ..config(2)
        });
        for nodes in [vec![(MAX_NNODES, 1)], vec![(0, 0)], vec![(0, -5)]] {
            let state = JobState {
                nodes: Some(nodes.clone()),
                ..elastic.clone()
            };
            assert!(JobState::decode(&state.encode()).is_err(), "{nodes:?}");
        }
        let member = Member {
            id: "a".into(),
            master: Some(("127.0.0.2".into(), 0)),
            ..Member::default()
        };
        assert!(
            Member::decode(&member.encode())
                .unwrap_err()
                .contains("MASTER_PORT")
        );
    }

    #[test]
    fn values_not_ours_are_refused_with_a_reason() {
        assert!(JobState::decode(b"{").unwrap_err().contains("state key"));
        let big = vec![b' '; MAX_VALUE + 1];
        assert!(Member::decode(&big).unwrap_err().contains("more than"));
        let member = Member {
            id: "a".into(),
            ready: Some(2),
            master: Some(("127.0.0.2".into(), 4000)),
            ..Member::default()
        };
        assert_eq!(Member::decode(&member.encode()).unwrap(), member);
        let planted = Member {
            master: Some(("a\nb".into(), 1)),
            ..member
        };
        assert!(
            Member::decode(&planted.encode())
                .unwrap_err()
                .contains("master address")
        );
    }
}
