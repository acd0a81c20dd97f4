//! Go `time.Duration` strings, as Kubernetes and Karpenter write them (`15m`, `1h17m`, `336h`,
//! `1.5h`), and Karpenter's `expireAfter` (`Never` or a duration).
//!
//! [`parse`] follows Go's `time.ParseDuration` exactly (the apiserver's CEL `duration()` uses the
//! same parser, so local validation and the schema agree); [`format`](fn@format) follows
//! `time.Duration.String`. [`parse_with_days`] additionally accepts a `d` (24h) unit, for command
//! line flags only: it is not a Go duration and is never accepted inside a resource.
use std::fmt;

use chrono::Duration;
use serde::{Deserialize, Serialize};

/// Why a duration string was rejected. Messages follow Go's wording so that they read the same
/// as the apiserver's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("invalid duration {0:?}")]
    Invalid(String),
    #[error("missing unit in duration {0:?} (use one of ns, us, ms, s, m, h)")]
    MissingUnit(String),
    #[error("unknown unit {unit:?} in duration {input:?} (use one of ns, us, ms, s, m, h)")]
    UnknownUnit { unit: String, input: String },
    #[error("duration {0:?} is out of range (the longest Go duration is 2562047h47m16.854775807s)")]
    Overflow(String),
}

const NANOS_PER_MICRO: u64 = 1_000;
const NANOS_PER_MILLI: u64 = 1_000_000;
const NANOS_PER_SECOND: u64 = 1_000_000_000;
const NANOS_PER_MINUTE: u64 = 60 * NANOS_PER_SECOND;
const NANOS_PER_HOUR: u64 = 60 * NANOS_PER_MINUTE;
const NANOS_PER_DAY: u64 = 24 * NANOS_PER_HOUR;

fn unit_nanos(unit: &str, allow_days: bool) -> Option<u64> {
    Some(match unit {
        "ns" => 1,
        // Go accepts U+00B5 (micro sign) and U+03BC (Greek mu).
        "us" | "\u{b5}s" | "\u{3bc}s" => NANOS_PER_MICRO,
        "ms" => NANOS_PER_MILLI,
        "s" => NANOS_PER_SECOND,
        "m" => NANOS_PER_MINUTE,
        "h" => NANOS_PER_HOUR,
        "d" if allow_days => NANOS_PER_DAY,
        _ => return None,
    })
}

/// Parses a Go duration string (`time.ParseDuration`): an optional sign, then one or more
/// decimal numbers with a unit (`ns`, `us`/`µs`, `ms`, `s`, `m`, `h`), e.g. `1h17m`, `1.5h`,
/// `-30s`; the bare string `0` is zero.
pub fn parse(s: &str) -> Result<Duration, DurationError> {
    parse_inner(s, false)
}

/// Like [`parse`], but also accepts `d` (24h) as a unit: `14d`, `1d12h`. For command line flags
/// (`noderotation plan --expire-after 14d`) only.
pub(crate) fn parse_with_days(s: &str) -> Result<Duration, DurationError> {
    parse_inner(s, true)
}

