//! Durations as people write them.

use std::fmt;
use std::time::Duration;

/// A duration in the unit that reads best, three significant digits at
/// most: `2.0 s`, `150 ms`, `12 µs`, `800 ns`; a minute or more as
/// `3 min 20 s`. Use it in a format string (`{}`): no `Debug` form
/// (`10.093828ms`) then reaches a log, a C caller's `nodeipc_last_error()`
/// or a Python exception.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use nodeipc_text::InWords;
/// assert_eq!(InWords(Duration::from_nanos(10_093_828)).to_string(), "10 ms");
/// assert_eq!(format!("after {}", InWords(Duration::from_millis(2500))), "after 2.5 s");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InWords(pub Duration);

impl fmt::Display for InWords {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.0;
        let secs = d.as_secs_f64();
        if d.as_secs() >= 60 {
            let whole = d.as_secs();
            return match whole % 60 {
                0 => write!(f, "{} min", whole / 60),
                s => write!(f, "{} min {s} s", whole / 60),
            };
        }
        if secs >= 10.0 {
            write!(f, "{secs:.0} s")
        } else if secs >= 1.0 {
            write!(f, "{secs:.1} s")
        } else if d.as_millis() >= 1 {
            write!(f, "{} ms", d.as_millis())
        } else if d.as_micros() >= 1 {
            write!(f, "{} µs", d.as_micros())
        } else {
            write!(f, "{} ns", d.as_nanos())
        }
    }
}

/// [`InWords`] as a `String`.
pub fn duration(d: Duration) -> String {
    InWords(d).to_string()
}

/// Whole milliseconds, rounded up so that a non-zero duration never reads
/// as 0 (which configuration files and protocols take for "none"),
/// saturating at `u64::MAX`.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(nodeipc_text::whole_ms(Duration::from_micros(1)), 1);
/// assert_eq!(nodeipc_text::whole_ms(Duration::from_millis(1500)), 1500);
/// assert_eq!(nodeipc_text::whole_ms(Duration::ZERO), 0);
/// ```
pub fn whole_ms(d: Duration) -> u64 {
    let whole = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    if d.subsec_nanos().is_multiple_of(1_000_000) {
        whole
    } else {
        whole.saturating_add(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(duration(Duration::from_nanos(2_004_600_839)), "2.0 s");
        assert_eq!(duration(Duration::from_millis(150)), "150 ms");
        assert_eq!(duration(Duration::from_nanos(10_093_828)), "10 ms");
        assert_eq!(duration(Duration::from_micros(12)), "12 µs");
        assert_eq!(duration(Duration::from_nanos(800)), "800 ns");
        assert_eq!(duration(Duration::from_secs(12)), "12 s");
        assert_eq!(duration(Duration::from_secs(200)), "3 min 20 s");
        assert_eq!(duration(Duration::from_secs(120)), "2 min");
        assert_eq!(duration(Duration::ZERO), "0 ns");
        assert_eq!(duration(Duration::MAX), "307445734561825860 min 15 s");
    }
}
