//! Semaphores for C: glibc-compatible named ones and futex ones inside a
//! region (`nodeipc_sem`).

use std::ffi::c_char;
use std::sync::Arc;

use ::nodeipc_sem::{NamedSemaphore, Semaphore, ShmSemaphore};
use nodeipc_shm::Region;

use super::args::{self, Handle, handle, handle_type, millis, out, text};
use super::region::nodeipc_region;
use super::status::{Failure, Outcome, guard, nodeipc_status};

enum Kind {
    Named(NamedSemaphore),
    /// A futex semaphore at `offset` in a region this handle keeps mapped.
    InRegion {
        region: Arc<Region>,
        offset: usize,
    },
}

/// A counting semaphore shared between processes. Thread-safe: post, wait
/// and value may run on one semaphore from several threads at once; free it
/// once no thread uses it.
pub struct nodeipc_sem {
    magic: u64,
    /// The fork generation it was made in: a forked child may only free it.
    born: nodeipc_fdpass::ForkGeneration,
    kind: Kind,
}

handle_type!(nodeipc_sem, 0x4e49_5345_4d41_5048);

impl nodeipc_sem {
    fn with<R>(&self, f: impl FnOnce(&dyn Semaphore) -> R) -> Outcome<R> {
        Ok(match &self.kind {
            Kind::Named(named) => f(named),
            Kind::InRegion { region, offset } => f(region.view::<ShmSemaphore>(*offset)?),
        })
    }
}

fn publish(kind: Kind, out: &mut *mut nodeipc_sem) {
    args::publish(
        nodeipc_sem {
            magic: nodeipc_sem::MAGIC,
            born: nodeipc_fdpass::ForkGeneration::current(),
            kind,
        },
        out,
    );
}

/// Bytes a semaphore takes in a region (`nodeipc_sem_in_region`); its
/// offset must be a multiple of 4.
pub const NODEIPC_SEM_SIZE: usize = 8;
const _: () = assert!(NODEIPC_SEM_SIZE == ShmSemaphore::SIZE);

/// Creates a named semaphore (exclusive, mode 0600) with count `value`; a C
/// process's `sem_open(name, 0)` shares it. The creator removes the name on
/// free unless `nodeipc_sem_persist` was called.
///
/// # Safety
/// `name` is a NUL-terminated string; `out_sem` points at a writable pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_sem_create(
    name: *const c_char,
    value: u32,
    out_sem: *mut *mut nodeipc_sem,
) -> nodeipc_status {
    guard("nodeipc_sem_create", || {
        // SAFETY: the caller's contract above.
        let (name, slot) = unsafe { (text(name, "name")?, out(out_sem, "out_sem")?) };
        publish(Kind::Named(NamedSemaphore::create(name, value)?), slot);
        Ok(())
    })
}

/// Opens a named semaphore, waiting up to `timeout_ms` for it to appear
/// (negative: forever; 0: look once). Never follows a link; refuses another
/// owner's file.
///
/// # Safety
/// As `nodeipc_sem_create`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_sem_open(
    name: *const c_char,
    timeout_ms: i64,
    out_sem: *mut *mut nodeipc_sem,
) -> nodeipc_status {
    guard("nodeipc_sem_open", || {
        // SAFETY: the caller's contract above.
        let (name, slot) = unsafe { (text(name, "name")?, out(out_sem, "out_sem")?) };
        let named = match timeout_ms {
            0 => NamedSemaphore::open(name)?,
            ms => NamedSemaphore::open_wait(name, millis(ms))?,
        };
        publish(Kind::Named(named), slot);
        Ok(())
    })
}

