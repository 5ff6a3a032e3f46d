//! Every numeric option of every subcommand, fed the extremes: 0, 1,
//! u64::MAX, 2^63, 10^15, -1 and junk. Whatever the value, the command never
//! panics (exit 101) or aborts (exit 134), a refusal is exactly one line on
//! stderr, and nothing is left in `/dev/shm` or the temporary directory.
//!
//! [`every_option_with_a_value_is_covered`] keeps this list complete as
//! options are added.

use crate::common;

use std::collections::BTreeSet;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::{BIN, nodeipc, stderr};
use nodeipc_testkit::{TempDir, Watchdog, shm_leftovers, spawn_child, unique_name};

const EXTREMES: [&str; 7] = [
    "0",
    "1",
    "18446744073709551615", // u64::MAX
    "9223372036854775808",  // 2^63
    "1000000000000000",     // 10^15
    "-1",
    "junk",
];

/// The numeric options, by subcommand path.
const NUMERIC: &[(&str, &[&str])] = &[
    ("demo", &["--workers", "--requests", "--payload", "--depth"]),
    ("demo-worker", &["--rank", "--workers", "--parent"]),
    ("shm create", &["--size"]),
    ("shm write", &["--offset"]),
    ("shm read", &["--offset", "--len"]),
    ("sem create", &["--value"]),
    ("sem wait", &["--timeout-ms"]),
    ("monitor status", &["--timeout-ms"]),
    ("clean", &["--min-age"]),
    ("bench fdpass", &["--fds"]),
    ("bench barrier", &["--ranks", "--iters"]),
    (
        "bench channel",
        &[
            "--workers",
            "--payload",
            "--iters",
            "--depth",
            "--rate",
            "--load",
        ],
    ),
    (
        "launch",
        &[
            "--nproc",
            "--max-restarts",
            "--stop-timeout",
            "--rank-restart-timeout",
            "--health-interval",
            "--nnodes",
            "--node-rank",
            "--rdzv-ttl",
            "--rdzv-timeout",
            "--redirects",
            "--tee",
            "--local-ranks-filter",
        ],
    ),
];

/// Options that take a value that is not a number.
const NOT_NUMERIC: &[&str] = &[
    "--prefix",
    "--socket",
    "--config",
    "--sems",
    "--monitor",
    "--group",
    "--monitor-config",
    "--nvrx-config",
    "--run-dir",
    "--json-events",
    "--nic",
    "--sysfs-root",
    "--rdzv-backend",
    // KEY=VALUE pairs; its one number is checked in nodeipc-launch (rdzv).
    "--rdzv-conf",
    "--rdzv-endpoint",
    "--rdzv-id",
    "--local-addr",
    "--python",
    "--log-dir",
    // `launch`'s usage line: `-- <COMMAND>...`.
    "--",
    "--dir",
];

/// What went wrong with one case, if anything.
fn judge(case: &str, out: &Output) -> Option<String> {
    let err = stderr(out);
    match out.status.code() {
        None => Some(format!(
            "{case}: killed by a signal ({:?}): {err}",
            out.status
        )),
        Some(code @ (101 | 134)) => Some(format!("{case}: exit {code} (panic or abort): {err}")),
        Some(0) => None,
        Some(code) if err.lines().count() != 1 => Some(format!(
            "{case}: exit {code} with {} lines: {err:?}",
            err.lines().count()
        )),
        Some(_) => None,
    }
}

fn report(failures: Vec<String>) {
    assert!(
        failures.is_empty(),
        "{} case(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn demo_options_at_the_extremes() {
    let _dog = Watchdog::new("demo extremes", Duration::from_secs(600));
    let tmp = std::env::temp_dir();
    let mut failures = Vec::new();
    for option in ["--workers", "--requests", "--payload", "--depth"] {
        for value in EXTREMES {
            // The others small, so a value that is accepted runs briefly.
            let mut args = vec!["demo"];
            for (other, small) in [("--workers", "1"), ("--requests", "1")] {
                if other != option {
                    args.extend([other, small]);
                }
            }
            args.extend([option, value]);
            let child = spawn_child(
                Command::new(BIN)
                    .args(&args)
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped()),
            );
            let pid = child.id();
            let out = child.output_timeout(Duration::from_secs(60));
            let case = args.join(" ");
            failures.extend(judge(&case, &out));
            if let Some(left) = common::demo_dir(&tmp, pid) {
                failures.push(format!("{case}: left {}", left.display()));
            }
            let shm = shm_leftovers(&format!("nodeipc-demo-{pid}-"));
            if !shm.is_empty() {
                failures.push(format!("{case}: left {shm:?} in /dev/shm"));
            }
        }
    }
    report(failures);
}

