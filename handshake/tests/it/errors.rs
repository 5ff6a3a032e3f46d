//! Each error of the handshake, clear and naming what was wrong.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::time::Duration;

use nodeipc_handshake::{
    Error, FdKind, HandshakeOptions, HandshakeServer, Logon, Offer, PROTOCOL_VERSION, PassedFd,
    logon,
};
use nodeipc_proto::handshake::{Accept, LogonReply, logon_reply};
use nodeipc_testkit::{TempDir, Watchdog};

fn pipe_fd() -> OwnedFd {
    OwnedFd::from(std::io::pipe().expect("pipe").0)
}

/// A server that reads one logon and then does `then` with the stream: it
/// speaks the protocol as badly as each test needs.
fn fake_server(
    dir: &TempDir,
    then: impl FnOnce(UnixStream) + Send + 'static,
) -> (PathBuf, std::thread::JoinHandle<()>) {
    let path = dir.join("fake.sock");
    let listener = UnixListener::bind(&path).expect("bind");
    let thread = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().expect("accept");
        let mut scratch = Vec::new();
        nodeipc_proto::read_frame::<Logon>(&mut stream, 4096, &mut scratch).expect("logon");
        then(stream);
    });
    (path, thread)
}

/// An accept frame describing `n` pipes.
fn accept_frame(n: usize) -> Vec<u8> {
    let reply = LogonReply {
        reply: Some(logon_reply::Reply::Accept(Accept {
            protocol_version: PROTOCOL_VERSION,
            fds: (0..n)
                .map(|i| PassedFd {
                    kind: FdKind::Other as i32,
                    size: 0,
                    role: format!("fd.{i}"),
                })
                .collect(),
            ..Accept::default()
        })),
    };
    nodeipc_proto::encode_frame_to_vec(&reply).expect("encode")
}

fn send(stream: &UnixStream, bytes: &[u8], fds: &[OwnedFd]) {
    let fds: Vec<_> = fds.iter().map(AsFd::as_fd).collect();
    nodeipc_fdpass::send_fds(stream, bytes, &fds).expect("send");
}

fn handshake_reason(result: nodeipc_handshake::Result<impl std::fmt::Debug>) -> String {
    match result {
        Err(Error::Handshake { reason, .. }) => reason,
        other => panic!("expected a handshake error, got {other:?}"),
    }
}

fn timeout_op(result: nodeipc_handshake::Result<impl std::fmt::Debug>) -> (String, Duration) {
    match result {
        Err(Error::Timeout { op, waited, .. }) => (op, waited),
        other => panic!("expected a timeout, got {other:?}"),
    }
}

const QUICK: Duration = Duration::from_millis(300);

#[test]
fn a_logon_of_another_protocol_version_is_rejected_naming_both() {
    let _dog = Watchdog::new("version mismatch", Duration::from_secs(30));
    let dir = TempDir::new("hs-version");
    let server = HandshakeServer::bind(
        dir.join("logon.sock"),
        HandshakeOptions::default(),
        |_, _| Ok(Offer::new()),
    )
    .unwrap();
    let mut old = logon(&[], Vec::new());
    old.protocol_version = 7;
    match nodeipc_handshake::connect(server.path(), &old, Duration::from_secs(5)) {
        Err(Error::Rejected { code, reason }) => {
            assert_eq!(code, "REJECT_CODE_VERSION_MISMATCH");
            assert!(
                reason.contains("version 7") && reason.contains("server 1"),
                "{reason}"
            );
        }
        other => panic!("{other:?}"),
    }
    // And a server of another version is refused by the client.
    let (path, thread) = fake_server(&dir, |stream| {
        let reply = LogonReply {
            reply: Some(logon_reply::Reply::Accept(Accept {
                protocol_version: 9,
                ..Accept::default()
            })),
        };
        send(
            &stream,
            &nodeipc_proto::encode_frame_to_vec(&reply).unwrap(),
            &[],
        );
    });
    let reason = handshake_reason(nodeipc_handshake::connect(
        &path,
        &logon(&[], Vec::new()),
        Duration::from_secs(5),
    ));
    assert_eq!(reason, "the server speaks protocol version 9, we speak 1");
    thread.join().unwrap();
}

