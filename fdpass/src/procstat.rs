//! `/proc/<pid>/stat`, the tree's one reader of it: start times, which with
//! the pid name one process for good (a recycled pid comes with a later
//! start time), parents (the monitor's check that a pid is a client's own
//! or its descendant's), process groups and states (the launcher's sweep of
//! what its ranks left behind).
//!
//! Only the kernel saying there is no such process (`ENOENT`, `ESRCH`) means
//! the process is gone. Any other failure to read — out of descriptors
//! (`EMFILE`, `ENFILE`), out of memory, `/proc` not mounted — is our own
//! trouble, says nothing about the other process, and is returned as that
//! failure ([`Error::ProcessIo`]), never as a death.

use std::io;
use std::sync::OnceLock;

use crate::{Error, Result};

/// What [`Error::ProcessIo`] names as the failed call.
const READ_STAT: &str = "read /proc/<pid>/stat";
const READ_OWN_STAT: &str = "read /proc/self/stat";

/// What the tree reads of a process's `/proc/<pid>/stat` line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProcStat {
    /// Its state (field 3): `R` running, `S` sleeping, `Z` zombie, `X`
    /// dead, ... (see [`is_exited`](ProcStat::is_exited)).
    pub state: char,
    /// Its parent's pid (field 4); 0 for a process whose parent is outside
    /// our pid namespace.
    pub ppid: u32,
    /// Its process group (field 5).
    pub pgrp: u32,
    /// Its start time in clock ticks since boot (field 22): with the pid it
    /// names one process for good.
    pub start_time: u64,
}

impl ProcStat {
    /// Whether the process has exited and only waits to be reaped: state
    /// `Z` (zombie) or `X` (dead).
    pub fn is_exited(&self) -> bool {
        matches!(self.state, 'Z' | 'X')
    }
}

/// Reads `/proc/<pid>/stat`: the one reader of that file in the tree.
///
/// Performs `open("/proc/<pid>/stat")` and `read`; only `ENOENT` or
/// `ESRCH` with `/proc` mounted means the process is gone.
///
/// # Errors
/// [`Error::ProcessGone`] when there is no such process (`ENOENT`, `ESRCH`,
/// with `/proc` mounted); [`Error::ProcessIo`] naming the pid, the file and
/// the errno for any other failure (`EMFILE`, say), or for a stat line
/// without the fields (`InvalidData`).
///
/// # Examples
///
/// ```
/// let me = nodeipc_fdpass::process_stat(std::process::id())?;
/// assert_eq!(me.ppid, std::os::unix::process::parent_id());
/// assert!(!me.is_exited());
/// # Ok::<(), nodeipc_fdpass::Error>(())
/// ```
///
/// # References
/// - [Linux `proc_pid_stat(5)`](https://man7.org/linux/man-pages/man5/proc_pid_stat.5.html)
#[doc(alias = "/proc/pid/stat")]
pub fn process_stat(pid: u32) -> Result<ProcStat> {
    let stat = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat,
        Err(e) if is_gone(&e) && proc_mounted() => {
            return Err(Error::ProcessGone {
                pid,
                reason: "it has exited",
            });
        }
        Err(e) if is_gone(&e) => {
            return Err(Error::process_io(
                READ_STAT,
                pid,
                None,
                io::Error::new(e.kind(), "/proc is not mounted (no /proc/self)"),
            ));
        }
        Err(e) => return Err(Error::process_io(READ_STAT, pid, None, e)),
    };
    parse(&stat).map_err(|missing| Error::process_io(READ_STAT, pid, None, missing))
}

/// The start time of `pid` (see [`process_stat`]).
///
/// # Errors
/// As [`process_stat`].
pub(crate) fn start_time(pid: u32) -> Result<u64> {
    process_stat(pid).map(|stat| stat.start_time)
}

