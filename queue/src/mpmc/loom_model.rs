//! Loom models of the MPMC ring: the code of `mpmc/ring.rs` itself, on
//! loom's atomics. A process's death is modelled by a thread that stops
//! and then clears its `alive` flag (what the kernel answers once it is
//! gone); the liveness closure reads that flag. Run with
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test -p nodeipc-queue --lib --release`.

use loom::sync::Arc;
use loom::sync::atomic::AtomicBool;
use loom::thread;

use crate::mpmc::layout::{Header, Place};
use crate::mpmc::ring::{Popped, Pushed, Ring, Slots};
use crate::sync::{AtomicU32, AtomicU64, Ordering};

struct Shared {
    header: Header,
    producers: Vec<Place>,
    consumers: Vec<Place>,
    seqs: Vec<AtomicU32>,
    words: Vec<[AtomicU64; 1]>,
    /// Whether each producer, then each consumer, is alive.
    alive: Vec<AtomicBool>,
    capacity: u32,
}

impl Slots for Shared {
    fn seq(&self, index: usize) -> &AtomicU32 {
        &self.seqs[index]
    }

    fn words(&self, index: usize) -> &[AtomicU64] {
        &self.words[index]
    }
}

impl Shared {
    fn new(capacity: u32, producers: usize, consumers: usize) -> Arc<Shared> {
        Arc::new(Shared {
            header: Header::default(),
            producers: (0..producers).map(|_| Place::default()).collect(),
            consumers: (0..consumers).map(|_| Place::default()).collect(),
            seqs: (0..capacity).map(AtomicU32::new).collect(),
            words: (0..capacity).map(|_| [AtomicU64::new(0)]).collect(),
            alive: (0..producers + consumers)
                .map(|_| AtomicBool::new(true))
                .collect(),
            capacity,
        })
    }

    fn ring(&self) -> Ring<'_, Shared> {
        Ring {
            header: &self.header,
            producers: &self.producers,
            consumers: &self.consumers,
            slots: self,
            capacity: self.capacity,
        }
    }

    fn producer_alive(&self, i: usize) -> bool {
        self.alive[i].load(Ordering::SeqCst)
    }

    fn consumer_alive(&self, i: usize) -> bool {
        self.alive[self.producers.len() + i].load(Ordering::SeqCst)
    }

    /// Producer `i` pushes `value` (spinning while full); `false` if full.
    fn try_push(&self, i: usize, value: u64) -> bool {
        let ring = self.ring();
        match ring.claim_push(&self.producers[i], 1).unwrap() {
            Pushed::Claimed { start, count } => {
                assert_eq!(count, 1);
                ring.write(start, &value);
                ring.publish(&self.producers[i], start, 1);
                true
            }
            Pushed::Full { .. } => false,
        }
    }

    /// Consumer `i` pops one message; skipped positions are passed over,
    /// a position held up by a dead producer skipped.
    fn try_pop(&self, i: usize) -> Option<u64> {
        let ring = self.ring();
        loop {
            match ring.claim_pop(&self.consumers[i], 1).unwrap() {
                Popped::Claimed { start, .. } => {
                    let got = ring.read::<u64>(start).map(Result::unwrap);
                    ring.release(&self.consumers[i], start, 1);
                    match got {
                        Some(value) => return Some(value),
                        None => continue,
                    }
                }
                Popped::Empty { at, .. } => {
                    if !ring.skip_dead_claim(at, |p| self.producer_alive(p)) {
                        return None;
                    }
                }
            }
        }
    }
}

/// A producer claims a position and dies before publishing it, while
/// another producer pushes: the consumer skips the dead claim (counted
/// once) and gets the live producer's message; nothing is read twice and
/// nothing waits for the dead.
#[test]
fn a_dead_producers_claim_is_skipped_and_a_live_one_never() {
    loom::model(|| {
        let shared = Shared::new(4, 2, 1);
        let dying = {
            let shared = shared.clone();
            thread::spawn(move || {
                // Claims position(s) and dies before writing or publishing.
                let ring = shared.ring();
                if let Pushed::Claimed { .. } = ring.claim_push(&shared.producers[0], 1).unwrap() {}
                shared.alive[0].store(false, Ordering::SeqCst);
            })
        };
        let live = {
            let shared = shared.clone();
            thread::spawn(move || assert!(shared.try_push(1, 7)))
        };
        live.join().unwrap();
        // The consumer looks until it has the live message.
        let mut got = None;
        while got.is_none() {
            got = shared.try_pop(0);
            if got.is_none() {
                thread::yield_now();
            }
        }
        assert_eq!(got, Some(7));
        dying.join().unwrap();
        // Everything claimed is accounted for: the dead claim skipped (by
        // now or by the next look), never delivered.
        while shared.try_pop(0).is_some() {
            panic!("a message from nowhere");
        }
        let skipped = shared.header.counters.skipped.load(Ordering::SeqCst);
        assert_eq!(skipped, 1, "the dead claim, skipped once");
        assert_eq!(
            shared.header.head.load(Ordering::SeqCst),
            shared.header.tail.load(Ordering::SeqCst)
        );
    });
}

/// A consumer's skip of a position races the producer that claimed it,
/// alive and slow: the skip never wins against a live claim, so the
/// message is published and delivered once.
#[test]
fn a_skip_never_races_a_live_producers_publication() {
    loom::model(|| {
        let shared = Shared::new(4, 1, 1);
        let producer = {
            let shared = shared.clone();
            thread::spawn(move || assert!(shared.try_push(0, 9)))
        };
        // The consumer tries (and may try to skip) while the producer works.
        let first = shared.try_pop(0);
        producer.join().unwrap();
        let second = shared.try_pop(0);
        assert_eq!(
            [first, second].iter().flatten().collect::<Vec<_>>(),
            vec![&9],
            "delivered exactly once"
        );
        assert_eq!(shared.header.counters.skipped.load(Ordering::SeqCst), 0);
    });
}

/// A consumer claims a message and dies before releasing it, racing
/// another consumer's claims; the producer that needs the slot again
/// releases the dead claim (the message lost, counted once): the lost
/// message is never delivered, every other one exactly once.
#[test]
fn a_dead_consumers_claim_is_released_as_lost_racing_another_consumer() {
    loom::model(|| {
        let shared = Shared::new(4, 1, 2);
        for v in 0..4 {
            assert!(shared.try_push(0, v));
        }
        // The position the dying consumer claimed, + 1 (0: none).
        let held = Arc::new(AtomicU32::new(0));
        let dying = {
            let (shared, held) = (shared.clone(), held.clone());
            thread::spawn(move || {
                let ring = shared.ring();
                // Claims a position and dies before reading it through.
                if let Popped::Claimed { start, .. } =
                    ring.claim_pop(&shared.consumers[0], 1).unwrap()
                {
                    held.store(start + 1, Ordering::SeqCst);
                }
                shared.alive[1].store(false, Ordering::SeqCst);
            })
        };
        let other = {
            let shared = shared.clone();
            thread::spawn(move || (0..2).filter_map(|_| shared.try_pop(1)).collect::<Vec<_>>())
        };
        dying.join().unwrap();
        let mut got = other.join().unwrap();
        // The producer goes on, resolving what holds it up, the consumer
        // draining as it goes.
        let ring = shared.ring();
        for v in 4..8 {
            let mut pushed = false;
            for _ in 0..4 {
                if shared.try_push(0, v) {
                    pushed = true;
                    break;
                }
                let t = shared.header.tail.load(Ordering::SeqCst);
                ring.release_dead_claim(t.wrapping_sub(4), |c| shared.consumer_alive(c));
                got.extend(shared.try_pop(1));
            }
            assert!(pushed, "push {v} held up for good");
        }
        while let Some(v) = shared.try_pop(1) {
            got.push(v);
        }
        let lost = shared.header.counters.lost.load(Ordering::SeqCst);
        let mut sorted = got.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(
            sorted.len(),
            got.len(),
            "a message delivered twice: {got:?}"
        );
        match held.load(Ordering::SeqCst) {
            0 => assert_eq!((lost, sorted), (0, (0..8).collect::<Vec<u64>>())),
            p => {
                let mut want: Vec<u64> = (0..8).collect();
                want.retain(|&m| m != u64::from(p - 1));
                assert_eq!((lost, sorted), (1, want), "lost exactly the held one");
            }
        }
    });
}

/// A consumer parked on an empty position is always woken by the push
/// (a lost wake-up would leave it asleep: loom reports the deadlock).
#[test]
fn a_parked_consumer_is_woken_by_the_publication() {
    loom::model(|| {
        let shared = Shared::new(4, 1, 1);
        let consumer = {
            let shared = shared.clone();
            thread::spawn(move || {
                loop {
                    if let Some(v) = shared.try_pop(0) {
                        return v;
                    }
                    let ring = shared.ring();
                    let at = shared.header.head.load(Ordering::SeqCst);
                    let seq = ring.seq(at);
                    let seen = seq.load(Ordering::SeqCst);
                    if seen == at {
                        shared
                            .header
                            .futex
                            .park_while(seq, &shared.header.data_parked, seen);
                    }
                }
            })
        };
        assert!(shared.try_push(0, 3));
        assert_eq!(consumer.join().unwrap(), 3);
    });
}
