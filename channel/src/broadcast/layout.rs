//! The broadcast ring's region, byte by byte: what a reader in another
//! language needs to join (see the crate README, "Broadcast ring").
//!
//! Every field is a native-endian word changed only through atomics; every
//! block a different process writes sits on a 128-byte line of its own.
//!
//! | offset | size | what | written by |
//! |---|---|---|---|
//! | 0 | 128 | [`Header`]: magic, version, shape, writer's identity, flags | writer |
//! | 128 | 128 | [`Published`]: chunks published, their futex word, readers parked | writer (readers: `parked`) |
//! | 256 | 128 | [`Released`]: a futex word readers bump on each release, writer parked | readers (writer: `parked`) |
//! | 384 | 128 × readers | [`Slot`] per reader: state, identity, read position | that reader (writer: `dropped`) |
//! | after | 32 × chunks | [`ChunkHeader`] per chunk: sequence, message, total, offset | writer |
//! | next 4096 multiple | chunk_bytes × chunks | the chunks' bytes | writer |

use std::sync::atomic::{AtomicU32, AtomicU64};

use nodeipc_shm::{Padded, Region, ShmSafe};

use super::{Error, Result};

/// "NIPCBCST", little-endian.
pub(super) const MAGIC: u64 = u64::from_le_bytes(*b"NIPCBCST");
/// The layout's version: bumped on any change of this file's table.
pub(super) const VERSION: u32 = 1;

/// `Header::flags`: the writer has seen every reader join.
pub(super) const READY: u32 = 1;
/// `Header::flags`: the writer is gone cleanly; nothing more will come.
pub(super) const CLOSED: u32 = 2;

/// `Slot::state`: nobody holds the rank.
pub(super) const FREE: u32 = 0;
/// `Slot::state`: a reader is writing its identity.
pub(super) const CLAIMING: u32 = 1;
/// `Slot::state`: the reader has joined; its identity and position count.
pub(super) const JOINED: u32 = 2;
/// `Slot::state`: the reader left (dropped its handle).
pub(super) const LEFT: u32 = 3;

/// The ring's identity and shape, written once by the writer before any
/// reader can open the name.
#[repr(C)]
pub(super) struct Header {
    pub(super) magic: AtomicU64,
    pub(super) version: AtomicU32,
    pub(super) readers: AtomicU32,
    pub(super) chunks: AtomicU32,
    /// [`READY`], [`CLOSED`].
    pub(super) flags: AtomicU32,
    pub(super) chunk_bytes: AtomicU64,
    pub(super) writer_pid: AtomicU32,
    pub(super) _pad: AtomicU32,
    /// The writer's start time (`/proc/<pid>/stat` field 22).
    pub(super) writer_start: AtomicU64,
}

/// What the writer has published.
#[repr(C)]
pub(super) struct Published {
    /// Chunks published since the start (chunk `n` lives at `n % chunks`).
    pub(super) head: AtomicU64,
    /// Readers wait on this word; the writer changes it after `head`.
    pub(super) word: AtomicU32,
    /// Readers parked on `word`.
    pub(super) parked: AtomicU32,
}

/// What readers have released.
#[repr(C)]
pub(super) struct Released {
    /// The writer waits on this word; each reader adds one per release.
    pub(super) word: AtomicU32,
    /// Writers parked on `word` (0 or 1).
    pub(super) parked: AtomicU32,
}

/// One reader's place.
#[repr(C)]
pub(super) struct Slot {
    /// [`FREE`], [`CLAIMING`], [`JOINED`], [`LEFT`].
    pub(super) state: AtomicU32,
    pub(super) pid: AtomicU32,
    pub(super) start_time: AtomicU64,
    /// Chunks this reader has read and released: the writer may reuse
    /// every chunk before this one.
    pub(super) tail: AtomicU64,
    /// Set by the writer when it went on without this reader.
    pub(super) dropped: AtomicU32,
    pub(super) _pad: AtomicU32,
}

/// What a chunk holds. A reader trusts none of it: each field is checked
/// against what it expects before a byte is copied.
#[repr(C)]
pub(super) struct ChunkHeader {
    /// The chunk's number plus one once it is written; 0 while the writer
    /// writes it.
    pub(super) seq: AtomicU64,
    /// The message the chunk belongs to (0, 1, …).
    pub(super) msg: AtomicU64,
    /// The message's length in bytes.
    pub(super) total: AtomicU64,
    /// Where in the message this chunk's bytes go.
    pub(super) offset: AtomicU64,
}

// SAFETY: #[repr(C)] structs of atomic integers only: any bit pattern is a
// valid value, every access is atomic, and they hold no pointer.
unsafe impl ShmSafe for Header {}
// SAFETY: as for `Header`.
unsafe impl ShmSafe for Published {}
// SAFETY: as for `Header`.
unsafe impl ShmSafe for Released {}
// SAFETY: as for `Header`.
unsafe impl ShmSafe for Slot {}
// SAFETY: as for `Header`.
unsafe impl ShmSafe for ChunkHeader {}

