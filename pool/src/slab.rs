//! One slab's block states: the transitions every process makes, on atomics
//! alone, so the loom models drive exactly this code.
//!
//! Each block has a descriptor word outside the block: a 24-bit generation
//! and an 8-bit state (free, allocated, remotely freed). Remote frees are
//! never linked through the freed blocks (a write after free could then
//! send a walk anywhere): a remote freer sets the block's bit in the slab's
//! remote bitmap, then marks the descriptor; the owner's clean-up swaps the
//! bitmap words to zero, turns each marked descriptor back to free and
//! keeps the bits of blocks not marked yet. Every
//! transition is a compare-and-swap from the exact word expected, so a
//! double free, a stale generation or a block freed twice at once is
//! refused, and a clean-up racing an adoption frees each block once.

use crate::sync::{AtomicU32, AtomicU64, Ordering};

/// The most blocks a slab holds (a 64 KiB slab of 256-byte blocks).
pub const MAX_BLOCKS: usize = 256;
/// Words of a slab's remote bitmap.
pub(crate) const BITMAP_WORDS: usize = MAX_BLOCKS / 64;

pub(crate) const FREE: u32 = 0;
pub(crate) const ALLOCATED: u32 = 1;
pub(crate) const REMOTE_FREED: u32 = 2;
/// Generations are 24 bits: a stale reference to a block reused 2^24 times
/// since would pass (documented).
pub(crate) const GEN_MASK: u32 = (1 << 24) - 1;

#[inline]
pub(crate) fn word(generation: u32, state: u32) -> u32 {
    (generation & GEN_MASK) << 8 | state
}

#[inline]
pub(crate) fn generation(word: u32) -> u32 {
    word >> 8
}

#[inline]
pub(crate) fn state(word: u32) -> u32 {
    word & 0xff
}

/// Why a transition was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The descriptor's generation is not the reference's.
    Stale { found: u32 },
    /// The block is not allocated (free, or already freed).
    NotAllocated { state: u32 },
}

pub(crate) fn check(found: u32, generation: u32) -> Refused {
    if self::generation(found) != generation & GEN_MASK {
        Refused::Stale {
            found: self::generation(found),
        }
    } else {
        Refused::NotAllocated {
            state: state(found),
        }
    }
}

/// What a clean-up found at a remote bit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Marked {
    /// Freed remotely: now free, the owner's again.
    Reclaimed,
    /// Still allocated: its freer may not have marked it yet.
    Allocated,
    /// Free already (taken back by an adoption, or a refused free's stray
    /// bit), or a state only a hostile writer makes.
    Other,
}

/// A slab's descriptors and remote bitmap.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Slab<'a> {
    pub(crate) descriptors: &'a [AtomicU32],
    pub(crate) remote: &'a [AtomicU64],
}

