//! A binary of its own, not a module of `tests/it/`: a test here counts this
//! process's descriptors (`fd_count`), which tests running beside it in one
//! binary would change.
//!
//! The logon handshake within one process: accept with the regions, every
//! refusal with its reason, misbehaving clients and servers, and no
//! descriptor left behind after many logons. Clients of another uid and
//! workers in other processes are in `integration-tests/tests/it/handshake_processes.rs`.

use std::io::Write;
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::{Duration, Instant};

use nodeipc_channel::{
    All, Channel, ChannelServer, Coordinator, Error, HandshakeError, HandshakeOptions, Worker,
    connect, worker_logon,
};
use nodeipc_proto::handshake::{FdKind, Logon};
use nodeipc_testkit::{TempDir, Watchdog, fd_count, unique_name};

/// fd counts are per process: the tests here take turns.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn private_dir() -> TempDir {
    let dir = TempDir::new("handshake");
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    dir
}

fn server(dir: &TempDir, coordinator: &Coordinator, options: HandshakeOptions) -> ChannelServer {
    ChannelServer::bind(
        dir.join("logon.sock"),
        options,
        coordinator.offer().unwrap(),
    )
    .unwrap()
}

/// Waits until the server has answered `connections` connections and holds
/// none of them any more.
fn settled(server: &ChannelServer, connections: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let stats = server.stats();
        if stats.accepted + stats.rejected + stats.dropped >= connections && stats.in_progress == 0
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the server never settled after {connections} connections: {stats:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn quick() -> HandshakeOptions {
    HandshakeOptions {
        logon_timeout: Duration::from_millis(300),
        ..HandshakeOptions::default()
    }
}

#[test]
fn an_accepted_worker_gets_both_regions_and_serves() {
    let _serial = serial();
    let _dog = Watchdog::new("accept", Duration::from_secs(30));
    let dir = private_dir();
    let coordinator = Channel::anonymous(unique_name("hs"))
        .workers(1)
        .timeout(Duration::from_secs(5))
        .create()
        .unwrap();
    let server = server(&dir, &coordinator, quick());
    let session = connect(server.path(), &worker_logon(0), Duration::from_secs(5)).unwrap();
    let kinds: Vec<FdKind> = session.fds.iter().map(|(k, _)| *k).collect();
    assert_eq!(kinds, [FdKind::RequestRegion, FdKind::ResponseRegion]);
    assert_eq!(session.server.pid, std::process::id());
    let mut worker: Worker = session.into_worker(0, Duration::from_secs(5)).unwrap();
    coordinator
        .wait_for_workers(Duration::from_secs(5))
        .unwrap();
    coordinator
        .send(&nodeipc_proto::execute::ExecuteRequest {
            sequence: 0,
            ..Default::default()
        })
        .unwrap();
    let request = worker.recv().unwrap();
    worker
        .respond(&nodeipc_proto::execute::ExecuteResponse {
            sequence: request.sequence,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(coordinator.recv(All).unwrap()[0].sequence, 0);
    assert_eq!(server.stats().accepted, 1);
    // The rank is taken now: a second logon for it is refused with the reason.
    match connect(server.path(), &worker_logon(0), Duration::from_secs(5)) {
        Err(Error::Handshake(HandshakeError::Rejected { code, reason })) => {
            assert_eq!(code, "REJECT_CODE_RANK_TAKEN");
            assert!(reason.contains(&std::process::id().to_string()), "{reason}");
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
}

#[test]
fn refusals_say_why() {
    let _serial = serial();
    let _dog = Watchdog::new("refusals", Duration::from_secs(30));
    let dir = private_dir();
    let coordinator = Channel::anonymous(unique_name("hs-refuse"))
        .workers(2)
        .depth(2)
        .timeout(Duration::from_secs(5))
        .create()
        .unwrap();
    let server = server(&dir, &coordinator, quick());
    let cases = [
        (
            Logon {
                protocol_version: 99,
                ..worker_logon(0)
            },
            "REJECT_CODE_VERSION_MISMATCH",
            "version 99",
        ),
        (worker_logon(7), "REJECT_CODE_RANK_OUT_OF_RANGE", "rank 7"),
        (
            Logon {
                workers: 3,
                ..worker_logon(0)
            },
            "REJECT_CODE_GEOMETRY_MISMATCH",
            "workers 3",
        ),
        (
            Logon {
                depth: 1,
                ..worker_logon(0)
            },
            "REJECT_CODE_GEOMETRY_MISMATCH",
            "depth 1",
        ),
        (
            Logon {
                request_capacity: 1 << 30,
                ..worker_logon(0)
            },
            "REJECT_CODE_GEOMETRY_MISMATCH",
            "request capacity",
        ),
        (
            Logon {
                kind: 2,
                ..worker_logon(0)
            },
            "REJECT_CODE_MALFORMED",
            "not a worker",
        ),
    ];
    for (logon, expected_code, fragment) in cases {
        match connect(server.path(), &logon, Duration::from_secs(5)) {
            Err(Error::Handshake(HandshakeError::Rejected { code, reason })) => {
                assert_eq!(code, expected_code, "{reason}");
                assert!(reason.contains(fragment), "{reason:?} lacks {fragment:?}");
            }
            other => panic!("expected {expected_code}, got {other:?}"),
        }
    }
    assert_eq!(server.stats().rejected, 6);
}

#[test]
fn silent_garbage_and_vanishing_clients_do_not_stop_the_server() {
    let _serial = serial();
    let _dog = Watchdog::new("misbehaving clients", Duration::from_secs(30));
    let dir = private_dir();
    let coordinator = Channel::anonymous(unique_name("hs-bad"))
        .workers(1)
        .create()
        .unwrap();
    // A logon timeout far longer than a loaded machine can delay the good
    // client below, so "served meanwhile" cannot be mistaken for "served
    // after the silent one was dropped".
    let options = HandshakeOptions {
        logon_timeout: Duration::from_secs(5),
        ..HandshakeOptions::default()
    };
    let server = server(&dir, &coordinator, options);
    let silent = UnixStream::connect(server.path()).unwrap();
    let mut garbage = UnixStream::connect(server.path()).unwrap();
    garbage.write_all(&[3, 0, 0, 0, 0xff, 0xff, 0xff]).unwrap();
    let mut huge = UnixStream::connect(server.path()).unwrap();
    huge.write_all(&u32::MAX.to_le_bytes()).unwrap();
    drop(UnixStream::connect(server.path()).unwrap()); // gone at once
    let mut half = UnixStream::connect(server.path()).unwrap();
    half.write_all(&[40, 0, 0, 0, 1]).unwrap();
    drop(half); // leaves mid-frame
    // A good client is served meanwhile, not after the silent one's timeout.
    let start = Instant::now();
    connect(server.path(), &worker_logon(0), Duration::from_secs(5)).unwrap();
    assert!(
        start.elapsed() < Duration::from_secs(4),
        "a silent client held the server up"
    );
    // The silent client is dropped at its logon timeout.
    settled(&server, 6);
    let stats = server.stats();
    assert_eq!(stats.accepted, 1);
    assert_eq!(
        stats.rejected, 2,
        "garbage and an oversized frame are answered: {stats:?}"
    );
    assert_eq!(
        stats.dropped, 3,
        "the silent, the vanished and the half client: {stats:?}"
    );
    drop(silent);
}

#[test]
fn a_server_that_closes_early_is_a_clear_error() {
    let _serial = serial();
    let _dog = Watchdog::new("server closes early", Duration::from_secs(30));
    let dir = private_dir();
    let path = dir.join("fake.sock");
    let fake = UnixListener::bind(&path).unwrap();
    let closer = std::thread::spawn(move || drop(fake.accept().unwrap()));
    match connect(&path, &worker_logon(0), Duration::from_secs(5)) {
        Err(Error::Handshake(HandshakeError::Handshake { reason, .. })) => {
            assert!(reason.contains("closed"), "{reason}")
        }
        other => panic!("expected a handshake error, got {other:?}"),
    }
    closer.join().unwrap();
    // Nobody listening at all: a bounded wait, then a timeout.
    let start = Instant::now();
    let missing = dir.join("nobody.sock");
    let timed_out = connect(&missing, &worker_logon(0), Duration::from_millis(200)).unwrap_err();
    assert!(
        matches!(timed_out, Error::Handshake(HandshakeError::Timeout { .. })),
        "{timed_out:?}"
    );
    assert!(timed_out.is_timeout());
    assert!(start.elapsed() < Duration::from_secs(5));
}

#[test]
fn a_hundred_logons_leave_no_descriptor_behind() {
    let _serial = serial();
    let _dog = Watchdog::new("fd leak", Duration::from_secs(60));
    let dir = private_dir();
    let coordinator = Channel::anonymous(unique_name("hs-leak"))
        .workers(1)
        .create()
        .unwrap();
    let server = server(&dir, &coordinator, quick());
    // Warm up: the first logon creates the server's lazily made state.
    drop(connect(server.path(), &worker_logon(0), Duration::from_secs(5)).unwrap());
    settled(&server, 1);
    let before = fd_count();
    for _ in 0..100 {
        let session = connect(server.path(), &worker_logon(0), Duration::from_secs(5)).unwrap();
        assert_eq!(session.fds.len(), 2);
        drop(session);
        let mut bad = UnixStream::connect(server.path()).unwrap();
        bad.write_all(b"\x01\x00\x00\x00\xff").unwrap();
        drop(bad);
    }
    // Counted, not timed: the last garbage connection may still sit in the
    // backlog when the client's side is gone, and a look at the count then
    // sees the server's descriptor of it appear a moment later.
    settled(&server, 201);
    assert_eq!(fd_count(), before, "descriptors leaked over 100 logons");
    assert_eq!(server.stats().accepted, 101);
}

/// Regression: a zero logon timeout made `set_read_timeout` fail, silently,
/// so a client that never spoke held its server thread forever.
#[test]
fn regression_a_zero_logon_timeout_is_refused_at_bind() {
    let dir = private_dir();
    let options = HandshakeOptions {
        logon_timeout: Duration::ZERO,
        ..HandshakeOptions::default()
    };
    let refused = ChannelServer::bind_with(dir.join("logon.sock"), options, |_, _| {
        unreachable!("nobody logs on")
    })
    .err()
    .expect("a zero logon timeout is refused");
    assert!(
        matches!(
            refused,
            Error::Handshake(HandshakeError::InvalidConfig { .. })
        ),
        "{refused:?}"
    );
    assert!(
        refused.to_string().contains("logon_timeout is 0"),
        "{refused}"
    );
    assert!(!dir.join("logon.sock").exists(), "nothing was bound");
}
