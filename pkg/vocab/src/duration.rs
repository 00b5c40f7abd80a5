//! Prometheus durations, the one parser and printer of the workspace: `500ms`, `30s`,
//! `1h30m`, `2d`, `1w`, `1y` in queries (`x[5m]`), parca.yaml (`scrape_interval: 10s`), the HTTP
//! API's `step` and the server's flags.

use std::fmt::{self, Write};
use std::time::Duration;

/// The units, largest first, with their length in milliseconds, and whether a duration is
/// written with the unit only when the unit divides it (as Prometheus writes `90d`, not `12w6d`).
/// A year is 365 days, as in Prometheus (`github.com/prometheus/common/model`).
const UNITS: [(&str, u64, bool); 7] = [
    ("y", 365 * 24 * 3600 * 1000, true),
    ("w", 7 * 24 * 3600 * 1000, true),
    ("d", 24 * 3600 * 1000, false),
    ("h", 3600 * 1000, false),
    ("m", 60 * 1000, false),
    ("s", 1000, false),
    ("ms", 1, false),
];

const UNIT_LIST: &str = "ms, s, m, h, d, w or y";

/// Prometheus keeps durations in an i64 of nanoseconds (about 292 years).
const MAX_MS: u64 = i64::MAX as u64 / 1_000_000;

/// Why a text is not a duration: what is wrong, and the byte range of the text it concerns.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct DurationError {
    /// Where the fault starts in the text.
    pub start: usize,
    /// Where it ends.
    pub end: usize,
    /// What is wrong, and how to write it instead.
    pub message: String,
}

impl DurationError {
    fn new(start: usize, end: usize, message: impl Into<String>) -> Self {
        DurationError {
            start,
            end,
            message: message.into(),
        }
    }
}

/// Parses a duration as Prometheus does (`model.ParseDuration`): one or more
/// `<integer><unit>` pairs, units from largest to smallest, each at most once (`1h30m`, not
/// `30m1h`), units `y` (365 days), `w`, `d`, `h`, `m`, `s` and `ms`; a bare `0` is zero.
///
/// ```
/// use std::time::Duration;
/// use parca_vocab::duration;
/// assert_eq!(duration::parse("1m30s").unwrap(), Duration::from_secs(90));
/// assert_eq!(
///     duration::parse("10x").unwrap_err().to_string(),
///     "unknown duration unit `x`: use ms, s, m, h, d, w or y",
/// );
/// ```
#[expect(
    clippy::too_many_lines,
    reason = "a scanner of Prometheus' duration syntax, one state per character class, as Go's model.ParseDuration"
)]
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    if text.is_empty() {
        return Err(DurationError::new(
            0,
            0,
            format!(
                "a duration is empty: write numbers with units ({UNIT_LIST}), such as 5m or 1h30m"
            ),
        ));
    }
    let bytes = text.as_bytes();
    let mut total_ms: u64 = 0;
    let mut i = 0;
    // Index into UNITS of the last unit seen; the next must be strictly smaller.
    let mut last_unit: Option<usize> = None;
    while i < bytes.len() {
        let number_start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        if i == number_start {
            let hint = if text.contains('.') {
                "; a duration counts whole units, as in 1h30m or 1500ms"
            } else {
                ""
            };
            return Err(DurationError::new(
                i,
                text.len(),
                format!(
                    "`{text}` is not a duration: write numbers with units ({UNIT_LIST}), such as 5m or 1h30m{hint}"
                ),
            ));
        }
        let unit_start = i;
        while i < bytes.len() && !bytes[i].is_ascii_digit() {
            i += 1;
        }
        let unit = &text[unit_start..i];
        if unit.is_empty() {
            let number = &text[number_start..];
            return Err(DurationError::new(
                number_start,
                text.len(),
                format!("`{number}` needs a unit ({UNIT_LIST}), such as {number}m"),
            ));
        }
        if unit.starts_with('.') {
            return Err(DurationError::new(
                0,
                text.len(),
                format!("`{text}`: a duration counts whole units, as in 1h30m or 1500ms"),
            ));
        }
        let Some(unit_idx) = UNITS.iter().position(|(name, _, _)| *name == unit) else {
            return Err(DurationError::new(
                unit_start,
                i,
                format!("unknown duration unit `{unit}`: use {UNIT_LIST}"),
            ));
        };
        if last_unit.is_some_and(|last| unit_idx <= last) {
            return Err(DurationError::new(
                0,
                text.len(),
                format!("`{text}`: units must go from largest to smallest, each once, as in 1h30m"),
            ));
        }
        last_unit = Some(unit_idx);
        total_ms = text[number_start..unit_start]
            .parse::<u64>()
            .ok()
            .and_then(|count| count.checked_mul(UNITS[unit_idx].1))
            .and_then(|ms| total_ms.checked_add(ms))
            .filter(|&ms| ms <= MAX_MS)
            .ok_or_else(|| {
                DurationError::new(
                    0,
                    text.len(),
                    format!("`{text}` is too long a duration (at most about 292 years)"),
                )
            })?;
    }
    Ok(Duration::from_millis(total_ms))
}

