//! The clients' waits are bounded and their failures said in words: a
//! stopped monitor with a full backlog costs the timeout (not forever); an
//! unanswered request is a timeout naming the request and the socket (never
//! "os error 11"); a rank held out by another client is told so; a dead
//! monitor's error names the operation that found it dead.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{InProcess, Served, config};
use nodeipc_monitor::{
    ControlClient, Error, MonitorClient, MonitorConfig, RankInfo, control_socket_path,
};
use nodeipc_testkit::{Watchdog, fill_backlog};

const T: Duration = Duration::from_secs(10);

fn signal(pid: u32, signal: i32) {
    // SAFETY: kill(2) with a pid this test spawned and a valid signal.
    assert_eq!(unsafe { libc::kill(pid as i32, signal) }, 0);
}

/// Resumes the stopped monitor whatever the test's outcome, so that it can
/// be stopped in order.
struct Continue(u32);

impl Drop for Continue {
    fn drop(&mut self) {
        signal(self.0, libc::SIGCONT);
    }
}

fn assert_timeout_in_words(error: &Error, path: &Path, awaited: &str) {
    let text = error.to_string();
    assert!(error.is_timeout(), "expected a timeout: {text}");
    assert!(text.contains(&*path.to_string_lossy()), "{text}");
    assert!(text.contains(awaited), "{text}");
    assert!(!text.contains("os error 11"), "{text}");
}

#[test]
fn regression_a_stopped_monitor_with_a_full_backlog_costs_the_timeout() {
    let _dog = Watchdog::new("stopped_full_backlog", Duration::from_secs(60));
    let served = Served::spawn("mon-stopped", &config("{}"));
    signal(served.monitor.pid(), libc::SIGSTOP);
    let _resume = Continue(served.monitor.pid());
    let control = control_socket_path(&served.socket);
    let _held = (fill_backlog(&control), fill_backlog(&served.socket));
    for (path, connect) in [
        (
            control.clone(),
            Box::new(|| ControlClient::connect(&control, Duration::from_millis(300)).map(drop))
                as Box<dyn Fn() -> nodeipc_monitor::Result<()>>,
        ),
        (
            served.socket.clone(),
            Box::new(|| {
                MonitorClient::connect(&served.socket, Duration::from_millis(300)).map(drop)
            }),
        ),
    ] {
        let start = Instant::now();
        let error = connect().unwrap_err();
        let waited = start.elapsed();
        assert!(
            waited >= Duration::from_millis(290) && waited < Duration::from_secs(5),
            "gave up after {waited:?}"
        );
        assert!(matches!(error, Error::ConnectTimeout { .. }), "{error}");
        assert_timeout_in_words(&error, &path, "backlog is full");
    }
}

#[test]
fn regression_an_unanswered_request_is_a_timeout_naming_it_and_the_socket() {
    let _dog = Watchdog::new("unanswered_request", Duration::from_secs(60));
    let served = Served::spawn("mon-unanswered", &config("{}"));
    let mut client = MonitorClient::connect(&served.socket, T).unwrap();
    client.init(&RankInfo::this_process(0, 0)).unwrap();
    let mut control = ControlClient::connect(&served.socket, Duration::from_millis(200)).unwrap();
    client.set_timeout(Duration::from_millis(200)).unwrap();
    signal(served.monitor.pid(), libc::SIGSTOP);
    let _resume = Continue(served.monitor.pid());
    let error = client.heartbeat().unwrap_err();
    assert!(matches!(error, Error::Timeout { .. }), "{error}");
    assert_timeout_in_words(
        &error,
        &served.socket,
        "waiting for the reply to the heartbeat",
    );
    let error = client.start_section("step").unwrap_err();
    assert_timeout_in_words(&error, &served.socket, "the section start");
    // The control client's reads are bounded the same way.
    let error = control.status().unwrap_err();
    assert_timeout_in_words(
        &error,
        &control_socket_path(&served.socket),
        "waiting for the reply to the status query",
    );
}

