//! The shared-memory heartbeat: a sealed memfd the server hands the rank at
//! `Init`, where a beat is one atomic increment the periodic check reads.
//!
//! Layout (one page, fields in native byte order, validated by the client
//! before it is trusted):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `NIPCHBT1` |
//! | 8 | 4 | layout version (1) |
//! | 64 | 8 | beat counter, its own cache line |

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use nodeipc_proto::monitor as pb;
use nodeipc_shm::Region;

use crate::{Error, Result};

/// Size of the region.
pub(crate) const REGION_SIZE: usize = 4096;
/// The magic word at offset 0.
pub(crate) const MAGIC: u64 = u64::from_le_bytes(*b"NIPCHBT1");
/// The layout version at offset 8.
pub(crate) const VERSION: u32 = 1;
/// Offset of the beat counter.
pub(crate) const COUNTER_OFFSET: usize = 64;

/// The server's side: creates the region and reads the counter.
#[derive(Debug)]
pub(crate) struct ServerRegion {
    region: Region,
    last_seen: u64,
}

impl ServerRegion {
    /// A new sealed region (the rank cannot shrink it under our mapping).
    pub(crate) fn create() -> Result<ServerRegion> {
        let region = Region::anonymous(REGION_SIZE)?;
        region.seal_grow_shrink()?;
        region.view::<AtomicU64>(0)?.store(MAGIC, Ordering::Relaxed);
        region
            .view::<AtomicU32>(8)?
            .store(VERSION, Ordering::Relaxed);
        region
            .view::<AtomicU64>(COUNTER_OFFSET)?
            .store(0, Ordering::Release);
        Ok(ServerRegion {
            region,
            last_seen: 0,
        })
    }

    /// How the `Ok` reply describes it.
    pub(crate) fn describe(&self) -> pb::ShmHeartbeat {
        pb::ShmHeartbeat {
            region_size: REGION_SIZE as u64,
            counter_offset: COUNTER_OFFSET as u64,
        }
    }

    /// Beats since the last call (the counter's change, wrapping).
    pub(crate) fn take_beats(&mut self) -> u64 {
        let now = self
            .region
            .view::<AtomicU64>(COUNTER_OFFSET)
            .map_or(self.last_seen, |c| c.load(Ordering::Acquire));
        let beats = now.wrapping_sub(self.last_seen);
        self.last_seen = now;
        beats
    }
}

impl AsFd for ServerRegion {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.region.as_fd()
    }
}

/// The rank's side: the mapped region, validated against its description.
#[derive(Debug)]
pub(crate) struct ClientRegion {
    region: Region,
    offset: usize,
}

impl ClientRegion {
    /// Maps the descriptor and checks it against the reply's description:
    /// size, an aligned counter inside it, the size sealed, magic and version.
    pub(crate) fn open(fd: OwnedFd, desc: &pb::ShmHeartbeat) -> Result<ClientRegion> {
        let bad = |reason: String| Error::BadHeartbeatRegion { reason };
        let region = Region::from_fd(fd)?;
        if region.len() as u64 != desc.region_size {
            return Err(bad(format!(
                "the descriptor maps {} bytes, the reply says {}",
                region.len(),
                desc.region_size
            )));
        }
        let offset = usize::try_from(desc.counter_offset)
            .map_err(|_| bad(format!("counter offset {} too large", desc.counter_offset)))?;
        if !offset.is_multiple_of(8) || offset.checked_add(8).is_none_or(|end| end > region.len()) {
            return Err(bad(format!(
                "counter offset {offset} is not an aligned 8-byte word inside {} bytes",
                region.len()
            )));
        }
        if !region.is_size_sealed() {
            return Err(bad("the region's size is not sealed".to_owned()));
        }
        if region.len() >= 12 {
            let magic = region.view::<AtomicU64>(0)?.load(Ordering::Relaxed);
            let version = region.view::<AtomicU32>(8)?.load(Ordering::Relaxed);
            if magic != MAGIC || version != VERSION {
                return Err(bad(format!(
                    "magic {magic:#x} version {version}; expected {MAGIC:#x} version {VERSION}"
                )));
            }
        }
        region.view::<AtomicU64>(offset)?;
        Ok(ClientRegion { region, offset })
    }

    /// One beat: an atomic increment, release ordering.
    #[inline]
    pub(crate) fn beat(&self) {
        if let Ok(counter) = self.region.view::<AtomicU64>(self.offset) {
            counter.fetch_add(1, Ordering::Release);
        }
    }
}
