//! The configuration file's `health_checks` section: the README's example,
//! defaults, strict fields, and the JSON form written back.

use std::path::{Path, PathBuf};
use std::time::Duration;

use nodeipc_monitor::MonitorConfig;
use nodeipc_monitor_host::{GpuHealth, HealthConfig, HostConfig, MonitorConfigFile, NicHealth};

/// The example in the README, verbatim.
const README_HEALTH: &str = r#"{
  "heartbeat_timeout_ms": 30000,
  "health_checks": {
    "nic": { "devices": ["eth0", "mlx5_0"], "sysfs_root": "/sys", "interval_ms": 5000 },
    "gpu": { "interval_ms": 10000 }
  }
}"#;

#[test]
fn the_readme_health_example_parses_and_is_in_the_readme() {
    let readme = include_str!("../../README.md");
    assert!(readme.contains(README_HEALTH), "README example drifted");
    let c = HostConfig::from_json(README_HEALTH).unwrap();
    let nic = c.health.nic.as_ref().unwrap();
    assert_eq!(nic.devices, ["eth0", "mlx5_0"]);
    assert_eq!(nic.sysfs_root, Path::new("/sys"));
    assert_eq!(nic.interval, Duration::from_secs(5));
    let gpu = c.health.gpu.as_ref().unwrap();
    assert_eq!(gpu.interval, Duration::from_secs(10));
    assert_eq!(gpu.cuda_visible_devices, None);
    // Defaults: /sys, 5 s.
    let c = HostConfig::from_json(r#"{"health_checks": {"nic": {"devices": ["lo"]}}}"#).unwrap();
    assert_eq!(c.health.nic.unwrap(), nic_default(&["lo"]));
}

fn nic_default(devices: &[&str]) -> NicHealth {
    NicHealth {
        devices: devices.iter().map(|d| (*d).to_owned()).collect(),
        ..NicHealth::default()
    }
}

#[test]
fn the_section_is_strict_and_names_what_is_wrong() {
    for (json, fragment) in [
        (
            r#"{"health_checks": {"nic": {"devices": ["eth0"], "intervall_ms": 5}}}"#,
            "unknown field `intervall_ms`",
        ),
        (r#"{"health_checks": {"disk": {}}}"#, "unknown field `disk`"),
        (
            r#"{"health_checks": {"nic": {}}}"#,
            "missing field `devices`",
        ),
        (
            r#"{"health_checks": {"gpu": {"interval_ms": 0}}}"#,
            "health_checks.gpu.interval_ms is 0",
        ),
        (
            r#"{"health_checks": {"nic": {"devices": []}}}"#,
            "lists 0 devices",
        ),
    ] {
        let error = HostConfig::from_json(json).unwrap_err().to_string();
        assert!(error.contains(fragment), "{json}: {error}");
    }
}

#[test]
fn to_json_writes_the_section_back_escaping_what_needs_it() {
    let config = HostConfig {
        monitor: MonitorConfig {
            timeouts: nodeipc_monitor::Timeouts {
                sections: [(
                    "quote \" back \\ nl \n ctl \u{1}".to_owned(),
                    Duration::from_millis(5),
                )]
                .into(),
                ..Default::default()
            },
            ..MonitorConfig::default()
        },
        health: HealthConfig {
            nic: Some(NicHealth {
                devices: vec!["eth0".into(), "ib\"0".into()],
                sysfs_root: PathBuf::from("/tmp/a \"b\""),
                interval: Duration::from_millis(1500),
            }),
            gpu: Some(GpuHealth {
                interval: Duration::from_secs(3),
                cuda_visible_devices: Some("GPU-1,2".into()),
            }),
        },
    };
    let json = config.to_json();
    assert_eq!(HostConfig::from_json(&json).unwrap(), config, "{json}");
}

#[test]
fn a_monitor_config_alone_refuses_a_health_section_naming_host_config() {
    let error = MonitorConfig::from_json(README_HEALTH)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("health_checks") && error.contains("HostConfig"),
        "{error}"
    );
    let plain = MonitorConfig::from_json(r#"{"heartbeat_timeout_ms": 30000}"#).unwrap();
    assert_eq!(
        HostConfig::from_json(&plain.to_json()).unwrap().monitor,
        plain
    );
}
