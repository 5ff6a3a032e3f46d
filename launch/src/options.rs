//! What a launch is asked to do, checked before anything starts.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use nodeipc_monitor::MonitorConfig;
use nodeipc_monitor_host::HealthConfig;
use nodeipc_text::duration;

use crate::output::OutputOptions;
use crate::progress::ProgressOptions;
use crate::{Error, Result};

/// Most local ranks one launch starts: each costs a process, a monitor
/// thread and three descriptors, and a node has far fewer accelerators.
pub const MAX_NPROC: u32 = 1024;

/// Most restarts one launch may be asked for.
pub const MAX_RESTARTS: u32 = 1_000_000;

/// Longest `--stop-timeout` accepted: longer is not a bound.
pub const MAX_STOP_TIMEOUT: Duration = Duration::from_secs(3600);

/// Shortest `--stop-timeout`, `--rank-restart-timeout` and
/// `--health-interval` accepted.
const MIN_DURATION: Duration = Duration::from_millis(1);

/// Health checks every monitor runs beside its timeouts (a failure is
/// treated as a timeout: the rank is terminated and the round restarts).
/// They run only while a rank is registered with its monitor.
#[derive(Clone, Debug)]
pub struct HealthOptions {
    /// NICs that must be up (`class/net/<name>` or `class/infiniband/<name>`
    /// under `sysfs_root`).
    pub nics: Vec<String>,
    /// Where sysfs is (`/sys`; a fixture directory in tests).
    pub sysfs_root: PathBuf,
    /// Check each rank's GPU through NVML (found by its local rank through
    /// `CUDA_VISIBLE_DEVICES`). Without NVML on the machine the check is
    /// reported unavailable at start and not run.
    pub gpu: bool,
    /// How often each check runs (at most; the monitor's check interval
    /// is the finer grain).
    pub interval: Duration,
}

impl Default for HealthOptions {
    fn default() -> Self {
        HealthOptions {
            nics: Vec::new(),
            sysfs_root: PathBuf::from("/sys"),
            gpu: false,
            interval: Duration::from_secs(5),
        }
    }
}

/// What [`launch`](crate::launch) runs.
#[derive(Clone, Debug)]
pub struct LaunchOptions {
    /// Local ranks to start (1 ..= [`MAX_NPROC`]).
    pub nproc: u32,
    /// Restart rounds after the first attempt; 0 never restarts.
    pub max_restarts: u32,
    /// How every rank's monitor watches it.
    pub monitor: MonitorConfig,
    /// The health checks every rank's monitor runs (a configuration file's
    /// `health_checks` section); [`health`](LaunchOptions::health) adds to them.
    pub health_checks: HealthConfig,
    /// Where the private run directory (0700) is made; `None`:
    /// `$XDG_RUNTIME_DIR` when set, else the system's temporary directory.
    /// This one, or `$XDG_RUNTIME_DIR`, must be a directory of ours, not a
    /// symlink, that group and others cannot write ([`validate`] checks).
    ///
    /// [`validate`]: LaunchOptions::validate
    pub run_dir: Option<PathBuf>,
    /// Grace between SIGTERM and SIGKILL when a round is stopped.
    pub stop_timeout: Duration,
    /// How long a restarted rank that had sent `Init` before may take to
    /// register again before the round fails; `None`: no limit.
    pub rank_restart_timeout: Option<Duration>,
    /// Where to append one JSON object per event, besides stderr.
    pub json_events: Option<PathBuf>,
    /// Write the event lines to stderr.
    pub stderr_events: bool,
    /// Catch every terminating signal (`nodeipc_fdpass::terminating_signals`:
    /// SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGALRM, ...,
    /// SIGRTMIN to SIGRTMAX; blocked in the calling thread, read from a
    /// signalfd) and stop everything on them as on SIGTERM, the launch then
    /// ending with 128 + the signal's number. Call from the main thread
    /// before any other thread exists, or other threads may take them.
    pub handle_signals: bool,
    /// Make the calling process a child subreaper and, when a round stops,
    /// kill and reap every child it has: right for a process whose only
    /// children are the ranks (the `nodeipc` command), wrong for a test
    /// harness that runs other children beside.
    pub own_all_children: bool,
    /// Health checks for every monitor.
    pub health: HealthOptions,
    /// When a job that makes no progress is no longer restarted.
    pub progress: ProgressOptions,
    /// NVRx's `safety_factor`, handed to every rank as
    /// `NODEIPC_FT_SAFETY_FACTOR` (`nodeipc.fault_tolerance` reads it).
    pub ft_safety_factor: Option<f64>,
    /// Where ranks' stdout and stderr go.
    pub output: OutputOptions,
    /// The program and its arguments.
    pub command: Vec<OsString>,
}

