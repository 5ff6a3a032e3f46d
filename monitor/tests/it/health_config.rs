//! The health-check section of the configuration: strict in our JSON form,
//! written back by `to_json`, and the checks it builds for a local rank (a
//! sysfs fixture for the NIC, a fake probe for the GPU; a GPU that cannot
//! be checked here is reported unavailable at start and never fails).

use crate::common;

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::common::sysfs::net;
use crate::common::{InProcess, Proc};
use nodeipc_monitor::{MonitorClient, MonitorConfig, RankInfo, RankState};
use nodeipc_monitor_host::{
    GpuHealth, GpuId, GpuProbe, HealthChecks, HealthConfig, HostConfig, NicHealth,
};
use nodeipc_testkit::{TempDir, Watchdog};

fn nic(root: &Path, devices: &[&str], interval_ms: u64) -> NicHealth {
    NicHealth {
        devices: devices.iter().map(|d| (*d).to_owned()).collect(),
        sysfs_root: root.to_owned(),
        interval: Duration::from_millis(interval_ms),
    }
}

/// A probe that records which device it was asked about and answers `answer`.
struct FakeNvml {
    asked: Arc<std::sync::Mutex<Vec<GpuId>>>,
    answer: Result<(), String>,
}

impl GpuProbe for FakeNvml {
    fn check(&mut self, gpu: &GpuId) -> Result<(), String> {
        self.asked.lock().unwrap().push(gpu.clone());
        self.answer.clone()
    }
}

#[test]
fn no_section_builds_no_check() {
    let setup = HealthConfig::default()
        .checks_for(0, None, &mut || panic!("no GPU asked for"))
        .unwrap();
    assert!(setup.checks.is_empty() && setup.unavailable.is_empty());
}

#[test]
fn the_nic_section_builds_a_check_on_the_fixture_and_refuses_a_missing_device() {
    let dir = TempDir::new("health-cfg-nic");
    net(dir.path(), "eth0", "up");
    let config = HealthConfig {
        nic: Some(nic(dir.path(), &["eth0"], 100)),
        gpu: None,
    };
    let setup = config.checks_for(0, None, &mut || unreachable!()).unwrap();
    assert_eq!(setup.checks.len(), 1);
    assert_eq!(setup.checks[0].name(), "NIC");

    let typo = HealthConfig {
        nic: Some(nic(dir.path(), &["eth9"], 100)),
        gpu: None,
    };
    let error = typo
        .checks_for(0, None, &mut || unreachable!())
        .unwrap_err()
        .to_string();
    assert!(error.contains("\"eth9\" is neither in"), "{error}");
}

#[test]
fn each_bad_value_is_refused_naming_its_field() {
    let dir = TempDir::new("health-cfg-bad");
    let root = dir.path();
    let cases = [
        (nic(root, &[], 100), "lists 0 devices"),
        (nic(root, &["a/b"], 100), "\"a/b\" is not a device name"),
        (nic(root, &["eth0"], 0), "health_checks.nic.interval"),
        (
            NicHealth {
                sysfs_root: PathBuf::new(),
                ..nic(root, &["eth0"], 100)
            },
            "sysfs_root",
        ),
    ];
    for (section, fragment) in cases {
        let config = HostConfig {
            health: HealthConfig {
                nic: Some(section),
                gpu: None,
            },
            ..HostConfig::default()
        };
        let error = config.validate().unwrap_err().to_string();
        assert!(error.contains(fragment), "{fragment}: {error}");
    }
    let long_gpu = HealthConfig {
        nic: None,
        gpu: Some(GpuHealth {
            interval: Duration::from_secs(7200),
            cuda_visible_devices: None,
        }),
    };
    let error = long_gpu.validate().unwrap_err().to_string();
    assert!(error.contains("health_checks.gpu.interval"), "{error}");
}

