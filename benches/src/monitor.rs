//! Heartbeats to a rank monitor in its own process: over its Unix socket
//! (a request and its reply) beside the shared-memory fast path (one atomic
//! increment the monitor reads at its next check).

use std::io;
use std::time::{Duration, Instant};

use nodeipc_monitor::{MonitorClient, MonitorConfig, MonitorHandle, RankInfo, SpawnOptions};

/// How a heartbeat travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Beat {
    /// A `Heartbeat` frame over the socket, answered by `Ok`.
    Socket,
    /// One atomic increment in the shared heartbeat region.
    FastPath,
}

impl Beat {
    /// Short name for tables.
    pub fn name(self) -> &'static str {
        match self {
            Beat::Socket => "socket heartbeat",
            Beat::FastPath => "shared-memory heartbeat",
        }
    }
}

/// A monitor process and a client registered with it.
pub struct MonitorSession {
    client: MonitorClient,
    _monitor: MonitorHandle,
    dir: std::path::PathBuf,
}

impl MonitorSession {
    /// Spawns a monitor (this executable, served through
    /// [`run_if_peer`](crate::run_if_peer)) and registers this process with it.
    ///
    /// # Errors
    /// The monitor failing to start, or refusing the registration.
    pub fn start() -> io::Result<MonitorSession> {
        let dir = std::env::temp_dir().join(format!(
            "nodeipc-bench-monitor-{}-{:x}",
            std::process::id(),
            crate::nonce()
        ));
        std::fs::create_dir(&dir)?;
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
        let socket = dir.join("monitor.sock");
        let config = MonitorConfig {
            check_interval: Duration::from_millis(100),
            ..MonitorConfig::default()
        };
        let options = SpawnOptions {
            die_with_parent: true,
            log_file: Some(dir.join("monitor.log")),
            ..SpawnOptions::default()
        };
        let monitor = nodeipc_monitor::spawn_monitor_with(&config, &socket, options)
            .map_err(io::Error::other)?;
        let mut client =
            MonitorClient::connect(&socket, Duration::from_secs(10)).map_err(io::Error::other)?;
        client
            .init_with_heartbeat_region(&RankInfo::this_process(0, 0))
            .map_err(io::Error::other)?;
        Ok(MonitorSession {
            client,
            _monitor: monitor,
            dir,
        })
    }

    /// `count` heartbeats of one kind; the time they took.
    ///
    /// # Errors
    /// A heartbeat the monitor refused.
    pub fn run(&mut self, beat: Beat, count: u64) -> io::Result<Duration> {
        let start = Instant::now();
        for _ in 0..count {
            match beat {
                Beat::Socket => self.client.heartbeat(),
                Beat::FastPath => self.client.heartbeat_fast(),
            }
            .map_err(io::Error::other)?;
        }
        Ok(start.elapsed())
    }
}

impl Drop for MonitorSession {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
