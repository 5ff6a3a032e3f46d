//! The monitor as a process of its own: [`spawn_monitor`] starts it and
//! waits until it answers, [`MonitorHandle`] stops it, [`run_if_server`]
//! is how a re-executed binary becomes one, [`serve`] is the server's `main`.

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nodeipc_fdpass::{ForkGeneration, Pidfd, Signal};

use nodeipc_fdpass::StopSignals;
use nodeipc_monitor::{
    ControlClient, LOG_TARGET, MonitorConfig, MonitorServer, MonitorStatus, Shutdown,
    control_socket_path,
};

use crate::health::nvml_probe;
use crate::{
    Error, HealthChecks, HealthConfig, HostConfig, MonitorConfigFile, Result, StderrLogger,
    io_error,
};

/// Set in a re-executed monitor's environment: the rank socket's path.
pub const SERVE_ENV: &str = "NODEIPC_MONITOR_SERVE";

/// Set beside [`SERVE_ENV`]: the path of the configuration file, in the
/// JSON form ([`MonitorConfigFile`]; defaults when absent), read with
/// [`MonitorConfigFile::load`]'s trust rules.
pub const CONFIG_ENV: &str = "NODEIPC_MONITOR_CONFIG";

/// Builds the health checks `config`'s health section asks for (the GPU found from
/// each registered rank's local rank, NVML loaded at run time; one that
/// cannot run is logged, not fatal),
/// binds `socket`, shuts down in order on any of the
/// [`terminating_signals`](nodeipc_fdpass::terminating_signals) (SIGTERM, SIGINT,
/// SIGHUP, ...), and serves until one arrives: the whole of a monitor process's
/// `main`. The signals are blocked before the sockets exist, so none can
/// kill the process with its socket files still in place. Call it from a
/// process's only thread. The log goes to the program's `log` logger, or
/// to standard error ([`StderrLogger`]) when it installed none.
///
/// # Errors
/// [`Error::Config`] for a health check that cannot be built (a NIC that
/// is not there); as [`MonitorServer::bind`] and [`MonitorServer::run`].
pub fn serve(socket: impl AsRef<Path>, config: impl Into<HostConfig>) -> Result<Shutdown> {
    let HostConfig {
        monitor: config,
        health,
    } = config.into();
    StderrLogger::install();
    // Before anything is bound: a NIC that is not there is refused at once.
    let env = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    let health = health.checks_for_any_rank(env.as_deref(), &mut nvml_probe)?;
    for unavailable in &health.unavailable {
        log::warn!(
            target: LOG_TARGET,
            "{} health check unavailable, not run: {}",
            unavailable.check,
            unavailable.reason
        );
    }
    let signals = StopSignals::install().map_err(|e| io_error("signalfd", "", e))?;
    let mut server = MonitorServer::bind(socket, config)?;
    for check in health.checks {
        server.add_health_check(check);
    }
    server.set_shutdown_signals(signals);
    Ok(server.run()?)
}

/// If this process was started by [`spawn_monitor`] as a monitor
/// ([`SERVE_ENV`] is set), serves and exits (0 after an orderly shutdown, 1
/// with a line on stderr on failure); otherwise returns at once.
///
/// A program that lets `spawn_monitor` re-execute it calls this first
/// thing in `main`, before any thread starts:
///
/// ```no_run
/// // First line of `main`: returns at once unless spawned as a monitor.
/// nodeipc_monitor_host::run_if_server();
/// // … the program's own work …
/// ```
pub fn run_if_server() {
    let Some(socket) = std::env::var_os(SERVE_ENV) else {
        return;
    };
    // The program's `main` has not run: nothing else can have set a logger.
    StderrLogger::install();
    let config = match std::env::var_os(CONFIG_ENV) {
        Some(path) => HostConfig::load(PathBuf::from(path)),
        None => Ok(HostConfig::default()),
    };
    let code = match config.and_then(|c| serve(PathBuf::from(socket), c)) {
        Ok(_) => 0,
        Err(e) => {
            // Not `eprintln!`: it panics when standard error is gone, and
            // the exit status must say what happened.
            let _ = writeln!(std::io::stderr(), "nodeipc-monitor: {e}");
            1
        }
    };
    std::process::exit(code);
}

