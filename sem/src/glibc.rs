//! glibc's named-semaphore layout, driven with our own atomics and futex
//! calls instead of `sem_post`/`sem_wait`, which abort the process on a word
//! another process corrupted.
//!
//! The layout is nptl's `struct new_sem` on targets with 64-bit atomics
//! (`__HAVE_64B_ATOMICS`), as glibc 2.21 and later write it:
//!
//! | offset | field                  | meaning                                   |
//! |--------|------------------------|-------------------------------------------|
//! | 0      | `uint64_t data`        | count in the low 32 bits, waiters in the high 32 |
//! | 8      | `int private`          | 128 (`FUTEX_SHARED`) for a process-shared semaphore |
//! | 12     | `int pad`              | unused here                               |
//! | 16..32 | rest of `sem_t`        | zero                                      |
//!
//! The futex word is the count: the low half of `data`, at offset 0 on a
//! little-endian machine and 4 on a big-endian one. glibc's `LLL_SHARED` is
//! `FUTEX_PRIVATE_FLAG` (128), flipped before the system call; so `private`
//! holds 128 for a shared semaphore, and its futex calls carry no private flag.
//! The algorithm is glibc's (`nptl/sem_post.c`, `nptl/sem_waitcommon.c`), so
//! a C, C++ or Python process calling glibc on the same file interoperates.

use std::os::fd::AsFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use rustix::io::Errno;
use rustix::mm::{MapFlags, ProtFlags};
use rustix::time::Timespec;

use crate::{Error, Result};
use nodeipc_shm::wait::{Parked, SLICE, cancelled, deadline_after, park_until, unpark};

#[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
compile_error!("named semaphores follow glibc's 64-bit layout: Linux on a 64-bit target only");

/// `sizeof(sem_t)`: what a semaphore's file must hold at least.
pub(crate) const SEM_SIZE: usize = 32;
const _: () = assert!(size_of::<libc::sem_t>() == SEM_SIZE);

/// The largest count (`SEM_VALUE_MAX`).
pub(crate) const SEM_VALUE_MAX: u32 = i32::MAX as u32;

/// glibc's `FUTEX_SHARED` (`LLL_SHARED`), the `private` word of every
/// semaphore `sem_open` makes.
const FUTEX_SHARED: i32 = 128;

/// One waiter, in `data`'s upper half (`SEM_NWAITERS_SHIFT` = 32).
const ONE_WAITER: u64 = 1 << 32;

/// More waiters than this are garbage: every waiter is a thread, and Linux
/// never has more than `PID_MAX_LIMIT` (2^22) thread ids at once. A waiter
/// killed while parked leaves its count behind, so this also bounds how many
/// such deaths one semaphore survives: millions.
const MAX_WAITERS: u32 = 1 << 22;

/// Where the count, the futex word, sits in `data`.
const VALUE_OFFSET: usize = if cfg!(target_endian = "little") { 0 } else { 4 };

/// The bytes of a semaphore, for [`create`](crate::NamedSemaphore::create).
pub(crate) fn initial_bytes(value: u32) -> [u8; SEM_SIZE] {
    let mut bytes = [0u8; SEM_SIZE];
    bytes[..8].copy_from_slice(&u64::from(value).to_ne_bytes());
    bytes[8..12].copy_from_slice(&FUTEX_SHARED.to_ne_bytes());
    bytes
}

/// A `sem_t` mapped from its file, shared with every process mapping it.
#[derive(Debug)]
pub(crate) struct SemWords {
    base: NonNull<u8>,
}

// SAFETY: the mapping stays valid until drop, and every access to it is atomic.
unsafe impl Send for SemWords {}
// SAFETY: as for `Send`.
unsafe impl Sync for SemWords {}

