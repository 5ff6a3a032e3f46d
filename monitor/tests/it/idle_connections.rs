//! Connections that do nothing cannot hold what others need: the rank slot,
//! the queue for it, or the control slots. Each must prove itself within
//! the first-message timeout (1 s by default), and an idle control
//! connection gives its slot up to a newcomer.

use std::io::Write;
use std::time::{Duration, Instant};

use crate::common::{InProcess, raw};
use nodeipc_monitor::{ControlClient, MonitorClient, MonitorConfig, RankInfo, RankState};
use nodeipc_monitor_host::MonitorConfigFile;
use nodeipc_proto::monitor::{self as pb, client_message::Msg, server_message};
use nodeipc_testkit::Watchdog;

const T: Duration = Duration::from_secs(10);

fn server(tag: &str, change: impl FnOnce(&mut MonitorConfig)) -> InProcess {
    let mut config = MonitorConfig {
        check_interval: Duration::from_millis(50),
        ..MonitorConfig::default()
    };
    change(&mut config);
    InProcess::start(tag, config)
}

#[test]
fn the_default_first_message_timeout_is_one_second_and_the_file_sets_it() {
    let defaults = MonitorConfig::default();
    assert_eq!(defaults.first_message_timeout, Duration::from_secs(1));
    assert_eq!(defaults.reply_timeout, Duration::from_secs(5));
    let config =
        MonitorConfig::from_json(r#"{"first_message_timeout_ms": 250, "reply_timeout_ms": 700}"#)
            .unwrap();
    assert_eq!(config.first_message_timeout, Duration::from_millis(250));
    assert_eq!(config.reply_timeout, Duration::from_millis(700));
    for json in [
        r#"{"first_message_timeout_ms": 0}"#,
        r#"{"reply_timeout_ms": 0}"#,
        r#"{"reply_timeout_ms": 3600001}"#,
    ] {
        let e = MonitorConfig::from_json(json).unwrap_err().to_string();
        assert!(e.contains("timeout") || e.contains("wait"), "{json}: {e}");
    }
}

#[test]
fn regression_an_idle_rank_connection_is_closed_and_the_waiting_rank_gets_in() {
    let _dog = Watchdog::new("idle_rank_squatter", Duration::from_secs(60));
    // The defaults: 1 s to register, 5 s of waiting for the slot. Before
    // the fix the squatter held the slot as long as it liked and the real
    // rank was refused after its 5 s of waiting.
    let server = server("mon-squat-rank", |_| {});
    let mut squatter = raw::connect(&server.socket);
    // Let it take the slot before the rank comes.
    std::thread::sleep(Duration::from_millis(100));
    let start = Instant::now();
    let mut rank = MonitorClient::connect(&server.socket, T).unwrap();
    rank.init(&RankInfo::this_process(7, 0)).unwrap();
    let waited = start.elapsed();
    assert!(
        waited < Duration::from_secs(3),
        "registered after {waited:?}"
    );
    let status = rank.status().unwrap();
    assert_eq!(status.state, RankState::Initialized);
    assert_eq!(status.rank.unwrap().global_rank, 7);
    // The squatter was told why, then closed.
    let cause = raw::error_cause(&mut squatter);
    assert!(
        cause.contains("did not register (Init) within 1000 ms")
            && cause.contains("first_message_timeout_ms"),
        "{cause}"
    );
    assert!(raw::read_to_close(&mut squatter).is_empty());
    assert!(server.log_text().contains("rank connection of pid"));
    server.finish();
}

#[test]
fn a_rank_connection_that_only_asks_for_the_status_does_not_keep_the_slot() {
    let _dog = Watchdog::new("status_only_squatter", Duration::from_secs(60));
    let server = server("mon-squat-status", |c| {
        c.first_message_timeout = Duration::from_millis(300)
    });
    // A status query is allowed before Init, but it does not register: the
    // slot is not this connection's to keep.
    let mut squatter = raw::connect(&server.socket);
    squatter
        .write_all(&raw::client_frame(Msg::StatusQuery(pb::StatusQuery {})))
        .unwrap();
    assert!(matches!(
        raw::reply(&mut squatter),
        server_message::Msg::Status(_)
    ));
    let start = Instant::now();
    let mut rank = MonitorClient::connect(&server.socket, T).unwrap();
    rank.init(&RankInfo::this_process(1, 0)).unwrap();
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    let cause = raw::error_cause(&mut squatter);
    assert!(
        cause.contains("did not register (Init) within 300 ms"),
        "{cause}"
    );
    // The registered rank is never closed for idling.
    std::thread::sleep(Duration::from_millis(600));
    rank.heartbeat().unwrap();
    server.finish();
}

#[test]
fn regression_idle_control_connections_do_not_lock_the_status_out() {
    let _dog = Watchdog::new("idle_control_squatters", Duration::from_secs(60));
    let server = server("mon-squat-control", |_| {});
    let control = nodeipc_monitor::control_socket_path(&server.socket);
    let mut squatters: Vec<_> = (0..16).map(|_| raw::connect(&control)).collect();
    std::thread::sleep(Duration::from_millis(100));
    // Before the fix: refused at once, and for as long as they stayed
    // ("16 control connections are open already"). Now it waits in the
    // kernel's queue until the squatters' second is up.
    let start = Instant::now();
    let status = ControlClient::connect(&server.socket, T)
        .unwrap()
        .status()
        .unwrap();
    assert_eq!(status.state, RankState::Waiting);
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    for squatter in &mut squatters {
        let cause = raw::error_cause(squatter);
        assert!(
            cause.contains("did not send a request within 1000 ms"),
            "{cause}"
        );
    }
    server.finish();
}

#[test]
fn an_idle_control_connection_gives_its_slot_up_to_a_newcomer() {
    let _dog = Watchdog::new("idle_control_evicted", Duration::from_secs(60));
    let server = server("mon-evict", |c| {
        c.first_message_timeout = Duration::from_millis(200)
    });
    // Sixteen launchers that asked once and keep their connections.
    let mut held: Vec<ControlClient> = (0..16)
        .map(|_| {
            let mut c = ControlClient::connect(&server.socket, T).unwrap();
            c.status().unwrap();
            c
        })
        .collect();
    // Settled connections are not closed for idling on their own...
    std::thread::sleep(Duration::from_millis(500));
    held[15].status().unwrap();
    // ...but the idlest gives its slot up when another client needs one.
    let start = Instant::now();
    ControlClient::connect(&server.socket, T)
        .unwrap()
        .status()
        .unwrap();
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    let evicted: Vec<String> = held
        .iter_mut()
        .filter_map(|c| c.status().err())
        .map(|e| e.to_string())
        .collect();
    // It was closed (its client finds out as it sends), with the reason
    // sent to it and logged.
    assert_eq!(evicted.len(), 1, "{evicted:?}");
    let log = server.log_text();
    assert!(
        log.contains("idle for") && log.contains("another client needed one"),
        "{log}"
    );
    server.finish();
}

#[test]
fn idle_clients_waiting_for_the_rank_slot_do_not_fill_the_queue() {
    let _dog = Watchdog::new("idle_waiters", Duration::from_secs(60));
    let server = server("mon-idle-wait", |c| {
        c.first_message_timeout = Duration::from_millis(300);
        c.connection_wait = Duration::from_millis(1500);
    });
    let mut rank = MonitorClient::connect(&server.socket, T).unwrap();
    rank.init(&RankInfo::this_process(0, 0)).unwrap();
    // Sixteen silent clients fill the queue for the slot...
    let mut silent: Vec<_> = (0..16).map(|_| raw::connect(&server.socket)).collect();
    for s in &mut silent {
        let cause = raw::error_cause(s);
        assert!(
            cause.contains("did not send anything within 300 ms"),
            "{cause}"
        );
    }
    // ...and are gone after their 300 ms: a client that does send waits
    // its turn instead of being refused for a full queue.
    let mut second = MonitorClient::connect(&server.socket, T).unwrap();
    let refused = second.init(&RankInfo::this_process(1, 0)).unwrap_err();
    let cause = refused.refusal_cause().unwrap_or_default().to_owned();
    assert!(cause.contains("limit 1500 ms"), "{refused}");
    rank.heartbeat().unwrap();
    server.finish();
}
