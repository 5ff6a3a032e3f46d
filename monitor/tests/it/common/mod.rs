//! What the monitor's tests share: a monitor process on a unique socket in
//! its own directory, helper processes whose stages arrive as lines, and
//! bounded waits on the monitor's state.
#![allow(dead_code, unreachable_pub)]

pub mod helper;
pub mod raw;
pub mod sysfs;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use nodeipc_monitor::{
    ControlClient, MonitorClient, MonitorConfig, MonitorServer, MonitorStatus, RankInfo, StopHandle,
};
use nodeipc_monitor_host::{HostConfig, MonitorConfigFile, MonitorHandle, SpawnOptions};
use nodeipc_testkit::{ChildGuard, TempDir, spawn_child};

pub use helper::{helper, helper_command};

/// The server's rate limit on log lines a client can cause: lines of one
/// kind per window (the README's "Logging").
pub const LOG_BURST: u32 = 10;

/// The config a JSON text describes.
pub fn parse_config(json: &str) -> MonitorConfig {
    MonitorConfig::from_json(json).expect("test config")
}

/// A config with the given timeouts in milliseconds and a 100 ms check.
pub fn config(json: &str) -> MonitorConfig {
    let mut config = parse_config(json);
    if !json.contains("check_interval_ms") {
        config.check_interval = Duration::from_millis(100);
    }
    config
}

/// A monitor process serving a socket in a fresh private directory, its log
/// in `dir/monitor.log`.
pub struct Served {
    pub monitor: MonitorHandle,
    pub socket: PathBuf,
    pub dir: TempDir,
}

impl Served {
    pub fn spawn(tag: &str, config: &MonitorConfig) -> Served {
        Served::spawn_host(tag, &HostConfig::from(config.clone()))
    }

    /// As `spawn`, with health checks beside the monitor's configuration.
    pub fn spawn_host(tag: &str, config: &HostConfig) -> Served {
        let dir = TempDir::new(tag);
        let socket = dir.join("rank.sock");
        let options = SpawnOptions {
            program: Some(helper()),
            log_file: Some(dir.join("monitor.log")),
            health: config.health.clone(),
            ..SpawnOptions::default()
        };
        let monitor = nodeipc_monitor_host::spawn_monitor_with(&config.monitor, &socket, options)
            .expect("spawn monitor");
        Served {
            monitor,
            socket,
            dir,
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("monitor.log")).unwrap_or_default()
    }

    pub fn status(&self) -> MonitorStatus {
        self.monitor.status().expect("status")
    }

    /// Polls the status until `done` holds, at most `limit`.
    pub fn wait_status(
        &self,
        limit: Duration,
        done: impl Fn(&MonitorStatus) -> bool,
    ) -> MonitorStatus {
        wait_status(&self.socket, limit, done)
    }

    /// A rank helper process against this monitor.
    pub fn rank(&self, args: &[&str]) -> Proc {
        Proc::spawn(
            helper_command()
                .arg("rank")
                .arg("--socket")
                .arg(&self.socket)
                .args(args),
        )
    }
}

/// Polls the status on the control socket beside `socket` until `done`.
pub fn wait_status(
    socket: &std::path::Path,
    limit: Duration,
    done: impl Fn(&MonitorStatus) -> bool,
) -> MonitorStatus {
    let start = Instant::now();
    let mut control = ControlClient::connect(socket, Duration::from_secs(5)).expect("control");
    loop {
        let status = control.status().expect("status");
        if done(&status) {
            return status;
        }
        assert!(
            start.elapsed() < limit,
            "status still not as expected after {limit:?}: {status:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A monitor on a thread of the test process, for protocol tests. Its log
/// lines are collected. Timeouts must stay unset unless the rank is a child
/// (the rank would be the test process itself otherwise).
pub struct InProcess {
    pub socket: PathBuf,
    pub stop: StopHandle,
    pub log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    thread: Option<std::thread::JoinHandle<nodeipc_monitor::Result<nodeipc_monitor::Shutdown>>>,
    pub dir: TempDir,
}

impl InProcess {
    pub fn start(tag: &str, config: MonitorConfig) -> InProcess {
        Self::start_with(tag, config, |_| {})
    }

    pub fn start_with(
        tag: &str,
        config: MonitorConfig,
        prepare: impl FnOnce(&mut MonitorServer),
    ) -> InProcess {
        let dir = TempDir::new(tag);
        let socket = dir.join("rank.sock");
        let mut server = MonitorServer::bind(&socket, config).expect("bind");
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = std::sync::Arc::clone(&log);
        server.on_log(move |level, line| {
            sink.lock().unwrap().push(format!("{level:?}: {line}"));
        });
        prepare(&mut server);
        let stop = server.stop_handle();
        let thread = std::thread::spawn(move || server.run());
        InProcess {
            socket,
            stop,
            log,
            thread: Some(thread),
            dir,
        }
    }

    pub fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    pub fn wait_status(
        &self,
        limit: Duration,
        done: impl Fn(&MonitorStatus) -> bool,
    ) -> MonitorStatus {
        wait_status(&self.socket, limit, done)
    }

    /// Stops the server and checks it ended in order.
    pub fn finish(mut self) {
        self.stop.stop();
        let result = self.thread.take().unwrap().join().expect("server thread");
        assert_eq!(
            result.expect("server run"),
            nodeipc_monitor::Shutdown::Stopped
        );
        assert!(!self.socket.exists(), "socket file left behind");
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.stop.stop();
            let _ = thread.join();
        }
    }
}

/// A child process whose standard output arrives line by line.
/// A `sleep 30` process registered with `server` as global rank `rank`,
/// local rank `local_rank`, through a client that stays connected: the
/// rank a health check is to keep alive or terminate.
pub fn sleeping_rank(server: &InProcess, rank: u32, local_rank: u32) -> (Proc, MonitorClient) {
    let proc = Proc::spawn(Command::new("sleep").arg("30"));
    let mut client = MonitorClient::connect(&server.socket, Duration::from_secs(10)).unwrap();
    client
        .init(&RankInfo {
            pid: proc.pid(),
            ..RankInfo::this_process(rank, local_rank)
        })
        .unwrap();
    (proc, client)
}

pub struct Proc {
    pub guard: ChildGuard,
    lines: Receiver<String>,
}

impl Proc {
    pub fn spawn(command: &mut Command) -> Proc {
        let mut guard = spawn_child(command.stdout(Stdio::piped()).stdin(Stdio::null()));
        let stdout = guard.child().stdout.take().expect("piped stdout");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Proc { guard, lines }
    }

    pub fn pid(&self) -> u32 {
        self.guard.id()
    }

    /// The next line, which must start with `prefix`, within `limit`.
    pub fn expect_line(&self, prefix: &str, limit: Duration) -> String {
        match self.lines.recv_timeout(limit) {
            Ok(line) if line.starts_with(prefix) => line,
            Ok(line) => panic!("expected a line starting with {prefix:?}, got {line:?}"),
            Err(e) => panic!("no line {prefix:?} within {limit:?}: {e}"),
        }
    }

    /// Waits for the process to exit (bounded) and returns how.
    pub fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        self.guard.wait_timeout(limit)
    }

    /// Whether it is still running.
    pub fn alive(&mut self) -> bool {
        self.guard.child().try_wait().expect("try_wait").is_none()
    }
}