#[test]
fn each_step_of_the_handshake_times_out_naming_the_step() {
    let _dog = Watchdog::new("timeouts", Duration::from_secs(30));
    let dir = TempDir::new("hs-timeouts");
    // Nobody listening.
    let (op, waited) = timeout_op(nodeipc_handshake::connect(
        dir.join("nobody.sock"),
        &logon(&[], Vec::new()),
        QUICK,
    ));
    assert!(op.starts_with("connecting"), "{op}");
    assert!(waited >= QUICK && waited < QUICK * 10, "{waited:?}");

    // A server that reads the logon and never answers.
    let (release, held) = std::sync::mpsc::channel::<()>();
    let (path, thread) = fake_server(&dir, move |_stream| {
        let _ = held.recv_timeout(Duration::from_secs(10));
    });
    let (op, _) = timeout_op(nodeipc_handshake::connect(
        &path,
        &logon(&[], Vec::new()),
        QUICK,
    ));
    assert_eq!(op, "waiting for the logon reply");
    release.send(()).unwrap();
    thread.join().unwrap();
    std::fs::remove_file(&path).unwrap();

    // A server that sends the accept and its first batch, but not the second.
    let (release, held) = std::sync::mpsc::channel::<()>();
    let (path, thread) = fake_server(&dir, move |stream| {
        let fds: Vec<OwnedFd> = (0..253).map(|_| pipe_fd()).collect();
        send(&stream, &accept_frame(300), &fds);
        let _ = held.recv_timeout(Duration::from_secs(10));
    });
    let (op, _) = timeout_op(nodeipc_handshake::connect(
        &path,
        &logon(&[], Vec::new()),
        QUICK,
    ));
    assert_eq!(op, "waiting for descriptor batch 2");
    release.send(()).unwrap();
    thread.join().unwrap();

    // A client that says nothing is dropped by the server after its timeout.
    let server = HandshakeServer::bind(
        dir.join("logon.sock"),
        HandshakeOptions {
            logon_timeout: QUICK,
            ..HandshakeOptions::default()
        },
        |_, _| Ok(Offer::new()),
    )
    .unwrap();
    let silent = UnixStream::connect(server.path()).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while server.stats().dropped == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(server.stats().dropped, 1);
    drop(silent);
}

#[test]
fn descriptors_that_do_not_match_the_accept_are_refused_naming_the_counts() {
    let _dog = Watchdog::new("count mismatch", Duration::from_secs(30));
    let dir = TempDir::new("hs-count");
    // Three described, two sent.
    let (path, thread) = fake_server(&dir, |stream| {
        send(&stream, &accept_frame(3), &[pipe_fd(), pipe_fd()]);
    });
    let reason = handshake_reason(nodeipc_handshake::connect(
        &path,
        &logon(&[], Vec::new()),
        Duration::from_secs(5),
    ));
    assert_eq!(
        reason,
        "the accept describes 3 descriptors but 2 arrived with it (expected 3)"
    );
    thread.join().unwrap();
    std::fs::remove_file(&path).unwrap();

    // A second batch whose word lies about its count.
    let (path, thread) = fake_server(&dir, |stream| {
        let first: Vec<OwnedFd> = (0..253).map(|_| pipe_fd()).collect();
        send(&stream, &accept_frame(256), &first);
        let rest: Vec<OwnedFd> = (0..3).map(|_| pipe_fd()).collect();
        send(&stream, &7u32.to_le_bytes(), &rest);
    });
    let reason = handshake_reason(nodeipc_handshake::connect(
        &path,
        &logon(&[], Vec::new()),
        Duration::from_secs(5),
    ));
    assert_eq!(
        reason,
        "descriptor batch 2 says 7 and carries 3, the accept needs 3 more"
    );
    thread.join().unwrap();
    std::fs::remove_file(&path).unwrap();

    // More than the client takes.
    let (path, thread) = fake_server(&dir, |stream| {
        send(&stream, &accept_frame(4), &[pipe_fd()]);
    });
    let options = nodeipc_handshake::ClientOptions {
        max_fds: 2,
        ..Default::default()
    };
    let result = nodeipc_handshake::connect_with(&path, &logon(&[], Vec::new()), &options);
    assert_eq!(
        handshake_reason(result),
        "the accept describes 4 descriptors; this client takes at most 2"
    );
    thread.join().unwrap();
}

