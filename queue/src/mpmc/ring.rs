//! The MPMC ring itself: claims, publication, release, and what is done
//! with the claims of the dead. Everything here works on the header, the
//! places and a [`Slots`] view, so the loom models drive this very code.
//!
//! Positions count claims ever (wrapping `u32`). A slot's sequence word
//! tells, for the position `p` it holds this lap, its state:
//!
//! | value | state |
//! |---|---|
//! | `p` | free: a producer may claim `p` |
//! | `p + 1` | published: a consumer may claim `p` and read it |
//! | `p + 2` | skipped: `p`'s producer died before publishing; no message |
//! | `p + capacity` | released: free for the next lap |
//!
//! A producer claims positions by compare-and-swap on `tail`, having first
//! written them into its place's claim word; a consumer claims by
//! compare-and-swap on `head` the same way. A claim held by a dead process
//! — named by no live place's claim word — is resolved by whoever is held
//! up by it: an unpublished one is skipped (counted), a claimed message
//! not yet released is released (counted as lost). Nothing waits forever,
//! nothing is read twice.

use crate::message::{Invalid, Message};
use crate::mpmc::layout::{Header, Place, claim_names, claim_word};
use crate::ring::{BadIndex, load_words, store_words};
use crate::sync::{AtomicU32, AtomicU64, Ordering, fence};

/// Claim attempts that may fail in a row before the ring is called corrupt:
/// each failure is another process's progress, so only a hostile writer
/// keeps a cursor from settling this long.
const MAX_TRIES: u32 = 1 << 20;

/// Where the slots are: sequence words and message words, by slot index.
pub(crate) trait Slots {
    /// Slot `index`'s sequence word (`index < capacity`).
    fn seq(&self, index: usize) -> &AtomicU32;
    /// Slot `index`'s message words (`index < capacity`).
    fn words(&self, index: usize) -> &[AtomicU64];
}

/// What a slot's sequence word says of position `p`, relative to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lap {
    /// `p`: free for `p`.
    Free,
    /// `p + 1`.
    Published,
    /// `p + 2`.
    Skipped,
    /// `p − capacity (+1, +2)`: the previous lap, not released yet.
    Previous,
    /// A later lap's value: the cursor read is stale.
    Ahead,
    /// Anything else: no process following the protocol wrote it.
    Bad,
}

fn lap(seq: u32, p: u32, capacity: u32) -> Lap {
    let d = seq.wrapping_sub(p);
    match d {
        0 => Lap::Free,
        1 => Lap::Published,
        2 => Lap::Skipped,
        _ if d < (1 << 31) && d >= capacity => Lap::Ahead,
        _ if p.wrapping_sub(seq) == capacity
            || p.wrapping_sub(seq) == capacity - 1
            || p.wrapping_sub(seq) == capacity - 2 =>
        {
            Lap::Previous
        }
        _ => Lap::Bad,
    }
}

/// What a producer's claim found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pushed {
    /// Positions `start .. start + count` are ours to fill and publish.
    Claimed { start: u32, count: u32 },
    /// Position `at`'s slot still holds the previous lap (sequence `seq`).
    Full { at: u32, seq: u32 },
}

/// What a consumer's claim found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Popped {
    /// Positions `start .. start + count` are ours to read and release.
    Claimed { start: u32, count: u32 },
    /// Position `at` is not published yet (its slot's sequence is `seq`).
    Empty { at: u32, seq: u32 },
}

/// A ring seen by one process.
#[derive(Clone, Copy)]
pub(crate) struct Ring<'a, S> {
    pub(crate) header: &'a Header,
    pub(crate) producers: &'a [Place],
    pub(crate) consumers: &'a [Place],
    pub(crate) slots: &'a S,
    pub(crate) capacity: u32,
}

impl<'a, S: Slots> Ring<'a, S> {
    #[inline]
    fn index(&self, p: u32) -> usize {
        (p & (self.capacity - 1)) as usize
    }

