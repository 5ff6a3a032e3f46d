//! Medians and percentiles of repeated measurements.

/// Summary of repeated measurements of one quantity (nanoseconds per operation).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    /// The median.
    pub median: f64,
    /// The 99th percentile.
    pub p99: f64,
    /// The smallest.
    pub min: f64,
    /// How many measurements.
    pub samples: usize,
}

impl Summary {
    /// Summarises `samples` (in any order); `None` if there are none.
    pub fn of(samples: &[f64]) -> Option<Summary> {
        if samples.is_empty() {
            return None;
        }
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        Some(Summary {
            median: percentile(&sorted, 0.50),
            p99: percentile(&sorted, 0.99),
            min: sorted[0],
            samples: sorted.len(),
        })
    }
}

/// Nearest-rank percentile of sorted, non-empty samples.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::Summary;

    #[test]
    fn median_and_p99_of_a_known_set() {
        let samples: Vec<f64> = (1..=100).map(f64::from).rev().collect();
        let s = Summary::of(&samples).unwrap();
        assert_eq!((s.median, s.p99, s.min, s.samples), (50.0, 99.0, 1.0, 100));
        assert_eq!(Summary::of(&[]), None);
        assert_eq!(Summary::of(&[7.0]).unwrap().p99, 7.0);
    }
}
