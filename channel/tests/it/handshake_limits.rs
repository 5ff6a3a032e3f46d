//! The handshake server's limit on logons handled at once
//! (`HandshakeOptions::max_clients`): a client past it is refused with
//! `TOO_MANY_CLIENTS` and a reason, at once rather than after the logon
//! timeout; once a logon in progress ends, the next client is served.

use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use nodeipc_channel::{
    Channel, ChannelServer, Coordinator, Error, HandshakeError, HandshakeOptions, connect,
    worker_logon,
};
use nodeipc_proto::handshake::{LogonReply, RejectCode, logon_reply};
use nodeipc_testkit::{TempDir, Watchdog, unique_name};

fn private_dir() -> TempDir {
    let dir = TempDir::new("handshake-limit");
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    dir
}

/// Waits (bounded) until `done` holds.
fn eventually(what: &str, limit: Duration, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "{what}: not after {limit:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A server for a channel of two workers that handles one logon at a time,
/// with a logon timeout far longer than any test here: a silent client
/// holds the one place for as long as it stays connected.
fn one_at_a_time(dir: &TempDir) -> (Coordinator, ChannelServer) {
    let coordinator = Channel::anonymous(unique_name("hs-limit"))
        .workers(2)
        .create()
        .unwrap();
    let offer = coordinator.offer().unwrap();
    let options = HandshakeOptions {
        logon_timeout: Duration::from_secs(30),
        max_clients: 1,
        ..HandshakeOptions::default()
    };
    let server = ChannelServer::bind(dir.join("logon.sock"), options, offer).unwrap();
    (coordinator, server)
}

#[test]
fn a_client_past_max_clients_is_refused_as_too_many_clients() {
    let _dog = Watchdog::new("max_clients", Duration::from_secs(60));
    let dir = private_dir();
    let (_coordinator, server) = one_at_a_time(&dir);

    // The first client connects and says nothing: its logon is in progress.
    // The server takes connections in order, so it counts this one before
    // it looks at the next.
    let silent = UnixStream::connect(server.path()).unwrap();

    // The second client sends its logon and reads the answer off the
    // socket: the refusal itself, byte for byte (the test below does the
    // same through `connect`).
    let start = Instant::now();
    let mut second = UnixStream::connect(server.path()).unwrap();
    second
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    // The server may answer and close before the logon is written: then the
    // write fails, and the answer is waiting all the same.
    let _ = nodeipc_proto::write_frame(&mut second, &worker_logon(0));
    let reply: LogonReply =
        nodeipc_proto::read_frame(&mut second, 64 << 10, &mut Vec::new()).unwrap();
    match reply.reply {
        Some(logon_reply::Reply::Reject(reject)) => {
            assert_eq!(
                reject.code,
                RejectCode::TooManyClients as i32,
                "{}",
                reject.reason
            );
            assert!(
                reject.reason.contains("1 logons at once"),
                "{}",
                reject.reason
            );
        }
        other => panic!("expected a TOO_MANY_CLIENTS rejection, got {other:?}"),
    }
    // At once, not at the silent client's 30 s logon timeout.
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "the refusal waited for the silent client ({:?})",
        start.elapsed()
    );
    let stats = server.stats();
    assert_eq!((stats.accepted, stats.rejected, stats.dropped), (0, 1, 0));

    // The silent client leaves: its place is free, the next logon is served.
    drop(silent);
    // Counted as dropped, and its place given back (the two are a moment
    // apart: a logon in between would still find the server full).
    eventually(
        "the silent client counted as dropped",
        Duration::from_secs(10),
        || {
            let stats = server.stats();
            stats.dropped == 1 && stats.in_progress == 0
        },
    );
    let session = connect(server.path(), &worker_logon(0), Duration::from_secs(10)).unwrap();
    assert_eq!(session.fds.len(), 2);
    let stats = server.stats();
    assert_eq!((stats.accepted, stats.rejected, stats.dropped), (1, 1, 1));
}

/// `connect` itself must report the refusal. The server answers a client
/// past the limit without reading its logon and closes; when that happens
/// before `connect` has written the logon, the write fails and `connect`
/// says "the server closed the connection before answering", though the
/// rejection is waiting in its socket. Most attempts in a row fail so.
#[test]
fn connect_reports_too_many_clients_rather_than_a_closed_server() {
    let _dog = Watchdog::new("connect past max_clients", Duration::from_secs(60));
    let dir = private_dir();
    let (_coordinator, server) = one_at_a_time(&dir);
    let _silent = UnixStream::connect(server.path()).unwrap();
    for attempt in 0..200 {
        match connect(server.path(), &worker_logon(0), Duration::from_secs(10)) {
            Err(Error::Handshake(HandshakeError::Rejected { code, reason })) => {
                assert_eq!(code, "REJECT_CODE_TOO_MANY_CLIENTS", "{reason}")
            }
            other => panic!("attempt {attempt}: expected a rejection, got {other:?}"),
        }
    }
}