    #[inline]
    pub(crate) fn seq(&self, p: u32) -> &'a AtomicU32 {
        self.slots.seq(self.index(p))
    }

    fn bad(&self, what: &str, p: u32, seq: u32) -> BadIndex {
        BadIndex(format!(
            "{what}: slot of position {p} holds sequence {seq}, which no lap of a ring of {} gives it",
            self.capacity
        ))
    }

    /// Claims up to `want` free positions for `me` (a producer's place).
    #[inline]
    pub(crate) fn claim_push(&self, me: &Place, want: u32) -> Result<Pushed, BadIndex> {
        let want = want.clamp(1, self.capacity);
        for _ in 0..MAX_TRIES {
            let t = self.header.tail.load(Ordering::Acquire);
            let s = self.seq(t).load(Ordering::Acquire);
            match lap(s, t, self.capacity) {
                Lap::Free => {}
                Lap::Previous => return Ok(Pushed::Full { at: t, seq: s }),
                Lap::Published | Lap::Skipped | Lap::Ahead => continue,
                Lap::Bad => return Err(self.bad("push", t, s)),
            }
            let mut count = 1;
            while count < want {
                let p = t.wrapping_add(count);
                if self.seq(p).load(Ordering::Acquire) != p {
                    break;
                }
                count += 1;
            }
            // The claim is written before it is taken: whoever sees the
            // tail moved past `t` (acquire) sees the claim word name it.
            me.claim.store(claim_word(t, count), Ordering::Relaxed);
            if self
                .header
                .tail
                .compare_exchange(
                    t,
                    t.wrapping_add(count),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
            {
                return Ok(Pushed::Claimed { start: t, count });
            }
            // Not ours after all: a claim word left naming it would hold up
            // the skip of a dead producer's claim there for as long as we
            // stay idle.
            me.claim.store(0, Ordering::Relaxed);
        }
        Err(BadIndex(format!(
            "the tail did not settle in {MAX_TRIES} claims"
        )))
    }

    /// Fills claimed position `p` with `value` (before it is published).
    #[inline]
    pub(crate) fn write<T: Message>(&self, p: u32, value: &T) {
        store_words(self.slots.words(self.index(p)), value);
    }

    /// Publishes claimed positions `start .. start + count`, drops `me`'s
    /// claim, and wakes parked consumers.
    #[inline]
    pub(crate) fn publish(&self, me: &Place, start: u32, count: u32) {
        for k in 0..count {
            let p = start.wrapping_add(k);
            self.seq(p).store(p.wrapping_add(1), Ordering::Release);
        }
        me.claim.store(0, Ordering::Release);
        fence(Ordering::SeqCst);
        if self.header.data_parked.load(Ordering::Relaxed) != 0 {
            for k in 0..count {
                self.header.futex.wake_all(self.seq(start.wrapping_add(k)));
            }
        }
    }

    /// Claims up to `want` published (or skipped) positions for `me` (a
    /// consumer's place).
    #[inline]
    pub(crate) fn claim_pop(&self, me: &Place, want: u32) -> Result<Popped, BadIndex> {
        let want = want.clamp(1, self.capacity);
        for _ in 0..MAX_TRIES {
            let h = self.header.head.load(Ordering::Acquire);
            let s = self.seq(h).load(Ordering::Acquire);
            match lap(s, h, self.capacity) {
                Lap::Published | Lap::Skipped => {}
                Lap::Free => return Ok(Popped::Empty { at: h, seq: s }),
                Lap::Previous if h.wrapping_sub(s) != self.capacity => {
                    return Ok(Popped::Empty { at: h, seq: s });
                }
                Lap::Ahead => continue,
                Lap::Previous | Lap::Bad => return Err(self.bad("pop", h, s)),
            }
            let mut count = 1;
            while count < want {
                let p = h.wrapping_add(count);
                if !matches!(self.seq(p).load(Ordering::Acquire).wrapping_sub(p), 1 | 2) {
                    break;
                }
                count += 1;
            }
            me.claim.store(claim_word(h, count), Ordering::Relaxed);
            if self
                .header
                .head
                .compare_exchange(
                    h,
                    h.wrapping_add(count),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
            {
                return Ok(Popped::Claimed { start: h, count });
            }
            // As for a producer: never leave a claim word naming positions
            // another consumer took.
            me.claim.store(0, Ordering::Relaxed);
        }
        Err(BadIndex(format!(
            "the head did not settle in {MAX_TRIES} claims"
        )))
    }

    /// Reads claimed position `p`: its message (checked on our own copy),
    /// or `None` for a skipped one.
    #[inline]
    pub(crate) fn read<T: Message>(&self, p: u32) -> Option<Result<T, Invalid>> {
        let s = self.seq(p).load(Ordering::Acquire);
        (s == p.wrapping_add(1)).then(|| load_words(self.slots.words(self.index(p))))
    }

    /// Releases claimed positions `start .. start + count` for the next
    /// lap, drops `me`'s claim, and wakes parked producers (and consumers
    /// parked on a slot a slow consumer held).
    #[inline]
    pub(crate) fn release(&self, me: &Place, start: u32, count: u32) {
        for k in 0..count {
            let p = start.wrapping_add(k);
            self.seq(p)
                .store(p.wrapping_add(self.capacity), Ordering::Release);
        }
        me.claim.store(0, Ordering::Release);
        self.wake_released(start, count);
    }

    #[inline]
    fn wake_released(&self, start: u32, count: u32) {
        fence(Ordering::SeqCst);
        if self.header.room_parked.load(Ordering::Relaxed) != 0
            || self.header.data_parked.load(Ordering::Relaxed) != 0
        {
            for k in 0..count {
                self.header.futex.wake_all(self.seq(start.wrapping_add(k)));
            }
        }
    }

    /// Position `at` claimed by a producer that no live place names any
    /// more (it died between claiming and publishing) is marked skipped
    /// and counted; `true` when this call did it. `live(i)` says whether
    /// producer place `i`'s holder lives.
    pub(crate) fn skip_dead_claim(&self, at: u32, mut live: impl FnMut(usize) -> bool) -> bool {
        let seq = self.seq(at);
        if seq.load(Ordering::Acquire) != at {
            return false;
        }
        // Claimed at all? (Not yet claimed is merely empty.)
        let claimed = self.header.tail.load(Ordering::Acquire).wrapping_sub(at);
        if claimed == 0 || claimed > self.capacity {
            return false;
        }
        for (i, place) in self.producers.iter().enumerate() {
            if claim_names(place.claim.load(Ordering::Acquire), at) && live(i) {
                return false;
            }
        }
        if seq
            .compare_exchange(at, at.wrapping_add(2), Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return false;
        }
        self.header.counters.skipped.fetch_add(1, Ordering::AcqRel);
        fence(Ordering::SeqCst);
        if self.header.data_parked.load(Ordering::Relaxed) != 0 {
            self.header.futex.wake_all(seq);
        }
        true
    }

    /// Position `at` claimed by a consumer that no live place names any
    /// more (it died before releasing it) is released; its message, if it
    /// had one, counted as lost (never read twice). `true` when this call
    /// did it. `live(i)` says whether consumer place `i`'s holder lives.
    pub(crate) fn release_dead_claim(&self, at: u32, mut live: impl FnMut(usize) -> bool) -> bool {
        let seq = self.seq(at);
        let s = seq.load(Ordering::Acquire);
        let had_message = match s.wrapping_sub(at) {
            1 => true,
            2 => false,
            _ => return false,
        };
        // Claimed by a consumer at all? (Not yet claimed is merely full.)
        let claimed = self.header.head.load(Ordering::Acquire).wrapping_sub(at);
        if claimed == 0 || claimed > self.capacity {
            return false;
        }
        for (i, place) in self.consumers.iter().enumerate() {
            if claim_names(place.claim.load(Ordering::Acquire), at) && live(i) {
                return false;
            }
        }
        if seq
            .compare_exchange(
                s,
                at.wrapping_add(self.capacity),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_err()
        {
            return false;
        }
        if had_message {
            self.header.counters.lost.fetch_add(1, Ordering::AcqRel);
        }
        self.wake_released(at, 1);
        true
    }

    /// Whether position `head` holds something to claim (a message or a
    /// skip), without claiming it.
    pub(crate) fn has_data(&self) -> bool {
        let h = self.header.head.load(Ordering::Acquire);
        matches!(self.seq(h).load(Ordering::Acquire).wrapping_sub(h), 1 | 2)
    }

    /// Whether every claimed position has been claimed by a consumer too.
    pub(crate) fn drained(&self) -> bool {
        self.header.head.load(Ordering::Acquire) == self.header.tail.load(Ordering::Acquire)
    }
}
