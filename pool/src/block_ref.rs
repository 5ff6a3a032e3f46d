//! References to blocks, as messages carry them.

use crate::slab;

/// A reference to a block, to put in a message: its offset in the region
/// (40 bits) and its generation (24 bits). Never a pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BlockRef(u64);

impl BlockRef {
    const OFFSET_BITS: u32 = 40;

    pub(crate) fn new(offset: u64, generation: u32) -> BlockRef {
        BlockRef(u64::from(generation & slab::GEN_MASK) << Self::OFFSET_BITS | offset)
    }

    /// The reference as 64 bits, for a message.
    pub fn to_bits(self) -> u64 {
        self.0
    }

    /// A reference read from a message (checked when used, not here).
    pub fn from_bits(bits: u64) -> BlockRef {
        BlockRef(bits)
    }

    /// The block's offset in the region.
    pub fn offset(self) -> u64 {
        self.0 & ((1 << Self::OFFSET_BITS) - 1)
    }

    /// The block's generation when the reference was made.
    pub fn generation(self) -> u32 {
        (self.0 >> Self::OFFSET_BITS) as u32
    }
}
