//! A group of N ranks, one process each: the parent is rank 0 and starts
//! ranks 1..N as copies of this program. Together they
//!
//! 1. join the group ([`Group::join`]) and meet at a barrier;
//! 2. all-gather one line each (`"rank R pid P"`), checked against the pids
//!    the group registered at join;
//! 3. exchange descriptors ([`Group::exchange_fds`]): each rank offers a
//!    memfd holding its own line and reads every other rank's;
//! 4. broadcast one descriptor from rank 0 ([`Group::broadcast_fd`]): each
//!    rank writes a byte of its own into that one shared file, and after a
//!    barrier every rank finds all N bytes there;
//! 5. leave: a last barrier, then each drops its `Group`.
//!
//! ```text
//! cargo run -p nodeipc-barrier --example rank_group              # 4 ranks
//! cargo run -p nodeipc-barrier --example rank_group -- --ranks 8
//! ```
//!
//! The group's name is removed once every rank has joined, so nothing is
//! left in `/dev/shm`; the `SCM_RIGHTS` transport's private directory (used
//! when `pidfd_getfd` is not permitted) is removed right after set-up. Every
//! call is bounded by the group's timeout, a dead rank fails the others at
//! once, the children die with the parent (`PR_SET_PDEATHSIG`) and the
//! parent kills them on every error path. Exits 0 only when every rank
//! checked every result.

use std::error::Error;
use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::process::{Child, Command, ExitCode};
use std::time::{Duration, Instant};

use nodeipc_barrier::{Group, GroupOptions};

/// Names the rank (and so the role) in a child.
const RANK_ENV: &str = "NODEIPC_EXAMPLE_RANK";
const GROUP_ENV: &str = "NODEIPC_EXAMPLE_GROUP";
const RANKS_ENV: &str = "NODEIPC_EXAMPLE_RANKS";
const PARENT_ENV: &str = "NODEIPC_EXAMPLE_PARENT";
const DEFAULT_RANKS: u32 = 4;
const MAX_RANKS: u32 = 64;
/// The bound on every collective call.
const STEP: Duration = Duration::from_secs(10);
/// Where each rank writes its byte in the broadcast file.
const MARKS_AT: u64 = 64;

type Result<T> = std::result::Result<T, Box<dyn Error>>;

fn main() -> ExitCode {
    let (who, result) = match std::env::var(RANK_ENV) {
        Ok(rank) => (format!("rank {rank}"), child(&rank)),
        Err(_) => ("rank 0".to_owned(), parent()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rank_group ({who}): {e}");
            ExitCode::FAILURE
        }
    }
}

fn ranks_from_args() -> Result<u32> {
    let mut args = std::env::args().skip(1);
    let mut ranks = DEFAULT_RANKS;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--ranks" => {
                let value = args.next().ok_or("--ranks needs a number")?;
                ranks = value
                    .parse()
                    .map_err(|e| format!("--ranks {value:?}: {e}"))?;
            }
            other => return Err(format!("unknown argument {other:?} (only --ranks N)").into()),
        }
    }
    if !(2..=MAX_RANKS).contains(&ranks) {
        return Err(format!("--ranks {ranks}: this example runs 2 to {MAX_RANKS} ranks").into());
    }
    Ok(ranks)
}

fn parent() -> Result<()> {
    let ranks = ranks_from_args()?;
    let name = format!("/nodeipc-example-group-{}", std::process::id());
    let exe = std::env::current_exe()?;
    let mut children = Children(Vec::new());
    for rank in 1..ranks {
        children.0.push(
            Command::new(&exe)
                .env(RANK_ENV, rank.to_string())
                .env(RANKS_ENV, ranks.to_string())
                .env(GROUP_ENV, &name)
                .env(PARENT_ENV, std::process::id().to_string())
                .spawn()?,
        );
    }
    println!(
        "rank 0 (pid {}): started ranks 1..{ranks} of {name}",
        std::process::id()
    );
    run_rank(&name, 0, ranks)?;
    children.wait_success(STEP)?;
    println!("rank 0: all {ranks} ranks checked every result and exited 0");
    Ok(())
}

