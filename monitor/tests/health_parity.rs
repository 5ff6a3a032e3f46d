//! The health checks of nvidia-resiliency-ext's monitor: NICs through a
//! sysfs fixture, the GPU through a fake probe (no GPU here), NVML's
//! "unavailable" path for real, and checks run at their own interval.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::InProcess;
use common::sysfs::{ib_port, net};
use nodeipc_fdpass::Pidfd;
use nodeipc_monitor::{
    Every, GpuCheck, GpuId, GpuProbe, HealthCheck, MonitorClient, MonitorConfig, NVML_LIBRARY,
    NicCheck, Nvml, RankContext, RankInfo, RankState, gpu_for_local_rank,
};
use nodeipc_testkit::{TempDir, Watchdog};

#[test]
fn the_nic_check_reads_operstate_and_infiniband_port_states() {
    let dir = TempDir::new("nic-fixture");
    let root = dir.path();
    net(root, "eth0", "up");
    net(root, "lo", "unknown");
    ib_port(root, "mlx5_0", 1, "4: ACTIVE");
    ib_port(root, "mlx5_0", 2, "4: ACTIVE");
    let names = ["eth0", "lo", "mlx5_0"].map(String::from);
    let check = NicCheck::new(root, &names).unwrap();
    assert_eq!(check.probe(), Ok(()));

    net(root, "eth0", "down");
    let why = check.probe().unwrap_err();
    assert!(why.contains("NIC eth0 is down"), "{why}");
    net(root, "eth0", "up");

    ib_port(root, "mlx5_0", 2, "1: DOWN");
    let why = check.probe().unwrap_err();
    assert!(
        why.contains("InfiniBand mlx5_0 port 2") && why.contains("DOWN"),
        "{why}"
    );
    ib_port(root, "mlx5_0", 2, "4: ACTIVE");

    // A device that goes away fails the check, naming the file.
    std::fs::remove_dir_all(root.join("class/net/eth0")).unwrap();
    let why = check.probe().unwrap_err();
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
        let error = NicCheck::new(dir.path(), &[name.to_owned()])
            .unwrap_err()
            .to_string();
        assert!(error.contains(expect), "{name:?}: {error}");
    }
}

#[test]
fn a_nic_going_down_mid_run_terminates_the_rank() {
    let _dog = Watchdog::new("nic mid-run", Duration::from_secs(60));
    let dir = TempDir::new("nic-midrun");
    net(dir.path(), "eth0", "up");
    let check = NicCheck::new(dir.path(), &["eth0".to_owned()]).unwrap();
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

#[test]
fn a_rank_finds_its_gpu_through_cuda_visible_devices() {
    assert_eq!(gpu_for_local_rank(0, None), Ok(GpuId::Index(0)));
    assert_eq!(gpu_for_local_rank(3, None), Ok(GpuId::Index(3)));
    assert_eq!(gpu_for_local_rank(1, Some("2, 5 ,7")), Ok(GpuId::Index(5)));
    assert_eq!(
        gpu_for_local_rank(0, Some("GPU-8e0a5b1c-0000-1111-2222-333344445555,1")),
        Ok(GpuId::Uuid(
            "GPU-8e0a5b1c-0000-1111-2222-333344445555".to_owned()
        ))
    );
    let short = gpu_for_local_rank(2, Some("0,1")).unwrap_err();
    assert!(
        short.contains("local rank 2 has no device") && short.contains("lists 2"),
        "{short}"
    );
    let bad = gpu_for_local_rank(0, Some("zero")).unwrap_err();
    assert!(bad.contains("\"zero\""), "{bad}");
    // An empty list hides every device.
    assert!(gpu_for_local_rank(0, Some("")).is_err());
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
    let gpu = gpu_for_local_rank(1, Some("4,6")).unwrap();
    let check = GpuCheck::new(
        FakeGpu {
            xid: Arc::clone(&xid),
            asked: Arc::clone(&asked),
            seen: Arc::clone(&seen),
        },
        gpu,
    );
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

#[test]
fn nvml_is_reported_unavailable_where_the_driver_is_not_installed() {
    match Nvml::load() {
        Err(why) => assert!(why.contains(NVML_LIBRARY), "{why}"),
        // A machine with the driver: the real path, on device 0.
        Ok(mut nvml) => {
            let answer = nvml.check(&GpuId::Index(0));
            assert!(answer.is_ok(), "GPU 0 on this machine: {answer:?}");
        }
    }
}

/// Counts its runs.
struct Counter(Arc<AtomicUsize>);

impl HealthCheck for Counter {
    fn name(&self) -> &str {
        "counter"
    }

    fn check(&mut self, _rank: &RankContext<'_>) -> Result<(), String> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

#[test]
fn every_runs_a_check_at_most_once_per_its_interval() {
    let runs = Arc::new(AtomicUsize::new(0));
    let mut every = Every::new(Counter(Arc::clone(&runs)), Duration::from_millis(200));
    let pidfd = Pidfd::open(std::process::id()).unwrap();
    let info = RankInfo::this_process(0, 0);
    let context = RankContext {
        rank: &info,
        pidfd: &pidfd,
    };
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(500) {
        every.check(&context).unwrap();
        std::thread::sleep(Duration::from_millis(5));
    }
    // At 0, ~200 and ~400 ms: 3 runs (never 1 per call, ~100 of them).
    let n = runs.load(Ordering::SeqCst);
    assert!((2..=3).contains(&n), "{n} runs in 500 ms");
    assert_eq!(every.name(), "counter");
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
