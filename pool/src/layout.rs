//! The byte layout of a pool's region (see the README's table).

use crate::slab::{BITMAP_WORDS, MAX_BLOCKS};
use crate::{Error, Result};

/// "nodeipcP" in ASCII, little-endian.
pub const MAGIC: u64 = u64::from_le_bytes(*b"nodeipcP");
/// The layout version this build writes and joins.
pub const VERSION: u32 = 1;
/// Bytes of a slab.
pub const SLAB_SIZE: u32 = 64 * 1024;
/// The smallest block (so a slab holds at most `MAX_BLOCKS`).
pub const MIN_CLASS: u32 = SLAB_SIZE / MAX_BLOCKS as u32;
/// The most size classes.
pub const MAX_CLASSES: usize = 8;
/// The most handles.
pub const MAX_HANDLES: u32 = 1024;
/// The most slabs (4 GiB of blocks).
pub const MAX_SLABS: u32 = 65536;

pub(crate) const HEADER_LEN: usize = 128;
pub(crate) const HANDLE_LEN: usize = 64;
pub(crate) const SLAB_META_LEN: usize = 64;
/// Offset of the remote bitmap inside a slab's meta entry.
pub(crate) const REMOTE_AT: usize = 8;
pub(crate) const DESCRIPTORS_PER_SLAB: usize = MAX_BLOCKS * 4;

/// A pool's shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    /// Slabs of 64 KiB in all.
    pub slabs: u32,
    /// Allocating handles (processes or threads that allocate).
    pub handles: u32,
    /// Block sizes, increasing: multiples of 64 from 256 to 65536, at most 8.
    pub classes: Vec<u32>,
}

impl PoolConfig {
    /// `slabs` slabs, `handles` handles, classes 256 B to 64 KiB by powers of two
    /// (256 B is rts-alloc's smallest class).
    pub fn new(slabs: u32, handles: u32) -> PoolConfig {
        PoolConfig {
            slabs,
            handles,
            classes: vec![256, 512, 1024, 2048, 4096, 8192, 16384, 65536],
        }
    }
}

/// Where everything is, computed from the counts alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub(crate) slabs: u32,
    pub(crate) handles: u32,
    pub(crate) classes: Vec<u32>,
    pub(crate) handles_at: usize,
    pub(crate) meta_at: usize,
    pub(crate) descriptors_at: usize,
    pub(crate) data_at: usize,
    pub(crate) len: usize,
}

impl Geometry {
    pub(crate) fn new(pool: &str, cfg: &PoolConfig) -> Result<Geometry> {
        let invalid = |what, value: u64, limit| Error::InvalidArgument {
            pool: pool.to_owned(),
            what,
            value,
            limit,
        };
        if cfg.slabs == 0 || cfg.slabs > MAX_SLABS {
            return Err(invalid(
                "slab count",
                cfg.slabs.into(),
                "must be 1 to 65536",
            ));
        }
        if cfg.handles == 0 || cfg.handles > MAX_HANDLES {
            return Err(invalid(
                "handle count",
                cfg.handles.into(),
                "must be 1 to 1024",
            ));
        }
        if cfg.classes.is_empty() || cfg.classes.len() > MAX_CLASSES {
            return Err(invalid(
                "class count",
                cfg.classes.len() as u64,
                "must be 1 to 8",
            ));
        }
        let mut previous = 0;
        for &class in &cfg.classes {
            if !(MIN_CLASS..=SLAB_SIZE).contains(&class) || class % 64 != 0 || class <= previous {
                return Err(invalid(
                    "block size",
                    class.into(),
                    "classes must increase, each a multiple of 64 from 256 to 65536",
                ));
            }
            previous = class;
        }
        // Counts are bounded above, so none of this overflows a usize.
        let handles_at = HEADER_LEN;
        let meta_at = handles_at + cfg.handles as usize * HANDLE_LEN;
        let descriptors_at = meta_at + cfg.slabs as usize * SLAB_META_LEN;
        let data_at =
            (descriptors_at + cfg.slabs as usize * DESCRIPTORS_PER_SLAB).next_multiple_of(4096);
        let len = data_at + cfg.slabs as usize * SLAB_SIZE as usize;
        Ok(Geometry {
            slabs: cfg.slabs,
            handles: cfg.handles,
            classes: cfg.classes.clone(),
            handles_at,
            meta_at,
            descriptors_at,
            data_at,
            len,
        })
    }

    pub(crate) fn blocks(class: u32) -> usize {
        (SLAB_SIZE / class) as usize
    }

    pub(crate) fn handle_at(&self, h: u32) -> usize {
        self.handles_at + h as usize * HANDLE_LEN
    }

    pub(crate) fn meta(&self, slab: u32) -> usize {
        self.meta_at + slab as usize * SLAB_META_LEN
    }

    pub(crate) fn descriptors(&self, slab: u32) -> usize {
        self.descriptors_at + slab as usize * DESCRIPTORS_PER_SLAB
    }

    pub(crate) fn slab_data(&self, slab: u32) -> usize {
        self.data_at + slab as usize * SLAB_SIZE as usize
    }
}

const _: () = assert!(BITMAP_WORDS * 8 + REMOTE_AT <= SLAB_META_LEN);