fn child(rank: &str) -> Result<()> {
    die_with_parent()?;
    let rank: u32 = rank.parse()?;
    let ranks: u32 = std::env::var(RANKS_ENV)?.parse()?;
    run_rank(&std::env::var(GROUP_ENV)?, rank, ranks)
}

fn run_rank(name: &str, rank: u32, ranks: u32) -> Result<()> {
    let mut group = Group::join(GroupOptions::new(name, rank, ranks).timeout(STEP))?;
    group.barrier()?;
    let pids = group.pids();

    let gathered = group.all_gather(line_of(rank, pids[rank as usize]).as_bytes())?;
    for (r, got) in gathered.iter().enumerate() {
        let expected = line_of(r as u32, pids[r]);
        if got.as_slice() != expected.as_bytes() {
            return Err(format!(
                "all_gather slot {r}: expected {expected:?}, got {:?}",
                String::from_utf8_lossy(got)
            )
            .into());
        }
    }

    let mine = memfd_with(&line_of(rank, pids[rank as usize]))?;
    let received = group.exchange_fds(mine.as_fd())?;
    for (r, fd) in received.into_iter().enumerate() {
        match (r as u32 == rank, fd) {
            (true, None) => {}
            (false, Some(fd)) => expect_contents(&File::from(fd), 0, &line_of(r as u32, pids[r]))?,
            (own, fd) => {
                return Err(format!(
                    "exchange_fds entry {r}: own slot {own}, descriptor present {}",
                    fd.is_some()
                )
                .into());
            }
        }
    }

    let root_file = if rank == 0 {
        Some(memfd_with("the root's file")?)
    } else {
        None
    };
    let shared = File::from(group.broadcast_fd(0, root_file.as_ref().map(AsFd::as_fd))?);
    expect_contents(&shared, 0, "the root's file")?;
    shared.write_all_at(&[b'A' + (rank % 26) as u8], MARKS_AT + u64::from(rank))?;
    group.barrier()?;
    let expected: Vec<u8> = (0..ranks).map(|r| b'A' + (r % 26) as u8).collect();
    expect_contents(&shared, MARKS_AT, std::str::from_utf8(&expected)?)?;

    println!(
        "rank {rank} (pid {}): barrier, all_gather of {ranks}, exchange_fds and broadcast_fd \
         checked over {:?}",
        std::process::id(),
        group.transport()
    );
    // Leaving: nobody may drop out while another still waits on it.
    group.barrier()?;
    drop(group);
    Ok(())
}

fn line_of(rank: u32, pid: u32) -> String {
    format!("rank {rank} pid {pid}")
}

fn memfd_with(text: &str) -> Result<File> {
    let file = File::from(rustix::fs::memfd_create(
        "rank_group",
        rustix::fs::MemfdFlags::CLOEXEC,
    )?);
    file.write_all_at(text.as_bytes(), 0)?;
    Ok(file)
}

fn expect_contents(file: &File, at: u64, expected: &str) -> Result<()> {
    let mut buf = vec![0u8; expected.len()];
    file.read_exact_at(&mut buf, at)?;
    if buf != expected.as_bytes() {
        return Err(format!(
            "at offset {at}: expected {expected:?}, found {:?}",
            String::from_utf8_lossy(&buf)
        )
        .into());
    }
    Ok(())
}

/// The child asks the kernel to kill it when its parent goes, then checks
/// the parent had not already gone before it asked.
fn die_with_parent() -> Result<()> {
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
    let parent: i32 = std::env::var(PARENT_ENV)?.parse()?;
    if rustix::process::getppid().map(|p| p.as_raw_nonzero().get()) != Some(parent) {
        return Err("the parent exited before the child started".into());
    }
    Ok(())
}

/// The other ranks' processes: any still running when this is dropped are
/// killed and reaped.
struct Children(Vec<Child>);

impl Children {
    /// Waits up to `limit` for every child to exit with status 0.
    fn wait_success(&mut self, limit: Duration) -> Result<()> {
        let deadline = Instant::now() + limit;
        while let Some(child) = self.0.last_mut() {
            if let Some(status) = child.try_wait()? {
                let pid = child.id();
                self.0.pop();
                if !status.success() {
                    return Err(format!("rank process {pid} exited with {status}").into());
                }
                continue;
            }
            if Instant::now() >= deadline {
                return Err(format!("a rank still running after {limit:?}").into());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
