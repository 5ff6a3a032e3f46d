//! Checking what C hands us before anything touches it: null pointers,
//! lengths, strings, timeouts, and handles (boxed, with a magic word).

use std::ffi::{CStr, c_char};
use std::time::Duration;

use nodeipc_fdpass::ForkGeneration;

use super::status::{Failure, NODEIPC_ERR_BAD_HANDLE, NODEIPC_ERR_FORKED, Outcome};

/// What "wait forever" (a negative C timeout) becomes: a hundred years, which
/// every clock computation of the layers below takes without overflowing.
const FOREVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// A C timeout in milliseconds: negative waits forever, and so does anything
/// longer than that (up to `INT64_MAX`, where C++'s `to_ms` saturates).
pub(crate) fn millis(ms: i64) -> Duration {
    u64::try_from(ms).map_or(FOREVER, |ms| Duration::from_millis(ms).min(FOREVER))
}

/// A C string argument as UTF-8.
///
/// # Safety
/// `p` is null or points at a NUL-terminated string that stays unchanged
/// for the call.
pub(crate) unsafe fn text<'a>(p: *const c_char, what: &str) -> Outcome<&'a str> {
    if p.is_null() {
        return Err(Failure::invalid(format!("{what} is null")));
    }
    // SAFETY: non-null, and the caller promised a NUL-terminated string that
    // only this thread reads for the duration of the call.
    let c = unsafe { CStr::from_ptr(p) };
    c.to_str()
        .map_err(|e| Failure::invalid(format!("{what} is not UTF-8: {e}")))
}

/// A `(pointer, length)` input buffer; a null pointer is allowed only with
/// length 0.
///
/// # Safety
/// `p` is null or points at `len` readable bytes that are this process's own
/// memory, not written by anyone during the call.
pub(crate) unsafe fn bytes<'a>(p: *const u8, len: usize, what: &str) -> Outcome<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Failure::invalid(format!(
            "{what} is null with length {len}"
        )));
    }
    if len > isize::MAX as usize {
        return Err(Failure::invalid(format!(
            "{what}: length {len} is beyond isize::MAX"
        )));
    }
    // SAFETY: non-null, `len` bytes readable per the caller's contract, and
    // nobody writes them during the call.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// A `(pointer, length)` output buffer; a null pointer is allowed only with
/// length 0.
///
/// # Safety
/// `p` is null or points at `len` writable bytes of this process that
/// nothing else touches during the call.
pub(crate) unsafe fn bytes_mut<'a>(p: *mut u8, len: usize, what: &str) -> Outcome<&'a mut [u8]> {
    if len == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(Failure::invalid(format!(
            "{what} is null with length {len}"
        )));
    }
    if len > isize::MAX as usize {
        return Err(Failure::invalid(format!(
            "{what}: length {len} is beyond isize::MAX"
        )));
    }
    // SAFETY: non-null, `len` writable bytes per the caller's contract, used
    // by this call alone.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, len) })
}

/// An out-parameter: refused when null.
///
/// # Safety
/// `p` is null or points at a writable, aligned `T`.
pub(crate) unsafe fn out<'a, T>(p: *mut T, what: &str) -> Outcome<&'a mut T> {
    // SAFETY: the caller promised a valid, aligned `T` when non-null.
    unsafe { p.as_mut() }.ok_or_else(|| Failure::invalid(format!("{what} is null")))
}

/// A C handle: a boxed Rust value behind a magic word, so that a pointer to
/// something else (another handle type, a freed one whose memory was not
/// reused yet) is refused cheaply instead of used; and with the fork
/// generation it was made in, so that a forked child's use of its parent's
/// handle is refused (`NODEIPC_ERR_FORKED`) and only its free is allowed.
pub(crate) trait Handle: Sized {
    /// This type's magic.
    const MAGIC: u64;
    /// The handle type's C name, for messages.
    const NAME: &'static str;
    /// The magic word stored in this handle.
    fn magic(&self) -> u64;
    /// Overwrites the magic (with [`FREED`] when freeing).
    fn set_magic(&mut self, magic: u64);
    /// The fork generation the handle was made in.
    fn born(&self) -> ForkGeneration;
}

