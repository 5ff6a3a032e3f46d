//! The byte layout of a queue's region (see the README's table).
//!
//! Six 128-byte lines, then the slots: the configuration (written once by
//! the creator), the producer's tail, the consumer's head, the roles, the
//! two parked counts; each index alone on its line so a push and a pop do
//! not invalidate each other's line more than the protocol needs.

use nodeipc_fdpass::PeerRecord;
use nodeipc_shm::Padded;

use std::time::Duration;

use nodeipc_shm::wait::Pacer;

use crate::sync::{AtomicU32, AtomicU64, Ordering};
use crate::{Error, Result};

/// "nodeipcQ" in ASCII, little-endian: the first word of every queue.
pub const MAGIC: u64 = u64::from_le_bytes(*b"nodeipcQ");
/// The layout version this build writes and joins.
pub const VERSION: u32 = 1;
/// Where the slots start: after the six header lines.
pub const SLOTS_OFFSET: usize = 6 * 128;
/// The largest capacity (slots), a power of two: indices are 32-bit
/// counters compared with wrapping arithmetic, which needs capacity ≤ 2^31.
pub const MAX_CAPACITY: u32 = 1 << 30;
/// The largest message, in bytes.
pub const MAX_ELEM_SIZE: usize = 1 << 20;

/// The creator's record of what the queue holds; read-only afterwards.
/// The first 40 bytes of both layouts: the MPMC ring's configuration is
/// this one followed by its producer and consumer counts, so both are
/// written, awaited and checked by the code below.
#[repr(C)]
#[derive(Debug, Default)]
pub(crate) struct Config {
    pub(crate) magic: AtomicU64,
    pub(crate) version: AtomicU32,
    pub(crate) elem_size: AtomicU32,
    pub(crate) elem_align: AtomicU32,
    pub(crate) capacity: AtomicU32,
    pub(crate) schema: AtomicU64,
    pub(crate) slots_offset: AtomicU64,
}

/// Both roles, on one line, each a [`PeerRecord`] (pid, joins, start time) (written only when a role changes hands).
#[repr(C)]
#[derive(Debug, Default)]
pub(crate) struct Roles {
    pub(crate) producer: PeerRecord,
    pub(crate) consumer: PeerRecord,
}

/// The header at offset 0 of a queue's region.
#[repr(C)]
#[derive(Debug, Default)]
pub(crate) struct Header {
    pub(crate) config: Padded<Config>,
    /// Messages published, ever (wrapping): the producer's, and the word a
    /// consumer parks on.
    pub(crate) tail: Padded<AtomicU32>,
    /// Messages consumed, ever (wrapping): the consumer's, and the word a
    /// producer waiting for room parks on.
    pub(crate) head: Padded<AtomicU32>,
    pub(crate) roles: Padded<Roles>,
    /// Consumers parked on `tail`.
    pub(crate) tail_parked: Padded<AtomicU32>,
    /// Producers parked on `head`.
    pub(crate) head_parked: Padded<AtomicU32>,
    /// Where sleepers park: zero-sized (the kernel's futex) but in the
    /// loom models.
    pub(crate) futex: crate::sync::Futex,
}

#[cfg(not(loom))]
const _: () = {
    assert!(size_of::<Header>() == SLOTS_OFFSET);
    assert!(std::mem::offset_of!(Header, tail) == 128);
    assert!(std::mem::offset_of!(Header, head) == 256);
    assert!(std::mem::offset_of!(Header, roles) == 384);
    assert!(std::mem::offset_of!(Roles, producer) == 0);
    assert!(std::mem::offset_of!(Roles, consumer) == 16);
    assert!(std::mem::offset_of!(Header, tail_parked) == 512);
    assert!(std::mem::offset_of!(Header, head_parked) == 640);
};

// SAFETY: `#[repr(C)]`, made only of atomics (and `Padded` lines of them),
// any bit pattern is a valid value, and it holds no pointer.
#[cfg(not(loom))]
unsafe impl nodeipc_shm::ShmSafe for Config {}
// SAFETY: as for `Config`: two `PeerRecord`s, which are `#[repr(C)]`
// atomics with no pointer (as nodeipc-fdpass documents them).
#[cfg(not(loom))]
unsafe impl nodeipc_shm::ShmSafe for Roles {}
// SAFETY: as for `Config`.
#[cfg(not(loom))]
unsafe impl nodeipc_shm::ShmSafe for Header {}

/// What a message occupies in a slot: its size rounded up to whole words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub(crate) capacity: u32,
    /// 64-bit words a slot takes.
    pub(crate) stride: usize,
}

impl Geometry {
    /// The geometry of `capacity` messages of `elem_size` bytes, checked.
    pub(crate) fn new(queue: &str, elem_size: usize, capacity: u32) -> Result<Geometry> {
        let invalid = |what, value: u64, limit| Error::InvalidArgument {
            queue: queue.to_owned(),
            what,
            value,
            limit,
        };
        if elem_size == 0 || elem_size > MAX_ELEM_SIZE {
            return Err(invalid(
                "element size",
                elem_size as u64,
                "must be 1 byte to 1 MiB",
            ));
        }
        if !capacity.is_power_of_two() || capacity > MAX_CAPACITY {
            return Err(invalid(
                "capacity",
                u64::from(capacity),
                "must be a power of two from 1 to 2^30",
            ));
        }
        Ok(Geometry {
            capacity,
            stride: elem_size.div_ceil(8),
        })
    }

