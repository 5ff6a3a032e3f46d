//! Timeouts as `poll(2)` takes them.
//!
//! The conversion is `nodeipc_shm::wait::timespec`'s, the tree's one: this
//! crate sits beside shm, not above it, and a dependency on shared memory
//! for four lines would be the wrong way round. rustix's `TryFrom` does the
//! conversion; only the saturation is ours, and it is the same constant.

use std::time::Duration;

use rustix::time::Timespec;

/// The largest `timespec`, which the kernel takes as a deadline it never
/// reaches (`nodeipc_shm::wait::TIMESPEC_MAX`).
const TIMESPEC_MAX: Timespec = Timespec {
    tv_sec: i64::MAX,
    tv_nsec: 999_999_999,
};

/// `timeout` as a `timespec`; one too long for it becomes the largest, in
/// effect no limit — never a panic or a wrap to a negative (refused) value.
pub(crate) fn timespec(timeout: Duration) -> Timespec {
    Timespec::try_from(timeout).unwrap_or(TIMESPEC_MAX)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{TIMESPEC_MAX, timespec};

    #[test]
    fn a_timeout_past_a_timespec_is_the_largest_one() {
        assert_eq!(timespec(Duration::MAX), TIMESPEC_MAX);
        assert_eq!(timespec(Duration::from_secs(u64::MAX)), TIMESPEC_MAX);
        let t = timespec(Duration::from_millis(2500));
        assert_eq!((t.tv_sec, t.tv_nsec), (2, 500_000_000));
    }
}
