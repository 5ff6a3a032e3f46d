//! The byte layout of a many-producer many-consumer ring (see the README's
//! table): six 128-byte header lines, a 128-byte place per producer and
//! per consumer, then the slots, each a sequence word and the message.

use nodeipc_fdpass::PeerRecord;
use nodeipc_shm::Padded;

use crate::layout::Expected;
use crate::sync::{AtomicU32, AtomicU64, Ordering};
use crate::{Error, MAX_ELEM_SIZE, Result};

/// "nodeipcM" in ASCII, little-endian: the first word of every MPMC ring.
pub const MPMC_MAGIC: u64 = u64::from_le_bytes(*b"nodeipcM");
/// The layout version this build writes and joins.
pub const MPMC_VERSION: u32 = 1;
/// The most producers, and the most consumers, a ring may have.
pub const MAX_PLACES: u32 = 64;
/// The largest capacity (slots); the smallest is 4 (a slot's three states
/// must differ from its neighbours' laps).
pub const MPMC_MAX_CAPACITY: u32 = 1 << 30;
/// Where the places start.
pub(crate) const PLACES_OFFSET: usize = 6 * 128;
/// Bytes a place takes.
pub(crate) const PLACE_LEN: usize = 128;

/// The creator's record of what the ring holds; read-only afterwards: the
/// SPSC queue's configuration (the same 40 bytes, written and checked by
/// the same code), then the number of producers and of consumers.
#[repr(C)]
#[derive(Debug, Default)]
pub(crate) struct Config {
    pub(crate) ring: crate::layout::Config,
    pub(crate) producers: AtomicU32,
    pub(crate) consumers: AtomicU32,
}

/// What happened to claimed positions that will never be read.
#[repr(C)]
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Positions a producer claimed and died before publishing: skipped.
    pub(crate) skipped: AtomicU64,
    /// Messages a consumer claimed and died before reading through: lost.
    pub(crate) lost: AtomicU64,
}

/// The header at offset 0 of an MPMC ring's region.
#[repr(C)]
#[derive(Debug, Default)]
pub(crate) struct Header {
    pub(crate) config: Padded<Config>,
    /// Positions claimed by producers, ever (wrapping).
    pub(crate) tail: Padded<AtomicU32>,
    /// Positions claimed by consumers, ever (wrapping).
    pub(crate) head: Padded<AtomicU32>,
    pub(crate) counters: Padded<Counters>,
    /// Consumers parked on a slot's sequence word, waiting for a message.
    pub(crate) data_parked: Padded<AtomicU32>,
    /// Producers parked on a slot's sequence word, waiting for room.
    pub(crate) room_parked: Padded<AtomicU32>,
    /// Where sleepers park: zero-sized (the kernel's futex) but in the
    /// loom models.
    pub(crate) futex: crate::sync::Futex,
}

/// A producer's or consumer's place: who holds it, and what it is claiming.
#[repr(C)]
#[derive(Debug, Default)]
pub(crate) struct Place {
    /// The holder (nodeipc-fdpass's record: pid, joins, start time).
    pub(crate) peer: PeerRecord,
    /// The positions being claimed or held: `count << 32 | start`; 0 (a
    /// count of 0): none. Written only by the holder.
    pub(crate) claim: AtomicU64,
    _reserved: [AtomicU64; 13],
}

#[cfg(not(loom))]
const _: () = {
    assert!(size_of::<Header>() == PLACES_OFFSET);
    assert!(std::mem::offset_of!(Header, tail) == 128);
    assert!(std::mem::offset_of!(Header, head) == 256);
    assert!(std::mem::offset_of!(Header, counters) == 384);
    assert!(std::mem::offset_of!(Header, data_parked) == 512);
    assert!(std::mem::offset_of!(Header, room_parked) == 640);
    assert!(std::mem::offset_of!(Config, producers) == 40);
    assert!(std::mem::offset_of!(Config, consumers) == 44);
    assert!(std::mem::offset_of!(Counters, lost) == 8);
    assert!(size_of::<Place>() == PLACE_LEN);
    assert!(std::mem::offset_of!(Place, claim) == 16);
};

// SAFETY: `#[repr(C)]`, made only of atomics (and `Padded` lines of them);
// any bit pattern is a valid value and none holds a pointer.
#[cfg(not(loom))]
unsafe impl nodeipc_shm::ShmSafe for Header {}
// SAFETY: as for `Header`: a `PeerRecord` (atomics, documented so by
// nodeipc-fdpass) and atomics.
#[cfg(not(loom))]
unsafe impl nodeipc_shm::ShmSafe for Place {}

