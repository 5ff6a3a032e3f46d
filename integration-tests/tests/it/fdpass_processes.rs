//! Descriptors between real processes: `FdHandle` export/import both ways,
//! processes that are gone, a child of another uid that is not permitted,
//! `SCM_RIGHTS` to a child on every socket type, and peer credentials of a
//! connected child.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixListener;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use nodeipc_fdpass::{
    Error, FdHandle, SCM_MAX_FD, peer_credentials, recv_fds, recv_fds_exact, require_peer_uid,
    send_fds,
};
use nodeipc_shm::Region;
use nodeipc_testkit::{NOBODY, TempDir, Watchdog, is_root, skip, spawn_child};
// rustix's `net` and `fs` features come through nodeipc-fdpass and nodeipc-shm.
use rustix::net::{AddressFamily, SocketFlags, SocketType};

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

/// Set in the child of [`scm_rights_to_a_child_process_on_every_socket_type_and_count`]:
/// the socket type it receives on (its stdin is that socket).
const SCM_CHILD: &str = "NODEIPC_IT_FDPASS_SCM_CHILD";

/// How many descriptors each message carries, in order.
const SCM_COUNTS: [usize; 4] = [1, 8, 64, SCM_MAX_FD];

/// Where the child writes in each file (the parent's text is at 0).
const CHILD_TEXT_AT: u64 = 64;

/// The socket types, by the names the child is told.
const SOCKET_TYPES: [(&str, SocketType); 3] = [
    ("stream", SocketType::STREAM),
    ("dgram", SocketType::DGRAM),
    ("seqpacket", SocketType::SEQPACKET),
];

/// The payload a batch of `count` descriptors travels with: 8 bytes.
fn scm_header(count: usize) -> Vec<u8> {
    format!("fds {count:04}").into_bytes()
}

/// The child's answer to a batch: `<count> <how many were close-on-exec>`, 9 bytes.
fn scm_reply(count: usize, cloexec: usize) -> Vec<u8> {
    format!("{count:04} {cloexec:04}").into_bytes()
}

fn parent_text(count: usize, i: usize) -> String {
    format!("parent {count} {i}")
}

fn child_text(kind: &str, count: usize, i: usize) -> String {
    format!("child {kind} {count} {i}")
}

/// Receives one message of exactly `len` payload bytes, and the descriptors
/// that came with it, on a socket of type `kind`.
fn recv_message(
    kind: SocketType,
    socket: BorrowedFd<'_>,
    len: usize,
    max_fds: usize,
) -> Result<(Vec<u8>, Vec<OwnedFd>), Error> {
    if kind == SocketType::STREAM {
        let mut buf = vec![0u8; len];
        let fds = recv_fds_exact(socket, &mut buf, max_fds)?;
        return Ok((buf, fds));
    }
    let mut buf = vec![0u8; len + 64];
    let got = recv_fds(socket, &mut buf, max_fds)?;
    buf.truncate(got.len);
    Ok((buf, got.fds))
}

/// The child's part: for each count in [`SCM_COUNTS`], receive that many
/// descriptors on stdin (a socket of type `kind`), check each is
/// close-on-exec and is the parent's file, write through it, and answer.
fn scm_child(name: &str) {
    println!(); // our lines start after the harness's "test … ..."
    let kind = SOCKET_TYPES
        .iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("unknown socket type {name:?}"))
        .1;
    let stdin = std::io::stdin();
    let socket = stdin.as_fd();
    for count in SCM_COUNTS {
        let (header, fds) = recv_message(kind, socket, 8, SCM_MAX_FD).unwrap();
        assert_eq!(header, scm_header(count), "{name}: header");
        assert_eq!(fds.len(), count, "{name}: descriptors received");
        let mut cloexec = 0;
        for (i, fd) in fds.into_iter().enumerate() {
            if rustix::io::fcntl_getfd(&fd)
                .unwrap()
                .contains(rustix::io::FdFlags::CLOEXEC)
            {
                cloexec += 1;
            }
            let file = std::fs::File::from(fd);
            let expected = parent_text(count, i);
            let mut seen = vec![0u8; expected.len()];
            file.read_exact_at(&mut seen, 0).unwrap();
            assert_eq!(
                seen,
                expected.as_bytes(),
                "{name}: descriptor {i} of {count}"
            );
            file.write_all_at(child_text(name, count, i).as_bytes(), CHILD_TEXT_AT)
                .unwrap();
        }
        println!("{name}: {count} received, {cloexec} close-on-exec");
        send_fds(socket, &scm_reply(count, cloexec), &[]).unwrap();
    }
}

