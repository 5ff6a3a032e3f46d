//! A peer that writes anything into the pool's metadata: errors, never an
//! access outside the region, a panic or a hang.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use nodeipc_pool::{BlockRef, Handle, Pool, PoolConfig};
use nodeipc_testkit::Watchdog;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Arbitrary bytes over the metadata (past the header): every call
    /// returns, Ok or Err.
    #[test]
    fn arbitrary_metadata_never_panics(
        noise in proptest::collection::vec((0usize..1 << 14, any::<u8>()), 0..400),
        refs in proptest::collection::vec(any::<u64>(), 0..16),
    ) {
        let pool = Pool::anonymous(&PoolConfig::new(4, 2)).unwrap();
        let mut h = pool.handle().unwrap();
        let mine: Vec<BlockRef> = (0..8).filter_map(|_| h.alloc(256).ok()).collect();
        let region = pool.region().clone();
        for (at, byte) in noise {
            let at = 128 + at % (region.len() - 128);
            region.write_at(at, &[byte]).unwrap();
        }
        let mut other = Handle::join(region.clone()).ok();
        for &b in mine.iter().chain(refs.iter().map(|r| BlockRef::from_bits(*r)).collect::<Vec<_>>().iter()) {
            let _ = h.read_at(b, 0, &mut [0; 16]);
            let _ = h.write_at(b, 8, &[1; 8]);
            let _ = h.free(b);
            if let Some(o) = other.as_mut() {
                let _ = o.free(b);
            }
        }
        let _ = h.free_batch(&mine);
        let _ = h.clean_remote_frees();
        let _ = h.alloc(300);
        let _ = h.reclaim_dead();
        let _ = h.occupancy_all();
    }

    /// A whole region of arbitrary bytes: a join is refused or works.
    #[test]
    fn arbitrary_regions_are_refused_or_joined(bytes in proptest::collection::vec(any::<u8>(), 64..512), header_ok in any::<bool>()) {
        let pool = Pool::anonymous(&PoolConfig::new(1, 1)).unwrap();
        let region = pool.region().clone();
        region.write_at(if header_ok { 128 } else { 0 }, &bytes).unwrap();
        if let Ok(mut h) = Handle::join(region.clone()) {
            let _ = h.alloc(256);
        }
        let _ = Handle::free_only(region);
    }
}

/// A thread flipping bytes of the live metadata while two handles allocate
/// and free each other's blocks: no panic, no hang (the watchdog).
#[test]
fn a_thread_flipping_metadata_causes_errors_at_worst() {
    let _dog = Watchdog::new(
        "a_thread_flipping_metadata_causes_errors_at_worst",
        Duration::from_secs(60),
    );
    let pool = Pool::anonymous(&PoolConfig::new(16, 3)).unwrap();
    let region = pool.region().clone();
    let stop = Arc::new(AtomicBool::new(false));
    let flipper = {
        let (stop, region) = (stop.clone(), region.clone());
        thread::spawn(move || {
            let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
            let mut flips = 0u64;
            // The metadata (handles, slab owners, bitmaps, descriptors), not
            // the header, whose damage only refuses later joins.
            let end = 128 + 3 * 64 + 16 * 64 + 16 * 1024;
            while !stop.load(Ordering::Relaxed) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                region
                    .write_at(128 + (x % (end - 128) as u64) as usize, &[(x >> 40) as u8])
                    .unwrap();
                flips += 1;
                if flips.is_multiple_of(8) {
                    thread::sleep(Duration::from_micros(100));
                }
            }
            flips
        })
    };
    let deadline = Instant::now() + Duration::from_secs(2);
    let (tx, rx) = std::sync::mpsc::channel::<u64>();
    let workers: Vec<_> = (0..2)
        .map(|w| {
            let region = region.clone();
            let tx = tx.clone();
            thread::spawn(move || {
                let (mut ok, mut errors) = (0u64, 0u64);
                let mut h = Handle::join(region.clone()).unwrap();
                let mut mine = Vec::new();
                while Instant::now() < deadline {
                    match h.alloc(256 << (ok % 3)) {
                        Ok(b) => {
                            ok += 1;
                            let _ = h.write_at(b, 0, &[w as u8; 64]);
                            if ok % 2 == 0 {
                                let _ = tx.send(b.to_bits());
                            } else {
                                mine.push(b);
                            }
                        }
                        Err(_) => errors += 1,
                    }
                    if mine.len() > 16 {
                        for b in mine.drain(..) {
                            if h.free(b).is_err() {
                                errors += 1;
                            }
                        }
                    }
                    let _ = h.clean_remote_frees();
                }
                (ok, errors)
            })
        })
        .collect();
    drop(tx);
    let mut freer = Handle::free_only(region.clone()).unwrap();
    let mut remote_ok = 0u64;
    while Instant::now() < deadline {
        if let Ok(bits) = rx.recv_timeout(Duration::from_millis(10))
            && freer.free(BlockRef::from_bits(bits)).is_ok()
        {
            remote_ok += 1;
        }
    }
    let results: Vec<(u64, u64)> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    stop.store(true, Ordering::Relaxed);
    let flips = flipper.join().unwrap();
    eprintln!(
        "{flips} flips; allocations (ok, errors) per handle {results:?}; {remote_ok} remote frees"
    );
    assert!(flips > 1000);
    assert!(
        results.iter().all(|(ok, _)| *ok > 0),
        "the pool was used while garbled"
    );
}

