//! The JSON configuration: the README's example, defaults, round trip, and
//! each refusal naming what is wrong.

use std::time::Duration;

use nodeipc_monitor::{MonitorConfig, Signal};
use nodeipc_monitor_host::Error;
use nodeipc_monitor_host::MonitorConfigFile;
use nodeipc_testkit::TempDir;

/// The example in the README, verbatim.
const README_EXAMPLE: &str = r#"{
  "initial_heartbeat_timeout_ms": 120000,
  "heartbeat_timeout_ms": 30000,
  "section_timeouts_ms": { "checkpoint": 600000, "step": 5000 },
  "out_of_section_timeout_ms": 60000,
  "check_interval_ms": 1000,
  "termination_signal": "SIGTERM",
  "kill_after_ms": 5000,
  "skip_section_replies": false,
  "connection_wait_ms": 5000,
  "first_message_timeout_ms": 1000,
  "reply_timeout_ms": 5000,
  "restart_expected": true,
  "heartbeat_region": true
}"#;

#[test]
fn the_readme_example_parses_and_is_in_the_readme() {
    let readme = include_str!("../../README.md");
    assert!(readme.contains(README_EXAMPLE), "README example drifted");
    let c = MonitorConfig::from_json(README_EXAMPLE).unwrap();
    assert_eq!(c.timeouts.initial_heartbeat, Some(Duration::from_secs(120)));
    assert_eq!(c.timeouts.heartbeat, Some(Duration::from_secs(30)));
    assert_eq!(c.timeouts.out_of_section, Some(Duration::from_secs(60)));
    assert_eq!(c.timeouts.sections["step"], Duration::from_secs(5));
    assert_eq!(c.termination_signal, Signal::TERM);
    assert_eq!(c.kill_after, Some(Duration::from_secs(5)));
    assert!(c.restart_expected && c.heartbeat_region && !c.skip_section_replies);
}

#[test]
fn an_empty_object_is_the_default_and_every_config_round_trips() {
    assert_eq!(
        MonitorConfig::from_json("{}").unwrap(),
        MonitorConfig::default()
    );
    let defaults = MonitorConfig::default();
    assert_eq!(defaults.termination_signal, Signal::KILL);
    assert_eq!(defaults.timeouts.heartbeat, None);
    for config in [defaults, MonitorConfig::from_json(README_EXAMPLE).unwrap()] {
        assert_eq!(MonitorConfig::from_json(&config.to_json()).unwrap(), config);
    }
}

#[test]
fn signals_by_name_short_name_or_number() {
    for (spec, signal) in [
        (r#""SIGTERM""#, Signal::TERM),
        (r#""term""#, Signal::TERM),
        ("9", Signal::KILL),
        (r#""USR1""#, Signal::USR1),
    ] {
        let json = format!(r#"{{"termination_signal": {spec}}}"#);
        assert_eq!(
            MonitorConfig::from_json(&json).unwrap().termination_signal,
            signal
        );
    }
}

#[test]
fn bad_values_are_refused_naming_the_field() {
    let cases = [
        (
            r#"{"heartbeat_timeout_ms": 0}"#,
            "heartbeat_timeout_ms is 0",
        ),
        (r#"{"check_interval_ms": 0}"#, "check interval"),
        (
            r#"{"termination_signal": "SIGSTOP"}"#,
            "\"SIGSTOP\" is not one of SIGKILL",
        ),
        (r#"{"termination_signal": 19}"#, "\"19\" is not one of"),
        (r#"{"section_timeouts_ms": {"": 5}}"#, "non-empty name"),
        (
            r#"{"section_timeouts_ms": {"x": 0}}"#,
            "section \"x\" has a timeout of 0 ms",
        ),
        (
            r#"{"heartbeat_timeout": 5}"#,
            "unknown field `heartbeat_timeout`",
        ),
        (r#"{"heartbeat_timeout_ms": -1}"#, "invalid value"),
        ("[", "EOF"),
    ];
    for (json, fragment) in cases {
        match MonitorConfig::from_json(json) {
            Err(Error::Config { reason }) => assert!(reason.contains(fragment), "{json}: {reason}"),
            other => panic!("{json}: expected Config error, got {other:?}"),
        }
    }
}

#[test]
fn a_bad_file_is_named_with_line_and_column() {
    let dir = TempDir::new("mon-config");
    let path = dir.join("monitor.json");
    std::fs::write(&path, "{\n  \"heartbeat_timeout_ms\": \"soon\"\n}").unwrap();
    match MonitorConfig::load(&path) {
        Err(Error::ConfigFile {
            path: named,
            reason,
        }) => {
            assert_eq!(named, path);
            assert!(reason.contains("line 2"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    // A missing file: the path named, the errno kept.
    match MonitorConfig::load(dir.join("missing.json")) {
        Err(Error::File { source, .. }) => {
            assert_eq!(source.raw_os_error(), Some(libc::ENOENT), "{source}");
            assert!(source.to_string().contains("missing.json"), "{source}");
        }
        other => panic!("{other:?}"),
    }
    std::fs::write(&path, README_EXAMPLE).unwrap();
    assert!(MonitorConfig::load(&path).is_ok());
}

#[test]
fn regression_a_connection_wait_too_long_to_add_to_a_clock_is_refused() {
    // Accepted before, it made the server panic ("overflow when adding
    // duration to instant") as soon as a second client had to wait.
    for json in [
        r#"{"connection_wait_ms": 18446744073709551615}"#,
        r#"{"connection_wait_ms": 3600001}"#,
    ] {
        match MonitorConfig::from_json(json) {
            Err(Error::Config { reason }) => {
                assert!(reason.contains("connection wait"), "{json}: {reason}")
            }
            other => panic!("{json}: {other:?}"),
        }
    }
    let longest = MonitorConfig::from_json(r#"{"connection_wait_ms": 3600000}"#).unwrap();
    assert_eq!(
        longest.connection_wait,
        nodeipc_monitor::MAX_CONNECTION_DEADLINE
    );
}
