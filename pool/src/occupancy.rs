//! Blocks held per handle, counted from the descriptors (for `Handle` and
//! for `nodeipc ls`, which reads a pool without joining it).

use std::sync::atomic::{AtomicU32, Ordering};

use nodeipc_shm::Region;

use crate::Result;
use crate::layout::{Geometry, REMOTE_AT};
use crate::pool::entry;
use crate::slab::{BITMAP_WORDS, MAX_BLOCKS, Slab};

/// Blocks held per handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Occupancy {
    /// The handle's index.
    pub handle: u32,
    /// Its holder (0: vacant).
    pub pid: u32,
    /// Blocks of its slabs allocated or awaiting its clean-up.
    pub blocks: usize,
}

/// Every handle's occupancy of the pool in `region`, read without joining
/// (for `nodeipc ls`); `None` when the region is not a pool.
pub fn inspect(region: &Region) -> Option<Vec<Occupancy>> {
    let geo = crate::pool::read_geometry(region).ok()?;
    (0..geo.handles)
        .map(|h| occupancy_of(region, &geo, h))
        .collect::<Result<Vec<_>>>()
        .ok()
}

pub(crate) fn occupancy_of(region: &Region, geo: &Geometry, h: u32) -> Result<Occupancy> {
    let mut blocks = 0;
    for s in 0..geo.slabs {
        let meta = geo.meta(s);
        if region.view::<AtomicU32>(meta)?.load(Ordering::Acquire) != h + 1 {
            continue;
        }
        let class = region.view::<AtomicU32>(meta + 4)?.load(Ordering::Acquire) as usize;
        let Some(&size) = geo.classes.get(class) else {
            continue;
        };
        let slab = Slab {
            descriptors: region.view_slice(geo.descriptors(s), MAX_BLOCKS)?,
            remote: region.view_slice(meta + REMOTE_AT, BITMAP_WORDS)?,
        };
        blocks += slab.occupied(Geometry::blocks(size));
    }
    Ok(Occupancy {
        handle: h,
        pid: entry(region, geo, h)?.pid.load(Ordering::Acquire),
        blocks,
    })
}
