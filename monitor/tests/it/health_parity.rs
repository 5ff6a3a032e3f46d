//! The health checks of nvidia-resiliency-ext's monitor: NICs through a
//! sysfs fixture, the GPU through a fake probe (no GPU here). (NVML's
//! "unavailable" path and checks run at their own interval: the unit tests
//! of nodeipc-monitor-host.)

use crate::common;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::common::InProcess;
use crate::common::sysfs::{ib_port, net};
use nodeipc_fdpass::Pidfd;
use nodeipc_monitor::{
    HealthCheck, MonitorClient, MonitorConfig, RankContext, RankInfo, RankState,
};
use nodeipc_monitor_host::{GpuHealth, GpuId, GpuProbe, HealthChecks, HealthConfig, NicHealth};
use nodeipc_testkit::{TempDir, Watchdog};

/// The NIC check a configuration builds, run whenever asked (its interval
/// is 1 ms; [`probe`] waits 2 ms first).
fn nic_check(root: &Path, names: &[&str]) -> nodeipc_monitor_host::Result<Box<dyn HealthCheck>> {
    let config = HealthConfig {
        nic: Some(NicHealth {
            devices: names.iter().map(|n| (*n).to_owned()).collect(),
            sysfs_root: root.to_owned(),
            interval: Duration::from_millis(1),
        }),
        gpu: None,
    };
    let mut setup = config.checks_for(0, None, &mut || unreachable!("no GPU asked for"))?;
    assert_eq!(setup.checks.len(), 1);
    Ok(setup.checks.remove(0))
}

/// Runs `check` once, for this process.
fn probe(check: &mut Box<dyn HealthCheck>) -> Result<(), String> {
    std::thread::sleep(Duration::from_millis(2));
    let pidfd = Pidfd::open(std::process::id()).unwrap();
    let info = RankInfo::this_process(0, 0);
    check.check(&RankContext {
        rank: &info,
        pidfd: &pidfd,
    })
}

#[test]
fn the_nic_check_reads_operstate_and_infiniband_port_states() {
    let dir = TempDir::new("nic-fixture");
    let root = dir.path();
    net(root, "eth0", "up");
    net(root, "lo", "unknown");
    ib_port(root, "mlx5_0", 1, "4: ACTIVE");
    ib_port(root, "mlx5_0", 2, "4: ACTIVE");
    let mut check = nic_check(root, &["eth0", "lo", "mlx5_0"]).unwrap();
    assert_eq!(probe(&mut check), Ok(()));

    net(root, "eth0", "down");
    let why = probe(&mut check).unwrap_err();
    assert!(why.contains("NIC eth0 is down"), "{why}");
    net(root, "eth0", "up");

    ib_port(root, "mlx5_0", 2, "1: DOWN");
    let why = probe(&mut check).unwrap_err();
    assert!(
        why.contains("InfiniBand mlx5_0 port 2") && why.contains("DOWN"),
        "{why}"
    );
    ib_port(root, "mlx5_0", 2, "4: ACTIVE");

    // A device that goes away fails the check, naming the file.
    std::fs::remove_dir_all(root.join("class/net/eth0")).unwrap();
    let why = probe(&mut check).unwrap_err();
    assert!(why.contains("eth0/operstate"), "{why}");
}

#[test]
fn the_nic_check_refuses_at_start_a_device_that_is_not_there_or_a_bad_name() {
    let dir = TempDir::new("nic-missing");
    net(dir.path(), "eth0", "up");
    for (name, expect) in [
        ("ib9", "\"ib9\" is neither in"),
        ("../eth0", "is not a device name"),
        ("", "is not a device name"),
    ] {
        let Err(error) = nic_check(dir.path(), &[name]) else {
            panic!("{name:?} accepted");
        };
        let error = error.to_string();
        assert!(error.contains(expect), "{name:?}: {error}");
    }
}

#[test]
fn a_nic_going_down_mid_run_terminates_the_rank() {
    let _dog = Watchdog::new("nic mid-run", Duration::from_secs(60));
    let dir = TempDir::new("nic-midrun");
    net(dir.path(), "eth0", "up");
    let check = nic_check(dir.path(), &["eth0"]).unwrap();
    let config = MonitorConfig {
        check_interval: Duration::from_millis(50),
        ..MonitorConfig::default()
    };
    let server = InProcess::start_with("mon-nic", config, |s| s.add_health_check(check));
    let (mut rank, _client) = common::sleeping_rank(&server, 0, 0);
    std::thread::sleep(Duration::from_millis(200));
    assert!(rank.alive(), "terminated while the NIC was up");
    net(dir.path(), "eth0", "down");
    let status = rank.wait_exit(Duration::from_secs(10));
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    let status = server.wait_status(Duration::from_secs(5), |s| s.state == RankState::Terminated);
    let last = status.last_timeout.unwrap();
    assert!(last.contains("NIC eth0 is down"), "{last}");
    server.finish();
}

