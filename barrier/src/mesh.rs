//! The `SCM_RIGHTS` fallback: one datagram socket per rank to receive on,
//! and one connected to each peer to send on.
//!
//! The sockets meet in a private directory (made 0700 by the mkdir itself,
//! named after the group's random nonce). Once every rank has connected to every other, the socket
//! files and the directory are removed: connected sockets need no path, so
//! nothing is left on disk, whatever happens next. Only our uid (and root)
//! can reach a 0700 directory, so only our own processes can send here.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;
use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};

use crate::{Error, Result};

/// "NIFX": the first word of every descriptor message.
const MESSAGE_MAGIC: [u8; 4] = *b"NIFX";
const MESSAGE_LEN: usize = 16;
/// How often a rank waiting for descriptors checks its peers.
const SLICE: Duration = Duration::from_millis(50);

/// What the mesh needs of the group it connects, and all it sees of it:
/// who we are, a meeting of every rank between the set-up steps, and
/// whether the group still stands while a descriptor is awaited.
pub(crate) trait Members {
    /// The group's name, for errors.
    fn name(&self) -> &str;
    /// This rank.
    fn rank(&self) -> u32;
    /// How many ranks there are.
    fn world_size(&self) -> u32;
    /// Waits for every rank to get here (a barrier).
    fn meet(&self) -> Result<()>;
    /// Fails once the group is poisoned or a peer is gone.
    fn check_alive(&self) -> Result<()>;
}

#[derive(Debug)]
pub(crate) struct Mesh {
    inbox: OwnedFd,
    /// Connected to each peer's inbox; `None` for ourselves.
    outboxes: Vec<Option<OwnedFd>>,
}

impl Mesh {
    /// Sets the sockets up, in steps separated by barriers: rank 0 makes the
    /// directory; everyone binds; everyone connects; everyone removes its
    /// socket file; rank 0 removes the directory. `nonce` is the group's
    /// random number, the same for every rank: it names the directory.
    pub(crate) fn connect(group: &impl Members, nonce: u64) -> Result<Mesh> {
        let uid = rustix::process::geteuid().as_raw();
        let dir = PathBuf::from(format!("/tmp/nodeipc-group-{uid}-{nonce:016x}"));
        if group.rank() == 0 {
            // 0700 in the mkdir itself: a mkdir then chmod leaves the
            // directory open (under a loose umask) to anyone who plants a
            // socket or a link in it first.
            nodeipc_fs::create_private_dir(&dir).map_err(|e| refused(group, e))?;
        }
        let result = Mesh::connect_in(group, &dir);
        if group.rank() == 0 {
            let _ = std::fs::remove_dir(&dir);
        }
        result
    }

    fn connect_in(group: &impl Members, dir: &Path) -> Result<Mesh> {
        group.meet()?;
        nodeipc_fs::check_private_dir(dir).map_err(|e| refused(group, e))?;
        let socket_path = |rank: u32| dir.join(rank.to_string());
        let new_socket = || {
            rustix::net::socket_with(
                AddressFamily::UNIX,
                SocketType::DGRAM,
                SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
                None,
            )
            .map_err(|e| io(group, "socket", e))
        };
        let address = |rank: u32| {
            SocketAddrUnix::new(socket_path(rank).as_path())
                .map_err(|e| io(group, "sockaddr_un", e))
        };
        let inbox = new_socket()?;
        rustix::net::bind(&inbox, &address(group.rank())?).map_err(|e| io(group, "bind", e))?;
        let result = (|| {
            group.meet()?;
            let mut outboxes = Vec::new();
            for rank in 0..group.world_size() {
                if rank == group.rank() {
                    outboxes.push(None);
                    continue;
                }
                let socket = new_socket()?;
                rustix::net::connect(&socket, &address(rank)?)
                    .map_err(|e| io(group, "connect", e))?;
                outboxes.push(Some(socket));
            }
            group.meet()?;
            Ok(Mesh { inbox, outboxes })
        })();
        let _ = std::fs::remove_file(socket_path(group.rank()));
        let mesh = result?;
        // Everyone's file is gone before rank 0 removes the directory.
        group.meet()?;
        Ok(mesh)
    }

