//! Loom models of the slab's transitions, on loom's atomics: a remote free
//! racing the owner's clean-up, an adoption racing a late free, two frees
//! of one block at once, a freer killed between its bit and its mark. Run with
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test -p nodeipc-pool --lib --release`.

use loom::sync::Arc;
use loom::thread;

use crate::slab::{ALLOCATED, BITMAP_WORDS, FREE, Slab, state, word};
use crate::sync::{AtomicU32, AtomicU64, Ordering};

struct Shared {
    descriptors: Vec<AtomicU32>,
    remote: Vec<AtomicU64>,
}

impl Shared {
    /// `n` blocks, all allocated at generation 1.
    fn new(n: usize) -> Arc<Shared> {
        Arc::new(Shared {
            descriptors: (0..n).map(|_| AtomicU32::new(word(1, ALLOCATED))).collect(),
            remote: (0..BITMAP_WORDS).map(|_| AtomicU64::new(0)).collect(),
        })
    }

    fn slab(&self) -> Slab<'_> {
        Slab {
            descriptors: &self.descriptors,
            remote: &self.remote,
        }
    }

    /// The owner's clean-up, with `out` its record of blocks handed out:
    /// nothing here is forged.
    fn clean(&self, blocks: usize, out: &mut [u64; BITMAP_WORDS], back: &mut Vec<usize>) {
        self.slab().collect_remote(
            blocks,
            out,
            |i| back.push(i),
            |i, found| panic!("block {i} taken for forged ({found:#x})"),
        );
    }
}

/// Every block handed out.
const ALL_OUT: [u64; BITMAP_WORDS] = [u64::MAX; BITMAP_WORDS];

/// A block freed remotely while its owner cleans up (twice) comes back to
/// the owner exactly once, whichever clean-up sees it, and ends free.
#[test]
fn remote_free_racing_the_owners_clean_up() {
    loom::model(|| {
        let shared = Shared::new(2);
        let freer = {
            let shared = shared.clone();
            thread::spawn(move || shared.slab().free_remote(1, 1).unwrap())
        };
        let (mut back, mut out) = (Vec::new(), ALL_OUT);
        shared.clean(2, &mut out, &mut back);
        shared.clean(2, &mut out, &mut back);
        freer.join().unwrap();
        shared.clean(2, &mut out, &mut back);
        assert_eq!(back, vec![1]);
        assert_eq!(state(shared.descriptors[1].load(Ordering::Relaxed)), FREE);
        assert_eq!(
            state(shared.descriptors[0].load(Ordering::Relaxed)),
            ALLOCATED
        );
    });
}

/// A late free of a dead owner's block racing the adopter's adoption and
/// clean-up: the block becomes the adopter's exactly once; the block still
/// allocated stays live.
#[test]
fn adoption_racing_a_late_free() {
    loom::model(|| {
        let shared = Shared::new(2);
        let freer = {
            let shared = shared.clone();
            thread::spawn(move || shared.slab().free_remote(0, 1).unwrap())
        };
        let mut back = Vec::new();
        let mut out = shared.slab().adopt(2, |i| back.push(i));
        shared.clean(2, &mut out, &mut back);
        freer.join().unwrap();
        shared.clean(2, &mut out, &mut back);
        assert_eq!(back, vec![0]);
        assert_eq!(
            state(shared.descriptors[1].load(Ordering::Relaxed)),
            ALLOCATED
        );
    });
}

/// Two processes freeing the same block at once (one remotely, one as its
/// owner): exactly one succeeds, and the block is handed back once.
#[test]
fn two_frees_of_one_block_at_once() {
    loom::model(|| {
        let shared = Shared::new(1);
        let remote = {
            let shared = shared.clone();
            thread::spawn(move || shared.slab().free_remote(0, 1).is_ok())
        };
        let local = shared.slab().free_local(0, 1).is_ok();
        // The owner's record: a block it freed itself is no longer out.
        let mut out = ALL_OUT;
        if local {
            out[0] &= !1;
        }
        let remote = remote.join().unwrap();
        assert!(local ^ remote, "exactly one free succeeds");
        let mut back = Vec::new();
        shared.clean(1, &mut out, &mut back);
        assert_eq!(back.len(), usize::from(remote));
        assert_eq!(state(shared.descriptors[0].load(Ordering::Relaxed)), FREE);
    });
}

/// A freer killed between its bit and its mark (the bit alone, here)
/// racing the owner's clean-ups: the block stays allocated and its bit is
/// kept, so when its holder frees it again the owner takes it back once.
#[test]
fn a_freer_killed_between_its_bit_and_its_mark_strands_nothing() {
    loom::model(|| {
        let shared = Shared::new(1);
        let killed = {
            let shared = shared.clone();
            thread::spawn(move || shared.remote[0].fetch_or(1, Ordering::AcqRel))
        };
        let (mut back, mut out) = (Vec::new(), ALL_OUT);
        shared.clean(1, &mut out, &mut back);
        killed.join().unwrap();
        shared.clean(1, &mut out, &mut back);
        assert!(back.is_empty());
        assert_eq!(
            state(shared.descriptors[0].load(Ordering::Relaxed)),
            ALLOCATED
        );
        assert_eq!(shared.remote[0].load(Ordering::Relaxed), 1, "bit kept");
        shared.slab().free_remote(0, 1).unwrap();
        shared.clean(1, &mut out, &mut back);
        assert_eq!(back, vec![0]);
        assert_eq!(state(shared.descriptors[0].load(Ordering::Relaxed)), FREE);
    });
}