/// A GPU that reports an XID once told to.
struct FakeGpu {
    xid: Arc<AtomicBool>,
    asked: Arc<AtomicUsize>,
    seen: Arc<std::sync::Mutex<Vec<GpuId>>>,
}

impl GpuProbe for FakeGpu {
    fn check(&mut self, gpu: &GpuId) -> Result<(), String> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        self.seen.lock().unwrap().push(gpu.clone());
        match self.xid.load(Ordering::SeqCst) {
            true => Err("reported XID 79".to_owned()),
            false => Ok(()),
        }
    }
}

#[test]
fn a_gpu_error_terminates_the_rank_naming_the_device() {
    let _dog = Watchdog::new("gpu fake", Duration::from_secs(60));
    let xid = Arc::new(AtomicBool::new(false));
    let asked = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let health = HealthConfig {
        nic: None,
        gpu: Some(GpuHealth {
            interval: Duration::from_millis(1),
            cuda_visible_devices: Some("4,6".to_owned()),
        }),
    };
    let mut setup = health
        .checks_for(1, None, &mut || {
            Ok(Box::new(FakeGpu {
                xid: Arc::clone(&xid),
                asked: Arc::clone(&asked),
                seen: Arc::clone(&seen),
            }))
        })
        .unwrap();
    let check = setup.checks.remove(0);
    let config = MonitorConfig {
        check_interval: Duration::from_millis(50),
        ..MonitorConfig::default()
    };
    let server = InProcess::start_with("mon-gpu", config, |s| s.add_health_check(check));
    let (mut rank, _client) = common::sleeping_rank(&server, 1, 1);
    let start = Instant::now();
    while asked.load(Ordering::SeqCst) < 2 {
        assert!(start.elapsed() < Duration::from_secs(10), "never asked");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(rank.alive());
    xid.store(true, Ordering::SeqCst);
    let status = rank.wait_exit(Duration::from_secs(10));
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    let status = server.wait_status(Duration::from_secs(5), |s| s.state == RankState::Terminated);
    let last = status.last_timeout.unwrap();
    assert!(last.contains("GPU 6: reported XID 79"), "{last}");
    assert!(seen.lock().unwrap().iter().all(|g| *g == GpuId::Index(6)));
    server.finish();
}

/// The server's log once it holds `needle` (bounded).
fn wait_for_log(server: &InProcess, needle: &str) -> String {
    let start = Instant::now();
    loop {
        let log = server.log_text();
        if log.contains(needle) {
            return log;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no {needle:?} in {log}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn while_its_rank_is_away_the_monitor_reports_how_long_it_has_waited() {
    let _dog = Watchdog::new("restart wait", Duration::from_secs(60));
    let config = MonitorConfig {
        check_interval: Duration::from_millis(50),
        ..MonitorConfig::default()
    };
    let server = InProcess::start("mon-restart-wait", config);
    let mut client = MonitorClient::connect(&server.socket, Duration::from_secs(10)).unwrap();
    client.init(&RankInfo::this_process(0, 0)).unwrap();
    assert_eq!(client.status().unwrap().ms_restarting, None);
    drop(client);
    let gone = Instant::now();
    let status = server.wait_status(Duration::from_secs(5), |s| {
        s.state == RankState::Restarting && s.ms_restarting.is_some_and(|ms| ms >= 1100)
    });
    assert!(status.ms_restarting.unwrap() <= gone.elapsed().as_millis() as u64 + 5);
    // The log says so (every ten check intervals, at least every second).
    let log = wait_for_log(&server, "the rank has not come back: waiting ");
    let waited: f64 = log
        .split("the rank has not come back: waiting ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(waited >= 1.0, "{log}");
    // Back: no wait any more.
    let mut client = MonitorClient::connect(&server.socket, Duration::from_secs(10)).unwrap();
    client.init(&RankInfo::this_process(0, 0)).unwrap();
    assert_eq!(client.status().unwrap().ms_restarting, None);
    drop(client);
    server.finish();
}
