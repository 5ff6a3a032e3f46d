//! Durations as people write them.

use std::time::Duration;

/// A duration in the unit that reads best, three significant digits at
/// most: `2.0 s`, `150 ms`, `12 µs`, `800 ns`; a minute or more as
/// `3 min 20 s`.
pub fn duration(d: Duration) -> String {
    let secs = d.as_secs_f64();
    if d.as_secs() >= 60 {
        let whole = d.as_secs();
        return match whole % 60 {
            0 => format!("{} min", whole / 60),
            s => format!("{} min {s} s", whole / 60),
        };
    }
    if secs >= 10.0 {
        format!("{secs:.0} s")
    } else if secs >= 1.0 {
        format!("{secs:.1} s")
    } else if d.as_millis() >= 1 {
        format!("{} ms", d.as_millis())
    } else if d.as_micros() >= 1 {
        format!("{} µs", d.as_micros())
    } else {
        format!("{} ns", d.as_nanos())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(duration(Duration::from_nanos(2_004_600_839)), "2.0 s");
        assert_eq!(duration(Duration::from_millis(150)), "150 ms");
        assert_eq!(duration(Duration::from_micros(12)), "12 µs");
        assert_eq!(duration(Duration::from_nanos(800)), "800 ns");
        assert_eq!(duration(Duration::from_secs(12)), "12 s");
        assert_eq!(duration(Duration::from_secs(200)), "3 min 20 s");
        assert_eq!(duration(Duration::from_secs(120)), "2 min");
        assert_eq!(duration(Duration::ZERO), "0 ns");
        assert_eq!(duration(Duration::MAX), "307445734561825860 min 15 s");
    }
}
