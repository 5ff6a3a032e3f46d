//! The vault: the shared region a group meets in, and where everything in it
//! sits. Everything here is `#[repr(C)]`, made of atomics, and checked
//! before it is trusted: another process wrote it.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use nodeipc_shm::{Padded, Region, ShmSafe};

use crate::{Error, Result};

/// "NIPCVLT1" read as a little-endian `u64`.
pub(crate) const MAGIC: u64 = u64::from_le_bytes(*b"NIPCVLT1");
/// Bumped whenever anything below moves.
pub(crate) const LAYOUT_VERSION: u32 = 1;
/// The most ranks a group can hold.
pub const MAX_WORLD_SIZE: u32 = 1024;
/// The largest all-gather slot.
pub const MAX_SLOT_SIZE: usize = 1 << 20;

/// Bytes of a descriptor handle slot (an `FdHandle` is 24 bytes).
pub(crate) const HANDLE_SLOT: usize = 32;

/// The first bytes of the vault. Rank 0 fills it, then stores `init` with
/// release ordering; joiners acquire `init` before reading the rest.
#[repr(C)]
pub(crate) struct Header {
    pub(crate) magic: AtomicU64,
    pub(crate) version: AtomicU32,
    pub(crate) world_size: AtomicU32,
    pub(crate) slot_size: AtomicU32,
    /// 1 once rank 0 has written everything else.
    pub(crate) init: AtomicU32,
    /// Ranks registered so far.
    pub(crate) joined: AtomicU32,
    /// 0, or `rank + 1` of the rank at fault.
    pub(crate) poison: AtomicU32,
    /// What happened to it (a `Cause` as `u32`).
    pub(crate) poison_cause: AtomicU32,
    /// Ranks done setting up the descriptor transport.
    pub(crate) transport_ready: AtomicU32,
    /// Random per group run: names the socket directory of the fallback.
    pub(crate) nonce: AtomicU64,
}

// SAFETY: `#[repr(C)]`, atomics only, any bit pattern valid, no pointers.
unsafe impl ShmSafe for Header {}

/// One barrier: an arrival count, and a generation that the last arriver
/// bumps and waiters sleep on. On separate cache lines: arrivals hammer the
/// count while waiters read the generation.
#[repr(C)]
pub(crate) struct BarrierWords {
    pub(crate) count: Padded<AtomicU32>,
    pub(crate) wake: Padded<Generation>,
}

/// The futex word waiters sleep on, and how many sleep on it: the last
/// arriver makes the wake-up system call only when someone does.
#[repr(C)]
pub(crate) struct Generation {
    pub(crate) generation: AtomicU32,
    pub(crate) sleepers: AtomicU32,
}

// SAFETY: `#[repr(C)]`, atomics only, any bit pattern valid, no pointers.
unsafe impl ShmSafe for Generation {}

// SAFETY: `#[repr(C)]` of `Padded` atomics (themselves `ShmSafe`).
unsafe impl ShmSafe for BarrierWords {}

/// Bits of [`RankEntry::flags`].
pub(crate) mod flags {
    /// The rank registered its pid and start time.
    pub(crate) const JOINED: u32 = 1;
    /// The rank dropped its group handle.
    pub(crate) const LEFT: u32 = 2;
    /// The rank can `pidfd_getfd` from every peer.
    pub(crate) const PIDFD_OK: u32 = 4;
    /// The rank probed its transport (`PIDFD_OK` is meaningful).
    pub(crate) const PROBED: u32 = 8;
}

/// What one rank registers about itself.
#[repr(C)]
pub(crate) struct RankEntry {
    pub(crate) start_time: AtomicU64,
    pub(crate) pid: AtomicU32,
    pub(crate) flags: AtomicU32,
    _reserved: [AtomicU64; 2],
}

// SAFETY: `#[repr(C)]`, atomics only, any bit pattern valid, no pointers.
unsafe impl ShmSafe for RankEntry {}