/// A class that does not divide the 64 KiB slab (320 B: 204 blocks, 256
/// bytes left over) leaves a tail no block covers. Its descriptor, marked
/// allocated by a hostile writer, must not make an offset in that tail pass
/// for a block: a read, a write or a free there would run into the next
/// slab's first block (or, freed, hand that range out again).
#[test]
fn regression_an_offset_in_a_slabs_uncovered_tail_is_not_a_block() {
    let pool = Pool::anonymous(&PoolConfig {
        slabs: 2,
        handles: 1,
        classes: vec![320],
    })
    .unwrap();
    let mut h = pool.handle().unwrap();
    let first = h.alloc(300).unwrap();
    // Slab 0's block 0: the pool's data starts there (layout in the README).
    let data_at = first.offset();
    assert_eq!(data_at % 4096, 0);
    let blocks = 65536 / 320;
    let tail = data_at + blocks * 320;
    // Descriptor of "block" 204 of slab 0: 128 + 64 × handles + 64 × slabs + 4 × 204.
    let descriptor = 128 + 64 + 2 * 64 + 4 * blocks as usize;
    let generation = 1u32;
    pool.region()
        .write_at(descriptor, &(generation << 8 | 1).to_ne_bytes())
        .unwrap();
    let forged = BlockRef::from_bits(u64::from(generation) << 40 | tail);
    let mut buf = [0u8; 320];
    for result in [
        h.read_at(forged, 0, &mut buf),
        h.write_at(forged, 0, &buf),
        h.free(forged),
    ] {
        match result {
            Err(nodeipc_pool::Error::NotABlock { offset, reason, .. }) => {
                assert_eq!(offset, tail);
                assert!(
                    reason.contains("past the last of the 204 blocks"),
                    "{reason}"
                );
            }
            other => panic!("the uncovered tail passed for a block: {other:?}"),
        }
    }
    // The real blocks are unaffected.
    h.write_at(first, 0, &[7; 320]).unwrap();
    h.free(first).unwrap();
}

/// Where things are in a pool of `handles` handles and `slabs` slabs (the
/// README's layout): slab `s`'s owner word and remote bitmap, and the
/// descriptor of its block `i`.
struct At {
    handles: usize,
    slabs: usize,
}

impl At {
    fn owner(&self, s: usize) -> usize {
        128 + 64 * self.handles + 64 * s
    }
    fn remote(&self, s: usize) -> usize {
        self.owner(s) + 8
    }
    fn descriptor(&self, s: usize, i: usize) -> usize {
        128 + 64 * self.handles + 64 * self.slabs + 1024 * s + 4 * i
    }
}

/// An error saying another process wrote what `what` describes.
fn forged_error<T>(result: &nodeipc_pool::Result<T>, what: &str) -> bool {
    matches!(result, Err(e) if e.to_string().contains(what) && e.to_string().contains("another process wrote it"))
}

