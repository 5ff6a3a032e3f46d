//! Process start times from `/proc/<pid>/stat`: with the pid they name one
//! process for good, since a recycled pid comes with a later start time.

use std::sync::OnceLock;

/// The start time of `pid` in clock ticks since boot (field 22 of
/// `/proc/<pid>/stat`), or `None` if there is no such process.
pub(crate) fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_start_time(&stat)
}

/// This process's start time, read once.
pub(crate) fn own_start_time() -> u64 {
    static OWN: OnceLock<u64> = OnceLock::new();
    *OWN.get_or_init(|| {
        std::fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|s| parse_start_time(&s))
            .expect("/proc/self/stat holds a start time")
    })
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
        assert!(super::start_time(std::process::id()).is_some());
        assert_eq!(
            super::start_time(std::process::id()),
            Some(super::own_start_time())
        );
    }
}
