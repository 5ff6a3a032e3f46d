//! [`PeerLink`]: the session's socket, kept open, and the peer's pidfd —
//! how each side learns of the other's death without trusting a pid written
//! in shared memory.

use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use nodeipc_fdpass::Pidfd;
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
/// gives one, a pidfd of the very process that connected
/// ([`nodeipc_fdpass::peer_pidfd`], Linux 6.5), else one opened from its
/// `SO_PEERCRED` pid ([`Pidfd::open`]: the socket's end of file remains the
/// authority if that pid was reused).
#[derive(Debug)]
pub struct PeerLink {
    stream: UnixStream,
    pidfd: Option<Pidfd>,
    pid: u32,
}

impl PeerLink {
    pub(crate) fn new(stream: UnixStream, pid: u32) -> PeerLink {
        let pidfd = nodeipc_fdpass::peer_pidfd(&stream)
            .or_else(|_| Pidfd::open(pid))
            .ok();
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
