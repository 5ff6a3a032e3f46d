//! A peer of another uid on every socket: the rank monitor's rank and
//! control sockets refuse it even when the socket and its directory were
//! opened up by mistake (the handshake server's case is
//! `handshake_processes::a_client_of_another_uid_is_refused`), and a rank
//! refuses a monitor socket another uid bound where it expected its own. A
//! peer in a pid namespace the server cannot see (another container) is
//! served or refused with the reason, never the end of the server.
//! As root we drop to `nobody` in a child to be the stranger.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use nodeipc_monitor::{
    ControlClient, MonitorClient, MonitorConfig, MonitorServer, RankInfo, RankState,
};
use nodeipc_proto::monitor::{
    self as pb, ClientMessage, ControlRequest, ServerMessage, client_message, control_request,
    server_message,
};
use nodeipc_testkit::{NOBODY, TempDir, Watchdog, is_root, skip, spawn_child};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len() / 2)
        .map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

/// Sends `bytes` to `socket` as `nobody`; what came back.
fn raw_as_nobody(socket: &Path, bytes: &[u8]) -> Vec<u8> {
    let out = spawn_child(
        Command::new(env!("CARGO_BIN_EXE_hostile_peer"))
            .args(["raw", socket.to_str().unwrap(), &hex(bytes)])
            .uid(NOBODY.0)
            .gid(NOBODY.1)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )
    .output_timeout(Duration::from_secs(20));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let reply = stdout
        .trim()
        .strip_prefix("reply ")
        .unwrap_or_else(|| panic!("the stranger could not connect: {stdout}"));
    unhex(reply)
}

fn the_error_in(reply: &[u8]) -> String {
    let message: ServerMessage =
        nodeipc_proto::decode_frame(reply, nodeipc_monitor::MAX_FRAME).expect("one frame");
    match message.msg {
        Some(server_message::Msg::Error(pb::Error { cause, .. })) => cause,
        other => panic!("expected an Error frame, got {other:?}"),
    }
}

#[test]
fn a_peer_of_another_uid_is_refused_on_both_monitor_sockets_even_opened_up() {
    let _dog = Watchdog::new("monitor stranger", Duration::from_secs(60));
    if !is_root() {
        skip(
            "a_peer_of_another_uid_is_refused_on_both_monitor_sockets",
            "needs root",
        );
        return;
    }
    let dir = TempDir::new("stranger-monitor");
    std::fs::set_permissions(dir.path(), PermissionsExt::from_mode(0o700)).unwrap();
    let socket = dir.join("rank.sock");
    let mut server = MonitorServer::bind(&socket, MonitorConfig::default()).unwrap();
    server.on_log(|_, _| {});
    let control = server.control_path().to_owned();
    let stop = server.stop_handle();
    let serving = std::thread::spawn(move || server.run());
    // Opened up by mistake: anyone may reach both sockets now.
    std::fs::set_permissions(dir.path(), PermissionsExt::from_mode(0o711)).unwrap();
    for path in [&socket, &control] {
        std::fs::set_permissions(path, PermissionsExt::from_mode(0o777)).unwrap();
    }
    let init = ClientMessage {
        msg: Some(client_message::Msg::Init(pb::Init {
            rank: Some(pb::RankInfo::default()),
            ..pb::Init::default()
        })),
    };
    let cause = the_error_in(&raw_as_nobody(
        &socket,
        &nodeipc_proto::encode_frame_to_vec(&init).unwrap(),
    ));
    assert!(cause.contains(&NOBODY.0.to_string()), "{cause}");
    let status = ControlRequest {
        request: Some(control_request::Request::Status(pb::StatusQuery {})),
    };
    let cause = the_error_in(&raw_as_nobody(
        &control,
        &nodeipc_proto::encode_frame_to_vec(&status).unwrap(),
    ));
    assert!(cause.contains(&NOBODY.0.to_string()), "{cause}");
    // Nothing the stranger said took effect.
    let status = ControlClient::connect(&socket, Duration::from_secs(5))
        .unwrap()
        .status()
        .unwrap();
    assert_eq!(status.state, RankState::Waiting);
    assert!(status.rank.is_none());
    stop.stop();
    serving.join().unwrap().unwrap();
}

