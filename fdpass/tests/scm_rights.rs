//! A binary of its own, not a module of `tests/it/`: its tests count this
//! process's descriptors (`fd_count`) before and after, which tests running
//! beside it in one binary would change.
//!
//! SCM_RIGHTS round trips on every socket type, and the failure modes that
//! must close what arrived: truncated control data, too many descriptors,
//! credentials instead of rights, truncated payloads, early close.

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use nodeipc_fdpass::{Error, SCM_MAX_FD, recv_fds, recv_fds_exact, send_fds, send_fds_to};
use nodeipc_testkit::{TempDir, fd_count};
use rustix::net::{AddressFamily, SocketFlags, SocketType};

/// Every test here counts this process's descriptors, which a test running
/// beside it in another thread would disturb: they take turns.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A connected pair of Unix sockets of one type.
fn pair(kind: SocketType) -> (OwnedFd, OwnedFd) {
    rustix::net::socketpair(AddressFamily::UNIX, kind, SocketFlags::CLOEXEC, None).unwrap()
}

/// `count` memfds, each holding its own index.
fn memfds(count: usize) -> Vec<std::fs::File> {
    (0..count)
        .map(|i| {
            let fd = rustix::fs::memfd_create("scm", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
            let mut file = std::fs::File::from(fd);
            file.write_all(&(i as u32).to_le_bytes()).unwrap();
            file
        })
        .collect()
}

fn borrowed(files: &[std::fs::File]) -> Vec<BorrowedFd<'_>> {
    files.iter().map(AsFd::as_fd).collect()
}

fn is_cloexec(fd: &OwnedFd) -> bool {
    rustix::io::fcntl_getfd(fd)
        .unwrap()
        .contains(rustix::io::FdFlags::CLOEXEC)
}

fn round_trip(kind: SocketType, count: usize) {
    let (a, b) = pair(kind);
    let files = memfds(count);
    let sent = send_fds(&a, b"payload", &borrowed(&files)).unwrap();
    assert_eq!(sent, 7);
    let mut buf = [0u8; 16];
    let got = recv_fds(&b, &mut buf, count).unwrap();
    assert_eq!(&buf[..got.len], b"payload");
    assert_eq!(got.fds.len(), count, "{kind:?}");
    for (i, fd) in got.fds.into_iter().enumerate() {
        assert!(is_cloexec(&fd), "received fd {i} is not close-on-exec");
        let mut file = std::fs::File::from(fd);
        // The same open file: it shares the offset the sender left after writing.
        assert_eq!(file.stream_position().unwrap(), 4);
        file.seek(SeekFrom::Start(0)).unwrap();
        let mut word = [0u8; 4];
        file.read_exact(&mut word).unwrap();
        assert_eq!(u32::from_le_bytes(word), i as u32);
        // Written through the copy, seen through the original.
        file.write_all(b"back").unwrap();
        let mut original = &files[i];
        original.seek(SeekFrom::Start(4)).unwrap();
        let mut back = [0u8; 4];
        original.read_exact(&mut back).unwrap();
        assert_eq!(&back, b"back");
    }
}

#[test]
fn round_trips_of_1_8_64_and_253_fds_on_every_socket_type() {
    let _serial = serial();
    for kind in [SocketType::STREAM, SocketType::DGRAM, SocketType::SEQPACKET] {
        for count in [1, 8, 64, SCM_MAX_FD] {
            round_trip(kind, count);
        }
    }
}

#[test]
fn more_than_scm_max_fd_is_refused_before_sending() {
    let _serial = serial();
    let (a, b) = pair(SocketType::STREAM);
    let files = memfds(SCM_MAX_FD + 1);
    let err = send_fds(&a, b"x", &borrowed(&files)).unwrap_err();
    assert!(
        matches!(
            err,
            Error::TooManyFds {
                count: 254,
                max: 253
            }
        ),
        "{err}"
    );
    rustix::net::shutdown(&a, rustix::net::Shutdown::Write).unwrap();
    let mut buf = [0u8; 1];
    assert_eq!(
        recv_fds(&b, &mut buf, 1).unwrap().len,
        0,
        "something was sent"
    );
}

#[test]
fn descriptors_without_payload_are_refused() {
    let _serial = serial();
    let (a, _b) = pair(SocketType::SEQPACKET);
    let files = memfds(1);
    assert!(matches!(
        send_fds(&a, b"", &borrowed(&files)),
        Err(Error::EmptyPayload)
    ));
}

#[test]
fn a_receiver_with_room_for_fewer_gets_an_error_and_keeps_no_fd() {
    let _serial = serial();
    for kind in [SocketType::STREAM, SocketType::DGRAM, SocketType::SEQPACKET] {
        let (a, b) = pair(kind);
        let files = memfds(64);
        send_fds(&a, b"many", &borrowed(&files)).unwrap();
        let before = fd_count();
        let mut buf = [0u8; 4];
        let err = recv_fds(&b, &mut buf, 3).unwrap_err();
        assert!(
            matches!(
                err,
                Error::ControlTruncated { max_fds: 3, .. } | Error::TooManyFds { max: 3, .. }
            ),
            "{kind:?}: {err}"
        );
        assert_eq!(fd_count(), before, "{kind:?}: descriptors leaked");
    }
}

#[test]
fn zero_room_refuses_any_descriptor() {
    let _serial = serial();
    let (a, b) = pair(SocketType::SEQPACKET);
    let files = memfds(2);
    send_fds(&a, b"x", &borrowed(&files)).unwrap();
    let before = fd_count();
    let err = recv_fds(&b, &mut [0u8; 1], 0).unwrap_err();
    assert!(
        matches!(
            err,
            Error::ControlTruncated {
                max_fds: 0,
                closed: 0
            }
        ),
        "{err}"
    );
    assert_eq!(fd_count(), before);
}

