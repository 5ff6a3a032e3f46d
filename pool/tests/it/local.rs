//! One process: allocation, frees (local, remote, batched), the refusals,
//! copies in and out, occupancy, handles running out.

use nodeipc_pool::{BlockRef, Error, Pool, PoolConfig};

fn pool(slabs: u32, handles: u32) -> Pool {
    Pool::anonymous(&PoolConfig::new(slabs, handles)).unwrap()
}

#[test]
fn alloc_write_read_free_round_trip() {
    let pool = pool(4, 2);
    let mut h = pool.handle().unwrap();
    let a = h.alloc(200).unwrap();
    let b = h.alloc(256).unwrap();
    assert_ne!(a.offset(), b.offset());
    assert_eq!(b.offset() - a.offset(), 256);
    h.write_at(a, 0, &[7; 200]).unwrap();
    h.write_at(b, 10, b"hello").unwrap();
    let mut buf = [0u8; 200];
    h.read_at(a, 0, &mut buf).unwrap();
    assert_eq!(buf, [7; 200]);
    let mut five = [0u8; 5];
    h.read_at(b, 10, &mut five).unwrap();
    assert_eq!(&five, b"hello");
    assert_eq!(h.occupancy().unwrap(), 2);
    h.free(a).unwrap();
    h.free(b).unwrap();
    assert_eq!(h.occupancy().unwrap(), 0);
    // Round trips through a message's 64 bits.
    let c = h.alloc(1000).unwrap();
    assert_eq!(BlockRef::from_bits(c.to_bits()), c);
}

#[test]
fn a_double_free_a_stale_reference_and_a_non_block_are_refused() {
    let pool = pool(4, 2);
    let mut h = pool.handle().unwrap();
    let a = h.alloc(256).unwrap();
    h.free(a).unwrap();
    let err = h.free(a).unwrap_err();
    assert!(
        matches!(err, Error::NotAllocated { state: "free", .. }),
        "{err:?}"
    );
    // Reused: the old reference is now stale.
    let again = h.alloc(256).unwrap();
    assert_eq!(again.offset(), a.offset());
    assert_ne!(again.generation(), a.generation());
    let err = h.free(a).unwrap_err();
    assert!(matches!(err, Error::Stale { .. }), "{err:?}");
    assert!(matches!(
        h.read_at(a, 0, &mut [0; 4]),
        Err(Error::Stale { .. })
    ));
    // Inside a block, before the data, past the slabs, an unowned slab.
    let inside = BlockRef::from_bits(again.to_bits() + 8);
    assert!(matches!(h.free(inside), Err(Error::NotABlock { .. })));
    assert!(matches!(
        h.free(BlockRef::from_bits(16)),
        Err(Error::NotABlock { .. })
    ));
    assert!(matches!(
        h.free(BlockRef::from_bits(1 << 39)),
        Err(Error::NotABlock { .. })
    ));
    let unowned = BlockRef::from_bits(again.offset() + 3 * 65536);
    let err = h.free(unowned).unwrap_err();
    assert!(err.to_string().contains("has no owner"), "{err}");
    // The live block is untouched by all that.
    h.write_at(again, 0, b"x").unwrap();
    h.free(again).unwrap();
}

#[test]
fn reads_and_writes_stay_inside_their_block() {
    let pool = pool(2, 1);
    let mut h = pool.handle().unwrap();
    let a = h.alloc(300).unwrap(); // a 512-byte block
    h.write_at(a, 500, &[1; 12]).unwrap();
    let err = h.write_at(a, 500, &[1; 13]).unwrap_err();
    assert!(
        matches!(err, Error::OutOfBlock { size: 512, .. }),
        "{err:?}"
    );
    assert!(matches!(
        h.read_at(a, usize::MAX, &mut [0; 2]),
        Err(Error::OutOfBlock { .. })
    ));
}

