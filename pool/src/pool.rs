//! Creating and joining a pool; the header and the handle table.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use nodeipc_fdpass::PeerRecord;
use nodeipc_shm::{Pages, Region};

use crate::layout::{Geometry, HANDLE_LEN, MAGIC, MAX_CLASSES, PoolConfig, SLAB_SIZE, VERSION};
use crate::{Error, Handle, Result};

/// A pool its creator made: owns the region (a named one loses its name
/// when dropped) and hands it to handles here or, as a descriptor, elsewhere.
#[derive(Debug)]
pub struct Pool {
    region: Arc<Region>,
}

impl Pool {
    /// Creates a named pool.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`]; those of `Region::create`.
    pub fn create(name: &str, config: &PoolConfig) -> Result<Pool> {
        let geo = Geometry::new(name, config)?;
        let region = Region::create(name, geo.len)?;
        init(&region, &geo)?;
        Ok(Pool {
            region: Arc::new(region),
        })
    }

    /// Creates an anonymous pool (a memfd sealed against growing and shrinking).
    ///
    /// # Errors
    /// As [`create`](Pool::create).
    pub fn anonymous(config: &PoolConfig) -> Result<Pool> {
        Pool::anonymous_pages(config, Pages::Normal)
    }

    /// As [`anonymous`](Pool::anonymous), backed as `pages` asks: with
    /// [`Pages::HugeOrNormal`] huge pages when the system can reserve them
    /// now (`fallocate` at creation), else normal ones;
    /// [`huge_pages`](Pool::huge_pages) says which it got.
    ///
    /// # Errors
    /// As [`anonymous`](Pool::anonymous); with [`Pages::Huge`],
    /// `nodeipc_shm::Error::HugePagesUnavailable` saying what the system has.
    pub fn anonymous_pages(config: &PoolConfig, pages: Pages) -> Result<Pool> {
        let geo = Geometry::new("memfd pool", config)?;
        let region = Region::anonymous_pages(geo.len, pages)?;
        region.seal_grow_shrink()?;
        init(&region, &geo)?;
        Ok(Pool {
            region: Arc::new(region),
        })
    }

    /// A pool received as a descriptor (a memfd its creator sealed, or a
    /// named object's descriptor): the header is checked (magic, version,
    /// geometry against the region's length; a memfd must be sealed
    /// against shrinking) and handles are taken from it here.
    ///
    /// # Errors
    /// [`Error::BadHeader`]; those of `Region::from_fd`.
    pub fn from_fd(fd: std::os::fd::OwnedFd) -> Result<Pool> {
        let region = Region::from_fd(fd)?;
        read_geometry(&region)?;
        Ok(Pool {
            region: Arc::new(region),
        })
    }

    /// Whether huge pages back the pool's region.
    pub fn huge_pages(&self) -> bool {
        self.region.is_huge()
    }

    /// Takes a handle in this process.
    ///
    /// # Errors
    /// As [`Handle::join`].
    pub fn handle(&self) -> Result<Handle> {
        Handle::join(self.region.clone())
    }

    /// Takes handle `id` in this process.
    ///
    /// # Errors
    /// As [`Handle::join_id`].
    pub fn handle_id(&self, id: u32) -> Result<Handle> {
        Handle::join_id(self.region.clone(), id)
    }

    /// A handle that only frees, reads and writes (it takes no handle slot).
    ///
    /// # Errors
    /// As [`Handle::free_only`].
    pub fn free_only(&self) -> Result<Handle> {
        Handle::free_only(self.region.clone())
    }

    /// The region.
    pub fn region(&self) -> &Arc<Region> {
        &self.region
    }
}

/// Opens a named pool, waiting up to `timeout` for its creator to finish.
pub(crate) fn open_named(name: &str, timeout: std::time::Duration) -> Result<Arc<Region>> {
    let region = Region::open(name, nodeipc_shm::OpenOptions::wait(128, timeout))?;
    let magic = region.view::<AtomicU64>(0)?;
    let mut pacer = nodeipc_shm::wait::Pacer::new(
        std::time::Duration::from_micros(10),
        std::time::Duration::from_millis(10),
        Some(timeout),
    );
    while magic.load(Ordering::Acquire) == 0 && pacer.pause().is_ok() {}
    Ok(Arc::new(region))
}

