//! Heartbeats to a rank monitor running in another process: the
//! shared-memory fast path beside the socket, in one criterion group.
//! Target: the fast path at least 100× the socket path.

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group};
use nodeipc_cli::bench::monitor::{Beat, MonitorSession};
use nodeipc_cli::bench::run_if_peer;

fn heartbeats(c: &mut Criterion) {
    let mut session = MonitorSession::start().expect("monitor");
    let mut group = c.benchmark_group("monitor/heartbeat");
    group
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_millis(500));
    for beat in [Beat::FastPath, Beat::Socket] {
        group.bench_function(BenchmarkId::from_parameter(beat.name()), |b| {
            b.iter_custom(|count| session.run(beat, count).expect("heartbeats"))
        });
    }
    group.finish();
}

criterion_group!(benches, heartbeats);

fn main() {
    // The monitor each session spawns is this executable too.
    nodeipc_monitor_host::run_if_server();
    run_if_peer();
    benches();
    criterion::Criterion::default()
        .configure_from_args()
        .final_summary();
}