const LINE: usize = 128;
/// Bytes a reader needs to see to check the ring's shape.
pub(super) const HEADER: usize = LINE;
const PAGE: usize = 4096;
/// Bytes of one chunk header.
pub(super) const CHUNK_HEADER: usize = size_of::<ChunkHeader>();

const _: () = assert!(size_of::<Header>() <= LINE);
const _: () = assert!(size_of::<Published>() <= LINE);
const _: () = assert!(size_of::<Released>() <= LINE);
const _: () = assert!(size_of::<Slot>() <= LINE);
const _: () = assert!(CHUNK_HEADER == 32);
const _: () = assert!(std::mem::offset_of!(Header, writer_start) == 40);
const _: () = assert!(std::mem::offset_of!(Published, word) == 8);
const _: () = assert!(std::mem::offset_of!(Slot, tail) == 16);
const _: () = assert!(std::mem::offset_of!(ChunkHeader, offset) == 24);

/// Where each part lies for one shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Layout {
    pub(super) readers: u32,
    pub(super) chunks: u32,
    pub(super) chunk_bytes: usize,
    slots: usize,
    chunk_headers: usize,
    data: usize,
    /// The whole region's size.
    pub(super) size: usize,
}

impl Layout {
    /// The layout of a ring of this shape, every size checked.
    pub(super) fn new(name: &str, readers: u32, chunks: u32, chunk_bytes: usize) -> Result<Layout> {
        let invalid = |reason: String| Error::InvalidConfig {
            name: name.to_owned(),
            reason,
        };
        if readers == 0 || readers > super::MAX_READERS {
            return Err(invalid(format!(
                "{readers} readers: a ring has 1 to {} readers",
                super::MAX_READERS
            )));
        }
        if chunks == 0 || chunks > super::MAX_CHUNKS {
            return Err(invalid(format!(
                "{chunks} chunks: a ring has 1 to {} chunks",
                super::MAX_CHUNKS
            )));
        }
        if chunk_bytes == 0 || chunk_bytes > crate::MAX_SLOT {
            return Err(invalid(format!(
                "chunks of {chunk_bytes} bytes: a chunk holds 1 to {} bytes",
                crate::MAX_SLOT
            )));
        }
        let too_large = || invalid("the ring is larger than the address space".to_owned());
        let slots = 3 * LINE;
        let chunk_headers = (readers as usize)
            .checked_mul(LINE)
            .and_then(|s| s.checked_add(slots))
            .ok_or_else(too_large)?;
        let data = (chunks as usize)
            .checked_mul(CHUNK_HEADER)
            .and_then(|h| h.checked_add(chunk_headers))
            .and_then(|end| end.checked_next_multiple_of(PAGE))
            .ok_or_else(too_large)?;
        let size = (chunks as usize)
            .checked_mul(chunk_bytes)
            .and_then(|d| d.checked_add(data))
            .filter(|&s| s <= isize::MAX as usize)
            .ok_or_else(too_large)?;
        Ok(Layout {
            readers,
            chunks,
            chunk_bytes,
            slots,
            chunk_headers,
            data,
            size,
        })
    }

    pub(super) fn header<'r>(&self, region: &'r Region) -> &'r Header {
        view(region, 0)
    }

    pub(super) fn published<'r>(&self, region: &'r Region) -> &'r Published {
        view(region, LINE)
    }

    pub(super) fn released<'r>(&self, region: &'r Region) -> &'r Released {
        view(region, 2 * LINE)
    }

    /// Reader `rank`'s slot; `rank` below `readers` (the callers check it).
    pub(super) fn slot<'r>(&self, region: &'r Region, rank: u32) -> &'r Slot {
        debug_assert!(rank < self.readers);
        view(region, self.slots + rank as usize * LINE)
    }

    /// The header of chunk `seq % chunks`.
    pub(super) fn chunk<'r>(&self, region: &'r Region, seq: u64) -> &'r ChunkHeader {
        view(region, self.chunk_headers + self.index(seq) * CHUNK_HEADER)
    }

    /// Where the bytes of chunk `seq % chunks` start.
    pub(super) fn chunk_data(&self, seq: u64) -> usize {
        self.data + self.index(seq) * self.chunk_bytes
    }

    fn index(&self, seq: u64) -> usize {
        (seq % u64::from(self.chunks)) as usize
    }
}

/// A view the layout placed: every offset lies inside a region of
/// `Layout::size` bytes (checked when the region was made or opened) and is
/// a multiple of 8, so the view cannot fail.
fn view<T: ShmSafe>(region: &Region, offset: usize) -> &T {
    region
        .view(offset)
        .expect("the layout's offsets lie in the region and are aligned")
}

// Padded is what a layout built on lines would use; this one places its
// lines by offset, so it checks only that the two agree.
const _: () = assert!(size_of::<Padded<Header>>() == LINE);
