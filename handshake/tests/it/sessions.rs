//! Sessions: many descriptors in batches, each with its role; several
//! clients at once; each side sees the other's end through the socket.

use std::os::fd::OwnedFd;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nodeipc_handshake::{
    FdKind, HandshakeOptions, HandshakeServer, Offer, PeerGone, RejectCode, ServerSession, count,
    logon, reject,
};
use nodeipc_testkit::{TempDir, Watchdog};
use rustix::event::{EventfdFlags, eventfd};

/// An eventfd whose counter holds `value`: a descriptor whose identity
/// the client can read back, to check it got the one its role names.
fn tagged(value: u32) -> OwnedFd {
    eventfd(value, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK).expect("eventfd")
}

fn read_tag(fd: &OwnedFd) -> u64 {
    let mut buf = [0u8; 8];
    rustix::io::read(fd, &mut buf).expect("read eventfd");
    u64::from_ne_bytes(buf)
}

/// A server handing out `3 + 2 × workers` tagged descriptors (the
/// scheduler's shape: pool, two global queues, a pair per worker), refusing
/// more than `max_workers`.
fn scheduler_like(
    dir: &TempDir,
    max_workers: u64,
) -> (HandshakeServer, mpsc::Receiver<ServerSession>) {
    let (sent, sessions) = mpsc::channel();
    let server = HandshakeServer::bind_sessions(
        dir.join("logon.sock"),
        HandshakeOptions::default(),
        move |logon, _peer| {
            let workers = count(logon, "workers").unwrap_or(0);
            if workers > max_workers {
                return Err(reject(
                    RejectCode::GeometryMismatch,
                    format!("{workers} workers asked for, the server has {max_workers}"),
                ));
            }
            let mut offer = Offer::new()
                .fd(FdKind::Pool, "pool", 0, tagged(1))
                .fd(FdKind::Queue, "tpu_to_scheduler", 0, tagged(2))
                .fd(FdKind::Queue, "progress", 0, tagged(3));
            for w in 0..workers as u32 {
                offer = offer
                    .fd(
                        FdKind::Queue,
                        format!("worker.{w}.to"),
                        0,
                        tagged(100 + 2 * w),
                    )
                    .fd(
                        FdKind::Queue,
                        format!("worker.{w}.from"),
                        0,
                        tagged(101 + 2 * w),
                    );
            }
            Ok(offer.payload(format!("workers={workers}").into_bytes()))
        },
        move |session| {
            let _ = sent.send(session);
        },
    )
    .expect("bind");
    (server, sessions)
}

fn roles(workers: u32) -> Vec<String> {
    let mut roles = vec![
        "pool".to_owned(),
        "tpu_to_scheduler".to_owned(),
        "progress".to_owned(),
    ];
    for w in 0..workers {
        roles.push(format!("worker.{w}.to"));
        roles.push(format!("worker.{w}.from"));
    }
    roles
}

#[test]
fn a_client_receives_3_plus_2x128_descriptors_in_batches_each_under_its_role() {
    let _dog = Watchdog::new("3 + 256 descriptors", Duration::from_secs(30));
    let dir = TempDir::new("hs-many");
    let (server, sessions) = scheduler_like(&dir, 300);
    for workers in [0u32, 1, 125, 128, 300] {
        let mut session = nodeipc_handshake::connect(
            server.path(),
            &logon(&[("workers", u64::from(workers))], Vec::new()),
            Duration::from_secs(5),
        )
        .unwrap_or_else(|e| panic!("{workers} workers: {e}"));
        let total = 3 + 2 * workers as usize;
        assert_eq!(session.fds.len(), total, "{workers} workers");
        assert_eq!(session.payload(), format!("workers={workers}").as_bytes());
        session.expect_roles(&roles(workers)).unwrap();
        assert_eq!(read_tag(&session.take_role("pool").unwrap().fd), 1);
        assert_eq!(read_tag(&session.take_role("progress").unwrap().fd), 3);
        for w in 0..workers {
            let to = session.take_role(&format!("worker.{w}.to")).unwrap();
            assert_eq!(to.kind, FdKind::Queue);
            assert_eq!(read_tag(&to.fd), u64::from(100 + 2 * w), "worker {w}");
            let from = session.take_role(&format!("worker.{w}.from")).unwrap();
            assert_eq!(read_tag(&from.fd), u64::from(101 + 2 * w), "worker {w}");
        }
        assert_eq!(
            session.roles(),
            ["tpu_to_scheduler"],
            "{workers} workers: every other role taken"
        );
    }
    assert_eq!(server.stats().accepted, 5);
    assert_eq!(sessions.try_iter().count(), 5);
}