#[test]
fn credentials_instead_of_rights_are_refused_and_fds_closed() {
    let _serial = serial();
    let (a, b) = pair(SocketType::SEQPACKET);
    rustix::net::sockopt::set_socket_passcred(&b, true).unwrap();
    let files = memfds(4);
    send_fds(&a, b"creds", &borrowed(&files)).unwrap();
    let before = fd_count();
    let err = recv_fds(&b, &mut [0u8; 8], 8).unwrap_err();
    assert!(
        matches!(
            err,
            Error::UnexpectedControl {
                kind: "SCM_CREDENTIALS",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(fd_count(), before);
}

#[test]
fn a_truncated_datagram_is_an_error_and_fds_closed() {
    let _serial = serial();
    let (a, b) = pair(SocketType::DGRAM);
    let files = memfds(2);
    send_fds(&a, b"a long datagram", &borrowed(&files)).unwrap();
    let before = fd_count();
    let err = recv_fds(&b, &mut [0u8; 4], 2).unwrap_err();
    assert!(
        matches!(
            err,
            Error::PayloadTruncated {
                capacity: 4,
                closed: 2
            }
        ),
        "{err}"
    );
    assert_eq!(fd_count(), before);
}

#[test]
fn recv_exact_fills_the_buffer_and_reports_an_early_close() {
    let _serial = serial();
    let (a, b) = pair(SocketType::STREAM);
    let files = memfds(2);
    send_fds(&a, b"head", &borrowed(&files)).unwrap();
    rustix::net::send(&a, b"tail", rustix::net::SendFlags::empty()).unwrap();
    let mut buf = [0u8; 8];
    let fds = recv_fds_exact(&b, &mut buf, 2).unwrap();
    assert_eq!((&buf, fds.len()), (b"headtail", 2));

    send_fds(&a, b"part", &borrowed(&files)).unwrap();
    drop(a);
    let before = fd_count();
    let err = recv_fds_exact(&b, &mut [0u8; 10], 2).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Closed {
                received: 4,
                expected: 10
            }
        ),
        "{err}"
    );
    assert_eq!(
        fd_count(),
        before,
        "descriptors of the partial message leaked"
    );
}

#[test]
fn a_large_stream_payload_arrives_whole_with_its_fds() {
    let _serial = serial();
    let (a, b) = pair(SocketType::STREAM);
    let files = memfds(3);
    let payload: Vec<u8> = (0..4 << 20).map(|i| i as u8).collect();
    let sender = std::thread::spawn(move || send_fds(&a, &payload, &borrowed(&files)).unwrap());
    let mut buf = vec![0u8; 4 << 20];
    let fds = recv_fds_exact(&b, &mut buf, 3).unwrap();
    assert_eq!(sender.join().unwrap(), 4 << 20);
    assert_eq!(fds.len(), 3);
    assert!(buf.iter().enumerate().all(|(i, &v)| v == i as u8));
}

#[test]
fn send_to_an_unconnected_datagram_socket() {
    let _serial = serial();
    let dir = TempDir::new("dgram");
    let path = dir.join("sock");
    let receiver = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
    let sender = std::os::unix::net::UnixDatagram::unbound().unwrap();
    let files = memfds(5);
    send_fds_to(&sender, &path, b"addressed", &borrowed(&files)).unwrap();
    let mut buf = [0u8; 16];
    let got = recv_fds(&receiver, &mut buf, 5).unwrap();
    assert_eq!((&buf[..got.len], got.fds.len()), (&b"addressed"[..], 5));
}

#[test]
fn sending_to_a_closed_peer_is_epipe() {
    let _serial = serial();
    let (a, b) = pair(SocketType::STREAM);
    drop(b);
    let files = memfds(1);
    let err = send_fds(&a, b"x", &borrowed(&files)).unwrap_err();
    let errno = match &err {
        Error::Io { source, .. } => source.raw_os_error(),
        _ => None,
    };
    assert_eq!(errno, Some(rustix::io::Errno::PIPE.raw_os_error()), "{err}");
}

#[test]
fn an_overlong_path_is_refused_naming_it_before_sending() {
    let _serial = serial();
    let dir = TempDir::new("longpath");
    let sender = std::os::unix::net::UnixDatagram::unbound().unwrap();
    let files = memfds(1);
    let base = dir.path().to_str().unwrap().to_owned();
    let path_of = |len: usize| format!("{base}/{}", "x".repeat(len - base.len() - 1));
    let long = path_of(109);
    let err = send_fds_to(&sender, &long, b"x", &borrowed(&files)).unwrap_err();
    let message = err.to_string();
    match err {
        Error::PathTooLong { path, len, max } => {
            assert_eq!((path.to_str(), len, max), (Some(long.as_str()), 109, 108))
        }
        other => panic!("expected PathTooLong, got {other:?}"),
    }
    assert!(
        message.contains(&long) && message.contains("109 bytes"),
        "{message}"
    );
    // 108 bytes fit a socket address: that path gets as far as sendmsg,
    // which finds no socket there.
    let longest = path_of(108);
    match send_fds_to(&sender, &longest, b"x", &borrowed(&files)) {
        Err(Error::Io { op: "sendmsg", .. }) => {}
        other => panic!("expected sendmsg to fail for {longest:?}, got {other:?}"),
    }
}
