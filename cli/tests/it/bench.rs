//! `nodeipc bench` as other programs drive it: the JSON rows carry the keys
//! the issues name, and the table prints the machine it ran on.

use std::process::{Command, Stdio};
use std::time::Duration;

use nodeipc_testkit::{Watchdog, spawn_child};

fn bench(args: &[&str]) -> String {
    let out = spawn_child(
        Command::new(env!("CARGO_BIN_EXE_nodeipc"))
            .arg("bench")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )
    .output_timeout(Duration::from_secs(120));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn barrier_json_has_bench_ranks_and_ns_per_op() {
    let _dog = Watchdog::new("bench barrier json", Duration::from_secs(150));
    let out = bench(&[
        "--quick", "--json", "barrier", "--ranks", "2", "--iters", "500",
    ]);
    let line = out.lines().next().expect("one row");
    for key in [
        "\"bench\":\"barrier\"",
        "\"ranks\":2",
        "\"iters\":500",
        "\"ns_per_op\":",
        "\"pthread_barrier (process-shared)\"",
        "\"ratio\":",
    ] {
        assert!(line.contains(key), "{key} missing from {line}");
    }
}

#[test]
fn channel_json_has_bench_workers_payload_and_ns_per_op() {
    let _dog = Watchdog::new("bench channel json", Duration::from_secs(150));
    let out = bench(&[
        "--quick",
        "--json",
        "channel",
        "--workers",
        "1",
        "--payload",
        "128",
        "--iters",
        "200",
    ]);
    let line = out.lines().next().expect("one row");
    for key in [
        "\"bench\":\"channel\"",
        "\"workers\":1",
        "\"payload\":128",
        "\"ns_per_op\":",
        "\"glibc-sem-lockstep\"",
        "\"unix-socket\"",
    ] {
        assert!(line.contains(key), "{key} missing from {line}");
    }
}

#[test]
fn channel_response_thread_row_runs_rust_and_cpp_beside_lock_step() {
    let _dog = Watchdog::new("bench channel response thread", Duration::from_secs(150));
    let out = bench(&[
        "--quick",
        "--json",
        "channel",
        "--workers",
        "1",
        "--payload",
        "64",
        "--iters",
        "200",
        "--depth",
        "4",
        "--response-thread",
    ]);
    let line = out.lines().next().expect("one row");
    for key in [
        "\"bench\":\"channel\"",
        "\"depth\":4",
        "send thread + response thread, depth 4 (Rust)",
        "lock-step send then recv(All)",
        "\"ns_per_op\":",
    ] {
        assert!(line.contains(key), "{key} missing from {line}");
    }
    // The C++ row, unless the CLI was built without a C++ compiler (which
    // the row then says, and which fails under CI).
    if !line.contains("send thread + response thread, depth 4 (C++)") {
        assert!(line.contains("no C++ row"), "{line}");
        nodeipc_testkit::skip(
            "channel_response_thread_row_runs_rust_and_cpp_beside_lock_step",
            "the CLI was built without a C++ compiler",
        );
    }
}

/// The open-loop row's JSON (one line): parsed, with the fields every
/// open-loop row has checked, and whether the C++ rows are in it.
fn open_loop_row(out: &str, test: &str) -> (serde_json::Value, bool) {
    let mut lines = out.lines();
    let line = lines.next().expect("one row");
    assert_eq!(lines.next(), None, "one row only: {out}");
    let row: serde_json::Value =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    assert_eq!(row["bench"], "channel", "{row}");
    assert_eq!(row["workers"], 1, "{row}");
    assert_eq!(row["payload"], 64, "{row}");
    assert_eq!(row["depth"], 4, "{row}");
    assert_eq!(
        row["impl"], "send thread + response thread, depth 4 (Rust)",
        "{row}"
    );
    assert!(row["rate"].as_u64().unwrap() > 0, "{row}");
    assert!(
        row["what"].as_str().unwrap().starts_with("open loop at "),
        "{row}"
    );
    assert!(
        row["note"]
            .as_str()
            .unwrap()
            .contains("latency from when it was due"),
        "{row}"
    );
    // p50 and p99 of the latencies, ours and each baseline's.
    let p50 = row["ns_per_op"].as_f64().unwrap();
    assert!(
        p50 > 0.0 && row["p99_ns_per_op"].as_f64().unwrap() >= p50,
        "{row}"
    );
    let mut names = vec!["lock-step send then recv(All)"];
    let cpp = [
        "send thread + response thread, depth 4 (C++)",
        "lock-step send then recv_in_place(all) (C++)",
    ];
    let with_cpp = row["baselines"].get(cpp[0]).is_some();
    if with_cpp {
        names.extend(cpp);
    } else {
        assert!(
            row["note"].as_str().unwrap().contains("no C++ rows"),
            "{row}"
        );
        nodeipc_testkit::skip(test, "the CLI was built without a C++ compiler");
    }
    assert_eq!(
        row["baselines"].as_object().unwrap().len(),
        names.len(),
        "{row}"
    );
    for name in names {
        let times = &row["baselines"][name];
        let p50 = times["ns_per_op"].as_f64();
        assert!(p50.is_some_and(|p50| p50 > 0.0), "{name}: {row}");
        assert!(times["p99_ns_per_op"].as_f64() >= p50, "{name}: {row}");
        assert!(row["ratio"][name].as_f64().unwrap() > 0.0, "{name}: {row}");
    }
    (row, with_cpp)
}

fn open_loop_args<'a>(iters: &'a str, offered: [&'a str; 2]) -> Vec<&'a str> {
    let mut args = vec![
        "--quick",
        "--json",
        "channel",
        "--workers",
        "1",
        "--payload",
        "64",
        "--depth",
        "4",
        "--response-thread",
        "--iters",
        iters,
    ];
    args.extend(offered);
    args
}

/// `--load 0.8`: lock-step's maximum measured first, 80% of it offered to
/// the response thread and lock-step, from Rust and C++, in one row.
#[test]
fn channel_open_loop_row_at_a_load_offers_a_share_of_lock_step_maximum() {
    const TEST: &str = "channel_open_loop_row_at_a_load_offers_a_share_of_lock_step_maximum";
    let _dog = Watchdog::new(TEST, Duration::from_secs(150));
    let out = bench(&open_loop_args("40", ["--load", "0.8"]));
    let (row, _) = open_loop_row(&out, TEST);
    assert_eq!(row["load_percent"], 80, "{row}");
    let max = row["lockstep_max_rate"].as_f64().unwrap();
    let rate = row["rate"].as_f64().unwrap();
    assert!(max > 0.0 && (rate - 0.8 * max).abs() <= 1.0, "{row}");
}

/// `--rate R`: R requests a second, no lock-step maximum measured.
#[test]
fn channel_open_loop_row_at_a_rate_offers_that_rate() {
    const TEST: &str = "channel_open_loop_row_at_a_rate_offers_that_rate";
    let _dog = Watchdog::new(TEST, Duration::from_secs(150));
    let out = bench(&open_loop_args("20", ["--rate", "2000"]));
    let (row, _) = open_loop_row(&out, TEST);
    assert_eq!(row["rate"], 2000, "{row}");
    assert!(row.get("load_percent").is_none() && row.get("lockstep_max_rate").is_none());
    assert!(
        row["what"]
            .as_str()
            .unwrap()
            .starts_with("open loop at 2000/s"),
        "{row}"
    );
}

/// The open-loop options are refused, by name, where they cannot apply.
#[test]
fn channel_open_loop_options_are_checked() {
    let _dog = Watchdog::new("bench open loop options", Duration::from_secs(60));
    let refused = |args: &[&str], says: &str| {
        let out = spawn_child(
            Command::new(env!("CARGO_BIN_EXE_nodeipc"))
                .arg("bench")
                .args(args)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped()),
        )
        .output_timeout(Duration::from_secs(30));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(says),
            "{args:?}: {says:?} missing from {stderr}"
        );
    };
    let no_thread = ["channel", "--workers", "1", "--rate", "10"];
    refused(&no_thread, "--response-thread");
    refused(&open_loop_args("20", ["--load", "3"]), "0.01..=2");
    refused(&open_loop_args("20", ["--rate", "0"]), "1..=100000000");
    refused(
        &open_loop_args("100001", ["--rate", "10"]),
        "at most 100000",
    );
    let mut both = open_loop_args("20", ["--rate", "10"]);
    both.extend(["--load", "0.5"]);
    refused(&both, "cannot be used with");
}

