//! A worker of the soak test (`tests/soak.rs`): logs on through the
//! handshake, serves `EVERY` requests, leaves its rank and logs on again,
//! until the coordinator closes the channel.
//!
//! `soak_worker SOCKET RANK EVERY`
//!
//! After each logon (the previous session dropped) it prints
//! `stats STINT FDS MAPPED RSS_KB`: its descriptors, its mappings of
//! shared memory and its resident memory. The last line is `served N` or
//! `error VARIANT: MESSAGE` (exit code 1).

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use nodeipc_channel::{Error, Worker, connect, worker_logon};
use nodeipc_proto::execute::{ExecuteResponse, ForwardResponse, execute_request, execute_response};

const TIMEOUT: Duration = Duration::from_secs(30);

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [socket, rank, every] = args.as_slice() else {
        eprintln!("usage: soak_worker SOCKET RANK EVERY");
        return ExitCode::from(2);
    };
    let rank: u32 = rank.parse().expect("rank");
    let every: u64 = every.parse().expect("every");
    match serve(socket, rank, every) {
        Ok(served) => {
            println!("served {served}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            let debug = format!("{e:?}");
            println!(
                "error {}: {e}",
                debug.split([' ', '{']).next().unwrap_or("?")
            );
            ExitCode::FAILURE
        }
    }
}

fn serve(socket: &str, rank: u32, every: u64) -> Result<u64, Error> {
    let mut served = 0u64;
    let mut response = ExecuteResponse::default();
    let mut request = Default::default();
    for stint in 0u64.. {
        let session = connect(socket, &worker_logon(rank), TIMEOUT)?;
        let mut worker: Worker = session.into_worker(rank, TIMEOUT)?;
        let (fds, mapped, rss) = usage();
        println!("stats {stint} {fds} {mapped} {rss}");
        let _ = std::io::stdout().flush();
        for _ in 0..every {
            match worker.recv_into(&mut request) {
                Ok(()) => {}
                Err(Error::Closed { .. }) => return Ok(served),
                Err(e) => return Err(e),
            }
            let output = match &request.payload {
                Some(execute_request::Payload::Forward(f)) => f.input.clone(),
                _ => Default::default(),
            };
            response.sequence = request.sequence;
            response.msg_type = request.execute_type;
            response.result = Some(execute_response::Result::Forward(ForwardResponse {
                output,
            }));
            worker.respond(&response)?;
            served += 1;
        }
        // Leave the rank; the next logon takes it up where this one stopped.
        drop(worker);
    }
    Ok(served)
}

/// Descriptors, mappings of shared memory (memfds or `/dev/shm`), and
/// resident KiB of this process.
pub fn usage() -> (usize, usize, u64) {
    let fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count());
    let mapped = std::fs::read_to_string("/proc/self/maps")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("/memfd:") || l.contains("/dev/shm/"))
        .count();
    let rss = std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    (fds, mapped, rss)
}
