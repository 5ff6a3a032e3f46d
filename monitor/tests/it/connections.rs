//! One rank connection at a time, and what happens when it goes: a second
//! client waits then is refused (or served), a lost connection clears the
//! state and reports open sections, the launcher can drop it, and a rank
//! that dies is seen at once (pidfd), not at the next check.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{InProcess, Proc, Served, config};
use nodeipc_monitor::{ControlClient, Error, MonitorClient, MonitorConfig, RankInfo, RankState};
use nodeipc_testkit::Watchdog;

const T: Duration = Duration::from_secs(10);

fn in_process(tag: &str, change: impl FnOnce(&mut MonitorConfig)) -> InProcess {
    let mut config = MonitorConfig {
        check_interval: Duration::from_millis(50),
        ..MonitorConfig::default()
    };
    change(&mut config);
    InProcess::start(tag, config)
}

#[test]
fn a_second_client_waits_then_is_refused_with_a_reason() {
    let _dog = Watchdog::new("second_client_refused", Duration::from_secs(60));
    let server = in_process("mon-second", |c| {
        c.connection_wait = Duration::from_millis(300)
    });
    let mut first = MonitorClient::connect(&server.socket, T).unwrap();
    first.init(&RankInfo::this_process(4, 0)).unwrap();
    let mut second = MonitorClient::connect(&server.socket, T).unwrap();
    let start = Instant::now();
    let refused = second.init(&RankInfo::this_process(5, 1)).unwrap_err();
    let waited = start.elapsed();
    let cause = refused
        .refusal_cause()
        .unwrap_or_else(|| panic!("{refused}"));
    assert!(cause.contains("one rank connection at a time"), "{cause}");
    assert!(cause.contains("global rank 4"), "{cause}");
    assert!(cause.contains("limit 300 ms"), "{cause}");
    assert!(
        waited >= Duration::from_millis(250),
        "refused after {waited:?}"
    );
    assert!(
        waited <= Duration::from_millis(300) + Duration::from_secs(2),
        "{waited:?}"
    );
    // The first one was never disturbed.
    first.heartbeat().unwrap();
    let status = first.status().unwrap();
    assert_eq!(status.rank.unwrap().global_rank, 4);
    server.finish();
}

#[test]
fn a_second_client_is_served_when_the_first_leaves_in_time() {
    let _dog = Watchdog::new("second_client_served", Duration::from_secs(60));
    let server = in_process("mon-handover", |c| {
        c.connection_wait = Duration::from_secs(20)
    });
    let mut first = MonitorClient::connect(&server.socket, T).unwrap();
    first.init(&RankInfo::this_process(0, 0)).unwrap();
    let socket = server.socket.clone();
    let second = std::thread::spawn(move || {
        let mut second = MonitorClient::connect(&socket, Duration::from_secs(30)).unwrap();
        let start = Instant::now();
        second.init(&RankInfo::this_process(1, 1)).unwrap();
        second.heartbeat().unwrap();
        (start.elapsed(), second.status().unwrap())
    });
    std::thread::sleep(Duration::from_millis(200));
    drop(first);
    let (waited, status) = second.join().unwrap();
    assert!(
        waited >= Duration::from_millis(100),
        "served after {waited:?}"
    );
    assert!(waited < Duration::from_secs(5), "served after {waited:?}");
    assert_eq!(status.state, RankState::Running);
    assert_eq!(status.rank.unwrap().global_rank, 1);
    server.finish();
}

#[test]
fn a_lost_connection_clears_the_state_and_reports_open_sections() {
    let _dog = Watchdog::new("connection_lost", Duration::from_secs(60));
    let server = in_process("mon-lost", |_| {});
    let mut client = MonitorClient::connect(&server.socket, T).unwrap();
    client.init(&RankInfo::this_process(0, 0)).unwrap();
    client.heartbeat().unwrap();
    client.start_section("load").unwrap();
    client.start_section("step").unwrap();
    drop(client);
    let status = server.wait_status(T, |s| s.state == RankState::Restarting);
    assert!(
        status.rank.is_none() && status.open_sections.is_empty(),
        "{status:?}"
    );
    assert_eq!(status.heartbeats, 0);
    let log = server.log_text();
    let warning = log
        .lines()
        .find(|l| l.starts_with("Warn") && l.contains("sections still open"))
        .unwrap_or_else(|| panic!("no warning in:\n{log}"));
    assert!(
        warning.contains("\"load\"") && warning.contains("\"step\""),
        "{warning}"
    );
    // The restarted rank registers afresh.
    let mut again = MonitorClient::connect(&server.socket, T).unwrap();
    again.init(&RankInfo::this_process(0, 0)).unwrap();
    let status = again.status().unwrap();
    assert_eq!(status.state, RankState::Initialized);
    assert!(status.open_sections.is_empty());
    server.finish();
}