#[test]
fn channel_loan_row_runs_the_loan_beside_the_copy() {
    let _dog = Watchdog::new("bench channel loan", Duration::from_secs(150));
    let out = bench(&["--quick", "--json", "channel", "--loan"]);
    let line = out.lines().next().expect("one row");
    for key in [
        "\"bench\":\"channel\"",
        "\"payload\":1048576",
        "built in the loan (send_with)",
        "built, then copied (send)",
        "\"ns_per_op\":",
    ] {
        assert!(line.contains(key), "{key} missing from {line}");
    }
}

#[test]
fn the_table_names_the_machine_and_every_implementation() {
    let _dog = Watchdog::new("bench table", Duration::from_secs(150));
    let out = bench(&["--quick", "fdpass", "--fds", "4"]);
    assert!(out.starts_with("machine: "), "{out}");
    assert!(out.contains("cores") && out.contains("Linux"), "{out}");
    assert!(
        out.contains("nodeipc send_fds/recv_fds") && out.contains("bare sendmsg/recvmsg"),
        "{out}"
    );
}

/// `nodeipc bench --quick ARGS` under `ulimit -n 48`: descriptor passing at
/// 1 fd a message fits, 64 fds a message cannot (`EMFILE`), so the run fails
/// at its second row.
fn bench_out_of_descriptors(args: &[&str]) -> std::process::Output {
    spawn_child(
        Command::new("sh")
            .args([
                "-c",
                "ulimit -n 48 && exec \"$0\" bench --quick \"$@\" fdpass",
            ])
            .arg(env!("CARGO_BIN_EXE_nodeipc"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )
    .output_timeout(Duration::from_secs(60))
}

#[test]
fn a_row_failing_late_keeps_the_rows_measured_before_it() {
    let _dog = Watchdog::new("bench late failure", Duration::from_secs(120));
    for json in [true, false] {
        let out = bench_out_of_descriptors(if json { &["--json"] } else { &[] });
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        // The progress: which row, which round, of how many.
        for round in 1..=7 {
            let line = format!(
                "nodeipc bench: row 1 (SCM_RIGHTS to another process, 1 fds a message, per fd): round {round} of 7"
            );
            assert!(stderr.contains(&line), "{line:?} missing:\n{stderr}");
        }
        assert!(
            stderr.contains("nodeipc bench: row 2 (SCM_RIGHTS to another process, 64 fds"),
            "{stderr}"
        );
        // The failure names the row and says what was kept.
        let last = stderr.lines().last().unwrap();
        assert!(
            last.starts_with("nodeipc: SCM_RIGHTS to another process, 64 fds a message")
                && last.contains("Too many open files")
                && last.ends_with("(1 row measured before it, printed above)"),
            "{last}"
        );
        // The first row was printed, whole.
        if json {
            assert_eq!(stdout.lines().count(), 1, "{stdout}");
            let row: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
            assert_eq!(row["bench"], "fdpass");
            assert_eq!(row["fds"], 1);
            assert!(row["ns_per_op"].as_f64().unwrap() > 0.0, "{row}");
        } else {
            assert!(stdout.starts_with("machine: "), "{stdout}");
            let row = stdout
                .lines()
                .find(|l| l.starts_with("SCM_RIGHTS to another process, 1 fds"))
                .unwrap_or_else(|| panic!("no first row:\n{stdout}"));
            assert!(row.contains("nodeipc send_fds/recv_fds"), "{row}");
            assert!(stdout.contains("bare sendmsg/recvmsg"), "{stdout}");
            assert!(!stdout.contains("64 fds"), "{stdout}");
        }
    }
}

#[test]
fn on_a_terminal_the_progress_is_one_line_rewritten_in_place() {
    const TEST: &str = "on_a_terminal_the_progress_is_one_line_rewritten_in_place";
    let _dog = Watchdog::new(TEST, Duration::from_secs(120));
    if !std::path::Path::new("/usr/bin/script").exists() {
        nodeipc_testkit::skip(TEST, "script(1) (util-linux) is not installed");
        return;
    }
    // script(1) runs the command on a pseudo-terminal: stderr is a terminal.
    let command = format!(
        "sh -c 'ulimit -n 48 && exec {} bench --quick --json fdpass'",
        env!("CARGO_BIN_EXE_nodeipc")
    );
    let out = spawn_child(
        Command::new("/usr/bin/script")
            .args(["-qec", &command, "/dev/null"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )
    .output_timeout(Duration::from_secs(60));
    let seen = String::from_utf8_lossy(&out.stdout);
    // Each round rewrites the line: carriage return, erase, the new text,
    // and no newline after it.
    for round in 1..=7 {
        let line = format!(
            "\r\x1b[Knodeipc bench: row 1 (SCM_RIGHTS to another process, 1 fds a message, per fd): round {round} of 7\r"
        );
        assert!(seen.contains(&line), "{line:?} missing from {seen:?}");
    }
    // The row comes out on a clean line, and so does the error.
    assert!(seen.contains("\r\x1b[K{\"baselines\""), "{seen:?}");
    assert!(
        seen.contains("\r\x1b[Knodeipc: SCM_RIGHTS to another process, 64 fds"),
        "{seen:?}"
    );
}

/// Every row a `bench` subcommand measures is printed: the KittensBroker
/// rows too (they were measured and dropped once, when rows began to be
/// printed as they complete).
#[test]
fn regression_kittens_rows_are_printed() {
    let _dog = Watchdog::new("bench kittens json", Duration::from_secs(150));
    let out = bench(&["--quick", "--json", "kittens"]);
    let rows: Vec<&str> = out.lines().collect();
    assert!(!rows.is_empty(), "no row printed: {out:?}");
    assert!(
        rows.iter().all(|r| r.contains("\"bench\":\"kittens\"")),
        "{out}"
    );
}

/// The queue's rows: a round trip beside the cache-line floor and a Unix
/// socket, and a batched stream beside the socket, each with its figures.
#[test]
fn queue_json_has_both_rows_with_their_baselines() {
    let _dog = Watchdog::new("bench queue json", Duration::from_secs(150));
    let out = bench(&["--quick", "--json", "queue"]);
    let rows: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(rows.len(), 2, "{out}");
    for row in &rows {
        assert_eq!(row["bench"], "queue", "{row}");
        assert_eq!(row["payload"], 64, "{row}");
        assert_eq!(row["impl"], "nodeipc queue", "{row}");
        assert!(row["ns_per_op"].as_f64().unwrap() > 0.0, "{row}");
        let socket = row["baselines"]["unix-socket"]["ns_per_op"].as_f64();
        assert!(socket.unwrap() > 0.0, "{row}");
        assert!(row["ratio"]["unix-socket"].as_f64().unwrap() > 0.0, "{row}");
    }
    assert!(
        rows[0]["what"].as_str().unwrap().contains("round trip"),
        "{}",
        rows[0]
    );
    assert!(
        rows[0]["baselines"]["cache-line"]["ns_per_op"]
            .as_f64()
            .unwrap()
            > 0.0
    );
    assert_eq!(rows[1]["batch"], 64, "{}", rows[1]);
    assert!(
        rows[1]["note"].as_str().unwrap().contains("M messages/s"),
        "{}",
        rows[1]
    );
}
