//! A named shared-memory region and a pair of in-region semaphores
//! ([`ShmSemaphore`]) between two processes: the parent creates the region,
//! starts a copy of this program as its child, and the two ping-pong a few
//! messages through the region, each turn handed over by a semaphore post.
//!
//! ```text
//! cargo run -p nodeipc-sem --example region_and_semaphore
//! ```
//!
//! The layout both processes agree on: the "ping" semaphore (parent to
//! child) at offset 0, the "pong" semaphore (child to parent) at 64, and a
//! message (a `u32` length, then the bytes) at 128. The name is removed as
//! soon as the child has mapped the region, so nothing can be left in
//! `/dev/shm` whatever happens next. Every wait is bounded; the child dies
//! with its parent (`PR_SET_PDEATHSIG`) and the parent kills the child on
//! every error path. Exits 0 only when every message arrived intact.

use std::error::Error;
use std::process::{Child, Command, ExitCode};
use std::time::{Duration, Instant};

use nodeipc_sem::{Semaphore, ShmSemaphore};
use nodeipc_shm::{OpenOptions, Region};

/// Names this process's role in its child.
const ROLE_ENV: &str = "NODEIPC_EXAMPLE_SEM_ROLE";
const PING: usize = 0;
const PONG: usize = 64;
const MESSAGE: usize = 128;
const MESSAGE_MAX: usize = 256;
const REGION_SIZE: usize = 4096;
const ROUNDS: u32 = 5;
/// The bound on every wait.
const STEP: Duration = Duration::from_secs(5);

type Result<T> = std::result::Result<T, Box<dyn Error>>;

fn main() -> ExitCode {
    let (who, result) = match std::env::var(ROLE_ENV) {
        Ok(name) => ("child", child(&name)),
        Err(_) => ("parent", parent()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("region_and_semaphore ({who}): {e}");
            ExitCode::FAILURE
        }
    }
}

fn parent() -> Result<()> {
    let name = format!("/nodeipc-example-sem-{}", std::process::id());
    let region = Region::create(&name, REGION_SIZE)?;
    // Both semaphores start at 0, before any other process can see them.
    region.view::<ShmSemaphore>(PING)?.init(0);
    region.view::<ShmSemaphore>(PONG)?.init(0);
    println!(
        "parent {}: created {name} ({REGION_SIZE} bytes)",
        std::process::id()
    );

    let mut peer = Peer::spawn(&name)?;
    let ping: &ShmSemaphore = region.view(PING)?;
    let pong: &ShmSemaphore = region.view(PONG)?;

    // The child's first post says it has mapped the region.
    peer.wait_for(pong, "the child to map the region")?;
    region.unlink_now()?;
    println!(
        "parent: child {} mapped the region; name removed",
        peer.id()
    );

    for round in 0..ROUNDS {
        let sent = format!("ping {round}");
        write_message(&region, &sent)?;
        ping.post()?;
        peer.wait_for(pong, &format!("pong {round}"))?;
        let got = read_message(&region)?;
        let expected = format!("pong {round}");
        if got != expected {
            return Err(format!("round {round}: expected {expected:?}, got {got:?}").into());
        }
        println!("parent: sent {sent:?}, got {got:?}");
    }
    peer.wait_success(STEP)?;
    if std::path::Path::new(&format!("/dev/shm{name}")).exists() {
        return Err(format!("/dev/shm{name} still exists").into());
    }
    println!("parent: {ROUNDS} round trips checked, child exited 0, nothing left in /dev/shm");
    Ok(())
}

fn child(name: &str) -> Result<()> {
    die_with_parent()?;
    let region = Region::open(name, OpenOptions::wait(REGION_SIZE, STEP))?;
    let ping: &ShmSemaphore = region.view(PING)?;
    let pong: &ShmSemaphore = region.view(PONG)?;
    pong.post()?;
    for round in 0..ROUNDS {
        ping.wait_timeout(STEP)
            .map_err(|e| format!("waiting for ping {round}: {e}"))?;
        let got = read_message(&region)?;
        let expected = format!("ping {round}");
        if got != expected {
            return Err(format!("round {round}: expected {expected:?}, got {got:?}").into());
        }
        write_message(&region, &format!("pong {round}"))?;
        pong.post()?;
    }
    println!("child {}: answered {ROUNDS} pings", std::process::id());
    Ok(())
}

fn write_message(region: &Region, text: &str) -> Result<()> {
    if text.len() > MESSAGE_MAX {
        return Err(format!("message of {} bytes over {MESSAGE_MAX}", text.len()).into());
    }
    region.write_at(MESSAGE + 4, text.as_bytes())?;
    region.write_at(MESSAGE, &(text.len() as u32).to_le_bytes())?;
    Ok(())
}

/// Copies the message out: the other process may write the region at any
/// time, so its length is checked before it is used.
fn read_message(region: &Region) -> Result<String> {
    let mut len = [0u8; 4];
    region.read_at(MESSAGE, &mut len)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > MESSAGE_MAX {
        return Err(format!("message length {len} over {MESSAGE_MAX}").into());
    }
    let mut bytes = vec![0u8; len];
    region.read_at(MESSAGE + 4, &mut bytes)?;
    Ok(String::from_utf8(bytes)?)
}

/// The child asks the kernel to kill it when its parent goes, then checks
/// the parent had not already gone before it asked.
fn die_with_parent() -> Result<()> {
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
    let parent: i32 = std::env::var("NODEIPC_EXAMPLE_PARENT")?.parse()?;
    if rustix::process::getppid().map(|p| p.as_raw_nonzero().get()) != Some(parent) {
        return Err("the parent exited before the child started".into());
    }
    Ok(())
}

/// The child process, killed and reaped if it is dropped unwaited.
struct Peer(Option<Child>);

impl Peer {
    fn spawn(name: &str) -> Result<Peer> {
        let child = Command::new(std::env::current_exe()?)
            .env(ROLE_ENV, name)
            .env("NODEIPC_EXAMPLE_PARENT", std::process::id().to_string())
            .spawn()?;
        Ok(Peer(Some(child)))
    }

    fn id(&self) -> u32 {
        self.0.as_ref().map_or(0, Child::id)
    }

    /// Waits up to [`STEP`] for a post of `sem`, in slices, so a child that
    /// died is reported at once rather than when the time runs out (the
    /// semaphore itself cannot tell: it is only a count).
    fn wait_for(&mut self, sem: &ShmSemaphore, what: &str) -> Result<()> {
        const SLICE: Duration = Duration::from_millis(50);
        let deadline = Instant::now() + STEP;
        loop {
            match sem.wait_timeout(SLICE) {
                Ok(()) => return Ok(()),
                Err(e) if e.is_timeout() && Instant::now() < deadline => {
                    if let Some(status) =
                        self.0.as_mut().map(Child::try_wait).transpose()?.flatten()
                    {
                        return Err(
                            format!("waiting for {what}: the child exited ({status})").into()
                        );
                    }
                }
                Err(e) => return Err(format!("waiting for {what}: {e}").into()),
            }
        }
    }

    /// Waits up to `limit` for an exit with status 0.
    fn wait_success(&mut self, limit: Duration) -> Result<()> {
        let deadline = Instant::now() + limit;
        let Some(child) = self.0.as_mut() else {
            return Err("no child".into());
        };
        loop {
            if let Some(status) = child.try_wait()? {
                self.0 = None;
                return if status.success() {
                    Ok(())
                } else {
                    Err(format!("child exited with {status}").into())
                };
            }
            if Instant::now() >= deadline {
                return Err(format!("child still running after {limit:?}").into());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
