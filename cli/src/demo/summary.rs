//! What the demo prints when it is done.

use std::path::Path;
use std::time::Duration;

use super::Sems;
use super::histogram::Histogram;

pub(super) struct Summary<'a> {
    pub(super) workers: u32,
    pub(super) requests: u64,
    pub(super) payload: u32,
    pub(super) depth: u32,
    pub(super) sems: Sems,
    pub(super) elapsed: Duration,
    pub(super) latencies: &'a Histogram,
    pub(super) bytes: u64,
    pub(super) heartbeats: &'a [u64],
    pub(super) ranks: usize,
    pub(super) transport: &'static str,
    pub(super) leftovers: Vec<String>,
}

impl Summary<'_> {
    /// Prints through [`crate::output`]: a reader that left early ends the
    /// summary quietly.
    pub(super) fn print(self) {
        let micros = |q: f64| self.latencies.quantile(q).unwrap_or(0) as f64 / 1e3;
        outln!(
            "nodeipc demo: {} workers, {} requests of {} payload bytes, depth {}, {} semaphores",
            self.workers,
            self.requests,
            self.payload,
            self.depth,
            self.sems.name()
        );
        outln!(
            "  handshake      {} workers logged on, regions passed as memfds",
            self.workers
        );
        outln!(
            "  rank group     {} ranks met at a barrier (fd transport {})",
            self.ranks,
            self.transport
        );
        outln!(
            "  requests/s     {:.0} (in {})",
            self.latencies.count() as f64 / self.elapsed.as_secs_f64().max(f64::MIN_POSITIVE),
            nodeipc_text::duration(self.elapsed)
        );
        outln!("  latency p50    {:.2} us", micros(0.50));
        outln!("  latency p99    {:.2} us", micros(0.99));
        outln!(
            "  bytes moved    {} ({:.1} MiB)",
            self.bytes,
            self.bytes as f64 / (1 << 20) as f64
        );
        let beats: Vec<String> = self.heartbeats.iter().map(u64::to_string).collect();
        outln!(
            "  heartbeats     {} (per worker, seen by its monitor)",
            beats.join(" ")
        );
        if self.leftovers.is_empty() {
            outln!("  left behind    nothing");
        } else {
            outln!(
                "  left behind    {}",
                nodeipc_text::Printable(&self.leftovers.join(" "))
            );
        }
    }
}

/// What the demo left under `/dev/shm` or in its directory (nothing, we hope).
pub(super) fn leftovers(tag: &str, dir: &Path) -> Vec<String> {
    let mut found: Vec<String> = std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.contains(tag))
                .collect()
        })
        .unwrap_or_default();
    if let Ok(entries) = std::fs::read_dir(dir) {
        found.extend(entries.flatten().map(|e| e.path().display().to_string()));
    }
    found
}
