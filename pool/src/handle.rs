//! A handle: allocates from the slabs it owns, frees anyone's blocks (its
//! own at once, others' through their owner's remote bitmap), reads and
//! writes blocks by copy, cleans up, and adopts what dead handles held.

use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use nodeipc_fdpass::{Identity, Taken};
use nodeipc_shm::Region;

use crate::block_ref::BlockRef;
use crate::layout::{Geometry, SLAB_SIZE};
use crate::occupancy::{Occupancy, occupancy_of};
use crate::pool::{entry, read_geometry};
use crate::slab::{self, BITMAP_WORDS, MAX_BLOCKS, Refused, Slab};
use crate::slab_table::{SlabMeta, shifts, views};
use crate::{Error, Result};

mod access;
mod locate;
mod reclaim;

pub use reclaim::Reclaimed;

/// What our books say of a block the region calls allocated or freed.
const NEVER_HANDED_OUT: &str =
    "its owner (this handle) never handed it out: it is in its free list";

/// A located, checked block.
struct Located {
    slab: u32,
    index: usize,
    /// The block size.
    class: u32,
    /// Its class's index.
    class_index: usize,
    owner: u32,
}

/// One process's (or thread's) access to a pool.
#[derive(Debug)]
pub struct Handle {
    region: Arc<Region>,
    geo: Geometry,
    /// Our handle index, or `None` for a free-only handle.
    me: Option<u32>,
    /// Our pid and start time, as our handle's record holds them.
    ident: Identity,
    /// Per class, the free blocks of our slabs as `slab × 256 + index`:
    /// private memory, rebuilt from the descriptors on adoption.
    free: Vec<Vec<u32>>,
    /// Per class, log2 of its size when a power of two (a shift, not a
    /// division, on every free).
    shifts: Vec<Option<u32>>,
    /// Our own books, per slab: `None` for a slab we do not hold, else one
    /// bit per block we handed out (or adopted allocated) and have not had
    /// back. Private memory: every state read from the region is checked
    /// against it (empty for a free-only handle).
    books: Vec<Option<[u64; BITMAP_WORDS]>>,
    /// The slab table and the descriptors, viewed (bounds and alignment
    /// checked) once at join.
    metas: NonNull<SlabMeta>,
    descriptors: NonNull<AtomicU32>,
}

// SAFETY: the pointers point into the mapping `region` keeps alive, and
// every access through them is atomic: a handle may move between threads.
unsafe impl Send for Handle {}
// SAFETY: as above; `&Handle` only reads atomics and copies.
unsafe impl Sync for Handle {}

impl Handle {
    /// Takes a handle of the pool in `region`: a vacant one, else one whose
    /// holder is dead (its slabs adopted). Slabs left owned by the handle's
    /// previous holder become ours.
    ///
    /// # Errors
    /// [`Error::BadHeader`]; [`Error::NoHandleFree`] naming the holders.
    pub fn join(region: Arc<Region>) -> Result<Handle> {
        let mut handle = Handle::unjoined(region)?;
        // A vacant handle first; only then one whose holder is dead.
        let mut holders = Vec::new();
        for take_over in [false, true] {
            for h in 0..handle.geo.handles {
                match handle.take(h, take_over)? {
                    Taken::Vacant | Taken::FromDead(_) => return Ok(handle),
                    Taken::Refused(pid) if take_over => holders.push(pid),
                    Taken::Refused(_) => {}
                }
            }
        }
        Err(Error::NoHandleFree {
            pool: handle.region.label().to_owned(),
            handles: handle.geo.handles,
            holders,
        })
    }

    /// Takes handle `id` of the pool in `region` (as rts-alloc's
    /// `join(&file, id)`): vacant, or held by a dead process (its slabs
    /// adopted). Slabs left owned by the handle's previous holder become
    /// ours.
    ///
    /// # Errors
    /// [`Error::BadHeader`]; [`Error::InvalidArgument`] for an `id` past the
    /// pool's handles; [`Error::HandleTaken`] naming its live holder.
    pub fn join_id(region: Arc<Region>, id: u32) -> Result<Handle> {
        let mut handle = Handle::unjoined(region)?;
        if id >= handle.geo.handles {
            return Err(Error::InvalidArgument {
                pool: handle.label(),
                what: "handle id",
                value: u64::from(id),
                limit: "must be below the pool's number of handles",
            });
        }
        match handle.take(id, true)? {
            Taken::Vacant | Taken::FromDead(_) => Ok(handle),
            Taken::Refused(pid) => Err(Error::HandleTaken {
                pool: handle.label(),
                handle: id,
                pid,
            }),
        }
    }

