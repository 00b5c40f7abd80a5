//! Prometheus durations: `500ms`, `30s`, `1m30s`, `2h`, `1d`, `1w`, `1y`.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};

use crate::Error;

/// The units, largest first, with their length in milliseconds. A year is 365 days, as in
/// Prometheus (`github.com/prometheus/common/model`).
const UNITS: [(&str, u64); 7] = [
    ("y", 365 * 24 * 3600 * 1000),
    ("w", 7 * 24 * 3600 * 1000),
    ("d", 24 * 3600 * 1000),
    ("h", 3600 * 1000),
    ("m", 60 * 1000),
    ("s", 1000),
    ("ms", 1),
];

const EXPECTED: &str = "expected a number and a unit such as 10s or 1m";

/// Parses a duration the way Prometheus does: one or more `<integer><unit>` pairs, units from
/// largest to smallest, each at most once (`1h30m`, not `30m1h`), with units `y` (365 days),
/// `w`, `d`, `h`, `m`, `s` and `ms`. A bare `0` is allowed.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(parca_config::parse_duration("1m30s").unwrap(), Duration::from_secs(90));
/// assert_eq!(
///     parca_config::parse_duration("10x").unwrap_err().to_string(),
///     r#"invalid duration "10x": expected a number and a unit such as 10s or 1m"#,
/// );
/// ```
pub fn parse_duration(text: &str) -> Result<Duration, Error> {
    let fail = |reason: &'static str| Error::Duration {
        input: text.to_owned(),
        reason,
    };
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    if text.is_empty() {
        return Err(fail(
            "empty duration; expected a number and a unit such as 10s or 1m",
        ));
    }
    let mut rest = text;
    let mut total_ms: u64 = 0;
    // Index into UNITS of the last unit seen; the next must come strictly later.
    let mut last_unit: Option<usize> = None;
    while !rest.is_empty() {
        let n_digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if n_digits == 0 {
            return Err(fail(EXPECTED));
        }
        let value: u64 = rest[..n_digits]
            .parse()
            .map_err(|_| fail("number out of range"))?;
        rest = &rest[n_digits..];
        let unit_len = rest.bytes().take_while(|b| !b.is_ascii_digit()).count();
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let Some(unit_idx) = UNITS.iter().position(|(u, _)| *u == unit) else {
            return Err(fail(EXPECTED));
        };
        if last_unit.is_some_and(|last| unit_idx <= last) {
            return Err(fail(
                "units must go from largest to smallest, each at most once, as in 1h30m",
            ));
        }
        last_unit = Some(unit_idx);
        total_ms = value
            .checked_mul(UNITS[unit_idx].1)
            .and_then(|ms| total_ms.checked_add(ms))
            // Prometheus keeps durations in an i64 of nanoseconds (about 292 years).
            .filter(|&ms| ms <= i64::MAX as u64 / 1_000_000)
            .ok_or_else(|| fail("out of range"))?;
    }
    Ok(Duration::from_millis(total_ms))
}

/// Writes a duration as Prometheus does: `0s`, `1m30s`, `2h`, `1d`, `1w`; years and weeks only
/// when they divide it exactly. Precision below a millisecond is dropped.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(parca_config::format_duration(Duration::from_secs(90)), "1m30s");
/// assert_eq!(parca_config::format_duration(Duration::from_secs(8 * 86400)), "8d");
/// ```
pub fn format_duration(duration: Duration) -> String {
    let mut ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
    if ms == 0 {
        return "0s".to_owned();
    }
    let mut out = String::new();
    for (unit, unit_ms) in UNITS {
        // "90d" reads better than "12w6d".
        let exact_only = unit == "y" || unit == "w";
        if exact_only && ms % unit_ms != 0 {
            continue;
        }
        let n = ms / unit_ms;
        if n > 0 {
            out.push_str(&n.to_string());
            out.push_str(unit);
            ms -= n * unit_ms;
        }
    }
    out
}

/// Serde helper: a duration written as text, decoded with [`parse_duration`]. `positive`
/// refuses zero.
pub(crate) struct DurationVisitor {
    pub(crate) positive: bool,
}

