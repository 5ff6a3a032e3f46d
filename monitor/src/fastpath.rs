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

use std::mem::offset_of;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use nodeipc_proto::monitor as pb;
use nodeipc_shm::{Region, ShmSafe};

use crate::{Error, Result};

/// Size of the region.
pub(crate) const REGION_SIZE: usize = 4096;
/// The magic word at offset 0.
pub(crate) const MAGIC: u64 = u64::from_le_bytes(*b"NIPCHBT1");
/// The layout version at offset 8.
pub(crate) const VERSION: u32 = 1;
/// Offset of the beat counter.
pub(crate) const COUNTER_OFFSET: usize = offset_of!(HeartbeatPage, counter);

/// The region's layout as the server writes it (the table above).
#[repr(C)]
struct HeartbeatPage {
    /// [`MAGIC`], written once before the region is handed over.
    magic: AtomicU64,
    /// [`VERSION`], likewise.
    version: AtomicU32,
    /// Up to the next cache line: the rank writes the counter at every
    /// beat, and nothing else may share its line.
    _reserved: [AtomicU32; 13],
    /// Beats so far: the rank increments it, the server reads it.
    counter: AtomicU64,
}

// The layout is the protocol's (`ShmHeartbeat` in monitor.proto): a field
// that moves breaks every client already deployed.
const _: () = assert!(offset_of!(HeartbeatPage, magic) == 0);
const _: () = assert!(offset_of!(HeartbeatPage, version) == 8);
const _: () = assert!(offset_of!(HeartbeatPage, counter) == 64);
const _: () = assert!(size_of::<HeartbeatPage>() == 72);
const _: () = assert!(size_of::<HeartbeatPage>() <= REGION_SIZE);

// SAFETY: `#[repr(C)]`, atomics only (any bit pattern valid, every access
// atomic), no pointers.
unsafe impl ShmSafe for HeartbeatPage {}

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
        let page = region.view::<HeartbeatPage>(0)?;
        page.magic.store(MAGIC, Ordering::Relaxed);
        page.version.store(VERSION, Ordering::Relaxed);
        page.counter.store(0, Ordering::Release);
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
            .view::<HeartbeatPage>(0)
            .map_or(self.last_seen, |page| page.counter.load(Ordering::Acquire));
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
        // The counter may sit anywhere the reply says; magic and version
        // are always where the page has them.
        if region.len() >= offset_of!(HeartbeatPage, version) + size_of::<AtomicU32>() {
            let magic = region
                .view::<AtomicU64>(offset_of!(HeartbeatPage, magic))?
                .load(Ordering::Relaxed);
            let version = region
                .view::<AtomicU32>(offset_of!(HeartbeatPage, version))?
                .load(Ordering::Relaxed);
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