/// A claim word: `count` positions from `start`.
#[inline]
pub(crate) fn claim_word(start: u32, count: u32) -> u64 {
    u64::from(count) << 32 | u64::from(start)
}

/// Whether claim word `word` names position `at`.
#[inline]
pub(crate) fn claim_names(word: u64, at: u32) -> bool {
    let (start, count) = (word as u32, (word >> 32) as u32);
    at.wrapping_sub(start) < count
}

/// A ring's shape, checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub(crate) capacity: u32,
    pub(crate) producers: u32,
    pub(crate) consumers: u32,
    /// Bytes a slot takes: its 8-byte sequence word and the message,
    /// rounded up to whole 64-byte cache lines, so no two slots share one
    /// (a producer filling one slot never takes the line of the slot a
    /// consumer is reading; a message of up to 56 bytes is one line, its
    /// sequence word with it).
    pub(crate) stride: usize,
    pub(crate) slots_offset: usize,
}

impl Geometry {
    pub(crate) fn new(
        queue: &str,
        elem_size: usize,
        capacity: u32,
        producers: u32,
        consumers: u32,
    ) -> Result<Geometry> {
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
        if !capacity.is_power_of_two() || !(4..=MPMC_MAX_CAPACITY).contains(&capacity) {
            return Err(invalid(
                "capacity",
                u64::from(capacity),
                "must be a power of two from 4 to 2^30",
            ));
        }
        for (what, n) in [("producers", producers), ("consumers", consumers)] {
            if n == 0 || n > MAX_PLACES {
                return Err(invalid(what, u64::from(n), "must be 1 to 64"));
            }
        }
        Ok(Geometry {
            capacity,
            producers,
            consumers,
            stride: (8 + elem_size.div_ceil(8) * 8).next_multiple_of(64),
            slots_offset: PLACES_OFFSET + PLACE_LEN * (producers + consumers) as usize,
        })
    }

    /// Bytes the region needs.
    pub(crate) fn region_len(&self) -> Option<usize> {
        (self.capacity as usize)
            .checked_mul(self.stride)?
            .checked_add(self.slots_offset)
    }
}

/// Writes a fresh header: configuration first, the magic last (release).
/// The slots' sequence words start at their index (free for lap 0).
pub(crate) fn init(
    header: &Header,
    elem_size: usize,
    elem_align: usize,
    geo: Geometry,
    schema: u64,
) {
    let c = &header.config;
    c.ring.fill(
        MPMC_VERSION,
        (elem_size, elem_align),
        geo.capacity,
        schema,
        geo.slots_offset,
    );
    c.producers.store(geo.producers, Ordering::Relaxed);
    c.consumers.store(geo.consumers, Ordering::Relaxed);
    c.ring.publish(MPMC_MAGIC);
}

/// Checks a header against what a joiner expects; every value read once.
pub(crate) fn check(
    queue: &str,
    header: &Header,
    region_len: usize,
    elem_size: usize,
    elem_align: usize,
    schema: u64,
) -> Result<Geometry> {
    let c = &header.config;
    let bad = |reason: String| Error::BadHeader {
        queue: queue.to_owned(),
        reason,
    };
    let (capacity, offset) = c.ring.check(&Expected {
        queue,
        magic: MPMC_MAGIC,
        kind: "an MPMC ring",
        version: MPMC_VERSION,
        elem_size,
        elem_align,
        schema,
    })?;
    let producers = c.producers.load(Ordering::Relaxed);
    let consumers = c.consumers.load(Ordering::Relaxed);
    let geo = Geometry::new(queue, elem_size, capacity, producers, consumers)
        .map_err(|e| bad(e.to_string()))?;
    if offset != geo.slots_offset as u64 {
        return Err(bad(format!(
            "slots offset is {offset}, {} expected for {producers} producers and {consumers} consumers",
            geo.slots_offset
        )));
    }
    match geo.region_len() {
        Some(need) if need <= region_len => Ok(geo),
        need => Err(bad(format!(
            "{capacity} slots of {} bytes need {} bytes, the region has {region_len}",
            geo.stride,
            need.map_or_else(|| "more than usize::MAX".to_owned(), |n| n.to_string())
        ))),
    }
}
