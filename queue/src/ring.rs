//! The ring itself: indices, checks, copies, wake-ups. Everything here works
//! on a `Header` and the slot words alone, so the loom models drive exactly
//! this code with loom's atomics.
//!
//! Both indices count messages ever (wrapping `u32`s). The producer owns
//! `tail`, the consumer `head`; each keeps its own index locally (it is the
//! only writer) and a cache of the other's, reloaded only when the ring
//! looks full or empty. Every index read from shared memory is loaded once
//! and checked against what the protocol allows before it is used.

use crate::layout::{Geometry, Header};
use crate::message::{Incoming, Invalid, Message, Outgoing};
use crate::sync::{AtomicU64, Ordering};

/// Copies `value` into `words` (at least `size_of::<T>().div_ceil(8)` of
/// them) with relaxed word stores: a checked message is encoded first
/// (padding zeroed), a plain one goes as it is; the last word's bytes past
/// the message are 0. Whoever publishes the words orders the stores.
#[inline]
pub(crate) fn store_words<T: Message>(words: &[AtomicU64], value: &T) {
    if T::PLAIN {
        // SAFETY: a plain `T` has no padding (the trait's contract), so all
        // its bytes are initialised; read-only, for this call.
        let bytes = unsafe {
            std::slice::from_raw_parts(std::ptr::from_ref(value).cast::<u8>(), size_of::<T>())
        };
        return store_bytes(words, bytes);
    }
    store_bytes(words, Outgoing::new(value).bytes());
}

/// The word stores of [`store_words`].
#[inline]
fn store_bytes(words: &[AtomicU64], bytes: &[u8]) {
    let (chunks, rest) = bytes.as_chunks::<8>();
    for (word, chunk) in words.iter().zip(chunks) {
        word.store(u64::from_ne_bytes(*chunk), Ordering::Relaxed);
    }
    if !rest.is_empty() {
        let mut last = [0u8; 8];
        last[..rest.len()].copy_from_slice(rest);
        words[chunks.len()].store(u64::from_ne_bytes(last), Ordering::Relaxed);
    }
}

/// As [`load_words`], into `dst`: a plain `T` straight into it (any bytes
/// are one), a checked one through a private copy that must pass first.
#[inline]
pub(crate) fn load_words_into<T: Message>(words: &[AtomicU64], dst: &mut T) -> Result<(), Invalid> {
    if !T::PLAIN {
        *dst = load_words(words)?;
        return Ok(());
    }
    let words = &words[..size_of::<T>().div_ceil(8)];
    // SAFETY: `dst` is a live `T` of ours; a plain `T` is valid for any
    // bytes, so writing bytes into it never makes an invalid value.
    unsafe { copy_words(words, std::ptr::from_mut(dst).cast::<u8>(), size_of::<T>()) };
    Ok(())
}