    /// Sends `fd` to every rank in `to`, and receives one descriptor from every
    /// rank in `from`; returns them by rank. Every message carries `epoch`,
    /// the collective it belongs to.
    pub(crate) fn exchange(
        &self,
        group: &impl Members,
        epoch: u64,
        fd: Option<BorrowedFd<'_>>,
        to: &[u32],
        from: &[u32],
        timeout: Duration,
    ) -> Result<Vec<Option<OwnedFd>>> {
        let mut message = [0u8; MESSAGE_LEN];
        message[0..4].copy_from_slice(&MESSAGE_MAGIC);
        message[4..8].copy_from_slice(&group.rank().to_le_bytes());
        message[8..16].copy_from_slice(&epoch.to_le_bytes());
        let mut unsent: Vec<u32> = to.to_vec();
        let mut received: Vec<Option<OwnedFd>> = (0..group.world_size()).map(|_| None).collect();
        let mut missing = from.len();
        let start = Instant::now();
        loop {
            // Send what the peers' queues take now; the rest waits for room.
            let mut still_unsent = Vec::new();
            for &rank in &unsent {
                let (Some(fd), Some(Some(outbox))) = (fd, self.outboxes.get(rank as usize)) else {
                    continue;
                };
                match nodeipc_fdpass::send_fds(outbox, &message, &[fd]) {
                    Ok(_) => {}
                    Err(nodeipc_fdpass::Error::Io { source, .. })
                        if source.raw_os_error() == Some(Errno::AGAIN.raw_os_error()) =>
                    {
                        still_unsent.push(rank);
                    }
                    Err(source) => {
                        return Err(Error::FdPass {
                            group: group.name().to_owned(),
                            source,
                        });
                    }
                }
            }
            unsent = still_unsent;
            missing -= self.drain_inbox(group, epoch, from, &mut received)?;
            if unsent.is_empty() && missing == 0 {
                return Ok(received);
            }
            group.check_alive()?;
            let waited = start.elapsed();
            if nodeipc_shm::wait::cancelled() {
                return Err(Error::Interrupted {
                    group: group.name().to_owned(),
                    rank: group.rank(),
                    op: "descriptor exchange",
                    waited,
                });
            }
            if waited >= timeout {
                return Err(Error::Timeout {
                    group: group.name().to_owned(),
                    rank: group.rank(),
                    op: "descriptor exchange",
                    waited,
                    arrived: (from.len() - missing) as u32,
                    expected: from.len() as u32,
                    missing: Vec::new(),
                });
            }
            let mut polls = vec![PollFd::new(&self.inbox, PollFlags::IN)];
            for &rank in &unsent {
                if let Some(Some(outbox)) = self.outboxes.get(rank as usize) {
                    polls.push(PollFd::new(outbox, PollFlags::OUT));
                }
            }
            let slice = SLICE.min(timeout - waited);
            let timespec = nodeipc_shm::wait::timespec(slice);
            match rustix::event::poll(&mut polls, Some(&timespec)) {
                Ok(_) | Err(Errno::INTR) => {}
                Err(e) => return Err(io(group, "poll", e)),
            }
        }
    }

    /// Receives every message waiting in the inbox; returns how many expected
    /// descriptors arrived.
    fn drain_inbox(
        &self,
        group: &impl Members,
        epoch: u64,
        from: &[u32],
        received: &mut [Option<OwnedFd>],
    ) -> Result<usize> {
        let protocol = |reason: String| Error::Protocol {
            group: group.name().to_owned(),
            reason,
        };
        let mut arrived = 0;
        loop {
            let mut message = [0u8; MESSAGE_LEN];
            let got = match nodeipc_fdpass::recv_fds(self.inbox.as_fd(), &mut message, 1) {
                Ok(got) => got,
                Err(nodeipc_fdpass::Error::Io { source, .. })
                    if source.raw_os_error() == Some(Errno::AGAIN.raw_os_error()) =>
                {
                    return Ok(arrived);
                }
                Err(source) => {
                    return Err(Error::FdPass {
                        group: group.name().to_owned(),
                        source,
                    });
                }
            };
            if got.len != MESSAGE_LEN || message[0..4] != MESSAGE_MAGIC {
                return Err(protocol(format!(
                    "a {}-byte message that is not ours",
                    got.len
                )));
            }
            let sender = u32::from_le_bytes(message[4..8].try_into().expect("4 bytes"));
            let their_epoch = u64::from_le_bytes(message[8..16].try_into().expect("8 bytes"));
            if their_epoch != epoch {
                return Err(protocol(format!(
                    "rank {sender} sent a descriptor for collective {their_epoch} during collective {epoch}"
                )));
            }
            if !from.contains(&sender) || received[sender as usize].is_some() {
                return Err(protocol(format!(
                    "an unexpected descriptor from rank {sender}"
                )));
            }
            let mut fds = got.fds;
            let fd = fds.pop().filter(|_| fds.is_empty()).ok_or_else(|| {
                protocol(format!(
                    "rank {sender} sent a message without its descriptor"
                ))
            })?;
            received[sender as usize] = Some(fd);
            arrived += 1;
        }
    }
}

/// A refusal of the socket directory in the group's words: the path, and
/// what was wrong with it (owner and mode, what sits there, or the errno,
/// kept in the error's source chain).
fn refused(group: &impl Members, error: nodeipc_fs::Error) -> Error {
    match error {
        nodeipc_fs::Error::Io { op, ref source, .. } => Error::Io {
            group: group.name().to_owned(),
            op,
            source: std::io::Error::new(source.kind(), error),
        },
        other => Error::Transport {
            group: group.name().to_owned(),
            reason: format!("refusing the socket directory: {other}"),
        },
    }
}

/// A socket call's failure, its errno kept, in the group's words.
fn io(group: &impl Members, op: &'static str, errno: Errno) -> Error {
    Error::Io {
        group: group.name().to_owned(),
        op,
        source: errno.into(),
    }
}
