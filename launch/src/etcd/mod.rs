//! Restart rounds across nodes through etcd v3 (feature `etcd`).
//!
//! Keys under `/nodeipc/<job>/`: `state`, the one key that decides (a
//! [`JobState`](state::JobState), changed only by transactions on its
//! revision, bound to a job lease every launcher keeps alive, so that it
//! outlives a finished job by `--rdzv-timeout` and no more); and
//! `member/<node rank>`, one per launcher, bound to the launcher's own
//! lease (`--rdzv-ttl`), saying which round it is ready for, runs, or has
//! finished.
//!
//! With `--nnodes N` the member keys are the node ranks `0..N`. With a
//! range `N:M` a member key's number is only a slot taken in order of
//! arrival: the state key lists the slots that run each round (node ranks
//! in that order), and launchers left out wait as spares.

mod form;
mod join;
mod ops;
mod pb;
mod rounds;
mod session;
mod state;

use std::time::{Duration, Instant};

use crate::rdzv::EtcdRendezvous;
use session::Session;
use state::{JobConfig, Member};

/// The etcd round backend of one launcher. It connects on the first
/// round (after the launcher has set up its signals, so that the client's
/// thread inherits their mask), and leaves the job (revoking its lease)
/// when dropped.
pub struct EtcdBackend {
    rdzv: EtcdRendezvous,
    config: JobConfig,
    stop_timeout: Duration,
    launcher_id: String,
    session: Option<Session>,
    /// The job's lease (the state key's).
    job_lease: i64,
    /// Our member key's number: the node rank with a fixed number of
    /// nodes, a slot with a range.
    node: u32,
    /// This node's rank in the round it runs (or last ran).
    group_rank: u32,
    /// Our member key's value as last written.
    member: Member,
    /// The round this node is in.
    round: u32,
    /// When this node began waiting for the others in `round`.
    barrier_since: Option<Instant>,
    /// The round's nodes in rank order (member key and its create
    /// revision): one gone or replaced later is a change of members.
    members_at_start: Vec<(u32, i64)>,
    /// With a range of nodes: when the round first had its fewest nodes
    /// ready (the last call runs from there).
    min_reached: Option<Instant>,
    /// Waiting as a spare in round `Some(r)` (said once per round).
    spare_in: Option<u32>,
    /// Nodes ready for the round as last counted, and how long into the
    /// wait the next "waiting for nodes" is said.
    ready_seen: u32,
    next_notice: std::time::Duration,
    /// When a member was seen gone: its orphaned ranks get the stop
    /// timeout and a second more before the next round starts.
    lost_at: Option<Instant>,
    /// Stopped for want of acknowledged keepalives.
    cut_off: bool,
    /// Rounds this node started.
    rounds_started: u32,
}

impl EtcdBackend {
    /// A backend for `rdzv`, this node running `nproc` ranks, the job
    /// allowing `max_restarts` failure rounds, its ranks given
    /// `stop_timeout` to stop.
    pub fn new(
        rdzv: EtcdRendezvous,
        nproc: u32,
        max_restarts: u32,
        stop_timeout: Duration,
    ) -> EtcdBackend {
        let config = JobConfig {
            min_nodes: rdzv.min_nodes,
            max_nodes: rdzv.max_nodes,
            nproc,
            max_restarts,
        };
        EtcdBackend {
            rdzv,
            config,
            stop_timeout,
            launcher_id: crate::launch_id(),
            session: None,
            job_lease: 0,
            node: 0,
            group_rank: 0,
            member: Member::default(),
            round: 0,
            barrier_since: None,
            members_at_start: Vec::new(),
            min_reached: None,
            spare_in: None,
            ready_seen: 0,
            next_notice: std::time::Duration::ZERO,
            lost_at: None,
            cut_off: false,
            rounds_started: 0,
        }
    }

    /// Requests made to etcd so far and rounds started: what the scale
    /// figures divide.
    pub fn stats(&self) -> (u64, u32) {
        let requests = self.session.as_ref().map_or(0, Session::requests);
        (requests, self.rounds_started)
    }

    /// This node's rank in the round it ran last: `None` before it joined,
    /// or with a range of nodes before it ran a round (a spare).
    pub fn node_rank(&self) -> Option<u32> {
        let ran = self.rounds_started > 0 || !self.rdzv.elastic();
        self.session
            .as_ref()
            .filter(|_| ran)
            .map(|_| self.group_rank)
    }

    /// How many member keys the job may have: its node ranks, or with a
    /// range of nodes every launcher (spares too) up to [`MAX_NNODES`].
    ///
    /// [`MAX_NNODES`]: crate::rdzv::MAX_NNODES
    fn slots(&self) -> u32 {
        match self.rdzv.elastic() {
            true => crate::rdzv::MAX_NNODES,
            false => self.rdzv.min_nodes,
        }
    }

    fn prefix(id: &str) -> String {
        format!("/nodeipc/{id}/")
    }

    fn state_key(&self) -> String {
        format!("{}state", Self::prefix(&self.rdzv.id))
    }

    fn member_key(&self, node: u32) -> String {
        format!("{}member/{node}", Self::prefix(&self.rdzv.id))
    }
}