#[test]
fn demo_worker_options_at_the_extremes() {
    // The hidden worker command: with a parent that is not ours, it stops
    // at once; its numbers must still be refused, not overflow.
    let mut failures = Vec::new();
    for option in ["--rank", "--workers", "--parent"] {
        for value in EXTREMES {
            let mut args = vec!["demo-worker", "--socket", "/nonexistent/s", "--monitor"];
            args.extend(["/nonexistent/m", "--group", "/nodeipc-test-extremes-g"]);
            for (other, default) in [("--rank", "0"), ("--workers", "1"), ("--parent", "1")] {
                if other != option {
                    args.extend([other, default]);
                }
            }
            args.extend([option, value]);
            failures.extend(judge(&args.join(" "), &nodeipc(&args, None)));
        }
    }
    report(failures);
}

#[test]
fn shm_options_at_the_extremes() {
    let _dog = Watchdog::new("shm extremes", Duration::from_secs(300));
    let mut failures = Vec::new();
    for value in EXTREMES {
        let name = unique_name("extremes-create");
        let case = format!("shm create {name} --size {value}");
        failures.extend(judge(
            &case,
            &nodeipc(&["shm", "create", &name, "--size", value], None),
        ));
        let _ = nodeipc(&["shm", "unlink", &name], None);
    }
    let name = unique_name("extremes-rw");
    let region = nodeipc_shm::Region::create(&name, 4096).unwrap();
    for value in EXTREMES {
        for args in [
            vec!["shm", "read", &name, "--offset", value],
            vec!["shm", "read", &name, "--len", value],
            vec!["shm", "read", &name, "--offset", "4096", "--len", value],
            vec!["shm", "read", &name, "--offset", value, "--len", "1"],
        ] {
            failures.extend(judge(&args.join(" "), &nodeipc(&args, None)));
        }
        let args = ["shm", "write", &name, "--offset", value];
        failures.extend(judge(&args.join(" "), &nodeipc(&args, Some(b"xy"))));
    }
    drop(region);
    let left = shm_leftovers("nodeipc-test-extremes-");
    let ours: Vec<_> = left
        .iter()
        // Only this test's names: the others run meanwhile.
        .filter(|n| n.contains("extremes-create-") || n.contains("extremes-rw-"))
        .filter(|n| n.contains(&format!("-{}-", std::process::id())))
        .collect();
    if !ours.is_empty() {
        failures.push(format!("left in /dev/shm: {ours:?}"));
    }
    report(failures);
}

#[test]
fn clean_options_at_the_extremes() {
    let _dog = Watchdog::new("clean extremes", Duration::from_secs(120));
    let mut failures = Vec::new();
    for value in EXTREMES {
        // A prefix nothing has and a dry run: only the number is on trial.
        let prefix = unique_name("extremes-clean-none");
        let case = format!("clean --dry-run --min-age {value}");
        let out = nodeipc(
            &[
                "clean",
                "--dry-run",
                "--prefix",
                &prefix,
                "--min-age",
                value,
            ],
            None,
        );
        failures.extend(judge(&case, &out));
    }
    report(failures);
}

#[test]
fn sem_options_at_the_extremes() {
    let _dog = Watchdog::new("sem extremes", Duration::from_secs(300));
    let mut failures = Vec::new();
    for value in EXTREMES {
        let name = unique_name("extremes-sem");
        let case = format!("sem create {name} --value {value}");
        failures.extend(judge(
            &case,
            &nodeipc(&["sem", "create", &name, "--value", value], None),
        ));
        let _ = nodeipc(&["sem", "unlink", &name], None);

        // A count of one: the wait is answered at once, whatever the timeout.
        let name = unique_name("extremes-wait");
        let created = nodeipc(&["sem", "create", &name, "--value", "1"], None);
        assert!(created.status.success(), "{}", stderr(&created));
        let case = format!("sem wait {name} --timeout-ms {value}");
        failures.extend(judge(
            &case,
            &nodeipc(&["sem", "wait", &name, "--timeout-ms", value], None),
        ));
        let _ = nodeipc(&["sem", "unlink", &name], None);
    }
    let ours: Vec<_> = shm_leftovers("nodeipc-test-extremes-")
        .into_iter()
        // Only this test's names: the others run meanwhile.
        .filter(|n| n.contains("extremes-sem-") || n.contains("extremes-wait-"))
        .filter(|n| n.contains(&format!("-{}-", std::process::id())))
        .collect();
    if !ours.is_empty() {
        failures.push(format!("left in /dev/shm: {ours:?}"));
    }
    report(failures);
}

