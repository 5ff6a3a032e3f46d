//! `nodeipc monitor status` and `serve` against monitors that do not answer
//! and sockets that are taken: every wait bounded, a timeout exits 3 with
//! one line, a taken path exits 1 at once, extreme numbers never panic.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use nodeipc_fdpass::{Pidfd, Signal};
use nodeipc_monitor::{ControlClient, MonitorClient, RankInfo, control_socket_path};
use nodeipc_testkit::{
    ChildGuard, TempDir, Watchdog, fill_backlog, full_backlog_listener, spawn_child,
};

fn nodeipc(args: &[&str]) -> Output {
    spawn_child(
        Command::new(env!("CARGO_BIN_EXE_nodeipc"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )
    .output_timeout(Duration::from_secs(30))
}

fn private_dir(tag: &str) -> TempDir {
    let dir = TempDir::new(tag);
    std::fs::set_permissions(dir.path(), PermissionsExt::from_mode(0o700)).unwrap();
    dir
}

fn status(socket: &Path, timeout_ms: &str) -> Output {
    nodeipc(&[
        "monitor",
        "status",
        "--socket",
        socket.to_str().unwrap(),
        "--timeout-ms",
        timeout_ms,
    ])
}

fn signal(pid: u32, signal: Signal) {
    Pidfd::open(pid).unwrap().send_signal(signal).unwrap();
}

/// `nodeipc monitor serve` on `socket`, once it answers.
fn serve(socket: &Path, config: Option<&Path>) -> ChildGuard {
    let mut command = Command::new(env!("CARGO_BIN_EXE_nodeipc"));
    command
        .args(["monitor", "serve", "--socket"])
        .arg(socket)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(config) = config {
        command.arg("--config").arg(config);
    }
    let server = spawn_child(&mut command);
    let start = Instant::now();
    while ControlClient::connect(socket, Duration::from_millis(100))
        .and_then(|mut c| c.status())
        .is_err()
    {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "serve never answered"
        );
    }
    server
}

/// Stops `server` with SIGTERM (resuming it first) and checks it ends in order.
fn stop(server: ChildGuard) {
    signal(server.id(), Signal::CONT);
    signal(server.id(), Signal::TERM);
    let out = server.output_timeout(Duration::from_secs(20));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn one_line(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(stderr.lines().count(), 1, "{stderr:?}");
    assert!(!stderr.contains("os error 11") && !stderr.contains("panicked"));
    stderr
}

#[test]
fn regression_status_of_a_stopped_monitor_with_a_full_backlog_exits_3_in_time() {
    let _dog = Watchdog::new("status_full_backlog", Duration::from_secs(60));
    let dir = private_dir("cli-mon-full");
    let socket = dir.join("rank.sock");
    let server = serve(&socket, None);
    signal(server.id(), Signal::STOP);
    let held = fill_backlog(&control_socket_path(&socket));
    let start = Instant::now();
    let out = status(&socket, "300");
    let took = start.elapsed();
    let stderr = one_line(&out);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(took < Duration::from_secs(3), "took {took:?}");
    assert!(stderr.contains("backlog is full"), "{stderr}");
    // The wait in words ("300 ms"), not Rust's debug form ("300.41ms").
    let waited = stderr
        .split(" within ")
        .nth(1)
        .and_then(|rest| rest.split(':').next())
        .unwrap();
    let (ms, unit) = waited.split_once(' ').unwrap();
    assert!(unit == "ms" && ms.parse::<u64>().is_ok(), "{stderr}");
    assert!(stderr.contains(&*socket.to_string_lossy()), "{stderr}");
    drop(held);
    stop(server);
}

#[test]
fn regression_status_of_a_stopped_monitor_is_a_timeout_not_eagain() {
    let _dog = Watchdog::new("status_stopped", Duration::from_secs(60));
    let dir = private_dir("cli-mon-stopped");
    let socket = dir.join("rank.sock");
    let server = serve(&socket, None);
    signal(server.id(), Signal::STOP);
    let out = status(&socket, "200");
    let stderr = one_line(&out);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("waiting for the reply to the status query timed out"),
        "{stderr}"
    );
    stop(server);
}

#[test]
fn regression_status_timeout_0_is_refused_in_words_and_u64_max_works() {
    let _dog = Watchdog::new("status_extremes", Duration::from_secs(60));
    let dir = private_dir("cli-mon-extremes");
    let socket = dir.join("rank.sock");
    let out = status(&socket, "0");
    let stderr = one_line(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--timeout-ms") && stderr.contains("at least 1"),
        "{stderr}"
    );
    let out = status(&socket, "18446744073709551616");
    assert_eq!(out.status.code(), Some(2), "{}", one_line(&out));
    let server = serve(&socket, None);
    let out = status(&socket, &u64::MAX.to_string());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let view = String::from_utf8_lossy(&out.stdout);
    assert!(view.contains("\nstate       waiting"), "{view}");
    stop(server);
}

#[test]
fn serve_with_u64_max_milliseconds_in_its_config_keeps_serving() {
    let _dog = Watchdog::new("serve_huge_wait", Duration::from_secs(60));
    let dir = private_dir("cli-mon-huge");
    let socket = dir.join("rank.sock");
    let config = dir.join("monitor.json");
    // Connection deadlines are capped at an hour (MAX_CONNECTION_DEADLINE):
    // beyond it the file is refused in words, before anything is bound.
    std::fs::write(
        &config,
        format!(r#"{{"connection_wait_ms": {}}}"#, u64::MAX),
    )
    .unwrap();
    let out = nodeipc(&[
        "monitor",
        "serve",
        "--socket",
        socket.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
    ]);
    let stderr = one_line(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("connection wait"), "{stderr}");
    assert!(!socket.exists());
    std::fs::write(
        &config,
        format!(
            r#"{{"connection_wait_ms": 3600000, "heartbeat_timeout_ms": {max}, "kill_after_ms": {max}}}"#,
            max = u64::MAX
        ),
    )
    .unwrap();
    let mut server = serve(&socket, Some(&config));
    let mut first = MonitorClient::connect(&socket, Duration::from_secs(10)).unwrap();
    first.init(&RankInfo::this_process(0, 0)).unwrap();
    // A second client waits for the rank slot: its deadline is the
    // connection wait added to the clock.
    let _second = MonitorClient::connect(&socket, Duration::from_secs(10)).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    first.heartbeat().unwrap();
    assert!(
        server.child().try_wait().unwrap().is_none(),
        "the monitor died"
    );
    stop(server);
}

#[test]
fn regression_serve_where_a_live_server_has_a_full_backlog_exits_at_once() {
    let _dog = Watchdog::new("serve_taken", Duration::from_secs(60));
    let dir = private_dir("cli-mon-taken");
    let socket = dir.join("rank.sock");
    let (_listener, _held) = full_backlog_listener(&socket);
    let start = Instant::now();
    let out = nodeipc(&["monitor", "serve", "--socket", socket.to_str().unwrap()]);
    let stderr = one_line(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    // At once, not blocked on the live server's backlog (room for a debug
    // binary's start on a loaded machine).
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    assert!(stderr.contains("already serving"), "{stderr}");
    assert!(socket.exists(), "the live server's socket was removed");
}

#[test]
fn regression_sigterm_during_serve_set_up_ends_it_promptly() {
    let _dog = Watchdog::new("serve_sigterm_setup", Duration::from_secs(60));
    let dir = private_dir("cli-mon-setup");
    let socket: PathBuf = dir.join("rank.sock");
    let (_listener, _held) = full_backlog_listener(&socket);
    let server = spawn_child(
        Command::new(env!("CARGO_BIN_EXE_nodeipc"))
            .args(["monitor", "serve", "--socket"])
            .arg(&socket)
            .stdout(Stdio::null())
            .stderr(Stdio::piped()),
    );
    // Set-up is where it blocked: SIGTERM is blocked from its start.
    std::thread::sleep(Duration::from_millis(200));
    let _ = Pidfd::open(server.id()).and_then(|p| p.send_signal(Signal::TERM));
    let start = Instant::now();
    let out = server.output_timeout(Duration::from_secs(20));
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "still running {:?} after SIGTERM",
        start.elapsed()
    );
    assert!(!out.status.success());
    assert!(socket.exists(), "the live server's socket was removed");
}

#[test]
fn status_with_no_monitor_there_says_so_at_once_exit_1() {
    let _dog = Watchdog::new("status_no_monitor", Duration::from_secs(60));
    let dir = private_dir("cli-mon-none");
    let socket = dir.join("rank.sock");
    // No socket at all, then a socket file nobody listens on (a monitor
    // killed with SIGKILL leaves one): neither waits out the 20 s.
    for stale in [false, true] {
        if stale {
            drop(std::os::unix::net::UnixListener::bind(control_socket_path(&socket)).unwrap());
        }
        for json in [false, true] {
            let mut args = vec!["monitor", "status", "--socket", socket.to_str().unwrap()];
            args.extend(["--timeout-ms", "20000"]);
            if json {
                args.push("--json");
            }
            let start = Instant::now();
            let out = nodeipc(&args);
            let took = start.elapsed();
            let stderr = one_line(&out);
            assert_eq!(out.status.code(), Some(1), "{stderr}");
            assert!(took < Duration::from_secs(3), "took {took:?}: {stderr}");
            assert!(
                stderr.contains(&format!("no monitor at {}", socket.display())),
                "{stderr}"
            );
            let why = if stale {
                "ECONNREFUSED"
            } else {
                "does not exist"
            };
            assert!(stderr.contains(why), "{stderr}");
            assert!(out.stdout.is_empty());
        }
    }
}