/// A semaphore in `region` at `offset` (`NODEIPC_SEM_SIZE` bytes, offset a
/// multiple of 4). With `init` true its count is set to `value`: do that
/// once, before any peer uses it; peers pass `init` false. The handle keeps
/// the region mapped.
///
/// # Safety
/// `region` is a live region handle; `out_sem` points at a writable pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_sem_in_region(
    region: *const nodeipc_region,
    offset: usize,
    init: bool,
    value: u32,
    out_sem: *mut *mut nodeipc_sem,
) -> nodeipc_status {
    guard("nodeipc_sem_in_region", || {
        // SAFETY: the caller's contract above.
        let (r, slot) = unsafe { (handle(region)?, out(out_sem, "out_sem")?) };
        let sem = r.region.view::<ShmSemaphore>(offset)?;
        if init {
            if value > ShmSemaphore::MAX {
                return Err(Failure::invalid(format!(
                    "value {value} is beyond the maximum {}",
                    ShmSemaphore::MAX
                )));
            }
            sem.init(value);
        }
        let kind = Kind::InRegion {
            region: Arc::clone(&r.region),
            offset,
        };
        publish(kind, slot);
        Ok(())
    })
}

/// Increments the count, waking one waiter.
///
/// # Safety
/// `sem` is a live semaphore handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_sem_post(sem: *const nodeipc_sem) -> nodeipc_status {
    guard("nodeipc_sem_post", || {
        // SAFETY: the caller's contract above.
        Ok(unsafe { handle(sem)? }.with(|s| s.post())??)
    })
}

/// Waits up to `timeout_ms` (negative: forever) for a positive count and
/// decrements it; `NODEIPC_ERR_TIMEOUT` when the time runs out.
///
/// # Safety
/// `sem` is a live semaphore handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_sem_wait(
    sem: *const nodeipc_sem,
    timeout_ms: i64,
) -> nodeipc_status {
    guard("nodeipc_sem_wait", || {
        // SAFETY: the caller's contract above.
        let sem = unsafe { handle(sem)? };
        Ok(sem.with(|s| {
            if timeout_ms < 0 {
                s.wait()
            } else {
                s.wait_timeout(millis(timeout_ms))
            }
        })??)
    })
}

/// Decrements the count if positive: `*acquired` says whether it did.
///
/// # Safety
/// `sem` is a live semaphore handle; `acquired` points at a writable bool.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_sem_try_wait(
    sem: *const nodeipc_sem,
    acquired: *mut bool,
) -> nodeipc_status {
    guard("nodeipc_sem_try_wait", || {
        // SAFETY: the caller's contract above.
        let (sem, acquired) = unsafe { (handle(sem)?, out(acquired, "acquired")?) };
        *acquired = sem.with(|s| s.try_wait())??;
        Ok(())
    })
}

/// The current count (a snapshot).
///
/// # Safety
/// `sem` is a live semaphore handle; `value` points at a writable uint32_t.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_sem_value(
    sem: *const nodeipc_sem,
    value: *mut u32,
) -> nodeipc_status {
    guard("nodeipc_sem_value", || {
        // SAFETY: the caller's contract above.
        let (sem, value) = unsafe { (handle(sem)?, out(value, "value")?) };
        *value = sem.with(|s| s.value())??;
        Ok(())
    })
}

/// Keeps a named semaphore's name after its creator frees it.
///
/// # Safety
/// `sem` is a live semaphore handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_sem_persist(sem: *const nodeipc_sem) -> nodeipc_status {
    guard("nodeipc_sem_persist", || {
        // SAFETY: the caller's contract above.
        match &unsafe { handle(sem)? }.kind {
            Kind::Named(named) => {
                named.persist();
                Ok(())
            }
            Kind::InRegion { .. } => Err(Failure::invalid("a semaphore in a region has no name")),
        }
    })
}

/// Removes a named semaphore's name (`sem_unlink`).
///
/// # Safety
/// `name` is a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_sem_unlink(name: *const c_char) -> nodeipc_status {
    guard("nodeipc_sem_unlink", || {
        // SAFETY: the caller's contract above.
        NamedSemaphore::unlink(unsafe { text(name, "name")? })?;
        Ok(())
    })
}

/// Frees the handle (a creator's named semaphore loses its name unless
/// persisted). NULL is a no-op.
///
/// # Safety
/// `sem` is NULL or a live semaphore handle, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nodeipc_sem_free(sem: *mut nodeipc_sem) -> nodeipc_status {
    // SAFETY: the caller's contract above.
    guard("nodeipc_sem_free", || unsafe { args::free(sem) })
}
