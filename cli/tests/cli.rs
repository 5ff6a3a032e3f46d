//! The `nodeipc` command line as other programs drive it: exit codes, one
//! line on stderr, and nothing left behind.

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use nodeipc_shm::Region;
use nodeipc_testkit::{Watchdog, shm_leftovers, spawn_child, unique_name};

fn nodeipc(args: &[&str]) -> Output {
    spawn_child(
        Command::new(env!("CARGO_BIN_EXE_nodeipc"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )
    .output_timeout(Duration::from_secs(60))
}

fn nodeipc_with_stdin(args: &[&str], input: &[u8]) -> Output {
    let mut guard = spawn_child(
        Command::new(env!("CARGO_BIN_EXE_nodeipc"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    guard
        .child()
        .stdin
        .take()
        .unwrap()
        .write_all(input)
        .unwrap();
    guard.output_timeout(Duration::from_secs(60))
}

fn assert_ok(out: &Output) {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn assert_one_line_error(out: &Output, code: i32, fragment: &str) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "not one line: {stderr:?}");
    assert!(stderr.contains(fragment), "{stderr:?} lacks {fragment:?}");
}

#[test]
fn shm_create_write_read_unlink() {
    let _dog = Watchdog::new("shm_create_write_read_unlink", Duration::from_secs(120));
    let name = unique_name("cli-shm");
    assert_ok(&nodeipc(&["shm", "create", &name, "--size", "4096"]));
    assert_ok(&nodeipc_with_stdin(
        &["shm", "write", &name, "--offset", "100"],
        b"hello region",
    ));
    let out = nodeipc(&["shm", "read", &name, "--offset", "100", "--len", "12"]);
    assert_ok(&out);
    assert_eq!(out.stdout, b"hello region");
    let whole = nodeipc(&["shm", "read", &name]);
    assert_eq!(whole.stdout.len(), 4096);
    assert_one_line_error(
        &nodeipc_with_stdin(
            &["shm", "write", &name, "--offset", "4090"],
            b"too long for the end",
        ),
        1,
        "outside",
    );
    assert_ok(&nodeipc(&["shm", "unlink", &name]));
    assert!(shm_leftovers(&name).is_empty());
    assert_one_line_error(&nodeipc(&["shm", "unlink", &name]), 1, "does not exist");
}

#[test]
fn bad_names_and_sizes_fail_with_one_line() {
    assert_one_line_error(
        &nodeipc(&["shm", "create", "no-slash", "--size", "10"]),
        1,
        "must start with '/'",
    );
    let name = unique_name("cli-zero");
    assert_one_line_error(
        &nodeipc(&["shm", "create", &name, "--size", "0"]),
        1,
        "at least one byte",
    );
    assert!(shm_leftovers(&name).is_empty());
}

#[test]
fn sem_create_post_wait_value_unlink_and_timeout_exit_3() {
    let _dog = Watchdog::new("sem cli", Duration::from_secs(120));
    let name = unique_name("cli-sem");
    assert_ok(&nodeipc(&["sem", "create", &name, "--value", "1"]));
    assert_ok(&nodeipc(&["sem", "post", &name]));
    assert_eq!(nodeipc(&["sem", "value", &name]).stdout, b"2\n");
    assert_ok(&nodeipc(&["sem", "wait", &name, "--timeout-ms", "100"]));
    assert_ok(&nodeipc(&["sem", "wait", &name]));
    assert_one_line_error(
        &nodeipc(&["sem", "wait", &name, "--timeout-ms", "50"]),
        3,
        "timed out",
    );
    assert_ok(&nodeipc(&["sem", "unlink", &name]));
    assert!(shm_leftovers(&name).is_empty());
}

#[test]
fn ls_lists_and_clean_removes_only_what_nobody_uses() {
    let _dog = Watchdog::new("ls and clean", Duration::from_secs(120));
    let prefix = unique_name("cli-clean");
    let live = Region::create(&format!("{prefix}-live"), 8192).unwrap();
    assert_ok(&nodeipc(&[
        "shm",
        "create",
        &format!("{prefix}-stale"),
        "--size",
        "4096",
    ]));
    assert_ok(&nodeipc(&["sem", "create", &format!("{prefix}-sem")]));

    let out = nodeipc(&["ls", "--prefix", &prefix]);
    assert_ok(&out);
    let listing = String::from_utf8_lossy(&out.stdout);
    assert_eq!(listing.lines().count(), 4, "{listing}");
    assert!(
        listing.contains(&std::process::id().to_string()),
        "the live region shows no user: {listing}"
    );
    assert!(listing.contains("semaphore"), "{listing}");

    let dry = nodeipc(&["clean", "--prefix", &prefix, "--dry-run"]);
    assert_ok(&dry);
    assert!(String::from_utf8_lossy(&dry.stdout).contains("2 would remove, 1 kept"));
    assert_eq!(
        shm_leftovers(&prefix).len(),
        3,
        "a dry run removed something"
    );

    let done = nodeipc(&["clean", "--prefix", &prefix]);
    assert_ok(&done);
    let report = String::from_utf8_lossy(&done.stdout);
    assert!(
        report.contains("2 removed, 1 kept") && report.contains("in use by pid"),
        "{report}"
    );
    assert_eq!(
        shm_leftovers(&prefix),
        vec![format!("{}-live", &prefix[1..])]
    );
    drop(live);
}

#[test]
fn demo_runs_the_whole_pipeline_reports_and_leaves_nothing() {
    let _dog = Watchdog::new("demo", Duration::from_secs(120));
    for extra in [
        &["--depth", "1"][..],
        &["--depth", "4", "--sems", "named"][..],
    ] {
        let demo = spawn_child(
            Command::new(env!("CARGO_BIN_EXE_nodeipc"))
                .args([
                    "demo",
                    "--workers",
                    "3",
                    "--requests",
                    "2000",
                    "--payload",
                    "256",
                ])
                .args(extra)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped()),
        );
        let pid = demo.id();
        let out = demo.output_timeout(Duration::from_secs(100));
        assert_ok(&out);
        let summary = String::from_utf8_lossy(&out.stdout);
        for field in [
            "3 workers logged on",
            "4 ranks met at a barrier",
            "requests/s",
            "latency p50",
            "latency p99",
            "heartbeats     2",
            "left behind    nothing",
        ] {
            assert!(
                summary.contains(field),
                "summary lacks {field:?}:\n{summary}"
            );
        }
        // Every worker heartbeat at least once a request.
        let beats = summary.lines().find(|l| l.contains("heartbeats")).unwrap();
        let counts: Vec<u64> = beats
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        assert_eq!(counts.len(), 3, "{beats}");
        assert!(counts.iter().all(|&c| c >= 2000), "{beats}");
        assert!(
            shm_leftovers(&pid.to_string()).is_empty(),
            "the demo left a name behind"
        );
        assert!(
            std::fs::read_dir("/tmp").unwrap().flatten().all(|e| !e
                .file_name()
                .to_string_lossy()
                .contains(&format!("demo-{pid}-"))),
            "the demo left its directory"
        );
    }
}

#[test]
fn demo_refuses_bad_arguments_with_one_line() {
    let out = nodeipc(&["demo", "--workers", "0"]);
    assert_eq!(out.status.code(), Some(2), "a usage error");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr:?}");
    assert!(stderr.contains("--workers"), "{stderr}");
    assert!(stderr.contains("1..=64"), "names the range: {stderr}");
    let out = nodeipc(&["frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr:?}");
    assert!(stderr.contains("frobnicate"), "{stderr}");
}
