//! Finding the block a `BlockRef` names, every value read from the region
//! checked on the way, and the errors that name what was wrong.

use super::*;

impl Handle {
    /// Finds the block `block` names, checking every value read from the
    /// region: its slab exists and is owned, its class is one of ours, the
    /// offset is the start of a block.
    pub(super) fn locate(&self, block: BlockRef) -> Result<Located> {
        let offset = block.offset();
        let not_block = |reason: String| Error::NotABlock {
            pool: self.label(),
            offset,
            reason,
        };
        let data = offset
            .checked_sub(self.geo.data_at as u64)
            .ok_or_else(|| not_block("before the pool's data".to_owned()))?;
        let slab = data / u64::from(SLAB_SIZE);
        if slab >= u64::from(self.geo.slabs) {
            return Err(not_block(format!(
                "past the last of {} slabs",
                self.geo.slabs
            )));
        }
        let slab = slab as u32;
        let owner = self.owner_word(slab)?.load(Ordering::Acquire);
        if owner == 0 || owner > self.geo.handles {
            return Err(not_block(format!("its slab {slab} has no owner")));
        }
        let class = self
            .class_of(slab)?
            .ok_or_else(|| not_block(format!("its slab {slab} has an impossible class")))?;
        // The owner word read against our books: a slab is ours exactly
        // when we took it (claimed or adopted) and hold it still.
        if (Some(owner - 1) == self.me) != self.holds(slab) {
            return Err(self.forged(
                offset,
                format!("in slab {slab} owned by handle {}", owner - 1),
                if self.holds(slab) {
                    "this handle took that slab and holds it still"
                } else {
                    "this handle never took that slab"
                },
            ));
        }
        let size = self.geo.classes[class];
        let within = data % u64::from(SLAB_SIZE);
        let (index, rest) = match self.shifts[class] {
            Some(shift) => (within >> shift, within & (u64::from(size) - 1)),
            None => (within / u64::from(size), within % u64::from(size)),
        };
        if rest != 0 {
            return Err(not_block(format!(
                "not a multiple of the slab's block size {size}"
            )));
        }
        // A class that does not divide the slab leaves a tail no block
        // covers: a descriptor there (which only a hostile writer can mark
        // allocated) must not pass for a block that would run into the
        // next slab.
        let blocks = Geometry::blocks(size);
        if index >= blocks as u64 {
            return Err(not_block(format!(
                "past the last of the {blocks} blocks of {size} bytes in its slab {slab}"
            )));
        }
        Ok(Located {
            slab,
            index: index as usize,
            class: size,
            class_index: class,
            owner: owner - 1,
        })
    }

    pub(super) fn refused(&self, block: BlockRef, refused: Refused) -> Error {
        match refused {
            Refused::Stale { found } => Error::Stale {
                pool: self.label(),
                offset: block.offset(),
                generation: block.generation(),
                found,
            },
            Refused::NotAllocated { state } => Error::NotAllocated {
                pool: self.label(),
                offset: block.offset(),
                state: match state {
                    slab::FREE => "free",
                    slab::REMOTE_FREED => "freed, awaiting its owner's clean-up",
                    _ => "in an unknown state",
                },
            },
        }
    }
}
