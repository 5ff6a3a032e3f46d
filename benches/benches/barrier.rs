//! Barriers across processes: nodeipc beside a process-shared
//! `pthread_barrier` and a spin barrier, with 2 ranks (one per core) and 8
//! ranks (oversubscribed on this 2-core machine); the cache-line round trip
//! is measured in the same run as the floor for 2 ranks.

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group};
use nodeipc_cli::bench::barrier::{self, BarrierKind};
use nodeipc_cli::bench::{Handoff, Ring, run_if_peer};

fn barriers(c: &mut Criterion) {
    for ranks in [2u32, 8] {
        let mut group = c.benchmark_group(format!("barrier/{ranks}_ranks"));
        group
            .measurement_time(Duration::from_secs(3))
            .warm_up_time(Duration::from_millis(500));
        if ranks == 8 {
            group.sample_size(20);
        }
        for kind in BarrierKind::ALL {
            group.bench_function(BenchmarkId::from_parameter(kind.name()), |b| {
                b.iter_custom(|iters| barrier::barriers(kind, ranks, iters).expect("barriers"))
            });
        }
        if ranks == 2 {
            group.bench_function(BenchmarkId::from_parameter("cache-line round trip"), |b| {
                b.iter_custom(|laps| {
                    let mut ring =
                        Ring::new(Handoff::CacheLine, 2, laps + 100, false).expect("ring");
                    ring.run(100).expect("warm-up");
                    let elapsed = ring.run(laps).expect("laps");
                    ring.finish().expect("finish");
                    elapsed
                })
            });
        }
        group.finish();
    }
}

criterion_group!(benches, barriers);

fn main() {
    run_if_peer();
    benches();
    criterion::Criterion::default()
        .configure_from_args()
        .final_summary();
}
