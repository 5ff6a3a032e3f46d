//! The handshake client's waits are bounded and said in words: a server
//! whose backlog is full (stopped, wedged) and a server that stops half-way
//! through its reply cost the caller its timeout, named as a timeout, never
//! forever and never a bare "Resource temporarily unavailable".

use std::io::{Read, Write};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::time::{Duration, Instant};

use nodeipc_channel::{Error, HandshakeError, connect, worker_logon};
use nodeipc_testkit::{TempDir, Watchdog, full_backlog_listener};

fn private_dir() -> TempDir {
    let dir = TempDir::new("handshake-connect");
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    dir
}

fn assert_words(error: &Error, path: &Path, awaited: &str) {
    let text = error.to_string();
    assert!(
        matches!(error, Error::Handshake(HandshakeError::Timeout { .. })),
        "expected the handshake's Timeout: {text}"
    );
    assert!(error.is_timeout(), "{text}");
    assert!(text.contains(&*path.to_string_lossy()), "{text}");
    assert!(text.contains(awaited), "{text}");
    assert!(!text.contains("os error 11"), "{text}");
}

#[test]
fn regression_a_server_with_a_full_backlog_costs_the_timeout_not_forever() {
    let _dog = Watchdog::new("handshake_full_backlog", Duration::from_secs(20));
    let dir = private_dir();
    let path = dir.join("logon.sock");
    let (_listener, _held) = full_backlog_listener(&path);
    let start = Instant::now();
    let error = connect(&path, &worker_logon(0), Duration::from_millis(300)).unwrap_err();
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(290) && waited < Duration::from_secs(5),
        "gave up after {waited:?}"
    );
    assert_words(&error, &path, "backlog is full");
}

#[test]
fn regression_a_reply_cut_off_half_way_is_a_timeout_in_words() {
    let _dog = Watchdog::new("handshake_half_reply", Duration::from_secs(20));
    let dir = private_dir();
    let path = dir.join("logon.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let server = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut prefix = [0u8; 4];
        stream.read_exact(&mut prefix).unwrap();
        let mut logon = vec![0u8; u32::from_le_bytes(prefix) as usize];
        stream.read_exact(&mut logon).unwrap();
        // A reply of 100 bytes announced, none of them sent.
        stream.write_all(&100u32.to_le_bytes()).unwrap();
        stream
    });
    let start = Instant::now();
    let error = connect(&path, &worker_logon(0), Duration::from_millis(300)).unwrap_err();
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    assert_words(&error, &path, "the rest of the logon reply");
    drop(server.join().unwrap());
}

#[test]
fn a_server_that_never_answers_is_a_timeout_in_words() {
    let _dog = Watchdog::new("handshake_no_reply", Duration::from_secs(20));
    let dir = private_dir();
    let path = dir.join("logon.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let server = std::thread::spawn(move || listener.accept().unwrap().0);
    let error = connect(&path, &worker_logon(0), Duration::from_millis(200)).unwrap_err();
    assert_words(&error, &path, "waiting for the logon reply");
    drop(server.join().unwrap());
}

#[test]
fn a_huge_timeout_does_not_panic() {
    let _dog = Watchdog::new("handshake_huge_timeout", Duration::from_secs(20));
    let dir = private_dir();
    let path = dir.join("logon.sock");
    let listener = UnixListener::bind(&path).unwrap();
    // The server answers by closing: the client must get that far.
    let server = std::thread::spawn(move || drop(listener.accept().unwrap()));
    let error = connect(&path, &worker_logon(0), Duration::MAX).unwrap_err();
    assert!(
        matches!(error, Error::Handshake(HandshakeError::Handshake { .. })),
        "expected the early close, got {error}"
    );
    server.join().unwrap();
}

#[test]
fn no_server_at_all_is_a_timeout_naming_the_path() {
    let dir = private_dir();
    let path = dir.join("absent.sock");
    let error = connect(&path, &worker_logon(0), Duration::from_millis(100)).unwrap_err();
    assert_words(&error, &path, "no such socket");
}
