//! `nodeipc monitor serve` and `nodeipc monitor status`: the rank monitor
//! from the shell (and what `SpawnOptions::program` runs).

use std::path::PathBuf;
use std::time::Duration;

use clap::Subcommand;
use nodeipc_monitor::{ControlClient, MonitorConfig};

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
        /// A JSON configuration file (see the nodeipc-monitor README);
        /// defaults when absent.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Print the status of the monitor serving SOCKET, as JSON on stdout.
    Status {
        /// The rank socket's path (its control socket is asked).
        #[arg(long)]
        socket: PathBuf,
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
                Some(file) => MonitorConfig::load(file)?,
                None => MonitorConfig::default(),
            };
            nodeipc_monitor::serve(socket, config)?;
            Ok(())
        }
        MonitorCommand::Status { socket, timeout_ms } => {
            let status = ControlClient::connect(socket, Duration::from_millis(timeout_ms))
                .and_then(|mut client| client.status())
                .map_err(failure)?;
            outln!("{}", status.to_json());
            Ok(())
        }
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
    if ran_out {
        Failure::Timeout(error.to_string())
    } else {
        Failure::Error(error.to_string())
    }
}

/// `--timeout-ms`: a whole number of milliseconds, at least 1.
fn timeout_ms(text: &str) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(0) => Err("0 ms leaves the monitor no time to answer; give at least 1".to_owned()),
        Ok(ms) => Ok(ms),
        Err(e) => Err(format!(
            "not a whole number of milliseconds from 1 to {}: {e}",
            u64::MAX
        )),
    }
}
