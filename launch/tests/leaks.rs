//! A launch of several rounds leaves the process as it found it: no
//! descriptor, no thread, no child, no file. A binary of its own, not a
//! module of `tests/it/`: it counts this process's descriptors and threads,
//! so no other test may open descriptors or start threads meanwhile.

use std::ffi::OsString;
use std::time::Duration;

use nodeipc_launch::{LaunchOptions, launch};
use nodeipc_testkit::{TempDir, Watchdog, fd_count};

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

fn live_children() -> Vec<u32> {
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                let fields: Vec<&str> = stat
                    .rsplit_once(')')
                    .map(|(_, rest)| rest.split_whitespace().collect())
                    .unwrap_or_default();
                fields.get(1) == Some(&me.as_str())
            })
        })
        .collect()
}

#[test]
fn rounds_of_ranks_leave_no_descriptor_thread_child_or_file() {
    let _dog = Watchdog::new("launch leaks", Duration::from_secs(60));
    let dir = TempDir::new("launch-leaks");
    // Rank 0 fails on the first two rounds; each rank leaves a sleeping
    // child in its process group, which the stop must take down.
    let script = r#"sleep 30 & if [ "$RANK" = 0 ] && [ "$NODEIPC_RESTART_COUNT" -lt 2 ]; then exit 5; fi; kill $!"#;
    let options = LaunchOptions {
        max_restarts: 2,
        run_dir: Some(dir.path().to_owned()),
        stderr_events: false,
        stop_timeout: Duration::from_secs(2),
        ..LaunchOptions::new(4, ["sh", "-c", script].map(OsString::from).to_vec())
    };
    let (fds, tasks) = (fd_count(), threads());
    let outcome = launch(&options).unwrap();
    assert_eq!(outcome.exit_code, 0, "{}", outcome.summary);
    assert_eq!(outcome.restarts, 2);
    assert_eq!(fd_count(), fds, "descriptors left open");
    assert_eq!(threads(), tasks, "monitor threads left running");
    let left: Vec<String> = live_children()
        .iter()
        .map(|p| std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default())
        .collect();
    assert!(left.is_empty(), "children left: {left:?}");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "files left"
    );
}
