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
    let timed_out = nodeipc(&["sem", "wait", &name, "--timeout-ms", "50"]);
    assert_one_line_error(&timed_out, 3, "timed out after ");
    // The time in words ("52 ms"), not Rust's debug form ("52.117335ms").
    let stderr = String::from_utf8_lossy(&timed_out.stderr);
    let said = stderr
        .split("timed out after ")
        .nth(1)
        .and_then(|rest| rest.split(" waiting").next())
        .unwrap();
    let (number, unit) = said.split_once(' ').unwrap();
    assert!(
        unit == "ms" && number.parse::<u64>().is_ok_and(|ms| ms >= 50),
        "{stderr}"
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
    for (extra, sems) in [
        (&["--depth", "1"][..], "in-region semaphores"),
        (&["--depth", "4", "--sems", "named"][..], "named semaphores"),
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
            sems,
        ] {
            assert!(
                summary.contains(field),
                "summary lacks {field:?}:\n{summary}"
            );
        }
        // Names as the command line spells them, never a Debug form.
        assert!(
            summary.contains("(fd transport pidfd_getfd)")
                || summary.contains("(fd transport SCM_RIGHTS)"),
            "{summary}"
        );
        let elapsed = summary.lines().find(|l| l.contains("requests/s")).unwrap();
        assert!(
            elapsed.ends_with(" s)") || elapsed.ends_with(" ms)"),
            "elapsed time not in words: {elapsed}"
        );
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

// --- `nodeipc sem` against hostile files and absurd numbers -----------------
// (self-contained: helpers prefixed `sem_hostile_`)

/// `nodeipc ARGS`, failing the test if it runs past 10 s (a hang).
fn sem_hostile_run(args: &[&str]) -> Output {
    spawn_child(
        Command::new(env!("CARGO_BIN_EXE_nodeipc"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )
    .output_timeout(Duration::from_secs(10))
}

fn sem_hostile_file(name: &str) -> String {
    format!("/dev/shm/sem.{}", &name[1..])
}

/// Removes whatever sits at a semaphore's name when dropped.
struct SemHostileCleanup(String);

impl Drop for SemHostileCleanup {
    fn drop(&mut self) {
        let path = sem_hostile_file(&self.0);
        if std::fs::remove_file(&path).is_err() {
            let _ = std::fs::remove_dir(&path);
        }
    }
}

/// A 0600 file of ours at `name` holding `bytes`.
fn sem_hostile_plant_file(name: &str, bytes: &[u8]) {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(sem_hostile_file(name))
        .unwrap()
        .write_all(bytes)
        .unwrap();
}

/// `struct new_sem` as glibc lays it out on a 64-bit little-endian machine.
fn sem_hostile_words(value: u32, waiters: u32, private: i32) -> Vec<u8> {
    let mut bytes = vec![0u8; 32];
    bytes[..4].copy_from_slice(&value.to_le_bytes());
    bytes[4..8].copy_from_slice(&waiters.to_le_bytes());
    bytes[8..12].copy_from_slice(&private.to_le_bytes());
    bytes
}

#[test]
fn regression_sem_commands_refuse_a_fifo_at_once_naming_it() {
    // Before the fix, `sem wait --timeout-ms 100` blocked for ever in the
    // open of a FIFO any user can plant (mode 0666, here as nobody).
    let _dog = Watchdog::new("sem cli fifo", Duration::from_secs(60));
    let name = unique_name("cli-sem-fifo");
    let _cleanup = SemHostileCleanup(name.clone());
    let mut mkfifo = Command::new("mkfifo");
    mkfifo.args(["-m", "0666", &sem_hostile_file(&name)]);
    if nodeipc_testkit::is_root() {
        use std::os::unix::process::CommandExt;
        let (uid, gid) = nodeipc_testkit::NOBODY;
        mkfifo.uid(uid).gid(gid);
    }
    assert!(
        spawn_child(&mut mkfifo)
            .wait_timeout(Duration::from_secs(10))
            .success()
    );
    for args in [
        &["sem", "wait", &name, "--timeout-ms", "100"][..],
        &["sem", "wait", &name][..],
        &["sem", "post", &name][..],
        &["sem", "value", &name][..],
    ] {
        let start = std::time::Instant::now();
        assert_one_line_error(&sem_hostile_run(args), 1, "is a FIFO, not a regular file");
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{args:?} took {:?}",
            start.elapsed()
        );
    }
}

#[test]
fn regression_sem_commands_name_a_directory_rather_than_its_mode() {
    let name = unique_name("cli-sem-dir");
    let _cleanup = SemHostileCleanup(name.clone());
    std::fs::create_dir(sem_hostile_file(&name)).unwrap();
    let out = sem_hostile_run(&["sem", "value", &name]);
    assert_one_line_error(&out, 1, "is a directory, not a regular file");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("mode"));
}

#[test]
fn regression_sem_commands_on_an_empty_file_exit_1_not_sigbus() {
    let name = unique_name("cli-sem-empty");
    let _cleanup = SemHostileCleanup(name.clone());
    sem_hostile_plant_file(&name, b"");
    for args in [
        &["sem", "value", &name][..],
        &["sem", "post", &name][..],
        &["sem", "wait", &name, "--timeout-ms", "100"][..],
    ] {
        assert_one_line_error(&sem_hostile_run(args), 1, "holds 0 bytes");
    }
}

#[test]
fn regression_sem_commands_on_corrupt_words_exit_1_not_abort() {
    // Before the fix, glibc aborted `sem post` and `sem wait` (exit 134) on
    // the first of these.
    let _dog = Watchdog::new("sem cli corrupt", Duration::from_secs(60));
    for (words, fragment) in [
        (sem_hostile_words(0, 1, 0x1234), "`private` word is 0x1234"),
        (sem_hostile_words(0, 0xdead_beef, 128), "waiter count is"),
        (
            sem_hostile_words(0x8000_0000, 0, 128),
            "above SEM_VALUE_MAX",
        ),
    ] {
        let name = unique_name("cli-sem-corrupt");
        let _cleanup = SemHostileCleanup(name.clone());
        sem_hostile_plant_file(&name, &words);
        for args in [
            &["sem", "post", &name][..],
            &["sem", "wait", &name][..],
            &["sem", "wait", &name, "--timeout-ms", "100"][..],
            &["sem", "value", &name][..],
        ] {
            let out = sem_hostile_run(args);
            assert_one_line_error(&out, 1, fragment);
            assert_one_line_error(&out, 1, "is corrupt");
        }
    }
}

#[test]
fn sem_numbers_past_any_limit_are_refused_or_honoured_never_a_panic() {
    let _dog = Watchdog::new("sem cli numbers", Duration::from_secs(60));
    let name = unique_name("cli-sem-numbers");
    let _cleanup = SemHostileCleanup(name.clone());
    assert_one_line_error(
        &sem_hostile_run(&["sem", "create", &name, "--value", "18446744073709551615"]),
        2,
        "--value",
    );
    assert_one_line_error(
        &sem_hostile_run(&["sem", "create", &name, "--value", "4294967295"]),
        2,
        "0..=2147483647",
    );
    for bad in ["-1", "18446744073709551616", "1e3"] {
        assert_one_line_error(
            &sem_hostile_run(&["sem", "wait", &name, "--timeout-ms", bad]),
            2,
            bad,
        );
    }
    assert_ok(&sem_hostile_run(&["sem", "create", &name, "--value", "1"]));
    let forever = "18446744073709551615";
    assert_ok(&sem_hostile_run(&[
        "sem",
        "wait",
        &name,
        "--timeout-ms",
        forever,
    ]));
    // The same timeout on an empty semaphore waits (no panic computing its
    // deadline) until a post.
    let waiter = spawn_child(
        Command::new(env!("CARGO_BIN_EXE_nodeipc"))
            .args(["sem", "wait", &name, "--timeout-ms", forever])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_ok(&sem_hostile_run(&["sem", "post", &name]));
    assert_ok(&waiter.output_timeout(Duration::from_secs(10)));
    assert_one_line_error(
        &sem_hostile_run(&["sem", "wait", &name, "--timeout-ms", "20"]),
        3,
        "timed out",
    );
    assert_ok(&sem_hostile_run(&["sem", "unlink", &name]));
    assert!(shm_leftovers(&name).is_empty());
}

/// Regression: a name someone else made with a newline in it printed as
/// two lines, so it could forge a line of `ls` or `clean` output.
#[test]
fn regression_names_with_control_characters_are_escaped_in_listings() {
    let _dog = Watchdog::new("escaped names", Duration::from_secs(60));
    let prefix = unique_name("esc");
    let path = format!("/dev/shm{prefix}\nremoved region nodeipc-forged");
    let file = std::os::unix::fs::OpenOptionsExt::mode(
        std::fs::OpenOptions::new().write(true).create_new(true),
        0o600,
    )
    .open(&path)
    .unwrap();
    drop(file);
    let listed = nodeipc(&["ls", "--prefix", &prefix]);
    let dry = nodeipc(&["clean", "--dry-run", "--prefix", &prefix, "--min-age", "0"]);
    let _ = std::fs::remove_file(&path);
    for out in [&listed, &dry] {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("\\nremoved region nodeipc-forged"), "{text}");
        assert!(
            !text
                .lines()
                .any(|l| l.starts_with("removed region nodeipc-forged")),
            "a forged line: {text}"
        );
    }
}