fn write_u32(pool: &Pool, at: usize, value: u32) {
    pool.region().write_at(at, &value.to_ne_bytes()).unwrap();
}

/// A writer marks a block that is free (in its owner's list) "freed
/// remotely" and sets its bit: the owner's clean-up must not take it back
/// a second time (it once counted it as one more block returned and put it
/// in its free list twice); it names the block, puts it back to free, and
/// every other block is still handed out once.
#[test]
fn regression_a_forged_remote_free_of_a_free_block_is_refused_at_the_clean_up() {
    let pool = Pool::anonymous(&PoolConfig::new(2, 2)).unwrap();
    let mut owner = pool.handle().unwrap();
    let first = owner.alloc(256).unwrap();
    let at = At {
        handles: 2,
        slabs: 2,
    };
    // Block 1 of slab 0: free, in the owner's list, generation 0.
    write_u32(&pool, at.descriptor(0, 1), 2);
    pool.region()
        .write_at(at.remote(0), &2u64.to_ne_bytes())
        .unwrap();
    let forged = first.offset() + 256;
    match owner.clean_remote_frees() {
        Err(e) => {
            let said = e.to_string();
            assert!(
                said.contains(&format!("block at {forged} is freed remotely"))
                    && said.contains("another process wrote it"),
                "{said}"
            );
        }
        Ok(n) => panic!("a forged remote free was accepted: {n} blocks taken back"),
    }
    // Nothing more to take back, and the slab's 256 blocks are each handed
    // out once (the forged one among them, free again).
    assert_eq!(owner.clean_remote_frees().unwrap(), 0);
    let mut offsets: Vec<u64> = (1..256)
        .map(|_| owner.alloc(256).unwrap().offset())
        .collect();
    offsets.push(first.offset());
    offsets.sort_unstable();
    offsets.dedup();
    assert_eq!(offsets.len(), 256);
    assert!(offsets.contains(&forged));
    assert_eq!(owner.occupancy().unwrap(), 256);
}

/// The sweep's siblings: every state the owner reads is checked against
/// what it knows. A free block forged "allocated" is not freed into the
/// list a second time, nor read or written; a slab whose owner word is
/// forged to name us is not ours to free into; our own slab's owner word
/// forged away is refused at the clean-up.
#[test]
fn forged_states_the_owner_reads_are_refused_where_it_reads_them() {
    let pool = Pool::anonymous(&PoolConfig::new(2, 2)).unwrap();
    let mut owner = pool.handle().unwrap();
    let mut other = pool.handle().unwrap();
    let first = owner.alloc(256).unwrap();
    let at = At {
        handles: 2,
        slabs: 2,
    };
    // Block 2 of slab 0, free in the owner's list, forged allocated (gen 5).
    write_u32(&pool, at.descriptor(0, 2), 5 << 8 | 1);
    let forged = BlockRef::from_bits(5 << 40 | (first.offset() + 512));
    for result in [
        owner.free(forged),
        owner.read_at(forged, 0, &mut [0; 8]),
        owner.write_at(forged, 0, &[0; 8]),
    ] {
        assert!(forged_error(&result, "is allocated"), "{result:?}");
    }
    // Another handle's slab (slab 1), its owner word forged to name us: a
    // free there is refused by name, the block left as it is.
    let theirs = other.alloc(256).unwrap();
    assert!(theirs.offset() >= first.offset() + 65536);
    write_u32(&pool, at.owner(1), 1);
    let result = owner.free(theirs);
    assert!(
        forged_error(&result, "owned by handle 0"),
        "a slab we never took was freed into: {result:?}"
    );
    write_u32(&pool, at.owner(1), 2);
    other.free(theirs).unwrap();
    // Our own slab's owner word forged to another handle: our clean-up
    // says so rather than skip the slab without a word.
    write_u32(&pool, at.owner(0), 2);
    let result = owner.clean_remote_frees();
    assert!(forged_error(&result, "owned by handle 1"), "{result:?}");
    write_u32(&pool, at.owner(0), 1);
    assert_eq!(owner.clean_remote_frees().unwrap(), 0);
    owner.free(first).unwrap();
}