    /// A handle that holds no slot yet.
    fn unjoined(region: Arc<Region>) -> Result<Handle> {
        let geo = read_geometry(&region)?;
        let ident = Identity::current()?;
        let (metas, descriptors) = views(&region, &geo)?;
        Ok(Handle {
            free: vec![Vec::new(); geo.classes.len()],
            shifts: shifts(&geo),
            books: vec![None; geo.slabs as usize],
            metas,
            descriptors,
            region,
            geo,
            me: None,
            ident,
        })
    }

    /// Tries to take handle `h` (a dead holder's only with `take_over`);
    /// taken, it is ours and its slabs adopted.
    fn take(&mut self, h: u32, take_over: bool) -> Result<Taken> {
        let region = self.region.clone();
        let taken = entry(&region, &self.geo, h)?.take(self.ident, take_over)?;
        if matches!(taken, Taken::Vacant | Taken::FromDead(_)) {
            self.me = Some(h);
            self.adopt_slabs_of(h, false)?;
        }
        Ok(taken)
    }

    /// Opens the named pool (waiting up to `timeout` for its creator) and
    /// takes a handle.
    ///
    /// # Errors
    /// As [`join`](Handle::join), and those of `Region::open`.
    pub fn open(name: &str, timeout: std::time::Duration) -> Result<Handle> {
        Handle::join(crate::pool::open_named(name, timeout)?)
    }

    /// Opens the named pool as a free-only handle.
    ///
    /// # Errors
    /// As [`free_only`](Handle::free_only), and those of `Region::open`.
    pub fn open_free_only(name: &str, timeout: std::time::Duration) -> Result<Handle> {
        Handle::free_only(crate::pool::open_named(name, timeout)?)
    }

    /// A handle that frees (always remotely), reads and writes, but never
    /// allocates, and takes no handle slot.
    ///
    /// # Errors
    /// [`Error::BadHeader`].
    pub fn free_only(region: Arc<Region>) -> Result<Handle> {
        let geo = read_geometry(&region)?;
        let (metas, descriptors) = views(&region, &geo)?;
        Ok(Handle {
            free: vec![Vec::new(); geo.classes.len()],
            shifts: shifts(&geo),
            books: Vec::new(),
            metas,
            descriptors,
            region,
            geo,
            me: None,
            ident: Identity {
                pid: std::process::id(),
                start_time: 0,
            },
        })
    }

    /// Our handle index (`None`: free-only).
    pub fn index(&self) -> Option<u32> {
        self.me
    }

    /// The region the pool lives in.
    pub(crate) fn region(&self) -> &Arc<Region> {
        &self.region
    }

