//! Reading blocks in place through `BlockView`: the same bytes as a copy
//! at any offset and length, the reference checked when the view is made
//! and again by `verify`, reads past the block refused.

use nodeipc_pool::{Error, Pool, PoolConfig};

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + 7) as u8).collect()
}

#[test]
fn a_view_reads_what_was_written_at_every_offset_and_length() {
    let pool = Pool::anonymous(&PoolConfig::new(4, 2)).unwrap();
    let mut owner = pool.handle().unwrap();
    let reader = pool.free_only().unwrap();
    let block = owner.alloc(1232).unwrap();
    let bytes = pattern(2048); // the whole block
    owner.write_at(block, 0, &bytes).unwrap();
    for view in [owner.view(block).unwrap(), reader.view(block).unwrap()] {
        assert_eq!(
            view.len(),
            2048,
            "the default classes: 1232 bytes take a 2 KiB block"
        );
        assert_eq!(view.block(), block);
        for at in [0, 1, 7, 8, 13, 1000, 1225, 2040] {
            for len in [0, 1, 2, 7, 8, 9, 31] {
                if at + len > 2048 {
                    continue;
                }
                let mut got = vec![0u8; len];
                view.copy_to(at, &mut got).unwrap();
                assert_eq!(got, bytes[at..at + len], "at {at}, len {len}");
            }
            let le = |n: usize| {
                let mut v = [0u8; 8];
                v[..n].copy_from_slice(&bytes[at..at + n]);
                u64::from_le_bytes(v)
            };
            assert_eq!(view.read_u8(at).unwrap(), bytes[at]);
            assert_eq!(u64::from(view.read_u16_le(at).unwrap()), le(2));
            assert_eq!(u64::from(view.read_u32_le(at).unwrap()), le(4));
            assert_eq!(view.read_u64_le(at).unwrap(), le(8));
        }
        let words: Vec<u8> = view.words().flat_map(u64::to_ne_bytes).collect();
        assert_eq!(words, bytes);
        // Chunks through a 100-byte stack buffer, from an odd offset.
        let mut buf = [0u8; 100];
        let mut seen = Vec::new();
        view.chunks(3, 2045, &mut buf, |at, chunk| {
            assert_eq!(at, 3 + seen.len());
            seen.extend_from_slice(chunk);
        })
        .unwrap();
        assert_eq!(seen, bytes[3..]);
        // SAFETY: nothing in this test writes the block while the slice lives.
        let slice = unsafe { view.as_bytes() };
        assert_eq!(slice, &bytes[..]);
        view.verify().unwrap();
    }
}

#[test]
fn a_view_refuses_reads_past_the_block_and_stale_references() {
    let pool = Pool::anonymous(&PoolConfig::new(4, 2)).unwrap();
    let mut owner = pool.handle().unwrap();
    let reader = pool.free_only().unwrap();
    let block = owner.alloc(256).unwrap();
    let view = reader.view(block).unwrap();
    let mut two = [0u8; 2];
    assert!(matches!(
        view.copy_to(255, &mut two),
        Err(Error::OutOfBlock {
            at: 255,
            len: 2,
            size: 256,
            ..
        })
    ));
    assert!(matches!(
        view.read_u64_le(252),
        Err(Error::OutOfBlock { .. })
    ));
    assert!(matches!(view.read_u8(256), Err(Error::OutOfBlock { .. })));
    assert!(matches!(
        view.read_u64_le(usize::MAX - 3),
        Err(Error::OutOfBlock { .. })
    ));
    assert!(matches!(
        view.chunks(0, 10, &mut [], |_, _| {}),
        Err(Error::InvalidArgument { .. })
    ));
    // Freed while viewed: `verify` says so; a new view is refused.
    owner.free(block).unwrap();
    assert!(matches!(view.verify(), Err(Error::NotAllocated { .. })));
    assert!(matches!(
        reader.view(block),
        Err(Error::NotAllocated { .. })
    ));
    // Reused: the old reference is stale.
    let again = owner.alloc(256).unwrap();
    assert_eq!(again.offset(), block.offset());
    assert!(matches!(view.verify(), Err(Error::Stale { .. })));
    assert!(matches!(reader.view(block), Err(Error::Stale { .. })));
    assert!(reader.view(again).is_ok());
}