/// Writes a duration as Prometheus does: `0s`, `1m30s`, `2h`, `1d`, `1w`; years and weeks only
/// when they divide it exactly (`90d`, not `12w6d`). Precision below a millisecond is dropped.
pub fn write(f: &mut impl Write, duration: Duration) -> fmt::Result {
    let mut ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
    if ms == 0 {
        return f.write_str("0s");
    }
    for (unit, unit_ms, exact_only) in UNITS {
        if exact_only && ms % unit_ms != 0 {
            continue;
        }
        let n = ms / unit_ms;
        if n > 0 {
            write!(f, "{n}{unit}")?;
            ms -= n * unit_ms;
        }
    }
    Ok(())
}

/// [`write`] into a new string.
///
/// ```
/// use std::time::Duration;
/// use parca_vocab::duration;
/// assert_eq!(duration::format(Duration::from_secs(90)), "1m30s");
/// assert_eq!(duration::format(Duration::from_secs(8 * 86400)), "8d");
/// ```
pub fn format(duration: Duration) -> String {
    let mut out = String::new();
    write(&mut out, duration).expect("writing to a String cannot fail");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_prometheus_forms() {
        let cases = [
            ("0", 0),
            ("0s", 0),
            ("500ms", 500),
            ("30s", 30_000),
            ("1m30s", 90_000),
            ("2h", 7_200_000),
            ("1d", 86_400_000),
            ("1w", 7 * 86_400_000),
            ("1y", 365 * 86_400_000),
            ("1h2m3s4ms", 3_723_004),
            ("1d12h", 129_600_000),
        ];
        for (text, ms) in cases {
            assert_eq!(parse(text), Ok(Duration::from_millis(ms)), "{text}");
        }
    }

    #[test]
    fn refuses_other_forms_saying_what_to_write() {
        let cases = [
            (
                "10x",
                "unknown duration unit `x`: use ms, s, m, h, d, w or y",
            ),
            (
                "10",
                "`10` needs a unit (ms, s, m, h, d, w or y), such as 10m",
            ),
            (
                "s",
                "`s` is not a duration: write numbers with units (ms, s, m, h, d, w or y), such as 5m or 1h30m",
            ),
            (
                "1.5s",
                "`1.5s`: a duration counts whole units, as in 1h30m or 1500ms",
            ),
            (
                "-1s",
                "`-1s` is not a duration: write numbers with units (ms, s, m, h, d, w or y), such as 5m or 1h30m",
            ),
            (
                "30m1h",
                "`30m1h`: units must go from largest to smallest, each once, as in 1h30m",
            ),
            (
                "1s1s",
                "`1s1s`: units must go from largest to smallest, each once, as in 1h30m",
            ),
            (
                "",
                "a duration is empty: write numbers with units (ms, s, m, h, d, w or y), such as 5m or 1h30m",
            ),
            (
                "300y",
                "`300y` is too long a duration (at most about 292 years)",
            ),
            (
                "99999999999999999999s",
                "`99999999999999999999s` is too long a duration (at most about 292 years)",
            ),
        ];
        for (text, message) in cases {
            assert_eq!(parse(text).unwrap_err().message, message, "{text}");
        }
    }

    #[test]
    fn formats_as_prometheus_and_reads_back() {
        let cases = [
            (0, "0s"),
            (1, "1ms"),
            (1_500, "1s500ms"),
            (90_000, "1m30s"),
            (7_200_000, "2h"),
            (86_400_000, "1d"),
            (8 * 86_400_000, "8d"),
            (14 * 86_400_000, "2w"),
            (90 * 86_400_000, "90d"),
            (365 * 86_400_000, "1y"),
        ];
        for (ms, text) in cases {
            assert_eq!(format(Duration::from_millis(ms)), text);
            assert_eq!(
                parse(text),
                Ok(Duration::from_millis(ms)),
                "round trip of {text}"
            );
        }
    }
}
