//! Reading a block in place: [`BlockView`], atomic word loads over the
//! block's memory, no copy of the block and no `&[u8]` over memory another
//! process may write.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::block_ref::BlockRef;
use crate::{Error, Handle, Result};

/// A block, read where it lies. Made by [`Handle::view`], which checked
/// the block (its slab owned, the offset a block of its class), its
/// generation (the reference is not stale) and its state (allocated; in a
/// slab of the viewing handle, handed out by it).
///
/// Every read is a relaxed atomic load of the block's 64-bit words (its
/// blocks start 64-byte aligned): another process writing the block at
/// the same time is no undefined behaviour, only changed bytes. Whether
/// the block was still the one referenced after the reads is
/// [`verify`](BlockView::verify)'s answer: the generation and state read
/// again.
///
/// Enough to parse or hash a transaction without copying it to the heap:
/// [`words`](BlockView::words) for a word-at-a-time consumer,
/// [`read_u64_le`](BlockView::read_u64_le) and friends for fields,
/// [`chunks`](BlockView::chunks) through a small stack buffer for a
/// byte-at-a-time one, [`copy_to`](BlockView::copy_to) for a copy.
///
/// # Examples
/// ```
/// use nodeipc_pool::{Pool, PoolConfig};
///
/// let pool = Pool::anonymous(&PoolConfig::new(4, 2))?;
/// let mut owner = pool.handle()?;
/// let reader = pool.free_only()?;
/// let block = owner.alloc(1232)?;
/// owner.write_at(block, 0, &7u64.to_le_bytes())?;
/// let view = reader.view(block)?;
/// assert_eq!(view.read_u64_le(0)?, 7);
/// let sum: u64 = view.words().fold(0u64, |sum, w| sum.wrapping_add(w));
/// assert_eq!(sum, u64::from_ne_bytes(7u64.to_le_bytes())); // the rest is zeros
/// view.verify()?; // still the block the reference named
/// # Ok::<(), nodeipc_pool::Error>(())
/// ```
#[derive(Debug)]
pub struct BlockView<'h> {
    handle: &'h Handle,
    block: BlockRef,
    offset: usize,
    words: &'h [AtomicU64],
}

impl<'h> BlockView<'h> {
    pub(crate) fn new(handle: &'h Handle, block: BlockRef) -> Result<BlockView<'h>> {
        let (offset, size) = handle.checked_block(block)?;
        // Classes are multiples of 64 from a 4096-aligned data area, so a
        // block is whole words, 64-byte aligned (checked again here).
        let words = handle
            .region()
            .view_slice::<AtomicU64>(offset, size as usize / 8)?;
        Ok(BlockView {
            handle,
            block,
            offset,
            words,
        })
    }

    /// The block's size in bytes (its class: what was asked for, rounded up).
    pub fn len(&self) -> usize {
        self.words.len() * 8
    }

    /// Whether the block has no bytes (never: the smallest class is 256).
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// The reference it views.
    pub fn block(&self) -> BlockRef {
        self.block
    }

    fn out_of_block(&self, at: usize, len: usize) -> Error {
        Error::OutOfBlock {
            pool: self.handle.region().label().to_owned(),
            offset: self.block.offset(),
            at,
            len,
            size: self.len() as u32,
        }
    }

    fn check(&self, at: usize, len: usize) -> Result<()> {
        match at.checked_add(len) {
            Some(end) if end <= self.len() => Ok(()),
            _ => Err(self.out_of_block(at, len)),
        }
    }

    /// Word `i` of the block (bytes `8i .. 8i + 8` in memory order, as a
    /// native-endian `u64`), loaded once.
    #[inline]
    fn word(&self, i: usize) -> [u8; 8] {
        self.words[i].load(Ordering::Relaxed).to_ne_bytes()
    }

    /// The block's words in order, each loaded once (native-endian: byte
    /// `8i + k` of the block is byte `k` of `to_ne_bytes()` of word `i`).
    pub fn words(&self) -> impl ExactSizeIterator<Item = u64> + '_ {
        self.words.iter().map(|w| w.load(Ordering::Relaxed))
    }

