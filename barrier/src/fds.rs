//! Descriptors between ranks: every rank's to every other, or one rank's to all.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::time::Duration;

use nodeipc_fdpass::Transport;

use crate::{Error, Group, Result};

impl Group {
    /// Every rank's descriptor to every other rank: entry `r` of the result
    /// refers to the same open file as rank `r`'s `fd`; our own entry is `None`.
    ///
    /// Over `pidfd_getfd`, the ranks all-gather `FdHandle`s and each imports
    /// the others' (checked against the pids registered at join), then meet
    /// once more so no rank closes its descriptor before all have imported.
    /// Over `SCM_RIGHTS`, each rank sends its descriptor to every other one.
    ///
    /// # Errors
    /// [`Error::Protocol`] for a handle that does not name the rank's
    /// registered process; [`Error::FdPass`] when importing fails; as
    /// [`barrier`](Group::barrier). An error poisons the group.
    pub fn exchange_fds(&mut self, fd: BorrowedFd<'_>) -> Result<Vec<Option<OwnedFd>>> {
        self.exchange_fds_timeout(fd, self.timeout())
    }

    /// [`exchange_fds`](Group::exchange_fds) with its own timeout.
    ///
    /// # Errors
    /// As [`exchange_fds`](Group::exchange_fds).
    pub fn exchange_fds_timeout(
        &mut self,
        fd: BorrowedFd<'_>,
        timeout: Duration,
    ) -> Result<Vec<Option<OwnedFd>>> {
        let parity = self.next_parity_for(0)?;
        let peers: Vec<u32> = (0..self.world_size())
            .filter(|&r| r != self.rank())
            .collect();
        let received = match self.transport() {
            Transport::Pidfd => {
                self.publish_handle(parity, fd)?;
                self.barrier_timeout(timeout)?;
                let mut out: Vec<Option<OwnedFd>> = (0..self.world_size()).map(|_| None).collect();
                for &rank in &peers {
                    out[rank as usize] =
                        Some(self.import_from(parity, rank).map_err(|e| self.fail(e))?);
                }
                out
            }
            Transport::ScmRights => self
                .mesh_exchange(Some(fd), &peers, &peers, timeout)
                .map_err(|e| self.fail(e))?,
        };
        // The exporters keep their descriptors open until every import is done.
        self.barrier_timeout(timeout)?;
        Ok(received)
    }

    /// `root`'s descriptor to every rank. The root passes `Some(fd)` and gets a
    /// duplicate back; the others pass `None`.
    ///
    /// # Errors
    /// [`Error::RankOutOfRange`]; [`Error::InvalidOptions`] when the root
    /// passes no descriptor; otherwise as [`exchange_fds`](Group::exchange_fds).
    pub fn broadcast_fd(&mut self, root: u32, fd: Option<BorrowedFd<'_>>) -> Result<OwnedFd> {
        self.broadcast_fd_timeout(root, fd, self.timeout())
    }

    /// [`broadcast_fd`](Group::broadcast_fd) with its own timeout.
    ///
    /// # Errors
    /// As [`broadcast_fd`](Group::broadcast_fd).
    pub fn broadcast_fd_timeout(
        &mut self,
        root: u32,
        fd: Option<BorrowedFd<'_>>,
        timeout: Duration,
    ) -> Result<OwnedFd> {
        self.check_rank(root)?;
        let is_root = self.rank() == root;
        if is_root && fd.is_none() {
            return Err(Error::InvalidOptions {
                group: self.name().to_owned(),
                reason: format!("rank {root} broadcasts a descriptor but passed none"),
            });
        }
        let parity = self.next_parity_for(0)?;
        let result = match (self.transport(), fd.filter(|_| is_root)) {
            (_, Some(fd)) => {
                let duplicate = fd.try_clone_to_owned().map_err(|e| Error::Io {
                    group: self.name().to_owned(),
                    op: "dup",
                    source: e,
                })?;
                match self.transport() {
                    Transport::Pidfd => {
                        self.publish_handle(parity, fd)?;
                        self.barrier_timeout(timeout)?;
                    }
                    Transport::ScmRights => {
                        let peers: Vec<u32> =
                            (0..self.world_size()).filter(|&r| r != root).collect();
                        self.mesh_exchange(Some(fd), &peers, &[], timeout)
                            .map_err(|e| self.fail(e))?;
                    }
                }
                duplicate
            }
            (Transport::Pidfd, None) => {
                self.barrier_timeout(timeout)?;
                self.import_from(parity, root).map_err(|e| self.fail(e))?
            }
            (Transport::ScmRights, None) => {
                let mut got = self
                    .mesh_exchange(None, &[], &[root], timeout)
                    .map_err(|e| self.fail(e))?;
                got[root as usize]
                    .take()
                    .expect("exchange returns what it waited for")
            }
        };
        self.barrier_timeout(timeout)?;
        Ok(result)
    }
}
