//! The estimator's initial heartbeat timeout, over past runs through its
//! persisted state; its floor; the client applying estimates itself
//! (`calculate_and_set_hb_timeouts` semantics).

use std::time::{Duration, Instant};

use crate::common::InProcess;
use nodeipc_monitor::{MonitorClient, MonitorConfig, RankInfo, TimeoutEstimator};
use nodeipc_monitor_host::EstimatorState;
use nodeipc_testkit::Watchdog;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// One run: Init at t0, first heartbeat after `initial` ms, then beats
/// every 100 ms.
fn run(e: &mut TimeoutEstimator, initial: u64) {
    let t0 = Instant::now();
    e.record_init(t0);
    for at in [initial, initial + 100, initial + 200, initial + 300] {
        e.record_heartbeat(t0 + ms(at));
    }
}

#[test]
fn the_initial_heartbeat_timeout_is_estimated_from_init_to_the_first_heartbeat() {
    let mut e = TimeoutEstimator::new(2.0, 3)
        .unwrap()
        .with_smoothing(1.0)
        .unwrap();
    run(&mut e, 400);
    assert_eq!(e.initial_samples(), 1);
    let p = e.propose().unwrap();
    assert_eq!(p.initial_heartbeat, Some(ms(800)));
    assert_eq!(p.heartbeat, Some(ms(200)));
}

#[test]
fn past_runs_come_back_through_the_state_and_count_toward_the_estimate() {
    let mut first = TimeoutEstimator::new(2.0, 3)
        .unwrap()
        .with_smoothing(1.0)
        .unwrap();
    run(&mut first, 900);
    first.propose().unwrap();
    let saved = first.state();
    // The restarted rank: a faster start this time, the slow one remembered.
    let mut second = TimeoutEstimator::new(2.0, 3)
        .unwrap()
        .with_smoothing(1.0)
        .unwrap();
    second.restore_state(&saved).unwrap();
    run(&mut second, 300);
    assert_eq!(second.initial_samples(), 2);
    let p = second.propose().unwrap();
    assert_eq!(p.initial_heartbeat, Some(ms(1800)));
    // Garbage is refused, naming what, and changes nothing.
    for bad in [&b"{"[..], br#"{"version":9}"#, &vec![b' '; 20_000][..]] {
        let error = second.restore_state(bad).unwrap_err().to_string();
        assert!(error.contains("estimator state"), "{error}");
    }
    assert_eq!(second.initial_samples(), 2);
}

#[test]
fn no_proposal_is_below_the_floor() {
    let mut e = TimeoutEstimator::new(1.0, 1)
        .unwrap()
        .with_floor(Duration::from_secs(60));
    run(&mut e, 10);
    let p = e.propose().unwrap();
    assert_eq!(p.initial_heartbeat, Some(Duration::from_secs(60)));
    assert_eq!(p.heartbeat, Some(Duration::from_secs(60)));
}

#[test]
fn the_client_applies_its_estimates_and_skips_when_not_ready() {
    let _dog = Watchdog::new("estimates applied", Duration::from_secs(60));
    let server = InProcess::start("mon-estimate", MonitorConfig::default());
    let mut client = MonitorClient::connect(&server.socket, Duration::from_secs(10)).unwrap();
    client.init(&RankInfo::this_process(0, 0)).unwrap();
    client.attach_estimator(
        TimeoutEstimator::new(2.0, 2)
            .unwrap()
            .with_floor(Duration::from_secs(5)),
    );
    client.heartbeat().unwrap();
    // One beat: no interval yet.
    assert!(client.estimator_mut().unwrap().propose().is_err());
    client.heartbeat().unwrap();
    client.heartbeat().unwrap();
    let proposal = client.estimator_mut().unwrap().propose().unwrap();
    let applied = client.send_timeouts(&proposal).unwrap();
    // Beats microseconds apart: the floor decides.
    assert_eq!(applied.timeouts.heartbeat, Some(Duration::from_secs(5)));
    assert_eq!(
        applied.timeouts.initial_heartbeat,
        Some(Duration::from_secs(5))
    );
    let status = client.status().unwrap();
    assert_eq!(status.timeouts.heartbeat_ms, Some(5000));
    assert_eq!(status.timeouts.initial_heartbeat_ms, Some(5000));
    drop(client);
    server.finish();
}
