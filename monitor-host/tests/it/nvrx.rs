//! nvidia-resiliency-ext configuration files: their names as aliases,
//! seconds to milliseconds, `null` as no limit, ours winning, unknown keys
//! warned about; our own format still strict.

use std::time::Duration;

use nodeipc_monitor::{MonitorConfig, Signal};
use nodeipc_monitor_host::MonitorConfigFile;
use nodeipc_testkit::TempDir;

/// As nvidia-resiliency-ext's own example file lays it out.
const NVRX_YAML: &str = "\
fault_tolerance:
  initial_rank_heartbeat_timeout: 120
  rank_heartbeat_timeout: 30.5
  rank_section_timeouts:
    setup: 600
    step: 0.25
    checkpoint: null
  rank_out_of_section_timeout: null
  workload_check_interval: 5.0
  rank_termination_signal: SIGTERM
  safety_factor: 5.0
  log_level: INFO
  restart_check_interval: 60
";

#[test]
fn their_yaml_block_reads_as_our_configuration() {
    let nvrx = MonitorConfig::from_nvrx(NVRX_YAML).unwrap();
    let t = &nvrx.monitor.timeouts;
    assert_eq!(t.initial_heartbeat, Some(Duration::from_secs(120)));
    assert_eq!(t.heartbeat, Some(Duration::from_millis(30_500)));
    assert_eq!(t.out_of_section, None);
    assert_eq!(t.sections["setup"], Duration::from_secs(600));
    assert_eq!(t.sections["step"], Duration::from_millis(250));
    assert!(!t.sections.contains_key("checkpoint"));
    assert_eq!(nvrx.monitor.check_interval, Duration::from_secs(5));
    assert_eq!(nvrx.monitor.termination_signal, Signal::TERM);
    assert_eq!(nvrx.safety_factor, Some(5.0));
    assert_eq!(nvrx.warnings.len(), 2, "{:?}", nvrx.warnings);
    assert!(nvrx.warnings.iter().any(|w| w.contains("\"log_level\"")));
    assert!(
        nvrx.warnings
            .iter()
            .any(|w| w.contains("\"restart_check_interval\""))
    );
}

#[test]
fn their_json_reads_the_same_and_a_flat_document_is_accepted() {
    let json = r#"{ "fault_tolerance": { "rank_heartbeat_timeout": 30.5, "rank_termination_signal": 15 } }"#;
    let nvrx = MonitorConfig::from_nvrx(json).unwrap();
    assert_eq!(
        nvrx.monitor.timeouts.heartbeat,
        Some(Duration::from_millis(30_500))
    );
    assert_eq!(nvrx.monitor.termination_signal, Signal::TERM);
    let flat = MonitorConfig::from_nvrx("rank_heartbeat_timeout: 2\n").unwrap();
    assert_eq!(
        flat.monitor.timeouts.heartbeat,
        Some(Duration::from_secs(2))
    );
}

#[test]
fn our_own_name_wins_over_their_alias() {
    let nvrx = MonitorConfig::from_nvrx(
        "fault_tolerance:\n  rank_heartbeat_timeout: 30\n  heartbeat_timeout_ms: 1234\n",
    )
    .unwrap();
    assert_eq!(
        nvrx.monitor.timeouts.heartbeat,
        Some(Duration::from_millis(1234))
    );
    assert!(nvrx.warnings.is_empty());
}

#[test]
fn a_bad_value_is_refused_naming_the_field() {
    for (text, field) in [
        ("rank_heartbeat_timeout: -1\n", "rank_heartbeat_timeout"),
        ("rank_heartbeat_timeout: 0\n", "rank_heartbeat_timeout"),
        ("rank_heartbeat_timeout: .nan\n", "rank_heartbeat_timeout"),
        (
            "rank_heartbeat_timeout: 1.0e300\n",
            "rank_heartbeat_timeout",
        ),
        ("rank_heartbeat_timeout: soon\n", "rank_heartbeat_timeout"),
        (
            "rank_section_timeouts: { step: -2 }\n",
            "rank_section_timeouts.step",
        ),
        ("safety_factor: 0.5\n", "safety_factor"),
        ("rank_termination_signal: SIGSEGV\n", "SIGSEGV"),
        ("fault_tolerance: 3\n", "fault_tolerance"),
        ("- a list\n", "not a mapping"),
        ("fault_tolerance: {rank_heartbeat_timeout: [1\n", "YAML"),
    ] {
        let error = MonitorConfig::from_nvrx(text).unwrap_err().to_string();
        assert!(error.contains(field), "{text:?}: {error}");
    }
}

#[test]
fn our_own_format_stays_strict_about_their_names() {
    let error = MonitorConfig::from_json(r#"{ "rank_heartbeat_timeout": 30 }"#)
        .unwrap_err()
        .to_string();
    assert!(error.contains("rank_heartbeat_timeout"), "{error}");
}

#[test]
fn load_nvrx_reads_a_file_with_the_trust_rules_of_load() {
    let dir = TempDir::new("nvrx-load");
    let path = dir.join("ft.yaml");
    std::fs::write(&path, NVRX_YAML).unwrap();
    let nvrx = MonitorConfig::load_nvrx(&path).unwrap();
    assert_eq!(
        nvrx.monitor.timeouts.heartbeat,
        Some(Duration::from_millis(30_500))
    );
    // A bad file names itself.
    std::fs::write(&path, "rank_heartbeat_timeout: -1\n").unwrap();
    let error = MonitorConfig::load_nvrx(&path).unwrap_err().to_string();
    assert!(
        error.contains("ft.yaml") && error.contains("rank_heartbeat_timeout"),
        "{error}"
    );
    // A symlink is refused, as by `load`.
    let link = dir.join("link.yaml");
    std::os::unix::fs::symlink(&path, &link).unwrap();
    assert!(MonitorConfig::load_nvrx(&link).is_err());
}

#[test]
fn an_nvrx_file_may_carry_our_health_checks_section() {
    let nvrx = MonitorConfig::from_nvrx(
        "fault_tolerance:\n  rank_heartbeat_timeout: 3\n  health_checks:\n    nic:\n      devices: [eth0]\n      interval_ms: 250\n",
    )
    .unwrap();
    let nic = nvrx.health.nic.unwrap();
    assert_eq!(nic.devices, ["eth0"]);
    assert_eq!(nic.interval, Duration::from_millis(250));
    assert!(nvrx.warnings.is_empty(), "{:?}", nvrx.warnings);
    // Strict inside, as in our own file.
    let error = MonitorConfig::from_nvrx("health_checks:\n  nic:\n    device: [eth0]\n")
        .unwrap_err()
        .to_string();
    assert!(error.contains("unknown field `device`"), "{error}");
}
