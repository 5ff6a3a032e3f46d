//! Descriptors between real processes: `FdHandle` export/import both ways,
//! processes that are gone, a child of another uid that is not permitted,
//! `SCM_RIGHTS` to a child, and peer credentials of a connected child.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixListener;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use nodeipc_fdpass::{Error, FdHandle, peer_credentials, require_peer_uid, send_fds};
use nodeipc_shm::Region;
use nodeipc_testkit::{NOBODY, TempDir, Watchdog, is_root, skip, spawn_child};

fn peer() -> Command {
    Command::new(env!("CARGO_BIN_EXE_peer"))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn a_handle_exported_by_a_child_is_imported_here_and_data_flows_both_ways() {
    let _dog = Watchdog::new("fd handle across processes", Duration::from_secs(30));
    let mut child = spawn_child(
        peer()
            .arg("fd-export")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped()),
    );
    let mut line = String::new();
    BufReader::new(child.child().stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let handle = FdHandle::from_bytes(&unhex(line.trim())).unwrap();
    assert_eq!(handle.pid, child.id());

    let region = Region::from_fd(handle.import().unwrap()).unwrap();
    let mut seen = [0u8; 5];
    region.read_at(0, &mut seen).unwrap();
    assert_eq!(&seen, b"child");
    region.write_at(100, b"parent").unwrap();
    child
        .child()
        .stdin
        .as_mut()
        .unwrap()
        .write_all(b"go\n")
        .unwrap();
    assert!(
        child.wait_timeout(Duration::from_secs(10)).success(),
        "the child did not see our write"
    );

    // The exporter is gone now: its handle is refused.
    match handle.import() {
        Err(Error::ProcessGone { pid, .. }) => assert_eq!(pid, handle.pid),
        other => panic!("expected ProcessGone, got {other:?}"),
    }
}

#[test]
fn a_handle_with_another_start_time_is_refused_even_while_the_pid_lives() {
    let _dog = Watchdog::new("reused pid", Duration::from_secs(30));
    let mut child = spawn_child(
        peer()
            .arg("fd-export")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped()),
    );
    let mut line = String::new();
    BufReader::new(child.child().stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let mut handle = FdHandle::from_bytes(&unhex(line.trim())).unwrap();
    // As if the pid had come around to a process started later.
    handle.start_time += 100;
    assert!(
        matches!(handle.import(), Err(Error::ProcessGone { reason, .. }) if reason.contains("later"))
    );
    child.kill();
}

#[test]
fn a_child_of_another_uid_is_not_permitted_and_told_the_ways_out() {
    let _dog = Watchdog::new("not permitted", Duration::from_secs(30));
    if !is_root() {
        skip(
            "a_child_of_another_uid_is_not_permitted",
            "needs root to drop privileges",
        );
        return;
    }
    let region = Region::anonymous(4096).unwrap();
    region.write_at(0, b"secret").unwrap();
    let handle = hex(&FdHandle::export(&region.as_fd()).unwrap().to_bytes());
    let out = spawn_child(
        peer()
            .args(["fd-import", &handle])
            .uid(NOBODY.0)
            .gid(NOBODY.1)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )
    .output_timeout(Duration::from_secs(20));
    assert!(
        !out.status.success(),
        "an unprivileged child imported root's descriptor"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    for way_out in ["not permitted", "same user", "PR_SET_PTRACER", "SCM_RIGHTS"] {
        assert!(
            stderr.contains(way_out),
            "message lacks {way_out:?}: {stderr}"
        );
    }
    assert!(out.stdout.is_empty());
}

#[test]
fn the_same_uid_child_imports_our_handle() {
    let _dog = Watchdog::new("same uid import", Duration::from_secs(30));
    let region = Region::anonymous(4096).unwrap();
    region.write_at(0, b"shared").unwrap();
    let handle = hex(&FdHandle::export(&region.as_fd()).unwrap().to_bytes());
    let out = spawn_child(
        peer()
            .args(["fd-import", &handle])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )
    .output_timeout(Duration::from_secs(20));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, b"shared");
}

#[test]
fn scm_rights_to_a_child_process_253_regions() {
    let _dog = Watchdog::new("scm rights to a child", Duration::from_secs(60));
    let dir = TempDir::new("scm");
    let path = dir.join("sock");
    let listener = UnixListener::bind(&path).unwrap();
    let mut child = spawn_child(peer().args(["scm-recv", path.to_str().unwrap(), "253"]));
    let (mut socket, _) = listener.accept().unwrap();
    let regions: Vec<Region> = (0..253).map(|_| Region::anonymous(4096).unwrap()).collect();
    let fds: Vec<_> = regions.iter().map(|r| r.as_fd()).collect();
    send_fds(&socket, b"files", &fds).unwrap();
    let mut done = [0u8; 4];
    socket.read_exact(&mut done).unwrap();
    assert_eq!(&done, b"done");
    for (i, region) in regions.iter().enumerate() {
        let expected = format!("child {i}");
        let mut seen = vec![0u8; expected.len()];
        region.read_at(0, &mut seen).unwrap();
        assert_eq!(seen, expected.as_bytes());
    }
    assert!(child.wait_timeout(Duration::from_secs(10)).success());
}

#[test]
fn peer_credentials_of_a_connected_child_match_its_pid_and_uid() {
    let _dog = Watchdog::new("peer credentials", Duration::from_secs(30));
    let dir = TempDir::new("cred");
    let path = dir.join("sock");
    let listener = UnixListener::bind(&path).unwrap();
    let child = spawn_child(peer().args(["connect-and-wait", path.to_str().unwrap()]));
    let (socket, _) = listener.accept().unwrap();
    let cred = peer_credentials(&socket).unwrap();
    assert_eq!(cred.pid, child.id());
    assert_eq!(cred.uid, rustix::process::geteuid().as_raw());
    assert_eq!(require_peer_uid(&socket, &[]).unwrap(), cred);
    drop(socket);
    drop(child);

    if !is_root() {
        return;
    }
    // Let nobody traverse into the directory to reach the socket.
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o711),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let stranger = spawn_child(
        peer()
            .args(["connect-and-wait", path.to_str().unwrap()])
            .uid(NOBODY.0)
            .gid(NOBODY.1),
    );
    let (socket, _) = listener.accept().unwrap();
    match require_peer_uid(&socket, &[]) {
        Err(Error::PeerRefused { pid, uid, .. }) => {
            assert_eq!((pid, uid), (stranger.id(), NOBODY.0))
        }
        other => panic!("expected PeerRefused, got {other:?}"),
    }
    assert_eq!(
        require_peer_uid(&socket, &[NOBODY.0]).unwrap().uid,
        NOBODY.0
    );
}