fn parse_inner(orig: &str, allow_days: bool) -> Result<Duration, DurationError> {
    let invalid = || DurationError::Invalid(orig.to_string());
    let mut s = orig;
    let mut negative = false;
    if let Some(rest) = s.strip_prefix('-') {
        negative = true;
        s = rest;
    } else if let Some(rest) = s.strip_prefix('+') {
        s = rest;
    }
    if s == "0" {
        return Ok(Duration::zero());
    }
    if s.is_empty() {
        return Err(invalid());
    }
    // Accumulate in u128 so that an overflow is detected rather than wrapped.
    let mut total: u128 = 0;
    while !s.is_empty() {
        let first = s.as_bytes()[0];
        if !(first == b'.' || first.is_ascii_digit()) {
            return Err(invalid());
        }
        let int_len = s.bytes().take_while(u8::is_ascii_digit).count();
        let int_part = &s[..int_len];
        s = &s[int_len..];
        let mut frac_part = "";
        if let Some(rest) = s.strip_prefix('.') {
            let frac_len = rest.bytes().take_while(u8::is_ascii_digit).count();
            frac_part = &rest[..frac_len];
            s = &rest[frac_len..];
        }
        if int_part.is_empty() && frac_part.is_empty() {
            // "." or ".s": no digits at all.
            return Err(invalid());
        }
        let unit_len = s.find(|c: char| c == '.' || c.is_ascii_digit()).unwrap_or(s.len());
        let unit = &s[..unit_len];
        s = &s[unit_len..];
        if unit.is_empty() {
            return Err(DurationError::MissingUnit(orig.to_string()));
        }
        let Some(scale) = unit_nanos(unit, allow_days) else {
            return Err(DurationError::UnknownUnit {
                unit: unit.to_string(),
                input: orig.to_string(),
            });
        };
        let overflow = || DurationError::Overflow(orig.to_string());
        let int_value: u128 =
            if int_part.is_empty() { 0 } else { int_part.parse().map_err(|_| overflow())? };
        let mut value = int_value.checked_mul(u128::from(scale)).ok_or_else(overflow)?;
        if !frac_part.is_empty() {
            // Go truncates the fraction towards zero at nanosecond resolution.
            let mut frac_nanos: u128 = 0;
            let mut divisor: u128 = 1;
            for digit in frac_part.bytes() {
                if divisor > 1_000_000_000_000_000_000_000 {
                    break; // further digits cannot change the truncated result
                }
                frac_nanos = frac_nanos * 10 + u128::from(digit - b'0');
                divisor *= 10;
            }
            // Checked: the integer part alone can sit just below u128's limit.
            value =
                value.checked_add(frac_nanos * u128::from(scale) / divisor).ok_or_else(overflow)?;
        }
        total = total.checked_add(value).ok_or_else(overflow)?;
        if total > i64::MAX as u128 {
            return Err(overflow());
        }
    }
    let nanos = i64::try_from(total).map_err(|_| DurationError::Overflow(orig.to_string()))?;
    Ok(Duration::nanoseconds(if negative { -nanos } else { nanos }))
}

/// Formats like Go's `time.Duration.String`: `1h17m0s`, `96h0m0s`, `15m0s`, `1.5s`, `250ms`, `0s`.
pub(crate) fn format(d: Duration) -> String {
    let Some(nanos) = d.num_nanoseconds() else {
        // Beyond ±292 years: Go cannot represent it either; fall back to whole seconds.
        return format!("{}s", d.num_seconds());
    };
    let negative = nanos < 0;
    let u = nanos.unsigned_abs();
    let mut out = String::new();
    if negative {
        out.push('-');
    }
    if u < NANOS_PER_SECOND {
        if u == 0 {
            return "0s".to_string();
        }
        let (scale, unit) = if u < NANOS_PER_MICRO {
            (1, "ns")
        } else if u < NANOS_PER_MILLI {
            (NANOS_PER_MICRO, "\u{b5}s")
        } else {
            (NANOS_PER_MILLI, "ms")
        };
        out.push_str(&fraction(u, scale));
        out.push_str(unit);
        return out;
    }
    let hours = u / NANOS_PER_HOUR;
    let minutes = (u % NANOS_PER_HOUR) / NANOS_PER_MINUTE;
    let rest = u % NANOS_PER_MINUTE;
    if hours > 0 {
        out.push_str(&format!("{hours}h"));
    }
    if hours > 0 || minutes > 0 {
        out.push_str(&format!("{minutes}m"));
    }
    out.push_str(&fraction(rest, NANOS_PER_SECOND));
    out.push('s');
    out
}