#[test]
fn regression_a_monitor_socket_bound_by_another_uid_is_refused_by_the_rank() {
    let _dog = Watchdog::new("stranger's monitor", Duration::from_secs(60));
    if !is_root() {
        skip(
            "regression_a_monitor_socket_bound_by_another_uid",
            "needs root",
        );
        return;
    }
    // A directory the stranger can write (the mistake), where our rank
    // expects its monitor.
    let dir = TempDir::new("stranger-serves");
    std::fs::set_permissions(dir.path(), PermissionsExt::from_mode(0o777)).unwrap();
    let socket = dir.join("rank.sock");
    let mut stranger = spawn_child(
        Command::new(env!("CARGO_BIN_EXE_hostile_peer"))
            .args(["serve", socket.to_str().unwrap()])
            .uid(NOBODY.0)
            .gid(NOBODY.1)
            .stdout(Stdio::piped()),
    );
    let mut line = String::new();
    BufReader::new(stranger.child().stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "listening");
    match MonitorClient::connect(&socket, Duration::from_secs(5)) {
        Err(nodeipc_monitor::Error::Fdpass(nodeipc_fdpass::Error::PeerRefused { uid, .. })) => {
            assert_eq!(uid, NOBODY.0)
        }
        Err(other) => panic!("expected PeerRefused, got {other}"),
        Ok(mut client) => panic!(
            "the rank took a stranger for its monitor (init said {:?})",
            client.init(&RankInfo::this_process(0, 0))
        ),
    }
    match ControlClient::connect(&socket, Duration::from_secs(1)) {
        // `rank.sock.control` does not exist: the stranger only bound one.
        Err(nodeipc_monitor::Error::ConnectTimeout { .. }) => {}
        other => panic!("expected ConnectTimeout, got {other:?}"),
    }
    stranger.kill();
}

#[test]
fn regression_a_rank_in_a_pid_namespace_the_monitor_cannot_see_is_refused_not_fatal() {
    let _dog = Watchdog::new("pid namespace", Duration::from_secs(60));
    if !pid_namespaces() {
        skip(
            "regression_a_rank_in_a_pid_namespace_the_monitor_cannot_see",
            "needs unshare(1) and the right to make a pid namespace",
        );
        return;
    }
    // The monitor runs as pid 1 of a namespace of its own (a container, say):
    // SO_PEERCRED gives it pid 0 for us, a process it cannot see or signal.
    // Reading that pid used to fail the accept, which stopped the monitor.
    let dir = TempDir::new("pidns-monitor");
    std::fs::set_permissions(dir.path(), PermissionsExt::from_mode(0o700)).unwrap();
    let socket = dir.join("rank.sock");
    let mut monitor = spawn_child(
        Command::new("unshare")
            .args(["--pid", "--fork", "--kill-child"])
            .arg(env!("CARGO_BIN_EXE_crash_node"))
            .arg("monitor")
            .arg(&socket)
            .stdout(Stdio::piped())
            .stderr(Stdio::null()),
    );
    let mut line = String::new();
    BufReader::new(monitor.child().stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "stage listening");
    let mut client = MonitorClient::connect(&socket, Duration::from_secs(5)).unwrap();
    let refused = client.init(&RankInfo::this_process(0, 0)).unwrap_err();
    let cause = refused.refusal_cause().unwrap_or_default().to_owned();
    assert!(cause.contains("pid namespace"), "{refused}");
    let status = ControlClient::connect(&socket, Duration::from_secs(5))
        .unwrap()
        .status()
        .unwrap();
    assert_eq!(status.state, RankState::Waiting);
    monitor.kill();
}

/// `unshare` can make a pid namespace here.
fn pid_namespaces() -> bool {
    Command::new("unshare")
        .args(["--pid", "--fork", "true"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn regression_a_worker_in_a_pid_namespace_the_server_cannot_see_logs_on() {
    let _dog = Watchdog::new("pid namespace handshake", Duration::from_secs(60));
    if !pid_namespaces() {
        skip(
            "regression_a_worker_in_a_pid_namespace_the_server_cannot_see_logs_on",
            "needs unshare(1) and the right to make a pid namespace",
        );
        return;
    }
    // A coordinator in a pid namespace of its own: we are pid 0 to it. Its
    // handshake server used to drop such a client without a word.
    let dir = TempDir::new("pidns-handshake");
    std::fs::set_permissions(dir.path(), PermissionsExt::from_mode(0o700)).unwrap();
    let group = nodeipc_testkit::unique_name("pidns");
    let mut coordinator = spawn_child(
        Command::new("unshare")
            .args(["--pid", "--fork", "--kill-child"])
            .arg(env!("CARGO_BIN_EXE_crash_node"))
            .args([
                "coordinator",
                dir.path().to_str().unwrap(),
                &group,
                "1",
                "1",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null()),
    );
    let mut line = String::new();
    BufReader::new(coordinator.child().stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "stage listening");
    let session = nodeipc_channel::connect(
        dir.join("logon.sock"),
        &nodeipc_channel::worker_logon(0),
        Duration::from_secs(5),
    )
    .expect("the logon is answered");
    assert_eq!(session.fds.len(), 2);
    drop(session);
    coordinator.kill();
    assert!(nodeipc_testkit::shm_leftovers(&group).is_empty());
}
