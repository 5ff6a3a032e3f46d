//! The library in process: options refused with one line naming them,
//! events for people and tools, and a round backend plugged in (the
//! interface a multi-node backend implements). The shell is the rank.

use std::ffi::OsString;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nodeipc_launch::{
    Event, LaunchOptions, LocalBackend, MAX_NPROC, Result, RoundBackend, RoundPlan, RoundResult,
    launch, launch_with,
};
use nodeipc_testkit::{TempDir, Watchdog};

fn sh(script: &str) -> Vec<OsString> {
    ["sh", "-c", script].map(OsString::from).to_vec()
}

fn options(dir: &TempDir, nproc: u32, script: &str) -> LaunchOptions {
    LaunchOptions {
        run_dir: Some(dir.path().to_owned()),
        stderr_events: false,
        stop_timeout: Duration::from_secs(2),
        ..LaunchOptions::new(nproc, sh(script))
    }
}

#[test]
fn bad_options_are_refused_naming_the_option_and_its_bound() {
    let dir = TempDir::new("launch-opts");
    let cases: Vec<(LaunchOptions, &str)> = vec![
        (
            options(&dir, 0, "true"),
            "--nproc 0 is out of range: 1 to 1024",
        ),
        (options(&dir, MAX_NPROC + 1, "true"), "--nproc 1025"),
        (
            LaunchOptions {
                stop_timeout: Duration::ZERO,
                ..options(&dir, 1, "true")
            },
            "--stop-timeout",
        ),
        (
            LaunchOptions {
                rank_restart_timeout: Some(Duration::from_secs(100_000)),
                ..options(&dir, 1, "true")
            },
            "--rank-restart-timeout",
        ),
        // Below the 1 ms the message names (regression: anything above 0
        // was taken).
        (
            LaunchOptions {
                stop_timeout: Duration::from_micros(100),
                ..options(&dir, 1, "true")
            },
            "--stop-timeout 100 µs must be between 1 ms and 60 min",
        ),
        (
            LaunchOptions {
                command: Vec::new(),
                ..options(&dir, 1, "true")
            },
            "no command",
        ),
        (
            LaunchOptions {
                max_restarts: u32::MAX,
                ..options(&dir, 1, "true")
            },
            "--max-restarts",
        ),
    ];
    for (options, expect) in cases {
        let error = launch(&options).unwrap_err().to_string();
        assert!(error.contains(expect), "{expect}: {error}");
    }
    // Nothing was made.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn a_run_directory_that_cannot_be_made_is_an_error_naming_it() {
    let options = LaunchOptions {
        run_dir: Some("/nonexistent/nodeipc".into()),
        stderr_events: false,
        ..LaunchOptions::new(1, sh("true"))
    };
    let error = launch(&options).unwrap_err().to_string();
    assert!(error.contains("/nonexistent/nodeipc"), "{error}");
}

