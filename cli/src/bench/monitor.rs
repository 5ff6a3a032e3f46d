//! Heartbeats to a rank monitor in its own process: over its Unix socket
//! (a request and its reply) beside the shared-memory fast path (one atomic
//! increment the monitor reads at its next check).

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nodeipc_fs::PrivateDir;
use nodeipc_monitor::{MonitorClient, MonitorConfig, RankInfo};
use nodeipc_monitor_host::{MonitorHandle, SpawnOptions};

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

/// The start of the name of a session's directory in `/tmp`:
/// `nodeipc-bench-monitor-<pid>-<16 random hex digits>`, the shape
/// `nodeipc ls` and `nodeipc clean` recognise.
pub const DIR_PREFIX: &str = "nodeipc-bench-monitor-";

/// A monitor process and a client registered with it.
pub struct MonitorSession {
    client: MonitorClient,
    _monitor: MonitorHandle,
    // Dropped last: the monitor has removed its sockets by then.
    _dir: PrivateDir,
}

/// A directory only we can enter, with an unpredictable name, made so in
/// the one call that creates it (no moment in which another user could
/// plant a link or a FIFO where the monitor's socket or log goes); removed
/// with what is in it on drop.
fn private_dir(parent: &Path) -> io::Result<PrivateDir> {
    let prefix = format!("{DIR_PREFIX}{}-", std::process::id());
    PrivateDir::create(parent, &prefix).map_err(io::Error::other)
}

/// Creates an empty file in `dir`: `O_CREAT | O_EXCL | O_NOFOLLOW`, 0600.
fn create_file(dir: &PrivateDir, name: &str) -> io::Result<PathBuf> {
    let path = dir.path().join(name);
    nodeipc_fs::create_exclusive(&path, 0o600).map_err(io::Error::other)?;
    Ok(path)
}

impl MonitorSession {
    /// Spawns a monitor (this executable, served through
    /// `nodeipc_monitor_host::run_if_server()`, which its `main` calls first) and
    /// registers this process with it.
    ///
    /// Its socket and log go in a private directory in `/tmp` (see
    /// [`DIR_PREFIX`]), removed however this ends.
    ///
    /// # Errors
    /// The directory or log not made (naming the path), the monitor failing
    /// to start, or refusing the registration.
    pub fn start() -> io::Result<MonitorSession> {
        // /tmp rather than $TMPDIR: a socket path must stay short.
        let dir = private_dir(Path::new("/tmp"))?;
        let socket = dir.path().join("monitor.sock");
        let config = MonitorConfig {
            check_interval: Duration::from_millis(100),
            ..MonitorConfig::default()
        };
        let options = SpawnOptions {
            die_with_parent: true,
            log_file: Some(create_file(&dir, "monitor.log")?),
            ..SpawnOptions::default()
        };
        let monitor = nodeipc_monitor_host::spawn_monitor_with(&config, &socket, options)
            .map_err(io::Error::other)?;
        let mut client =
            MonitorClient::connect(&socket, Duration::from_secs(10)).map_err(io::Error::other)?;
        client
            .init_with_heartbeat_region(&RankInfo::this_process(0, 0))
            .map_err(io::Error::other)?;
        Ok(MonitorSession {
            client,
            _monitor: monitor,
            _dir: dir,
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

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;
    use std::time::Duration;

    use nodeipc_testkit::{TempDir, Watchdog};

    use super::{DIR_PREFIX, create_file, private_dir};

    const CHILD_ENV: &str = "NODEIPC_TEST_BENCH_DIR_CHILD";

    /// Under umask 000 with every chmod refused, in a child made for it:
    /// code that made the directory open to all and tightened it afterwards
    /// (the old `create_dir` then `set_permissions`) fails here.
    #[test]
    fn regression_monitor_dir_and_log_are_private_from_creation() {
        const TEST: &str =
            "bench::monitor::tests::regression_monitor_dir_and_log_are_private_from_creation";
        if let Some(parent) = std::env::var_os(CHILD_ENV) {
            // SAFETY: umask only sets this process's file creation mask.
            unsafe { libc::umask(0) };
            nodeipc_testkit::deny_chmod();
            let dir = private_dir(parent.as_ref()).unwrap();
            let name = dir.path().file_name().unwrap().to_str().unwrap().to_owned();
            assert!(name.starts_with(&format!("{DIR_PREFIX}{}-", std::process::id())));
            let meta = std::fs::symlink_metadata(dir.path()).unwrap();
            assert!(
                meta.is_dir() && meta.mode() & 0o7777 == 0o700,
                "{:o}",
                meta.mode()
            );
            let log = create_file(&dir, "monitor.log").unwrap();
            let meta = std::fs::symlink_metadata(&log).unwrap();
            assert!(
                meta.is_file() && meta.mode() & 0o7777 == 0o600,
                "{:o}",
                meta.mode()
            );
            // Something at the path is refused, not opened or followed.
            std::os::unix::fs::symlink("/nonexistent-target", dir.path().join("planted")).unwrap();
            assert!(create_file(&dir, "planted").is_err());
            return;
        }
        let _dog = Watchdog::new(TEST, Duration::from_secs(60));
        let parent = TempDir::new("bench-dir");
        nodeipc_testkit::spawn_child(
            nodeipc_testkit::this_test_in_a_child(TEST).env(CHILD_ENV, parent.path()),
        )
        .output_success(Duration::from_secs(30));
        let left: Vec<_> = std::fs::read_dir(parent.path()).unwrap().collect();
        assert!(left.is_empty(), "the directory was not removed: {left:?}");
    }
}