/// Why a group was poisoned, as stored in the vault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cause {
    Died,
    Left,
    TimedOut,
    Failed,
    /// Its wait was interrupted (Ctrl-C in a binding): the rank is going down.
    Interrupted,
    /// A value no cause of ours has: a vault written by another version, a
    /// corrupted one, or a cause not stored yet (0). Kept as it was found,
    /// so the error names it rather than guessing.
    Unknown(u32),
}

impl Cause {
    pub(crate) fn from_raw(raw: u32) -> Cause {
        match raw {
            1 => Cause::Died,
            2 => Cause::Left,
            3 => Cause::TimedOut,
            4 => Cause::Failed,
            5 => Cause::Interrupted,
            raw => Cause::Unknown(raw),
        }
    }

    /// The value stored in the vault's `poison_cause` word.
    pub(crate) fn to_raw(self) -> u32 {
        match self {
            Cause::Died => 1,
            Cause::Left => 2,
            Cause::TimedOut => 3,
            Cause::Failed => 4,
            Cause::Interrupted => 5,
            Cause::Unknown(raw) => raw,
        }
    }

    /// What happened to the rank at fault, completing "rank N …".
    pub(crate) fn describe(self) -> String {
        match self {
            Cause::Died => "died".to_owned(),
            Cause::Left => "left the group".to_owned(),
            Cause::TimedOut => "timed out waiting for the others".to_owned(),
            Cause::Failed => "failed inside a collective operation".to_owned(),
            Cause::Interrupted => "was interrupted inside a collective operation".to_owned(),
            Cause::Unknown(raw) => format!("poisoned the group with unknown cause {raw}"),
        }
    }
}

/// Offsets of everything, from the group's shape.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Layout {
    pub(crate) world_size: u32,
    pub(crate) slot_size: usize,
}

const HEADER_AT: usize = 0;
const BARRIER_AT: usize = 256;
const SUBSET_AT: usize = BARRIER_AT + size_of::<BarrierWords>();
const RANKS_AT: usize = SUBSET_AT + size_of::<BarrierWords>();

// Every process that maps a vault must agree on where each word sits: a
// change to any of these is a new LAYOUT_VERSION.
const _: () = assert!(size_of::<Header>() == 48 && size_of::<Header>() <= BARRIER_AT);
const _: () = assert!(std::mem::offset_of!(Header, magic) == 0);
const _: () = assert!(std::mem::offset_of!(Header, version) == 8);
const _: () = assert!(std::mem::offset_of!(Header, world_size) == 12);
const _: () = assert!(std::mem::offset_of!(Header, slot_size) == 16);
const _: () = assert!(std::mem::offset_of!(Header, init) == 20);
const _: () = assert!(std::mem::offset_of!(Header, poison) == 28);
const _: () = assert!(std::mem::offset_of!(Header, nonce) == 40);
const _: () = assert!(std::mem::offset_of!(BarrierWords, wake) == 128);
const _: () = assert!(size_of::<BarrierWords>() == 256);
const _: () = assert!(std::mem::offset_of!(Generation, sleepers) == 4);
const _: () = assert!(SUBSET_AT == 512 && RANKS_AT == 768);
const _: () = assert!(size_of::<RankEntry>() == 32);
const _: () = assert!(std::mem::offset_of!(RankEntry, pid) == 8);
const _: () = assert!(std::mem::offset_of!(RankEntry, flags) == 12);

impl Layout {
    /// Enough of the vault to read the header.
    pub(crate) const HEADER_BYTES: usize = BARRIER_AT;

    fn ranks_end(&self) -> usize {
        RANKS_AT + self.world_size as usize * size_of::<RankEntry>()
    }

    /// Each data slot: an 8-byte length, then the bytes, rounded to 8.
    fn data_stride(&self) -> usize {
        8 + self.slot_size.next_multiple_of(8)
    }