/// This process's start time, read once it could be read.
///
/// # Errors
/// [`Error::ProcessIo`] when `/proc/self/stat` cannot be read (`EMFILE`, say);
/// the next call tries again.
pub(crate) fn own_start_time() -> Result<u64> {
    static OWN: OnceLock<u64> = OnceLock::new();
    if let Some(own) = OWN.get() {
        return Ok(*own);
    }
    let me = std::process::id();
    let own = std::fs::read_to_string("/proc/self/stat")
        .and_then(|stat| parse(&stat).map_err(io::Error::from))
        .map_err(|e| Error::process_io(READ_OWN_STAT, me, None, e))?
        .start_time;
    Ok(*OWN.get_or_init(|| own))
}

/// Whether a failed read of a `/proc/<pid>` file means the process is gone.
fn is_gone(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(code) if code == libc::ENOENT || code == libc::ESRCH
    )
}

/// Whether `/proc` shows this process: without it, a missing `/proc/<pid>`
/// says nothing about that pid. `stat` needs no descriptor.
fn proc_mounted() -> bool {
    std::fs::symlink_metadata("/proc/self/stat").is_ok()
}

/// A field a stat line lacks, as the error that names it.
struct Missing(&'static str);

impl From<Missing> for io::Error {
    fn from(Missing(what): Missing) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, what)
    }
}

/// The fields of a stat line. The command name (field 2) may hold spaces
/// and parentheses, so counting starts after its last `)`.
fn parse(stat: &str) -> std::result::Result<ProcStat, Missing> {
    let after_comm = stat
        .rfind(')')
        .map(|at| &stat[at + 1..])
        .ok_or(Missing("no command name (field 2) in the stat line"))?;
    // Fields 3, 4, … follow: field n is the (n - 3)th of them.
    let field = |n: usize| after_comm.split_ascii_whitespace().nth(n - 3);
    Ok(ProcStat {
        state: field(3)
            .and_then(|f| f.parse().ok())
            .ok_or(Missing("no state in field 3"))?,
        ppid: field(4)
            .and_then(|f| f.parse().ok())
            .ok_or(Missing("no parent pid in field 4"))?,
        pgrp: field(5)
            .and_then(|f| f.parse().ok())
            .ok_or(Missing("no process group in field 5"))?,
        start_time: field(22)
            .and_then(|f| f.parse().ok())
            .ok_or(Missing("no start time in field 22"))?,
    })
}

#[cfg(test)]
mod tests {
    use super::{ProcStat, parse};

    #[test]
    fn a_command_name_with_spaces_and_parentheses_is_skipped() {
        let stat = "4242 (evil ) 1 2 3 (x) S 1234 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 100";
        assert_eq!(
            parse(stat).ok(),
            Some(ProcStat {
                state: 'S',
                ppid: 1234,
                pgrp: 4242,
                start_time: 987654
            })
        );
    }

    #[test]
    fn a_short_line_names_the_missing_field() {
        let missing = |stat: &str| parse(stat).err().map(|m| m.0);
        assert_eq!(missing("1 (init) S 0 1"), Some("no start time in field 22"));
        assert_eq!(missing("1 (init) S 0"), Some("no process group in field 5"));
        assert_eq!(missing("1 (init) S"), Some("no parent pid in field 4"));
        assert_eq!(missing("1 (init)"), Some("no state in field 3"));
        assert_eq!(
            missing("no parenthesis"),
            Some("no command name (field 2) in the stat line")
        );
    }

    #[test]
    fn our_own_stat_is_readable() {
        let me = super::process_stat(std::process::id()).unwrap();
        assert_eq!(me.start_time, super::own_start_time().unwrap());
        assert_eq!(me.ppid, std::os::unix::process::parent_id());
        assert_eq!(
            super::start_time(std::process::id()).unwrap(),
            me.start_time
        );
    }

    #[test]
    fn a_pid_nobody_has_is_gone() {
        assert!(matches!(
            super::process_stat(i32::MAX as u32),
            Err(crate::Error::ProcessGone { .. })
        ));
    }
}
