//! Who takes part in a round: the one interface a multi-node backend (etcd,
//! for one) implements. The local backend is this node alone.

use std::net::{Ipv4Addr, TcpListener};

use crate::{Error, Result};

/// What one round is, as every rank's environment says it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoundPlan {
    /// `NODEIPC_RESTART_COUNT` (0 for the first round).
    pub restart: u32,
    /// Ranks in the whole job (`WORLD_SIZE`).
    pub world_size: u32,
    /// Global rank of this node's local rank 0.
    pub rank_offset: u32,
    /// `MASTER_ADDR`.
    pub master_addr: String,
    /// `MASTER_PORT`.
    pub master_port: u16,
    /// `NODEIPC_GROUP`: unique to the launcher and the round, a POSIX name
    /// with its leading `/`, so that every face's group constructor takes
    /// it verbatim (`Group::join`, `nodeipc_group_join`,
    /// `kittens::KittensBroker`, `nodeipc.Group`).
    pub group: String,
    /// `GROUP_RANK`: this node's rank.
    pub group_rank: u32,
    /// `GROUP_WORLD_SIZE`: nodes in the round.
    pub group_world_size: u32,
    /// `TORCHELASTIC_RUN_ID`: the job's id.
    pub run_id: String,
}

/// How a round ended on this node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RoundResult {
    /// Every local rank exited 0.
    Succeeded,
    /// A local rank failed (the reason for people).
    Failed(String),
    /// The launcher was stopped by a signal.
    Interrupted,
}

/// How a round ended on this node, in full, for a backend that decides
/// what follows ([`RoundBackend::decide`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RoundReport {
    /// Every local rank exited 0.
    Succeeded,
    /// A local rank failed: its global rank, why, and the exit status the
    /// launcher would exit with.
    Failed {
        /// Global rank.
        rank: u32,
        /// Why, for people.
        cause: String,
        /// Exit status earned.
        code: i32,
    },
    /// A stop signal came.
    Interrupted {
        /// Its number.
        signal: i32,
    },
    /// Processes of the round (ranks or what they left) still alive after
    /// SIGKILL and a bound: a multi-node backend leaves the job rather than
    /// hold the others' next round. Reported before the round's own end,
    /// except a local failure, reported just before it (its decision not
    /// waited for) so that it counts for the job.
    Stuck {
        /// How many.
        processes: u32,
    },
    /// The backend asked for the stop ([`RoundBackend::restart_requested`]):
    /// our own stop, never a failure.
    Requested {
        /// Its words.
        reason: String,
    },
}

/// What follows a round, as a backend decides it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The launcher decides alone (one node: restart after a failure until
    /// `--max-restarts`).
    Local,
    /// Not known yet: ask again ([`RoundBackend::poll_decision`]) in about
    /// 100 ms, stop signals read in between.
    Pending,
    /// Start this round next.
    Next {
        /// Its number (`NODEIPC_RESTART_COUNT`).
        restart: u32,
    },
    /// The job is over: exit with this status, for this reason.
    Finished {
        /// The launcher's exit status.
        exit_code: i32,
        /// Why, for people.
        summary: String,
    },
}

/// Whether a round may start. (Not `Eq`: a notice's event may hold
/// seconds as `f64`.)
#[derive(Clone, Debug, PartialEq)]
pub enum Begin {
    /// Not yet: ask again in about 100 ms.
    Wait,
    /// Start it.
    Start(RoundPlan),
    /// Not yet, and the launcher says why: this event (a spare's wait, a
    /// round waiting for nodes); ask again in about 100 ms.
    Notice(crate::Event),
    /// The job ended before it could start.
    Finished {
        /// The launcher's exit status.
        exit_code: i32,
        /// Why, for people.
        summary: String,
    },
}

/// Agrees with the other nodes (if any) on each round. Every call must be
/// bounded in time.
pub trait RoundBackend {
    /// Called before round `restart` starts, with this node's rank count;
    /// returns the round's plan.
    ///
    /// # Errors
    /// The backend could not agree on a round.
    fn begin_round(&mut self, restart: u32, nproc: u32) -> Result<RoundPlan>;

