//! Numbers from the command line, checked against their limits while they
//! are parsed: nothing a user types reaches an allocation, a multiplication
//! or a cast before it is known to lie in its range.
//!
//! Each parser is a clap value parser; clap names the option and the value,
//! the parser names the range, so a refusal is one line:
//! `invalid value '-1' for '--workers <WORKERS>': must be a whole number in 1..=64`.

use crate::Failure;

/// The most a request ring (`--depth` frames of `--payload` bytes) may take,
/// in the demo and the channel benchmark: every frame is written in turn,
/// so all of it becomes memory.
pub(crate) const MAX_RING: u64 = 256 << 20;

/// Refuses a `--payload` and `--depth` whose ring would pass [`MAX_RING`],
/// naming both and the limit.
pub(crate) fn check_ring(payload: u64, depth: u32) -> Result<(), Failure> {
    // Both are range-checked first: at most 2^26 and 64, no overflow.
    let ring = payload.saturating_mul(u64::from(depth));
    if ring > MAX_RING {
        return Err(Failure::Usage(format!(
            "--payload {payload} with --depth {depth} needs a request ring of {ring} bytes; \
             at most {MAX_RING} (256 MiB)"
        )));
    }
    Ok(())
}

/// A clap value parser for a `u64` in `min..=max`.
pub(crate) fn u64_in(
    min: u64,
    max: u64,
) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync + 'static {
    move |text| parse(text, min, max)
}

/// A clap value parser for a `u32` in `min..=max`.
pub(crate) fn u32_in(
    min: u32,
    max: u32,
) -> impl Fn(&str) -> Result<u32, String> + Clone + Send + Sync + 'static {
    move |text| {
        let n = parse(text, min.into(), max.into())?;
        u32::try_from(n).map_err(|_| must_be(min.into(), max.into()))
    }
}

/// A clap value parser for a `usize` in `min..=max`.
pub(crate) fn usize_in(
    min: usize,
    max: usize,
) -> impl Fn(&str) -> Result<usize, String> + Clone + Send + Sync + 'static {
    move |text| {
        let n = parse(text, min as u64, max as u64)?;
        usize::try_from(n).map_err(|_| must_be(min as u64, max as u64))
    }
}

/// Digits only (a leading `-` is recognised to say the number is too small,
/// not that it is not a number); anything else, or a number outside the
/// range, is refused with the range.
fn parse(text: &str, min: u64, max: u64) -> Result<u64, String> {
    let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if let Some(magnitude) = text.strip_prefix('-') {
        // "-0" is zero; any other negative number is below every minimum.
        if all_digits(magnitude) && magnitude.bytes().all(|b| b == b'0') && min == 0 {
            return Ok(0);
        }
        return Err(must_be(min, max));
    }
    if !all_digits(text) {
        return Err(must_be(min, max));
    }
    match text.parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        // Too small, too large, or too many digits for a u64.
        _ => Err(must_be(min, max)),
    }
}

/// A clap value parser for a decimal fraction in `min..=max` (`0.8`, `1`):
/// digits and at most one point, nothing else (no sign, exponent, `nan` or
/// `inf`).
pub(crate) fn fraction_in(
    min: f64,
    max: f64,
) -> impl Fn(&str) -> Result<f64, String> + Clone + Send + Sync + 'static {
    move |text| {
        let digits = text.bytes().filter(u8::is_ascii_digit).count();
        let points = text.bytes().filter(|&b| b == b'.').count();
        let plain = digits > 0 && points <= 1 && digits + points == text.len();
        match text.parse::<f64>() {
            Ok(x) if plain && (min..=max).contains(&x) => Ok(x),
            _ => Err(format!("must be a decimal number in {min}..={max}")),
        }
    }
}

fn must_be(min: u64, max: u64) -> String {
    if max == u64::MAX {
        format!("must be a whole number, at least {min}")
    } else {
        format!("must be a whole number in {min}..={max}")
    }
}

#[cfg(test)]
mod tests {
    use super::{fraction_in, u32_in, u64_in, usize_in};

    #[test]
    fn numbers_in_range_pass_and_the_rest_name_the_range() {
        let workers = u32_in(1, 64);
        assert_eq!(workers("1"), Ok(1));
        assert_eq!(workers("64"), Ok(64));
        for bad in [
            "0",
            "65",
            "-1",
            "4294967296",
            "18446744073709551615",
            "18446744073709551616",
            "99999999999999999999999",
            "junk",
            "",
            "1.5",
            " 2",
            "+3",
        ] {
            assert_eq!(
                workers(bad),
                Err("must be a whole number in 1..=64".to_owned()),
                "{bad:?}"
            );
        }
        let any = u64_in(0, u64::MAX);
        assert_eq!(any("18446744073709551615"), Ok(u64::MAX));
        assert_eq!(any("-0"), Ok(0));
        assert_eq!(
            any("-1"),
            Err("must be a whole number, at least 0".to_owned())
        );
        let size = usize_in(1, isize::MAX as usize);
        assert_eq!(size("9223372036854775807"), Ok(isize::MAX as usize));
        assert!(size("9223372036854775808").is_err());
    }

    #[test]
    fn fractions_in_range_pass_and_the_rest_name_the_range() {
        let load = fraction_in(0.01, 2.0);
        assert_eq!(load("0.8"), Ok(0.8));
        assert_eq!(load("2"), Ok(2.0));
        assert_eq!(load(".5"), Ok(0.5));
        for bad in [
            "0", "0.001", "2.01", "-0.5", "nan", "inf", "1e-1", "+0.5", " 0.5", "0.5.1", ".", "",
        ] {
            assert_eq!(
                load(bad),
                Err("must be a decimal number in 0.01..=2".to_owned()),
                "{bad:?}"
            );
        }
    }
}