#[test]
fn monitor_status_options_at_the_extremes() {
    let _dog = Watchdog::new("monitor status extremes", Duration::from_secs(300));
    let dir = TempDir::new("extremes-mon");
    let socket = dir.join("rank.sock");
    let path = socket.to_str().unwrap().to_owned();
    let mut server = spawn_child(
        Command::new(BIN)
            .args(["monitor", "serve", "--socket", &path])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped()),
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
    let mut failures = Vec::new();
    for value in EXTREMES {
        let args = [
            "monitor",
            "status",
            "--socket",
            &path,
            "--timeout-ms",
            value,
        ];
        failures.extend(judge(&args.join(" "), &nodeipc(&args, None)));
    }
    common::signal(server.id(), rustix::process::Signal::TERM);
    server.wait_timeout(Duration::from_secs(10));
    report(failures);
}

/// Only values that must be refused: an accepted one would run a real
/// benchmark. Refused while parsing (exit 2), before anything is measured.
#[test]
fn bench_options_at_the_extremes_are_refused_before_running() {
    let _dog = Watchdog::new("bench extremes", Duration::from_secs(300));
    let ranges: &[(&str, &str, u64, u64)] = &[
        ("fdpass", "--fds", 1, 253),
        ("barrier", "--ranks", 2, 64),
        ("barrier", "--iters", 1, 1_000_000_000),
        ("channel", "--workers", 1, 64),
        ("channel", "--payload", 0, 64 << 20),
        ("channel", "--iters", 1, 1_000_000_000),
        ("channel", "--depth", 1, 64),
    ];
    let mut failures = Vec::new();
    for &(sub, option, min, max) in ranges {
        for value in EXTREMES {
            if value.parse::<u64>().is_ok_and(|n| (min..=max).contains(&n)) {
                continue;
            }
            let args = ["bench", sub, option, value];
            let out = nodeipc(&args, None);
            let case = args.join(" ");
            failures.extend(judge(&case, &out));
            if out.status.code() != Some(2) || !stderr(&out).contains(option) {
                failures.push(format!(
                    "{case}: not refused as a usage error: {}",
                    stderr(&out)
                ));
            }
        }
    }
    // The open-loop options, which need --response-thread (and that
    // --workers): each value out of range refused by name.
    let open_loop: &[(&str, f64, f64)] = &[("--rate", 1.0, 1e8), ("--load", 0.01, 2.0)];
    for &(option, min, max) in open_loop {
        for value in EXTREMES {
            if value.parse::<f64>().is_ok_and(|x| (min..=max).contains(&x)) {
                continue;
            }
            let args = [
                "bench",
                "channel",
                "--workers",
                "1",
                "--response-thread",
                option,
                value,
            ];
            let out = nodeipc(&args, None);
            let case = args.join(" ");
            failures.extend(judge(&case, &out));
            if out.status.code() != Some(2) || !stderr(&out).contains(option) {
                failures.push(format!(
                    "{case}: not refused as a usage error: {}",
                    stderr(&out)
                ));
            }
        }
    }
    // The one bound across two options: a usage error too.
    let args = ["bench", "channel", "--payload", "67108864", "--depth", "64"];
    let out = nodeipc(&args, None);
    if out.status.code() != Some(2) || !stderr(&out).contains("256 MiB") {
        failures.push(format!("{}: {}", args.join(" "), stderr(&out)));
    }
    report(failures);
}

