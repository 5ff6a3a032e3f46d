//! Reading `/proc` when out of descriptors: the failure is reported as
//! itself (an error naming the pid, the file and the errno), never as the
//! death of the process we looked at.
//!
//! Each check runs in a child (this test binary again) whose descriptor
//! table is full, so the other tests keep their descriptors.

use std::process::Command;
use std::time::Duration;

use nodeipc_fdpass::{
    Error, FdHandle, Identity, PeerWatch, Pidfd, open_verified, peer_alive, process_start_time,
    process_stat,
};
use nodeipc_testkit::{FullFdTable, Watchdog, spawn_child};
use rustix::io::Errno;

/// Set in the child: the pid of a live process to look at.
const CHILD: &str = "NODEIPC_FDPASS_TEST_PROC_READS_CHILD";

/// What an error is, in one line the parent can check.
fn describe<T>(result: Result<T, Error>) -> String {
    match result {
        Ok(_) => "ok".to_owned(),
        Err(e @ Error::ProcessIo { .. }) => format!("io: {e}"),
        Err(e @ Error::ProcessGone { .. }) => format!("gone: {e}"),
        Err(e) => format!("other: {e}"),
    }
}

fn child(target: u32) {
    println!(); // our lines start after the harness's "test … ..."
    let start = process_start_time(target).unwrap();
    // No free slot: our own start time (never read yet in this process), the
    // target's, and a pidfd for it all fail.
    let table = FullFdTable::fill(0);
    let export = FdHandle::export(&std::io::stdin()).map(drop);
    let read = process_start_time(target);
    // The monitor's parent check reads the same file through the same reader.
    let stat = process_stat(target);
    // The liveness policy: no pidfd, so no answer; never "dead".
    let joining = peer_alive(target, 0);
    drop(table);
    // One free slot: the pidfd opens, reading the start time finds none.
    let table = FullFdTable::fill(1);
    let verified = open_verified(target, start).map(drop);
    let alive = peer_alive(target, start);
    let watched = PeerWatch::new().alive(Identity {
        pid: target,
        start_time: start,
    });
    drop(table);
    println!("export: {}", describe(export));
    println!("start time: {}", describe(read));
    println!("verified: {}", describe(verified));
    println!("stat: {}", describe(stat));
    println!("joining: {}", describe(joining));
    println!("alive: {}", describe(alive));
    println!("watched: {}", describe(watched));
    // With descriptors back, the target is found alive and the same.
    let pidfd = open_verified(target, start).unwrap();
    println!("alive after: {}", !pidfd.has_exited().unwrap());
    println!("parent after: {}", process_stat(target).unwrap().ppid);
}

#[test]
fn regression_a_failed_proc_read_is_an_error_not_a_death() {
    if let Some(target) = std::env::var(CHILD).ok().and_then(|v| v.parse().ok()) {
        return child(target);
    }
    let _dog = Watchdog::new("proc reads out of descriptors", Duration::from_secs(60));
    let mut live = spawn_child(Command::new("sleep").arg("30"));
    let target = live.id();
    let out = spawn_child(
        nodeipc_testkit::this_test_in_a_child(&nodeipc_testkit::test_path(
            module_path!(),
            "regression_a_failed_proc_read_is_an_error_not_a_death",
        ))
        .env(CHILD, target.to_string()),
    )
    .output_timeout(Duration::from_secs(30));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let context = format!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the child failed: {context}");
    let emfile = std::io::Error::from_raw_os_error(Errno::MFILE.raw_os_error());
    for expected in [
        "export: io: read /proc/self/stat failed for process".to_owned(),
        format!("start time: io: read /proc/<pid>/stat failed for process {target}: {emfile}"),
        format!("verified: io: read /proc/<pid>/stat failed for process {target}: {emfile}"),
        format!("stat: io: read /proc/<pid>/stat failed for process {target}: {emfile}"),
        format!("joining: io: pidfd_open failed for process {target}: {emfile}"),
        format!("alive: io: read /proc/<pid>/stat failed for process {target}: {emfile}"),
        format!("watched: io: read /proc/<pid>/stat failed for process {target}: {emfile}"),
        "alive after: true".to_owned(),
        format!("parent after: {}", std::process::id()),
    ] {
        assert!(
            stdout.lines().any(|l| l.starts_with(&expected)),
            "expected `{expected}`: {context}"
        );
    }
    assert!(
        stdout.contains(&emfile.to_string()) && !stdout.contains("gone:"),
        "{context}"
    );
    live.kill();
}

#[test]
fn a_process_that_exited_is_gone_and_its_pidfd_says_so() {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    let start = process_start_time(pid).unwrap_or(0);
    let pidfd = Pidfd::open(pid).ok();
    child.wait().unwrap();
    if let Some(pidfd) = pidfd {
        assert!(pidfd.has_exited().unwrap());
        assert!(!pidfd.is_alive());
    }
    assert!(matches!(
        process_start_time(pid),
        Err(Error::ProcessGone { .. })
    ));
    assert!(matches!(process_stat(pid), Err(Error::ProcessGone { .. })));
    assert!(matches!(
        open_verified(pid, start),
        Err(Error::ProcessGone { .. })
    ));
}
