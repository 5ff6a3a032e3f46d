//! `nodeipc`: the demo, inspection and clean-up of `/dev/shm`, and the
//! shared-memory and semaphore tools other programs drive.
//!
//! The command line is a contract (see DESIGN.md): exit 0 on success, 1 with
//! one line on stderr on failure, 2 for a usage error, 3 when `sem wait`
//! times out, 128 + the signal's number when `demo` or `launch` is stopped
//! by a terminating signal (SIGINT, SIGTERM, SIGHUP, ...: see
//! `nodeipc_fdpass::terminating_signals`). Standard output goes through
//! [`output`], so a reader that leaves early ends the output quietly, never
//! the work.
#![deny(unsafe_op_in_unsafe_fn)]

// First: its `outln!` is used by every module below.
#[macro_use]
mod output;

mod bench_cmd;
mod clean;
mod demo;
mod docs_cmd;
mod errors;
mod human;
mod launch;
mod limits;
mod monitor_cmd;
mod monitor_view;
mod sem_cmd;
mod shm_cmd;

use std::io::Write;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

/// The exit statuses, in `--help` and the manual page.
const EXIT_STATUS: &str = "\
Exit status:
  0      success
  1      failure: one line on stderr says what went wrong
  2      usage error: one line on stderr, with clap's suggestion if it has one
  3      a bounded wait timed out (sem wait, monitor status, a peer that did not answer)
  128+N  demo or launch stopped by signal N (130 for SIGINT, 143 for SIGTERM, 129 for
         SIGHUP, ...), after cleaning up";

/// Building blocks for processes on one Linux node that must work as one.
#[derive(Parser)]
#[command(name = "nodeipc", version, about, after_help = EXIT_STATUS)]
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
    /// Serve a rank monitor on a socket, or print one's status.
    #[command(subcommand)]
    Monitor(monitor_cmd::MonitorCommand),
    /// Run N ranks of a command, one rank monitor each; restart them all when one fails or hangs.
    Launch(Box<launch::LaunchArgs>),
    /// Print a shell completion script (bash, zsh or fish) on stdout.
    Completions(docs_cmd::CompletionsArgs),
    /// Print the manual page (roff) on stdout, or write every page into a directory.
    Man(docs_cmd::ManArgs),
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
    /// Exit 2: arguments clap accepted one by one that do not go together.
    Usage(String),
    /// Exit 128 + the signal's number: stopped by a terminating signal, after
    /// undoing what the command made. The line says which signal.
    Signal(i32, String),
    /// Exit with this status (`launch`: the failing rank's), this line on
    /// stderr unless it is empty.
    Status(u8, String),
}

impl<E: std::error::Error + 'static> From<E> for Failure {
    /// A bounded wait that ran out is exit 3 (see [`errors`]).
    fn from(error: E) -> Self {
        if errors::timed_out(&error) {
            Failure::Timeout(errors::line(&error))
        } else {
            Failure::Error(errors::line(&error))
        }
    }
}

pub(crate) type CmdResult = Result<(), Failure>;

fn main() -> ExitCode {
    // The monitor logs through the `log` facade: its lines go to stderr,
    // one per record, as `nodeipc-monitor[PID] info: …`.
    nodeipc_monitor_host::StderrLogger::install();
    // Monitors (the demo's, the launcher's, `bench`'s) and benchmark peers
    // are this binary, spawned again.
    nodeipc_monitor_host::run_if_server();
    nodeipc_cli::bench::run_if_peer();
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
        Command::Launch(args) => launch::run(*args),
        Command::Completions(args) => docs_cmd::completions(args),
        Command::Man(args) => docs_cmd::man(args),
    };
    // The work is done (or undone) whatever became of standard output; its
    // error, if any, comes after the command's own.
    let result = result.and(output::finish());
    let (code, line) = match result {
        Ok(()) => return ExitCode::SUCCESS,
        Err(Failure::Error(line)) => (1, line),
        Err(Failure::Timeout(line)) => (3, line),
        Err(Failure::Usage(line)) => (2, format!("{line} (see --help)")),
        Err(Failure::Signal(signal, line)) => ((128 + signal).clamp(129, 255) as u8, line),
        Err(Failure::Status(code, line)) => (code, line),
    };
    // Not eprintln!: it panics when standard error is a closed pipe. An
    // empty line: the command has said why already. Escaped: the line may
    // carry what a peer, a monitor or etcd said, and it stays one line.
    if !line.is_empty() {
        let _ = writeln!(
            std::io::stderr(),
            "nodeipc: {}",
            nodeipc_text::Printable(&line)
        );
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
    let raw: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let matches = command.try_get_matches_from_mut(&raw)?;
    let mut cli = Cli::from_arg_matches(&matches).map_err(|e| e.format(&mut command))?;
    if let Command::Launch(args) = &mut cli.command {
        launch::mark_after_dashes(args, &raw);
    }
    Ok(cli)
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
            let mut lines = text.lines();
            let mut first = lines
                .next()
                .unwrap_or("bad arguments")
                .trim_start_matches("error: ")
                .to_owned();
            // "the following required arguments were not provided:" names
            // them on the lines below it.
            if first.ends_with(':') {
                let named: Vec<&str> = lines
                    .take_while(|line| line.starts_with(' '))
                    .map(str::trim)
                    .collect();
                first = format!("{first} {}", named.join(", "));
            }
            // clap's suggestions ("a similar subcommand exists: 'ls'") are
            // its `tip:` lines: kept, on the same line.
            let tips: String = text
                .lines()
                .filter_map(|line| line.trim().strip_prefix("tip: "))
                .map(|tip| format!("; {tip}"))
                .collect();
            let _ = writeln!(
                std::io::stderr(),
                "nodeipc: {} (see --help)",
                nodeipc_text::Printable(&format!("{first}{tips}"))
            );
            ExitCode::from(2)
        }
    }
}
