//! Typed views of atomics placed in a region.

use std::sync::atomic::{AtomicI32, AtomicI64, AtomicU8, AtomicU16, AtomicU32, AtomicU64};

use crate::{Error, Region, Result};

/// Types that may be viewed in shared memory through a plain `&T`.
///
/// # Safety
/// An implementor promises that
/// - every bit pattern, including all zeros, is a valid value (another process
///   may have written anything);
/// - every byte of it is only ever changed through atomic operations, so a
///   `&T` shared with other threads and processes is sound (it is `Sync` and
///   holds nothing but atomics, arrays of them, or `#[repr(C)]` structs of them);
/// - its layout is fixed (`#[repr(C)]`, `#[repr(transparent)]` or a primitive),
///   so every process that maps the region sees the same fields at the same offsets;
/// - it holds no pointers or references: addresses differ between processes.
pub unsafe trait ShmSafe: Sync {}

macro_rules! shm_safe_atomics {
    ($($t:ty),*) => {$(
        // SAFETY: an atomic integer: any bit pattern is valid, all access is
        // atomic, its layout is that of the integer, and it holds no pointer.
        unsafe impl ShmSafe for $t {}
    )*};
}
shm_safe_atomics!(
    AtomicU8, AtomicU16, AtomicU32, AtomicU64, AtomicI32, AtomicI64
);

// SAFETY: an array of `ShmSafe` elements is laid out element after element
// and inherits every property of its element type.
unsafe impl<T: ShmSafe, const N: usize> ShmSafe for [T; N] {}

/// A value alone on its own 128-byte line, for words that different
/// processes write (an arrival count beside a wake-up word, say): sharing a
/// line would make every write of one invalidate the other in every cache.
///
/// 128 bytes, not the 64 of a cache line: Intel's spatial prefetcher pulls
/// lines in pairs. Unlike `crossbeam_utils::CachePadded`, whose alignment
/// varies with the target and the crate version, this one is fixed, so a
/// layout built on it is the same for every process that maps the region,
/// whatever it was built with: the value sits at offset 0 and the whole
/// takes a multiple of 128 bytes.
#[derive(Default, Debug)]
#[repr(C, align(128))]
pub struct Padded<T> {
    value: T,
}

const _: () = assert!(align_of::<Padded<AtomicU32>>() == 128);
const _: () = assert!(size_of::<Padded<AtomicU32>>() == 128);
const _: () = assert!(std::mem::offset_of!(Padded<AtomicU64>, value) == 0);

impl<T> Padded<T> {
    /// Wraps `value`.
    pub const fn new(value: T) -> Padded<T> {
        Padded { value }
    }
}

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.value
    }
}

// SAFETY: `#[repr(C, align(128))]` with one field at offset 0 (asserted
// above); the padding is never read, and the field's own properties carry over.
unsafe impl<T: ShmSafe> ShmSafe for Padded<T> {}

impl Region {
    /// A reference to a `T` placed at `offset`, bounds- and alignment-checked.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] or [`Error::Misaligned`].
    ///
    /// # Examples
    /// ```
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// let region = nodeipc_shm::Region::anonymous(4096)?;
    /// let word: &AtomicU32 = region.view(64)?;
    /// word.store(7, Ordering::Release);
    /// assert!(region.view::<AtomicU32>(65).is_err()); // misaligned
    /// # Ok::<(), nodeipc_shm::Error>(())
    /// ```
    #[inline]
    pub fn view<T: ShmSafe>(&self, offset: usize) -> Result<&T> {
        self.check_placement::<T>(offset, size_of::<T>())?;
        // SAFETY: the range is inside the live mapping and aligned for `T`
        // (checked above), and `T: ShmSafe` makes any bytes a valid `T` that
        // may be shared by reference; the mapping outlives `&self`.
        Ok(unsafe { &*self.as_ptr().add(offset).cast::<T>() })
    }

    /// A slice of `count` consecutive `T`s starting at `offset`.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] (also when `count * size_of::<T>()` overflows)
    /// or [`Error::Misaligned`].
    pub fn view_slice<T: ShmSafe>(&self, offset: usize, count: usize) -> Result<&[T]> {
        let bytes = count
            .checked_mul(size_of::<T>())
            .ok_or(Error::OutOfBounds {
                object: self.label().to_owned(),
                offset,
                len: usize::MAX,
                size: self.len(),
            })?;
        self.check_placement::<T>(offset, bytes)?;
        // SAFETY: as in `view`, for `count` elements that fit in the mapping.
        Ok(unsafe { std::slice::from_raw_parts(self.as_ptr().add(offset).cast::<T>(), count) })
    }

    #[inline]
    fn check_placement<T>(&self, offset: usize, bytes: usize) -> Result<()> {
        self.check_range(offset, bytes)?;
        let align = align_of::<T>();
        if !(self.as_ptr() as usize + offset).is_multiple_of(align) {
            return Err(Error::Misaligned {
                object: self.label().to_owned(),
                offset,
                align,
                type_name: std::any::type_name::<T>(),
            });
        }
        Ok(())
    }
}