    /// Slot words in all.
    pub(crate) fn words(&self) -> Option<usize> {
        (self.capacity as usize).checked_mul(self.stride)
    }

    /// Bytes the region needs.
    pub(crate) fn region_len(&self) -> Option<usize> {
        self.words()?.checked_mul(8)?.checked_add(SLOTS_OFFSET)
    }
}

/// What a joiner expects of a configuration, and how its errors read.
pub(crate) struct Expected<'a> {
    pub(crate) queue: &'a str,
    pub(crate) magic: u64,
    /// What a region with another magic is not ("a queue").
    pub(crate) kind: &'static str,
    pub(crate) version: u32,
    pub(crate) elem_size: usize,
    pub(crate) elem_align: usize,
    pub(crate) schema: u64,
}

impl Config {
    /// Writes everything but the magic ([`publish`](Config::publish) is
    /// last, once whatever follows the configuration is written too).
    pub(crate) fn fill(
        &self,
        version: u32,
        (elem_size, elem_align): (usize, usize),
        capacity: u32,
        schema: u64,
        slots_offset: usize,
    ) {
        self.version.store(version, Ordering::Relaxed);
        self.elem_size.store(elem_size as u32, Ordering::Relaxed);
        self.elem_align.store(elem_align as u32, Ordering::Relaxed);
        self.capacity.store(capacity, Ordering::Relaxed);
        self.schema.store(schema, Ordering::Relaxed);
        self.slots_offset
            .store(slots_offset as u64, Ordering::Relaxed);
    }

    /// The magic, stored last (release): a joiner that sees it sees the rest.
    pub(crate) fn publish(&self, magic: u64) {
        self.magic.store(magic, Ordering::Release);
    }

    /// Waits (bounded by `timeout`) for the creator to publish the magic.
    pub(crate) fn wait_published(&self, timeout: Duration) {
        let mut pacer = Pacer::new(
            Duration::from_micros(10),
            Duration::from_millis(10),
            Some(timeout),
        );
        while self.magic.load(Ordering::Acquire) == 0 && pacer.pause().is_ok() {}
    }

    /// Checks magic, version, element size and alignment, schema (each
    /// value read once); returns the capacity and slots offset found, for
    /// the layout to check against its own geometry.
    pub(crate) fn check(&self, want: &Expected<'_>) -> Result<(u32, u64)> {
        let magic = self.magic.load(Ordering::Acquire);
        if magic != want.magic {
            return Err(Error::BadHeader {
                queue: want.queue.to_owned(),
                reason: format!(
                    "magic is {magic:#018x}, {:#018x} expected (not {}, or not yet initialised)",
                    want.magic, want.kind
                ),
            });
        }
        let checks = [
            (
                "layout version",
                self.version.load(Ordering::Relaxed).into(),
                u64::from(want.version),
            ),
            (
                "element size",
                self.elem_size.load(Ordering::Relaxed).into(),
                want.elem_size as u64,
            ),
            (
                "element alignment",
                self.elem_align.load(Ordering::Relaxed).into(),
                want.elem_align as u64,
            ),
            (
                "schema id",
                self.schema.load(Ordering::Relaxed),
                want.schema,
            ),
        ];
        for (field, found, expected) in checks {
            if found != expected {
                return Err(Error::Mismatch {
                    queue: want.queue.to_owned(),
                    field,
                    found,
                    expected,
                });
            }
        }
        Ok((
            self.capacity.load(Ordering::Relaxed),
            self.slots_offset.load(Ordering::Relaxed),
        ))
    }
}

/// Writes a fresh header: configuration first, the magic last (release), so
/// a joiner that sees the magic sees the rest.
pub(crate) fn init(
    header: &Header,
    elem_size: usize,
    elem_align: usize,
    geo: Geometry,
    schema: u64,
) {
    let c = &header.config;
    c.fill(
        VERSION,
        (elem_size, elem_align),
        geo.capacity,
        schema,
        SLOTS_OFFSET,
    );
    c.publish(MAGIC);
}

/// Checks a header against what a joiner expects; every value is read once.
pub(crate) fn check(
    queue: &str,
    header: &Header,
    region_len: usize,
    elem_size: usize,
    elem_align: usize,
    schema: u64,
) -> Result<Geometry> {
    let bad = |reason: String| Error::BadHeader {
        queue: queue.to_owned(),
        reason,
    };
    let (capacity, offset) = header.config.check(&Expected {
        queue,
        magic: MAGIC,
        kind: "a queue",
        version: VERSION,
        elem_size,
        elem_align,
        schema,
    })?;
    if offset != SLOTS_OFFSET as u64 {
        return Err(bad(format!(
            "slots offset is {offset}, {SLOTS_OFFSET} expected"
        )));
    }
    let geo = Geometry::new(queue, elem_size, capacity).map_err(|_| {
        bad(format!(
            "capacity is {capacity}, not a power of two up to 2^30"
        ))
    })?;
    match geo.region_len() {
        Some(need) if need <= region_len => Ok(geo),
        need => Err(bad(format!(
            "capacity {capacity} of {elem_size}-byte messages needs {} bytes, the region has {region_len}",
            need.map_or_else(|| "more than usize::MAX".to_owned(), |n| n.to_string())
        ))),
    }
}
