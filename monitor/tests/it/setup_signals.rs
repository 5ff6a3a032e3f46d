//! A shutdown signal that arrives while the monitor is still setting up
//! (reading its configuration, binding its sockets) is honoured: the
//! process ends within a bound and leaves no socket file behind, whatever
//! the moment. The signals are blocked before the sockets exist, and the
//! first turn of the loop reads one already pending.

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::helper;
use nodeipc_monitor::control_socket_path;
use nodeipc_testkit::{TempDir, Watchdog, spawn_child};

#[test]
fn a_shutdown_signal_during_set_up_ends_the_monitor_and_leaves_no_socket() {
    let _dog = Watchdog::new("setup_signal", Duration::from_secs(60));
    let dir = TempDir::new("mon-setup-signal");
    let config = dir.join("monitor.json");
    std::fs::write(&config, r#"{"check_interval_ms": 3600000}"#).unwrap();
    for delay_us in [0, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000] {
        let socket = dir.join(&format!("rank-{delay_us}.sock"));
        let mut monitor = spawn_child(
            Command::new(helper())
                .args(["monitor", "serve", "--socket"])
                .arg(&socket)
                .arg("--config")
                .arg(&config)
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        );
        std::thread::sleep(Duration::from_micros(delay_us));
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(monitor.id() as i32).unwrap(),
            rustix::process::Signal::TERM,
        )
        .unwrap();
        // Killed by it before any socket existed, or shut down in order:
        // never still running an hour-long check interval later.
        let status = monitor.wait_timeout(Duration::from_secs(5));
        assert!(
            status.success() || status.signal() == Some(libc::SIGTERM),
            "after {delay_us} µs: {status:?}"
        );
        assert!(
            !socket.exists() && !control_socket_path(&socket).exists(),
            "after {delay_us} µs: a socket file was left"
        );
    }
}
