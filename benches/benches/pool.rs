//! The pool's own cost, one process: an alloc and a free of 256 bytes; a
//! batch of 64 blocks freed through another handle (a remote free) and
//! taken back by the owner's clean-up; a `write_at` and a `read_at` of a
//! whole 256-byte block. Beside rts-alloc 5.1.0 doing the same where it has
//! the operation, and a plain 256-byte copy for the accessors (rts-alloc
//! hands out pointers; ours copies through checked offsets). The
//! cross-process rows are `versus-shaq`'s `pool-local` and `pool-remote`.

use std::fs::File;
use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use nodeipc_pool::{BlockRef, Pool, PoolConfig};

const SIZE: usize = 256;
const BATCH: usize = 64;
const RTS_FILE: usize = 32 << 20;
const RTS_SLAB: u32 = 64 << 10;

fn pool() -> Pool {
    Pool::anonymous(&PoolConfig::new(256, 4)).expect("pool")
}

/// A fresh memfd-backed rts-alloc allocator with 4 workers.
fn rts() -> (File, rts_alloc::Allocator) {
    let fd = rustix::fs::memfd_create("bench-rts", rustix::fs::MemfdFlags::CLOEXEC).expect("memfd");
    let file = File::from(fd);
    // SAFETY: a fresh memfd of ours that nothing else maps; it outlives the
    // allocator (both are returned together and dropped together).
    let alloc =
        unsafe { rts_alloc::Allocator::create(&file, RTS_FILE, 4, RTS_SLAB) }.expect("rts-alloc");
    (file, alloc)
}

fn local(c: &mut Criterion) {
    let mut group = c.benchmark_group("pool alloc+free 256 B");
    let pool = pool();
    let mut h = pool.handle().unwrap();
    group.bench_function("nodeipc", |b| {
        b.iter(|| {
            let block = black_box(h.alloc(SIZE).unwrap());
            h.free(block).unwrap();
        })
    });
    let (_file, alloc) = rts();
    group.bench_function("rts-alloc", |b| {
        b.iter(|| {
            let p = black_box(alloc.allocate(SIZE as u32).expect("rts-alloc full"));
            // SAFETY: `p` was just allocated by this allocator, freed once.
            unsafe { alloc.free(p) };
        })
    });
    group.finish();
}

fn remote(c: &mut Criterion) {
    let mut group = c.benchmark_group("pool remote free + owner clean-up, 64 x 256 B");
    group.throughput(Throughput::Elements(BATCH as u64));
    let pool = pool();
    let mut owner = pool.handle().unwrap();
    let mut other = pool.free_only().unwrap();
    let mut refs: Vec<BlockRef> = Vec::with_capacity(BATCH);
    group.bench_function("nodeipc free", |b| {
        b.iter(|| {
            refs.clear();
            refs.extend((0..BATCH).map(|_| owner.alloc(SIZE).unwrap()));
            for &block in &refs {
                other.free(block).unwrap();
            }
            assert_eq!(owner.clean_remote_frees().unwrap(), BATCH);
        })
    });
    group.bench_function("nodeipc free_batch", |b| {
        b.iter(|| {
            refs.clear();
            refs.extend((0..BATCH).map(|_| owner.alloc(SIZE).unwrap()));
            other.free_batch(&refs).unwrap();
            assert_eq!(owner.clean_remote_frees().unwrap(), BATCH);
        })
    });
    let (file, alloc) = rts();
    let freer = rts_alloc::FreeOnlyAllocator::join(&file).expect("rts-alloc join");
    let mut offsets: Vec<usize> = Vec::with_capacity(BATCH);
    group.bench_function("rts-alloc", |b| {
        b.iter(|| {
            offsets.clear();
            for _ in 0..BATCH {
                let p = alloc.allocate(SIZE as u32).expect("rts-alloc full");
                // SAFETY: `p` is a live allocation of this allocator.
                offsets.push(unsafe { alloc.offset(p) });
            }
            for &offset in &offsets {
                // SAFETY: each offset is a live allocation, freed once.
                unsafe { freer.free_offset(offset) };
            }
            alloc.clean_remote_frees();
        })
    });
    group.finish();
}

fn access(c: &mut Criterion) {
    let mut group = c.benchmark_group("pool write_at+read_at 256 B");
    group.throughput(Throughput::Bytes(2 * SIZE as u64));
    let pool = pool();
    let mut h = pool.handle().unwrap();
    let block = h.alloc(SIZE).unwrap();
    let data: Vec<u8> = (0..SIZE).map(|i| i as u8).collect();
    let mut out = vec![0u8; SIZE];
    group.bench_function("nodeipc", |b| {
        b.iter(|| {
            h.write_at(block, 0, black_box(&data)).unwrap();
            h.read_at(block, 0, black_box(&mut out)).unwrap();
        })
    });
    assert_eq!(out, data);
    let mut plain = vec![0u8; SIZE];
    group.bench_function("plain copy in and out", |b| {
        b.iter(|| {
            plain.copy_from_slice(black_box(&data));
            out.copy_from_slice(black_box(&plain));
        })
    });
    group.finish();
    h.free(block).unwrap();
}

criterion_group!(benches, local, remote, access);
criterion_main!(benches);
