//! The estimator's persisted state: a versioned binary form read back
//! exactly, every form earlier builds wrote still read (fixtures of each),
//! and bad bytes an error naming what was wrong, never a panic or an
//! allocation sized by the input.

use std::time::{Duration, Instant};

use nodeipc_monitor::{MAX_STATE, TimeoutEstimator};
use nodeipc_monitor_host::EstimatorState;

fn estimator() -> TimeoutEstimator {
    TimeoutEstimator::new(2.0, 1)
        .unwrap()
        .with_smoothing(1.0)
        .unwrap()
}

/// An estimator that has seen an init, beats and a section, and proposed.
fn seasoned() -> TimeoutEstimator {
    let mut e = estimator();
    let t = Instant::now();
    e.record_init(t);
    e.record_heartbeat(t + Duration::from_millis(900));
    e.record_heartbeat(t + Duration::from_millis(1000));
    e.record_section_start("step \"one\"", t + Duration::from_millis(1000));
    e.record_section_end("step \"one\"", t + Duration::from_millis(1120));
    e.propose().unwrap();
    e
}

#[test]
fn the_state_reads_back_into_the_same_observations_and_proposal() {
    let first = seasoned();
    let state = first.state();
    assert_eq!(&state[..4], b"NIES", "binary, with its magic word");
    let mut second = estimator();
    second.restore_state(&state).unwrap();
    assert_eq!(second.initial_samples(), first.initial_samples());
    assert_eq!(second.heartbeat_samples(), first.heartbeat_samples());
    assert_eq!(second.section_samples("step \"one\""), 1);
    // The same observations and the same previous proposal: the same state.
    assert_eq!(second.state(), state);
}

#[test]
fn every_truncation_and_any_trailing_byte_is_an_error_naming_the_state() {
    let state = seasoned().state();
    for cut in 0..state.len() {
        let mut e = estimator();
        let error = e.restore_state(&state[..cut]).unwrap_err().to_string();
        assert!(error.contains("estimator state"), "cut at {cut}: {error}");
        assert_eq!(e.initial_samples(), 0, "nothing changed");
    }
    let mut longer = state.clone();
    longer.push(0);
    let error = estimator().restore_state(&longer).unwrap_err().to_string();
    assert!(error.contains("after the last field"), "{error}");
}

#[test]
fn a_length_or_version_from_a_hostile_rank_is_refused_by_name() {
    let state = seasoned().state();
    // Version 9.
    let mut v9 = state.clone();
    v9[4] = 9;
    let error = estimator().restore_state(&v9).unwrap_err().to_string();
    assert!(error.contains("version 9"), "{error}");
    // The section count (after magic, version and three sample pairs)
    // claims four billion sections: refused before anything is allocated.
    let mut huge = state.clone();
    huge[6 + 48..6 + 52].copy_from_slice(&u32::MAX.to_le_bytes());
    let error = estimator().restore_state(&huge).unwrap_err().to_string();
    assert!(
        error.contains("sections") && error.contains("at most"),
        "{error}"
    );
    // Twenty sections the bytes left cannot hold.
    huge[6 + 48..6 + 52].copy_from_slice(&20u32.to_le_bytes());
    let error = estimator().restore_state(&huge).unwrap_err().to_string();
    assert!(error.contains("cannot fit"), "{error}");
    // A section name that is not UTF-8.
    let mut bad_name = state.clone();
    bad_name[6 + 52 + 4] = 0xff;
    let error = estimator()
        .restore_state(&bad_name)
        .unwrap_err()
        .to_string();
    assert!(error.contains("not UTF-8"), "{error}");
}

#[test]
fn random_bytes_never_panic() {
    // xorshift: deterministic, no dependency.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let valid = seasoned().state();
    for round in 0..2000 {
        let mut bytes = match round % 2 {
            // Pure noise behind the magic word and version.
            0 => {
                let len = (next() % 256) as usize;
                let mut b = b"NIES\x02\x00".to_vec();
                b.extend((0..len).map(|_| next() as u8));
                b
            }
            // A valid state with a few bytes flipped.
            _ => valid.clone(),
        };
        for _ in 0..3 {
            let i = (next() as usize) % bytes.len();
            if i >= 6 {
                bytes[i] ^= next() as u8 | 1;
            }
        }
        let mut e = estimator();
        if e.restore_state(&bytes).is_ok() {
            // Accepted: then it is a state, and writes back within the cap.
            assert!(e.state().len() <= MAX_STATE);
        }
    }
}

/// What a build before the binary form wrote (version 1, JSON).
const V1_JSON: &[u8] = br#"{"version":1,"initial":[2,900],"heartbeat":[5,100],"out_of_section":[0,0],"sections":{"step":[3,120]},"previous":[1800,200,null,{"step":240}]}"#;

#[test]
fn the_json_form_of_earlier_builds_is_still_read() {
    let mut e = estimator();
    e.restore_state(V1_JSON).unwrap();
    assert_eq!(e.initial_samples(), 2);
    assert_eq!(e.heartbeat_samples(), 5);
    assert_eq!(e.section_samples("step"), 3);
    // And written back in the binary form.
    assert_eq!(&e.state()[..4], b"NIES");
}

#[test]
fn many_long_section_names_still_give_a_state_that_reads_back() {
    let mut e = estimator();
    let t = Instant::now();
    // 100 sections of 250-byte names: about 27 KB of samples, over the cap.
    for i in 0..100u64 {
        let name = format!("{i:03}{}", "x".repeat(247));
        for _ in 0..=(i % 3) {
            e.record_section_start(&name, t);
            e.record_section_end(&name, t + Duration::from_millis(10 + i));
        }
    }
    let state = e.state();
    assert!(state.len() <= MAX_STATE, "{} bytes", state.len());
    let mut back = estimator();
    back.restore_state(&state).unwrap();
    // What was dropped was seen least often: every section seen 3 times stayed.
    for i in (2..100u64).step_by(3) {
        let name = format!("{i:03}{}", "x".repeat(247));
        assert_eq!(back.section_samples(&name), 3, "section {i}");
    }
}

#[test]
fn more_sections_than_a_state_may_hold_keep_the_most_seen() {
    let mut e = estimator();
    let t = Instant::now();
    for i in 0..(nodeipc_monitor::MAX_SECTIONS as u64 + 10) {
        let name = format!("s{i}");
        for _ in 0..=(i % 2) {
            e.record_section_start(&name, t);
            e.record_section_end(&name, t + Duration::from_millis(5));
        }
    }
    let state = e.state();
    let mut back = estimator();
    back.restore_state(&state).unwrap();
    for i in (1..74u64).step_by(2) {
        assert_eq!(back.section_samples(&format!("s{i}")), 2, "s{i}");
    }
}

/// What builds since the binary form write (version 2): the observations of
/// `V1_JSON`, as bytes.
const V2_BYTES: &[u8] = include_bytes!("../fixtures/estimator_state_v2.bin");

#[test]
fn the_binary_form_of_earlier_builds_is_read_and_written_again_unchanged() {
    let mut e = estimator();
    e.restore_state(V2_BYTES).unwrap();
    assert_eq!(e.initial_samples(), 2);
    assert_eq!(e.heartbeat_samples(), 5);
    assert_eq!(e.section_samples("step"), 3);
    // The one form written is still this one, byte for byte.
    assert_eq!(e.state(), V2_BYTES);
    // And both earlier forms say the same.
    let mut from_json = estimator();
    from_json.restore_state(V1_JSON).unwrap();
    assert_eq!(from_json.state(), V2_BYTES);
}
