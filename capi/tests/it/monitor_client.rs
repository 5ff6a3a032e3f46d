//! Monitor clients written in C (tests/c/monitor_client.c) and C++
//! (monitor_client.cpp, through nodeipc::MonitorClient): each registers,
//! heartbeats over the socket and the shared-memory fast path, opens and
//! closes sections, reads its status, then goes silent, and the monitor
//! kills it when the heartbeat timeout runs out.

use crate::common;

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nodeipc_monitor::{MonitorConfig, MonitorServer, Timeouts};
use nodeipc_testkit::{TempDir, Watchdog, spawn_child};

/// Runs `source`'s program against a monitor with a 300 ms heartbeat
/// timeout; returns its first line, once it has been killed for silence.
fn killed_for_silence(source: &str) -> Option<String> {
    let dir = TempDir::new("capi-monitor");
    let program = common::compile(source, &dir)?;
    let socket = dir.join("rank.sock");
    let config = MonitorConfig {
        timeouts: Timeouts {
            heartbeat: Some(Duration::from_millis(300)),
            ..Timeouts::default()
        },
        check_interval: Duration::from_millis(50),
        ..MonitorConfig::default()
    };
    let server = MonitorServer::bind(&socket, config).expect("bind the monitor");
    let stop = server.stop_handle();
    let serving = std::thread::spawn(move || server.run());

    let mut command = Command::new(&program);
    command.arg(&socket).stdout(Stdio::piped());
    let mut rank = spawn_child(&mut command);
    let mut lines = BufReader::new(rank.child().stdout.take().expect("stdout")).lines();
    let report = lines.next().expect("a status line").expect("read");
    assert_eq!(
        lines.next().expect("silent").expect("read"),
        "silent",
        "{report}"
    );
    let since = Instant::now();
    let status = rank.wait_timeout(Duration::from_secs(20));
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
    let waited = since.elapsed();
    assert!(
        waited < Duration::from_secs(3),
        "killed {waited:?} after going silent; timeout 300 ms"
    );
    stop.stop();
    serving.join().expect("server thread").expect("server run");
    Some(report)
}

#[test]
fn c_monitor_client_is_killed_for_silence() {
    let _dog = Watchdog::new(
        "c_monitor_client_is_killed_for_silence",
        Duration::from_secs(60),
    );
    let Some(report) = killed_for_silence("monitor_client.c") else {
        return;
    };
    // RUNNING; 1 socket + 3 shared-memory beats; the JSON did not fit 8
    // bytes and then did, NUL-terminated.
    let json_len = report
        .split("json_len ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .unwrap_or("?");
    assert_eq!(
        report,
        format!(
            "state 2 heartbeats 4 open 0 small NODEIPC_ERR_TOO_LARGE json_len {json_len} strlen {json_len} running 1"
        )
    );
}

#[test]
fn cpp_monitor_client_is_killed_for_silence() {
    let _dog = Watchdog::new(
        "cpp_monitor_client_is_killed_for_silence",
        Duration::from_secs(60),
    );
    let Some(report) = killed_for_silence("monitor_client.cpp") else {
        return;
    };
    assert_eq!(report, "state 2 heartbeats 4 open 0 refused 1 running 1");
}