#[test]
fn remote_frees_go_back_to_the_owner_at_its_clean_up() {
    let pool = pool(4, 2);
    let mut owner = pool.handle().unwrap();
    let mut other = pool.handle().unwrap();
    let mut freer = pool.free_only().unwrap();
    let blocks: Vec<BlockRef> = (0..10).map(|_| owner.alloc(256).unwrap()).collect();
    other.free(blocks[0]).unwrap();
    freer.free(blocks[1]).unwrap();
    // A remote double free is refused too, at the call.
    assert!(matches!(
        freer.free(blocks[1]),
        Err(Error::NotAllocated { .. })
    ));
    freer.free_batch(&blocks[2..6]).unwrap();
    // Freed, not yet cleaned up: still counted against the owner.
    assert_eq!(owner.occupancy().unwrap(), 10);
    assert_eq!(owner.clean_remote_frees().unwrap(), 6);
    assert_eq!(owner.occupancy().unwrap(), 4);
    assert_eq!(owner.clean_remote_frees().unwrap(), 0);
    // A batch with a bad entry frees the rest and reports the first refusal.
    let err = freer
        .free_batch(&[blocks[6], blocks[0], blocks[7]])
        .unwrap_err();
    assert!(matches!(err, Error::NotAllocated { .. }), "{err:?}");
    assert_eq!(owner.clean_remote_frees().unwrap(), 2);
    let occ = owner.occupancy_all().unwrap();
    assert_eq!(occ[0].blocks, 2);
    assert_eq!(occ[0].pid, std::process::id());
    assert_eq!(occ[1].blocks, 0);
    // A free-only handle cannot allocate.
    assert!(matches!(freer.alloc(8), Err(Error::InvalidArgument { .. })));
}

#[test]
fn no_free_handle_is_a_clear_error_and_a_released_one_is_reused() {
    let pool = pool(4, 2);
    let mut a = pool.handle().unwrap();
    let _b = pool.handle().unwrap();
    let err = pool.handle().unwrap_err();
    match &err {
        Error::NoHandleFree {
            handles: 2,
            holders,
            ..
        } => {
            assert_eq!(holders, &[std::process::id(); 2])
        }
        other => panic!("expected NoHandleFree, got {other:?}"),
    }
    // The slabs of a handle dropped with a live block pass to the next holder.
    let live = a.alloc(256).unwrap();
    let spare = a.alloc(256).unwrap();
    a.free(spare).unwrap();
    drop(a);
    let mut c = pool.handle().unwrap();
    assert_eq!(c.occupancy().unwrap(), 1);
    c.free(live).unwrap();
    assert_eq!(c.occupancy().unwrap(), 0);
}

#[test]
fn a_full_pool_and_a_too_large_block_are_clear_errors() {
    let pool = Pool::anonymous(&PoolConfig {
        slabs: 1,
        handles: 1,
        classes: vec![65536],
    })
    .unwrap();
    let mut h = pool.handle().unwrap();
    let only = h.alloc(65536).unwrap();
    assert!(matches!(h.alloc(1), Err(Error::Full { class: 65536, .. })));
    assert!(matches!(
        h.alloc(65537),
        Err(Error::TooLarge { largest: 65536, .. })
    ));
    h.free(only).unwrap();
    h.alloc(10).unwrap();
}

#[test]
fn bad_configurations_are_refused() {
    for (cfg, what) in [
        (
            PoolConfig {
                slabs: 0,
                handles: 1,
                classes: vec![256],
            },
            "slab count",
        ),
        (
            PoolConfig {
                slabs: 1,
                handles: 0,
                classes: vec![256],
            },
            "handle count",
        ),
        (
            PoolConfig {
                slabs: 1,
                handles: 1,
                classes: vec![100],
            },
            "block size",
        ),
        (
            PoolConfig {
                slabs: 1,
                handles: 1,
                classes: vec![512, 256],
            },
            "block size",
        ),
        (
            PoolConfig {
                slabs: 1,
                handles: 1,
                classes: vec![],
            },
            "class count",
        ),
    ] {
        match Pool::anonymous(&cfg) {
            Err(Error::InvalidArgument { what: w, .. }) => assert_eq!(w, what),
            other => panic!("{cfg:?}: expected InvalidArgument, got {other:?}"),
        }
    }
}