/// `value / scale` as a decimal with trailing zeros (and a trailing point) removed.
fn fraction(value: u64, scale: u64) -> String {
    let whole = value / scale;
    let frac = value % scale;
    if frac == 0 {
        return whole.to_string();
    }
    let width = scale.ilog10() as usize;
    let digits = format!("{frac:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

/// A compact form for people: days, hours, minutes, seconds with zero units left out
/// (`5d22h43m`, `1h17m`, `4d`, `30s`, `0s`); sub-second durations fall back to [`format`](fn@format).
pub fn format_human(d: Duration) -> String {
    let Some(nanos) = d.num_nanoseconds() else {
        return format!("{}d", d.num_days());
    };
    let negative = nanos < 0;
    let u = nanos.unsigned_abs();
    if u % NANOS_PER_SECOND != 0 && u < NANOS_PER_MINUTE {
        return format(d);
    }
    let mut out = String::new();
    if negative {
        out.push('-');
    }
    let days = u / NANOS_PER_DAY;
    let hours = (u % NANOS_PER_DAY) / NANOS_PER_HOUR;
    let minutes = (u % NANOS_PER_HOUR) / NANOS_PER_MINUTE;
    let rest = u % NANOS_PER_MINUTE;
    for (value, unit) in [(days, "d"), (hours, "h"), (minutes, "m")] {
        if value > 0 {
            out.push_str(&format!("{value}{unit}"));
        }
    }
    if rest > 0 {
        out.push_str(&fraction(rest, NANOS_PER_SECOND));
        out.push('s');
    }
    if u == 0 {
        out.push_str("0s");
    }
    out
}

/// Karpenter's `expireAfter`: `Never`, or a duration after `creationTimestamp` at which Karpenter
/// deletes the claim forcefully (§2: default 720h).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum ExpireAfter {
    Never,
    After(Duration),
}

impl ExpireAfter {
    /// Karpenter's default when a NodePool template leaves `expireAfter` unset.
    pub(crate) const KARPENTER_DEFAULT: ExpireAfter = ExpireAfter::After(Duration::hours(720));

    /// Parses `Never` or a Go duration. A negative duration is rejected: Karpenter's schema
    /// does not admit one and it has no meaning as a lifetime.
    pub(crate) fn parse(s: &str) -> Result<Self, DurationError> {
        if s == "Never" {
            return Ok(ExpireAfter::Never);
        }
        let d = parse(s)?;
        if d < Duration::zero() {
            return Err(DurationError::Invalid(s.to_string()));
        }
        Ok(ExpireAfter::After(d))
    }

    /// Like [`ExpireAfter::parse`] but also accepts the `d` unit (command line flags only).
    pub(crate) fn parse_with_days(s: &str) -> Result<Self, DurationError> {
        if s == "Never" {
            return Ok(ExpireAfter::Never);
        }
        let d = parse_with_days(s)?;
        if d < Duration::zero() {
            return Err(DurationError::Invalid(s.to_string()));
        }
        Ok(ExpireAfter::After(d))
    }

    /// The duration, or `None` for `Never`.
    pub(crate) fn duration(self) -> Option<Duration> {
        match self {
            ExpireAfter::Never => None,
            ExpireAfter::After(d) => Some(d),
        }
    }
}

impl fmt::Display for ExpireAfter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExpireAfter::Never => f.write_str("Never"),
            ExpireAfter::After(d) => f.write_str(&format(*d)),
        }
    }
}

impl TryFrom<String> for ExpireAfter {
    type Error = DurationError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        ExpireAfter::parse(&s)
    }
}

