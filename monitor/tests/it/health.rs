//! Health checks: polled at every check, a failure terminates the rank like a
//! timeout; `ProcessAlive` tells a live process from an exited one.

use crate::common;

use std::os::unix::process::ExitStatusExt;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::common::{InProcess, Proc};
use nodeipc_fdpass::Pidfd;
use nodeipc_monitor::{HealthCheck, MonitorConfig, RankContext, RankInfo, RankState};
use nodeipc_monitor_host::ProcessAlive;
use nodeipc_testkit::Watchdog;

/// Fails once told to; counts how often it was asked.
struct Switch {
    fail: Arc<AtomicBool>,
    polls: Arc<AtomicUsize>,
}

impl HealthCheck for Switch {
    fn name(&self) -> &str {
        "gpu"
    }

    fn check(&mut self, rank: &RankContext<'_>) -> Result<(), String> {
        self.polls.fetch_add(1, Ordering::SeqCst);
        if self.fail.load(Ordering::SeqCst) {
            Err(format!("device lost under pid {}", rank.rank.pid))
        } else {
            Ok(())
        }
    }
}

#[test]
fn a_failed_health_check_terminates_the_rank_like_a_timeout() {
    let _dog = Watchdog::new("health_check", Duration::from_secs(60));
    let fail = Arc::new(AtomicBool::new(false));
    let polls = Arc::new(AtomicUsize::new(0));
    let check = Switch {
        fail: Arc::clone(&fail),
        polls: Arc::clone(&polls),
    };
    let config = MonitorConfig {
        check_interval: Duration::from_millis(100),
        ..MonitorConfig::default()
    };
    let server = InProcess::start_with("mon-health", config, |s| {
        s.add_health_check(check);
        s.add_health_check(ProcessAlive);
    });
    let (mut rank, _client) = common::sleeping_rank(&server, 0, 0);
    // Polled while healthy, and nothing happens.
    let start = Instant::now();
    while polls.load(Ordering::SeqCst) < 3 {
        assert!(start.elapsed() < Duration::from_secs(10), "never polled");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(rank.alive());
    fail.store(true, Ordering::SeqCst);
    let failed = Instant::now();
    let status = rank.wait_exit(Duration::from_secs(10));
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    // At the next poll (100 ms), not at the 10 s wait; room for a loaded machine.
    assert!(failed.elapsed() < Duration::from_secs(5));
    let status = server.wait_status(Duration::from_secs(5), |s| s.state == RankState::Terminated);
    let last = status.last_timeout.unwrap();
    assert_eq!(
        last,
        format!(
            "health check \"gpu\" failed: device lost under pid {}",
            rank.pid()
        )
    );
    server.finish();
}

#[test]
fn process_alive_fails_once_the_process_has_exited() {
    let mut child = Proc::spawn(Command::new("sleep").arg("30"));
    let pidfd = Pidfd::open(child.pid()).unwrap();
    let info = RankInfo {
        pid: child.pid(),
        ..RankInfo::default()
    };
    let context = RankContext {
        rank: &info,
        pidfd: &pidfd,
    };
    assert_eq!(ProcessAlive.check(&context), Ok(()));
    child.guard.kill();
    let error = ProcessAlive.check(&context).unwrap_err();
    assert_eq!(error, format!("process {} has exited", child.pid()));
    assert_eq!(ProcessAlive.name(), "process alive");
}
