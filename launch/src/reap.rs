//! What the ranks leave behind: the launcher is a child subreaper
//! (`PR_SET_CHILD_SUBREAPER`), so a rank's orphaned descendants become its
//! children; they are found in `/proc`, killed and reaped when a round stops.

use rustix::process::{Pid, Signal, WaitOptions};

/// One process as `/proc/<pid>/stat` describes it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Proc {
    pub(crate) pid: u32,
    pub(crate) ppid: u32,
    pub(crate) pgrp: u32,
    pub(crate) zombie: bool,
}

/// Every process we can see, each read by fdpass's reader of
/// `/proc/<pid>/stat`. Processes that vanish while we read are skipped:
/// they are gone, which is what the callers want to know.
pub(crate) fn processes() -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = nodeipc_fdpass::process_stat(pid).ok()?;
            Some(Proc {
                pid,
                ppid: stat.ppid,
                pgrp: stat.pgrp,
                zombie: stat.is_exited(),
            })
        })
        .collect()
}

/// Makes the calling process a child subreaper: descendants orphaned
/// under it become its children instead of init's.
pub(crate) fn become_subreaper() -> std::io::Result<()> {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid()))?;
    Ok(())
}

/// Live processes other than the ranks (watched through their pidfds):
/// those in any of the ranks' process groups (each rank leads its own,
/// `ranks` are their ids), and with `own_children` our other children.
pub(crate) fn leftovers(ranks: &[u32], own_children: bool) -> Vec<Proc> {
    let me = std::process::id();
    processes()
        .into_iter()
        .filter(|p| !p.zombie && !ranks.contains(&p.pid))
        .filter(|p| ranks.contains(&p.pgrp) || (own_children && p.ppid == me))
        .collect()
}

/// Sends `signal` to each process.
pub(crate) fn signal_all(procs: &[Proc], signal: Signal) {
    for p in procs {
        if let Some(pid) = i32::try_from(p.pid).ok().and_then(Pid::from_raw) {
            // ESRCH: it went on its own meanwhile.
            let _ = rustix::process::kill_process(pid, signal);
        }
    }
}

/// Reaps our zombie children that are not ranks (the ranks are reaped by
/// their `Child`): orphans reparented to us that have exited.
pub(crate) fn reap_orphans(ranks: &[u32]) {
    let me = std::process::id();
    for p in processes() {
        if p.ppid == me
            && p.zombie
            && !ranks.contains(&p.pid)
            && let Some(pid) = i32::try_from(p.pid).ok().and_then(Pid::from_raw)
        {
            let _ = rustix::process::waitpid(Some(pid), WaitOptions::NOHANG);
        }
    }
}
