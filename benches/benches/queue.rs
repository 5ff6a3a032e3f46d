//! The queue's own cost, one thread, no peer: a push and a pop of a 64-byte
//! message, and a batch of 64 each way, beside shaq 4.0.0's in-process
//! pair doing the same (every word written and read on both sides). The
//! cross-process rows are `versus-shaq`'s.

use std::hint::black_box;
use std::num::NonZeroUsize;

use criterion::{Criterion, criterion_group, criterion_main};
use nodeipc_queue::Queue;

type Msg = [u64; 8];

fn msg(i: u64) -> Msg {
    std::array::from_fn(|k| i.wrapping_add(k as u64))
}

fn push_pop(c: &mut Criterion) {
    let mut group = c.benchmark_group("queue push+pop 64 B");
    let queue = Queue::<Msg>::anonymous(1024, 1).unwrap();
    let mut tx = queue.producer().unwrap();
    let mut rx = queue.consumer().unwrap();
    let mut i = 0u64;
    group.bench_function("nodeipc", |b| {
        b.iter(|| {
            i += 1;
            assert!(tx.try_push(&msg(i)).unwrap());
            black_box(rx.try_pop().unwrap().unwrap());
        })
    });
    let (mut stx, mut srx) = shaq::spsc::pair::<Msg>(1024).unwrap();
    group.bench_function("shaq", |b| {
        b.iter(|| {
            i += 1;
            assert!(stx.try_write(msg(i)).is_ok());
            black_box(srx.try_read().unwrap());
        })
    });
    group.finish();
}

fn batch_64(c: &mut Criterion) {
    let mut group = c.benchmark_group("queue batch of 64 x 64 B");
    let queue = Queue::<Msg>::anonymous(1024, 1).unwrap();
    let mut tx = queue.producer().unwrap();
    let mut rx = queue.consumer().unwrap();
    let mut out = [[0u64; 8]; 64];
    group.bench_function("nodeipc", |b| {
        b.iter(|| {
            let mut batch = tx.reserve(64).unwrap().unwrap();
            for i in 0..64 {
                batch.push(&msg(i));
            }
            batch.publish();
            assert_eq!(rx.try_pop_into(&mut out).unwrap(), 64);
            black_box(&out);
        })
    });
    let (mut stx, mut srx) = shaq::spsc::pair::<Msg>(1024).unwrap();
    let max = NonZeroUsize::new(64).unwrap();
    group.bench_function("shaq", |b| {
        b.iter(|| {
            let mut batch = stx.write_batch();
            for i in 0..64 {
                assert!(batch.try_write(msg(i)).is_ok());
            }
            drop(batch);
            let read = srx.try_reserve_read_batch(max).unwrap();
            for (slot, m) in out.iter_mut().zip(read.iter()) {
                *slot = *m;
            }
            black_box(&out);
        })
    });
    group.finish();
}

criterion_group!(benches, push_pop, batch_64);
criterion_main!(benches);