/// Copies `size` bytes out of `words` (at least `size.div_ceil(8)` of them)
/// to `dst`.
///
/// On x86-64 the bytes come 16 at a time through `movdqu` in an `asm!`
/// block, a run of [`STRING_COPY`] bytes or more through one `rep movsb`
/// (the CPU's string copy), the rest (and on every other target all of
/// them) through relaxed word loads. Either way no reference is made over
/// the shared bytes and the compiler assumes nothing about them: the asm
/// block is opaque to it, so a misbehaving peer writing the slot meanwhile
/// gives us torn bytes in our copy, never undefined behaviour; the copy is
/// checked afterwards as any other. The wide loads are what a batch pop
/// needs to keep up with a `memcpy`-based ring (BENCHMARKS.md, "Queues
/// against shaq, 2026-11-28").
///
/// # Safety
/// `dst` is valid for `size` bytes of writes, memory only this thread sees.
///
/// # Panics
/// When `words` holds fewer than `size.div_ceil(8)` words.
#[inline]
unsafe fn copy_words(words: &[AtomicU64], dst: *mut u8, size: usize) {
    let words = &words[..size.div_ceil(8)];
    #[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
    let (words, dst, size) = {
        if size >= STRING_COPY {
            // SAFETY: `words` holds at least `size` bytes (sliced above),
            // `dst` takes `size` (the caller's); the string copy reads and
            // writes those bytes alone, forward (the direction flag is clear
            // on entry to an asm block), and leaves the flags as they were.
            unsafe {
                std::arch::asm!(
                    "rep movsb",
                    inout("rcx") size => _,
                    inout("rsi") words.as_ptr().cast::<u8>() => _,
                    inout("rdi") dst => _,
                    options(nostack, preserves_flags),
                );
            }
            return;
        }
        let pairs = size / 16;
        for k in 0..pairs {
            // SAFETY: `16k + 16 ≤ size`: bytes of `words` (its length is
            // checked above) and of `dst` (the caller's).
            unsafe { copy16(words.as_ptr().cast::<u8>().add(16 * k), dst.add(16 * k)) };
        }
        // SAFETY: `16 × pairs ≤ size`, within `dst` (the caller's).
        let rest = unsafe { dst.add(16 * pairs) };
        (&words[2 * pairs..], rest, size % 16)
    };
    let full = size / 8;
    for (k, word) in words[..full].iter().enumerate() {
        let bytes = word.load(Ordering::Relaxed).to_ne_bytes();
        // SAFETY: `k < size / 8`: bytes `8k .. 8k + 8` of `dst` (caller).
        unsafe { dst.add(8 * k).cast::<[u8; 8]>().write_unaligned(bytes) };
    }
    if !size.is_multiple_of(8) {
        let last = words[full].load(Ordering::Relaxed).to_ne_bytes();
        // SAFETY: the last `size % 8` bytes of `dst` (caller), from a local.
        unsafe { std::ptr::copy_nonoverlapping(last.as_ptr(), dst.add(8 * full), size % 8) };
    }
}

/// The run from which one `rep movsb` copies faster than 16-byte loads: a
/// batch pop's run of messages (versus-shaq `spsc-throughput`, 64 messages
/// of 64 bytes, 8 % more a second), not a single small message.
#[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
const STRING_COPY: usize = 512;

/// Copies 16 bytes from shared `src` to private `dst`: one `movdqu` load in
/// an `asm!` block (see [`copy_words`]), one ordinary store.
///
/// # Safety
/// `src` is valid for 16 bytes of reads (slot words of a live mapping),
/// `dst` for 16 bytes of writes that only this thread sees.
#[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
#[inline(always)]
unsafe fn copy16(src: *const u8, dst: *mut u8) {
    use std::arch::x86_64::__m128i;
    let v: __m128i;
    // SAFETY: the load reads the 16 bytes at `src` (the caller's) and
    // nothing else; no stack, no flags.
    unsafe {
        std::arch::asm!(
            "movdqu {v}, [{src}]",
            src = in(reg) src,
            v = out(xmm_reg) v,
            options(nostack, preserves_flags, readonly),
        );
    }
    // SAFETY: 16 bytes of `dst` (the caller's); unaligned store.
    unsafe { dst.cast::<__m128i>().write_unaligned(v) };
}

/// Copies a `T` out of `words` ([`copy_words`]) into private memory,
/// then checks that copy ([`Message::check`]; nothing for plain data, where
/// whatever a misbehaving writer left is some value).
///
/// # Panics
/// When `words` holds fewer than `size_of::<T>().div_ceil(8)` words (never:
/// slots are that long, the element size checked at join).
#[inline]
pub(crate) fn load_words<T: Message>(words: &[AtomicU64]) -> Result<T, Invalid> {
    let size = size_of::<T>();
    // Exactly the words a `T` covers: slicing panics, never reads short.
    let words = &words[..size.div_ceil(8)];
    let mut copy = Incoming::<T>::new();
    // SAFETY: the copy is `size` bytes of this thread's own memory.
    unsafe { copy_words(words, copy.as_mut_ptr(), size) };
    // SAFETY: `words` holds `size.div_ceil(8)` words, so `copy_words` wrote
    // every one of the copy's `size` bytes.
    unsafe { copy.finish() }
}

