//! Agave's scheduler session on nodeipc, for a newcomer, on Agave's own
//! message types: a server (the validator) with 4 execution worker
//! processes and an external scheduler process that logs on through
//! `nodeipc-handshake` and receives the block pool, the TPU → scheduler
//! queue, the progress queue, a queue pair per worker and its pool handle
//! ids, and 2 check worker processes on two MPMC rings. Transactions
//! (pool blocks referenced from `TpuToPackMessage`s, sent in batches whose
//! arrays live in pool blocks, read in place, every byte checked) flow
//! TPU → scheduler → check workers → scheduler → workers → scheduler.
//!
//! Prints messages per second with the pipeline full, then the latency of
//! one transaction at a time (TPU → scheduler → worker → the server's
//! report queue), and the scheduler's summary (its scheduler → worker →
//! scheduler round trips, mostly queueing under full load).
//!
//! ```text
//! cargo run --release -p nodeipc-integration-tests --example scheduler_session [COUNT]
//! ```
//!
//! COUNT transactions (default 1 000 000) for throughput, and COUNT / 50
//! (at most 20 000) one at a time for latency.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use nodeipc_integration_tests::scheduler_session::{
    Ledger, SessionServer, Setup, TpuProgress, run_checker, run_scheduler, run_worker,
};

const WORKERS: u32 = 4;
const HANDLES: u32 = 2;
const CHECKERS: u32 = 2;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // The peers are this same program, run again.
    match args.first().map(String::as_str) {
        Some("worker") => return run_worker(Path::new(&args[1]), args[2].parse()?),
        Some("checker") => return run_checker(Path::new(&args[1]), args[2].parse()?),
        Some("scheduler") => {
            return run_scheduler(Path::new(&args[1]), args[2].parse()?, args[3].parse()?, 0);
        }
        _ => {}
    }
    let count: u64 = match args.first() {
        Some(n) => n.parse().map_err(|e| format!("COUNT {n:?}: {e}"))?,
        None => 1_000_000,
    };
    let dir = PrivateDir::new()?;
    let result = run(&dir.0, count);
    drop(dir);
    result
}

fn run(dir: &Path, count: u64) -> Result<()> {
    let mut server = SessionServer::start(
        &dir.join("session.sock"),
        Setup {
            workers: WORKERS,
            scheduler_handles: HANDLES,
            checkers: CHECKERS,
        },
        512,
    )?;
    let socket = server.socket().to_str().ok_or("socket path")?.to_owned();
    let mut peers = Vec::new();
    let mut sessions = Vec::new();
    for w in 0..WORKERS {
        let mut worker = Peer::spawn(&["worker".into(), socket.clone(), w.to_string()])?;
        worker.wait_line("WORKER-READY")?;
        sessions.push(server.accept(Duration::from_secs(5))?);
        peers.push(worker);
    }
    for c in 0..CHECKERS {
        let mut checker = Peer::spawn(&["checker".into(), socket.clone(), c.to_string()])?;
        checker.wait_line("CHECKER-READY")?;
        sessions.push(server.accept(Duration::from_secs(5))?);
        peers.push(checker);
    }
    let mut scheduler = Peer::spawn(&[
        "scheduler".into(),
        socket,
        WORKERS.to_string(),
        HANDLES.to_string(),
    ])?;
    scheduler.wait_line("SCHEDULER-READY")?;
    sessions.push(server.accept(Duration::from_secs(5))?);
    println!(
        "session: {WORKERS} workers, {CHECKERS} check workers and a scheduler logged on \
         ({} descriptors to the scheduler)",
        5 + 2 * WORKERS
    );

    let (mut tpu, mut progress, mut reports, mut handle) = server.tpu_ends()?;
    let watch = Arc::new(TpuProgress::default());
    let mut stream = |count: u64, window: u64| -> Result<Ledger> {
        let mut ledger = Ledger::new(count);
        ledger.window = window;
        ledger.run(
            &mut tpu,
            &mut progress,
            &mut reports,
            &mut handle,
            &watch,
            Duration::from_secs(600),
        )?;
        if ledger.tally.corrupt > 0 {
            return Err(format!("{} transactions with a wrong byte", ledger.tally.corrupt).into());
        }
        Ok(ledger)
    };
    let full = stream(count, nodeipc_integration_tests::scheduler_session::WINDOW)?;
    println!(
        "throughput: {count} transactions in {:.3} s: {:.0} transactions/s \
         (each a pool block, 64-1144 B, read in place, every byte checked)",
        full.elapsed.as_secs_f64(),
        count as f64 / full.elapsed.as_secs_f64()
    );
    let one_by_one = (count / 50).clamp(1, 20_000);
    let mut single = stream(one_by_one, 1)?;
    single.latency_ns.sort_unstable();
    let at = |q: f64| single.latency_ns[((single.latency_ns.len() - 1) as f64 * q) as usize];
    println!(
        "latency, one at a time ({one_by_one}): TPU -> scheduler -> worker -> server \
         median {:.1} us, p99 {:.1} us",
        at(0.5) as f64 / 1e3,
        at(0.99) as f64 / 1e3
    );

    drop(sessions);
    let summary = scheduler.wait_line("SCHEDULER-DONE")?;
    // Its round trips mix both phases: mostly queueing under full load.
    println!("scheduler: {summary}");
    for (i, peer) in peers.iter_mut().enumerate() {
        // The workers first, then the check workers.
        peer.wait_line(if i < WORKERS as usize {
            "WORKER-DONE"
        } else {
            "CHECKER-DONE"
        })?;
    }
    // Gone, not only done: a peer still exiting holds its pool handle, and
    // the count below takes every handle over by id.
    for peer in peers.iter_mut().chain([&mut scheduler]) {
        peer.wait_exit(Duration::from_secs(30))?;
    }
    let held: usize = server
        .blocks_left(&mut handle)?
        .iter()
        .map(|(_, n)| n)
        .sum();
    println!(
        "pool: {held} blocks held after the session (huge pages: {})",
        server.huge_pages()
    );
    if held != 0 {
        return Err(format!("{held} blocks still held").into());
    }
    Ok(())
}

