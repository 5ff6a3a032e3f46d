//! `nodeipc`: the demo, inspection and clean-up of `/dev/shm`, and the
//! shared-memory and semaphore tools other programs drive.
//!
//! The command line is a contract (see DESIGN.md): exit 0 on success, 1 with
//! one line on stderr on failure, 2 for a usage error, 3 when `sem wait`
//! times out, 128 + the signal's number when `demo` is stopped by SIGINT or
//! SIGTERM. Standard output goes through [`output`], so a reader that leaves
//! early ends the output quietly, never the work.
#![deny(unsafe_op_in_unsafe_fn)]

// First: its `outln!` is used by every module below.
#[macro_use]
mod output;

mod bench_cmd;
mod clean;
mod demo;
mod launch;
mod limits;
mod monitor_cmd;
mod sem_cmd;
mod shm_cmd;

use std::io::Write;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

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
    /// Run N ranks of a command, one rank monitor each; restart them all when one fails or hangs.
    Launch(launch::LaunchArgs),
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
    /// Exit 128 + the signal's number: stopped by SIGINT or SIGTERM, after
    /// undoing what the command made. The line says which signal.
    Signal(i32, String),
    /// Exit with this status (`launch`: the failing rank's), this line on
    /// stderr unless it is empty.
    Status(u8, String),
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
    let cli = match parse() {
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
        Command::Launch(args) => launch::run(args),
    };
    // The work is done (or undone) whatever became of standard output; its
    // error, if any, comes after the command's own.
    let result = result.and(output::finish());
    let (code, line) = match result {
        Ok(()) => return ExitCode::SUCCESS,
        Err(Failure::Error(line)) => (1, line),
        Err(Failure::Timeout(line)) => (3, line),
        Err(Failure::Signal(signal, line)) => ((128 + signal).clamp(129, 255) as u8, line),
        Err(Failure::Status(code, line)) => (code, line),
    };
    // Not eprintln!: it panics when standard error is a closed pipe. An
    // empty line: the command has said why already.
    if !line.is_empty() {
        let _ = writeln!(std::io::stderr(), "nodeipc: {line}");
    }
    ExitCode::from(code)
}

/// The command line, parsed with negative numbers taken as values: `--len -1`
/// is refused as a length out of range ("invalid value '-1' for '--len'"),
/// not as an unknown option.
fn parse() -> Result<Cli, clap::Error> {
    fn negatives_are_values(command: clap::Command) -> clap::Command {
        command
            .mut_args(|arg| {
                if arg.get_action().takes_values() {
                    arg.allow_negative_numbers(true)
                } else {
                    arg
                }
            })
            .mut_subcommands(negatives_are_values)
    }
    let mut command = negatives_are_values(Cli::command());
    let matches = command.try_get_matches_from_mut(std::env::args_os())?;
    Cli::from_arg_matches(&matches).map_err(|e| e.format(&mut command))
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
            let _ = writeln!(std::io::stderr(), "nodeipc: {first} (see --help)");
            ExitCode::from(2)
        }
    }
}