/// An index the peer wrote that the protocol cannot produce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BadIndex(pub(crate) String);

// The descriptions are built out of line, though they never run on a sound
// ring: inlined into `ready`, the formatting (whose arguments borrow the
// loaded tail) had the poll loop keep its ring and indices in stack memory,
// and a ping-pong's round trip took 200 ns more (versus-shaq `spsc-rt-poll`
// 750 against 540 ns; BENCHMARKS.md, "Queues against shaq").
impl BadIndex {
    /// A head the producer cannot accept, described.
    #[cold]
    #[inline(never)]
    fn head(head: u32, p: &ProducerState) -> BadIndex {
        BadIndex(format!(
            "head {head} is not between the last head seen ({}) and the tail ({})",
            p.head_seen, p.tail
        ))
    }

    /// A tail the consumer cannot accept, described.
    #[cold]
    #[inline(never)]
    fn tail(tail: u32, c: &ConsumerState, capacity: u32) -> BadIndex {
        let ready = tail.wrapping_sub(c.head);
        BadIndex(if ready > capacity {
            format!(
                "tail {tail} is {ready} past head {} in a ring of {capacity}",
                c.head
            )
        } else {
            format!(
                "tail {tail} is not between the last tail seen ({}) and head {} + capacity {capacity}",
                c.tail_seen, c.head
            )
        })
    }
}

/// The producer's private state.
#[derive(Debug)]
pub(crate) struct ProducerState {
    pub(crate) tail: u32,
    pub(crate) head_seen: u32,
}

/// The consumer's private state.
#[derive(Debug)]
pub(crate) struct ConsumerState {
    pub(crate) head: u32,
    pub(crate) tail_seen: u32,
}

/// A ring seen by one side: the header and the slot words. Whoever builds
/// one guarantees `slots.len() == geo.capacity × geo.stride`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ring<'a> {
    pub(crate) header: &'a Header,
    pub(crate) slots: &'a [AtomicU64],
    pub(crate) geo: Geometry,
}

impl<'a> Ring<'a> {
    fn mask(&self) -> u32 {
        self.geo.capacity - 1
    }

    /// Where slot `index`'s words start.
    #[inline]
    fn base(&self, index: u32) -> usize {
        (index & self.mask()) as usize * self.geo.stride
    }

