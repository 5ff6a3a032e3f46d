//! `nodeipc monitor serve` and `nodeipc monitor status`: the rank monitor
//! from the shell (and what `SpawnOptions::program` runs).

use std::path::PathBuf;
use std::time::Duration;

use clap::Subcommand;
use nodeipc_monitor::{ControlClient, MonitorConfig};

use crate::CmdResult;

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
        /// How long to wait for the monitor to answer.
        #[arg(long, default_value_t = 2000)]
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
            let status =
                ControlClient::connect(socket, Duration::from_millis(timeout_ms))?.status()?;
            outln!("{}", status.to_json());
            Ok(())
        }
    }
}
