//! `nodeipc bench`: every layer beside its baselines, measured in one run.

use clap::{Args, Subcommand};
use nodeipc_benches::suite::{self, Options, Row};

use crate::CmdResult;

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
        /// Descriptors per message (default: 1 and 64, plus pidfd_getfd).
        #[arg(long)]
        fds: Option<usize>,
    },
    /// Barriers against pthread_barrier and a spin barrier.
    Barrier {
        /// Ranks, one process each (default: 2 and 8).
        #[arg(long)]
        ranks: Option<u32>,
        /// Barriers per batch.
        #[arg(long)]
        iters: Option<u64>,
    },
    /// The execute channel against lock-step glibc semaphores and a Unix socket.
    Channel {
        /// Worker processes (with --payload and --iters: one shape only).
        #[arg(long)]
        workers: Option<u32>,
        /// Payload bytes per request.
        #[arg(long, default_value_t = 64)]
        payload: usize,
        /// Round trips per batch.
        #[arg(long, default_value_t = 2_000)]
        iters: u64,
        /// Requests kept in flight by the channel.
        #[arg(long, default_value_t = 1)]
        depth: u32,
    },
    /// Heartbeats: the shared-memory fast path against the socket.
    Monitor,
}

pub(crate) fn run(args: BenchArgs) -> CmdResult {
    let options = Options { quick: args.quick };
    let rows: Vec<Row> = match args.only {
        None => suite::all(options)?,
        Some(Only::Sem) => suite::sem(options)?,
        Some(Only::Fdpass { fds }) => suite::fdpass(options, fds)?,
        Some(Only::Barrier { ranks, iters }) => suite::barrier(options, ranks, iters)?,
        Some(Only::Channel {
            workers,
            payload,
            iters,
            depth,
        }) => suite::channel(options, workers.map(|w| (w, payload, iters)), depth)?,
        Some(Only::Monitor) => suite::monitor(options)?,
    };
    if args.json {
        for row in &rows {
            println!("{}", row.to_json());
        }
    } else {
        print!("{}", suite::table(&rows));
    }
    Ok(())
}
