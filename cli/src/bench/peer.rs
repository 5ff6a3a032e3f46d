//! Peer processes for cross-process benchmarks.
//!
//! A benchmark spawns its own executable again with
//! [`PEER_ENV`] set to a role; the executable's
//! `main` calls [`run_if_peer`](crate::bench::run_if_peer) first thing, so the same
//! code serves the criterion suites and `nodeipc bench`. Descriptors a peer
//! needs are inherited under their own numbers; everything else stays
//! close-on-exec. This module knows no benchmark: the roles are dispatched
//! from `dispatch.rs`, above every benchmark module.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Set in a peer's environment: its role and arguments, space-separated.
pub const PEER_ENV: &str = "NODEIPC_BENCH_PEER";

/// Spawned peers; killed and reaped on drop, however the benchmark ends.
#[derive(Default)]
pub struct Peers {
    children: Vec<Child>,
}

impl Peers {
    /// Spawns this executable as a peer playing `role`, inheriting `fds`
    /// (their numbers are the same in the peer), pinned to `cpu` if given.
    ///
    /// # Errors
    /// The executable's path unknown, or the spawn failing.
    pub fn spawn(
        &mut self,
        role: &str,
        fds: &[BorrowedFd<'_>],
        cpu: Option<usize>,
    ) -> io::Result<()> {
        let raw: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
        let mut command = Command::new(std::env::current_exe()?);
        command.env(PEER_ENV, role);
        let prepare = move || {
            for &fd in &raw {
                // SAFETY: `fd` is open in the parent for the whole spawn.
                let fd = unsafe { BorrowedFd::borrow_raw(fd) };
                rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty())?;
            }
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
            if let Some(cpu) = cpu {
                crate::bench::machine::pin_current_thread(cpu)?;
            }
            Ok(())
        };
        // SAFETY: `prepare` runs between fork and exec and only makes
        // async-signal-safe system calls (fcntl, prctl, sched_setaffinity) on
        // descriptors the parent keeps open across the spawn.
        unsafe { command.pre_exec(prepare) };
        self.children.push(command.spawn()?);
        Ok(())
    }

    /// The peers' pids, in spawn order.
    pub(crate) fn pids(&self) -> Vec<u32> {
        self.children.iter().map(std::process::Child::id).collect()
    }

    /// Fails if a peer has exited already (with its status).
    pub(crate) fn check_alive(&mut self) -> io::Result<()> {
        for (i, child) in self.children.iter_mut().enumerate() {
            if let Some(status) = child.try_wait()? {
                return Err(io::Error::other(format!(
                    "benchmark peer {i} exited early: {status}"
                )));
            }
        }
        Ok(())
    }

    /// Waits up to `limit` for every peer to exit successfully.
    ///
    /// # Errors
    /// A peer that failed, or did not finish in `limit` (it is killed when
    /// `self` drops).
    pub fn finish(mut self, limit: Duration) -> io::Result<()> {
        let deadline = Instant::now() + limit;
        for (i, child) in self.children.iter_mut().enumerate() {
            loop {
                if let Some(status) = child.try_wait()? {
                    if !status.success() {
                        return Err(io::Error::other(format!(
                            "benchmark peer {i} failed: {status}"
                        )));
                    }
                    break;
                }
                if Instant::now() >= deadline {
                    return Err(io::Error::other(format!(
                        "benchmark peer {i} did not finish in {limit:?}"
                    )));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        Ok(())
    }
}

impl Drop for Peers {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Takes ownership of a descriptor a parent passed down by number.
///
/// # Safety
/// `fd` must be a descriptor this process inherited for its own use and that
/// nothing else in it owns.
///
/// # Errors
/// `fd` not a number.
pub unsafe fn inherited(fd: &str) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let raw: RawFd = fd
        .parse()
        .map_err(|_| io::Error::other(format!("bad descriptor {fd:?}")))?;
    // SAFETY: the caller guarantees `raw` was inherited for our sole use.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(raw) })
}

/// Reads exactly `buf.len()` bytes from a peer's socket (a baseline's
/// transport: the peer closing it first is an error).
pub(crate) fn read_exact(socket: &OwnedFd, buf: &mut [u8]) -> io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        match rustix::io::read(socket, &mut buf[got..])? {
            0 => return Err(io::Error::other("peer closed the socket")),
            n => got += n,
        }
    }
    Ok(())
}

/// Writes all of `data` to a peer's socket.
pub(crate) fn write_all(socket: &OwnedFd, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        let n = rustix::io::write(socket, data)?;
        data = &data[n..];
    }
    Ok(())
}

/// A connected pair of Unix stream sockets, close-on-exec (`socketpair`):
/// a baseline's transport, one end handed to a peer.
pub(crate) fn stream_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::net::socketpair(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::STREAM,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )?)
}
