//! Nothing leaks: after many connections (with and without the heartbeat
//! region, refused ones, control ones) and a shutdown, the process holds the
//! descriptors it held before. Descriptor counts are per process: the test
//! runs alone in a child (this test binary again, `--exact`), so the tests
//! beside it in the binary cannot change them.

use std::time::Duration;

use crate::common::InProcess;
use nodeipc_monitor::{ControlClient, MonitorClient, MonitorConfig, RankInfo};
use nodeipc_testkit::{Watchdog, fd_count, spawn_child, test_path, this_test_in_a_child};

/// Set in the child that counts.
const CHILD: &str = "NODEIPC_MONITOR_TEST_LEAKS_CHILD";
const TEST: &str = "connections_and_shutdown_leave_no_descriptor_behind";

#[test]
fn connections_and_shutdown_leave_no_descriptor_behind() {
    let _dog = Watchdog::new("no_fd_leak", Duration::from_secs(120));
    if std::env::var_os(CHILD).is_none() {
        let out =
            spawn_child(this_test_in_a_child(&test_path(module_path!(), TEST)).env(CHILD, "1"))
                .output_timeout(Duration::from_secs(110));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "the child failed: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains("no descriptor leaked"),
            "the child did not count: {stdout}"
        );
        return;
    }
    // Warm up what allocates descriptors once (the log thread, say).
    drop(InProcess::start("mon-leak-warm", MonitorConfig::default()));
    let before = fd_count();
    let server = InProcess::start(
        "mon-leak",
        MonitorConfig {
            check_interval: Duration::from_millis(20),
            connection_wait: Duration::from_millis(50),
            ..MonitorConfig::default()
        },
    );
    let t = Duration::from_secs(10);
    for i in 0..30 {
        let mut client = MonitorClient::connect(&server.socket, t).unwrap();
        let me = RankInfo::this_process(i, 0);
        if i % 2 == 0 {
            client.init_with_heartbeat_region(&me).unwrap();
            client.heartbeat_fast().unwrap();
        } else {
            client.init(&me).unwrap();
        }
        client.start_section("step").unwrap();
        // A second client is held, then refused.
        let mut second = MonitorClient::connect(&server.socket, t).unwrap();
        assert!(second.init(&me).unwrap_err().is_refused());
        let mut control = ControlClient::connect(&server.socket, t).unwrap();
        control.status().unwrap();
        if i % 3 == 0 {
            control.close_connection().unwrap();
        }
    }
    server.finish();
    assert_eq!(fd_count(), before, "descriptors leaked");
    println!("no descriptor leaked");
}