/// How [`spawn_monitor_with`] starts the monitor process.
#[derive(Clone, Debug)]
pub struct SpawnOptions {
    /// `None`: this executable again, with [`SERVE_ENV`] and [`CONFIG_ENV`]
    /// set (its `main` must call [`run_if_server`] first). `Some(p)`: runs
    /// `p monitor serve --socket PATH --config FILE` (the `nodeipc` CLI, or
    /// any program with that command line). Either way the configuration
    /// goes in its JSON form in a new 0600 file beside the socket (created
    /// exclusively, never through a link) that is removed once the monitor
    /// answers.
    pub program: Option<PathBuf>,
    /// How long to wait for the monitor to answer on its control socket.
    pub ready_timeout: Duration,
    /// After `SIGTERM` on stop, how long before `SIGKILL`.
    pub stop_grace: Duration,
    /// The monitor gets `SIGTERM` when the thread that spawned it exits
    /// (`PR_SET_PDEATHSIG`): no orphaned monitor outlives its launcher.
    pub die_with_parent: bool,
    /// Where the monitor's log (its standard error) goes: appended to this
    /// file, or inherited when `None`. A missing file is created 0600
    /// (`O_CREAT | O_EXCL | O_NOFOLLOW`); an existing one must be a regular
    /// file of ours that only we may write. A symlink, a FIFO, someone
    /// else's file or a kernel interface file (`/proc`, `/sys`) at the path
    /// is refused ([`Error::File`]), so a link planted in a shared directory
    /// never redirects the writes.
    pub log_file: Option<PathBuf>,
    /// The health checks the monitor runs (for whichever rank registers;
    /// none by default).
    pub health: HealthConfig,
}

impl Default for SpawnOptions {
    fn default() -> Self {
        SpawnOptions {
            program: None,
            ready_timeout: Duration::from_secs(10),
            stop_grace: Duration::from_secs(2),
            die_with_parent: true,
            log_file: None,
            health: HealthConfig::default(),
        }
    }
}

/// A monitor process; stopped (SIGTERM, then SIGKILL after the grace
/// period) by [`stop`](MonitorHandle::stop) or on drop.
#[derive(Debug)]
pub struct MonitorHandle {
    child: Option<Child>,
    pidfd: Pidfd,
    socket: PathBuf,
    grace: Duration,
    /// The process that started the monitor (its parent).
    born: ForkGeneration,
}

/// Starts a monitor process serving `socket` with `config`, re-executing
/// this executable (see [`run_if_server`]), and waits until it answers.
///
/// # Errors
/// As [`spawn_monitor_with`].
pub fn spawn_monitor(config: &MonitorConfig, socket: impl AsRef<Path>) -> Result<MonitorHandle> {
    spawn_monitor_with(config, socket, SpawnOptions::default())
}