impl SemWords {
    /// Maps the first [`SEM_SIZE`] bytes of `file`, which the caller has
    /// checked to be a regular file at least that large.
    pub(crate) fn map(file: impl AsFd, name: &str) -> Result<SemWords> {
        // SAFETY: a fresh shared mapping at an address the kernel chooses
        // overlaps nothing of ours; it is only ever reached through atomics.
        let ptr = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                SEM_SIZE,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                file,
                0,
            )
        }
        .map_err(|e| Error::io("mmap", name, e))?;
        let base = NonNull::new(ptr.cast()).ok_or_else(|| Error::io("mmap", name, Errno::INVAL))?;
        Ok(SemWords { base })
    }

    fn data(&self) -> &AtomicU64 {
        // SAFETY: the mapping is page-aligned, at least SEM_SIZE bytes long and
        // lives as long as `self`; other processes change it only atomically
        // (glibc's atomics, or ours).
        unsafe { AtomicU64::from_ptr(self.base.as_ptr().cast()) }
    }

    /// The count as a 32-bit word: only ever handed to the kernel as the
    /// futex address, never loaded or stored through (all our accesses to
    /// the count go through [`data`](SemWords::data)).
    fn futex_word(&self) -> &AtomicU32 {
        // SAFETY: inside the mapping (see `data`), 4-byte aligned.
        unsafe { AtomicU32::from_ptr(self.base.as_ptr().add(VALUE_OFFSET).cast()) }
    }

    fn private(&self) -> &AtomicI32 {
        // SAFETY: inside the mapping (see `data`), 4-byte aligned.
        unsafe { AtomicI32::from_ptr(self.base.as_ptr().add(8).cast()) }
    }

    /// `data`, after checking every word an operation relies on.
    fn load(&self, name: &str) -> Result<u64> {
        let private = self.private().load(Ordering::Relaxed);
        if private != FUTEX_SHARED {
            return Err(corrupt(
                name,
                format!(
                    "its `private` word is {private:#x}, not {FUTEX_SHARED:#x} \
                     (FUTEX_SHARED, a process-shared semaphore)"
                ),
            ));
        }
        let data = self.data().load(Ordering::Relaxed);
        check(name, data)?;
        Ok(data)
    }

    /// `sem_post`: refuses at `SEM_VALUE_MAX`, and wakes one waiter when the
    /// waiter count says someone may be parked.
    pub(crate) fn post(&self, name: &str) -> Result<()> {
        let mut data = self.load(name)?;
        loop {
            if value(data) == SEM_VALUE_MAX {
                return Err(Error::Overflow {
                    name: name.to_owned(),
                    max: SEM_VALUE_MAX,
                });
            }
            // Release: whoever takes this token sees what we wrote before it.
            match self.data().compare_exchange_weak(
                data,
                data + 1,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => {
                    check(name, now)?;
                    data = now;
                }
            }
        }
        if waiters(data) > 0 {
            unpark(self.futex_word(), 1).map_err(|e| Error::io("futex(FUTEX_WAKE)", name, e))?;
        }
        Ok(())
    }

    /// `sem_trywait`: takes a token if there is one.
    pub(crate) fn try_take(&self, name: &str) -> Result<bool> {
        let mut data = self.load(name)?;
        while value(data) > 0 {
            match self.data().compare_exchange_weak(
                data,
                data - 1,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(true),
                Err(now) => {
                    check(name, now)?;
                    data = now;
                }
            }
        }
        Ok(false)
    }

    /// `sem_clockwait` on the monotonic clock until `deadline` (`None`: no
    /// limit). `Ok(false)` when the deadline passed. A signal does not end
    /// the wait: it resumes with the same deadline. This thread's
    /// cancellation hook (`nodeipc_shm::wait::with_cancel_hook`) is asked
    /// every `SLICE`: [`Error::Interrupted`] when it says to stop.
    pub(crate) fn take_until(&self, name: &str, deadline: Option<&Timespec>) -> Result<bool> {
        if self.try_take(name)? {
            return Ok(true);
        }
        // Announce ourselves; posters wake a waiter only when they see one.
        let mut data = self.data().fetch_add(ONE_WAITER, Ordering::Relaxed);
        let outcome = loop {
            if let Err(e) = check(name, data) {
                break Err(e);
            }
            if value(data) == 0 {
                // In slices, so that a cancellation hook is asked at least
                // every `SLICE`; the deadline stays the one given.
                let slice_end = deadline_after(SLICE);
                let (until, last) = match deadline {
                    Some(d) if (d.tv_sec, d.tv_nsec) <= (slice_end.tv_sec, slice_end.tv_nsec) => {
                        (d, true)
                    }
                    _ => (&slice_end, false),
                };
                match park_until(self.futex_word(), 0, Some(until)) {
                    Ok(Parked::Woken) => {}
                    Ok(Parked::TimedOut) if last => break Ok(false),
                    Ok(Parked::TimedOut) if cancelled() => {
                        break Err(Error::Interrupted {
                            name: name.to_owned(),
                            waited: Duration::ZERO,
                        });
                    }
                    Ok(Parked::TimedOut) => {}
                    Err(e) => break Err(Error::io("futex(FUTEX_WAIT_BITSET)", name, e)),
                }
                data = self.data().load(Ordering::Relaxed);
            } else {
                // Take a token and stop being a waiter, in one step (unless a
                // peer has zeroed the waiter count meanwhile).
                let taken = if waiters(data) > 0 {
                    data - 1 - ONE_WAITER
                } else {
                    data - 1
                };
                match self.data().compare_exchange_weak(
                    data,
                    taken,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return Ok(true),
                    Err(now) => data = now,
                }
            }
        };
        self.leave();
        outcome
    }

    /// Stops being a waiter without a token. Never takes the count below
    /// zero: a peer may have overwritten it meanwhile.
    fn leave(&self) {
        let _ = self
            .data()
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |data| {
                (waiters(data) > 0).then(|| data - ONE_WAITER)
            });
    }

    /// `sem_getvalue`.
    pub(crate) fn value(&self, name: &str) -> Result<u32> {
        self.load(name).map(value)
    }
}

impl Drop for SemWords {
    fn drop(&mut self) {
        // SAFETY: the mapping came from `map`, is SEM_SIZE long, and nothing
        // borrows it past `self`.
        let _ = unsafe { rustix::mm::munmap(self.base.as_ptr().cast(), SEM_SIZE) };
    }
}

fn value(data: u64) -> u32 {
    data as u32
}

fn waiters(data: u64) -> u32 {
    (data >> 32) as u32
}

/// Refuses counts no glibc semaphore can hold.
fn check(name: &str, data: u64) -> Result<()> {
    let value = value(data);
    if value > SEM_VALUE_MAX {
        return Err(corrupt(
            name,
            format!("its count is {value} ({value:#x}), above SEM_VALUE_MAX {SEM_VALUE_MAX}"),
        ));
    }
    let waiters = waiters(data);
    if waiters > MAX_WAITERS {
        return Err(corrupt(
            name,
            format!(
                "its waiter count is {waiters} ({waiters:#x}), above {MAX_WAITERS} \
                 (more than Linux has thread ids)"
            ),
        ));
    }
    Ok(())
}

fn corrupt(name: &str, what: String) -> Error {
    Error::Corrupt {
        name: name.to_owned(),
        what,
    }
}
