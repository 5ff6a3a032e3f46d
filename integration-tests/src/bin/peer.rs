//! The other process in the integration tests: one role per invocation,
//! chosen by the first argument. Exits 0 on success, 1 with a line on stderr
//! otherwise; every wait is bounded.

use std::process::ExitCode;
use std::time::Duration;

use nodeipc_sem::{NamedSemaphore, Semaphore, ShmSemaphore};
use nodeipc_shm::{OpenOptions, Region};

const WAIT: Duration = Duration::from_secs(10);

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("peer {}: {e}", args.first().unwrap_or(&"?"));
            ExitCode::FAILURE
        }
    }
}

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

fn run(args: &[&str]) -> Result {
    match args {
        // Prints LEN bytes at OFFSET of region NAME.
        ["shm-read", name, offset, len] => {
            let region = Region::open(name, OpenOptions::wait(1, WAIT))?;
            let mut buf = vec![0; len.parse()?];
            region.read_at(offset.parse()?, &mut buf)?;
            print!("{}", String::from_utf8_lossy(&buf));
        }
        // Writes TEXT at OFFSET of region NAME.
        ["shm-write", name, offset, text] => {
            let region = Region::open(name, OpenOptions::wait(1, WAIT))?;
            region.write_at(offset.parse()?, text.as_bytes())?;
        }
        // Creates region NAME and leaves it behind (a squatter, when run as another uid).
        ["shm-create", name, size] => Region::create(name, size.parse()?)?.persist(),
        // Creates semaphore NAME and leaves it behind.
        ["sem-create", name] => NamedSemaphore::create(name, 0)?.persist(),
        // ROUNDS times: wait on PING, post PONG (named semaphores).
        ["sem-pong", ping, pong, rounds] => {
            let (ping, pong) = (
                NamedSemaphore::open_wait(ping, WAIT)?,
                NamedSemaphore::open_wait(pong, WAIT)?,
            );
            pong_loop(&ping, &pong, rounds.parse()?)?;
        }
        // The same with two futex semaphores at offsets 0 and 64 of region NAME.
        ["futex-pong", name, rounds] => {
            let region = Region::open(name, OpenOptions::wait(128, WAIT))?;
            let (ping, pong) = (
                region.view::<ShmSemaphore>(0)?,
                region.view::<ShmSemaphore>(64)?,
            );
            pong_loop(ping, pong, rounds.parse()?)?;
        }
        // Parks on the futex semaphore at offset 0 of NAME (to be killed there).
        ["futex-park", name] => {
            let region = Region::open(name, OpenOptions::wait(64, WAIT))?;
            region.view::<ShmSemaphore>(0)?.wait_timeout(WAIT)?;
        }
        _ => return Err(format!("unknown role {args:?}").into()),
    }
    Ok(())
}

fn pong_loop(ping: &impl Semaphore, pong: &impl Semaphore, rounds: u64) -> Result {
    for _ in 0..rounds {
        ping.wait_timeout(WAIT)?;
        pong.post()?;
    }
    Ok(())
}