#[test]
fn without_an_expected_restart_a_lost_connection_means_waiting() {
    let _dog = Watchdog::new("no_restart_expected", Duration::from_secs(60));
    let server = in_process("mon-norestart", |c| c.restart_expected = false);
    let mut client = MonitorClient::connect(&server.socket, T).unwrap();
    client.init(&RankInfo::this_process(0, 0)).unwrap();
    drop(client);
    server.wait_status(T, |s| s.state == RankState::Waiting && s.rank.is_none());
    server.finish();
}

#[test]
fn the_launcher_can_close_the_rank_connection() {
    let _dog = Watchdog::new("close_connection", Duration::from_secs(60));
    let server = in_process("mon-close", |_| {});
    let mut control = ControlClient::connect(&server.socket, T).unwrap();
    let refused = control.close_connection().unwrap_err();
    assert_eq!(refused.refusal_cause(), Some("no rank connection to close"));
    let mut client = MonitorClient::connect(&server.socket, T).unwrap();
    client.init(&RankInfo::this_process(0, 0)).unwrap();
    client.start_section("step").unwrap();
    assert_eq!(control.status().unwrap().state, RankState::Initialized);
    control.close_connection().unwrap();
    assert_eq!(control.status().unwrap().state, RankState::Restarting);
    match client.heartbeat() {
        Err(Error::Frame { .. }) => {}
        other => panic!("expected a closed connection, got {other:?}"),
    }
    assert!(
        server
            .log_text()
            .contains("the launcher closed the rank connection")
    );
    server.finish();
}

#[test]
fn a_crashed_rank_is_seen_at_once_not_at_the_next_check() {
    let _dog = Watchdog::new("crashed_rank", Duration::from_secs(60));
    // A check every 30 s: only the pidfd (or the socket) can notice in time.
    let served = Served::spawn("mon-crash", &config(r#"{"check_interval_ms": 30000}"#));
    let mut rank = served.rank(&["--beats", "0", "--then", "beat-forever"]);
    rank.expect_line("registered", T);
    rank.expect_line("beating", T);
    served.wait_status(T, |s| s.state == RankState::Running);
    let killed = Instant::now();
    rank.guard.kill();
    let status = served.wait_status(Duration::from_secs(10), |s| {
        s.state == RankState::Restarting
    });
    assert!(
        killed.elapsed() < Duration::from_secs(5),
        "{:?}",
        killed.elapsed()
    );
    assert!(status.rank.is_none());
    // Whichever came first: its socket closing or its pidfd (the next test
    // covers the pidfd alone).
    let log = served.log();
    assert!(
        log.contains("exited without a timeout") || log.contains("the rank closed its connection"),
        "{log}"
    );
}

#[test]
fn a_rank_that_dies_while_its_parent_stays_connected_is_seen_through_its_pidfd() {
    let _dog = Watchdog::new("pidfd_exit", Duration::from_secs(60));
    let server = in_process("mon-pidfd", |c| c.check_interval = Duration::from_secs(30));
    let mut child = Proc::spawn(Command::new("sleep").arg("30"));
    let mut client = MonitorClient::connect(&server.socket, T).unwrap();
    client
        .init(&RankInfo {
            pid: child.pid(),
            ..RankInfo::this_process(0, 0)
        })
        .unwrap();
    client.start_section("step").unwrap();
    let killed = Instant::now();
    child.guard.kill();
    // This connection stays open: only the pidfd tells.
    server.wait_status(Duration::from_secs(10), |s| {
        s.state == RankState::Restarting
    });
    assert!(
        killed.elapsed() < Duration::from_secs(5),
        "{:?}",
        killed.elapsed()
    );
    let log = server.log_text();
    assert!(
        log.contains(&format!(
            "rank pid {} exited without a timeout with sections still open: \"step\"",
            child.pid()
        )),
        "{log}"
    );
    assert!(child.wait_exit(T).code().is_none());
    server.finish();
}