#[cfg_attr(loom, allow(dead_code))]
impl Slab<'_> {
    /// The owner allocates block `index` if it is free: returns the new
    /// generation, or `None` if it was not free (a hostile writer, or a
    /// stale private list): the caller drops it from its list.
    pub(crate) fn allocate(&self, index: usize) -> Option<u32> {
        let desc = self.descriptors.get(index)?;
        let found = desc.load(Ordering::Acquire);
        if state(found) != FREE {
            return None;
        }
        let next = (generation(found) + 1) & GEN_MASK;
        desc.compare_exchange(
            found,
            word(next, ALLOCATED),
            Ordering::AcqRel,
            Ordering::Acquire,
        )
        .ok()
        .map(|_| next)
    }

    /// The owner frees its own block: straight back to free.
    pub(crate) fn free_local(&self, index: usize, generation: u32) -> Result<(), Refused> {
        let desc = &self.descriptors[index];
        desc.compare_exchange(
            word(generation, ALLOCATED),
            word(generation, FREE),
            Ordering::AcqRel,
            Ordering::Acquire,
        )
        .map(|_| ())
        .map_err(|found| check(found, generation))
    }

    /// Another process frees the block: sets its bit for the owner's
    /// clean-up, then marks it. Bit first: a freer killed between the two
    /// leaves a stray bit on a block still allocated (its free not done;
    /// whoever holds the block may free it again), never a block marked
    /// freed that no bit points the owner to (stranded for good). A
    /// clean-up that meets the bit before the mark keeps the bit.
    pub(crate) fn free_remote(&self, index: usize, generation: u32) -> Result<(), Refused> {
        self.remote[index / 64].fetch_or(1 << (index % 64), Ordering::AcqRel);
        self.mark_remote(index, generation)
    }

    /// The mark of a remote free alone, after its bit: [`set_bits`](Slab::set_bits)
    /// sets the bits of a batch with one read-modify-write per bitmap word.
    pub(crate) fn mark_remote(&self, index: usize, generation: u32) -> Result<(), Refused> {
        self.descriptors[index]
            .compare_exchange(
                word(generation, ALLOCATED),
                word(generation, REMOTE_FREED),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .map(|_| ())
            .map_err(|found| check(found, generation))
    }

    pub(crate) fn set_bits(&self, bits: &[u64; BITMAP_WORDS]) {
        for (word, bits) in self.remote.iter().zip(bits) {
            if *bits != 0 {
                word.fetch_or(*bits, Ordering::AcqRel);
            }
        }
    }

    /// The owner's clean-up: takes every remotely freed block back, calling
    /// `freed` once per block now free. `out` is the owner's own record of
    /// the slab's blocks it handed out (one bit a block): a block is taken
    /// back only if it was handed out, and its bit in `out` cleared then.
    ///
    /// Every state read is checked against `out`: a bit on a block still
    /// allocated and handed out is kept for the next clean-up (its freer
    /// may be between its bit and its mark); a stale bit on a free block
    /// not handed out is dropped; anything else only another writer makes
    /// (a block "freed" or "allocated" that the owner never handed out: it
    /// is in the owner's list, and is put back to free; a handed-out block
    /// "free"; a state no process writes) is passed to `forged` with the
    /// word found. Bounded: one swap per bitmap word, one compare-and-swap
    /// per bit, one more read-modify-write per word whose bits are kept.
    pub(crate) fn collect_remote(
        &self,
        blocks: usize,
        out: &mut [u64; BITMAP_WORDS],
        mut freed: impl FnMut(usize),
        mut forged: impl FnMut(usize, u32),
    ) {
        for (w, bitmap) in self.remote.iter().enumerate() {
            let mut bits = bitmap.swap(0, Ordering::AcqRel);
            let mut kept = 0;
            while bits != 0 {
                let bit = bits & bits.wrapping_neg();
                bits &= bits - 1;
                let index = w * 64 + bit.trailing_zeros() as usize;
                if index >= blocks {
                    continue;
                }
                let handed_out = out[w] & bit != 0;
                let desc = &self.descriptors[index];
                let found = desc.load(Ordering::Acquire);
                match (state(found), handed_out) {
                    (REMOTE_FREED, true) => {
                        if self.reclaim_marked(index) == Marked::Reclaimed {
                            out[w] &= !bit;
                            freed(index);
                        }
                    }
                    (ALLOCATED, true) => kept |= bit,
                    (FREE, false) => {}
                    (REMOTE_FREED | ALLOCATED, false) => {
                        // In the owner's list: free it is.
                        let _ = desc.compare_exchange(
                            found,
                            word(generation(found), FREE),
                            Ordering::AcqRel,
                            Ordering::Acquire,
                        );
                        forged(index, found);
                    }
                    _ => forged(index, found),
                }
            }
            if kept != 0 {
                bitmap.fetch_or(kept, Ordering::AcqRel);
            }
        }
    }

    /// Turns a remotely freed block back to free.
    fn reclaim_marked(&self, index: usize) -> Marked {
        let desc = &self.descriptors[index];
        let found = desc.load(Ordering::Acquire);
        match state(found) {
            REMOTE_FREED
                if desc
                    .compare_exchange(
                        found,
                        word(generation(found), FREE),
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    )
                    .is_ok() =>
            {
                Marked::Reclaimed
            }
            ALLOCATED => Marked::Allocated,
            _ => Marked::Other,
        }
    }

    /// Adoption of a dead owner's slab: every free or remotely freed block
    /// becomes the adopter's (`freed` once each); allocated ones stay live
    /// until their holder frees them: the adopter counts them as handed out
    /// (a bit each in the returned record). Bounded by `blocks`.
    pub(crate) fn adopt(&self, blocks: usize, mut freed: impl FnMut(usize)) -> [u64; BITMAP_WORDS] {
        let mut out = [0; BITMAP_WORDS];
        for index in 0..blocks.min(self.descriptors.len()) {
            let found = self.descriptors[index].load(Ordering::Acquire);
            match state(found) {
                FREE => freed(index),
                REMOTE_FREED if self.reclaim_marked(index) == Marked::Reclaimed => freed(index),
                ALLOCATED => out[index / 64] |= 1 << (index % 64),
                _ => {}
            }
        }
        out
    }

    /// Whether no block of the slab was ever allocated (every descriptor
    /// still generation 0, free): no reference to it can exist, so it may
    /// take any class.
    pub(crate) fn pristine(&self) -> bool {
        self.descriptors
            .iter()
            .all(|d| d.load(Ordering::Acquire) == 0)
    }

    /// Blocks allocated or awaiting the owner's clean-up.
    pub(crate) fn occupied(&self, blocks: usize) -> usize {
        self.descriptors
            .iter()
            .take(blocks)
            .filter(|d| state(d.load(Ordering::Relaxed)) != FREE)
            .count()
    }
}
