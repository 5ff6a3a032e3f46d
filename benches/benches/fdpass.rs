//! Descriptor passing between two processes, per descriptor: nodeipc-fdpass
//! beside the same system calls written by hand, in one criterion group each.
//! Target: within 1.2× of the bare calls.

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group};
use nodeipc_cli::bench::fdpass::{self, Impl};
use nodeipc_cli::bench::run_if_peer;

fn scm_rights(c: &mut Criterion) {
    for per_message in [1usize, 64] {
        let mut group = c.benchmark_group(format!("fdpass/scm_rights_{per_message}_per_message"));
        group
            .measurement_time(Duration::from_secs(3))
            .warm_up_time(Duration::from_millis(500));
        // Elements per second = descriptors per second.
        group.throughput(Throughput::Elements(per_message as u64));
        for which in [Impl::Ours, Impl::Bare] {
            group.bench_function(BenchmarkId::from_parameter(which.name()), |b| {
                b.iter_custom(|messages| {
                    fdpass::scm_rights(which, per_message, messages).expect("scm_rights")
                })
            });
        }
        group.finish();
    }
}

fn pidfd_getfd(c: &mut Criterion) {
    let mut group = c.benchmark_group("fdpass/pidfd_getfd");
    group
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_millis(500));
    group.throughput(Throughput::Elements(1));
    for which in [Impl::Ours, Impl::Bare] {
        group.bench_function(BenchmarkId::from_parameter(which.name()), |b| {
            b.iter_custom(|count| fdpass::pidfd_getfd(which, count).expect("pidfd_getfd"))
        });
    }
    group.finish();
}

criterion_group!(benches, scm_rights, pidfd_getfd);

fn main() {
    run_if_peer();
    benches();
    criterion::Criterion::default()
        .configure_from_args()
        .final_summary();
}
