//! `nodeipc monitor serve` and `nodeipc monitor status`: the rank monitor
//! from the shell (and what `SpawnOptions::program` runs).

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Subcommand;
use nodeipc_monitor::ControlClient;
use nodeipc_monitor_host::{HostConfig, MonitorConfigFile, StatusJson};

use crate::{CmdResult, Failure};

#[derive(Subcommand)]
pub(crate) enum MonitorCommand {
    /// Serve a rank monitor on SOCKET (0600; control socket at SOCKET.control)
    /// until SIGTERM, SIGINT, SIGUSR1 or SIGUSR2; the socket files are removed.
    Serve {
        /// The rank socket's path; its directory must be ours and not
        /// writable by group or others.
        #[arg(long)]
        socket: PathBuf,
        /// A JSON configuration file (see the nodeipc-monitor-host README);
        /// defaults when absent.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Print the status of the monitor serving SOCKET: labelled lines, or
    /// JSON with --json. No monitor there (no socket, or nobody listening)
    /// is said at once, exit 1.
    Status {
        /// The rank socket's path (its control socket is asked).
        #[arg(long)]
        socket: PathBuf,
        /// The status as one JSON object (the fields of the nodeipc-monitor
        /// README), as launchers read it.
        #[arg(long)]
        json: bool,
        /// How long, in milliseconds, to wait for the monitor to take the
        /// connection and then to answer; at least 1 (0 would leave it no
        /// time). A monitor that runs out of it exits 3; no monitor at
        /// SOCKET exits 1.
        #[arg(long, default_value_t = 2000, value_parser = timeout_ms)]
        timeout_ms: u64,
    },
}

pub(crate) fn run(command: MonitorCommand) -> CmdResult {
    match command {
        MonitorCommand::Serve { socket, config } => {
            let config = match config {
                Some(file) => HostConfig::load(file)?,
                None => HostConfig::default(),
            };
            nodeipc_monitor_host::serve(socket, config)?;
            Ok(())
        }
        MonitorCommand::Status {
            socket,
            json,
            timeout_ms,
        } => {
            let timeout = Duration::from_millis(timeout_ms);
            something_listens(&socket, timeout)?;
            let status = ControlClient::connect(&socket, timeout)
                .and_then(|mut client| client.status())
                .map_err(failure)?;
            if json {
                outln!("{}", status.to_json());
            } else {
                crate::output::text(&crate::monitor_view::render(
                    &socket.to_string_lossy(),
                    &status,
                ));
            }
            Ok(())
        }
    }
}

/// Fails at once, exit 1, when no monitor serves `socket`: its control
/// socket is missing (`ENOENT`) or nobody listens on it (`ECONNREFUSED`, a
/// file a dead monitor left). `ControlClient::connect` waits for a monitor
/// still starting, which would make "there is none" cost the whole timeout.
/// A full backlog (a monitor that is there but not accepting) is retried
/// within `timeout` and ends as exit 3, as before. The probe's connection,
/// if it is taken, is closed unused: the monitor sees a client leave.
fn something_listens(socket: &Path, timeout: Duration) -> CmdResult {
    let control = if socket.extension().is_some_and(|e| e == "control") {
        socket.to_owned()
    } else {
        nodeipc_monitor::control_socket_path(socket)
    };
    let none = |why: &str| {
        Failure::Error(format!(
            "no monitor at {} (control socket {}): {why}",
            socket.display(),
            control.display()
        ))
    };
    match control.symlink_metadata() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(none("its control socket does not exist"));
        }
        Err(e) => return Err(none(&format!("lstat of its control socket failed: {e}"))),
        Ok(meta) if !meta.file_type().is_socket() => {
            return Err(none("its control socket path is not a socket"));
        }
        Ok(_) => {}
    }
    match nodeipc_fdpass::connect_unix(&control, timeout) {
        Ok(probe) => {
            drop(probe);
            Ok(())
        }
        Err(nodeipc_fdpass::Error::Connect { source, .. })
            if matches!(
                source
                    .raw_os_error()
                    .map(rustix::io::Errno::from_raw_os_error),
                Some(rustix::io::Errno::CONNREFUSED | rustix::io::Errno::NOENT)
            ) =>
        {
            Err(none(&nodeipc_fdpass::connect_failure_reason(&source)))
        }
        // A full backlog ran the timeout out; everything else is said by
        // the real connection below, as it always was.
        Err(nodeipc_fdpass::Error::ConnectTimeout { path, waited, last }) => {
            Err(failure(nodeipc_monitor::Error::ConnectTimeout {
                path,
                waited,
                last,
            }))
        }
        Err(_) => Ok(()),
    }
}

/// A monitor that is there but did not take the connection (its backlog
/// stayed full) or answer in time exits 3, as `sem wait` does; no monitor
/// at the path, and every other failure, exits 1.
fn failure(error: nodeipc_monitor::Error) -> Failure {
    let ran_out = match &error {
        nodeipc_monitor::Error::ConnectTimeout { last, .. } => {
            last.kind() == std::io::ErrorKind::WouldBlock
                || last.raw_os_error() == Some(rustix::io::Errno::INPROGRESS.raw_os_error())
        }
        other => other.is_timeout(),
    };
    let line = crate::errors::line(&error);
    if ran_out {
        Failure::Timeout(line)
    } else {
        Failure::Error(line)
    }
}

/// `--timeout-ms`: a whole number of milliseconds, at least 1.
fn timeout_ms(text: &str) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(0) => Err("0 ms leaves the monitor no time to answer; give at least 1".to_owned()),
        Ok(ms) => Ok(ms),
        Err(_) => Err("must be a whole number of milliseconds, at least 1".to_owned()),
    }
}
