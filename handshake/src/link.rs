//! [`PeerLink`]: the session's socket, kept open, and the peer's pidfd —
//! how each side learns of the other's death without trusting a pid written
//! in shared memory.

use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use nodeipc_shm::wait::timespec;
use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;
use rustix::net::RecvFlags;

/// How a peer's end was seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerGone {
    /// The session socket reached end of file (or was reset): every copy of
    /// the peer's end is closed — the peer exited, was killed, or closed it.
    Closed,
    /// The peer's pidfd says its process exited (a child it forked may still
    /// hold the socket).
    Exited,
}

/// A session's link to its peer: the connected socket and, where the kernel
/// gives one, a pidfd of the very process that connected (`SO_PEERPIDFD`,
/// Linux 6.5), else one opened from its `SO_PEERCRED` pid (`pidfd_open`:
/// the socket's end of file remains the authority if that pid was reused).
#[derive(Debug)]
pub struct PeerLink {
    stream: UnixStream,
    pidfd: Option<OwnedFd>,
    pid: u32,
}

/// `SO_PEERPIDFD`'s option number on the architectures whose generic
/// socket options Linux uses (x86, arm, riscv, ...): 77.
#[cfg(any(
    target_arch = "x86_64",
    target_arch = "x86",
    target_arch = "aarch64",
    target_arch = "arm",
    target_arch = "riscv64",
    target_arch = "loongarch64",
    target_arch = "s390x"
))]
const SO_PEERPIDFD: Option<libc::c_int> = Some(77);
#[cfg(not(any(
    target_arch = "x86_64",
    target_arch = "x86",
    target_arch = "aarch64",
    target_arch = "arm",
    target_arch = "riscv64",
    target_arch = "loongarch64",
    target_arch = "s390x"
)))]
const SO_PEERPIDFD: Option<libc::c_int> = None;

impl PeerLink {
    pub(crate) fn new(stream: UnixStream, pid: u32) -> PeerLink {
        let pidfd = peer_pidfd(&stream).or_else(|| {
            let pid = rustix::process::Pid::from_raw(i32::try_from(pid).ok()?)?;
            rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
        });
        PeerLink { stream, pidfd, pid }
    }

    /// The peer's pid, as `SO_PEERCRED` gave it at connect time.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The session socket, for a caller's own poll loop (readable or hung up
    /// means: call [`wait_gone`](PeerLink::wait_gone)).
    pub fn socket(&self) -> BorrowedFd<'_> {
        self.stream.as_fd()
    }

    /// The peer's pidfd, when one could be had (readable once it exits).
    pub fn pidfd(&self) -> Option<BorrowedFd<'_>> {
        self.pidfd.as_ref().map(AsFd::as_fd)
    }

    /// Whether the peer is still there, without waiting.
    pub fn is_alive(&self) -> bool {
        self.wait_gone(Duration::ZERO).is_none()
    }

    /// Waits up to `timeout` for the peer's end; `None` if it is still there.
    /// Bytes the peer sends on the session socket are read and ignored.
    pub fn wait_gone(&self, timeout: Duration) -> Option<PeerGone> {
        let start = Instant::now();
        loop {
            let left = timeout.saturating_sub(start.elapsed());
            let socket_flags = PollFlags::IN | PollFlags::RDHUP;
            let (socket_seen, pid_seen) = {
                let mut polls = vec![PollFd::new(&self.stream, socket_flags)];
                if let Some(pidfd) = &self.pidfd {
                    polls.push(PollFd::new(pidfd, PollFlags::IN));
                }
                let tick = timespec(left);
                match rustix::event::poll(&mut polls, Some(&tick)) {
                    Ok(_) | Err(Errno::INTR) => {}
                    // poll on our own two descriptors cannot fail otherwise;
                    // if it does, the socket's own read below decides.
                    Err(_) => {}
                }
                (
                    polls[0].revents(),
                    polls.get(1).map_or(PollFlags::empty(), PollFd::revents),
                )
            };
            if pid_seen.contains(PollFlags::IN) {
                return Some(PeerGone::Exited);
            }
            if socket_seen.intersects(PollFlags::HUP | PollFlags::RDHUP | PollFlags::ERR) {
                return Some(PeerGone::Closed);
            }
            if socket_seen.contains(PollFlags::IN) {
                let mut scratch = [0u8; 256];
                match rustix::net::recv(&self.stream, &mut scratch, RecvFlags::DONTWAIT) {
                    Ok((0, _)) => return Some(PeerGone::Closed),
                    Ok(_) | Err(Errno::AGAIN | Errno::INTR) => {}
                    Err(_) => return Some(PeerGone::Closed),
                }
            }
            if start.elapsed() >= timeout {
                return None;
            }
        }
    }

    /// The socket, for a caller that takes the session's link over.
    pub fn into_stream(self) -> UnixStream {
        self.stream
    }
}

/// `getsockopt(SO_PEERPIDFD)`: a pidfd of the process that connected (or
/// listened), immune to pid reuse; `None` where the kernel lacks it.
fn peer_pidfd(stream: &UnixStream) -> Option<OwnedFd> {
    let option = SO_PEERPIDFD?;
    let mut fd: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `fd`, a local of
    // this thread that no other thread or process can reach; the socket is
    // ours and open for the call.
    let rc = unsafe {
        libc::getsockopt(
            std::os::fd::AsRawFd::as_raw_fd(stream),
            libc::SOL_SOCKET,
            option,
            (&raw mut fd).cast(),
            &raw mut len,
        )
    };
    if rc != 0 || fd < 0 || len as usize != std::mem::size_of::<libc::c_int>() {
        return None;
    }
    // SAFETY: the kernel just created `fd` for us (a new pidfd); nothing
    // else in this process knows it, so it is owned here alone.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}