    /// Reads `block` in place: checks it (as [`read_at`](Handle::read_at)
    /// does) and returns a view of its words.
    ///
    /// # Errors
    /// [`Error::NotABlock`], [`Error::Stale`], [`Error::NotAllocated`],
    /// [`Error::Forged`].
    pub fn view(&self, block: BlockRef) -> Result<crate::BlockView<'_>> {
        crate::BlockView::new(self, block)
    }

    fn label(&self) -> String {
        self.region.label().to_owned()
    }

    #[inline]
    fn metas(&self) -> &[SlabMeta] {
        // SAFETY: `views` checked `slabs` entries at join; the mapping lives
        // as long as `self.region`; every access is atomic.
        unsafe { std::slice::from_raw_parts(self.metas.as_ptr(), self.geo.slabs as usize) }
    }

    #[inline]
    fn all_descriptors(&self) -> &[AtomicU32] {
        // SAFETY: as in `metas`, for `slabs × MAX_BLOCKS` words.
        unsafe {
            std::slice::from_raw_parts(
                self.descriptors.as_ptr(),
                self.geo.slabs as usize * MAX_BLOCKS,
            )
        }
    }

    #[inline]
    fn meta(&self, slab: u32) -> Result<&SlabMeta> {
        self.metas()
            .get(slab as usize)
            .ok_or_else(|| Error::NotABlock {
                pool: self.label(),
                offset: 0,
                reason: format!("slab {slab} past the last of {}", self.geo.slabs),
            })
    }

    #[inline]
    fn owner_word(&self, slab: u32) -> Result<&AtomicU32> {
        Ok(&self.meta(slab)?.owner)
    }

    #[inline]
    fn class_word(&self, slab: u32) -> Result<&AtomicU32> {
        Ok(&self.meta(slab)?.class)
    }

    #[inline]
    fn slab(&self, slab: u32) -> Result<Slab<'_>> {
        let meta = self.meta(slab)?;
        let at = slab as usize * MAX_BLOCKS;
        Ok(Slab {
            descriptors: &self.all_descriptors()[at..at + MAX_BLOCKS],
            remote: &meta.remote,
        })
    }

    /// The class index of a slab, read once and checked.
    fn class_of(&self, slab: u32) -> Result<Option<usize>> {
        let class = self.class_word(slab)?.load(Ordering::Acquire) as usize;
        Ok((class < self.geo.classes.len()).then_some(class))
    }

    /// Whether slab `slab` is ours in our books.
    #[inline]
    fn holds(&self, slab: u32) -> bool {
        self.books.get(slab as usize).is_some_and(Option::is_some)
    }

    /// Whether we handed block `index` of slab `slab` out (and have not had
    /// it back), in our books.
    #[inline]
    fn handed_out(&self, slab: u32, index: usize) -> bool {
        self.books
            .get(slab as usize)
            .and_then(Option::as_ref)
            .is_some_and(|out| out[index / 64] >> (index % 64) & 1 == 1)
    }

    /// Records block `index` of our slab `slab` as handed out or back.
    #[inline]
    fn book(&mut self, slab: u32, index: usize, out: bool) {
        if let Some(Some(books)) = self.books.get_mut(slab as usize) {
            let bit = 1 << (index % 64);
            if out {
                books[index / 64] |= bit;
            } else {
                books[index / 64] &= !bit;
            }
        }
    }

    /// A word of the region that contradicts our books.
    fn forged(&self, offset: u64, found: String, known: &'static str) -> Error {
        Error::Forged {
            pool: self.label(),
            offset,
            found,
            known,
        }
    }

    /// Allocates a block of at least `size` bytes.
    ///
    /// # Errors
    /// [`Error::TooLarge`]; [`Error::Full`] when no slab is left;
    /// [`Error::InvalidArgument`] from a free-only handle; [`Error::Forged`]
    /// when the clean-up it runs met a forged state (it finished: the next
    /// call goes on).
    pub fn alloc(&mut self, size: usize) -> Result<BlockRef> {
        let Some(me) = self.me else {
            return Err(Error::InvalidArgument {
                pool: self.label(),
                what: "allocation from a free-only handle",
                value: size as u64,
                limit: "free-only handles cannot allocate",
            });
        };
        let largest = *self.geo.classes.last().unwrap_or(&0);
        let Some(class) = self.geo.classes.iter().position(|&c| size <= c as usize) else {
            return Err(Error::TooLarge {
                pool: self.label(),
                size,
                largest,
            });
        };
        // Our list, then our remote frees, then a new slab: each bounded.
        for step in 0..3 {
            while let Some(packed) = self.free[class].pop() {
                let (s, i) = (
                    packed / MAX_BLOCKS as u32,
                    (packed % MAX_BLOCKS as u32) as usize,
                );
                if let Some(generation) = self.slab(s)?.allocate(i) {
                    self.book(s, i, true);
                    let offset = self.geo.slab_data(s) + i * self.geo.classes[class] as usize;
                    return Ok(BlockRef::new(offset as u64, generation));
                }
            }
            match step {
                0 => {
                    self.clean_remote_frees()?;
                }
                1 if !self.claim_slab(me, class)? => break,
                _ => {}
            }
        }
        Err(Error::Full {
            pool: self.label(),
            size,
            class: self.geo.classes[class],
        })
    }

    /// Takes an unowned slab for `class`; `false` when none is left. A
    /// slab handed back keeps its class: taking it for another would let a
    /// stale reference to one of its old blocks land on a new block whose
    /// descriptor happens to carry the same generation. Only a slab none
    /// of whose blocks was ever allocated changes class.
    fn claim_slab(&mut self, me: u32, class: usize) -> Result<bool> {
        for s in 0..self.geo.slabs {
            let owner = self.owner_word(s)?;
            if owner.load(Ordering::Relaxed) != 0
                || (self.class_word(s)?.load(Ordering::Acquire) as usize != class
                    && !self.slab(s)?.pristine())
                || owner
                    .compare_exchange(0, me + 1, Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
            {
                continue;
            }
            self.class_word(s)?.store(class as u32, Ordering::Release);
            let n = Geometry::blocks(self.geo.classes[class]);
            let mut found = Vec::new();
            let out = self
                .slab(s)?
                .adopt(n, |i| found.push(s * MAX_BLOCKS as u32 + i as u32));
            self.books[s as usize] = Some(out);
            // Lowest offsets first out.
            found.reverse();
            self.free[class].extend(found);
            return Ok(true);
        }
        Ok(false)
    }

    /// Frees a block: ours straight back to our list, another handle's
    /// through its remote bitmap.
    ///
    /// # Errors
    /// [`Error::NotABlock`], [`Error::Stale`], [`Error::NotAllocated`] (a
    /// double free), [`Error::Forged`] (a block of ours marked allocated
    /// that we never handed out, a slab's owner word that contradicts our
    /// books): nothing changes then.
    pub fn free(&mut self, block: BlockRef) -> Result<()> {
        let at = self.locate(block)?;
        let slab = self.slab(at.slab)?;
        if Some(at.owner) == self.me {
            if !self.handed_out(at.slab, at.index) {
                // In our list: "allocated" there is forged; anything else
                // is the usual refusal (a double free, a stale reference).
                let found = slab.descriptors[at.index].load(Ordering::Acquire);
                return Err(match slab::check(found, block.generation()) {
                    Refused::NotAllocated {
                        state: slab::ALLOCATED,
                    } => self.forged(block.offset(), "allocated".to_owned(), NEVER_HANDED_OUT),
                    refused => self.refused(block, refused),
                });
            }
            slab.free_local(at.index, block.generation())
                .map_err(|r| self.refused(block, r))?;
            self.book(at.slab, at.index, false);
            self.free[at.class_index].push(at.slab * MAX_BLOCKS as u32 + at.index as u32);
        } else {
            slab.free_remote(at.index, block.generation())
                .map_err(|r| self.refused(block, r))?;
        }
        Ok(())
    }

    /// Frees many blocks, setting each owner's remote bits once per bitmap
    /// word rather than once per block. Every block is tried; the first
    /// refusal is returned after the others are freed.
    ///
    /// The bits of the whole batch are set before any block is marked (as
    /// [`free`](Handle::free) does for one block): killed midway, this
    /// process leaves blocks freed (bit and mark) or still allocated (a
    /// stray bit the owner keeps), none marked freed with no bit to find it.
    ///
    /// # Errors
    /// As [`free`](Handle::free), for the first refused block.
    pub fn free_batch(&mut self, blocks: &[BlockRef]) -> Result<()> {
        let mut first_error = None;
        let mut pending: Vec<(u32, [u64; BITMAP_WORDS])> = Vec::new();
        let mut remote: Vec<(Located, BlockRef)> = Vec::new();
        for &block in blocks {
            let result = self.locate(block).and_then(|at| {
                if Some(at.owner) == self.me {
                    return self.free(block);
                }
                let bits = match pending.iter_mut().find(|(s, _)| *s == at.slab) {
                    Some((_, bits)) => bits,
                    None => {
                        pending.push((at.slab, [0; BITMAP_WORDS]));
                        &mut pending.last_mut().expect("just pushed").1
                    }
                };
                bits[at.index / 64] |= 1 << (at.index % 64);
                remote.push((at, block));
                Ok(())
            });
            if let Err(e) = result {
                first_error.get_or_insert(e);
            }
        }
        for (s, bits) in &pending {
            self.slab(*s)?.set_bits(bits);
        }
        for (at, block) in remote {
            if let Err(refused) = self
                .slab(at.slab)?
                .mark_remote(at.index, block.generation())
            {
                first_error.get_or_insert(self.refused(block, refused));
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Takes back the blocks other processes freed in our slabs; returns how
    /// many. Bounded: one swap per bitmap word of each slab we own.
    ///
    /// Only a block we handed out is taken back; every state read is checked
    /// against our books (see [`Error::Forged`]). A forged one is put right
    /// where it can be (a block of our list marked freed or allocated is
    /// free again, never listed twice) and the clean-up goes on.
    ///
    /// # Errors
    /// [`Error::Forged`] naming the first contradiction met, after the
    /// clean-up finished; those of the region's own checks.
    pub fn clean_remote_frees(&mut self) -> Result<usize> {
        let Some(me) = self.me else { return Ok(0) };
        let mut taken = 0;
        let mut first_forged = None;
        for s in 0..self.geo.slabs {
            let Some(mut out) = self.books[s as usize] else {
                continue;
            };
            let owner = self.owner_word(s)?.load(Ordering::Acquire);
            if owner != me + 1 {
                first_forged.get_or_insert_with(|| {
                    self.forged(
                        self.geo.slab_data(s) as u64,
                        format!("in slab {s} owned by handle {}", owner.wrapping_sub(1)),
                        "this handle took that slab and holds it still",
                    )
                });
                continue;
            }
            let Some(class) = self.class_of(s)? else {
                continue;
            };
            let size = self.geo.classes[class] as usize;
            let n = Geometry::blocks(self.geo.classes[class]);
            let mut found = Vec::new();
            let mut forged = None;
            self.slab(s)?.collect_remote(
                n,
                &mut out,
                |i| found.push(s * MAX_BLOCKS as u32 + i as u32),
                |i, word| {
                    forged.get_or_insert((i, word));
                },
            );
            self.books[s as usize] = Some(out);
            if let Some((i, word)) = forged {
                let handed_out = out[i / 64] >> (i % 64) & 1 == 1;
                first_forged.get_or_insert_with(|| {
                    self.forged(
                        (self.geo.slab_data(s) + i * size) as u64,
                        match slab::state(word) {
                            slab::FREE => "free".to_owned(),
                            slab::ALLOCATED => "allocated".to_owned(),
                            slab::REMOTE_FREED => "freed remotely".to_owned(),
                            other => format!("in state {other}, which no process writes"),
                        },
                        if handed_out {
                            "its owner (this handle) handed it out and has not had it back"
                        } else {
                            NEVER_HANDED_OUT
                        },
                    )
                });
            }
            taken += found.len();
            self.free[class].extend(found);
        }
        first_forged.map_or(Ok(taken), Err)
    }

    /// Blocks our slabs hold (allocated, or freed remotely and not yet cleaned up).
    ///
    /// # Errors
    /// Only from the region's own checks.
    pub fn occupancy(&self) -> Result<usize> {
        match self.me {
            Some(me) => Ok(occupancy_of(&self.region, &self.geo, me)?.blocks),
            None => Ok(0),
        }
    }

    /// Every handle's occupancy.
    ///
    /// # Errors
    /// Only from the region's own checks.
    pub fn occupancy_all(&self) -> Result<Vec<Occupancy>> {
        (0..self.geo.handles)
            .map(|h| occupancy_of(&self.region, &self.geo, h))
            .collect()
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // The slot goes back; our slabs stay ours until the next holder of
        // this slot (or a reclaim) adopts them, blocks still live included.
        if let Some(h) = self.me
            && let Ok(record) = entry(&self.region, &self.geo, h)
        {
            record.leave(self.ident);
        }
    }
}
