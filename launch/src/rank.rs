//! Starting one rank: its environment, its own process group, a parent-death
//! signal, and a pidfd the launcher polls for its exit.

use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command};
use std::time::Instant;

use nodeipc_fdpass::Pidfd;
use rustix::process::{Pid, Signal, WaitId, WaitIdOptions};

use crate::backend::RoundPlan;
use crate::options::LaunchOptions;
use crate::output::{RankStreams, Tee};
use crate::{Error, Result};

/// A running (or just ended) rank.
pub(crate) struct Rank {
    pub(crate) local_rank: u32,
    pub(crate) global_rank: u32,
    pub(crate) child: Child,
    pub(crate) pidfd: Pidfd,
    pub(crate) started: Instant,
    /// How it ended, once it has.
    pub(crate) status: Option<Ended>,
    /// The threads copying its tee'd output.
    pub(crate) tees: Vec<Tee>,
}

/// The environment a rank gets besides the launcher's own: ours, then
/// torchrun's names for the same things.
pub(crate) fn rank_env(
    plan: &RoundPlan,
    local_rank: u32,
    nproc: u32,
    max_restarts: u32,
    socket: &Path,
) -> Vec<(&'static str, String)> {
    let rank = plan.rank_offset.saturating_add(local_rank).to_string();
    let local = local_rank.to_string();
    let world = plan.world_size.to_string();
    let local_world = nproc.to_string();
    let restart = plan.restart.to_string();
    vec![
        ("NODEIPC_RANK", rank.clone()),
        ("NODEIPC_LOCAL_RANK", local.clone()),
        ("NODEIPC_WORLD_SIZE", world.clone()),
        ("NODEIPC_LOCAL_WORLD_SIZE", local_world.clone()),
        ("NODEIPC_MONITOR_SOCKET", socket.display().to_string()),
        ("NODEIPC_RESTART_COUNT", restart.clone()),
        ("NODEIPC_GROUP", plan.group.clone()),
        ("RANK", rank),
        ("LOCAL_RANK", local),
        ("WORLD_SIZE", world),
        ("LOCAL_WORLD_SIZE", local_world),
        ("GROUP_RANK", plan.group_rank.to_string()),
        ("GROUP_WORLD_SIZE", plan.group_world_size.to_string()),
        ("MASTER_ADDR", plan.master_addr.clone()),
        ("MASTER_PORT", plan.master_port.to_string()),
        ("TORCHELASTIC_RESTART_COUNT", restart),
        ("TORCHELASTIC_MAX_RESTARTS", max_restarts.to_string()),
        ("TORCHELASTIC_RUN_ID", plan.run_id.clone()),
    ]
}

impl Rank {
    /// Starts the command as `local_rank` of `plan`, in a process group of
    /// its own (so a stop reaches whatever it started in that group), with
    /// SIGKILL as its parent-death signal (the launcher killed outright
    /// takes its ranks along). Working directory, the rest of the
    /// environment and stdin are the launcher's; stdout and stderr as
    /// `streams` say (the launcher's unless redirected).
    pub(crate) fn spawn(
        options: &LaunchOptions,
        plan: &RoundPlan,
        local_rank: u32,
        socket: &Path,
        streams: RankStreams,
    ) -> Result<Rank> {
        let program = &options.command[0];
        let mut command = Command::new(program);
        command.args(&options.command[1..]);
        command.envs(rank_env(
            plan,
            local_rank,
            options.nproc,
            options.max_restarts,
            socket,
        ));
        if let Some(factor) = options.ft_safety_factor {
            command.env("NODEIPC_FT_SAFETY_FACTOR", factor.to_string());
        }
        if let Some(file) = &streams.error_file {
            command.env("TORCHELASTIC_ERROR_FILE", file);
        }
        command.stdout(streams.stdout);
        command.stderr(streams.stderr);
        command.process_group(0);
        // SAFETY: the closure runs in the child between fork and exec and
        // only calls prctl, sigemptyset and sigprocmask (async-signal-safe)
        // on its own stack, touching no memory another thread uses. The
        // death signal follows the thread that forked: the launcher forks
        // every rank from the thread that runs the launch. The mask is the
        // launcher's (its stop signals blocked for its signalfd): the rank
        // must start with none blocked, and the standard library does not
        // reset it.
        unsafe {
            command.pre_exec(move || {
                rustix::process::set_parent_process_death_signal(Some(Signal::KILL))
                    .map_err(std::io::Error::from)?;
                nodeipc_fdpass::clear_signal_mask()
            });
        }
        let spawn_error = |source| Error::Spawn {
            local_rank,
            program: program.to_string_lossy().into_owned(),
            source,
        };
        let spawned = command.spawn();
        // The pipes' write ends went to the child: the tee threads see end
        // of file when the rank (and what it started) closes them.
        drop(command);
        let mut child = spawned.map_err(spawn_error)?;
        let pidfd = match Pidfd::open(child.id()) {
            Ok(pidfd) => pidfd,
            Err(e) => {
                // Not reaped yet, so the pid is still this child's.
                let _ = child.kill();
                let _ = child.wait();
                return Err(spawn_error(e.into()));
            }
        };
        Ok(Rank {
            local_rank,
            global_rank: plan.rank_offset.saturating_add(local_rank),
            child,
            pidfd,
            started: Instant::now(),
            status: None,
            tees: streams.tees,
        })
    }

    /// How the rank ended, if it has: read with `WNOWAIT`, so the rank
    /// stays a zombie, its pid and process group id reserved (no later
    /// process can take them) until [`reap`](Rank::reap).
    pub(crate) fn poll_exit(&mut self) -> Result<Option<Ended>> {
        if self.status.is_none() {
            let options = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
            let found = rustix::process::waitid(WaitId::PidFd(self.pidfd.as_fd()), options)
                .map_err(|e| Error::io("waitid on a rank's pidfd", e))?;
            self.status = found.map(|s| Ended {
                code: s.exit_status(),
                signal: s.terminating_signal(),
            });
        }
        Ok(self.status)
    }

    /// Sends `signal` to the rank's process group (the rank and what it
    /// started there). The rank is not reaped before the round is over, so
    /// the group id is still ours even when the rank has exited.
    pub(crate) fn signal_group(&self, signal: Signal) {
        if let Some(pid) = i32::try_from(self.child.id()).ok().and_then(Pid::from_raw) {
            // ESRCH: the group is empty already; nothing else can fail here.
            let _ = rustix::process::kill_process_group(pid, signal);
        }
    }

    /// Reaps the rank (after it has exited).
    pub(crate) fn reap(&mut self) {
        let _ = self.child.wait();
    }
}

/// How a rank ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ended {
    /// Its exit code, when it exited.
    pub(crate) code: Option<i32>,
    /// The signal that killed it, when one did.
    pub(crate) signal: Option<i32>,
}

impl Ended {
    /// The launcher's exit status for a rank that ended so: its own code,
    /// or 128 + the signal that killed it.
    pub(crate) fn exit_code(self) -> i32 {
        match (self.code, self.signal) {
            (Some(code), _) => code,
            (None, Some(signal)) => 128 + signal,
            (None, None) => 1,
        }
    }

    pub(crate) fn success(self) -> bool {
        self.code == Some(0)
    }
}
