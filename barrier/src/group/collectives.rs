//! The collectives over the vault's slots: all-gather and broadcast of
//! bytes, and the operations the descriptor collectives (`fds.rs`) are made
//! of, so that they need nothing of the group's insides.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use nodeipc_fdpass::FdHandle;

use super::Group;
use crate::vault::Cause;
use crate::{Error, Result};

impl Group {
    /// Every rank's `data` (at most the slot size), in rank order.
    ///
    /// # Errors
    /// [`Error::TooLarge`] before anything is shared; [`Error::Corrupt`] for
    /// a slot whose length is beyond the slot; as [`barrier`](Group::barrier).
    pub fn all_gather(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.all_gather_timeout(data, self.timeout)
    }

    /// [`all_gather`](Group::all_gather) with its own timeout.
    ///
    /// # Errors
    /// As [`all_gather`](Group::all_gather).
    pub fn all_gather_timeout(&mut self, data: &[u8], timeout: Duration) -> Result<Vec<Vec<u8>>> {
        let parity = self.next_parity_for(data.len())?;
        self.write_slot(parity, data)?;
        self.barrier_timeout(timeout)?;
        (0..self.world_size)
            .map(|rank| self.read_slot(parity, rank))
            .collect()
    }

    /// `root`'s `data` to every rank (the others pass anything, `&[]` say).
    ///
    /// # Errors
    /// [`Error::RankOutOfRange`] for a root outside the group; otherwise as
    /// [`all_gather`](Group::all_gather).
    pub fn broadcast(&mut self, root: u32, data: &[u8]) -> Result<Vec<u8>> {
        self.broadcast_timeout(root, data, self.timeout)
    }

    /// [`broadcast`](Group::broadcast) with its own timeout.
    ///
    /// # Errors
    /// As [`broadcast`](Group::broadcast).
    pub fn broadcast_timeout(
        &mut self,
        root: u32,
        data: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>> {
        self.check_rank(root)?;
        let mine = if self.rank == root { data.len() } else { 0 };
        let parity = self.next_parity_for(mine)?;
        if self.rank == root {
            self.write_slot(parity, data)?;
        }
        self.barrier_timeout(timeout)?;
        self.read_slot(parity, root)
    }

    pub(crate) fn check_rank(&self, rank: u32) -> Result<()> {
        if rank >= self.world_size {
            return Err(Error::RankOutOfRange {
                group: self.name.clone(),
                rank,
                world_size: self.world_size,
            });
        }
        Ok(())
    }

    /// Which slot buffer this collective uses. Two buffers alternate: a rank
    /// writes buffer `p` again only after the barrier of the collective in
    /// between, which every rank reaches only after reading buffer `p`.
    pub(crate) fn next_parity_for(&mut self, len: usize) -> Result<usize> {
        if len > self.layout.slot_size {
            return Err(Error::TooLarge {
                group: self.name.clone(),
                len,
                slot_size: self.layout.slot_size,
            });
        }
        let parity = (self.epoch & 1) as usize;
        self.epoch += 1;
        Ok(parity)
    }

    /// Poisons the group because this rank failed inside a collective, so
    /// the others stop waiting for it, and returns the error.
    pub(crate) fn fail(&self, error: Error) -> Error {
        if error.poisons() {
            self.poison(self.rank, Cause::Failed);
        }
        error
    }

    fn write_slot(&self, parity: usize, data: &[u8]) -> Result<()> {
        let at = self.layout.data_slot(parity, self.rank);
        self.region
            .write_at(at + 8, data)
            .map_err(|source| Error::Shm {
                group: self.name.clone(),
                source,
            })?;
        self.region
            .view::<AtomicU64>(at)
            .expect("slots lie in the vault")
            .store(data.len() as u64, Ordering::Release);
        Ok(())
    }

    fn read_slot(&self, parity: usize, rank: u32) -> Result<Vec<u8>> {
        let at = self.layout.data_slot(parity, rank);
        let len = self
            .region
            .view::<AtomicU64>(at)
            .expect("slots lie in the vault")
            .load(Ordering::Acquire);
        if len > self.layout.slot_size as u64 {
            return Err(Error::Corrupt {
                group: self.name.clone(),
                rank,
                len,
                slot_size: self.layout.slot_size,
            });
        }
        let mut out = vec![0u8; len as usize];
        self.region
            .read_at(at + 8, &mut out)
            .map_err(|source| Error::Shm {
                group: self.name.clone(),
                source,
            })?;
        Ok(out)
    }

    /// Exports `fd` as a handle into our handle slot of buffer `parity`.
    pub(crate) fn publish_handle(&self, parity: usize, fd: BorrowedFd<'_>) -> Result<()> {
        let handle = FdHandle::export(&fd).map_err(|source| Error::FdPass {
            group: self.name.clone(),
            source,
        })?;
        let at = self.layout.handle_slot(parity, self.rank);
        self.region
            .write_at(at, &handle.to_bytes())
            .map_err(|source| Error::Shm {
                group: self.name.clone(),
                source,
            })
    }

    /// Reads `rank`'s handle, checks that it names the process registered for
    /// that rank, and copies the descriptor through our verified pidfd.
    pub(crate) fn import_from(&self, parity: usize, rank: u32) -> Result<OwnedFd> {
        let mut bytes = [0u8; FdHandle::SIZE];
        let at = self.layout.handle_slot(parity, rank);
        self.region
            .read_at(at, &mut bytes)
            .map_err(|source| Error::Shm {
                group: self.name.clone(),
                source,
            })?;
        let protocol = |reason: String| Error::Protocol {
            group: self.name.clone(),
            reason,
        };
        let handle = FdHandle::from_bytes(&bytes)
            .map_err(|e| protocol(format!("rank {rank}'s slot: {e}")))?;
        let entry = self.layout.rank(&self.region, rank);
        let pid = entry.pid.load(Ordering::Relaxed);
        let start_time = entry.start_time.load(Ordering::Relaxed);
        if handle.pid != pid || handle.start_time != start_time {
            return Err(protocol(format!(
                "rank {rank}'s handle names pid {} (start {}), not its registered pid {pid} (start {start_time})",
                handle.pid, handle.start_time
            )));
        }
        let pidfd = self
            .peers
            .get(rank as usize)
            .and_then(Option::as_ref)
            .expect("every peer has a pidfd");
        pidfd.get_fd(handle.fd).map_err(|source| match source {
            nodeipc_fdpass::Error::ProcessGone { .. } => self.died(rank, pid),
            source => Error::FdPass {
                group: self.name.clone(),
                source,
            },
        })
    }

    /// Over the `SCM_RIGHTS` mesh: sends `fd` to every rank in `to` and
    /// receives one descriptor from every rank in `from`, by rank, tagged
    /// with the current collective.
    pub(crate) fn mesh_exchange(
        &self,
        fd: Option<BorrowedFd<'_>>,
        to: &[u32],
        from: &[u32],
        timeout: Duration,
    ) -> Result<Vec<Option<OwnedFd>>> {
        let mesh = self.mesh.as_ref().expect("an SCM_RIGHTS group has a mesh");
        mesh.exchange(self, self.epoch, fd, to, from, timeout)
    }
}
