//! Every C handle type in a forked child (tests/c/fork_handles.c): any use
//! is `NODEIPC_ERR_FORKED`, a free is `NODEIPC_OK` and prints nothing (no
//! panic, no backtrace), and the parent's objects live on — with another
//! parent thread in a gather (holding the coordinator's lock) at the fork.

use crate::common;

use std::process::{Command, Stdio};
use std::time::Duration;

use nodeipc_monitor::{MonitorConfig, MonitorServer};
use nodeipc_testkit::{TempDir, Watchdog, shm_leftovers, spawn_child, unique_name};

#[test]
fn regression_every_handle_in_a_forked_child_is_refused_but_freed() {
    let _dog = Watchdog::new("fork_handles", Duration::from_secs(120));
    let dir = TempDir::new("capi-fork");
    let Some(program) = common::compile("fork_handles.c", &dir) else {
        return;
    };
    let monitor_socket = dir.join("rank.sock");
    let server = MonitorServer::bind(&monitor_socket, MonitorConfig::default()).unwrap();
    let stop = server.stop_handle();
    let serving = std::thread::spawn(move || server.run());

    let prefix = unique_name("capi-fork");
    let mut command = Command::new(&program);
    command
        .arg(&prefix)
        .arg(dir.path())
        .arg(&monitor_socket)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = spawn_child(&mut command).output_timeout(Duration::from_secs(90));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    stop.stop();
    serving.join().unwrap().unwrap();
    assert!(out.status.success(), "{}\n{stdout}\n{stderr}", out.status);
    // Nothing on stderr: no panic message, no backtrace from the child.
    assert!(stderr.is_empty(), "{stderr}");
    assert!(stdout.contains("child: 0 of "), "{stdout}");
    let last = stdout.lines().last().unwrap_or_default();
    let checks: u32 = last
        .strip_prefix("0 of ")
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(checks >= 50, "{stdout}");
    assert!(
        shm_leftovers(&prefix).is_empty(),
        "{:?}",
        shm_leftovers(&prefix)
    );
}
