//! `nodeipc`: the demo, inspection and clean-up of `/dev/shm`, and the
//! shared-memory and semaphore tools other programs drive.
//!
//! The command line is a contract (see DESIGN.md): exit 0 on success, 1 with
//! one line on stderr on failure, 3 when `sem wait` times out.
#![deny(unsafe_op_in_unsafe_fn)]

mod bench_cmd;
mod clean;
mod demo;
mod monitor_cmd;
mod sem_cmd;
mod shm_cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Building blocks for processes on one Linux node that must work as one.
#[derive(Parser)]
#[command(name = "nodeipc", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the main job: spawn worker processes and drive requests through shared memory.
    Demo(demo::DemoArgs),
    /// Measure every layer beside its baselines, in one run.
    Bench(bench_cmd::BenchArgs),
    /// List shared-memory objects and semaphores under a prefix.
    Ls(clean::LsArgs),
    /// Remove leftovers that no live process uses.
    Clean(clean::CleanArgs),
    /// Create, write, read and remove shared-memory regions.
    #[command(subcommand)]
    Shm(shm_cmd::ShmCommand),
    /// Create, post, wait on and remove named semaphores.
    #[command(subcommand)]
    Sem(sem_cmd::SemCommand),
    /// Serve a rank monitor on a socket, or print one's status as JSON.
    #[command(subcommand)]
    Monitor(monitor_cmd::MonitorCommand),
    /// A demo worker (spawned by `nodeipc demo`, not for people).
    #[command(hide = true, name = "demo-worker")]
    DemoWorker(demo::WorkerArgs),
}

/// How a command ended when it did not succeed.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Exit 1 with this line on stderr.
    Error(String),
    /// Exit 3: a bounded wait ran out.
    Timeout(String),
}

impl<E: std::error::Error> From<E> for Failure {
    fn from(error: E) -> Self {
        Failure::Error(error.to_string())
    }
}

pub(crate) type CmdResult = Result<(), Failure>;

fn main() -> ExitCode {
    // The monitor logs through the `log` facade: its lines go to stderr,
    // one per record, as `nodeipc-monitor[PID] info: …`.
    nodeipc_monitor::StderrLogger::install();
    // Benchmark peers and monitors are this binary, spawned again.
    nodeipc_benches::run_if_peer();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    let result = match cli.command {
        Command::Demo(args) => demo::run(args),
        Command::Bench(args) => bench_cmd::run(args),
        Command::DemoWorker(args) => demo::worker(args),
        Command::Ls(args) => clean::ls(args),
        Command::Clean(args) => clean::clean(args),
        Command::Shm(cmd) => shm_cmd::run(cmd),
        Command::Sem(cmd) => sem_cmd::run(cmd),
        Command::Monitor(cmd) => monitor_cmd::run(cmd),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Error(line)) => {
            eprintln!("nodeipc: {line}");
            ExitCode::from(1)
        }
        Err(Failure::Timeout(line)) => {
            eprintln!("nodeipc: {line}");
            ExitCode::from(3)
        }
    }
}

/// Help and version go out as clap writes them; a usage error becomes one
/// line on stderr (what was wrong, then where to look) and exit code 2, like
/// every other failure of this command.
fn usage_error(error: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match error.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => error.exit(),
        _ => {
            let text = error.to_string();
            let first = text
                .lines()
                .next()
                .unwrap_or("bad arguments")
                .trim_start_matches("error: ");
            eprintln!("nodeipc: {first} (see --help)");
            ExitCode::from(2)
        }
    }
}
