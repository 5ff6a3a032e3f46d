//! `FdHandle`, `Pidfd` and peer credentials within one process; the
//! cross-process cases live in `integration-tests/tests/it/fdpass_processes.rs`.

use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nodeipc_fdpass::{
    Error, FdHandle, ForeignFd, Pidfd, Transport, peer_credentials, pidfd_getfd_available,
    require_peer_uid,
};
use nodeipc_testkit::spawn_child;
use proptest::prelude::*;

#[test]
fn export_import_round_trip_shares_the_open_file() {
    let (mut reader, writer) = std::io::pipe().unwrap();
    let handle = FdHandle::export(&writer).unwrap();
    assert_eq!(handle.pid, std::process::id());
    let bytes = handle.to_bytes();
    assert_eq!(bytes.len(), FdHandle::SIZE);
    let copy = FdHandle::from_bytes(&bytes).unwrap().import().unwrap();
    std::fs::File::from(copy).write_all(b"imported").unwrap();
    drop(writer);
    let mut text = String::new();
    reader.read_to_string(&mut text).unwrap();
    assert_eq!(text, "imported");
}

#[test]
fn a_closed_descriptor_is_no_such_fd() {
    // The kernel hands out the lowest free number and this process holds a
    // handful, so a number just under the soft limit (capped, to keep the
    // descriptor table small) stays free once closed: no other test thread
    // can be given it before the import below.
    let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX);
    let min = soft.min(4096).saturating_sub(64);
    assert!(
        min >= 256,
        "RLIMIT_NOFILE soft limit {soft} leaves no room for a descriptor no thread reaches"
    );
    let (reader, _writer) = std::io::pipe().unwrap();
    let high = rustix::io::fcntl_dupfd_cloexec(&reader, min as i32).unwrap();
    let number = high.as_raw_fd();
    assert!(
        number >= min as i32,
        "asked for at least {min}, got {number}"
    );
    let handle = FdHandle::export(&high).unwrap();
    assert_eq!(handle.fd.raw(), number);
    // While it is open the handle imports: the refusal below is about the close.
    drop(handle.import().unwrap());
    drop(high);
    match handle.import() {
        Err(Error::NoSuchFd { pid, fd }) => assert_eq!((pid, fd), (std::process::id(), number)),
        other => panic!("expected NoSuchFd for closed descriptor {number}, got {other:?}"),
    }
}

#[test]
fn a_wrong_start_time_is_refused_as_a_reused_pid() {
    let (reader, _writer) = std::io::pipe().unwrap();
    let mut handle = FdHandle::export(&reader).unwrap();
    handle.start_time += 1;
    match handle.import() {
        Err(Error::ProcessGone { pid, reason }) => {
            assert_eq!(pid, std::process::id());
            assert!(reason.contains("started later"), "{reason}");
        }
        other => panic!("expected ProcessGone, got {other:?}"),
    }
}

#[test]
fn from_bytes_names_what_is_wrong() {
    let good = FdHandle::export(&std::io::stdin()).unwrap().to_bytes();
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (good[..10].to_vec(), "10 bytes"),
        (
            {
                let mut b = good;
                b[0] = b'X';
                b.to_vec()
            },
            "magic",
        ),
        (
            {
                let mut b = good;
                b[4] = 9;
                b.to_vec()
            },
            "version",
        ),
        (
            {
                let mut b = good;
                b[7] = 1;
                b.to_vec()
            },
            "reserved",
        ),
        (
            {
                let mut b = good;
                b[8..12].copy_from_slice(&0u32.to_le_bytes());
                b.to_vec()
            },
            "pid 0",
        ),
        (
            {
                let mut b = good;
                b[12..16].copy_from_slice(&(-3i32).to_le_bytes());
                b.to_vec()
            },
            "negative",
        ),
    ];
    for (bytes, fragment) in cases {
        match FdHandle::from_bytes(&bytes) {
            Err(Error::BadHandle { reason }) => {
                assert!(reason.contains(fragment), "{reason:?} lacks {fragment:?}")
            }
            other => panic!("expected BadHandle ({fragment}), got {other:?}"),
        }
    }
}

proptest! {
    #[test]
    fn from_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let _ = FdHandle::from_bytes(&bytes);
    }

    #[test]
    fn to_bytes_from_bytes_round_trips(pid in 1u32..=i32::MAX as u32, fd in 0i32.., start in any::<u64>()) {
        let handle = FdHandle { pid, fd: ForeignFd::new(fd), start_time: start };
        prop_assert_eq!(FdHandle::from_bytes(&handle.to_bytes()).unwrap(), handle);
    }
}

