//! `nodeipc demo`: the main job, end to end, with nothing to set up.
//!
//! The coordinator creates one region holding a request and a response
//! semaphore and buffer per worker, spawns N worker processes (this same
//! binary, `demo-worker`), removes the region's name as soon as they have
//! attached, then sends M requests: each is broadcast to every worker and
//! answered by every worker. It prints round trips per second, latency
//! percentiles and bytes moved, and leaves nothing behind.

mod layout;

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use clap::Args;
use nodeipc_sem::{Semaphore, ShmSemaphore};
use nodeipc_shm::{OpenOptions, Region};

use crate::{CmdResult, Failure};
use layout::Layout;

/// How long any one step may wait on a peer before the demo gives up.
const STEP_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Args)]
pub(crate) struct DemoArgs {
    /// Worker processes to spawn.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=256))]
    workers: u32,
    /// Requests to send, each to every worker.
    #[arg(long, default_value_t = 10_000)]
    requests: u64,
    /// Bytes in each request and response.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(8..=(64 << 20)))]
    payload: u32,
}

#[derive(Args)]
pub(crate) struct WorkerArgs {
    /// The region to attach to.
    #[arg(long)]
    region: String,
    /// This worker's rank.
    #[arg(long)]
    rank: u32,
    /// The coordinator's pid: the worker exits when it is gone.
    #[arg(long)]
    parent: i32,
}

/// Worker processes that are killed and reaped however the demo ends.
struct Workers(Vec<Child>);

