//! `TimeoutEstimator`: max seen × safety factor, merged with the previous
//! proposal, refused before enough samples; and fed by a real client.

use std::time::{Duration, Instant};

use crate::common::InProcess;
use nodeipc_monitor::{Error, MonitorClient, MonitorConfig, RankInfo, TimeoutEstimator};
use nodeipc_testkit::Watchdog;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn it_refuses_before_enough_samples_saying_how_many_are_missing() {
    let mut e = TimeoutEstimator::new(3.0, 5).unwrap();
    let t0 = Instant::now();
    e.record_init(t0);
    e.record_heartbeat(t0 + ms(10)); // the initial heartbeat: not an interval
    e.record_heartbeat(t0 + ms(20));
    let error = e.propose().unwrap_err();
    match &error {
        Error::NotEnoughSamples { what, have, need } => {
            assert_eq!((what.as_str(), *have, *need), ("heartbeat", 1, 5))
        }
        other => panic!("{other:?}"),
    }
    assert!(error.to_string().contains("4 missing"), "{error}");
}

#[test]
fn it_proposes_max_times_factor_and_averages_with_the_previous() {
    let mut e = TimeoutEstimator::new(2.0, 2)
        .unwrap()
        .with_smoothing(0.25)
        .unwrap();
    let t0 = Instant::now();
    e.record_init(t0);
    for at in [0, 100, 250, 300] {
        e.record_heartbeat(t0 + ms(at));
    }
    // Intervals 100, 150, 50: max 150 × 2.
    let first = e.propose().unwrap();
    assert_eq!(first.heartbeat, Some(ms(300)));
    // Init to the first heartbeat took 0 ms here: the 1 ms minimum (a
    // floor, `with_floor`, keeps real proposals sane).
    assert_eq!(first.initial_heartbeat, Some(ms(1)));
    e.record_heartbeat(t0 + ms(700)); // a 400 ms interval: candidate 800
    let second = e.propose().unwrap();
    // 0.25 × 800 + 0.75 × 300
    assert_eq!(second.heartbeat, Some(ms(425)));
}

#[test]
fn sections_and_out_of_section_are_proposed_once_each_has_enough_samples() {
    let mut e = TimeoutEstimator::new(1.5, 2).unwrap();
    let t0 = Instant::now();
    e.record_init(t0);
    for at in [0, 10, 20] {
        e.record_heartbeat(t0 + ms(at));
    }
    // Out of section 0..100, step 100..300, out 300..400, step 400..500.
    e.record_section_start("step", t0 + ms(100));
    e.record_section_end("step", t0 + ms(300));
    e.record_section_start("step", t0 + ms(400));
    e.record_section_start("save", t0 + ms(450));
    e.record_all_sections_end(t0 + ms(500));
    assert_eq!(e.section_samples("step"), 2);
    assert_eq!(e.section_samples("save"), 1);
    let p = e.propose().unwrap();
    assert_eq!(p.sections.get("step"), Some(&ms(300)));
    assert_eq!(p.sections.get("save"), None, "one sample is not enough");
    assert_eq!(p.out_of_section, Some(ms(150)));
}

#[test]
fn sections_are_proposed_without_heartbeats_and_averaged_with_the_previous() {
    let mut e = TimeoutEstimator::new(2.0, 2)
        .unwrap()
        .with_smoothing(0.5)
        .unwrap();
    let t0 = Instant::now();
    e.record_init(t0);
    // No heartbeat at all: out 0..100, step 100..200, out 200..250, step 250..450.
    e.record_section_start("step", t0 + ms(100));
    e.record_section_end("step", t0 + ms(200));
    e.record_section_start("step", t0 + ms(250));
    e.record_section_end("step", t0 + ms(450));
    assert!(
        e.propose().is_err(),
        "the full proposal still wants heartbeats"
    );
    let first = e.propose_sections();
    assert_eq!(first.heartbeat, None);
    assert_eq!(first.sections.get("step"), Some(&ms(400)));
    assert_eq!(first.out_of_section, Some(ms(200)));
    // A longer step: averaged with the previous proposal, 0.5 x 1000 + 0.5 x 400.
    e.record_section_start("step", t0 + ms(500));
    e.record_section_end("step", t0 + ms(1000));
    let second = e.propose_sections();
    assert_eq!(second.sections.get("step"), Some(&ms(700)));
}

#[test]
fn bad_parameters_are_refused() {
    assert!(TimeoutEstimator::new(0.5, 3).is_err());
    assert!(TimeoutEstimator::new(f64::NAN, 3).is_err());
    assert!(TimeoutEstimator::new(2.0, 0).is_err());
    assert!(
        TimeoutEstimator::new(2.0, 1)
            .unwrap()
            .with_smoothing(0.0)
            .is_err()
    );
    assert!(
        TimeoutEstimator::new(2.0, 1)
            .unwrap()
            .with_smoothing(1.5)
            .is_err()
    );
}

#[test]
fn a_client_feeds_its_estimator_and_sends_what_it_proposes() {
    let _dog = Watchdog::new("estimator_client", Duration::from_secs(60));
    let server = InProcess::start(
        "mon-estimate",
        MonitorConfig {
            check_interval: ms(50),
            ..MonitorConfig::default()
        },
    );
    let mut client = MonitorClient::connect(&server.socket, Duration::from_secs(10)).unwrap();
    client.attach_estimator(TimeoutEstimator::new(4.0, 3).unwrap());
    client.init(&RankInfo::this_process(0, 0)).unwrap();
    client.heartbeat().unwrap();
    client.heartbeat().unwrap();
    assert!(matches!(
        client.estimator_mut().unwrap().propose(),
        Err(Error::NotEnoughSamples {
            have: 1,
            need: 3,
            ..
        })
    ));
    for _ in 0..3 {
        std::thread::sleep(ms(20));
        client.start_section("step").unwrap();
        client.end_section("step").unwrap();
        client.heartbeat().unwrap();
    }
    assert_eq!(client.estimator().unwrap().heartbeat_samples(), 4);
    let proposal = client.estimator_mut().unwrap().propose().unwrap();
    let effective = client.send_timeouts(&proposal).unwrap();
    let heartbeat = effective
        .timeouts
        .heartbeat
        .expect("a heartbeat timeout was sent");
    assert!(heartbeat >= ms(80), "{heartbeat:?}");
    assert!(effective.timeouts.sections.contains_key("step"));
    let status = client.status().unwrap();
    assert_eq!(
        status.timeouts.heartbeat_ms,
        Some(heartbeat.as_millis() as u64)
    );
    server.finish();
}
