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