impl Workers {
    /// The rank of a worker that has exited, if any.
    fn first_dead(&mut self) -> Option<usize> {
        self.0
            .iter_mut()
            .position(|c| !matches!(c.try_wait(), Ok(None)))
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub(crate) fn run(args: DemoArgs) -> CmdResult {
    let layout = Layout::new(args.workers, args.payload);
    let name = format!("/nodeipc-demo-{}-{:x}", std::process::id(), nanos());
    let region = Region::create(&name, layout.size())?;
    layout.init(&region)?;

    let exe = std::env::current_exe()?;
    let mut workers = Workers(Vec::new());
    for rank in 0..args.workers {
        let child = Command::new(&exe)
            .args([
                "demo-worker",
                "--region",
                &name,
                "--rank",
                &rank.to_string(),
            ])
            .args(["--parent", &std::process::id().to_string()])
            .spawn()?;
        workers.0.push(child);
    }
    wait_until_attached(&region, &layout, &mut workers)?;
    // Every worker has mapped it: from here on a crash leaves nothing behind.
    region.unlink_now()?;

    let mut request = vec![0u8; args.payload as usize];
    let mut response = vec![0u8; args.payload as usize];
    let mut latencies = Vec::with_capacity(args.requests as usize);
    let started = Instant::now();
    for sequence in 0..args.requests {
        let sent = Instant::now();
        fill_request(&mut request, sequence);
        for rank in 0..args.workers {
            region.write_at(layout.request_buf(rank), &request)?;
            layout.request_sem(&region, rank)?.post()?;
        }
        for rank in 0..args.workers {
            wait_for_worker(layout.response_sem(&region, rank)?, rank, &mut workers)?;
            region.read_at(layout.response_buf(rank), &mut response)?;
            check_response(&request, &response, rank, sequence)?;
        }
        latencies.push(sent.elapsed());
    }
    let elapsed = started.elapsed();

    layout.stop(&region)?;
    for rank in 0..args.workers {
        layout.request_sem(&region, rank)?.post()?;
    }
    for (rank, child) in workers.0.iter_mut().enumerate() {
        let status = child.wait()?;
        if !status.success() {
            return Err(Failure::Error(format!(
                "worker {rank} exited with {status}"
            )));
        }
    }
    print_summary(&args, elapsed, &mut latencies, &name);
    Ok(())
}

fn wait_until_attached(region: &Region, layout: &Layout, workers: &mut Workers) -> CmdResult {
    let deadline = Instant::now() + STEP_TIMEOUT;
    while layout.attached(region)? < workers.0.len() as u32 {
        if let Some(rank) = workers.first_dead() {
            return Err(Failure::Error(format!(
                "worker {rank} exited before attaching"
            )));
        }
        if Instant::now() >= deadline {
            return Err(Failure::Error(format!(
                "workers did not attach within {STEP_TIMEOUT:?}"
            )));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

/// Waits for a worker's answer in short slices, checking between them that
/// the worker is still alive: a dead worker is reported, never waited on forever.
fn wait_for_worker(sem: &ShmSemaphore, rank: u32, workers: &mut Workers) -> CmdResult {
    let deadline = Instant::now() + STEP_TIMEOUT;
    loop {
        match sem.wait_timeout(Duration::from_millis(100)) {
            Ok(()) => return Ok(()),
            Err(e) if e.is_timeout() => {
                if matches!(workers.0[rank as usize].try_wait(), Ok(Some(_)) | Err(_)) {
                    return Err(Failure::Error(format!("worker {rank} died")));
                }
                if Instant::now() >= deadline {
                    return Err(Failure::Timeout(format!(
                        "worker {rank} did not answer within {STEP_TIMEOUT:?}"
                    )));
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
}

fn fill_request(request: &mut [u8], sequence: u64) {
    request[..8].copy_from_slice(&sequence.to_le_bytes());
    request[8..].fill(sequence as u8);
}

/// A worker answers with the request's bytes, each plus its rank.
fn answer(request: &[u8], response: &mut [u8], rank: u32) {
    for (out, byte) in response.iter_mut().zip(request) {
        *out = byte.wrapping_add(rank as u8);
    }
}

fn check_response(request: &[u8], response: &[u8], rank: u32, sequence: u64) -> CmdResult {
    let mut expected = vec![0u8; request.len()];
    answer(request, &mut expected, rank);
    if response != expected {
        return Err(Failure::Error(format!(
            "worker {rank} answered request {sequence} with the wrong bytes"
        )));
    }
    Ok(())
}

pub(crate) fn worker(args: WorkerArgs) -> CmdResult {
    // Die with the coordinator; if it is already gone, stop now.
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
    let parent_alive =
        || rustix::process::getppid().map(|p| p.as_raw_nonzero().get()) == Some(args.parent);
    if !parent_alive() {
        return Err(Failure::Error(
            "coordinator exited before the worker started".into(),
        ));
    }
    let region = Region::open(
        &args.region,
        OpenOptions::wait(Layout::HEADER, STEP_TIMEOUT),
    )?;
    let layout = Layout::read(&region)?;
    if args.rank >= layout.workers() {
        return Err(Failure::Error(format!(
            "rank {} is out of range for {} workers",
            args.rank,
            layout.workers()
        )));
    }
    layout.attach(&region)?;
    let mut request = vec![0u8; layout.payload()];
    let mut response = vec![0u8; layout.payload()];
    loop {
        let sem = layout.request_sem(&region, args.rank)?;
        loop {
            match sem.wait_timeout(Duration::from_millis(200)) {
                Ok(()) => break,
                Err(e) if e.is_timeout() && parent_alive() => continue,
                Err(e) if e.is_timeout() => return Err(Failure::Error("coordinator died".into())),
                Err(e) => return Err(e.into()),
            }
        }
        if layout.stopping(&region)? {
            return Ok(());
        }
        region.read_at(layout.request_buf(args.rank), &mut request)?;
        answer(&request, &mut response, args.rank);
        region.write_at(layout.response_buf(args.rank), &response)?;
        layout.response_sem(&region, args.rank)?.post()?;
    }
}

fn print_summary(args: &DemoArgs, elapsed: Duration, latencies: &mut [Duration], name: &str) {
    latencies.sort_unstable();
    let percentile = |p: f64| {
        if latencies.is_empty() {
            Duration::ZERO
        } else {
            latencies[((latencies.len() - 1) as f64 * p).round() as usize]
        }
    };
    let bytes = args.requests * u64::from(args.workers) * u64::from(args.payload) * 2;
    let left = nodeipc_shm::list(name).map(|l| l.len()).unwrap_or(0);
    println!(
        "nodeipc demo: {} workers, {} requests of {} bytes",
        args.workers, args.requests, args.payload
    );
    println!(
        "  round trips/s  {:.0}",
        args.requests as f64 / elapsed.as_secs_f64().max(f64::MIN_POSITIVE)
    );
    println!(
        "  latency p50    {:.2} us",
        percentile(0.50).as_secs_f64() * 1e6
    );
    println!(
        "  latency p99    {:.2} us",
        percentile(0.99).as_secs_f64() * 1e6
    );
    println!(
        "  bytes moved    {bytes} ({:.1} MiB)",
        bytes as f64 / (1 << 20) as f64
    );
    println!(
        "  left in /dev/shm: {}",
        if left == 0 { "nothing" } else { "LEFTOVERS" }
    );
}

fn nanos() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0)
}
