//! The execute channel across processes, one criterion group per shape, each
//! holding nodeipc and the designs it replaces (same protobuf messages):
//! lock-step glibc named semaphores and a Unix stream socket; plus the
//! cache-line round trip (the floor) beside the 64-byte case and single-core
//! memcpy beside the 1 MiB case.

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group};
use nodeipc_cli::bench::channel::{ChannelImpl, ChannelSession, memcpy_bandwidth};
use nodeipc_cli::bench::{Handoff, Ring, run_if_peer};

use nodeipc_benches::iceoryx;

const WARM_UP: u64 = 50;

fn session_time(
    which: ChannelImpl,
    workers: u32,
    payload: usize,
    depth: u32,
    rounds: u64,
) -> Duration {
    let mut session =
        ChannelSession::start_with_depth(which, workers, payload, depth, rounds + WARM_UP)
            .expect("start");
    session.run(WARM_UP).expect("warm-up");
    let elapsed = session.run(rounds).expect("rounds");
    session.finish().expect("finish");
    elapsed
}

fn shape(
    c: &mut Criterion,
    workers: u32,
    payload: usize,
    impls: &[(ChannelImpl, u32)],
    floor: bool,
) {
    let label = if payload >= 1 << 20 {
        format!("{}MiB", payload >> 20)
    } else {
        format!("{payload}B")
    };
    let mut group = c.benchmark_group(format!("channel/{workers}_workers_{label}"));
    group
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_millis(500));
    if payload >= 1 << 20 {
        group.throughput(Throughput::Bytes(payload as u64));
        group.sample_size(20);
    }
    for &(which, depth) in impls {
        let id = if depth > 1 {
            format!("{} depth {depth}", which.name())
        } else {
            which.name().to_owned()
        };
        group.bench_function(BenchmarkId::from_parameter(id), |b| {
            b.iter_custom(|rounds| session_time(which, workers, payload, depth, rounds))
        });
    }
    if floor {
        group.bench_function(BenchmarkId::from_parameter("cache-line round trip"), |b| {
            b.iter_custom(|laps| {
                let mut ring = Ring::new(Handoff::CacheLine, 2, laps + 100, true).expect("ring");
                ring.run(100).expect("warm-up");
                let elapsed = ring.run(laps).expect("laps");
                ring.finish().expect("finish");
                elapsed
            })
        });
    }
    if workers == 1 {
        group.bench_function(
            BenchmarkId::from_parameter("iceoryx2 request-response"),
            |b| {
                b.iter_custom(|rounds| {
                    let mut session = iceoryx::IceoryxSession::start(payload, rounds + WARM_UP)
                        .expect("iceoryx2 start");
                    session.run(WARM_UP).expect("warm-up");
                    let elapsed = session.run(rounds).expect("rounds");
                    session.finish().expect("iceoryx2 finish");
                    elapsed
                })
            },
        );
    }
    if payload >= 1 << 20 {
        group.bench_function(BenchmarkId::from_parameter("memcpy (one core)"), |b| {
            let mut source = vec![0x5au8; payload];
            let mut destination = vec![0u8; payload];
            b.iter(|| {
                destination.copy_from_slice(std::hint::black_box(&source));
                std::mem::swap(&mut source, &mut destination);
            })
        });
    }
    group.finish();
}

fn channel(c: &mut Criterion) {
    use ChannelImpl::{GlibcLockstep, Nodeipc, NodeipcNamed, UnixSocket};
    shape(
        c,
        1,
        64,
        &[
            (Nodeipc, 1),
            (NodeipcNamed, 1),
            (GlibcLockstep, 1),
            (UnixSocket, 1),
        ],
        true,
    );
    shape(
        c,
        1,
        1 << 20,
        &[
            (Nodeipc, 1),
            (Nodeipc, 4),
            (GlibcLockstep, 1),
            (UnixSocket, 1),
        ],
        false,
    );
    shape(c, 8, 64, &[(Nodeipc, 1), (GlibcLockstep, 1)], false);
    let bandwidth = memcpy_bandwidth(1 << 20, Duration::from_millis(500));
    println!("single-core memcpy of 1 MiB: {:.1} GB/s", bandwidth / 1e9);
}

criterion_group!(benches, channel);

fn main() {
    iceoryx::run_if_server();
    run_if_peer();
    benches();
    criterion::Criterion::default()
        .configure_from_args()
        .final_summary();
}
