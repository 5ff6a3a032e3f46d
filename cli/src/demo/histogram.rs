//! Latency percentiles in constant memory: a log-linear histogram.
//!
//! Keeping every sample costs 16 bytes a request, so `--requests` decided
//! how much memory the demo took. Here a value lands in one of a fixed set
//! of buckets instead: values below 128 each have their own; above, every
//! power of two is split into 128 equal buckets, so a bucket is never wider
//! than 1/128 of its lowest value (the layout HdrHistogram uses with two
//! significant digits). A percentile is read as its bucket's midpoint,
//! within 1/256 of the exact sample, whatever the number of samples.

/// Buckets per power of two, and the values below which each value has a
/// bucket of its own.
const SUB_BITS: u32 = 7;
const SUB: u64 = 1 << SUB_BITS;
/// One linear group for the values below `SUB`, then one per power of two
/// from 2^7 up to 2^63.
const GROUPS: usize = (64 - SUB_BITS as usize) + 1;
const BUCKETS: usize = GROUPS * SUB as usize;

/// Counts of `u64` values (nanoseconds, for the demo) by bucket.
pub(crate) struct Histogram {
    counts: Box<[u64; BUCKETS]>,
    total: u64,
    min: u64,
    max: u64,
}

impl Histogram {
    pub(crate) fn new() -> Histogram {
        Histogram {
            counts: Box::new([0; BUCKETS]),
            total: 0,
            min: u64::MAX,
            max: 0,
        }
    }

    /// Counts one value.
    pub(crate) fn record(&mut self, value: u64) {
        let bucket = &mut self.counts[index(value)];
        *bucket = bucket.saturating_add(1);
        self.total = self.total.saturating_add(1);
        self.min = self.min.min(value);
        self.max = self.max.max(value);
    }

    /// How many values were counted.
    pub(crate) fn count(&self) -> u64 {
        self.total
    }

    /// The value at quantile `q` (0.0..=1.0), by the nearest-rank rule (the
    /// `ceil(q × n)`-th smallest value), to within its bucket; `None` when
    /// nothing was counted.
    pub(crate) fn quantile(&self, q: f64) -> Option<u64> {
        if self.total == 0 {
            return None;
        }
        let q = if q.is_nan() { 0.0 } else { q.clamp(0.0, 1.0) };
        // Both sides are at most 2^64: the product fits an f64, and the
        // cast saturates; a rank is at least 1 and at most the count.
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        // The ends are known exactly.
        if rank == 1 {
            return Some(self.min);
        }
        if rank == self.total {
            return Some(self.max);
        }
        let mut seen = 0u64;
        for (i, &count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                let (low, width) = bucket(i);
                let middle = low + (width - 1) / 2;
                return Some(middle.clamp(self.min, self.max));
            }
        }
        Some(self.max)
    }
}

/// The bucket a value falls in.
fn index(value: u64) -> usize {
    if value < SUB {
        return value as usize;
    }
    let top = 63 - value.leading_zeros(); // at least SUB_BITS
    let shift = top - SUB_BITS;
    let group = shift as usize + 1;
    let sub = (value >> shift) - SUB; // 0..SUB
    group * SUB as usize + sub as usize
}

/// A bucket's lowest value and how many values it holds.
fn bucket(index: usize) -> (u64, u64) {
    let group = index / SUB as usize;
    let sub = (index % SUB as usize) as u64;
    if group == 0 {
        return (sub, 1);
    }
    let shift = group as u32 - 1;
    ((SUB + sub) << shift, 1 << shift)
}

#[cfg(test)]
mod tests {
    use super::{BUCKETS, Histogram, bucket, index};

    /// The nearest-rank quantile of sorted samples, as `quantile` defines it.
    fn exact(sorted: &[u64], q: f64) -> u64 {
        let n = sorted.len() as u64;
        let rank = ((q * n as f64).ceil() as u64).clamp(1, n);
        sorted[(rank - 1) as usize]
    }

    fn within_bucket_error(estimate: u64, exact: u64) {
        // Half a bucket: 1/256 of the value, plus one for rounding.
        let allowed = exact / 256 + 1;
        assert!(
            estimate.abs_diff(exact) <= allowed,
            "estimate {estimate} vs exact {exact} (allowed {allowed})"
        );
    }

    #[test]
    fn every_value_falls_in_the_bucket_that_holds_it() {
        let mut values: Vec<u64> = (0..1000).collect();
        for shift in 0..64 {
            let p = 1u64 << shift;
            values.extend([p - 1, p, p + 1, p | (p >> 1), p.saturating_mul(3) / 2]);
        }
        values.push(u64::MAX);
        for v in values {
            let i = index(v);
            assert!(i < BUCKETS, "{v} -> {i}");
            let (low, width) = bucket(i);
            assert!(low <= v && v - low < width, "{v} not in [{low}, +{width})");
            assert!(width == 1 || width <= low / 128, "bucket of {v} too wide");
        }
    }

    #[test]
    fn p50_and_p99_within_the_bucket_error_of_the_exact_values() {
        // Latency-like data: a body around 20 us, a tail to 50 ms, from a
        // fixed-seed generator so a failure can be replayed.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut samples = Vec::new();
        for _ in 0..100_000 {
            let r = next();
            let v = if r % 100 == 0 {
                1_000_000 + r % 50_000_000
            } else {
                15_000 + r % 10_000
            };
            samples.push(v);
        }
        samples.extend([0, 1, 127, 128, 129, u64::MAX]);
        let mut histogram = Histogram::new();
        for &v in &samples {
            histogram.record(v);
        }
        samples.sort_unstable();
        assert_eq!(histogram.count(), samples.len() as u64);
        for q in [0.0, 0.01, 0.5, 0.9, 0.99, 0.999, 1.0] {
            within_bucket_error(histogram.quantile(q).unwrap(), exact(&samples, q));
        }
        assert_eq!(histogram.quantile(1.0), Some(u64::MAX));
        assert_eq!(histogram.quantile(0.0), Some(0));
    }

    #[test]
    fn small_counts_and_an_empty_histogram() {
        let mut histogram = Histogram::new();
        assert_eq!(histogram.quantile(0.5), None);
        histogram.record(1_234_567);
        for q in [0.0, 0.5, 0.99, 1.0, f64::NAN, -1.0, 2.0] {
            assert_eq!(histogram.quantile(q), Some(1_234_567), "q = {q}");
        }
        histogram.record(10);
        assert_eq!(histogram.quantile(0.5), Some(10));
        within_bucket_error(histogram.quantile(0.99).unwrap(), 1_234_567);
    }

    #[test]
    fn memory_is_the_same_whatever_the_count() {
        let mut histogram = Histogram::new();
        let before = std::mem::size_of_val(&*histogram.counts);
        for v in 0..2_000_000u64 {
            histogram.record(v.wrapping_mul(0x9e37_79b9));
        }
        assert_eq!(std::mem::size_of_val(&*histogram.counts), before);
        assert!(before <= 64 << 10, "{before} bytes of buckets");
        assert_eq!(histogram.count(), 2_000_000);
    }
}
