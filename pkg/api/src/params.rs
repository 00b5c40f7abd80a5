//! Request parameters: the query string and a form body merged, and Prometheus' rules for times
//! and durations.

use std::collections::HashMap;

use crate::ApiError;

/// The parameters of a request, from its query string and (for POST) its form body. A name may
/// repeat (`match[]`).
#[derive(Debug, Default, Clone)]
pub struct Params {
    values: HashMap<String, Vec<String>>,
}

impl Params {
    /// Parses `a=1&b=2` (URL-encoded) and adds the pairs.
    pub fn add_encoded(&mut self, encoded: &[u8]) {
        for (k, v) in form_urlencoded::parse(encoded) {
            self.values
                .entry(k.into_owned())
                .or_default()
                .push(v.into_owned());
        }
    }

    /// The first value of `name`, if given and non-empty.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.values
            .get(name)
            .and_then(|v| v.first())
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// Every value of `name`.
    pub fn all(&self, name: &str) -> &[String] {
        self.values.get(name).map_or(&[], Vec::as_slice)
    }

    /// Every (name, first value) pair.
    pub fn pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.values
            .iter()
            .filter_map(|(k, v)| Some((k.as_str(), v.first()?.as_str())))
    }

    /// The value of `name`, which must be given.
    pub fn required(&self, name: &str) -> Result<&str, ApiError> {
        self.get(name)
            .ok_or_else(|| ApiError::bad_data(format!("parameter `{name}` is required")))
    }

    /// Time parameter `name` in milliseconds since the epoch, if given.
    pub fn time_ms(&self, name: &str) -> Result<Option<i64>, ApiError> {
        self.get(name)
            .map(|v| {
                parse_time_ms(v)
                    .map_err(|why| ApiError::bad_data(format!("invalid parameter `{name}`: {why}")))
            })
            .transpose()
    }

    /// Duration parameter `name` in milliseconds, if given.
    pub fn duration_ms(&self, name: &str) -> Result<Option<i64>, ApiError> {
        self.get(name)
            .map(|v| {
                parse_duration_ms(v)
                    .map_err(|why| ApiError::bad_data(format!("invalid parameter `{name}`: {why}")))
            })
            .transpose()
    }
}

/// A time or duration parameter that cannot be read; the message says what is accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParamError {
    /// A number that is not finite (`inf`, `NaN`).
    #[error("`{0}` is not a finite time")]
    NotFinite(String),
    /// A time too far from the epoch for milliseconds in an `i64`.
    #[error("`{0}` is out of range")]
    OutOfRange(String),
    /// Neither Unix seconds nor RFC 3339.
    #[error(
        "cannot parse `{0}` as a time: use Unix seconds (1700000000.5) or RFC 3339 (2026-01-02T15:04:05Z)"
    )]
    NotATime(String),
    /// Seconds that are negative, not finite or absurdly many.
    #[error("`{0}` is not a valid duration")]
    InvalidSeconds(String),
    /// Neither seconds nor a PromQL duration.
    #[error("cannot parse `{value}` as a duration: {reason}; or give seconds, such as 30 or 0.5")]
    NotADuration {
        /// The text given.
        value: String,
        /// Why it is not a PromQL duration.
        reason: String,
    },
    /// A duration longer than `i64` milliseconds hold.
    #[error("`{0}` is too long a duration")]
    TooLong(String),
}

/// A time as Prometheus takes it: Unix seconds (possibly fractional) or RFC 3339.
pub fn parse_time_ms(value: &str) -> Result<i64, ParamError> {
    if let Ok(seconds) = value.parse::<f64>() {
        if !seconds.is_finite() {
            return Err(ParamError::NotFinite(value.to_owned()));
        }
        let ms = (seconds * 1000.0).round();
        if ms.abs() > 9.2e15 {
            return Err(ParamError::OutOfRange(value.to_owned()));
        }
        return Ok(ms as i64);
    }
    value
        .parse::<jiff::Timestamp>()
        .map(|t| t.as_millisecond())
        .map_err(|_| ParamError::NotATime(value.to_owned()))
}

/// A duration as Prometheus takes it: seconds (possibly fractional) or a PromQL duration such
/// as `5m`, `1h30m` or `500ms`.
pub fn parse_duration_ms(value: &str) -> Result<i64, ParamError> {
    if let Ok(seconds) = value.parse::<f64>() {
        if !seconds.is_finite() || !(0.0..=9.2e12).contains(&seconds) {
            return Err(ParamError::InvalidSeconds(value.to_owned()));
        }
        return Ok((seconds * 1000.0).round() as i64);
    }
    let d = parca_querylang::duration::parse(value).map_err(|e| ParamError::NotADuration {
        value: value.to_owned(),
        reason: e.to_string(),
    })?;
    i64::try_from(d.as_millis()).map_err(|_| ParamError::TooLong(value.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_as_prometheus_takes_them() {
        assert_eq!(parse_time_ms("1700000000"), Ok(1_700_000_000_000));
        assert_eq!(parse_time_ms("1700000000.25"), Ok(1_700_000_000_250));
        assert_eq!(parse_time_ms("2023-11-14T22:13:20Z"), Ok(1_700_000_000_000));
        assert_eq!(
            parse_time_ms("2023-11-14T23:13:20+01:00"),
            Ok(1_700_000_000_000)
        );
        assert!(
            parse_time_ms("yesterday")
                .unwrap_err()
                .to_string()
                .contains("RFC 3339")
        );
    }

    #[test]
    fn durations_as_prometheus_takes_them() {
        assert_eq!(parse_duration_ms("30"), Ok(30_000));
        assert_eq!(parse_duration_ms("1.5"), Ok(1_500));
        assert_eq!(parse_duration_ms("5m"), Ok(300_000));
        assert_eq!(parse_duration_ms("1h30m"), Ok(5_400_000));
        assert_eq!(parse_duration_ms("500ms"), Ok(500));
        assert_eq!(parse_duration_ms("2d"), Ok(172_800_000));
        assert!(parse_duration_ms("5x").is_err());
        assert!(parse_duration_ms("30m1h").is_err());
        assert!(parse_duration_ms("-5m").is_err());
        assert!(parse_duration_ms("").is_err());
    }
}
