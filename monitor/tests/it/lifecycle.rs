//! The socket files (where they may live, their mode, stale and live ones,
//! removal), orderly shutdown on each signal, and spawning a monitor both
//! ways.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common::{Served, config, helper, helper_command};
use nodeipc_fdpass::Pidfd;
use nodeipc_monitor::{
    ControlClient, Error, MonitorClient, MonitorConfig, MonitorServer, RankInfo, RankState,
    control_socket_path,
};
use nodeipc_monitor_host::SpawnOptions;
use nodeipc_testkit::{TempDir, Watchdog, is_root, skip, spawn_child};

const T: Duration = Duration::from_secs(10);

fn mode(path: &std::path::Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

#[test]
fn sockets_are_0600_and_removed_on_drop() {
    let dir = TempDir::new("mon-mode");
    let socket = dir.join("rank.sock");
    let server = MonitorServer::bind(&socket, MonitorConfig::default()).unwrap();
    assert_eq!(mode(&socket), 0o600);
    assert_eq!(mode(&control_socket_path(&socket)), 0o600);
    assert_eq!(server.control_path(), control_socket_path(&socket));
    drop(server);
    assert!(!socket.exists());
    assert!(!control_socket_path(&socket).exists());
}

#[test]
fn a_directory_others_can_write_is_refused_naming_owner_and_mode() {
    let dir = TempDir::new("mon-dirmode");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o770)).unwrap();
    match MonitorServer::bind(dir.join("rank.sock"), MonitorConfig::default()) {
        Err(Error::UnsafeDirectory { mode, owner, .. }) => {
            assert_eq!(mode, 0o770);
            assert_eq!(owner, rustix::process::geteuid().as_raw());
        }
        other => panic!("expected UnsafeDirectory, got {other:?}"),
    }
    // /tmp itself: world-writable (sticky or not, anyone could plant a file).
    let tmp =
        std::path::Path::new("/tmp").join(format!("nodeipc-test-{}.sock", std::process::id()));
    let error = MonitorServer::bind(&tmp, MonitorConfig::default()).unwrap_err();
    assert!(error.to_string().contains("mode 1777"), "{error}");
    assert!(!tmp.exists());
}

#[test]
fn a_directory_of_another_user_is_refused() {
    if !is_root()
        && skip(
            "a_directory_of_another_user_is_refused",
            "needs root to chown",
        )
    {
        return;
    }
    let dir = TempDir::new("mon-dirowner");
    std::os::unix::fs::chown(dir.path(), Some(nodeipc_testkit::NOBODY.0), None).unwrap();
    match MonitorServer::bind(dir.join("rank.sock"), MonitorConfig::default()) {
        Err(Error::UnsafeDirectory { owner, .. }) => assert_eq!(owner, nodeipc_testkit::NOBODY.0),
        other => panic!("expected UnsafeDirectory, got {other:?}"),
    }
}

#[test]
fn a_symlink_or_a_file_in_place_is_refused_and_left_alone() {
    let dir = TempDir::new("mon-symlink");
    let target = dir.join("target");
    std::fs::write(&target, b"keep").unwrap();
    let link = dir.join("rank.sock");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    assert!(matches!(
        MonitorServer::bind(&link, MonitorConfig::default()),
        Err(Error::SymlinkRefused { .. })
    ));
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert!(matches!(
        MonitorServer::bind(&target, MonitorConfig::default()),
        Err(Error::NotASocket { .. })
    ));
    assert_eq!(std::fs::read(&target).unwrap(), b"keep");
}

#[test]
fn a_stale_socket_is_replaced_and_a_live_one_is_an_error() {
    let dir = TempDir::new("mon-stale");
    let socket = dir.join("rank.sock");
    // A dead server's leftovers: bound, then closed, the file stays.
    drop(UnixListener::bind(&socket).unwrap());
    drop(UnixListener::bind(control_socket_path(&socket)).unwrap());
    let server = MonitorServer::bind(&socket, MonitorConfig::default()).unwrap();
    match MonitorServer::bind(&socket, MonitorConfig::default()) {
        Err(Error::AlreadyServing { path }) => assert_eq!(path, socket),
        other => panic!("expected AlreadyServing, got {other:?}"),
    }
    // The live server's files were not touched by the refused attempt.
    assert_eq!(mode(&socket), 0o600);
    drop(server);
    assert!(!socket.exists());
}

