//! Copies in and out of live blocks, every block and range checked first.

use super::*;

impl Handle {
    /// Checks `block` is live (its slab owned, its generation current, its
    /// state allocated, and, in a slab of ours, handed out by us); returns
    /// its region offset and size.
    pub(crate) fn checked_block(&self, block: BlockRef) -> Result<(usize, u32)> {
        let loc = self.locate(block)?;
        let found = self.slab(loc.slab)?.descriptors[loc.index].load(Ordering::Acquire);
        if slab::generation(found) != block.generation() & slab::GEN_MASK
            || slab::state(found) != slab::ALLOCATED
        {
            return Err(self.refused(
                block,
                if slab::generation(found) != block.generation() & slab::GEN_MASK {
                    Refused::Stale {
                        found: slab::generation(found),
                    }
                } else {
                    Refused::NotAllocated {
                        state: slab::state(found),
                    }
                },
            ));
        }
        if Some(loc.owner) == self.me && !self.handed_out(loc.slab, loc.index) {
            return Err(self.forged(block.offset(), "allocated".to_owned(), NEVER_HANDED_OUT));
        }
        Ok((block.offset() as usize, loc.class))
    }

    /// Checks `block` is live and `at..at + len` lies in it; returns the
    /// region offset to copy at.
    pub(super) fn checked_range(&self, block: BlockRef, at: usize, len: usize) -> Result<usize> {
        let (offset, size) = self.checked_block(block)?;
        match at.checked_add(len) {
            Some(end) if end <= size as usize => Ok(offset + at),
            _ => Err(Error::OutOfBlock {
                pool: self.label(),
                offset: block.offset(),
                at,
                len,
                size,
            }),
        }
    }

    /// Copies `buf.len()` bytes at `at` in `block` out.
    ///
    /// # Errors
    /// [`Error::NotABlock`], [`Error::Stale`], [`Error::NotAllocated`],
    /// [`Error::OutOfBlock`].
    pub fn read_at(&self, block: BlockRef, at: usize, buf: &mut [u8]) -> Result<()> {
        let offset = self.checked_range(block, at, buf.len())?;
        Ok(self.region.read_at(offset, buf)?)
    }

    /// Copies `data` into `block` at `at`.
    ///
    /// # Errors
    /// As [`read_at`](Handle::read_at).
    pub fn write_at(&self, block: BlockRef, at: usize, data: &[u8]) -> Result<()> {
        let offset = self.checked_range(block, at, data.len())?;
        Ok(self.region.write_at(offset, data)?)
    }
}