#[test]
fn several_clients_hold_sessions_at_once_and_each_side_sees_the_other_end() {
    let _dog = Watchdog::new("several sessions", Duration::from_secs(30));
    let dir = TempDir::new("hs-several");
    let (server, sessions) = scheduler_like(&dir, 8);
    let path = server.path().to_owned();
    let clients: Vec<_> = (0..4u64)
        .map(|i| {
            let path = path.clone();
            std::thread::spawn(move || {
                nodeipc_handshake::connect(
                    &path,
                    &logon(&[("workers", i)], Vec::new()),
                    Duration::from_secs(5),
                )
                .expect("logon")
            })
        })
        .collect();
    let mut clients: Vec<_> = clients.into_iter().map(|t| t.join().unwrap()).collect();
    let mut on_server: Vec<ServerSession> = (0..4)
        .map(|_| {
            sessions
                .recv_timeout(Duration::from_secs(5))
                .expect("session")
        })
        .collect();
    on_server.sort_by_key(|s| count(&s.logon, "workers"));
    clients.sort_by_key(|c| c.fds.len());
    for (i, (client, server_side)) in clients.iter().zip(&on_server).enumerate() {
        assert_eq!(client.fds.len(), 3 + 2 * i, "client {i}");
        assert!(
            client.server_alive() && server_side.link.is_alive(),
            "client {i}"
        );
        assert_eq!(server_side.peer.pid, std::process::id());
    }
    // A client leaves: its server session sees it at once, the others not.
    let gone = clients.remove(1);
    let start = Instant::now();
    drop(gone);
    assert_eq!(
        on_server[1].link.wait_gone(Duration::from_secs(10)),
        Some(PeerGone::Closed)
    );
    // At once: an end of file, no timeout involved (room for a loaded machine).
    assert!(start.elapsed() < Duration::from_secs(5));
    assert!(on_server[0].link.is_alive() && on_server[2].link.is_alive());
    // The server ends a session: that client sees it, the others not.
    let ended = on_server.remove(2); // the client with 2 workers, now clients[1]
    drop(ended);
    assert_eq!(
        clients[1].wait_server_gone(Duration::from_secs(1)),
        Some(PeerGone::Closed)
    );
    assert!(clients[0].server_alive() && clients[2].server_alive());
    assert_eq!(server.stats().accepted, 4);
}

#[test]
fn a_client_that_asks_too_much_is_rejected_with_the_servers_reason() {
    let _dog = Watchdog::new("reject with reason", Duration::from_secs(30));
    let dir = TempDir::new("hs-reject");
    let (server, sessions) = scheduler_like(&dir, 8);
    let err = nodeipc_handshake::connect(
        server.path(),
        &logon(&[("workers", 9)], Vec::new()),
        Duration::from_secs(5),
    )
    .unwrap_err();
    match err {
        nodeipc_handshake::Error::Rejected { code, reason } => {
            assert_eq!(code, "REJECT_CODE_GEOMETRY_MISMATCH");
            assert_eq!(reason, "9 workers asked for, the server has 8");
        }
        other => panic!("{other}"),
    }
    assert_eq!(server.stats().rejected, 1);
    assert!(
        sessions.try_recv().is_err(),
        "a rejected logon left a session"
    );
}