#[test]
fn a_socket_file_replaced_by_someone_else_is_not_removed() {
    let dir = TempDir::new("mon-replaced");
    let socket = dir.join("rank.sock");
    let server = MonitorServer::bind(&socket, MonitorConfig::default()).unwrap();
    std::fs::remove_file(&socket).unwrap();
    std::fs::write(&socket, b"not ours").unwrap();
    drop(server);
    assert_eq!(std::fs::read(&socket).unwrap(), b"not ours");
}

#[test]
fn a_path_too_long_for_a_socket_address_is_refused() {
    let dir = TempDir::new("mon-long");
    let long = dir.join(&"x".repeat(120));
    assert!(matches!(
        MonitorServer::bind(&long, MonitorConfig::default()),
        Err(Error::PathTooLong { max: 107, .. })
    ));
}

#[test]
fn each_shutdown_signal_stops_the_server_in_order() {
    let _dog = Watchdog::new("shutdown_signals", Duration::from_secs(120));
    // Every terminating signal, named in the log as `SIGTERM`, never as
    // `Signal("Signal::TERM")` (regression: the log printed the Debug form).
    let rt = libc::SIGRTMIN() + 2;
    for (signal, name) in [
        (libc::SIGTERM, "SIGTERM"),
        (libc::SIGINT, "SIGINT"),
        (libc::SIGUSR1, "SIGUSR1"),
        (libc::SIGUSR2, "SIGUSR2"),
        (libc::SIGHUP, "SIGHUP"),
        (libc::SIGQUIT, "SIGQUIT"),
        (libc::SIGALRM, "SIGALRM"),
        (rt, "SIGRTMIN+2"),
    ] {
        let mut served = Served::spawn("mon-signal", &config("{}"));
        let mut client = MonitorClient::connect(&served.socket, T).unwrap();
        client.init(&RankInfo::this_process(0, 0)).unwrap();
        client.start_section("save").unwrap();
        // Our own child, not yet reaped: its pid cannot have been reused.
        // SAFETY: kill(2) on our own unreaped child, with a valid signal.
        let sent = unsafe { libc::kill(served.monitor.pid() as i32, signal) };
        assert_eq!(sent, 0, "{name}");
        let start = Instant::now();
        let status = loop {
            if let Some(status) = served.monitor.try_wait().unwrap() {
                break status;
            }
            assert!(start.elapsed() < T, "still running after {name}");
            std::thread::sleep(Duration::from_millis(5));
        };
        assert_eq!(
            status.code(),
            Some(0),
            "{name}: {status:?}\n{}",
            served.log()
        );
        assert!(!served.socket.exists(), "{name} left the socket");
        assert!(!control_socket_path(&served.socket).exists());
        let log = served.log();
        assert!(log.contains(&format!("shutting down: {name}\n")), "{log}");
        assert!(
            log.contains("shutting down with sections still open: \"save\""),
            "{log}"
        );
        // The rank sees its connection closed.
        assert!(client.heartbeat().is_err());
    }
}