    /// Copies `buf.len()` bytes at `at` out of the block.
    ///
    /// # Errors
    /// [`Error::OutOfBlock`].
    pub fn copy_to(&self, at: usize, buf: &mut [u8]) -> Result<()> {
        self.check(at, buf.len())?;
        let mut done = 0;
        while done < buf.len() {
            let i = at + done;
            let skip = i % 8;
            let n = (8 - skip).min(buf.len() - done);
            buf[done..done + n].copy_from_slice(&self.word(i / 8)[skip..skip + n]);
            done += n;
        }
        Ok(())
    }

    /// Reads `len` bytes from `at` through `buf` (a caller's stack buffer),
    /// one `buf`-full at a time: `f` gets each chunk's offset in the block
    /// and its bytes. Nothing goes to the heap.
    ///
    /// # Errors
    /// [`Error::OutOfBlock`], before any chunk; [`Error::InvalidArgument`]
    /// for an empty `buf` with `len` > 0.
    pub fn chunks(
        &self,
        at: usize,
        len: usize,
        buf: &mut [u8],
        mut f: impl FnMut(usize, &[u8]),
    ) -> Result<()> {
        self.check(at, len)?;
        if buf.is_empty() && len > 0 {
            return Err(Error::InvalidArgument {
                pool: self.handle.region().label().to_owned(),
                what: "chunk buffer length",
                value: 0,
                limit: "must be at least 1 byte",
            });
        }
        let mut done = 0;
        while done < len {
            let n = buf.len().min(len - done);
            self.copy_to(at + done, &mut buf[..n])?;
            f(at + done, &buf[..n]);
            done += n;
        }
        Ok(())
    }

    /// The byte at `at`.
    ///
    /// # Errors
    /// [`Error::OutOfBlock`].
    pub fn read_u8(&self, at: usize) -> Result<u8> {
        self.check(at, 1)?;
        Ok(self.word(at / 8)[at % 8])
    }

    /// The little-endian `u16` at `at`.
    ///
    /// # Errors
    /// [`Error::OutOfBlock`].
    pub fn read_u16_le(&self, at: usize) -> Result<u16> {
        let mut b = [0u8; 2];
        self.copy_to(at, &mut b)?;
        Ok(u16::from_le_bytes(b))
    }

    /// The little-endian `u32` at `at`.
    ///
    /// # Errors
    /// [`Error::OutOfBlock`].
    pub fn read_u32_le(&self, at: usize) -> Result<u32> {
        let mut b = [0u8; 4];
        self.copy_to(at, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    /// The little-endian `u64` at `at` (one load when `at` is a multiple of 8).
    ///
    /// # Errors
    /// [`Error::OutOfBlock`].
    pub fn read_u64_le(&self, at: usize) -> Result<u64> {
        if at.is_multiple_of(8) && at < self.len() {
            return Ok(u64::from_le_bytes(self.word(at / 8)));
        }
        let mut b = [0u8; 8];
        self.copy_to(at, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Checks again that the block is the one the reference names (its
    /// generation and state as when the view was made): after reading, to
    /// know the bytes read belonged to it.
    ///
    /// # Errors
    /// [`Error::Stale`] or [`Error::NotAllocated`] when the block was freed
    /// (and maybe reused) meanwhile; those of [`Handle::view`].
    pub fn verify(&self) -> Result<()> {
        self.handle.checked_block(self.block).map(drop)
    }

    /// The block's bytes as a shared slice, for code that needs one (a
    /// parser taking `&[u8]`).
    ///
    /// # Safety
    /// Agave's ownership rule must hold for as long as the slice lives: the
    /// block was handed to this process (a queue message carried its
    /// reference over) and **no process writes it** until this process
    /// hands it back — its writer finished before it sent the reference,
    /// and nobody frees (and so reuses) it meanwhile. A peer that breaks the
    /// rule makes this undefined behaviour in *this* process; where a peer
    /// is not trusted to keep it, read through the safe methods instead.
    pub unsafe fn as_bytes(&self) -> &'h [u8] {
        // SAFETY: the range is this block, inside the mapping (checked by
        // `view_slice` in `new`); the caller guarantees that nobody writes
        // it while the slice lives (see above).
        unsafe { self.handle.region().bytes(self.offset, self.len()) }
            .expect("the block's range was checked when the view was made")
    }
}
