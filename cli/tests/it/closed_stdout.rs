//! Standard output a pipe whose reader has left (`nodeipc ls | head -0`):
//! each command ends its output quietly (exit 0, nothing on stderr), and
//! finishes its work: `clean` removes what it was removing.

use crate::common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{BIN, nodeipc, nodeipc_into_closed_pipe, stderr};
use nodeipc_testkit::{TempDir, Watchdog, shm_leftovers, spawn_child, unique_name};

fn assert_quiet(what: &str, out: &std::process::Output) {
    assert_eq!(out.status.code(), Some(0), "{what}: {}", stderr(out));
    assert!(out.stderr.is_empty(), "{what}: {}", stderr(out));
}

#[test]
fn regression_ls_and_clean_into_a_closed_pipe() {
    let _dog = Watchdog::new("ls clean closed pipe", Duration::from_secs(120));
    let prefix = unique_name("closed-ls");
    let created = nodeipc(
        &["shm", "create", &format!("{prefix}-a"), "--size", "4096"],
        None,
    );
    assert!(created.status.success(), "{}", stderr(&created));
    assert_quiet(
        "ls",
        &nodeipc_into_closed_pipe(&["ls", "--prefix", &prefix]),
    );
    assert_quiet(
        "clean",
        &nodeipc_into_closed_pipe(&["clean", "--prefix", &prefix]),
    );
    assert!(shm_leftovers(&prefix).is_empty(), "clean stopped early");
}

#[test]
fn regression_sem_value_and_shm_read_into_a_closed_pipe() {
    let _dog = Watchdog::new("sem shm closed pipe", Duration::from_secs(120));
    let name = unique_name("closed-sem");
    assert!(
        nodeipc(&["sem", "create", &name, "--value", "3"], None)
            .status
            .success()
    );
    let out = nodeipc_into_closed_pipe(&["sem", "value", &name]);
    let _ = nodeipc(&["sem", "unlink", &name], None);
    assert_quiet("sem value", &out);

    let name = unique_name("closed-shm");
    let region = nodeipc_shm::Region::create(&name, 3 << 20).unwrap();
    assert_quiet(
        "shm read",
        &nodeipc_into_closed_pipe(&["shm", "read", &name]),
    );
    drop(region);
}

#[test]
fn regression_monitor_status_into_a_closed_pipe() {
    let _dog = Watchdog::new("monitor status closed pipe", Duration::from_secs(120));
    let dir = TempDir::new("closed-mon");
    let socket = dir.join("rank.sock");
    let path = socket.to_str().unwrap().to_owned();
    let mut server = spawn_child(
        Command::new(BIN)
            .args(["monitor", "serve", "--socket", &path])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    let start = Instant::now();
    while !nodeipc(&["monitor", "status", "--socket", &path], None)
        .status
        .success()
    {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the monitor never answered"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = nodeipc_into_closed_pipe(&["monitor", "status", "--socket", &path]);
    common::signal(server.id(), rustix::process::Signal::TERM);
    server.wait_timeout(Duration::from_secs(10));
    assert_quiet("monitor status", &out);
}

#[test]
fn regression_demo_into_a_closed_pipe_finishes_and_cleans_up() {
    let _dog = Watchdog::new("demo closed pipe", Duration::from_secs(120));
    let out = nodeipc_into_closed_pipe(&["demo", "--workers", "1", "--requests", "10"]);
    assert_quiet("demo", &out);
}

#[test]
fn a_full_disk_is_still_an_error() {
    // Not every write error is a reader that left: /dev/full is reported.
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = spawn_child(
        Command::new(BIN)
            .args(["ls", "--prefix", "/nodeipc-test-none-"])
            .stdout(full)
            .stderr(Stdio::piped()),
    )
    .output_timeout(Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.lines().count() == 1
            && err.contains("writing to standard output")
            && err.contains("No space"),
        "{err}"
    );
}
