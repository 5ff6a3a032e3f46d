//! Process ancestry from `/proc/<pid>/stat`: whether the pid a client names
//! is the client itself or one of its descendants.

/// Most parent links followed before giving up (a pid chain is never this deep).
const MAX_DEPTH: usize = 1024;

/// The parent pid of `pid` (field 4 of `/proc/<pid>/stat`), or `None` if there
/// is no such process.
pub(crate) fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_ppid(&stat)
}

/// Field 4 of a stat line. The command name (field 2) may hold spaces and
/// parentheses, so counting starts after its last `)`.
fn parse_ppid(stat: &str) -> Option<u32> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    // Fields 3 (state), 4 (ppid), …
    after_comm.split_ascii_whitespace().nth(1)?.parse().ok()
}

/// Whether `pid` is `ancestor` or a descendant of it, following the parent
/// links in `/proc`. The answer holds only while both processes live: the
/// caller pins `pid` with a pidfd before asking and checks it is alive after.
pub(crate) fn is_self_or_descendant(pid: u32, ancestor: u32) -> bool {
    let mut current = pid;
    for _ in 0..MAX_DEPTH {
        if current == ancestor {
            return true;
        }
        match parent_of(current) {
            Some(parent) if parent != 0 && parent != current => current = parent,
            _ => return false,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::{is_self_or_descendant, parse_ppid};

    #[test]
    fn a_command_name_with_spaces_and_parentheses_is_skipped() {
        assert_eq!(
            parse_ppid("4242 (evil ) 7 (x) S 1234 4242 4242 0"),
            Some(1234)
        );
        assert_eq!(parse_ppid("no parenthesis"), None);
    }

    #[test]
    fn we_are_our_own_and_a_child_of_our_parent() {
        let me = std::process::id();
        assert!(is_self_or_descendant(me, me));
        let parent = super::parent_of(me).unwrap();
        assert!(is_self_or_descendant(me, parent));
        assert!(!is_self_or_descendant(parent, me));
    }
}