/// Starts a monitor process as `options` say and waits (up to
/// `options.ready_timeout`) until it answers a status query on its control
/// socket.
///
/// # Errors
/// [`Error::Config`] for an invalid configuration (checked before
/// anything starts); [`Error::Spawn`]; [`Error::ServerExited`] when it
/// exits first (a bad socket path, say: its reason is on its stderr);
/// [`Error::NotReady`] when it does not answer in time (it is killed).
pub fn spawn_monitor_with(
    config: &MonitorConfig,
    socket: impl AsRef<Path>,
    options: SpawnOptions,
) -> Result<MonitorHandle> {
    let config = HostConfig {
        monitor: config.clone(),
        health: options.health.clone(),
    };
    config.validate()?;
    let socket = socket.as_ref();
    let file = write_config_file(socket, &config)?;
    let _cleanup = ConfigFileGuard(file.clone());
    let (mut command, program) = match &options.program {
        None => {
            let exe = std::env::current_exe().map_err(|e| io_error("current_exe", "", e))?;
            let mut command = Command::new(&exe);
            command.env(SERVE_ENV, socket).env(CONFIG_ENV, &file);
            (command, exe)
        }
        Some(program) => {
            let mut command = Command::new(program);
            command
                .args(["monitor", "serve", "--socket"])
                .arg(socket)
                .arg("--config")
                .arg(&file)
                .env_remove(SERVE_ENV)
                .env_remove(CONFIG_ENV);
            (command, program.clone())
        }
    };
    command.stdin(Stdio::null());
    if let Some(log) = &options.log_file {
        command.stderr(open_log_file(log)?);
    }
    if options.die_with_parent {
        // SAFETY: runs between fork and exec and only calls prctl, which is
        // async-signal-safe and touches no memory of the parent.
        unsafe {
            command.pre_exec(|| {
                rustix::process::set_parent_process_death_signal(Some(Signal::TERM))
                    .map_err(std::io::Error::from)
            });
        }
    }
    let mut child = command.spawn().map_err(|source| Error::Spawn {
        program: program.clone(),
        source,
    })?;
    // Our unreaped child: its pid cannot be reused before we wait for it.
    let pidfd = match Pidfd::open(child.id()) {
        Ok(pidfd) => pidfd,
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(nodeipc_monitor::Error::from(e).into());
        }
    };
    let mut handle = MonitorHandle {
        child: Some(child),
        pidfd,
        socket: socket.to_owned(),
        grace: options.stop_grace,
        born: ForkGeneration::current(),
    };
    handle.wait_ready(options.ready_timeout, options.log_file.is_some())?;
    Ok(handle)
}

