//! Shared-memory regions (`nodeipc_shm::Region`) for C.

use std::ffi::{c_char, c_int, c_void};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::Arc;

use nodeipc_shm::{OpenOptions, Region};

use super::args::{self, Handle, bytes, handle, handle_type, millis, out, text};
use super::status::{Failure, Outcome, guard, nodeipc_status};

/// A mapped shared-memory region. Thread-safe: every function may be called
/// on one region from several threads at once, except `nodeipc_region_free`.
/// The mapping lives until the region and every semaphore made in it are
/// freed.
pub struct nodeipc_region {
    magic: u64,
    /// The fork generation it was made in: a forked child may only free it.
    born: nodeipc_fdpass::ForkGeneration,
    pub(crate) region: Arc<Region>,
}

handle_type!(nodeipc_region, 0x4e49_5245_4749_4f4e);

fn publish(region: Region, out: &mut *mut nodeipc_region) {
    args::publish(
        nodeipc_region {
            magic: nodeipc_region::MAGIC,
            born: nodeipc_fdpass::ForkGeneration::current(),
            region: Arc::new(region),
        },
        out,
    );
}

/// Creates a named region of `size` bytes (`/name`, mode 0600, exclusive).
/// The creator removes the name when it frees the region unless
/// `nodeipc_region_persist` was called.
///
/// # Safety
/// `name` is a NUL-terminated string; `out` points at a writable pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_region_create(
    name: *const c_char,
    size: usize,
    out_region: *mut *mut nodeipc_region,
) -> nodeipc_status {
    guard("nodeipc_region_create", || {
        // SAFETY: the caller's contract above.
        let (name, slot) = unsafe { (text(name, "name")?, out(out_region, "out_region")?) };
        publish(Region::create(name, size)?, slot);
        Ok(())
    })
}

/// Opens a region another process created, waiting up to `timeout_ms`
/// (negative: forever; 0: look once) for it to appear with at least
/// `min_size` bytes. Refuses another owner's or a mode other than 0600.
///
/// # Safety
/// As `nodeipc_region_create`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_region_open(
    name: *const c_char,
    min_size: usize,
    timeout_ms: i64,
    out_region: *mut *mut nodeipc_region,
) -> nodeipc_status {
    guard("nodeipc_region_open", || {
        // SAFETY: the caller's contract above.
        let (name, slot) = unsafe { (text(name, "name")?, out(out_region, "out_region")?) };
        let options = match timeout_ms {
            0 => OpenOptions {
                min_size,
                wait: None,
                ..OpenOptions::default()
            },
            ms => OpenOptions::wait(min_size, millis(ms)),
        };
        publish(Region::open(name, options)?, slot);
        Ok(())
    })
}

/// Creates an anonymous region (a memfd, sealable): pass it on with
/// `nodeipc_region_fd` and the fd-passing calls.
///
/// # Safety
/// `out_region` points at a writable pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_region_anonymous(
    size: usize,
    out_region: *mut *mut nodeipc_region,
) -> nodeipc_status {
    guard("nodeipc_region_anonymous", || {
        // SAFETY: the caller's contract above.
        let slot = unsafe { out(out_region, "out_region")? };
        publish(Region::anonymous(size)?, slot);
        Ok(())
    })
}

/// Maps the shared-memory object behind `fd` (a region another process
/// passed on). `fd` stays the caller's: the region keeps a duplicate.
///
/// # Safety
/// `out_region` points at a writable pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_region_from_fd(
    fd: c_int,
    out_region: *mut *mut nodeipc_region,
) -> nodeipc_status {
    guard("nodeipc_region_from_fd", || {
        // SAFETY: the caller's contract above.
        let slot = unsafe { out(out_region, "out_region")? };
        let dup = duplicate(fd)?;
        publish(Region::from_fd(dup)?, slot);
        Ok(())
    })
}

/// A close-on-exec duplicate of a caller's descriptor, refusing negatives
/// and numbers that are not open (as every call taking one does).
pub(crate) fn duplicate(fd: c_int) -> Outcome<std::os::fd::OwnedFd> {
    let borrowed = super::fdpass::borrow(fd, "fd")?;
    rustix::io::fcntl_dupfd_cloexec(borrowed, 0).map_err(|e| {
        let mut f = Failure::new(
            super::status::NODEIPC_ERR_IO,
            format!("duplicating descriptor {fd}: {e}"),
        );
        f.errno = e.raw_os_error();
        f
    })
}

