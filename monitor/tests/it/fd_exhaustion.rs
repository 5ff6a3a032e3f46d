//! A monitor out of descriptors refuses `Init` for that reason, naming the
//! pid, the file and the errno, never as "process exited during
//! registration": a failure to read `/proc` is not a death.
//!
//! The server runs on a thread of a child (this test binary again) whose
//! descriptor table is filled after the client has connected, so the other
//! tests keep their descriptors.

use std::time::{Duration, Instant};

use crate::common::InProcess;
use nodeipc_monitor::{MonitorClient, MonitorConfig, RankInfo};
use nodeipc_testkit::{FullFdTable, Watchdog, spawn_child};
use rustix::io::Errno;

/// Set in the child: how many descriptor slots to leave free.
const CHILD: &str = "NODEIPC_MONITOR_TEST_FD_EXHAUSTION_CHILD";
const TEST: &str = "regression_init_out_of_descriptors_is_refused_as_such_not_as_an_exit";

fn child(free: usize) {
    println!(); // our lines start after the harness's "test … ..."
    let served = InProcess::start("mon-emfile", MonitorConfig::default());
    let rank = RankInfo::this_process(0, 0);
    let mut client = MonitorClient::connect(&served.socket, Duration::from_secs(10)).unwrap();
    // The server reads our start time when it accepts: let it, first.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !served.log_text().contains("rank connection from pid") {
        assert!(Instant::now() < deadline, "never accepted");
        std::thread::sleep(Duration::from_millis(5));
    }
    let table = FullFdTable::fill(free);
    let refused = client.init(&rank);
    drop(table);
    match refused {
        Ok(_) => println!("registered"),
        Err(e) => println!("refused: {e}"),
    }
    drop(client);
    // With descriptors back, the same process registers.
    let mut client = MonitorClient::connect(&served.socket, Duration::from_secs(10)).unwrap();
    client.init(&rank).unwrap();
    println!("registered after");
    drop(client);
    served.finish();
}

#[test]
fn regression_init_out_of_descriptors_is_refused_as_such_not_as_an_exit() {
    if let Some(free) = std::env::var(CHILD).ok().and_then(|v| v.parse().ok()) {
        return child(free);
    }
    let _dog = Watchdog::new(TEST, Duration::from_secs(60));
    let emfile = std::io::Error::from_raw_os_error(Errno::MFILE.raw_os_error()).to_string();
    // No free slot: the connecting process's start time cannot be read.
    // One: the pidfd opens, the rank's start time cannot be read.
    for free in [0, 1] {
        let child = spawn_child(
            nodeipc_testkit::this_test_in_a_child(&nodeipc_testkit::test_path(
                module_path!(),
                TEST,
            ))
            .env(CHILD, free.to_string()),
        );
        let pid = child.id();
        let out = child.output_timeout(Duration::from_secs(30));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let context = format!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        assert!(
            out.status.success(),
            "{free} free: the child failed: {context}"
        );
        let refusal = stdout
            .lines()
            .find(|l| l.starts_with("refused: "))
            .unwrap_or_else(|| panic!("{free} free: not refused: {context}"));
        assert!(
            refusal.contains(&format!("cannot check the connecting process (pid {pid})"))
                && refusal.contains(&format!("/proc/<pid>/stat failed for process {pid}"))
                && refusal.contains(&emfile),
            "{free} free: {refusal}"
        );
        assert!(!refusal.contains("exited"), "{free} free: {refusal}");
        assert!(stdout.contains("registered after"), "{context}");
    }
}
