//! The pool's fuzz driver, shared by the proptest properties in
//! `integration-tests/tests/it/pool_fuzz.rs` (run in CI) and the cargo-fuzz target
//! `fuzz/fuzz_targets/pool_region.rs` (run under `NODEIPC_CI_LONG`): a
//! region whose metadata (or header) is pre-filled with arbitrary bytes,
//! then two allocating handles and a free-only one driven by the rest of
//! the input, with arbitrary writes into the live metadata between their
//! steps. Every call must return; while nothing was garbled, every block
//! keeps its bytes, a double free or a forged reference is refused, and the
//! occupancy is what is live.

use std::sync::Arc;

use nodeipc_pool::{BlockRef, Error, Handle, Pool, PoolConfig};
use nodeipc_shm::Region;

use super::Script;

/// 320 does not divide a slab: its tail is no block.
const CLASSES: [u32; 4] = [256, 320, 4096, 65536];

/// A block handed out: its reference, the bytes written at its start.
struct Live {
    block: BlockRef,
    bytes: Vec<u8>,
    size: usize,
}

fn pattern(block: BlockRef, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (block.to_bits() as usize ^ i.wrapping_mul(131)) as u8)
        .collect()
}

fn get<'a>(
    owners: &'a mut [Option<Handle>; 2],
    freer: &'a mut Option<Handle>,
    sel: usize,
) -> Option<&'a mut Handle> {
    match sel {
        2 => freer.as_mut(),
        i => owners[i].as_mut(),
    }
}

