//! Prometheus durations in parca.yaml: `500ms`, `30s`, `1m30s`, `2h`, `1d`, `1w`, `1y`, read and
//! written by [`parca_vocab::duration`], and their serde helpers.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};

use crate::Error;

/// Parses a duration the way Prometheus does: one or more `<integer><unit>` pairs, units from
/// largest to smallest, each at most once (`1h30m`, not `30m1h`), with units `y` (365 days),
/// `w`, `d`, `h`, `m`, `s` and `ms`. A bare `0` is allowed. The rule has one owner,
/// [`parca_vocab::duration`], which queries use too.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(parca_config::parse_duration("1m30s").unwrap(), Duration::from_secs(90));
/// assert_eq!(
///     parca_config::parse_duration("10x").unwrap_err().to_string(),
///     r#"invalid duration "10x": unknown duration unit `x`: use ms, s, m, h, d, w or y"#,
/// );
/// ```
pub fn parse_duration(text: &str) -> Result<Duration, Error> {
    parca_vocab::duration::parse(text).map_err(|e| Error::Duration {
        input: text.to_owned(),
        reason: e.message,
    })
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
    parca_vocab::duration::format(duration)
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

/// A duration, greater than zero when `POSITIVE`; decoded by [`DurationVisitor`] so that an
/// error points at the value.
struct Checked<const POSITIVE: bool>(Duration);

impl<'de, const POSITIVE: bool> serde::Deserialize<'de> for Checked<POSITIVE> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(DurationVisitor { positive: POSITIVE })
            .map(Checked)
    }
}

/// A duration that must be greater than zero, as an optional field.
pub(crate) fn deserialize_positive_opt<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Duration>, D::Error> {
    Ok(<Option<Checked<true>> as serde::Deserialize>::deserialize(d)?.map(|c| c.0))
}

/// A duration that may be zero, as an optional field (a rule's `for`).
pub(crate) fn deserialize_opt<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Duration>, D::Error> {
    Ok(<Option<Checked<false>> as serde::Deserialize>::deserialize(d)?.map(|c| c.0))
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
            r#"d: invalid duration "10": `10` needs a unit (ms, s, m, h, d, w or y), such as 10m at line 1 column 4"#
        );
    }
}