impl LaunchOptions {
    /// Defaults for `command` run `nproc` times: no restart, the monitor's
    /// defaults, a 10 s stop timeout, events on stderr, no signal handling.
    pub fn new(nproc: u32, command: Vec<OsString>) -> LaunchOptions {
        LaunchOptions {
            nproc,
            max_restarts: 0,
            monitor: MonitorConfig::default(),
            health_checks: HealthConfig::default(),
            run_dir: None,
            stop_timeout: Duration::from_secs(10),
            rank_restart_timeout: None,
            json_events: None,
            stderr_events: true,
            handle_signals: false,
            own_all_children: false,
            health: HealthOptions::default(),
            progress: ProgressOptions::off(),
            ft_safety_factor: None,
            output: OutputOptions::default(),
            command,
        }
    }

    /// Checks every value against its bound, and the run directory's
    /// parent against the rule of a directory we work in.
    ///
    /// # Errors
    /// [`Error::Options`] naming the option, its value and the bound, or
    /// the run directory's parent with its owner and mode.
    pub fn validate(&self) -> Result<()> {
        if self.nproc == 0 || self.nproc > MAX_NPROC {
            return Err(Error::options(format!(
                "--nproc {} is out of range: 1 to {MAX_NPROC}",
                self.nproc
            )));
        }
        if !(1..=255).contains(&self.progress.no_restart_exit_code) {
            return Err(Error::options(format!(
                "--ft-no-restart-exit-code {} is out of range: 1 to 255 (an exit status)",
                self.progress.no_restart_exit_code
            )));
        }
        if self.max_restarts > MAX_RESTARTS {
            return Err(Error::options(format!(
                "--max-restarts {} is more than {MAX_RESTARTS}",
                self.max_restarts
            )));
        }
        // The bounds the messages name: 1 ms (a shorter one is no grace at
        // all; it was taken, as anything above 0 was) to an hour.
        let out_of_range = |d: Duration| d < MIN_DURATION || d > MAX_STOP_TIMEOUT;
        if out_of_range(self.stop_timeout) {
            return Err(Error::options(format!(
                "--stop-timeout {} must be between 1 ms and {}",
                duration(self.stop_timeout),
                duration(MAX_STOP_TIMEOUT)
            )));
        }
        if self.rank_restart_timeout.is_some_and(out_of_range) {
            return Err(Error::options(format!(
                "--rank-restart-timeout {} must be between 1 ms and {}",
                duration(self.rank_restart_timeout.unwrap_or_default()),
                duration(MAX_STOP_TIMEOUT)
            )));
        }
        if out_of_range(self.health.interval) {
            return Err(Error::options(format!(
                "--health-interval {} must be between 1 ms and {}",
                duration(self.health.interval),
                duration(MAX_STOP_TIMEOUT)
            )));
        }
        if self.command.is_empty() {
            return Err(Error::options("no command to run (after `--`)"));
        }
        self.monitor
            .validate()
            .map_err(|e| Error::options(format!("monitor configuration: {e}")))?;
        self.check_run_parent()
    }

    /// The run directory's parent, when the user chose it (`--run-dir`, or
    /// `$XDG_RUNTIME_DIR`), must be a directory of ours, not a link, that
    /// nobody else may write (the rule of `nodeipc_fs::check_dir`, as for
    /// a socket's directory): else another user could move the run
    /// directory and put their own in its place. The system's temporary
    /// directory, the fallback, is shared by design; the run directory is
    /// made there under an unpredictable name, 0700 in one call.
    fn check_run_parent(&self) -> Result<()> {
        let (parent, flag) = match &self.run_dir {
            Some(dir) => (dir.clone(), "--run-dir"),
            None => match xdg_runtime_dir() {
                Some(dir) => (dir, "$XDG_RUNTIME_DIR"),
                None => return Ok(()),
            },
        };
        nodeipc_fs::check_dir(&parent, nodeipc_fs::ModeRule::NotWritableByOthers)
            .map_err(|source| Error::options(format!("{flag}: {source}")))
    }

    /// The parent of the run directory.
    pub(crate) fn run_parent(&self) -> PathBuf {
        match &self.run_dir {
            Some(dir) => dir.clone(),
            None => xdg_runtime_dir().unwrap_or_else(std::env::temp_dir),
        }
    }
}

/// `$XDG_RUNTIME_DIR`, when set and not empty.
fn xdg_runtime_dir() -> Option<PathBuf> {
    std::env::var_os("XDG_RUNTIME_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
}