/// Runs one input; returns how many results were checked against the
/// model (none once the region is garbled).
pub fn pool_region(data: &[u8]) -> usize {
    let mut input = Script::new(data);
    let flags = input.byte();
    // Bit 7: no writes into the live region between steps.
    let pokes = flags & 0x80 == 0;
    let slabs = 1 + u32::from(flags >> 1 & 3);
    let handles = 1 + u32::from(flags >> 3 & 1);
    let config = PoolConfig {
        slabs,
        handles,
        classes: CLASSES.to_vec(),
    };
    let pool = Pool::anonymous(&config).expect("a fresh pool");
    let region: Arc<Region> = pool.region().clone();
    // The metadata ends before the blocks: handles, slab table, descriptors.
    let meta_end = 128 + 64 * handles as usize + 1088 * slabs as usize;
    let start = if flags & 1 == 1 { 0 } else { 128 };
    let fill = usize::from(input.u16()) % (meta_end - start + 1);
    let bytes = input.take(fill);
    region.write_at(start, bytes).expect("in bounds");
    let mut garbled = !bytes.is_empty();
    let mut owners: [Option<Handle>; 2] = [Handle::join(region.clone()).ok(), None];
    let second = Handle::join(region.clone());
    match (&second, garbled, handles) {
        (
            Err(Error::NoHandleFree {
                handles: 1,
                holders,
                ..
            }),
            false,
            1,
        ) => {
            assert_eq!(holders, &[std::process::id()]);
        }
        (r, false, _) => assert!(r.is_ok() == (handles == 2), "second join: {r:?}"),
        _ => {}
    }
    owners[1] = second.ok();
    let mut freer = Handle::free_only(region.clone()).ok();
    if !garbled {
        assert!(owners[0].is_some() && freer.is_some());
    }
    let mut live: Vec<Live> = Vec::new();
    let mut freed: Vec<BlockRef> = Vec::new();
    let (mut steps, mut checked) = (0, 0);
    while !input.is_empty() && steps < 256 {
        steps += 1;
        let op = input.byte();
        let who = usize::from(input.byte());
        // An allocating handle, or (for frees, reads and writes) the free-only one.
        let sel = match (op % 10, who % 3) {
            (0 | 5 | 9, i) => i % 2,
            (_, i) => i,
        };
        if !matches!(op % 10, 7..=9) && get(&mut owners, &mut freer, sel).is_none() {
            continue;
        }
        match op % 10 {
            0 => {
                let h = get(&mut owners, &mut freer, sel).expect("checked");
                let size = usize::from(input.u16()) % 70_000;
                match h.alloc(size) {
                    Ok(block) => {
                        let len = size.min(64);
                        let bytes = pattern(block, len);
                        let w = h.write_at(block, 0, &bytes);
                        if !garbled {
                            w.expect("a write into a fresh block");
                            assert!(
                                live.iter().all(|l| l.block.offset() != block.offset()),
                                "a live block handed out twice"
                            );
                        }
                        live.push(Live { block, bytes, size });
                    }
                    Err(e) => {
                        if !garbled {
                            assert!(
                                matches!(e, Error::Full { .. } | Error::TooLarge { .. })
                                    || (h.index().is_none()),
                                "alloc({size}): {e}"
                            );
                            if let Error::TooLarge { .. } = e {
                                assert!(size > 65536);
                            }
                        }
                    }
                }
            }
            1 if !live.is_empty() => {
                let h = get(&mut owners, &mut freer, sel).expect("checked");
                let l = live.swap_remove(usize::from(input.byte()) % live.len());
                let r = h.free(l.block);
                if !garbled {
                    r.expect("the free of a live block");
                }
                freed.push(l.block);
            }
            2 => {
                let h = get(&mut owners, &mut freer, sel).expect("checked");
                let forged = BlockRef::from_bits(input.u64());
                let r = h.free(forged);
                if !garbled && live.iter().all(|l| l.block != forged) {
                    assert!(r.is_err(), "a forged reference {forged:?} was freed");
                }
                if r.is_ok() {
                    live.retain(|l| l.block != forged);
                }
            }
            3 if !freed.is_empty() => {
                let h = get(&mut owners, &mut freer, sel).expect("checked");
                let again = freed[usize::from(input.byte()) % freed.len()];
                let r = h.free(again);
                if !garbled {
                    assert!(
                        matches!(r, Err(Error::NotAllocated { .. } | Error::Stale { .. })),
                        "a double free of {again:?}: {r:?}"
                    );
                }
            }
            4 if !live.is_empty() => {
                let h = get(&mut owners, &mut freer, sel).expect("checked");
                let k = 1 + usize::from(input.byte()) % live.len().min(8);
                let batch: Vec<Live> = live.drain(..k).collect();
                let refs: Vec<BlockRef> = batch.iter().map(|l| l.block).collect();
                let r = h.free_batch(&refs);
                if !garbled {
                    r.expect("a batch of live blocks freed");
                }
                freed.extend(refs);
            }
            5 => {
                let h = get(&mut owners, &mut freer, sel).expect("checked");
                let r = h.clean_remote_frees();
                if !garbled {
                    r.expect("clean-up");
                }
            }
            6 if !live.is_empty() => {
                let h = get(&mut owners, &mut freer, sel).expect("checked");
                let l = usize::from(input.byte()) % live.len();
                let (block, size) = (live[l].block, live[l].size);
                let mut buf = vec![0u8; live[l].bytes.len()];
                let r = h.read_at(block, 0, &mut buf);
                if !garbled {
                    r.expect("a read of a live block");
                    assert_eq!(buf, live[l].bytes, "a live block's bytes changed");
                }
                let at = usize::from(input.u16());
                let len = usize::from(input.byte());
                let r = h.write_at(block, at, &vec![0xa5; len]);
                if !garbled {
                    let class = CLASSES.iter().find(|&&c| size <= c as usize).copied();
                    let fits = at + len <= class.expect("allocated, so a class fits") as usize;
                    match r {
                        Ok(()) => assert!(fits, "{len} bytes at {at} written past the block"),
                        Err(Error::OutOfBlock { .. }) => {
                            assert!(!fits, "{len} bytes at {at} refused")
                        }
                        Err(e) => panic!("a write into a live block: {e}"),
                    }
                }
                if r.is_ok() {
                    let bytes = &mut live[l].bytes;
                    let end = (at + len).min(bytes.len());
                    if at < end {
                        bytes[at..end].fill(0xa5);
                    }
                }
            }
            7 => {
                if let Some(h) = get(&mut owners, &mut freer, sel) {
                    let _ = h.reclaim_dead();
                    let _ = h.occupancy_all();
                }
                if !garbled {
                    // Once every owner has cleaned up, the occupancy is what
                    // is live: nothing lost, nothing counted twice.
                    for o in owners.iter_mut().flatten() {
                        o.clean_remote_frees().expect("clean-up");
                    }
                    if let Some(o) = owners.iter().flatten().next() {
                        let total: usize = o
                            .occupancy_all()
                            .expect("occupancy")
                            .iter()
                            .map(|o| o.blocks)
                            .sum();
                        assert_eq!(total, live.len(), "occupancy is not what is live");
                    }
                }
            }
            8 if pokes => {
                // Another process writes anywhere in the live metadata.
                let at = 128 + usize::from(input.u16()) % (meta_end - 128);
                let n = usize::from(input.byte() % 16);
                let bytes = input.take(n);
                let end = (at + bytes.len()).min(meta_end);
                region.write_at(at, &bytes[..end - at]).expect("in bounds");
                garbled |= end > at;
            }
            9 => {
                // An allocating handle leaves; a new one takes a slot (and
                // the slabs left to it).
                let i = who % 2;
                if owners[i].take().is_some() {
                    owners[i] = Handle::join(region.clone()).ok();
                    if !garbled {
                        assert!(owners[i].is_some(), "a released slot was not taken again");
                    }
                }
            }
            _ => {}
        }
        if !garbled {
            checked += 1;
        }
    }
    checked
}