fn init(region: &Region, geo: &Geometry) -> Result<()> {
    let w32 = |at: usize, v: u32| -> Result<()> {
        region.view::<AtomicU32>(at)?.store(v, Ordering::Relaxed);
        Ok(())
    };
    w32(8, VERSION)?;
    w32(12, SLAB_SIZE)?;
    w32(16, geo.slabs)?;
    w32(20, geo.handles)?;
    w32(24, geo.classes.len() as u32)?;
    for (i, class) in geo.classes.iter().enumerate() {
        w32(32 + 4 * i, *class)?;
    }
    region.view::<AtomicU64>(0)?.store(MAGIC, Ordering::Release);
    Ok(())
}

/// Refuses a memfd whose size is not sealed against growing and shrinking
/// (its sender could truncate it under our mapping: a `SIGBUS`). A named
/// object cannot carry those seals: one opened by name passed the owner and
/// mode check of `Region::open`; one received as a descriptor is trusted as
/// its sender is.
fn check_seals(region: &Region) -> Result<()> {
    use rustix::fs::SealFlags;
    // A descriptor `/proc` cannot place may be a memfd: seals demanded.
    let memfd = region.is_memfd().unwrap_or(true);
    if region.name().is_some() || !memfd {
        return Ok(());
    }
    match rustix::fs::fcntl_get_seals(region.as_fd()) {
        Ok(seals) if seals.contains(SealFlags::SHRINK | SealFlags::GROW) => Ok(()),
        _ => Err(Error::BadHeader {
            pool: region.label().to_owned(),
            reason: "the memfd is not sealed against shrinking (F_SEAL_SHRINK|F_SEAL_GROW)"
                .to_owned(),
        }),
    }
}

/// Reads and checks a pool's header: each value once.
pub(crate) fn read_geometry(region: &Region) -> Result<Geometry> {
    check_seals(region)?;
    let label = region.label();
    let bad = |reason: String| Error::BadHeader {
        pool: label.to_owned(),
        reason,
    };
    let r32 =
        |at: usize| -> Result<u32> { Ok(region.view::<AtomicU32>(at)?.load(Ordering::Relaxed)) };
    let magic = region.view::<AtomicU64>(0)?.load(Ordering::Acquire);
    if magic != MAGIC {
        return Err(bad(format!(
            "magic is {magic:#018x}, {MAGIC:#018x} expected"
        )));
    }
    let version = r32(8)?;
    if version != VERSION {
        return Err(bad(format!("layout version {version}, {VERSION} expected")));
    }
    let slab_size = r32(12)?;
    if slab_size != SLAB_SIZE {
        return Err(bad(format!("slab size {slab_size}, {SLAB_SIZE} expected")));
    }
    let count = r32(24)? as usize;
    if count > MAX_CLASSES {
        return Err(bad(format!("{count} classes, at most {MAX_CLASSES}")));
    }
    let classes = (0..count)
        .map(|i| r32(32 + 4 * i))
        .collect::<Result<Vec<_>>>()?;
    let config = PoolConfig {
        slabs: r32(16)?,
        handles: r32(20)?,
        classes,
    };
    let geo = Geometry::new(label, &config).map_err(|e| bad(e.to_string()))?;
    if geo.len > region.len() {
        return Err(bad(format!(
            "{} slabs and {} handles need {} bytes, the region has {}",
            geo.slabs,
            geo.handles,
            geo.len,
            region.len()
        )));
    }
    Ok(geo)
}

/// A handle's entry in the handle table: who holds it (fdpass's
/// [`PeerRecord`]: pid, joins, start time at +0, +4, +8), then reserved
/// bytes nobody writes.
#[repr(C)]
#[derive(Debug)]
pub(crate) struct HandleEntry {
    pub(crate) holder: PeerRecord,
    _reserved: [AtomicU64; 6],
}

const _: () = assert!(size_of::<HandleEntry>() == HANDLE_LEN);

// SAFETY: `#[repr(C)]`, atomics only (a `PeerRecord` is made of atomics with
// no pointer, as nodeipc-fdpass documents it), any bit pattern valid.
unsafe impl nodeipc_shm::ShmSafe for HandleEntry {}

/// Handle `h`'s record of who holds it (bounds and alignment checked).
pub(crate) fn entry<'a>(region: &'a Region, geo: &Geometry, h: u32) -> Result<&'a PeerRecord> {
    Ok(&region.view::<HandleEntry>(geo.handle_at(h))?.holder)
}