#[test]
fn an_unsealed_memfd_is_refused() {
    let pool = pool(1, 1);
    // The same bytes in a memfd its sender could still truncate.
    let region = nodeipc_shm::Region::anonymous(pool.region().len()).unwrap();
    let mut bytes = vec![0u8; 4096];
    pool.region().read_at(0, &mut bytes).unwrap();
    region.write_at(0, &bytes).unwrap();
    let err = nodeipc_pool::Handle::join(std::sync::Arc::new(region)).unwrap_err();
    assert!(err.to_string().contains("not sealed"), "{err}");
}

#[test]
fn a_handle_is_joined_by_its_id_and_a_live_holder_is_named() {
    let pool = pool(4, 3);
    let h2 = pool.handle_id(2).unwrap();
    assert_eq!(h2.index(), Some(2));
    match pool.handle_id(2) {
        Err(Error::HandleTaken { handle: 2, pid, .. }) => assert_eq!(pid, std::process::id()),
        other => panic!("expected HandleTaken, got {other:?}"),
    }
    assert!(matches!(
        pool.handle_id(3),
        Err(Error::InvalidArgument { value: 3, .. })
    ));
    // `join` takes the lowest vacant one; 2 stays held.
    assert_eq!(pool.handle().unwrap().index(), Some(0));
    drop(h2);
    let again = pool.handle_id(2).unwrap();
    assert_eq!(again.index(), Some(2));
    // A holder that died: its handle is taken over by id, its slabs adopted.
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let (pid, start) = (
        child.id(),
        nodeipc_fdpass::process_start_time(child.id()).unwrap(),
    );
    child.wait().unwrap();
    let record = 128 + 64;
    let region = pool.region();
    region.write_at(record, &pid.to_ne_bytes()).unwrap();
    region.write_at(record + 4, &1u32.to_ne_bytes()).unwrap();
    region.write_at(record + 8, &start.to_ne_bytes()).unwrap();
    assert_eq!(pool.handle_id(1).unwrap().index(), Some(1));
}

#[test]
fn a_pool_received_as_a_descriptor_hands_out_handles() {
    let pool = pool(4, 2);
    let mut owner = pool.handle().unwrap();
    let block = owner.alloc(300).unwrap();
    owner.write_at(block, 0, b"tx").unwrap();
    let fd = pool.region().as_fd().try_clone_to_owned().unwrap();
    let received = Pool::from_fd(fd).unwrap();
    let mut other = received.handle_id(1).unwrap();
    let mut buf = [0u8; 2];
    other.read_at(block, 0, &mut buf).unwrap();
    assert_eq!(&buf, b"tx");
    other.free(block).unwrap();
    assert_eq!(owner.clean_remote_frees().unwrap(), 1);
    // Not a pool: refused by its header.
    let region = nodeipc_shm::Region::anonymous(65536).unwrap();
    region.seal_grow_shrink().unwrap();
    let fd = region.as_fd().try_clone_to_owned().unwrap();
    assert!(matches!(Pool::from_fd(fd), Err(Error::BadHeader { .. })));
}

#[test]
fn huge_pages_fall_back_to_normal_ones_and_say_so() {
    use nodeipc_pool::Pages;
    let pool = Pool::anonymous_pages(&PoolConfig::new(4, 2), Pages::HugeOrNormal).unwrap();
    let mut h = pool.handle().unwrap();
    let block = h.alloc(100).unwrap();
    h.write_at(block, 0, b"x").unwrap();
    if pool.huge_pages() {
        return; // it/huge_pages tests the reserved case
    }
    let err = Pool::anonymous_pages(&PoolConfig::new(4, 2), Pages::Huge).unwrap_err();
    assert!(err.to_string().contains("huge pages unavailable"), "{err}");
}
