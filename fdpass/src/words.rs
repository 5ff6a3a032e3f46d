//! [`InWords`]: a duration as a person writes it ("150 ms", "2.0 s"), for
//! every message of every layer, so no `Debug` form (`10.093828ms`) reaches
//! a log, a C caller's `nodeipc_last_error()` or a Python exception.
//!
//! Here because this is the lowest crate whose errors carry a duration:
//! every layer above (and the command line) uses this one.

use std::fmt;
use std::time::Duration;

/// A duration in the unit that reads best, three significant digits at
/// most: `2.0 s`, `150 ms`, `12 µs`, `800 ns`; a minute or more as
/// `3 min 20 s`. Use it in a format string (`{}`) or call `to_string`.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use nodeipc_fdpass::InWords;
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

#[cfg(test)]
mod tests {
    use super::InWords;
    use std::time::Duration;

    fn words(d: Duration) -> String {
        InWords(d).to_string()
    }

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(words(Duration::from_nanos(2_004_600_839)), "2.0 s");
        assert_eq!(words(Duration::from_millis(150)), "150 ms");
        assert_eq!(words(Duration::from_nanos(10_093_828)), "10 ms");
        assert_eq!(words(Duration::from_micros(12)), "12 µs");
        assert_eq!(words(Duration::from_nanos(800)), "800 ns");
        assert_eq!(words(Duration::from_secs(12)), "12 s");
        assert_eq!(words(Duration::from_secs(200)), "3 min 20 s");
        assert_eq!(words(Duration::from_secs(120)), "2 min");
        assert_eq!(words(Duration::ZERO), "0 ns");
        assert_eq!(words(Duration::MAX), "307445734561825860 min 15 s");
    }
}
