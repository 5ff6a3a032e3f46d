//! The other process in the integration tests: one role per invocation,
//! chosen by the first argument. Exits 0 on success, 1 with a line on stderr
//! otherwise; every wait is bounded.

use std::io::{Read, Write};
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
        // Exports a memfd holding "child", prints its handle as hex, waits for
        // a line on stdin, then checks the parent wrote "parent" at 100.
        ["fd-export"] => {
            let region = Region::anonymous(4096)?;
            region.write_at(0, b"child")?;
            let handle = nodeipc_fdpass::FdHandle::export(&region.as_fd())?;
            println!("{}", hex(&handle.to_bytes()));
            std::io::stdout().flush()?;
            let mut line = String::new();
            std::io::stdin().read_line(&mut line)?;
            let mut seen = [0u8; 6];
            region.read_at(100, &mut seen)?;
            if &seen != b"parent" {
                return Err(format!("parent's write not visible: {seen:?}").into());
            }
        }
        // Imports the handle HEX and prints what the region holds at 0.
        ["fd-import", handle] => {
            let handle = nodeipc_fdpass::FdHandle::from_bytes(&unhex(handle)?)?;
            let region = Region::from_fd(handle.import()?)?;
            let mut text = [0u8; 6];
            region.read_at(0, &mut text)?;
            print!("{}", String::from_utf8_lossy(&text));
        }
        // Connects to PATH and stays until the other end closes.
        ["connect-and-wait", path] => {
            let mut socket = std::os::unix::net::UnixStream::connect(path)?;
            let mut rest = Vec::new();
            socket.read_to_end(&mut rest)?;
        }
        _ => return Err(format!("unknown role {args:?}").into()),
    }
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Result<Vec<u8>> {
    (0..text.len())
        .step_by(2)
        .map(|i| {
            Ok(u8::from_str_radix(
                text.get(i..i + 2).ok_or("odd hex")?,
                16,
            )?)
        })
        .collect()
}

fn pong_loop(ping: &impl Semaphore, pong: &impl Semaphore, rounds: u64) -> Result {
    for _ in 0..rounds {
        ping.wait_timeout(WAIT)?;
        pong.post()?;
    }
    Ok(())
}