    /// As [`begin_round`](RoundBackend::begin_round), returning within
    /// about 100 ms: the launcher reads stop signals between two calls.
    ///
    /// # Errors
    /// As `begin_round`.
    fn poll_begin(&mut self, restart: u32, nproc: u32) -> Result<Begin> {
        self.begin_round(restart, nproc).map(Begin::Start)
    }

    /// Polled about every 100 ms while the round runs: `Some(reason)` when
    /// another node wants the round stopped and restarted.
    fn restart_requested(&mut self) -> Option<String> {
        None
    }

    /// Called the moment a local failure ends the round, before this
    /// node's ranks are stopped: a multi-node backend tells the other
    /// nodes now, so that every node stops in parallel rather than after
    /// this node's stop (up to `--stop-timeout` when ranks ignore
    /// SIGTERM). Best effort, bounded in time; [`decide`] follows.
    ///
    /// [`decide`]: RoundBackend::decide
    fn failure_seen(&mut self, _restart: u32, _report: &RoundReport) {}

    /// Called when this node's ranks asked, through nvidia-resiliency-ext's
    /// workload control, for the launch to end here: with `shutdown` the
    /// whole job ends, on every node, with `exit_code` and `cause`;
    /// without, this node leaves it (the others go on where their range of
    /// nodes allows). Best effort, bounded in time.
    fn workload_ends(&mut self, _shutdown: bool, _exit_code: i32, _cause: &str) {}

    /// Called once the round's local ranks are all gone.
    ///
    /// # Errors
    /// The backend could not record the end.
    fn end_round(&mut self, _restart: u32, _result: &RoundResult) -> Result<()> {
        Ok(())
    }

    /// Called after `end_round`: what follows the round. The default
    /// leaves it to the launcher.
    ///
    /// # Errors
    /// The backend could not decide (the store is unreachable).
    fn decide(&mut self, _restart: u32, _report: &RoundReport) -> Result<Decision> {
        Ok(Decision::Local)
    }

    /// Called about every 100 ms after `decide` said
    /// [`Decision::Pending`], until it says something else.
    ///
    /// # Errors
    /// As `decide`.
    fn poll_decision(&mut self, _restart: u32) -> Result<Decision> {
        Ok(Decision::Local)
    }
}

/// One node: world size = local ranks, master on 127.0.0.1 on a free port.
#[derive(Debug)]
pub struct LocalBackend {
    launch_id: String,
}

impl LocalBackend {
    /// A backend whose groups are named `/nodeipc-<launch_id>-r<restart>`
    /// (its runs `nodeipc-<launch_id>-r<restart>`).
    pub fn new(launch_id: impl Into<String>) -> LocalBackend {
        LocalBackend {
            launch_id: launch_id.into(),
        }
    }
}

impl RoundBackend for LocalBackend {
    fn begin_round(&mut self, restart: u32, nproc: u32) -> Result<RoundPlan> {
        Ok(RoundPlan {
            restart,
            world_size: nproc,
            rank_offset: 0,
            master_addr: Ipv4Addr::LOCALHOST.to_string(),
            master_port: free_port()?,
            group: format!("/nodeipc-{}-r{restart}", self.launch_id),
            group_rank: 0,
            group_world_size: 1,
            run_id: format!("nodeipc-{}-r{restart}", self.launch_id),
        })
    }
}

/// A TCP port free on 127.0.0.1 now (the kernel's pick, released at once:
/// rank 0 binds it a moment later, as torchrun's `--master-port 0` does).
pub fn free_port() -> Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(|e| Error::io("bind 127.0.0.1:0 for MASTER_PORT", e))?;
    let port = listener
        .local_addr()
        .map_err(|e| Error::io("getsockname for MASTER_PORT", e))?
        .port();
    Ok(port)
}
