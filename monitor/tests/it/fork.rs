//! A monitor's handle copied into a forked child: the monitor process is
//! the parent's child, so the child's drop neither stops it nor waits for it.

use std::time::Duration;

use crate::common::helper;
use nodeipc_monitor::{MonitorConfig, RankState};
use nodeipc_monitor_host::SpawnOptions;
use nodeipc_testkit::{TempDir, Watchdog, fork_child};

#[test]
fn regression_a_monitor_handle_dropped_in_a_forked_child_leaves_the_monitor_running() {
    let _dog = Watchdog::new("monitor handle in a forked child", Duration::from_secs(60));
    let dir = TempDir::new("mon-fork");
    let options = SpawnOptions {
        program: Some(helper()),
        ready_timeout: Duration::from_secs(10),
        ..SpawnOptions::default()
    };
    let mut handle = Some(
        nodeipc_monitor_host::spawn_monitor_with(
            &MonitorConfig::default(),
            dir.join("rank.sock"),
            options,
        )
        .unwrap(),
    );
    let code = fork_child("monitor handle", Duration::from_secs(20), || {
        drop(handle.take());
        0
    });
    assert_eq!(code, 0);
    let mut handle = handle.unwrap();
    assert!(
        handle.try_wait().unwrap().is_none(),
        "the child's drop stopped the parent's monitor"
    );
    assert_eq!(handle.status().unwrap().state, RankState::Waiting);
    drop(handle);
    assert!(!dir.join("rank.sock").exists());
}
