//! Process start times from `/proc/<pid>/stat`: with the pid they name one
//! process for good, since a recycled pid comes with a later start time.
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

/// The start time of `pid` in clock ticks since boot (field 22 of
/// `/proc/<pid>/stat`).
///
/// # Errors
/// [`Error::ProcessGone`] when there is no such process (`ENOENT`, `ESRCH`);
/// [`Error::ProcessIo`] naming the pid, the file and the errno for any other
/// failure (`EMFILE`, say), or for a stat line without a start time.
pub(crate) fn start_time(pid: u32) -> Result<u64> {
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
    parse_start_time(&stat).ok_or_else(|| {
        Error::process_io(
            READ_STAT,
            pid,
            None,
            io::Error::new(io::ErrorKind::InvalidData, "no start time in field 22"),
        )
    })
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
        .map_err(|e| Error::process_io("read /proc/self/stat", me, None, e))
        .and_then(|stat| {
            parse_start_time(&stat).ok_or_else(|| {
                Error::process_io(
                    "read /proc/self/stat",
                    me,
                    None,
                    io::Error::new(io::ErrorKind::InvalidData, "no start time in field 22"),
                )
            })
        })?;
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

/// Field 22 of a stat line. The command name (field 2) may hold spaces and
/// parentheses, so counting starts after its last `)`.
fn parse_start_time(stat: &str) -> Option<u64> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    // Fields 3, 4, … follow; field 22 is the 20th of them.
    after_comm.split_ascii_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::parse_start_time;

    #[test]
    fn a_command_name_with_spaces_and_parentheses_is_skipped() {
        let stat = "4242 (evil ) 1 2 3 (x) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 100";
        assert_eq!(parse_start_time(stat), Some(987654));
    }

    #[test]
    fn a_short_line_is_none() {
        assert_eq!(parse_start_time("1 (init) S 0"), None);
        assert_eq!(parse_start_time("no parenthesis"), None);
    }

    #[test]
    fn our_own_start_time_is_readable() {
        assert!(super::start_time(std::process::id()).is_ok());
        assert_eq!(
            super::start_time(std::process::id()).unwrap(),
            super::own_start_time().unwrap()
        );
    }

    #[test]
    fn a_pid_nobody_has_is_gone() {
        assert!(matches!(
            super::start_time(i32::MAX as u32),
            Err(crate::Error::ProcessGone { .. })
        ));
    }
}