    /// The words of the slot of `index`.
    #[inline]
    fn slot(&self, index: u32) -> &'a [AtomicU64] {
        let base = self.base(index);
        debug_assert!(base + self.geo.stride <= self.slots.len());
        // SAFETY: `slots` holds exactly `capacity × stride` words (checked
        // when the ring was joined) and `base` is a masked index times the
        // stride, so `base + stride ≤ len`: the range is always in bounds.
        unsafe { self.slots.get_unchecked(base..base + self.geo.stride) }
    }

    /// The words of the slot of `index` that a `T` covers: a length known
    /// at compile time, so the copies unroll with no check a word. `T`'s
    /// size is the ring's element size (checked at join), so this is the
    /// whole slot; were it not, the slicing would panic, never reach past.
    #[inline]
    fn slot_of<T>(&self, index: u32) -> &'a [AtomicU64] {
        &self.slot(index)[..size_of::<T>().div_ceil(8)]
    }

    /// Copies `value` into the slot of `index` ([`store_words`]); its
    /// publication (the release store of `tail`) orders the stores.
    #[inline]
    pub(crate) fn write_slot<T: Message>(&self, index: u32, value: &T) {
        store_words(self.slot_of::<T>(index), value);
    }

    /// Copies the slot of `index` out and checks the copy ([`load_words`]).
    #[inline]
    pub(crate) fn read_slot<T: Message>(&self, index: u32) -> Result<T, Invalid> {
        load_words(self.slot_of::<T>(index))
    }

    /// As [`read_slot`](Ring::read_slot), into `dst` ([`load_words_into`]).
    #[inline]
    pub(crate) fn read_slot_into<T: Message>(
        &self,
        index: u32,
        dst: &mut T,
    ) -> Result<(), Invalid> {
        load_words_into(self.slot_of::<T>(index), dst)
    }

    /// Copies the `out.len()` messages from `index` on into `out` at once,
    /// when that is one copy: a plain `T` filling its slot exactly, so the
    /// messages lie back to back (two runs where the ring wraps). `false`
    /// when it is not, and the caller copies slot by slot.
    #[inline]
    pub(crate) fn read_run_plain<T: Message>(&self, index: u32, out: &mut [T]) -> bool {
        if !T::PLAIN || self.geo.stride * 8 != size_of::<T>() || size_of::<T>() == 0 {
            return false;
        }
        let start = (index & self.mask()) as usize;
        let first = out.len().min(self.geo.capacity as usize - start);
        let (head, tail) = out.split_at_mut(first);
        for (from, part) in [(start, head), (0, tail)] {
            if part.is_empty() {
                continue;
            }
            let words = &self.slots[from * self.geo.stride..][..part.len() * self.geo.stride];
            // SAFETY: `part` is the caller's own `T`s, `size_of_val(part)`
            // bytes (`words` is exactly as long: slots are `T`s back to
            // back); a plain `T` is valid for any bytes.
            unsafe {
                copy_words(words, part.as_mut_ptr().cast::<u8>(), size_of_val(part));
            }
        }
        true
    }

    /// Free slots, reloading the consumer's head when the cache shows fewer
    /// than `want`.
    #[inline]
    pub(crate) fn room(&self, p: &mut ProducerState, want: u32) -> Result<u32, BadIndex> {
        let cap = self.geo.capacity;
        let free = cap - p.tail.wrapping_sub(p.head_seen);
        if free >= want.max(1) {
            return Ok(free);
        }
        let head = self.header.head.load(Ordering::Acquire);
        // The head only moves forward, and never past what we published.
        let advanced = head.wrapping_sub(p.head_seen);
        if advanced > p.tail.wrapping_sub(p.head_seen) {
            return Err(BadIndex::head(head, p));
        }
        p.head_seen = head;
        Ok(cap - p.tail.wrapping_sub(head))
    }

    /// Publishes `n` more messages and wakes a parked consumer: a release
    /// store, then one fence and one load (no read-modify-write, no system
    /// call) when nobody sleeps.
    #[inline]
    pub(crate) fn publish(&self, p: &mut ProducerState, n: u32) {
        p.tail = p.tail.wrapping_add(n);
        self.header.tail.store(p.tail, Ordering::Release);
        self.header
            .futex
            .wake(&self.header.tail, &self.header.tail_parked);
    }

    /// Messages ready, reloading the producer's tail when the cache shows
    /// fewer than `want`.
    #[inline]
    pub(crate) fn ready(&self, c: &mut ConsumerState, want: u32) -> Result<u32, BadIndex> {
        let ready = c.tail_seen.wrapping_sub(c.head);
        if ready >= want.max(1) {
            return Ok(ready);
        }
        let tail = self.header.tail.load(Ordering::Acquire);
        let ready = tail.wrapping_sub(c.head);
        // The tail never runs more than a ring ahead of the head, and only
        // moves forward: fewer ready than last seen is a tail moved back (by
        // both checks, a tail lies in [tail seen, head + capacity]).
        if ready > self.geo.capacity || ready < c.tail_seen.wrapping_sub(c.head) {
            return Err(BadIndex::tail(tail, c, self.geo.capacity));
        }
        c.tail_seen = tail;
        Ok(ready)
    }

    /// Releases `n` consumed slots to the producer and wakes it if parked.
    #[inline]
    pub(crate) fn release(&self, c: &mut ConsumerState, n: u32) {
        c.head = c.head.wrapping_add(n);
        self.header.head.store(c.head, Ordering::Release);
        self.header
            .futex
            .wake(&self.header.head, &self.header.head_parked);
    }
}