#[test]
fn the_gpu_is_the_local_ranks_entry_of_the_configured_or_inherited_device_list() {
    let asked = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut probe = || -> Result<Box<dyn GpuProbe>, String> {
        Ok(Box::new(FakeNvml {
            asked: Arc::clone(&asked),
            answer: Ok(()),
        }))
    };
    let gpu = |list: Option<&str>| HealthConfig {
        nic: None,
        gpu: Some(GpuHealth {
            interval: Duration::from_millis(1),
            cuda_visible_devices: list.map(str::to_owned),
        }),
    };
    // The configuration's list wins over the environment's.
    let setup = gpu(Some("4,6"))
        .checks_for(1, Some("0,1"), &mut probe)
        .unwrap();
    assert_eq!(setup.checks.len(), 1);
    // Without one, the inherited CUDA_VISIBLE_DEVICES; without that, the rank.
    let setup2 = gpu(None).checks_for(1, Some("2,3"), &mut probe).unwrap();
    let setup3 = gpu(None).checks_for(5, None, &mut probe).unwrap();
    let server = InProcess::start_with(
        "health-cfg-gpu",
        MonitorConfig {
            check_interval: Duration::from_millis(20),
            ..MonitorConfig::default()
        },
        |s| {
            for check in setup
                .checks
                .into_iter()
                .chain(setup2.checks)
                .chain(setup3.checks)
            {
                s.add_health_check(check);
            }
        },
    );
    let (mut rank, client) = common::sleeping_rank(&server, 0, 1);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while asked.lock().unwrap().len() < 3 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let seen: std::collections::HashSet<GpuId> = asked.lock().unwrap().iter().cloned().collect();
    assert_eq!(
        seen,
        [GpuId::Index(6), GpuId::Index(3), GpuId::Index(5)].into()
    );
    assert!(rank.alive());
    drop(client);
    drop(rank);
    server.finish();
}

#[test]
fn a_gpu_that_cannot_be_checked_is_unavailable_at_start_and_never_fails_the_rank() {
    let _dog = Watchdog::new("gpu unavailable", Duration::from_secs(60));
    let loads = AtomicUsize::new(0);
    let config = HealthConfig {
        nic: None,
        gpu: Some(GpuHealth {
            interval: Duration::from_millis(1),
            cuda_visible_devices: Some("0".to_owned()),
        }),
    };
    // No NVML on the machine (the probe does not load) ...
    let no_nvml = config
        .checks_for(0, None, &mut || {
            loads.fetch_add(1, Ordering::Relaxed);
            Err("libnvidia-ml.so.1: cannot open shared object file".to_owned())
        })
        .unwrap();
    // ... or no device for the rank (the list has one entry, this is rank 1).
    let no_device = config
        .checks_for(1, None, &mut || unreachable!("no device: NVML not asked"))
        .unwrap();
    assert_eq!(loads.load(Ordering::Relaxed), 1);
    for (setup, reason) in [(no_nvml, "libnvidia-ml"), (no_device, "has no device")] {
        assert!(setup.checks.is_empty(), "no check installed");
        let [unavailable] = &setup.unavailable[..] else {
            panic!("{:?}", setup.unavailable)
        };
        assert!(unavailable.check.starts_with("GPU (local rank"));
        assert!(unavailable.reason.contains(reason), "{unavailable:?}");
    }
    // The real NVML path on this machine: unavailable here, or a check
    // where the driver is installed.
    let real = config.checks_with_nvml(0).unwrap();
    assert_eq!(real.checks.len() + real.unavailable.len(), 1);

    // And a rank watched with what was built runs on, many intervals long.
    let server = InProcess::start_with(
        "health-cfg-none",
        MonitorConfig {
            check_interval: Duration::from_millis(20),
            ..MonitorConfig::default()
        },
        |s| {
            for check in real.checks {
                s.add_health_check(check);
            }
        },
    );
    let (mut rank, client) = common::sleeping_rank(&server, 0, 0);
    std::thread::sleep(Duration::from_millis(400));
    assert!(rank.alive(), "terminated with no GPU check installed");
    let status = server.wait_status(Duration::from_secs(5), |s| {
        s.state == RankState::Initialized
    });
    assert_eq!(status.last_timeout, None);
    drop(client);
    drop(rank);
    server.finish();
}