#[test]
fn launch_options_at_the_extremes() {
    let _dog = Watchdog::new("launch extremes", Duration::from_secs(300));
    let dir = TempDir::new("extremes-launch");
    let run_dir = dir.path().to_str().unwrap();
    let mut failures = Vec::new();
    for option in [
        "--nproc",
        "--max-restarts",
        "--stop-timeout",
        "--rank-restart-timeout",
        "--health-interval",
        "--nnodes",
        "--node-rank",
        "--rdzv-ttl",
        "--rdzv-timeout",
        "--redirects",
        "--tee",
        "--local-ranks-filter",
    ] {
        for value in EXTREMES {
            let mut args = vec!["launch", "--run-dir", run_dir];
            if option != "--nproc" {
                args.extend(["--nproc", "1"]);
            }
            // Output taken is written nowhere: nothing left in /tmp.
            if matches!(option, "--redirects" | "--tee" | "--local-ranks-filter") {
                args.extend(["--log-dir", "/dev/null"]);
            }
            args.extend([option, value, "--", "true"]);
            let out = nodeipc(&args, None);
            let case = args.join(" ");
            failures.extend(judge(&case, &out));
            // A value the launch takes runs `true` once and exits 0; any
            // other is refused naming the option.
            if out.status.code() != Some(0) && !stderr(&out).contains(option) {
                failures.push(format!(
                    "{case}: refusal does not name {option}: {}",
                    stderr(&out)
                ));
            }
        }
    }
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().collect();
    if !left.is_empty() {
        failures.push(format!("left in the run directory: {left:?}"));
    }
    report(failures);
}

/// Every option that takes a value, in every subcommand's help, is either
/// fed the extremes above or known not to be a number.
#[test]
fn every_option_with_a_value_is_covered() {
    let covered: BTreeSet<(String, String)> = NUMERIC
        .iter()
        .flat_map(|(sub, options)| options.iter().map(|o| (sub.to_string(), o.to_string())))
        .collect();
    let mut missing = Vec::new();
    let mut pending = vec![Vec::<String>::new()];
    while let Some(path) = pending.pop() {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let out = nodeipc(&args, None);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        let help = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut in_commands = false;
        for line in help.lines() {
            if line.starts_with("Commands:") {
                in_commands = true;
                continue;
            }
            if in_commands {
                match line.split_whitespace().next() {
                    Some(sub) if line.starts_with("  ") && sub != "help" => {
                        let mut next = path.clone();
                        next.push(sub.to_owned());
                        pending.push(next);
                    }
                    Some(_) if !line.starts_with("  ") => in_commands = false,
                    _ => {}
                }
            }
            let words: Vec<&str> = line.split_whitespace().collect();
            for pair in words.windows(2) {
                let takes_value = pair[1].starts_with('<');
                let option = pair[0].trim_end_matches(',');
                if option.starts_with("--") && takes_value && !NOT_NUMERIC.contains(&option) {
                    let key = (path.join(" "), option.to_owned());
                    if !covered.contains(&key) {
                        missing.push(format!("{} {}", key.0, key.1));
                    }
                }
            }
        }
    }
    // The hidden worker command is not in the help; it is covered above.
    assert!(
        missing.is_empty(),
        "numeric options not fed the extremes: {missing:?}"
    );
}