/// A peer process (this program, run again) and its output lines.
struct Peer {
    child: std::process::Child,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

impl Peer {
    fn spawn(args: &[String]) -> Result<Peer> {
        let mut command = Command::new(std::env::current_exe()?);
        command.args(args).stdout(Stdio::piped());
        // SAFETY: between fork and exec the closure only calls prctl, which
        // is async-signal-safe and touches no memory of the parent.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut command, || {
                rustix::process::set_parent_process_death_signal(Some(
                    rustix::process::Signal::KILL,
                ))
                .map_err(std::io::Error::from)
            });
        }
        let mut child = command.spawn()?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        Ok(Peer {
            child,
            lines: BufReader::new(stdout).lines(),
        })
    }

    /// Reads lines until one starts with `prefix` (the peer ends its own
    /// output when it exits, so this is bounded by the peer's life).
    fn wait_line(&mut self, prefix: &str) -> Result<String> {
        for line in &mut self.lines {
            let line = line?;
            if line.starts_with(prefix) {
                return Ok(line);
            }
            println!("  peer: {line}");
        }
        Err(format!("a peer exited before saying {prefix}").into())
    }

    /// Waits up to `limit` for the peer to exit, successfully.
    fn wait_exit(&mut self, limit: Duration) -> Result<()> {
        let start = std::time::Instant::now();
        loop {
            if let Some(status) = self.child.try_wait()? {
                return if status.success() {
                    Ok(())
                } else {
                    Err(format!("peer {} exited with {status}", self.child.id()).into())
                };
            }
            if start.elapsed() >= limit {
                return Err(
                    format!("peer {} still running after {limit:?}", self.child.id()).into(),
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        // Normally it has exited (its session ended); never leave one behind.
        if matches!(self.child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(200));
            if matches!(self.child.try_wait(), Ok(None)) {
                let _ = self.child.kill();
            }
        }
        let _ = self.child.wait();
    }
}

/// `/tmp/nodeipc-example-<pid>`, 0700, removed on drop.
struct PrivateDir(PathBuf);

impl PrivateDir {
    fn new() -> Result<PrivateDir> {
        let path = PathBuf::from(format!("/tmp/nodeipc-example-{}", std::process::id()));
        std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700)
            .create(&path)?;
        Ok(PrivateDir(path))
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
