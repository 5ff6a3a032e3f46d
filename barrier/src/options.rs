//! How a rank joins a group.

use std::time::Duration;

use crate::vault::{MAX_SLOT_SIZE, MAX_WORLD_SIZE};
use crate::{Error, Result};

/// Which way descriptors travel in `exchange_fds` and `broadcast_fd`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TransportChoice {
    /// `pidfd_getfd` if every rank may use it on every other rank, else
    /// `SCM_RIGHTS` (decided together at join; see [`Group::transport`](crate::Group::transport)).
    #[default]
    Auto,
    /// `pidfd_getfd` only: joining fails if the kernel refuses it.
    Pidfd,
    /// `SCM_RIGHTS` over per-group Unix sockets in a private directory.
    ScmRights,
}

/// Everything a rank says when it joins a group.
#[derive(Clone, Debug)]
pub struct GroupOptions {
    /// The group's name, a POSIX shared-memory name (`/nodeipc-job42-tp0`):
    /// two groups with different names never meet.
    pub name: String,
    /// This rank, `0..world_size`. Rank 0 creates the vault.
    pub rank: u32,
    /// How many ranks, at most [`MAX_WORLD_SIZE`].
    pub world_size: u32,
    /// Bytes each rank contributes to an all-gather (64 by default: one GPU
    /// IPC handle), at most [`MAX_SLOT_SIZE`].
    pub slot_size: usize,
    /// How long joining, and each collective operation, may wait for the
    /// other ranks before the group is declared broken.
    pub timeout: Duration,
    /// How descriptors travel.
    pub transport: TransportChoice,
}

impl GroupOptions {
    /// Options with the defaults: 64-byte slots, a 60 s timeout, automatic transport.
    pub fn new(name: impl Into<String>, rank: u32, world_size: u32) -> GroupOptions {
        GroupOptions {
            name: name.into(),
            rank,
            world_size,
            slot_size: 64,
            timeout: Duration::from_secs(60),
            transport: TransportChoice::Auto,
        }
    }

    /// The same options with another slot size.
    pub fn slot_size(mut self, bytes: usize) -> GroupOptions {
        self.slot_size = bytes;
        self
    }

    /// The same options with another timeout.
    pub fn timeout(mut self, timeout: Duration) -> GroupOptions {
        self.timeout = timeout;
        self
    }

    /// The same options with another transport.
    pub fn transport(mut self, transport: TransportChoice) -> GroupOptions {
        self.transport = transport;
        self
    }

    pub(crate) fn check(&self) -> Result<()> {
        let invalid = |reason: String| {
            Err(Error::InvalidOptions {
                group: self.name.clone(),
                reason,
            })
        };
        if let Err(e) = nodeipc_shm::validate_name(&self.name) {
            return invalid(e.to_string());
        }
        if self.world_size == 0 || self.world_size > MAX_WORLD_SIZE {
            return invalid(format!(
                "world size {} is not in 1..={MAX_WORLD_SIZE}",
                self.world_size
            ));
        }
        if self.rank >= self.world_size {
            return invalid(format!(
                "rank {} is not below the world size {}",
                self.rank, self.world_size
            ));
        }
        if self.slot_size == 0 || self.slot_size > MAX_SLOT_SIZE {
            return invalid(format!(
                "slot size {} is not in 1..={MAX_SLOT_SIZE}",
                self.slot_size
            ));
        }
        Ok(())
    }
}
