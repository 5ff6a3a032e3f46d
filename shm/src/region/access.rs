//! Copies in and out of a region, bounds checked, and the in-place slices
//! whose soundness the caller's protocol guarantees.

use crate::{Error, Region, Result};

impl Region {
    /// Checks that `offset..offset + len` lies inside the mapping.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] naming the range and the size.
    #[inline]
    pub fn check_range(&self, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len() => Ok(()),
            _ => Err(Error::OutOfBounds {
                object: self.label.clone(),
                offset,
                len,
                size: self.len(),
            }),
        }
    }

    /// Copies `buf.len()` bytes at `offset` out of the region.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`]; nothing is copied then.
    pub fn read_at(&self, offset: usize, buf: &mut [u8]) -> Result<()> {
        self.check_range(offset, buf.len())?;
        // SAFETY: the range was checked to lie in the live mapping, `buf` is a
        // distinct local buffer, and no reference to the mapped bytes exists.
        unsafe {
            std::ptr::copy_nonoverlapping(self.as_ptr().add(offset), buf.as_mut_ptr(), buf.len())
        };
        Ok(())
    }

    /// Copies `buf.len()` bytes at `offset` into uninitialised memory (the
    /// spare capacity of a buffer the caller reuses, say) and returns them,
    /// now initialised. As [`read_at`](Region::read_at), without first
    /// zeroing a buffer only to overwrite it.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`]; nothing is copied then.
    pub fn read_uninit<'b>(
        &self,
        offset: usize,
        buf: &'b mut [std::mem::MaybeUninit<u8>],
    ) -> Result<&'b mut [u8]> {
        self.check_range(offset, buf.len())?;
        // SAFETY: the range was checked to lie in the live mapping, `buf` is a
        // distinct local buffer, and no reference to the mapped bytes exists;
        // a process writing the range meanwhile changes only what we copy.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.as_ptr().add(offset),
                buf.as_mut_ptr().cast::<u8>(),
                buf.len(),
            );
        }
        // SAFETY: every byte of `buf` was written just above.
        Ok(unsafe { &mut *(buf as *mut [std::mem::MaybeUninit<u8>] as *mut [u8]) })
    }

    /// Copies `data` into the region at `offset`.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`], [`Error::ReadOnly`]; nothing is written then.
    pub fn write_at(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.check_writable()?;
        self.check_range(offset, data.len())?;
        // SAFETY: the range was checked to lie in the live, writable mapping,
        // `data` is a distinct buffer, and no reference to the mapped bytes exists.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.as_ptr().add(offset), data.len())
        };
        Ok(())
    }

    /// The bytes at `offset..offset + len` as a shared slice, for reading
    /// (decoding, hashing) in place without a copy.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`].
    ///
    /// # Safety
    /// While the slice lives, no thread of any process may write the range:
    /// the caller's protocol must guarantee it (the usual way: the range's
    /// writer waits for the reader to release it, and the reader maps the
    /// region read-only so it cannot write it by mistake either).
    pub unsafe fn bytes(&self, offset: usize, len: usize) -> Result<&[u8]> {
        self.check_range(offset, len)?;
        // SAFETY: in bounds of the live mapping (checked above); the caller
        // guarantees nobody writes the range while the slice lives.
        Ok(unsafe { std::slice::from_raw_parts(self.as_ptr().add(offset), len) })
    }

    /// The bytes at `offset..offset + len` as a mutable slice, for encoding
    /// straight into the region.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`], [`Error::ReadOnly`].
    ///
    /// # Safety
    /// While the slice lives, no thread of any process may read or write the
    /// range, and no other slice over it may exist.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn bytes_mut(&self, offset: usize, len: usize) -> Result<&mut [u8]> {
        self.check_writable()?;
        self.check_range(offset, len)?;
        // SAFETY: in bounds of the live, writable mapping (checked above); the
        // caller guarantees exclusive access to the range while the slice lives.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.as_ptr().add(offset), len) })
    }
}

/// Which way a [`Region::prefetch`] expects the lines to be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prefetch {
    /// Read soon: the lines are fetched shared (`prefetcht0`).
    Read,
    /// Written soon: the lines are fetched owned (`prefetchw`), so the
    /// write that follows finds them here instead of asking the core that
    /// read them last.
    Write,
}

impl Region {
    /// Asks this core to fetch the cache lines of `offset..offset + len`
    /// ahead of use: a hint, which changes nothing any process sees in the
    /// region and never faults. The part of the range past the mapping is
    /// ignored. A no-op where no prefetch instruction is known (every
    /// target but x86-64).
    ///
    /// What it is for: a line another core used last costs a round trip
    /// between the cores on first touch (hundreds of nanoseconds on a
    /// virtual machine). Fetched early, that trip overlaps other work, or
    /// another such trip, instead of stalling the thread when it comes.
    #[inline]
    pub fn prefetch(&self, offset: usize, len: usize, intent: Prefetch) {
        const LINE: usize = 64;
        let end = offset.saturating_add(len).min(self.len());
        let mut at = offset - offset % LINE;
        while at < end {
            prefetch_line(self.as_ptr().wrapping_add(at), intent);
            at += LINE;
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn prefetch_line(line: *const u8, intent: Prefetch) {
    // SAFETY: prefetch instructions touch no architectural state: they
    // neither fault (whatever the address) nor change memory, so no other
    // process mapping the line can tell. `prefetchw` decodes as a no-op on
    // the x86-64 cores that predate it.
    unsafe {
        match intent {
            Prefetch::Read => std::arch::asm!(
                "prefetcht0 [{line}]",
                line = in(reg) line,
                options(nostack, preserves_flags, readonly)
            ),
            Prefetch::Write => std::arch::asm!(
                "prefetchw [{line}]",
                line = in(reg) line,
                options(nostack, preserves_flags, readonly)
            ),
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn prefetch_line(_line: *const u8, _intent: Prefetch) {}