#[test]
fn roles_other_than_the_client_expects_are_refused_naming_them() {
    let _dog = Watchdog::new("role mismatch", Duration::from_secs(30));
    let dir = TempDir::new("hs-roles");
    let server = HandshakeServer::bind(
        dir.join("logon.sock"),
        HandshakeOptions::default(),
        |_, _| {
            Ok(Offer::new().fd(FdKind::Queue, "a", 0, pipe_fd()).fd(
                FdKind::Queue,
                "b",
                0,
                pipe_fd(),
            ))
        },
    )
    .unwrap();
    let mut session = nodeipc_handshake::connect(
        server.path(),
        &logon(&[], Vec::new()),
        Duration::from_secs(5),
    )
    .unwrap();
    let reason = handshake_reason(session.expect_roles(&["a", "c"]));
    assert_eq!(
        reason,
        "the accept carries 2 descriptors where 2 were expected (missing [\"c\"], unexpected [\"b\"])"
    );
    let reason = handshake_reason(session.expect_roles(&["a"]));
    assert!(reason.contains("2 descriptors where 1"), "{reason}");
    let reason = handshake_reason(session.take_role("c"));
    assert_eq!(
        reason,
        "the accept carries no descriptor of role \"c\" (left: [\"a\", \"b\"])"
    );
    session.expect_roles(&["b", "a"]).unwrap();

    // A server that names one role twice is refused.
    let twice = HandshakeServer::bind(
        dir.join("twice.sock"),
        HandshakeOptions::default(),
        |_, _| {
            Ok(Offer::new().fd(FdKind::Queue, "a", 0, pipe_fd()).fd(
                FdKind::Queue,
                "a",
                0,
                pipe_fd(),
            ))
        },
    )
    .unwrap();
    let reason = handshake_reason(nodeipc_handshake::connect(
        twice.path(),
        &logon(&[], Vec::new()),
        Duration::from_secs(5),
    ));
    assert_eq!(reason, "descriptor 1: role \"a\" is given twice");
    // And one that describes its descriptors wrongly answers with a reject.
    let wrong = HandshakeServer::bind(
        dir.join("wrong.sock"),
        HandshakeOptions::default(),
        |_, _| {
            let mut offer = Offer::new().fd(FdKind::Queue, "a", 0, pipe_fd());
            offer.descriptors.push(pipe_fd());
            Ok(offer)
        },
    )
    .unwrap();
    match nodeipc_handshake::connect(
        wrong.path(),
        &logon(&[], Vec::new()),
        Duration::from_secs(5),
    ) {
        Err(Error::Rejected { code, reason }) => {
            assert_eq!(code, "REJECT_CODE_INTERNAL");
            assert_eq!(reason, "the server described 1 descriptors and offered 2");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_zero_logon_timeout_is_refused_at_bind() {
    let dir = TempDir::new("hs-zero");
    let err = HandshakeServer::bind(
        dir.join("logon.sock"),
        HandshakeOptions {
            logon_timeout: Duration::ZERO,
            ..HandshakeOptions::default()
        },
        |_, _| Ok(Offer::new()),
    )
    .unwrap_err();
    assert!(err.to_string().contains("logon_timeout is 0"), "{err}");
}

const UID_CHILD: &str = "NODEIPC_HS_UID_CHILD";

#[test]
fn a_client_of_another_uid_is_refused_and_refuses_the_server() {
    let _dog = Watchdog::new("another uid", Duration::from_secs(60));
    if let Ok(path) = std::env::var(UID_CHILD) {
        // The child, as nobody: log on and say what happened.
        let result =
            nodeipc_handshake::connect(&path, &logon(&[], Vec::new()), Duration::from_secs(5));
        println!(
            "CHILD-RESULT: {:?}",
            result.map(|s| s.fds.len()).map_err(|e| e.to_string())
        );
        return;
    }
    if !nodeipc_testkit::is_root() {
        nodeipc_testkit::skip(
            "a_client_of_another_uid_is_refused_and_refuses_the_server",
            "needs root to drop to nobody",
        );
        return;
    }
    let dir = TempDir::new("hs-uid");
    let server = HandshakeServer::bind(
        dir.join("logon.sock"),
        HandshakeOptions::default(),
        |_, _| Ok(Offer::new()),
    )
    .unwrap();
    // Opened up by mistake: the stranger reaches the socket; the server
    // still refuses its uid, and it refuses a server of another uid.
    std::fs::set_permissions(dir.path(), PermissionsExt::from_mode(0o711)).unwrap();
    std::fs::set_permissions(server.path(), PermissionsExt::from_mode(0o777)).unwrap();
    let mut child = nodeipc_testkit::this_test_in_a_child(&nodeipc_testkit::test_path(
        module_path!(),
        "a_client_of_another_uid_is_refused_and_refuses_the_server",
    ));
    std::os::unix::process::CommandExt::uid(&mut child, nodeipc_testkit::NOBODY.0);
    std::os::unix::process::CommandExt::gid(&mut child, nodeipc_testkit::NOBODY.1);
    child.env(UID_CHILD, server.path());
    let out = nodeipc_testkit::spawn_child(&mut child).output_timeout(Duration::from_secs(30));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.split_once("CHILD-RESULT: ").map(|(_, r)| r))
        .unwrap_or_else(|| panic!("no result from the child: {stdout}"));
    assert!(
        line.starts_with("Err(") && line.contains("it runs as uid 0"),
        "{line}"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while server.stats().rejected == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        server.stats().rejected,
        1,
        "the server did not refuse uid 65534"
    );
    assert_eq!(server.stats().accepted, 0);
}
