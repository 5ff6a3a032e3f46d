//! `nodeipc bench`: every layer beside its baselines, measured in one run.
//! Each row is printed as soon as it is measured and the progress goes to
//! stderr, so a run that fails late keeps everything it measured.

use std::cell::{Cell, RefCell};
use std::io::{IsTerminal, Write};

use clap::{Args, Subcommand};
use nodeipc_cli::bench::channel::open_loop::MAX_OPEN_LOOP_ITERS;
use nodeipc_cli::bench::suite::{self, Offered, Options, Report, Row};

use crate::limits::{fraction_in, u32_in, u64_in, usize_in};
use crate::{CmdResult, Failure};

/// The most iterations a batch may ask for: more is hours, and `iters`
/// feeds additions and multiplications in the suite.
const MAX_ITERS: u64 = 1_000_000_000;
/// `SCM_MAX_FD`: the most descriptors one message may carry.
const MAX_FDS: usize = 253;
/// The most processes a rank group or channel shape may spawn here.
const MAX_PROCESSES: u32 = 64;
/// The largest payload a channel shape may send (64 MiB).
const MAX_PAYLOAD: usize = 64 << 20;
/// The highest open-loop rate, in requests a second.
const MAX_RATE: u64 = 100_000_000;

#[derive(Args)]
pub(crate) struct BenchArgs {
    /// Shorter runs: the whole table in well under a minute.
    #[arg(long, global = true)]
    quick: bool,
    /// One JSON object per row instead of the table.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    only: Option<Only>,
}

#[derive(Subcommand)]
enum Only {
    /// Semaphore round trips and an oversubscribed ring.
    Sem,
    /// SCM_RIGHTS and pidfd_getfd against the bare calls.
    Fdpass {
        /// Descriptors per message, 1..=253 (default: 1 and 64, plus pidfd_getfd).
        #[arg(long, value_parser = usize_in(1, MAX_FDS))]
        fds: Option<usize>,
    },
    /// Barriers against pthread_barrier and a spin barrier.
    Barrier {
        /// Ranks, one process each, 2..=64 (default: 2 and 8).
        #[arg(long, value_parser = u32_in(2, MAX_PROCESSES))]
        ranks: Option<u32>,
        /// Barriers per batch, 1..=10^9.
        #[arg(long, value_parser = u64_in(1, MAX_ITERS))]
        iters: Option<u64>,
    },
    /// KittensBroker::sync() against the seed's usleep(1) barrier and the Rust barrier.
    Kittens,
    /// The execute channel against lock-step glibc semaphores and a Unix socket.
    Channel {
        /// Worker processes, 1..=64 (with --payload and --iters: one shape only).
        #[arg(long, value_parser = u32_in(1, MAX_PROCESSES))]
        workers: Option<u32>,
        /// Payload bytes per request, up to 64 MiB.
        #[arg(long, default_value_t = 64, value_parser = usize_in(0, MAX_PAYLOAD))]
        payload: usize,
        /// Round trips per batch, 1..=10^9.
        #[arg(long, default_value_t = 2_000, value_parser = u64_in(1, MAX_ITERS))]
        iters: u64,
        /// Requests kept in flight by the channel, 1..=64.
        #[arg(long, default_value_t = 1, value_parser = u32_in(1, nodeipc_channel::MAX_DEPTH))]
        depth: u32,
        /// With --workers, --payload and --iters: a send thread and a
        /// response thread at --depth (Rust and C++) against lock-step.
        #[arg(long, requires = "workers")]
        response_thread: bool,
        /// Only the loan row: a 1 MiB request built in the request frame
        /// (`send_with`) against one built privately and copied by `send`.
        #[arg(long, conflicts_with_all = ["workers", "response_thread"])]
        loan: bool,
        /// With --response-thread: open loop, this many requests a second
        /// offered on a fixed schedule; p50 and p99 latency from each
        /// request's due time (--iters a batch, at most 100000).
        #[arg(long, requires = "response_thread", conflicts_with = "load",
              value_parser = u64_in(1, MAX_RATE))]
        rate: Option<u64>,
        /// As --rate, at this fraction (0.01..=2) of lock-step's maximum
        /// rate, measured first in the same run (0.8: 80%).
        #[arg(long, requires = "response_thread", value_parser = fraction_in(0.01, 2.0))]
        load: Option<f64>,
    },
    /// Heartbeats: the shared-memory fast path against the socket.
    Monitor,
    /// The queue: a 64-byte round trip and a batched stream between two processes.
    Queue,
}