/// A 1 TiB sparse region read with no `--len` is streamed: the reader gets
/// its bytes while the command holds a few MiB, and no page of the region is
/// allocated; a `--len` past its end is refused naming both.
#[test]
fn regression_a_huge_sparse_region_is_streamed_not_loaded() {
    use std::io::Read;
    let _dog = Watchdog::new("huge sparse read", Duration::from_secs(120));
    let name = unique_name("extremes-huge");
    let size: u64 = 1 << 40;
    // Made as another program would make it, with a bare ftruncate: a
    // Region reserves its memory, and nothing holds a terabyte.
    let path = format!("/dev/shm{name}");
    let file = std::os::unix::fs::OpenOptionsExt::mode(
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true),
        0o600,
    )
    .open(&path)
    .unwrap();
    let region = RemoveOnDrop(path.clone());
    file.set_len(size).unwrap();

    let too_long = (size + 1).to_string();
    let out = nodeipc(&["shm", "read", &name, "--len", &too_long], None);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.lines().count() == 1 && err.contains(&too_long) && err.contains(&size.to_string()),
        "{err}"
    );

    let mut reader = spawn_child(
        Command::new(BIN)
            .args(["shm", "read", &name])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    let pid = reader.id();
    let mut stdout = reader.child().stdout.take().unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let mut got = 0usize;
    while got < 64 << 20 {
        let n = stdout.read(&mut buf).unwrap();
        assert!(n > 0, "the output ended after {got} bytes");
        assert!(buf[..n].iter().all(|&b| b == 0));
        got += n;
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let rss_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    assert!(rss_kib < 32 << 10, "the reader holds {rss_kib} KiB");
    let blocks = std::os::unix::fs::MetadataExt::blocks(&std::fs::metadata(&path).unwrap());
    assert_eq!(blocks, 0, "reading allocated pages of the region");
    // The reader leaves: the command stops quietly.
    drop(stdout);
    let status = reader.wait_timeout(Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "{status:?}");
    let mut err = String::new();
    reader
        .child()
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(err.is_empty(), "{err}");
    drop(region);
    assert!(shm_leftovers(&name).is_empty());
}

/// Removes a file made by hand, however the test ends.
struct RemoveOnDrop(String);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A refused number is refused with the range the command really takes
/// (regression: `launch --nproc -1` said "-1 is not in 0..=4294967295",
/// the range of a u32, where launch takes 1..=1024; `sem create --value`
/// the same for 0..=2147483647; `sem wait --timeout-ms -1` said "invalid
/// digit found in string"; `--rdzv-ttl`, `--rdzv-timeout` and the launch
/// timeouts named bounds their options do not have).
#[test]
fn regression_a_refused_number_names_the_real_range() {
    let _dog = Watchdog::new("real ranges", Duration::from_secs(120));
    let launch = |option: &'static str, value: &'static str| -> Vec<&'static str> {
        vec!["launch", "--nproc", "1", option, value, "--", "true"]
    };
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["launch", "--nproc", "-1", "--", "true"], "in 1..=1024"),
        (
            vec!["launch", "--nproc", "4294967296", "--", "true"],
            "in 1..=1024",
        ),
        (launch("--max-restarts", "-1"), "in 0..=1000000"),
        (launch("--node-rank", "-1"), "in 0..=4095"),
        (launch("--stop-timeout", "0.0001"), "from 0.001 to 3600"),
        (launch("--rank-restart-timeout", "-1"), "from 0.001 to 3600"),
        (launch("--health-interval", "7200"), "from 0.001 to 3600"),
        (launch("--rdzv-ttl", "1"), "whole seconds from 2 to 3600"),
        (launch("--rdzv-timeout", "0.5"), "from 1 to 604800"),
        (
            vec!["sem", "create", "/nodeipc-x", "--value", "-1"],
            "in 0..=2147483647",
        ),
        (
            vec!["sem", "wait", "/nodeipc-x", "--timeout-ms", "-1"],
            "at least 0",
        ),
        (
            vec![
                "monitor",
                "status",
                "--socket",
                "/nodeipc-x",
                "--timeout-ms",
                "junk",
            ],
            "at least 1",
        ),
    ];
    let mut failures = Vec::new();
    for (args, range) in &cases {
        let out = nodeipc(args, None);
        let err = stderr(&out);
        if out.status.code() != Some(2) || !err.contains(range) || err.lines().count() != 1 {
            failures.push(format!(
                "{}: {:?}: {err}",
                args.join(" "),
                out.status.code()
            ));
        }
    }
    // Every numeric option, fed -1 and junk: never a type's range or a
    // parser's words instead of the option's own range.
    for (sub, options) in NUMERIC {
        for option in *options {
            for value in ["-1", "junk"] {
                let mut args: Vec<&str> = sub.split(' ').collect();
                args.extend(match *sub {
                    "shm create" | "shm write" | "shm read" => vec!["/nodeipc-x"],
                    "sem create" | "sem wait" => vec!["/nodeipc-x"],
                    "monitor status" => vec!["--socket", "/nodeipc-x"],
                    "launch" if *option != "--nproc" => vec!["--nproc", "1"],
                    _ => vec![],
                });
                args.extend([*option, value]);
                if *sub == "launch" {
                    args.extend(["--", "true"]);
                }
                let out = nodeipc(&args, None);
                let err = stderr(&out);
                for tell in [
                    "4294967295",
                    "18446744073709551615",
                    "invalid digit",
                    "invalid float",
                ] {
                    if err.contains(tell) {
                        failures.push(format!("{}: says {tell:?}: {err}", args.join(" ")));
                    }
                }
            }
        }
    }
    report(failures);
}