#[test]
fn a_nic_from_the_config_going_down_terminates_the_rank() {
    let _dog = Watchdog::new("config nic", Duration::from_secs(60));
    let dir = TempDir::new("health-cfg-down");
    net(dir.path(), "eth0", "up");
    let config = HostConfig {
        monitor: MonitorConfig {
            check_interval: Duration::from_millis(20),
            ..MonitorConfig::default()
        },
        health: HealthConfig {
            nic: Some(nic(dir.path(), &["eth0"], 50)),
            gpu: None,
        },
    };
    let setup = config.health.checks_with_nvml(0).unwrap();
    let server = InProcess::start_with("health-cfg-down", config.monitor, |s| {
        for check in setup.checks {
            s.add_health_check(check);
        }
    });
    let (mut rank, _client) = common::sleeping_rank(&server, 0, 0);
    std::thread::sleep(Duration::from_millis(200));
    assert!(rank.alive(), "terminated while the NIC was up");
    net(dir.path(), "eth0", "lowerlayerdown");
    let status = rank.wait_exit(Duration::from_secs(10));
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    let status = server.wait_status(Duration::from_secs(5), |s| s.state == RankState::Terminated);
    let last = status.last_timeout.unwrap();
    assert!(last.contains("NIC eth0 is lowerlayerdown"), "{last}");
    server.finish();
}

#[test]
fn a_monitor_process_runs_the_checks_of_its_config_file() {
    let _dog = Watchdog::new("served nic", Duration::from_secs(60));
    let fixture = TempDir::new("health-cfg-served");
    net(fixture.path(), "eth0", "up");
    let config = HostConfig {
        monitor: MonitorConfig {
            check_interval: Duration::from_millis(20),
            ..MonitorConfig::default()
        },
        health: HealthConfig {
            nic: Some(nic(fixture.path(), &["eth0"], 20)),
            gpu: None,
        },
    };
    // `nodeipc monitor serve --config FILE`: the file written by `to_json`.
    let served = common::Served::spawn_host("health-cfg-served", &config);
    let mut rank = Proc::spawn(Command::new("sleep").arg("30"));
    let mut client = MonitorClient::connect(&served.socket, Duration::from_secs(10)).unwrap();
    client
        .init(&RankInfo {
            pid: rank.pid(),
            ..RankInfo::this_process(0, 0)
        })
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert!(rank.alive(), "terminated while the NIC was up");
    net(fixture.path(), "eth0", "down");
    let status = rank.wait_exit(Duration::from_secs(10));
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let last = loop {
        let status = served.monitor.status().unwrap();
        if let Some(last) = status.last_timeout {
            break last;
        }
        assert!(std::time::Instant::now() < deadline, "{status:?}");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(last.contains("NIC eth0 is down"), "{last}");
}

#[test]
fn a_monitor_that_learns_its_rank_at_init_finds_the_gpu_then_or_leaves_it_unchecked() {
    let _dog = Watchdog::new("rank gpu", Duration::from_secs(60));
    let asked = Arc::new(std::sync::Mutex::new(Vec::new()));
    let config = HealthConfig {
        nic: None,
        gpu: Some(GpuHealth {
            interval: Duration::from_millis(1),
            cuda_visible_devices: Some("7".to_owned()),
        }),
    };
    let setup = config
        .checks_for_any_rank(None, &mut || {
            Ok(Box::new(FakeNvml {
                asked: Arc::clone(&asked),
                answer: Err("XID 79: fallen off the bus".to_owned()),
            }))
        })
        .unwrap();
    assert_eq!(setup.checks.len(), 1);
    let server = InProcess::start_with(
        "health-cfg-rank-gpu",
        MonitorConfig {
            check_interval: Duration::from_millis(20),
            ..MonitorConfig::default()
        },
        |s| {
            for check in setup.checks {
                s.add_health_check(check);
            }
        },
    );
    // Local rank 1: the list has no device for it. Unchecked, never failed.
    let (mut rank, client) = common::sleeping_rank(&server, 1, 1);
    std::thread::sleep(Duration::from_millis(300));
    assert!(rank.alive(), "failed for a GPU it has not got");
    assert!(asked.lock().unwrap().is_empty());
    drop(client);
    drop(rank);
    // Local rank 0: device 7, whose error terminates it.
    let (mut rank, _client) = common::sleeping_rank(&server, 0, 0);
    let status = rank.wait_exit(Duration::from_secs(10));
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    assert_eq!(asked.lock().unwrap()[0], GpuId::Index(7));
    let status = server.wait_status(Duration::from_secs(5), |s| s.state == RankState::Terminated);
    let last = status.last_timeout.unwrap();
    assert!(last.contains("GPU 7: XID 79"), "{last}");
    server.finish();
}