pub(crate) fn run(args: BenchArgs) -> CmdResult {
    if let Some(Only::Channel {
        payload,
        depth,
        iters,
        rate,
        load,
        ..
    }) = &args.only
    {
        crate::limits::check_ring(*payload as u64, *depth)?;
        if (rate.is_some() || load.is_some()) && *iters > MAX_OPEN_LOOP_ITERS {
            return Err(Failure::Usage(format!(
                "--iters {iters} with --rate or --load: an open-loop batch keeps every \
                 request's latency; at most {MAX_OPEN_LOOP_ITERS}"
            )));
        }
    }
    let stream = Stream {
        json: args.json,
        terminal: std::io::stderr().is_terminal(),
        rows: Cell::new(0),
        current: RefCell::new(String::new()),
    };
    if !args.json {
        crate::output::text(&suite::table_header());
    }
    let options = Options {
        quick: args.quick,
        report: Some(&stream),
    };
    // Each row is printed by `stream` as soon as it is measured: the rows
    // these return are printed already.
    let done = match args.only {
        None => suite::all(options),
        Some(Only::Sem) => suite::sem(options),
        Some(Only::Fdpass { fds }) => suite::fdpass(options, fds),
        Some(Only::Barrier { ranks, iters }) => suite::barrier(options, ranks, iters),
        Some(Only::Kittens) => suite::kittens(options),
        Some(Only::Channel { loan: true, .. }) => suite::channel_loan(options).map(|row| vec![row]),
        Some(Only::Channel {
            workers,
            payload,
            iters,
            depth,
            response_thread,
            loan: false,
            rate,
            load,
        }) => suite::channel(
            options,
            workers.map(|w| (w, payload, iters)),
            depth,
            response_thread,
            rate.map(Offered::Rate).or(load.map(Offered::Load)),
        ),
        Some(Only::Monitor) => suite::monitor(options),
        Some(Only::Queue) => suite::queue(options),
    };
    stream.end_progress();
    match done {
        Ok(_) => Ok(()),
        Err(error) => {
            let line = format!(
                "{}: {} ({} measured before it, printed above)",
                stream.current.borrow(),
                crate::errors::line(&error),
                rows(stream.rows.get())
            );
            if crate::errors::timed_out(&error) {
                Err(Failure::Timeout(line))
            } else {
                Err(Failure::Error(line))
            }
        }
    }
}

fn rows(count: usize) -> String {
    match count {
        1 => "1 row".to_owned(),
        n => format!("{n} rows"),
    }
}

/// Prints each row as soon as it is final (a table row, or a JSON line)
/// and the progress on stderr: on a terminal one line rewritten in place,
/// elsewhere (a log) a line a round.
struct Stream {
    json: bool,
    terminal: bool,
    /// Rows printed so far.
    rows: Cell<usize>,
    /// The row being measured, for the progress and an error.
    current: RefCell<String>,
}

impl Stream {
    /// Clears the rewritten progress line, if there is one.
    fn end_progress(&self) {
        if self.terminal {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
        }
    }
}

impl Report for Stream {
    fn round(&self, what: &str, round: usize, rounds: usize) {
        what.clone_into(&mut self.current.borrow_mut());
        let line = format!(
            "nodeipc bench: row {} ({what}): round {round} of {rounds}",
            self.rows.get() + 1
        );
        // Not eprintln!: it panics when standard error is a closed pipe.
        let _ = if self.terminal {
            write!(std::io::stderr(), "\r\x1b[K{line}")
        } else {
            writeln!(std::io::stderr(), "{line}")
        };
    }

    fn row(&self, row: &Row) {
        self.end_progress();
        self.rows.set(self.rows.get() + 1);
        if self.json {
            outln!("{}", row.to_json());
        } else {
            crate::output::text(&suite::table_row(row));
        }
    }
}
