//! Taking over what dead handles held: their slabs adopted (those with no
//! live block handed back to the pool), their free and remotely freed
//! blocks made ours, their live blocks left live until their holders free
//! them.

use std::sync::atomic::Ordering;

use super::Handle;
use crate::layout::Geometry;
use crate::pool::entry;
use crate::slab::{BITMAP_WORDS, MAX_BLOCKS};
use crate::{Error, Result};

/// What a reclaim of dead handles took back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reclaimed {
    /// Dead handles released.
    pub handles: usize,
    /// Their slabs holding live blocks, now ours.
    pub slabs: usize,
    /// Their slabs with no live block, handed back to the pool for any
    /// handle to claim (so handles that die and are replaced do not use the
    /// slabs up).
    pub released: usize,
    /// Their free and remotely freed blocks, now ours to allocate.
    pub blocks: usize,
}

impl Handle {
    /// Adopts every slab whose owner word names handle `h`; returns (slabs,
    /// blocks, released). With `release_empty`, a slab with no block
    /// allocated or awaiting clean-up is handed back to the pool instead.
    pub(super) fn adopt_slabs_of(
        &mut self,
        h: u32,
        release_empty: bool,
    ) -> Result<(usize, usize, usize)> {
        let Some(me) = self.me else {
            return Ok((0, 0, 0));
        };
        let (mut slabs, mut blocks, mut released) = (0, 0, 0);
        for s in 0..self.geo.slabs {
            let owner = self.owner_word(s)?;
            if owner
                .compare_exchange(h + 1, me + 1, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
                && !(h == me && owner.load(Ordering::Acquire) == me + 1)
            {
                continue;
            }
            let Some(class) = self.class_of(s)? else {
                // A garbled class: the slab is ours, its blocks stay unused.
                self.books[s as usize] = Some([0; BITMAP_WORDS]);
                slabs += 1;
                continue;
            };
            let n = Geometry::blocks(self.geo.classes[class]);
            let mut found = Vec::new();
            let out = self
                .slab(s)?
                .adopt(n, |i| found.push(s * MAX_BLOCKS as u32 + i as u32));
            // Its remote frees are taken back: a slab left with no block
            // allocated goes back to the pool. Nobody else can change it
            // meanwhile: a free needs an allocated block, and only its
            // owner (now us) allocates. Its class stays, so a stale
            // reference into it is still told by its generation.
            if release_empty
                && self.slab(s)?.occupied(n) == 0
                && owner
                    .compare_exchange(me + 1, 0, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                self.books[s as usize] = None;
                released += 1;
                continue;
            }
            self.books[s as usize] = Some(out);
            slabs += 1;
            blocks += found.len();
            self.free[class].extend(found);
        }
        Ok((slabs, blocks, released))
    }

    /// Releases every handle whose holder is confirmed dead and adopts its
    /// slabs: their free and remotely freed blocks become ours; blocks still
    /// allocated stay live until their holders free them (to us).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] from a free-only handle.
    pub fn reclaim_dead(&mut self) -> Result<Reclaimed> {
        if self.me.is_none() {
            return Err(Error::InvalidArgument {
                pool: self.label(),
                what: "reclaim from a free-only handle",
                value: 0,
                limit: "only a handle that owns slabs can adopt them",
            });
        }
        let mut done = Reclaimed::default();
        for h in 0..self.geo.handles {
            if Some(h) == self.me {
                continue;
            }
            let region = self.region.clone();
            let record = entry(&region, &self.geo, h)?;
            let Some(holder) = record.holder() else {
                continue;
            };
            if nodeipc_fdpass::peer_alive(holder.pid, holder.start_time)? {
                continue;
            }
            let (slabs, blocks, released) = self.adopt_slabs_of(h, true)?;
            if record.vacate(holder, self.ident)? {
                done.handles += 1;
            }
            done.slabs += slabs;
            done.blocks += blocks;
            done.released += released;
        }
        Ok(done)
    }
}