#[test]
fn regression_a_rank_held_out_by_another_client_is_told_so_in_words() {
    let _dog = Watchdog::new("rank_held_out", Duration::from_secs(60));
    let server = InProcess::start(
        "mon-held-out",
        MonitorConfig {
            connection_wait: Duration::from_secs(30),
            ..MonitorConfig::default()
        },
    );
    let mut first = MonitorClient::connect(&server.socket, T).unwrap();
    first.init(&RankInfo::this_process(4, 0)).unwrap();
    let mut second = MonitorClient::connect(&server.socket, Duration::from_millis(300)).unwrap();
    let start = Instant::now();
    let error = second.init(&RankInfo::this_process(5, 1)).unwrap_err();
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    assert_timeout_in_words(&error, &server.socket, "waiting for the reply to Init");
    let text = error.to_string();
    assert!(
        text.contains("another client holds the rank connection (global rank 4"),
        "{text}"
    );
    first.heartbeat().unwrap();
    drop(second);
    server.finish();
}

#[test]
fn regression_a_client_refused_outright_gets_the_refusal_not_a_broken_pipe() {
    let _dog = Watchdog::new("refused_outright", Duration::from_secs(60));
    let server = InProcess::start(
        "mon-refused-outright",
        MonitorConfig {
            connection_wait: Duration::from_secs(30),
            ..MonitorConfig::default()
        },
    );
    let mut first = MonitorClient::connect(&server.socket, T).unwrap();
    first.init(&RankInfo::this_process(4, 0)).unwrap();
    // Sixteen wait for the rank slot; the next is refused at once and closed.
    let waiting: Vec<MonitorClient> = (0..16)
        .map(|_| MonitorClient::connect(&server.socket, T).unwrap())
        .collect();
    let mut refused = MonitorClient::connect(&server.socket, T).unwrap();
    // Let the monitor answer and close before we write: the write fails.
    std::thread::sleep(Duration::from_millis(300));
    let error = refused.init(&RankInfo::this_process(5, 1)).unwrap_err();
    let cause = error.refusal_cause().unwrap_or_else(|| panic!("{error}"));
    assert!(
        cause.contains("already wait for the rank connection"),
        "{cause}"
    );
    let text = error.to_string();
    assert!(text.contains(&*server.socket.to_string_lossy()) && text.contains("Init"));
    drop(waiting);
    first.heartbeat().unwrap();
    server.finish();
}

#[test]
fn regression_a_dead_monitor_names_the_operation_that_failed() {
    let _dog = Watchdog::new("dead_monitor", Duration::from_secs(60));
    let mut served = Served::spawn("mon-dead", &config("{}"));
    let mut client = MonitorClient::connect(&served.socket, T).unwrap();
    client.init(&RankInfo::this_process(0, 0)).unwrap();
    signal(served.monitor.pid(), libc::SIGKILL);
    let start = Instant::now();
    while served.monitor.try_wait().unwrap().is_none() {
        assert!(start.elapsed() < T, "the monitor did not die");
        std::thread::sleep(Duration::from_millis(5));
    }
    let socket = served.socket.clone();
    let error = client.heartbeat().unwrap_err();
    let text = error.to_string();
    assert!(text.contains("the heartbeat"), "{text}");
    assert!(text.contains(&*socket.to_string_lossy()), "{text}");
    assert!(text.contains("the monitor closed the connection"), "{text}");
    let error = client.end_section("step").unwrap_err();
    assert!(error.to_string().contains("the section end"), "{error}");
}

#[test]
fn a_zero_timeout_is_refused_in_words_and_a_huge_one_works() {
    let _dog = Watchdog::new("zero_and_huge", Duration::from_secs(60));
    let server = InProcess::start("mon-zero", MonitorConfig::default());
    for error in [
        MonitorClient::connect(&server.socket, Duration::ZERO).unwrap_err(),
        ControlClient::connect(&server.socket, Duration::ZERO).unwrap_err(),
    ] {
        assert!(matches!(error, Error::Config { .. }), "{error}");
        assert!(error.to_string().contains("timeout of 0"), "{error}");
    }
    let mut client = MonitorClient::connect(&server.socket, Duration::MAX).unwrap();
    assert!(client.set_timeout(Duration::ZERO).is_err());
    client.init(&RankInfo::this_process(0, 0)).unwrap();
    client.heartbeat().unwrap();
    let mut control =
        ControlClient::connect(&server.socket, Duration::from_millis(u64::MAX)).unwrap();
    assert_eq!(control.status().unwrap().heartbeats, 1);
    drop(client);
    server.finish();
}