/// Panics with what the child printed: it failed or stopped answering.
fn child_failed(child: nodeipc_testkit::ChildGuard, what: String) -> ! {
    let out = child.output_timeout(Duration::from_secs(20));
    panic!(
        "{what}; the child exited {}:\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn scm_rights_to_a_child_process_on_every_socket_type_and_count() {
    const TEST: &str = "scm_rights_to_a_child_process_on_every_socket_type_and_count";
    if let Ok(kind) = std::env::var(SCM_CHILD) {
        return scm_child(&kind);
    }
    let _dog = Watchdog::new(TEST, Duration::from_secs(180));
    for (name, kind) in SOCKET_TYPES {
        let (ours, theirs) =
            rustix::net::socketpair(AddressFamily::UNIX, kind, SocketFlags::CLOEXEC, None).unwrap();
        // A datagram socket never learns that its peer died: bound every wait.
        rustix::net::sockopt::set_socket_timeout(
            &ours,
            rustix::net::sockopt::Timeout::Recv,
            Some(Duration::from_secs(30)),
        )
        .unwrap();
        // The child's end becomes its stdin (std dup2s it there, without
        // close-on-exec); our copy of it closes with `command`.
        let mut command = Command::new(std::env::current_exe().unwrap());
        command
            .args([
                "--exact",
                &nodeipc_testkit::test_path(module_path!(), TEST),
                "--nocapture",
                "--test-threads=1",
            ])
            .env(SCM_CHILD, name)
            .stdin(Stdio::from(theirs))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let child = spawn_child(&mut command);
        drop(command);
        for count in SCM_COUNTS {
            let files: Vec<std::fs::File> = (0..count)
                .map(|i| {
                    let fd =
                        rustix::fs::memfd_create("scm", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
                    let file = std::fs::File::from(fd);
                    file.write_all_at(parent_text(count, i).as_bytes(), 0)
                        .unwrap();
                    file
                })
                .collect();
            let fds: Vec<BorrowedFd<'_>> = files.iter().map(AsFd::as_fd).collect();
            if let Err(e) = send_fds(&ours, &scm_header(count), &fds) {
                child_failed(child, format!("{name}, {count} fds: send: {e}"));
            }
            let reply = match recv_message(kind, ours.as_fd(), 9, 0) {
                Ok((reply, _)) => reply,
                Err(e) => child_failed(child, format!("{name}, {count} fds: no answer: {e}")),
            };
            assert_eq!(
                String::from_utf8_lossy(&reply),
                String::from_utf8_lossy(&scm_reply(count, count)),
                "{name}: <sent> <close-on-exec in the child>"
            );
            for (i, file) in files.iter().enumerate() {
                let expected = child_text(name, count, i);
                let mut seen = vec![0u8; expected.len()];
                let n = file.read_at(&mut seen, CHILD_TEXT_AT).unwrap();
                seen.truncate(n);
                assert_eq!(
                    String::from_utf8_lossy(&seen),
                    expected,
                    "{name}: the child's write through descriptor {i} of {count}"
                );
            }
        }
        drop(ours);
        let out = child.output_timeout(Duration::from_secs(30));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let context = format!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{name}: the child failed: {context}");
        for count in SCM_COUNTS {
            let line = format!("{name}: {count} received, {count} close-on-exec");
            assert!(stdout.lines().any(|l| l == line), "no `{line}`: {context}");
        }
    }
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