#[test]
fn a_program_that_cannot_start_is_an_error_naming_it_and_nothing_stays() {
    let _dog = Watchdog::new("launch spawn error", Duration::from_secs(30));
    let dir = TempDir::new("launch-noexec");
    let options = LaunchOptions {
        command: vec![OsString::from("/nonexistent/rank-program")],
        ..options(&dir, 2, "")
    };
    let error = launch(&options).unwrap_err().to_string();
    assert!(
        error.contains("local rank 0") && error.contains("/nonexistent/rank-program"),
        "{error}"
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn events_come_in_order_and_the_json_lines_name_each() {
    let _dog = Watchdog::new("launch events", Duration::from_secs(30));
    let dir = TempDir::new("launch-events");
    let json = dir.join("events.jsonl");
    let options = LaunchOptions {
        json_events: Some(json.clone()),
        ..options(&dir, 2, "exit 0")
    };
    let outcome = launch(&options).unwrap();
    assert_eq!(outcome.exit_code, 0, "{}", outcome.summary);
    let kinds: Vec<&str> = outcome
        .events
        .iter()
        .map(|e| match e {
            Event::Launched { .. } => "launched",
            Event::RoundStarted { .. } => "round_started",
            Event::RankStarted { .. } => "rank_started",
            Event::RankExited { .. } => "rank_exited",
            Event::RoundStopped { .. } => "round_stopped",
            Event::Finished { .. } => "finished",
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(
        kinds[..4],
        ["launched", "round_started", "rank_started", "rank_started"]
    );
    assert_eq!(kinds[kinds.len() - 2..], ["round_stopped", "finished"]);
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&json)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), outcome.events.len());
    for (line, kind) in lines.iter().zip(&kinds) {
        assert_eq!(line["event"], *kind);
        assert!(line["t"].as_f64().unwrap() >= 0.0);
    }
    // The run directory is gone; the events file stays.
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().collect();
    assert_eq!(left.len(), 1, "{left:?}");
}

#[test]
fn event_lines_for_people_say_what_happened() {
    let cases = [
        (
            Event::MonitorFired {
                restart: 0,
                rank: 3,
                cause: "heartbeat timeout: 30012 ms elapsed, limit 30000 ms".into(),
            },
            "monitor of rank 3 terminated it: heartbeat timeout: 30012 ms elapsed, limit 30000 ms",
        ),
        (
            Event::Restarting {
                restart: 1,
                max_restarts: 3,
            },
            "restarting 1/3",
        ),
        (
            Event::RankExited {
                restart: 0,
                rank: 2,
                pid: 77,
                code: None,
                signal: Some(9),
                after_s: 1.25,
            },
            "rank 2 (pid 77) killed by SIGKILL after 1.2 s",
        ),
    ];
    for (event, line) in cases {
        assert_eq!(event.line(), line);
    }
}

/// Signals by name and times in words in every event line (regression:
/// "signal 10 received: stopping", "killed by signal 9", "stopped in
/// 12.3 ms", "after 0.4 s").
#[test]
fn regression_event_lines_name_signals_and_say_times_in_words() {
    let rt = libc::SIGRTMIN() + 1;
    let cases = [
        (
            Event::Signal {
                signal: libc::SIGUSR1,
            },
            "SIGUSR1 received: stopping".to_owned(),
        ),
        (
            Event::Signal { signal: rt },
            "SIGRTMIN+1 received: stopping".to_owned(),
        ),
        (
            Event::RankExited {
                restart: 0,
                rank: 0,
                pid: 5,
                code: None,
                signal: Some(libc::SIGTERM),
                after_s: 0.4,
            },
            "rank 0 (pid 5) killed by SIGTERM after 400 ms".to_owned(),
        ),
        (
            Event::RoundStopped {
                restart: 2,
                stop_ms: 12.34,
                killed: 0,
                stuck: 0,
            },
            "round 2 stopped in 12 ms (0 needed SIGKILL)".to_owned(),
        ),
        (
            Event::RoundFailed {
                restart: 1,
                rank: 3,
                cause: "exited with 2".into(),
                after_s: 75.0,
            },
            "round 1 failed after 1 min 15 s: rank 3 exited with 2".to_owned(),
        ),
        (
            Event::RankNotBack {
                restart: 1,
                rank: 0,
                waited_s: 2.5,
            },
            "rank 0 has not registered again after 2.5 s".to_owned(),
        ),
    ];
    for (event, line) in cases {
        assert_eq!(event.line(), line);
    }
}

/// A backend that asks for one restart mid-round, and records its calls:
/// what a multi-node backend sees.
struct Recording {
    inner: LocalBackend,
    calls: Arc<Mutex<Vec<String>>>,
    asked: bool,
}

impl RoundBackend for Recording {
    fn begin_round(&mut self, restart: u32, nproc: u32) -> Result<RoundPlan> {
        self.calls
            .lock()
            .unwrap()
            .push(format!("begin {restart} {nproc}"));
        let mut plan = self.inner.begin_round(restart, nproc)?;
        // Two nodes of `nproc` ranks: this one is the second.
        plan.world_size = 2 * nproc;
        plan.rank_offset = nproc;
        Ok(plan)
    }

    fn restart_requested(&mut self) -> Option<String> {
        if self.asked {
            return None;
        }
        self.asked = true;
        Some("node 0 lost a rank".into())
    }

    fn end_round(&mut self, restart: u32, result: &RoundResult) -> Result<()> {
        self.calls
            .lock()
            .unwrap()
            .push(format!("end {restart} {result:?}"));
        Ok(())
    }
}

#[test]
fn a_backend_plans_each_round_and_may_ask_for_a_restart() {
    let _dog = Watchdog::new("launch backend", Duration::from_secs(30));
    let dir = TempDir::new("launch-backend");
    let calls = Arc::new(Mutex::new(Vec::new()));
    let mut backend = Recording {
        inner: LocalBackend::new("test"),
        calls: Arc::clone(&calls),
        asked: false,
    };
    // Round 0 waits to be stopped; round 1 checks it is global rank 2 or 3
    // of 4 and exits 0.
    let script = r#"
        if [ "$NODEIPC_RESTART_COUNT" = 0 ]; then exec sleep 30; fi
        [ "$WORLD_SIZE" = 4 ] && [ "$RANK" -ge 2 ] && [ "$LOCAL_RANK" -le 1 ]
    "#;
    let options = LaunchOptions {
        max_restarts: 1,
        ..options(&dir, 2, script)
    };
    let outcome = launch_with(&options, &mut backend, &|_| Vec::new()).unwrap();
    assert_eq!(outcome.exit_code, 0, "{}", outcome.summary);
    assert_eq!(outcome.restarts, 1);
    let calls = calls.lock().unwrap().clone();
    assert_eq!(
        calls,
        [
            "begin 0 2",
            "end 0 Failed(\"node 0 lost a rank\")",
            "begin 1 2",
            "end 1 Succeeded"
        ]
    );
    let groups: Vec<&String> = outcome
        .events
        .iter()
        .filter_map(|e| match e {
            Event::RoundStarted { group, .. } => Some(group),
            _ => None,
        })
        .collect();
    assert_eq!(groups.len(), 2);
    assert_ne!(groups[0], groups[1]);
}

#[test]
fn an_events_file_path_planted_with_a_symlink_is_refused_not_followed() {
    let dir = TempDir::new("launch-events-link");
    let target = dir.join("target");
    std::fs::write(&target, "").unwrap();
    let link = dir.join("events.jsonl");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let linked = LaunchOptions {
        json_events: Some(link.clone()),
        ..options(&dir, 1, "exit 0")
    };
    let error = launch(&linked).unwrap_err().to_string();
    assert!(error.contains("events.jsonl"), "{error}");
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "",
        "written through the link"
    );
    // A file of ours is appended to, and a new one is private.
    let fresh = dir.join("new.jsonl");
    let appended = LaunchOptions {
        json_events: Some(fresh.clone()),
        ..options(&dir, 1, "exit 0")
    };
    assert_eq!(launch(&appended).unwrap().exit_code, 0);
    let first = std::fs::read_to_string(&fresh).unwrap().lines().count();
    assert_eq!(launch(&appended).unwrap().exit_code, 0);
    assert_eq!(
        std::fs::read_to_string(&fresh).unwrap().lines().count(),
        2 * first
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&fresh).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}
