//! Process ancestry from `/proc/<pid>/stat` (read by
//! `nodeipc_fdpass::process_stat`): whether the pid a client names is the
//! client itself or one of its descendants.
//!
//! Only the kernel saying there is no such process (`ENOENT`, `ESRCH`) means
//! a process is gone; any other failure to read (`EMFILE`, say) is returned
//! as that failure, naming the pid, the file and the errno.

/// Most parent links followed before giving up (a pid chain is never this deep).
const MAX_DEPTH: usize = 1024;

/// What reading a process's parent found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Parent {
    /// Its parent pid (0 for a process whose parent we cannot see).
    Pid(u32),
    /// The kernel has no such process (`ENOENT`, `ESRCH`).
    Gone,
}

/// The parent pid of `pid`, read by fdpass's reader of `/proc/<pid>/stat`.
///
/// # Errors
/// A sentence naming the pid, the file and the errno when the file cannot be
/// read for a reason other than the process being gone, or holds no parent.
pub(crate) fn parent_of(pid: u32) -> Result<Parent, String> {
    match nodeipc_fdpass::process_stat(pid) {
        Ok(stat) => Ok(Parent::Pid(stat.ppid)),
        Err(nodeipc_fdpass::Error::ProcessGone { .. }) => Ok(Parent::Gone),
        Err(e) => Err(e.to_string()),
    }
}

/// Whether `pid` is `ancestor` or a descendant of it, following the parent
/// links in `/proc`. The answer holds only while both processes live: the
/// caller pins `pid` with a pidfd before asking and checks it is alive after.
/// A link that vanished meanwhile ends the chain (`false`).
///
/// # Errors
/// As [`parent_of`]: a failure to read is not an answer.
pub(crate) fn is_self_or_descendant(pid: u32, ancestor: u32) -> Result<bool, String> {
    let mut current = pid;
    for _ in 0..MAX_DEPTH {
        if current == ancestor {
            return Ok(true);
        }
        match parent_of(current)? {
            Parent::Pid(parent) if parent != 0 && parent != current => current = parent,
            _ => return Ok(false),
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::{Parent, is_self_or_descendant};

    #[test]
    fn we_are_our_own_and_a_child_of_our_parent() {
        let me = std::process::id();
        assert_eq!(is_self_or_descendant(me, me), Ok(true));
        let Ok(Parent::Pid(parent)) = super::parent_of(me) else {
            panic!("no parent");
        };
        assert_eq!(is_self_or_descendant(me, parent), Ok(true));
        assert_eq!(is_self_or_descendant(parent, me), Ok(false));
    }

    #[test]
    fn a_pid_nobody_has_is_gone() {
        assert_eq!(super::parent_of(i32::MAX as u32), Ok(Parent::Gone));
    }
}