/// Seals the region's size (memfd regions only): peers that map it can
/// rely on it never shrinking under them.
///
/// # Safety
/// `region` is a live region handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_region_seal(region: *const nodeipc_region) -> nodeipc_status {
    guard("nodeipc_region_seal", || {
        // SAFETY: the caller's contract above.
        unsafe { handle(region)? }.region.seal_grow_shrink()?;
        Ok(())
    })
}

/// The mapping's address and length. Other processes may write any byte at
/// any time: use atomics or copies, and synchronise (a semaphore, a group
/// barrier) before trusting what you read.
///
/// # Safety
/// `region` is a live region handle; `data` and `len` point at writable
/// values.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_region_data(
    region: *const nodeipc_region,
    data: *mut *mut c_void,
    len: *mut usize,
) -> nodeipc_status {
    guard("nodeipc_region_data", || {
        // SAFETY: the caller's contract above.
        let (r, data, len) = unsafe { (handle(region)?, out(data, "data")?, out(len, "len")?) };
        *data = r.region.as_ptr().cast();
        *len = r.region.len();
        Ok(())
    })
}

/// The region's descriptor, still owned by the region (do not close it):
/// for passing it to another process.
///
/// # Safety
/// `region` is a live region handle; `fd` points at a writable int.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_region_fd(
    region: *const nodeipc_region,
    fd: *mut c_int,
) -> nodeipc_status {
    guard("nodeipc_region_fd", || {
        // SAFETY: the caller's contract above.
        let (r, fd) = unsafe { (handle(region)?, out(fd, "fd")?) };
        *fd = r.region.as_fd().as_raw_fd();
        Ok(())
    })
}

/// Copies `len` bytes from `src` into the region at `offset`, bounds-checked.
///
/// # Safety
/// `region` is a live region handle; `src` points at `len` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_region_write(
    region: *const nodeipc_region,
    offset: usize,
    src: *const c_void,
    len: usize,
) -> nodeipc_status {
    guard("nodeipc_region_write", || {
        // SAFETY: the caller's contract above.
        let (r, src) = unsafe { (handle(region)?, bytes(src.cast(), len, "src")?) };
        r.region.write_at(offset, src)?;
        Ok(())
    })
}

/// Copies `len` bytes of the region at `offset` into `dst`, bounds-checked.
///
/// # Safety
/// `region` is a live region handle; `dst` points at `len` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_region_read(
    region: *const nodeipc_region,
    offset: usize,
    dst: *mut c_void,
    len: usize,
) -> nodeipc_status {
    guard("nodeipc_region_read", || {
        // SAFETY: the caller's contract above.
        let (r, dst) = unsafe { (handle(region)?, args::bytes_mut(dst.cast(), len, "dst")?) };
        r.region.read_at(offset, dst)?;
        Ok(())
    })
}

/// Keeps the name after the creator frees the region.
///
/// # Safety
/// `region` is a live region handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_region_persist(region: *const nodeipc_region) -> nodeipc_status {
    guard("nodeipc_region_persist", || {
        // SAFETY: the caller's contract above.
        unsafe { handle(region)? }.region.persist();
        Ok(())
    })
}

/// Removes the region's name now (if it still names this very object);
/// every mapping lives on.
///
/// # Safety
/// `region` is a live region handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_region_unlink(region: *const nodeipc_region) -> nodeipc_status {
    guard("nodeipc_region_unlink", || {
        // SAFETY: the caller's contract above.
        unsafe { handle(region)? }.region.unlink_now()?;
        Ok(())
    })
}

/// Removes a region's name (`shm_unlink`) without opening it.
///
/// # Safety
/// `name` is a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_shm_unlink(name: *const c_char) -> nodeipc_status {
    guard("nodeipc_shm_unlink", || {
        // SAFETY: the caller's contract above.
        nodeipc_shm::unlink(unsafe { text(name, "name")? })?;
        Ok(())
    })
}

/// Unmaps the region (once no semaphore made in it remains) and, for its
/// creator, removes the name unless persisted. NULL is a no-op.
///
/// # Safety
/// `region` is NULL or a live region handle, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_region_free(region: *mut nodeipc_region) -> nodeipc_status {
    // SAFETY: the caller's contract above.
    guard("nodeipc_region_free", || unsafe { args::free(region) })
}
