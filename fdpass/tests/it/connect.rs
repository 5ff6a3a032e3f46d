//! `connect_unix`: every client connect is bounded. A server whose backlog
//! is full (stopped, wedged) costs the caller its timeout, not forever; the
//! probe `Listener::bind` makes of a socket already there never blocks.

use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::time::{Duration, Instant};

use nodeipc_fdpass::{Error, Listener, Pidfd, connect_unix, connect_unix_when_up};
use nodeipc_testkit::{TempDir, Watchdog, full_backlog_listener};

fn private_dir(tag: &str) -> TempDir {
    let dir = TempDir::new(tag);
    std::fs::set_permissions(dir.path(), PermissionsExt::from_mode(0o700)).unwrap();
    dir
}

#[test]
fn regression_a_full_backlog_times_out_in_words_instead_of_blocking() {
    let _dog = Watchdog::new("full_backlog_times_out", Duration::from_secs(20));
    let dir = private_dir("connect-full");
    let path = dir.join("sock");
    let (_listener, _held) = full_backlog_listener(&path);
    let start = Instant::now();
    let error = connect_unix(&path, Duration::from_millis(300)).unwrap_err();
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(290) && waited < Duration::from_secs(5),
        "gave up after {waited:?}"
    );
    match &error {
        Error::ConnectTimeout { waited, last, .. } => {
            assert!(*waited >= Duration::from_millis(290), "{waited:?}");
            assert_eq!(last.raw_os_error(), Some(libc::EAGAIN));
        }
        other => panic!("expected ConnectTimeout, got {other:?}"),
    }
    let text = error.to_string();
    assert!(text.contains(&*path.to_string_lossy()), "{text}");
    assert!(text.contains("backlog is full"), "{text}");
    assert!(!text.contains("os error 11"), "{text}");
    assert_eq!(
        std::io::Error::from(error).kind(),
        std::io::ErrorKind::TimedOut
    );
    // Zero tries once and does not wait (the bound leaves room for a loaded
    // machine).
    let start = Instant::now();
    assert!(matches!(
        connect_unix(&path, Duration::ZERO),
        Err(Error::ConnectTimeout { .. })
    ));
    let zero = start.elapsed();
    assert!(zero < Duration::from_secs(2), "{zero:?}");
}

#[test]
fn a_connect_gets_through_once_the_server_accepts_again() {
    let _dog = Watchdog::new("backlog_drains", Duration::from_secs(20));
    let dir = private_dir("connect-drain");
    let path = dir.join("sock");
    let (listener, held) = full_backlog_listener(&path);
    let drain = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        for _ in 0..=held.len() {
            let _ = rustix::net::accept(&listener);
        }
        (listener, held)
    });
    let stream = connect_unix(&path, Duration::from_secs(5)).unwrap();
    // Handed back blocking: callers bound their reads with SO_RCVTIMEO.
    let flags = rustix::fs::fcntl_getfl(stream.as_fd()).unwrap();
    assert!(!flags.contains(rustix::fs::OFlags::NONBLOCK));
    let fd_flags = rustix::io::fcntl_getfd(stream.as_fd()).unwrap();
    assert!(fd_flags.contains(rustix::io::FdFlags::CLOEXEC));
    drop(drain.join().unwrap());
}

#[test]
fn no_socket_and_a_stale_socket_are_errors_naming_the_path() {
    let dir = private_dir("connect-errors");
    let missing = dir.join("missing");
    let error = connect_unix(&missing, Duration::from_secs(5)).unwrap_err();
    match &error {
        Error::Connect { source, .. } => assert_eq!(source.raw_os_error(), Some(libc::ENOENT)),
        other => panic!("expected Connect, got {other:?}"),
    }
    let text = error.to_string();
    assert!(text.contains(&*missing.to_string_lossy()) && text.contains("no such socket"));

    let stale = dir.join("stale");
    drop(UnixListener::bind(&stale).unwrap());
    let start = Instant::now();
    let error = connect_unix(&stale, Duration::from_secs(30)).unwrap_err();
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "a refusal is not waited on"
    );
    match &error {
        Error::Connect { source, .. } => {
            assert_eq!(source.raw_os_error(), Some(libc::ECONNREFUSED))
        }
        other => panic!("expected Connect, got {other:?}"),
    }
    let text = error.to_string();
    assert!(text.contains(&*stale.to_string_lossy()) && text.contains("nobody listens"));

    let long = dir.join(&"x".repeat(200));
    assert!(matches!(
        connect_unix(&long, Duration::ZERO),
        Err(Error::PathTooLong { .. })
    ));
}

#[test]
fn when_up_waits_for_the_server_to_appear_within_the_timeout() {
    let _dog = Watchdog::new("when_up", Duration::from_secs(20));
    let dir = private_dir("connect-when-up");
    let path = dir.join("sock");
    let late = path.clone();
    let server = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        let listener = UnixListener::bind(&late).unwrap();
        listener.accept().unwrap()
    });
    let _client = connect_unix_when_up(&path, Duration::from_secs(5)).unwrap();
    drop(server.join().unwrap());

    let missing = dir.join("never");
    let start = Instant::now();
    let error = connect_unix_when_up(&missing, Duration::from_millis(200)).unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(5));
    match &error {
        Error::ConnectTimeout { last, .. } => assert_eq!(last.raw_os_error(), Some(libc::ENOENT)),
        other => panic!("expected ConnectTimeout, got {other:?}"),
    }
    assert!(error.to_string().contains("no such socket"), "{error}");
}

#[test]
fn regression_huge_timeouts_mean_no_deadline_not_a_panic() {
    let _dog = Watchdog::new("huge_timeouts", Duration::from_secs(20));
    let dir = private_dir("connect-huge");
    let path = dir.join("sock");
    let _listener = UnixListener::bind(&path).unwrap();
    connect_unix(&path, Duration::MAX).unwrap();
    connect_unix_when_up(&path, Duration::from_millis(u64::MAX)).unwrap();
    // Pidfd::wait_exit added its timeout to the clock unchecked.
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pidfd = Pidfd::open(child.id()).unwrap();
    assert!(pidfd.wait_exit(Duration::MAX).unwrap());
    child.wait().unwrap();
}

#[test]
fn regression_binding_over_a_live_server_with_a_full_backlog_refuses_at_once() {
    let _dog = Watchdog::new("bind_over_full_backlog", Duration::from_secs(20));
    let dir = private_dir("connect-bind-full");
    let path = dir.join("sock");
    let (_listener, _held) = full_backlog_listener(&path);
    let start = Instant::now();
    let error = Listener::bind(&path).unwrap_err();
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    assert!(
        matches!(error, Error::AlreadyServing { .. }),
        "expected AlreadyServing, got {error:?}"
    );
    assert!(path.exists(), "a live server's socket was removed");
}
