//! The slab table's entries, and the views a handle takes once at join.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64};

use nodeipc_shm::Region;

use crate::Result;
use crate::layout::{Geometry, REMOTE_AT};
use crate::slab::{BITMAP_WORDS, MAX_BLOCKS};

/// A slab's entry in the slab table.
#[repr(C)]
#[derive(Debug)]
pub(crate) struct SlabMeta {
    /// 0: unowned; else the owning handle + 1.
    pub(crate) owner: AtomicU32,
    /// Index of its class.
    pub(crate) class: AtomicU32,
    pub(crate) remote: [AtomicU64; BITMAP_WORDS],
    _reserved: [AtomicU64; 3],
}

const _: () = assert!(size_of::<SlabMeta>() == crate::layout::SLAB_META_LEN);
const _: () = assert!(std::mem::offset_of!(SlabMeta, remote) == REMOTE_AT);

// SAFETY: `#[repr(C)]`, atomics only, any bit pattern valid, no pointer.
unsafe impl nodeipc_shm::ShmSafe for SlabMeta {}

pub(crate) type Views = (NonNull<SlabMeta>, NonNull<AtomicU32>);

pub(crate) fn views(region: &Region, geo: &Geometry) -> Result<Views> {
    let metas = region.view_slice::<SlabMeta>(geo.meta_at, geo.slabs as usize)?;
    let descriptors =
        region.view_slice::<AtomicU32>(geo.descriptors_at, geo.slabs as usize * MAX_BLOCKS)?;
    Ok((
        NonNull::from(metas).cast(),
        NonNull::from(descriptors).cast(),
    ))
}

pub(crate) fn shifts(geo: &Geometry) -> Vec<Option<u32>> {
    geo.classes
        .iter()
        .map(|c| c.is_power_of_two().then(|| c.trailing_zeros()))
        .collect()
}