/// The magic a handle holds once freed.
pub(crate) const FREED: u64 = 0xdead_dead_dead_dead;

/// Moves a value to the heap and stores the pointer in `*out`.
pub(crate) fn publish<T: Handle>(value: T, out: &mut *mut T) {
    *out = Box::into_raw(Box::new(value));
}

fn check<T: Handle>(h: &T) -> Outcome<()> {
    check_magic(h)?;
    // One load and a compare: no system call, and no allocation (the words
    // are made only in a forked child), on the way to a 3 ns heartbeat.
    if !h.born().is_forked() {
        return Ok(());
    }
    h.born()
        .check(&format!("the {} handle", T::NAME))
        .map_err(|forked| Failure::new(NODEIPC_ERR_FORKED, forked.to_string()))
}

fn check_magic<T: Handle>(h: &T) -> Outcome<()> {
    if h.magic() == T::MAGIC {
        return Ok(());
    }
    let what = if h.magic() == FREED {
        "was freed already"
    } else {
        "is not one (wrong magic)"
    };
    Err(Failure::new(
        NODEIPC_ERR_BAD_HANDLE,
        format!("the {} handle {what}", T::NAME),
    ))
}

/// A handle argument, shared.
///
/// # Safety
/// `p` is null or a pointer this library returned for a `T` that was not
/// freed; used by this thread alone unless the type's documentation says
/// otherwise.
pub(crate) unsafe fn handle<'a, T: Handle>(p: *const T) -> Outcome<&'a T> {
    // SAFETY: per the caller's contract, non-null means a live `T` of ours.
    let h = unsafe { p.as_ref() }
        .ok_or_else(|| Failure::invalid(format!("the {} handle is null", T::NAME)))?;
    check(h)?;
    Ok(h)
}

/// A handle argument, exclusive.
///
/// # Safety
/// As [`handle`], and no other thread uses the handle during the call.
pub(crate) unsafe fn handle_mut<'a, T: Handle>(p: *mut T) -> Outcome<&'a mut T> {
    // SAFETY: per the caller's contract, non-null means a live `T` of ours
    // that only this thread uses during the call.
    let h = unsafe { p.as_mut() }
        .ok_or_else(|| Failure::invalid(format!("the {} handle is null", T::NAME)))?;
    check(h)?;
    Ok(h)
}

/// Frees a handle: null is a no-op, a bad magic is refused (and nothing freed).
/// In a child forked since the handle was made this is allowed too: the
/// Rust values' drops then close and unmap the child's copies and leave
/// everything else (threads, locks, names, peers) to the parent.
///
/// # Safety
/// As [`handle_mut`]; the pointer is not used again.
pub(crate) unsafe fn free<T: Handle>(p: *mut T) -> Outcome<()> {
    // SAFETY: per the caller's contract, non-null means a live `T` of ours
    // that only this thread uses.
    let Some(h) = (unsafe { p.as_mut() }) else {
        return Ok(());
    };
    check_magic(h)?;
    h.set_magic(FREED);
    // SAFETY: `p` came from `Box::into_raw` in `publish` and was not freed
    // (its magic was intact); the caller does not use it again.
    drop(unsafe { Box::from_raw(p) });
    Ok(())
}

/// Implements [`Handle`] for a struct with a `magic: u64` field and a
/// `born: ForkGeneration` field. The structs themselves are written out in
/// full: cbindgen does not expand macros.
macro_rules! handle_type {
    ($name:ident, $magic:expr) => {
        impl super::args::Handle for $name {
            const MAGIC: u64 = $magic;
            const NAME: &'static str = stringify!($name);
            fn magic(&self) -> u64 {
                self.magic
            }
            fn set_magic(&mut self, magic: u64) {
                self.magic = magic;
            }
            fn born(&self) -> nodeipc_fdpass::ForkGeneration {
                self.born
            }
        }
    };
}

pub(crate) use handle_type;