impl From<ExpireAfter> for String {
    fn from(e: ExpireAfter) -> String {
        e.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Duration {
        parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn parses_go_durations() {
        assert_eq!(d("1h17m"), Duration::minutes(77));
        assert_eq!(d("30s"), Duration::seconds(30));
        assert_eq!(d("336h"), Duration::days(14));
        assert_eq!(d("1.5h"), Duration::minutes(90));
        assert_eq!(d(".5h"), Duration::minutes(30));
        assert_eq!(d("5.m"), Duration::minutes(5));
        assert_eq!(d("0"), Duration::zero());
        assert_eq!(d("0s"), Duration::zero());
        assert_eq!(d("-30s"), Duration::seconds(-30));
        assert_eq!(d("+2m"), Duration::minutes(2));
        assert_eq!(d("1h0m0s"), Duration::hours(1));
        assert_eq!(d("250ms"), Duration::milliseconds(250));
        assert_eq!(d("3us"), Duration::microseconds(3));
        assert_eq!(d("3\u{b5}s"), Duration::microseconds(3));
        assert_eq!(d("3\u{3bc}s"), Duration::microseconds(3));
        assert_eq!(d("7ns"), Duration::nanoseconds(7));
        assert_eq!(d("1.000000001s"), Duration::nanoseconds(1_000_000_001));
        // Go truncates digits below a nanosecond.
        assert_eq!(d("1.0000000019s"), Duration::nanoseconds(1_000_000_001));
        assert_eq!(d("2562047h47m16.854775807s"), Duration::nanoseconds(i64::MAX));
    }

    #[test]
    fn rejects_what_go_rejects() {
        for bad in ["", "-", "1", "h", ".", ".s", "1d", "15 m", "1h 2m", "1.2.3s", "1hh", "m1"] {
            assert!(parse(bad).is_err(), "{bad:?} should be rejected");
        }
        assert!(matches!(parse("10"), Err(DurationError::MissingUnit(_))));
        assert!(matches!(parse("10x"), Err(DurationError::UnknownUnit { .. })));
        assert!(matches!(parse("2562047h47m16.854775808s"), Err(DurationError::Overflow(_))));
        assert!(matches!(parse("99999999999999999999999h"), Err(DurationError::Overflow(_))));
    }

    #[test]
    fn a_fraction_that_overflows_is_rejected_not_wrapped() {
        // The integer part times the unit fits u128 just below its limit; the fraction pushed
        // the sum over it and wrapped to a small, valid-looking duration.
        for bad in [
            "94522879700260684295381835.9999h",
            "94522879700260684295381835.9999h1s",
            "5671372782015641057722910123.9999m",
        ] {
            let err = parse(bad).expect_err(bad);
            assert!(matches!(err, DurationError::Overflow(_)), "{bad}: {err:?}");
            assert!(err.to_string().contains("2562047h47m16.854775807s"), "{err}");
            assert!(parse_with_days(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn days_only_with_the_flag_parser() {
        assert!(parse("14d").is_err());
        assert_eq!(parse_with_days("14d"), Ok(Duration::days(14)));
        assert_eq!(parse_with_days("1d12h"), Ok(Duration::hours(36)));
        assert_eq!(parse_with_days("1h"), Ok(Duration::hours(1)));
    }

    #[test]
    fn formats_like_go() {
        assert_eq!(format(Duration::minutes(77)), "1h17m0s");
        assert_eq!(format(Duration::days(4)), "96h0m0s");
        assert_eq!(format(Duration::minutes(15)), "15m0s");
        assert_eq!(format(Duration::seconds(30)), "30s");
        assert_eq!(format(Duration::milliseconds(1500)), "1.5s");
        assert_eq!(format(Duration::milliseconds(250)), "250ms");
        assert_eq!(format(Duration::microseconds(3)), "3\u{b5}s");
        assert_eq!(format(Duration::nanoseconds(7)), "7ns");
        assert_eq!(format(Duration::zero()), "0s");
        assert_eq!(format(Duration::seconds(-90)), "-1m30s");
        assert_eq!(format(Duration::nanoseconds(i64::MAX)), "2562047h47m16.854775807s");
    }

    #[test]
    fn format_then_parse_round_trips() {
        for n in [1i64, 999, 1_000, 1_500_000, 59_999_999_999, 3_600_000_000_000, i64::MAX] {
            for sign in [1, -1] {
                let x = Duration::nanoseconds(sign * n);
                assert_eq!(parse(&format(x)), Ok(x), "{}", format(x));
            }
        }
    }

    #[test]
    fn human_format() {
        assert_eq!(
            format_human(Duration::days(14) - Duration::minutes(8 * 24 * 60 + 77)),
            "5d22h43m"
        );
        assert_eq!(format_human(Duration::minutes(77)), "1h17m");
        assert_eq!(format_human(Duration::days(4)), "4d");
        assert_eq!(format_human(Duration::seconds(30)), "30s");
        assert_eq!(format_human(Duration::zero()), "0s");
        assert_eq!(format_human(Duration::hours(-3)), "-3h");
        assert_eq!(format_human(Duration::milliseconds(1500)), "1.5s");
    }

    #[test]
    fn expire_after() {
        assert_eq!(ExpireAfter::parse("Never"), Ok(ExpireAfter::Never));
        assert_eq!(ExpireAfter::parse("720h"), Ok(ExpireAfter::KARPENTER_DEFAULT));
        assert!(ExpireAfter::parse("never").is_err());
        assert!(ExpireAfter::parse("-1h").is_err());
        assert_eq!(ExpireAfter::parse_with_days("14d"), Ok(ExpireAfter::After(Duration::days(14))));
        let json = serde_json::to_string(&ExpireAfter::After(Duration::hours(336))).ok();
        assert_eq!(json.as_deref(), Some("\"336h0m0s\""));
        let back: Result<ExpireAfter, _> = serde_json::from_str("\"Never\"");
        assert_eq!(back.ok(), Some(ExpireAfter::Never));
    }
}
