//! Semaphore hand-off between processes: `ShmSemaphore` beside glibc's named
//! semaphores, a bare futex and the cache-line floor, in one criterion group.
//!
//! - `round_trip`: two processes, one per core (pinned where there are two):
//!   one lap is a post and a wait each way.
//! - `ring_of_4`: four processes on this machine's cores; with two cores
//!   every hand-off must wake a sleeping process.

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group};
use nodeipc_cli::bench::{Handoff, Ring, run_if_peer};

fn bench_ring(c: &mut Criterion, group_name: &str, members: usize, handoffs: &[Handoff]) {
    let mut group = c.benchmark_group(group_name);
    group
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_millis(500));
    for &handoff in handoffs {
        group.bench_function(BenchmarkId::from_parameter(handoff.name()), |b| {
            b.iter_custom(|laps| {
                let warm_up = 100;
                let mut ring = Ring::new(handoff, members, laps + warm_up, true).expect("ring");
                ring.run(warm_up).expect("warm-up");
                let elapsed = ring.run(laps).expect("laps");
                ring.finish().expect("peers finish");
                elapsed
            })
        });
    }
    group.finish();
}

fn round_trip(c: &mut Criterion) {
    bench_ring(
        c,
        "sem/round_trip",
        2,
        &[
            Handoff::ShmSemaphore,
            Handoff::CacheLine,
            Handoff::Futex,
            Handoff::GlibcSemaphore,
        ],
    );
}

fn ring_of_4(c: &mut Criterion) {
    bench_ring(
        c,
        "sem/ring_of_4",
        4,
        &[
            Handoff::ShmSemaphore,
            Handoff::Futex,
            Handoff::GlibcSemaphore,
        ],
    );
}

criterion_group!(benches, round_trip, ring_of_4);

fn main() {
    run_if_peer();
    benches();
    criterion::Criterion::default()
        .configure_from_args()
        .final_summary();
}