#[test]
fn the_request_bytes_reach_the_decision_and_the_payload_the_client() {
    let _dog = Watchdog::new("request and payload", Duration::from_secs(30));
    let dir = TempDir::new("hs-bytes");
    let server = HandshakeServer::bind(
        dir.join("logon.sock"),
        HandshakeOptions::default(),
        |logon, _| {
            // The server's own schema: here, a protobuf Count.
            let asked: nodeipc_handshake::Count = prost::Message::decode(&logon.request[..])
                .map_err(|e| reject(RejectCode::Malformed, format!("request: {e}")))?;
            Ok(Offer::new().payload(format!("{}:{}", asked.name, asked.value * 2)))
        },
    )
    .expect("bind");
    let request = nodeipc_handshake::Count {
        name: "handles".into(),
        value: 21,
    };
    let session = nodeipc_handshake::connect(
        server.path(),
        &logon(&[], prost::Message::encode_to_vec(&request)),
        Duration::from_secs(5),
    )
    .unwrap();
    assert_eq!(session.payload(), b"handles:42");
    // `bind` keeps no session: the server closed its end after the accept.
    assert_eq!(
        session.wait_server_gone(Duration::from_secs(1)),
        Some(PeerGone::Closed)
    );
    let err = nodeipc_handshake::connect(
        server.path(),
        &logon(&[], vec![0xff, 0xff]),
        Duration::from_secs(5),
    )
    .unwrap_err();
    assert!(
        matches!(&err, nodeipc_handshake::Error::Rejected { code, reason }
            if code == "REJECT_CODE_MALFORMED" && reason.starts_with("request: ")),
        "{err}"
    );
}

#[test]
fn accept_returns_each_session_with_what_was_made_for_it() {
    let _dog = Watchdog::new("accept", Duration::from_secs(60));
    let dir = TempDir::new("hs-accept");
    // What the decision makes: the server's end of each worker's pipe,
    // whose other end the client gets.
    let mut server = nodeipc_handshake::Acceptor::bind(
        dir.join("logon.sock"),
        HandshakeOptions::default(),
        |logon, _peer| {
            let workers = count(logon, "workers").unwrap_or(0);
            if workers > 4 {
                return Err(reject(RejectCode::GeometryMismatch, "at most 4 workers"));
            }
            let mut offer = Offer::new();
            let mut ends = Vec::new();
            for w in 0..workers {
                let (reader, writer) = std::io::pipe().expect("pipe");
                offer = offer.fd(FdKind::Other, format!("worker.{w}"), 0, writer.into());
                ends.push(reader);
            }
            Ok((offer, ends))
        },
    )
    .unwrap();
    let path = server.path().to_owned();
    let refused = nodeipc_handshake::connect(
        &path,
        &logon(&[("workers", 9)], Vec::new()),
        Duration::from_secs(5),
    );
    assert!(refused.is_err(), "9 workers are refused");
    let mut client = nodeipc_handshake::connect(
        &path,
        &logon(&[("workers", 3)], Vec::new()),
        Duration::from_secs(5),
    )
    .unwrap();
    let session = server.accept(Duration::from_secs(5)).unwrap();
    assert_eq!(count(&session.logon, "workers"), Some(3));
    assert_eq!(session.peer.pid, std::process::id());
    assert_eq!(session.made.len(), 3);
    // The descriptors the client holds are the other ends of what was made.
    let writer = client.take_role("worker.1").unwrap().fd;
    rustix::io::write(&writer, b"hi").unwrap();
    let mut buf = [0u8; 2];
    use std::io::Read;
    (&session.made[1]).read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"hi");
    // No second session: the rejected logon never comes out.
    assert!(server.try_accept().is_none());
    let err = server.accept(Duration::from_millis(50)).unwrap_err();
    assert!(
        err.to_string().contains("waiting for a client to log on"),
        "{err}"
    );
    assert_eq!(server.stats().accepted, 1);
    assert_eq!(server.stats().rejected, 1);
    drop(client);
    assert!(session.link.wait_gone(Duration::from_secs(5)).is_some());
}
