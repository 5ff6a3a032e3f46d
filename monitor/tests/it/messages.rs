//! What the monitor says to people: errors and log lines name their
//! values in words, and escape what could forge a line.

use std::path::PathBuf;
use std::time::Duration;

use nodeipc_monitor::{Error, MonitorConfig, TimeoutsMs};

/// Times in the monitor's messages are in words (regression: "timed out
/// after 2.5s", "check interval 0ns must be between 1ms and 3600s").
#[test]
fn regression_times_in_messages_are_in_words() {
    let timeout = Error::Timeout {
        op: "waiting for the reply to Init".into(),
        path: PathBuf::from("/run/x.sock"),
        waited: Duration::from_millis(2500),
        detail: String::new(),
    };
    assert!(
        timeout.to_string().ends_with("timed out after 2.5 s"),
        "{timeout}"
    );
    let config = MonitorConfig {
        check_interval: Duration::ZERO,
        ..MonitorConfig::default()
    };
    let why = config.validate().unwrap_err().to_string();
    assert!(
        why.contains("check interval 0 ns must be between 1 ms and 60 min"),
        "{why}"
    );
}

#[test]
fn timeouts_display_lists_every_field_and_escapes_section_names() {
    let t = TimeoutsMs {
        initial_heartbeat_ms: Some(1500),
        heartbeat_ms: None,
        out_of_section_ms: Some(7),
        sections_ms: [("a\"b\n".to_string(), 42), ("step".to_string(), 9)].into(),
    };
    assert_eq!(
        t.to_string(),
        "initial_heartbeat=1500ms heartbeat=none out_of_section=7ms \
         sections={\"a\\\"b\\n\": 42ms, \"step\": 9ms}"
    );
}