    fn data_at(&self) -> usize {
        self.ranks_end().next_multiple_of(64)
    }

    fn handles_at(&self) -> usize {
        (self.data_at() + 2 * self.world_size as usize * self.data_stride()).next_multiple_of(64)
    }

    pub(crate) fn size(&self) -> usize {
        self.handles_at() + 2 * self.world_size as usize * HANDLE_SLOT
    }

    #[inline]
    pub(crate) fn barrier<'r>(&self, region: &'r Region) -> &'r BarrierWords {
        region.view(BARRIER_AT).expect("vault size checked at join")
    }

    #[inline]
    pub(crate) fn subset<'r>(&self, region: &'r Region) -> &'r BarrierWords {
        region.view(SUBSET_AT).expect("vault size checked at join")
    }

    pub(crate) fn rank<'r>(&self, region: &'r Region, rank: u32) -> &'r RankEntry {
        region
            .view(RANKS_AT + rank as usize * size_of::<RankEntry>())
            .expect("vault size checked at join")
    }

    /// Offset of `rank`'s data slot in buffer `parity` (0 or 1): its length
    /// word, followed by the bytes.
    pub(crate) fn data_slot(&self, parity: usize, rank: u32) -> usize {
        self.data_at() + (parity * self.world_size as usize + rank as usize) * self.data_stride()
    }

    pub(crate) fn handle_slot(&self, parity: usize, rank: u32) -> usize {
        self.handles_at() + (parity * self.world_size as usize + rank as usize) * HANDLE_SLOT
    }
}

#[inline]
pub(crate) fn header(region: &Region) -> &Header {
    region.view(HEADER_AT).expect("every vault holds a header")
}

/// Checks a vault rank 0 published against this rank's expectations, and
/// that the region holds everything the header describes.
pub(crate) fn validate(group: &str, region: &Region, ours: Layout) -> Result<()> {
    let header = header(region);
    let magic = header.magic.load(Ordering::Relaxed);
    if magic != MAGIC {
        return Err(Error::NotAVault {
            group: group.to_owned(),
            magic,
        });
    }
    let mismatch = |what, ours: u64, theirs: u64| Error::Mismatch {
        group: group.to_owned(),
        what,
        ours,
        theirs,
    };
    let version = header.version.load(Ordering::Relaxed);
    if version != LAYOUT_VERSION {
        return Err(mismatch(
            "layout version",
            LAYOUT_VERSION.into(),
            version.into(),
        ));
    }
    let world = header.world_size.load(Ordering::Relaxed);
    if world != ours.world_size {
        return Err(mismatch("world size", ours.world_size.into(), world.into()));
    }
    let slot = header.slot_size.load(Ordering::Relaxed);
    if slot as usize != ours.slot_size {
        return Err(mismatch("slot size", ours.slot_size as u64, slot.into()));
    }
    if region.len() < ours.size() {
        return Err(mismatch(
            "vault size",
            ours.size() as u64,
            region.len() as u64,
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Cause;

    #[test]
    fn every_known_cause_survives_the_vault_word() {
        for cause in [
            Cause::Died,
            Cause::Left,
            Cause::TimedOut,
            Cause::Failed,
            Cause::Interrupted,
        ] {
            assert_eq!(Cause::from_raw(cause.to_raw()), cause);
            assert!(!cause.describe().contains("unknown"), "{cause:?}");
        }
        assert_eq!(Cause::from_raw(3), Cause::TimedOut);
    }

    #[test]
    fn an_unknown_cause_is_kept_and_named_never_taken_for_a_timeout() {
        for raw in [0u32, 6, 99, u32::MAX] {
            let cause = Cause::from_raw(raw);
            assert_eq!(cause, Cause::Unknown(raw));
            assert_eq!(cause.to_raw(), raw);
            let text = cause.describe();
            assert!(text.contains(&format!("unknown cause {raw}")), "{text}");
            assert!(!text.contains("timed out"), "{text}");
        }
    }
}
