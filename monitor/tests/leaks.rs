//! Nothing leaks: after many connections (with and without the heartbeat
//! region, refused ones, control ones) and a shutdown, the process holds the
//! descriptors it held before. Alone in its binary: descriptor counts are
//! per process.

mod common;

use std::time::Duration;

use common::InProcess;
use nodeipc_monitor::{ControlClient, MonitorClient, MonitorConfig, RankInfo};
use nodeipc_testkit::{Watchdog, fd_count};

#[test]
fn connections_and_shutdown_leave_no_descriptor_behind() {
    let _dog = Watchdog::new("no_fd_leak", Duration::from_secs(120));
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
}
