//! `nodeipc monitor serve` and `nodeipc monitor status` as other programs
//! drive them: JSON on stdout, one line on stderr on failure, an orderly
//! shutdown on SIGTERM that removes the socket files.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use nodeipc_fdpass::{Pidfd, Signal};
use nodeipc_monitor::{
    MonitorClient, MonitorConfig, MonitorStatus, RankInfo, RankState, control_socket_path,
};
use nodeipc_monitor_host::{SpawnOptions, StatusJson};
use nodeipc_testkit::{TempDir, Watchdog, spawn_child};

fn nodeipc(args: &[&str]) -> Output {
    spawn_child(
        Command::new(env!("CARGO_BIN_EXE_nodeipc"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )
    .output_timeout(Duration::from_secs(60))
}

#[test]
fn serve_answers_status_as_json_and_sigterm_removes_the_sockets() {
    let _dog = Watchdog::new("monitor_serve_status", Duration::from_secs(120));
    let dir = TempDir::new("cli-monitor");
    let socket = dir.join("rank.sock");
    let config = dir.join("monitor.json");
    std::fs::write(
        &config,
        r#"{"heartbeat_timeout_ms": 4321, "check_interval_ms": 100}"#,
    )
    .unwrap();
    let server = spawn_child(
        Command::new(env!("CARGO_BIN_EXE_nodeipc"))
            .args(["monitor", "serve", "--socket"])
            .arg(&socket)
            .arg("--config")
            .arg(&config)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    let path = socket.to_str().unwrap();
    let start = Instant::now();
    let out = loop {
        let out = nodeipc(&["monitor", "status", "--json", "--socket", path]);
        if out.status.success() {
            break out;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "{out:?}");
    };
    let status = MonitorStatus::from_json(std::str::from_utf8(&out.stdout).unwrap()).unwrap();
    assert_eq!(status.state, RankState::Waiting);
    assert_eq!(status.timeouts.heartbeat_ms, Some(4321));
    // A rank registers; the status shows it.
    let mut rank = MonitorClient::connect(&socket, Duration::from_secs(10)).unwrap();
    rank.init(&RankInfo::this_process(2, 0)).unwrap();
    rank.heartbeat().unwrap();
    let out = nodeipc(&["monitor", "status", "--json", "--socket", path]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("\"state\": \"running\""), "{text}");
    assert_eq!(MonitorStatus::from_json(&text).unwrap().heartbeats, 1);
    // Without --json: labelled lines, times in words.
    let out = nodeipc(&["monitor", "status", "--socket", path]);
    assert!(out.status.success(), "{out:?}");
    let view = String::from_utf8(out.stdout).unwrap();
    for line in [
        format!("monitor     {path}"),
        "state       running".to_owned(),
        format!("rank        global 2, local 0, pid {}", std::process::id()),
        "heartbeats  1, the last ".to_owned(),
        "heartbeat 4.3 s".to_owned(),
        "on timeout  SIG".to_owned(),
    ] {
        assert!(view.contains(&line), "{line:?} missing from:\n{view}");
    }
    assert!(!view.contains('{') && !view.contains("_ms"), "{view}");
    drop(rank);
    // SIGTERM: orderly shutdown, exit 0, files gone.
    Pidfd::open(server.id())
        .unwrap()
        .send_signal(Signal::TERM)
        .unwrap();
    let out = server.output_timeout(Duration::from_secs(30));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("shutting down"), "{stderr}");
    assert!(!socket.exists() && !control_socket_path(&socket).exists());
}

#[test]
fn status_without_a_monitor_is_one_line_on_stderr() {
    let dir = TempDir::new("cli-monitor-none");
    let socket = dir.join("nobody.sock");
    let out = nodeipc(&[
        "monitor",
        "status",
        "--socket",
        socket.to_str().unwrap(),
        "--timeout-ms",
        "100",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr:?}");
    assert!(
        stderr.contains(&format!("no monitor at {}", socket.display())),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn serve_with_a_bad_config_fails_with_one_line() {
    let dir = TempDir::new("cli-monitor-badconf");
    let config = dir.join("bad.json");
    std::fs::write(&config, r#"{"termination_signal": "SIGSTOP"}"#).unwrap();
    let socket = dir.join("rank.sock");
    let out = nodeipc(&[
        "monitor",
        "serve",
        "--socket",
        socket.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr:?}");
    assert!(stderr.contains("SIGSTOP"), "{stderr}");
    assert!(!socket.exists());
}

#[test]
fn spawn_monitor_runs_the_cli_as_its_program() {
    let _dog = Watchdog::new("spawn_cli", Duration::from_secs(60));
    let dir = TempDir::new("cli-monitor-spawn");
    let socket = dir.join("rank.sock");
    let options = SpawnOptions {
        program: Some(env!("CARGO_BIN_EXE_nodeipc").into()),
        log_file: Some(dir.join("monitor.log")),
        ..SpawnOptions::default()
    };
    let config = MonitorConfig {
        kill_after: Some(Duration::from_millis(750)),
        termination_signal: Signal::TERM,
        ..MonitorConfig::default()
    };
    let monitor = nodeipc_monitor_host::spawn_monitor_with(&config, &socket, options).unwrap();
    let status = monitor.status().unwrap();
    assert_eq!(status.kill_after_ms, Some(750));
    assert_eq!(status.termination_signal, Signal::TERM.as_raw());
    let exit = monitor.stop().unwrap();
    assert!(exit.success(), "{exit:?}");
    assert!(!socket.exists());
    // The configuration file it was given is gone; only the log remains.
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["monitor.log"]);
}

#[test]
fn the_human_status_escapes_what_a_rank_chose_so_it_cannot_forge_a_line() {
    let _dog = Watchdog::new("monitor_status_forged", Duration::from_secs(60));
    let dir = TempDir::new("cli-monitor-forge");
    let socket = dir.join("rank.sock");
    let server = spawn_child(
        Command::new(env!("CARGO_BIN_EXE_nodeipc"))
            .args(["monitor", "serve", "--socket"])
            .arg(&socket)
            .stdout(Stdio::null())
            .stderr(Stdio::piped()),
    );
    let mut rank = MonitorClient::connect(&socket, Duration::from_secs(20)).unwrap();
    let mut me = RankInfo::this_process(0, 0);
    me.host = "node\nstate       terminated".to_owned();
    rank.init(&me).unwrap();
    rank.heartbeat().unwrap();
    let out = nodeipc(&["monitor", "status", "--socket", socket.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    let view = String::from_utf8(out.stdout).unwrap();
    let states: Vec<&str> = view.lines().filter(|l| l.starts_with("state")).collect();
    assert_eq!(states, ["state       running"], "{view}");
    assert!(view.contains(r"on node\nstate       terminated"), "{view}");
    drop(rank);
    Pidfd::open(server.id())
        .unwrap()
        .send_signal(Signal::TERM)
        .unwrap();
    assert!(
        server
            .output_timeout(Duration::from_secs(30))
            .status
            .success()
    );
}
