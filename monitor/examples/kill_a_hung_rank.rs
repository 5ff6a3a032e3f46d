//! A rank monitor killing a hung rank. The parent starts a monitor process
//! ([`spawn_monitor`]: this program again, which is why `main` calls
//! [`run_if_server`] first) with a 300 ms heartbeat timeout, then a rank
//! process (this program once more) that registers (`Init`), sends a few
//! heartbeats and then hangs. The monitor sees the heartbeat timeout fire
//! and kills the rank with `SIGKILL` through its pidfd; the parent reports
//! that the rank was killed, by which signal and which timeout (the
//! monitor's status, over its control socket), and how long it took.
//!
//! ```text
//! cargo run -p nodeipc-monitor --example kill_a_hung_rank
//! ```
//!
//! The monitor's own log lines (on standard error) show the timeout as it
//! fires. The sockets live in a private 0700 directory under the temporary
//! directory, removed at the end; the monitor and the rank die with the
//! parent (`PR_SET_PDEATHSIG`) and the parent kills them on every error
//! path. Every wait is bounded. Exits 0 only when the rank was killed by the
//! monitor for its heartbeat timeout within the bound.

use std::error::Error;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, ExitStatus};
use std::time::{Duration, Instant};

use nodeipc_monitor::{ControlClient, MonitorClient, MonitorConfig, RankInfo, RankState, Timeouts};
use nodeipc_monitor_host::{run_if_server, spawn_monitor};

/// Names the monitor's socket (and so the role) in the rank process.
const SOCKET_ENV: &str = "NODEIPC_EXAMPLE_MONITOR_SOCKET";
const PARENT_ENV: &str = "NODEIPC_EXAMPLE_PARENT";
const HEARTBEAT_TIMEOUT: Duration = Duration::from_millis(300);
const CHECK_INTERVAL: Duration = Duration::from_millis(50);
const HEARTBEATS: u32 = 3;
/// The bound on every call to the monitor.
const STEP: Duration = Duration::from_secs(5);
/// From the rank's start to its death: set-up, heartbeats, the timeout,
/// with room for a slow machine.
const KILL_BOUND: Duration = Duration::from_secs(10);
/// How long a rank the monitor failed to kill hangs before it gives up.
const HANG_LIMIT: Duration = Duration::from_secs(30);

type Result<T> = std::result::Result<T, Box<dyn Error>>;

fn main() -> ExitCode {
    // In the monitor process this serves, then exits; elsewhere it returns.
    run_if_server();
    let (who, result) = match std::env::var_os(SOCKET_ENV) {
        Some(socket) => ("rank", rank(Path::new(&socket))),
        None => ("parent", parent()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kill_a_hung_rank ({who}): {e}");
            ExitCode::FAILURE
        }
    }
}

fn parent() -> Result<()> {
    // Declared first, dropped last: after the monitor removed its sockets.
    let dir = PrivateDir::create(&format!("nodeipc-example-monitor-{}", std::process::id()))?;
    let socket = dir.0.join("rank0.sock");
    let config = MonitorConfig {
        timeouts: Timeouts {
            initial_heartbeat: Some(STEP),
            heartbeat: Some(HEARTBEAT_TIMEOUT),
            ..Timeouts::default()
        },
        check_interval: CHECK_INTERVAL,
        restart_expected: false,
        ..MonitorConfig::default()
    };
    let monitor = spawn_monitor(&config, &socket)?;
    println!(
        "parent: monitor {} serves {} (heartbeat timeout {HEARTBEAT_TIMEOUT:?}, check every \
         {CHECK_INTERVAL:?})",
        monitor.pid(),
        socket.display()
    );

    let started = Instant::now();
    let mut rank = Rank(Some(
        Command::new(std::env::current_exe()?)
            .env(SOCKET_ENV, &socket)
            .env(PARENT_ENV, std::process::id().to_string())
            .spawn()?,
    ));
    let status = rank.wait(KILL_BOUND)?;
    let took = started.elapsed();
    if status.signal() != Some(libc::SIGKILL) {
        return Err(format!("the rank was not killed by SIGKILL: it ended with {status}").into());
    }

    // The monitor sees the exit through the rank's pidfd at once; give it
    // a bounded moment to record it.
    let mut control = ControlClient::connect(&socket, STEP)?;
    let deadline = Instant::now() + STEP;
    let report = loop {
        let report = control.status()?;
        if report.state == RankState::Terminated || Instant::now() >= deadline {
            break report;
        }
        std::thread::sleep(CHECK_INTERVAL);
    };
    if report.state != RankState::Terminated {
        return Err(format!("monitor state {:?}, expected Terminated", report.state).into());
    }
    let fired = report
        .last_timeout
        .ok_or("the monitor reports no timeout fired")?;
    // Not the initial heartbeat's: the rank did send heartbeats.
    if !fired.starts_with("heartbeat timeout:") {
        return Err(format!("the timeout that fired was not the heartbeat's: {fired}").into());
    }
    println!(
        "parent: the rank was killed by SIGKILL {:.1} s after it started; the monitor says: {fired}",
        took.as_secs_f64()
    );
    drop(control);
    let exit = monitor.stop()?;
    if socket.exists() {
        return Err(format!(
            "{} still exists after the monitor stopped",
            socket.display()
        )
        .into());
    }
    println!("parent: monitor stopped ({exit}), its sockets removed");
    Ok(())
}

fn rank(socket: &Path) -> Result<()> {
    die_with_parent()?;
    let mut client = MonitorClient::connect(socket, STEP)?;
    client.init(&RankInfo::this_process(0, 0))?;
    for _ in 0..HEARTBEATS {
        std::thread::sleep(HEARTBEAT_TIMEOUT / 4);
        client.heartbeat()?;
    }
    println!(
        "rank {}: sent Init and {HEARTBEATS} heartbeats; now hanging",
        std::process::id()
    );
    std::thread::sleep(HANG_LIMIT);
    Err(format!("still alive after hanging {HANG_LIMIT:?}: the monitor never killed us").into())
}

/// The child asks the kernel to kill it when its parent goes, then checks
/// the parent had not already gone before it asked.
fn die_with_parent() -> Result<()> {
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
    let parent: i32 = std::env::var(PARENT_ENV)?.parse()?;
    if rustix::process::getppid().map(|p| p.as_raw_nonzero().get()) != Some(parent) {
        return Err("the parent exited before the rank started".into());
    }
    Ok(())
}

/// A 0700 directory of ours under the temporary directory, removed on drop.
struct PrivateDir(PathBuf);

impl PrivateDir {
    fn create(name: &str) -> Result<PrivateDir> {
        let path = std::env::temp_dir().join(name);
        std::fs::DirBuilder::new().mode(0o700).create(&path)?;
        Ok(PrivateDir(path))
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The rank process, killed and reaped if it is dropped unwaited.
struct Rank(Option<Child>);

impl Rank {
    /// Waits up to `limit` for the rank to end, however it ends.
    fn wait(&mut self, limit: Duration) -> Result<ExitStatus> {
        let deadline = Instant::now() + limit;
        let Some(child) = self.0.as_mut() else {
            return Err("no rank process".into());
        };
        loop {
            if let Some(status) = child.try_wait()? {
                self.0 = None;
                return Ok(status);
            }
            if Instant::now() >= deadline {
                return Err(format!("the rank still runs {limit:?} after it started").into());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Rank {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
