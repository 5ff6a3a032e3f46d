//! A channel peer for the channel tests: `worker ROLE ARGS…`. Prints one
//! line on stdout — `ok` or the error's variant and message — and exits 0
//! on success, 2 on a channel error.

use std::process::ExitCode;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use nodeipc_channel::{All, Channel, ChannelBuilder, Direction, Error, Role, SemKind, Worker};
use nodeipc_proto::execute::{
    ExecuteRequest, ExecuteResponse, ExecuteType, ForwardResponse, execute_request,
    execute_response,
};
use nodeipc_sem::{NamedSemaphore, Semaphore};
use nodeipc_shm::{OpenOptions, Region};

const TIMEOUT: Duration = Duration::from_secs(20);

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match run(&args) {
        Ok(()) => {
            println!("ok");
            ExitCode::SUCCESS
        }
        Err(e) => {
            let variant = format!("{e:?}");
            println!(
                "{}: {e}",
                variant.split([' ', '{', '(']).next().unwrap_or("?")
            );
            ExitCode::from(2)
        }
    }
}

fn config(name: &str, workers: &str, sems: &str, depth: &str) -> ChannelBuilder {
    Channel::builder(name)
        .workers(workers.parse().unwrap())
        .sems(if sems == "named" {
            SemKind::Named
        } else {
            SemKind::InRegion
        })
        .depth(depth.parse().unwrap())
        .request_capacity(8192)
        .timeout(TIMEOUT)
}

/// What every honest worker answers: the request's type and sequence, and
/// the payload's length and first byte as output.
pub fn answer(request: &ExecuteRequest, rank: u32) -> ExecuteResponse {
    let (len, first) = match &request.payload {
        Some(execute_request::Payload::Forward(f)) => {
            (f.input.len(), f.input.first().copied().unwrap_or(0))
        }
        _ => (0, 0),
    };
    let mut output = (len as u32).to_le_bytes().to_vec();
    output.extend([first, rank as u8]);
    ExecuteResponse {
        msg_type: request.execute_type,
        sequence: request.sequence,
        result: Some(execute_response::Result::Forward(ForwardResponse {
            output: output.into(),
        })),
        ..Default::default()
    }
}

fn serve(worker: &mut Worker, count: u64) -> Result<(), Error> {
    for expected in 0..count {
        let request = worker.recv()?;
        assert_eq!(
            request.sequence,
            expected,
            "worker {} got request {} out of order",
            worker.rank(),
            request.sequence
        );
        if request.execute_type == ExecuteType::ModelInit as i32 {
            worker.respond_init(&answer(&request, worker.rank()))?;
        } else {
            worker.respond(&answer(&request, worker.rank()))?;
        }
    }
    Ok(())
}

fn run(args: &[&str]) -> Result<(), Error> {
    match args {
        // Serves COUNT requests, then waits for the channel to close.
        ["serve", name, workers, sems, depth, rank, count] => {
            let mut worker = config(name, workers, sems, depth).join(rank.parse().unwrap())?;
            serve(&mut worker, count.parse().unwrap())?;
            match worker.recv() {
                Err(Error::Closed { .. }) => Ok(()),
                Err(e) => Err(e),
                Ok(extra) => panic!("a request beyond the count: {extra:?}"),
            }
        }
        // Logs on through the handshake at PATH, then serves COUNT requests.
        ["handshake", path, rank, count] => {
            let rank: u32 = rank.parse().unwrap();
            let session =
                nodeipc_channel::connect(path, &nodeipc_channel::worker_logon(rank), TIMEOUT)?;
            let mut worker: Worker = session.into_worker(rank, TIMEOUT)?;
            serve(&mut worker, count.parse().unwrap())
        }
        // Receives one request, then hangs without answering (to be killed).
        ["hang", name, workers, sems, depth, rank] => {
            let mut worker = config(name, workers, sems, depth).join(rank.parse().unwrap())?;
            worker.recv()?;
            std::thread::sleep(Duration::from_secs(120));
            Ok(())
        }
        // Receives one request and "answers" with a length far past its slot.
        ["garbage", name, workers, rank] => {
            let config = config(name, workers, "named", "1");
            let rank: u32 = rank.parse().unwrap();
            // Everything by name first: joining lets the coordinator remove the names.
            let response = Region::open(
                &config.config().response_region_name(),
                OpenOptions::wait(1, TIMEOUT),
            )
            .unwrap();
            let sem = |role| {
                NamedSemaphore::open_wait(
                    &config
                        .config()
                        .semaphore_name(Direction::Response, role, rank),
                    TIMEOUT,
                )
                .unwrap()
            };
            let (produce, consume) = (sem(Role::Produce), sem(Role::Consume));
            let mut worker = config.join(rank)?;
            worker.recv()?;
            response
                .write_at(
                    // Depth 1: the first answer's slot, the ring's only one.
                    config.config().layout().response_slot(rank, 0),
                    &u32::MAX.to_le_bytes(),
                )
                .unwrap();
            produce.wait_timeout(TIMEOUT).unwrap();
            consume.post().unwrap();
            // Stay until the coordinator is done with us.
            let _ = worker.recv();
            Ok(())
        }
        // A coordinator that sends COUNT requests, gathers them, then hangs
        // with the channel open (to be killed).
        ["coordinator", name, workers, sems, count] => {
            let coordinator = config(name, workers, sems, "1").create()?;
            coordinator.wait_for_workers(TIMEOUT)?;
            for sequence in 0..count.parse().unwrap() {
                coordinator.send(&ExecuteRequest {
                    sequence,
                    ..Default::default()
                })?;
                coordinator.recv(All)?;
            }
            let ready = Region::open(&format!("{name}-ready"), OpenOptions::default()).unwrap();
            ready
                .view::<AtomicU32>(0)
                .unwrap()
                .store(1, Ordering::Release);
            std::thread::sleep(Duration::from_secs(120));
            Ok(())
        }
        _ => panic!("unknown role {args:?}"),
    }
}