#[test]
fn pidfd_of_ourselves_is_alive_and_a_bad_pid_is_gone() {
    let me = Pidfd::open(std::process::id()).unwrap();
    assert!(me.is_alive());
    assert_eq!(me.pid(), std::process::id());
    let start = Instant::now();
    assert!(!me.wait_exit(Duration::from_millis(50)).unwrap());
    assert!(start.elapsed() >= Duration::from_millis(50));
    assert!(matches!(Pidfd::open(0), Err(Error::ProcessGone { .. })));
    assert!(matches!(
        Pidfd::open(u32::MAX),
        Err(Error::ProcessGone { .. })
    ));
}

#[test]
fn pidfd_sees_a_child_exit_and_signals_it() {
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let pidfd = Pidfd::open(child.id()).unwrap();
    assert!(pidfd.is_alive());
    pidfd.send_signal(nodeipc_fdpass::Signal::TERM).unwrap();
    assert!(pidfd.wait_exit(Duration::from_secs(10)).unwrap());
    assert!(!pidfd.is_alive());
    child.wait().unwrap();
    // Reaped: the pid may be anyone's now, but the pidfd still means the dead child.
    assert!(matches!(
        pidfd.send_signal(nodeipc_fdpass::Signal::TERM),
        Err(Error::ProcessGone { .. })
    ));
}

#[test]
fn the_probe_says_pidfd_for_ourselves() {
    assert!(pidfd_getfd_available(std::process::id()));
    assert_eq!(Transport::probe(std::process::id()), Transport::Pidfd);
    assert_eq!(Transport::probe(0), Transport::ScmRights);
}

#[test]
fn peer_credentials_of_a_socket_pair_are_ours() {
    let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
    let cred = peer_credentials(&a).unwrap();
    assert_eq!(cred.pid, std::process::id());
    assert_eq!(cred.uid, rustix::process::geteuid().as_raw());
    assert_eq!(cred.gid, rustix::process::getegid().as_raw());
    assert_eq!(require_peer_uid(a.as_fd(), &[]).unwrap(), cred);
}

/// Set in the child of [`pidfd_failures_name_the_process_and_the_descriptor`].
const FULL_TABLE_CHILD: &str = "NODEIPC_FDPASS_TEST_FULL_TABLE_CHILD";

/// The child's part: with its descriptor table full (`EMFILE`), opening a
/// pidfd and importing a descriptor fail; print what they said.
fn full_table_child() {
    let me = std::process::id();
    let pidfd = Pidfd::open(me).unwrap();
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    rustix::process::setrlimit(
        rustix::process::Resource::Nofile,
        rustix::process::Rlimit {
            current: Some(256),
            maximum: limit.maximum,
        },
    )
    .unwrap();
    let mut filler: Vec<OwnedFd> = Vec::new();
    let full = loop {
        match rustix::io::fcntl_dupfd_cloexec(std::io::stdin(), 0) {
            Ok(fd) => filler.push(fd),
            Err(e) => break e,
        }
    };
    let open = Pidfd::open(me).map(drop);
    let import = pidfd.get_fd(ForeignFd::new(0)).map(drop);
    drop(filler);
    assert_eq!(full, rustix::io::Errno::MFILE, "the table did not fill up");
    for (what, result) in [("open", open), ("get_fd", import)] {
        match result {
            Err(err @ Error::ProcessIo { .. }) => println!("child {what}: {err}"),
            other => println!("child {what}: not ProcessIo: {other:?}"),
        }
    }
}

#[test]
fn pidfd_failures_name_the_process_and_the_descriptor() {
    if std::env::var_os(FULL_TABLE_CHILD).is_some() {
        println!(); // our lines start after the harness's "test … ..."
        full_table_child();
        return;
    }
    let child = spawn_child(
        Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                &nodeipc_testkit::test_path(
                    module_path!(),
                    "pidfd_failures_name_the_process_and_the_descriptor",
                ),
                "--nocapture",
                "--test-threads=1",
            ])
            .env(FULL_TABLE_CHILD, "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    let pid = child.id();
    let out = child.output_timeout(Duration::from_secs(30));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let context = format!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the child failed: {context}");
    let emfile = std::io::Error::from_raw_os_error(rustix::io::Errno::MFILE.raw_os_error());
    for expected in [
        format!("child open: pidfd_open failed for process {pid}: {emfile}"),
        format!("child get_fd: pidfd_getfd failed for process {pid}, descriptor 0: {emfile}"),
    ] {
        assert!(
            stdout.lines().any(|l| l == expected),
            "expected `{expected}`: {context}"
        );
    }
}