impl MonitorHandle {
    fn wait_ready(&mut self, limit: Duration, logged: bool) -> Result<()> {
        let start = Instant::now();
        let control = control_socket_path(&self.socket);
        loop {
            if let Some(status) = self.try_wait()? {
                return Err(Error::ServerExited {
                    status,
                    stderr_hint: if logged {
                        "; its reason is in the log file"
                    } else {
                        "; its reason is on its standard error"
                    },
                });
            }
            // Tried once: a blocking connect would hang on a monitor that
            // is stopped with its backlog full.
            if nodeipc_fdpass::connect_unix(&control, Duration::ZERO).is_ok() {
                let left = limit
                    .saturating_sub(start.elapsed())
                    .max(Duration::from_millis(100));
                if ControlClient::connect(&control, left)
                    .and_then(|mut c| c.status())
                    .is_ok()
                {
                    return Ok(());
                }
            }
            if start.elapsed() >= limit {
                let pid = self.pid();
                self.kill_now();
                return Err(Error::NotReady {
                    pid,
                    path: control,
                    waited: start.elapsed(),
                });
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The monitor's pid.
    pub fn pid(&self) -> u32 {
        self.pidfd.pid()
    }

    /// The rank socket it serves.
    pub fn socket_path(&self) -> &Path {
        &self.socket
    }

    /// Its control socket.
    pub fn control_path(&self) -> PathBuf {
        control_socket_path(&self.socket)
    }

    /// A new connection to its control socket.
    ///
    /// # Errors
    /// As [`ControlClient::connect`].
    pub fn control(&self, timeout: Duration) -> Result<ControlClient> {
        Ok(ControlClient::connect(self.control_path(), timeout)?)
    }

    /// Its status, over a new control connection (5 s timeout).
    ///
    /// # Errors
    /// As [`ControlClient::status`].
    pub fn status(&self) -> Result<MonitorStatus> {
        Ok(self.control(Duration::from_secs(5))?.status()?)
    }

    /// How it ended, if it has.
    ///
    /// # Errors
    /// [`Error::Io`] from `waitpid`.
    pub fn try_wait(&mut self) -> Result<Option<ExitStatus>> {
        match self.child.as_mut() {
            Some(child) => child
                .try_wait()
                .map_err(|e| io_error("waitpid", self.pidfd.pid(), e)),
            None => Ok(None),
        }
    }

    /// Stops it in order (SIGTERM: it closes connections and removes its
    /// socket files), then SIGKILL if it has not exited within the grace
    /// period; returns how it ended.
    ///
    /// # Errors
    /// [`Error::Io`] from `waitpid`.
    pub fn stop(mut self) -> Result<ExitStatus> {
        self.stop_impl()
    }

    fn stop_impl(&mut self) -> Result<ExitStatus> {
        let Some(mut child) = self.child.take() else {
            return Err(io_error(
                "waitpid",
                self.pidfd.pid(),
                std::io::Error::other("already stopped"),
            ));
        };
        if child.try_wait().ok().flatten().is_none() {
            let _ = self.pidfd.send_signal(Signal::TERM);
            if !self.pidfd.wait_exit(self.grace).unwrap_or(false) {
                let _ = self.pidfd.send_signal(Signal::KILL);
            }
        }
        child
            .wait()
            .map_err(|e| io_error("waitpid", self.pidfd.pid(), e))
    }

    fn kill_now(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for MonitorHandle {
    fn drop(&mut self) {
        // In a child forked since, the monitor is the parent's child: not
        // ours to stop or wait for.
        if self.child.is_some() && !self.born.is_forked() {
            let _ = self.stop_impl();
        }
    }
}

/// `SOCKET.config-<pid>-<n>.json`, beside the socket (in the directory the
/// server checks is ours): a fresh name each time, so neither a leftover of
/// a crashed launcher nor anything planted in advance stands in the way.
fn config_file_path(socket: &Path, attempt: u32) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mut path: OsString = socket.as_os_str().to_owned();
    path.push(format!(
        ".config-{}-{nanos:09}{attempt}.json",
        std::process::id()
    ));
    PathBuf::from(path)
}

/// Writes the configuration to a new 0600 file (`O_CREAT | O_EXCL |
/// O_NOFOLLOW`: nothing already at the path is followed, truncated or
/// reused) and returns its path.
fn write_config_file(socket: &Path, config: &HostConfig) -> Result<PathBuf> {
    let mut attempt = 0;
    let (path, fd) = loop {
        let path = config_file_path(socket, attempt);
        match nodeipc_fs::create_exclusive(&path, 0o600) {
            Ok(fd) => break (path, fd),
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) && attempt < 8 => attempt += 1,
            Err(source) => {
                return Err(Error::File {
                    what: "monitor configuration file",
                    source,
                });
            }
        }
    };
    let written = std::fs::File::from(fd).write_all(config.to_json().as_bytes());
    if let Err(e) = written {
        let _ = std::fs::remove_file(&path);
        return Err(io_error("write config file", path.display(), e));
    }
    Ok(path)
}

/// Opens the monitor's log file for appending without ever following a
/// link ([`nodeipc_fs::create_output`]): a new file is created 0600 with
/// `O_CREAT | O_EXCL | O_NOFOLLOW`; an existing one is used only if it is a
/// regular file of ours that only we may write. A symlink, a FIFO or a
/// kernel interface file planted at the path is refused, so a monitor run
/// by root never writes through it.
fn open_log_file(path: &Path) -> Result<std::fs::File> {
    nodeipc_fs::create_output(path, 0o600, nodeipc_fs::Existing::Append)
        .map(std::fs::File::from)
        .map_err(|source| Error::File {
            what: "log file",
            source,
        })
}

/// Removes the configuration file once the monitor has read it (or failed).
struct ConfigFileGuard(PathBuf);

impl Drop for ConfigFileGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