impl Visitor<'_> for DurationVisitor {
    type Value = Duration;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a duration such as 10s or 1m")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
        let d = parse_duration(v).map_err(E::custom)?;
        if self.positive && d.is_zero() {
            return Err(E::custom(format!(
                "invalid duration {v:?}: must be greater than zero"
            )));
        }
        Ok(d)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Duration, E> {
        self.visit_str(&v.to_string())
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Duration, E> {
        self.visit_str(&v.to_string())
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Duration, E> {
        self.visit_str(&v.to_string())
    }
}

/// A duration that may be zero, for `#[serde(deserialize_with)]`.
#[cfg(test)]
pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    d.deserialize_str(DurationVisitor { positive: false })
}

/// A duration that must be greater than zero, as an optional field.
pub(crate) fn deserialize_positive_opt<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Duration>, D::Error> {
    struct Positive(Duration);
    impl<'de> serde::Deserialize<'de> for Positive {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_str(DurationVisitor { positive: true })
                .map(Positive)
        }
    }
    Ok(<Option<Positive> as serde::Deserialize>::deserialize(d)?.map(|p| p.0))
}

/// Serializes a duration with [`format_duration`].
pub(crate) fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format_duration(*d))
}

/// Serializes an optional duration with [`format_duration`].
pub(crate) fn serialize_opt<S: serde::Serializer>(
    d: &Option<Duration>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => serialize(d, s),
        None => s.serialize_none(),
    }
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
            assert_eq!(
                parse_duration(text).unwrap(),
                Duration::from_millis(ms),
                "{text}"
            );
        }
    }

    #[test]
    fn refuses_other_forms_with_a_reason() {
        let cases = [
            (
                "10x",
                r#"invalid duration "10x": expected a number and a unit such as 10s or 1m"#,
            ),
            (
                "10",
                r#"invalid duration "10": expected a number and a unit such as 10s or 1m"#,
            ),
            (
                "s",
                r#"invalid duration "s": expected a number and a unit such as 10s or 1m"#,
            ),
            (
                "1.5s",
                r#"invalid duration "1.5s": expected a number and a unit such as 10s or 1m"#,
            ),
            (
                "-1s",
                r#"invalid duration "-1s": expected a number and a unit such as 10s or 1m"#,
            ),
            (
                " 1s",
                r#"invalid duration " 1s": expected a number and a unit such as 10s or 1m"#,
            ),
            (
                "30m1h",
                r#"invalid duration "30m1h": units must go from largest to smallest, each at most once, as in 1h30m"#,
            ),
            (
                "1s1s",
                r#"invalid duration "1s1s": units must go from largest to smallest, each at most once, as in 1h30m"#,
            ),
            (
                "",
                r#"invalid duration "": empty duration; expected a number and a unit such as 10s or 1m"#,
            ),
            ("300y", r#"invalid duration "300y": out of range"#),
            (
                "99999999999999999999s",
                r#"invalid duration "99999999999999999999s": number out of range"#,
            ),
        ];
        for (text, message) in cases {
            assert_eq!(parse_duration(text).unwrap_err().to_string(), message);
        }
    }

    #[test]
    fn formats_as_prometheus() {
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
            assert_eq!(format_duration(Duration::from_millis(ms)), text);
            assert_eq!(
                parse_duration(text).unwrap(),
                Duration::from_millis(ms),
                "round trip of {text}"
            );
        }
    }

    #[test]
    fn decodes_from_yaml_text_and_numbers() {
        #[derive(serde::Deserialize)]
        struct T {
            #[serde(deserialize_with = "deserialize")]
            d: Duration,
        }
        let t: T = serde_yaml::from_str("d: 1m").unwrap();
        assert_eq!(t.d, Duration::from_secs(60));
        let err = serde_yaml::from_str::<T>("d: 10").err().unwrap();
        assert_eq!(
            err.to_string(),
            r#"d: invalid duration "10": expected a number and a unit such as 10s or 1m at line 1 column 4"#
        );
    }
}
