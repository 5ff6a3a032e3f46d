//! The figures of `launch/README.md`, for the lead to take on a quiet
//! machine: `cargo test --release -p nodeipc-cli --test launch_measure --
//! --ignored --nocapture`. Ignored by default: they measure, they assert
//! only that the launch worked.

use std::process::Stdio;
use std::time::Duration;

use crate::launch_kit::*;
use nodeipc_testkit::{TempDir, Watchdog, spawn_child};

/// From a hang's deadline (Init + the initial heartbeat timeout) to round 1
/// started, 8 ranks, a check every 50 ms, ranks that die on SIGTERM.
#[test]
#[ignore = "a measurement"]
fn measure_hang_deadline_to_restart() {
    let _watchdog = Watchdog::new("measure hang", Duration::from_secs(300));
    let mut totals = Vec::new();
    for _ in 0..5 {
        let dir = TempDir::new("measure-hang");
        let config = dir.join("monitor.json");
        std::fs::write(
            &config,
            r#"{ "initial_heartbeat_timeout_ms": 300, "check_interval_ms": 50,
                 "termination_signal": "SIGTERM" }"#,
        )
        .unwrap();
        let out = run(
            &dir,
            "hang-first",
            &[
                "--nproc",
                "8",
                "--max-restarts",
                "1",
                "--stop-timeout",
                "2",
                "--monitor-config",
                config.to_str().unwrap(),
            ],
        );
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let events = events(&dir);
        let fired = events
            .iter()
            .find(|e| e["event"] == "monitor_fired")
            .unwrap();
        let cause = fired["cause"].as_str().unwrap();
        // "initial heartbeat timeout: 346 ms elapsed, limit 300 ms"
        let numbers: Vec<f64> = cause
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|w| w.parse().ok())
            .collect();
        let late_ms = numbers[0] - numbers[1];
        let round1 = events
            .iter()
            .find(|e| e["event"] == "round_started" && e["restart"] == 1)
            .unwrap();
        let restart_ms = (round1["t"].as_f64().unwrap() - fired["t"].as_f64().unwrap()) * 1000.0;
        totals.push(late_ms + restart_ms);
        println!(
            "fired {late_ms:.0} ms past the deadline; fired to round 1 started {restart_ms:.1} ms; total {:.1} ms",
            late_ms + restart_ms
        );
    }
    totals.sort_by(f64::total_cmp);
    println!(
        "deadline to restart, 8 ranks: {:.1} – {:.1} ms",
        totals[0],
        totals[totals.len() - 1]
    );
}

/// The launcher's resident memory and idle CPU with 8 ranks (its 8
/// monitor threads included).
#[test]
#[ignore = "a measurement"]
fn measure_launcher_memory_and_idle_cpu_with_8_ranks() {
    let _watchdog = Watchdog::new("measure idle", Duration::from_secs(120));
    let dir = TempDir::new("measure-idle");
    let mut command = launch_command(
        &dir,
        "ignore-term",
        &["--nproc", "8", "--stop-timeout", "1"],
    );
    command.stderr(Stdio::null());
    let mut launch = spawn_child(&mut command);
    rank_pids(&dir, 8);
    let pid = launch.id();
    let ticks = || {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let fields: Vec<u64> = stat
            .rsplit_once(')')
            .unwrap()
            .1
            .split_whitespace()
            .filter_map(|f| f.parse().ok())
            .collect();
        // utime and stime: fields 14 and 15 of the line, 11 and 12 of the
        // numbers after the state.
        fields[10] + fields[11]
    };
    std::thread::sleep(Duration::from_secs(1));
    let before = ticks();
    std::thread::sleep(Duration::from_secs(10));
    let used = ticks() - before;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let rss = status
        .lines()
        .find(|l| l.starts_with("VmRSS"))
        .unwrap()
        .to_owned();
    let threads = status
        .lines()
        .find(|l| l.starts_with("Threads"))
        .unwrap()
        .to_owned();
    println!("launcher, 8 ranks idle: {rss}; {threads}; {used} clock ticks in 10 s");
    sigterm(&launch);
    launch.wait_timeout(Duration::from_secs(10));
}

/// The alternative not taken: 8 monitors as processes of their own
/// (`nodeipc monitor serve`), their resident memory summed.
#[test]
#[ignore = "a measurement"]
fn measure_eight_monitor_processes_for_comparison() {
    let _watchdog = Watchdog::new("measure monitor processes", Duration::from_secs(120));
    let dir = TempDir::new("measure-monitors");
    let mut monitors: Vec<_> = (0..8)
        .map(|i| {
            spawn_child(
                std::process::Command::new(env!("CARGO_BIN_EXE_nodeipc"))
                    .args(["monitor", "serve", "--socket"])
                    .arg(dir.join(&format!("m{i}.sock")))
                    .stderr(Stdio::null()),
            )
        })
        .collect();
    for i in 0..8 {
        let socket = dir.join(&format!("m{i}.sock"));
        wait_for("monitor up", Duration::from_secs(10), || socket.exists());
    }
    std::thread::sleep(Duration::from_secs(1));
    let kib: u64 = monitors
        .iter()
        .map(|m| {
            let status = std::fs::read_to_string(format!("/proc/{}/status", m.id())).unwrap();
            let line = status.lines().find(|l| l.starts_with("VmRSS")).unwrap();
            line.split_whitespace()
                .nth(1)
                .unwrap()
                .parse::<u64>()
                .unwrap()
        })
        .sum();
    println!("8 monitor processes: {kib} kB resident in all");
    for monitor in &mut monitors {
        sigterm(monitor);
        monitor.wait_timeout(Duration::from_secs(10));
    }
}
