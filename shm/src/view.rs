//! Typed views of atomics placed in a region.

use std::sync::atomic::{AtomicI32, AtomicI64, AtomicU8, AtomicU16, AtomicU32, AtomicU64};

use crossbeam_utils::CachePadded;

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

// SAFETY: `CachePadded` is a single-field struct aligned to (and padded up to)
// a cache line; its one field is at offset 0, the padding is never read, and
// the field's own properties carry over. Every process using a layout with it
// is built from this same crate version.
unsafe impl<T: ShmSafe> ShmSafe for CachePadded<T> {}

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
