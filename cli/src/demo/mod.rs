//! `nodeipc demo`: the main job, end to end, with nothing to set up.
//!
//! The coordinator creates one anonymous region (a sealed memfd) holding a
//! request and a response semaphore and buffer per worker, spawns N worker
//! processes (this same binary, `demo-worker`) and hands each the region's
//! descriptor over `SCM_RIGHTS` on a socket pair it inherited. Nothing ever
//! has a name, so nothing can be left behind, however the demo dies. It then
//! sends M requests: each is broadcast to every worker and answered by every
//! worker, and it prints round trips per second, latency percentiles and the
//! bytes moved.

mod layout;

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use clap::Args;
use nodeipc_sem::{Semaphore, ShmSemaphore};
use nodeipc_shm::Region;

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
    /// The inherited socket the region's descriptor arrives on.
    #[arg(long)]
    socket_fd: i32,
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
    let region = Region::anonymous(layout.size())?;
    // A worker must never be able to truncate the region under us (SIGBUS).
    region.seal_grow_shrink()?;
    layout.init(&region)?;

    let exe = std::env::current_exe()?;
    let mut workers = Workers(Vec::new());
    for rank in 0..args.workers {
        let (ours, theirs) = rustix::net::socketpair(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::STREAM,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )?;
        let mut command = Command::new(&exe);
        command
            .args([
                "demo-worker",
                "--socket-fd",
                &theirs.as_raw_fd().to_string(),
            ])
            .args([
                "--rank",
                &rank.to_string(),
                "--parent",
                &std::process::id().to_string(),
            ]);
        inherit(&mut command, theirs.as_raw_fd());
        workers.0.push(command.spawn()?);
        drop(theirs);
        nodeipc_fdpass::send_fds(&ours, b"r", &[region.as_fd()])?;
    }
    wait_until_attached(&region, &layout, &mut workers)?;

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
    print_summary(&args, elapsed, &mut latencies);
    Ok(())
}

/// Lets the child inherit one descriptor, under the same number; every other
/// descriptor of ours stays close-on-exec.
fn inherit(command: &mut Command, fd: RawFd) {
    let clear_cloexec = move || {
        // SAFETY: `fd` stays open in the parent until after the spawn.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty())?;
        Ok(())
    };
    // SAFETY: the hook runs between fork and exec and only calls fcntl, which
    // is async-signal-safe, on a descriptor the parent keeps open.
    unsafe { command.pre_exec(clear_cloexec) };
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
    // SAFETY: the coordinator passed this socket down for our sole use.
    let socket = unsafe { OwnedFd::from_raw_fd(args.socket_fd) };
    rustix::net::sockopt::set_socket_timeout(
        &socket,
        rustix::net::sockopt::Timeout::Recv,
        Some(STEP_TIMEOUT),
    )?;
    let mut tag = [0u8; 1];
    let mut fds = nodeipc_fdpass::recv_fds_exact(&socket, &mut tag, 1)?;
    let fd = fds
        .pop()
        .ok_or_else(|| Failure::Error("the coordinator sent no region".into()))?;
    let region = Region::from_fd(fd)?;
    if !region.is_size_sealed() {
        return Err(Failure::Error(
            "the region is not sealed against resizing".into(),
        ));
    }
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

fn print_summary(args: &DemoArgs, elapsed: Duration, latencies: &mut [Duration]) {
    latencies.sort_unstable();
    let percentile = |p: f64| {
        if latencies.is_empty() {
            Duration::ZERO
        } else {
            latencies[((latencies.len() - 1) as f64 * p).round() as usize]
        }
    };
    let bytes = args.requests * u64::from(args.workers) * u64::from(args.payload) * 2;
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
    println!("  named objects created: none (the region travelled as a memfd)");
}