#[test]
fn spawn_monitor_re_executes_a_program_that_calls_run_if_server() {
    let _dog = Watchdog::new("spawn_re_exec", Duration::from_secs(60));
    let dir = TempDir::new("mon-reexec");
    let socket = dir.join("rank.sock");
    let mut launcher = spawn_child(
        helper_command()
            .arg("spawn")
            .arg("--socket")
            .arg(&socket)
            .arg("--config-json")
            .arg(r#"{"heartbeat_timeout_ms": 12345, "check_interval_ms": 100}"#)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped()),
    );
    let mut stdout = std::io::BufReader::new(launcher.child().stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
    let pid: u32 = line
        .strip_prefix("ready ")
        .unwrap_or_else(|| panic!("{line:?}"))
        .trim()
        .parse()
        .unwrap();
    let monitor = Pidfd::open(pid).unwrap();
    // The monitor got its configuration through the environment.
    let status = ControlClient::connect(&socket, T)
        .unwrap()
        .status()
        .unwrap();
    assert_eq!(status.state, RankState::Waiting);
    assert_eq!(status.timeouts.heartbeat_ms, Some(12345));
    // Closing the launcher's stdin makes it stop the monitor.
    drop(launcher.child().stdin.take());
    line.clear();
    std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
    assert_eq!(line.trim(), "stopped exit status: 0");
    assert!(monitor.wait_exit(T).unwrap());
    assert!(launcher.wait_timeout(T).success());
    assert!(!socket.exists() && !control_socket_path(&socket).exists());
}

#[test]
fn a_monitor_that_cannot_start_is_reported_with_its_reason() {
    let _dog = Watchdog::new("spawn_failure", Duration::from_secs(60));
    let dir = TempDir::new("mon-spawnfail");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let log = TempDir::new("mon-spawnfail-log");
    let options = SpawnOptions {
        program: Some(helper()),
        log_file: Some(log.join("monitor.log")),
        ..SpawnOptions::default()
    };
    let socket = dir.join("rank.sock");
    match nodeipc_monitor_host::spawn_monitor_with(&MonitorConfig::default(), &socket, options) {
        Err(nodeipc_monitor_host::Error::ServerExited { status, .. }) => {
            assert_eq!(status.code(), Some(1))
        }
        other => panic!("expected ServerExited, got {other:?}"),
    }
    let text = std::fs::read_to_string(log.join("monitor.log")).unwrap();
    assert!(text.contains("refusing socket directory"), "{text}");
    assert!(text.contains("mode 0777"), "{text}");
    // Its configuration file went with it.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    // An invalid configuration is refused before anything starts.
    let bad = MonitorConfig {
        check_interval: Duration::ZERO,
        ..MonitorConfig::default()
    };
    assert!(matches!(
        nodeipc_monitor_host::spawn_monitor(&bad, &socket),
        Err(nodeipc_monitor_host::Error::Config { .. })
    ));
}

#[test]
fn the_fast_path_region_is_a_sealed_memfd_and_leaves_nothing_in_dev_shm() {
    let _dog = Watchdog::new("fast_path_region", Duration::from_secs(60));
    let before = nodeipc_testkit::shm_leftovers("");
    let served = Served::spawn("mon-region", &config(r#"{"heartbeat_timeout_ms": 5000}"#));
    let mut client = MonitorClient::connect(&served.socket, T).unwrap();
    client
        .init_with_heartbeat_region(&RankInfo::this_process(0, 0))
        .unwrap();
    assert!(client.has_heartbeat_region());
    for _ in 0..1000 {
        client.heartbeat_fast().unwrap();
    }
    client.heartbeat().unwrap();
    let status = client.status().unwrap();
    assert_eq!(status.heartbeats, 1001);
    assert_eq!(status.state, RankState::Running);
    drop(client);
    drop(served);
    let after = nodeipc_testkit::shm_leftovers("");
    let new: Vec<_> = after.iter().filter(|n| !before.contains(n)).collect();
    assert!(new.is_empty(), "new under /dev/shm: {new:?}");

    // A server configured without it declines.
    let declining = Served::spawn("mon-noregion", &config(r#"{"heartbeat_region": false}"#));
    let mut client = MonitorClient::connect(&declining.socket, T).unwrap();
    client
        .init_with_heartbeat_region(&RankInfo::this_process(0, 0))
        .unwrap();
    assert!(!client.has_heartbeat_region());
    assert!(matches!(
        client.heartbeat_fast(),
        Err(Error::NoHeartbeatRegion)
    ));
    client.heartbeat().unwrap();
}

/// A monitor re-executed before `main` (the test helper's `.init_array`
/// entry) behaves as one a program's `main` starts: a write to a standard
/// error nobody reads is an error it ignores, not a death by `SIGPIPE`.
#[test]
fn regression_a_re_executed_monitor_survives_a_standard_error_nobody_reads() {
    let _dog = Watchdog::new("spawn_re_exec_sigpipe", Duration::from_secs(60));
    let dir = TempDir::new("mon-reexec-pipe");
    let socket = dir.join("rank.sock");
    let mut launcher = spawn_child(
        helper_command()
            .arg("spawn")
            .arg("--socket")
            .arg(&socket)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    // Nobody reads the launcher's standard error, which its monitor shares.
    drop(launcher.child().stderr.take());
    let mut stdout = std::io::BufReader::new(launcher.child().stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
    assert!(line.starts_with("ready "), "{line:?}");
    // A rank that registers and goes makes the monitor log; it still answers.
    let mut client = MonitorClient::connect(&socket, T).unwrap();
    client.init(&RankInfo::this_process(0, 0)).unwrap();
    drop(client);
    let mut control = ControlClient::connect(&socket, T).unwrap();
    assert!(control.status().is_ok());
    drop(control);
    drop(launcher.child().stdin.take());
    line.clear();
    std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
    assert_eq!(line.trim(), "stopped exit status: 0");
    assert!(launcher.wait_timeout(T).success());
}
