//! `Listener::bind` refuses the traps around a socket path and replaces a
//! stale socket; the socket file is 0600 and removed on drop. A peer's
//! pidfd names the process that connected.

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::{Duration, Instant};

use nodeipc_fdpass::{Error, Listener, peer_pidfd};
use nodeipc_testkit::{TempDir, Watchdog, skip, spawn_child, this_test_in_a_child};
use rustix::io::Errno;

fn private_dir(tag: &str) -> TempDir {
    let dir = TempDir::new(tag);
    std::fs::set_permissions(dir.path(), PermissionsExt::from_mode(0o700)).unwrap();
    dir
}

#[test]
fn binds_0600_accepts_with_credentials_and_removes_on_drop() {
    let dir = private_dir("listen");
    let path = dir.join("sock");
    let listener = Listener::bind(&path).unwrap();
    let meta = std::fs::symlink_metadata(&path).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert!(listener.accept().unwrap().is_none(), "nothing pending yet");
    let _client = UnixStream::connect(&path).unwrap();
    let (_stream, peer) = listener.accept().unwrap().unwrap();
    assert_eq!(peer.pid, std::process::id());
    drop(listener);
    assert!(!path.exists(), "the socket file outlived its listener");
}

#[test]
fn a_stale_socket_is_replaced_and_a_live_one_refused() {
    let dir = private_dir("stale");
    let path = dir.join("sock");
    drop(UnixListener::bind(&path).unwrap()); // a dead server's file
    assert!(path.exists());
    let listener = Listener::bind(&path).unwrap();
    assert!(matches!(
        Listener::bind(&path),
        Err(Error::AlreadyServing { .. })
    ));
    drop(listener);
}

#[test]
fn a_symlink_or_a_file_in_the_sockets_place_is_refused() {
    let dir = private_dir("traps");
    let target = dir.join("elsewhere");
    std::fs::write(&target, b"precious").unwrap();
    let link = dir.join("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    assert!(matches!(
        Listener::bind(&link),
        Err(Error::SymlinkRefused { .. })
    ));
    assert!(matches!(
        Listener::bind(&target),
        Err(Error::NotASocket { .. })
    ));
    assert_eq!(
        std::fs::read(&target).unwrap(),
        b"precious",
        "the file was touched"
    );
}

#[test]
fn a_directory_others_can_write_is_refused() {
    let dir = TempDir::new("shared-dir");
    std::fs::set_permissions(dir.path(), PermissionsExt::from_mode(0o777)).unwrap();
    match Listener::bind(&dir.join("sock")) {
        Err(Error::UnsafeDirectory { mode, .. }) => assert_eq!(mode, 0o777),
        other => panic!("expected UnsafeDirectory, got {other:?}"),
    }
    let long = dir.join(&"x".repeat(120));
    assert!(matches!(
        Listener::bind(&long),
        Err(Error::PathTooLong { max: 107, .. })
    ));
}

/// Set in the child of the umask test: the directory to bind in.
const UMASK_CHILD: &str = "NODEIPC_FDPASS_TEST_UMASK_CHILD";

/// Regression: the socket file was made by `bind` with the umask's mode
/// (0777 under umask 000) and tightened by a `chmod` of its path after, a
/// window in which it was open to anyone who could reach the directory.
/// Made 0600 on its descriptor before `bind`, it needs no chmod by path.
#[test]
fn regression_the_socket_is_0600_from_its_bind_under_umask_000() {
    if let Ok(dir) = std::env::var(UMASK_CHILD) {
        rustix::process::umask(rustix::fs::Mode::empty());
        nodeipc_testkit::deny_path_chmod();
        let listener = Listener::bind(&std::path::Path::new(&dir).join("sock")).expect("bind");
        let mode = std::fs::symlink_metadata(listener.path())
            .unwrap()
            .permissions()
            .mode();
        println!("\nchild socket mode {:o}", mode & 0o7777);
        return;
    }
    let _dog = nodeipc_testkit::Watchdog::new("listener umask", std::time::Duration::from_secs(60));
    let dir = private_dir("listener-umask");
    let out = nodeipc_testkit::spawn_child(
        nodeipc_testkit::this_test_in_a_child(&nodeipc_testkit::test_path(
            module_path!(),
            "regression_the_socket_is_0600_from_its_bind_under_umask_000",
        ))
        .env(UMASK_CHILD, dir.path()),
    )
    .output_timeout(std::time::Duration::from_secs(30));
    let context = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "child failed: {context}");
    assert!(context.contains("child socket mode 600"), "{context}");
}

/// Set in the child of [`peer_pidfd_is_the_process_that_connected`]: the
/// socket it connects to.
const CONNECTING_CHILD: &str = "NODEIPC_FDPASS_TEST_PEER_PIDFD_CHILD";

/// `peer_pidfd` (`SO_PEERPIDFD`) names the process that connected — a child
/// here, not the listener's own process — and sees it die.
#[test]
fn peer_pidfd_is_the_process_that_connected() {
    const TEST: &str = "peer_pidfd_is_the_process_that_connected";
    if let Some(path) = std::env::var_os(CONNECTING_CHILD) {
        let _stream = UnixStream::connect(path).unwrap();
        // Held until the parent kills us.
        std::thread::sleep(Duration::from_secs(60));
        return;
    }
    let _dog = Watchdog::new(TEST, Duration::from_secs(60));
    let dir = private_dir("peer-pidfd");
    let path = dir.join("sock");
    let listener = Listener::bind(&path).unwrap();
    let mut child = spawn_child(
        this_test_in_a_child(&nodeipc_testkit::test_path(module_path!(), TEST))
            .env(CONNECTING_CHILD, &path),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let (stream, peer) = loop {
        if let Some(accepted) = listener.accept().unwrap() {
            break accepted;
        }
        assert!(Instant::now() < deadline, "the child never connected");
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(peer.pid, child.id());
    let pidfd = match peer_pidfd(&stream) {
        Ok(pidfd) => pidfd,
        Err(Error::Io { source, .. })
            if source.raw_os_error() == Some(Errno::NOPROTOOPT.raw_os_error()) =>
        {
            skip(TEST, "this kernel has no SO_PEERPIDFD (Linux 6.5)");
            return;
        }
        Err(e) => panic!("peer_pidfd: {e}"),
    };
    assert_eq!(pidfd.pid(), child.id());
    assert!(pidfd.is_alive());
    child.kill_unreaped(Duration::from_secs(30));
    assert!(
        pidfd.has_exited().unwrap(),
        "a dead peer's pidfd says it exited"
    );
}
