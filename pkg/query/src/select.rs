//! From a selector to the store: matchers, limits, and profile types the store knows.

use parca_profile::StackFilter;
use parca_querylang::{Selector, StackFilterOp};
use parca_tsdb::{Labels, MatchOp, Matcher, NAME_LABEL};

use crate::{Error, Limits};

/// A profile type the store holds, the parts of its `__name__`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ProfileType {
    /// The profile name, e.g. `process_cpu`.
    pub name: String,
    /// e.g. `samples`.
    pub sample_type: String,
    /// e.g. `count`.
    pub sample_unit: String,
    /// e.g. `cpu`.
    pub period_type: String,
    /// e.g. `nanoseconds`.
    pub period_unit: String,
    /// Whether each profile covers a window (`…:delta`).
    pub delta: bool,
}

impl ProfileType {
    /// Parses a `__name__` value (the query language's rule,
    /// [`parca_querylang::ProfileTypeName::parse`]); `None` when it is not a profile type.
    pub fn parse(full: &str) -> Option<ProfileType> {
        let t = parca_querylang::ProfileTypeName::parse(full).ok()?;
        Some(ProfileType {
            name: t.name().into(),
            sample_type: t.sample_type().into(),
            sample_unit: t.sample_unit().into(),
            period_type: t.period_type().into(),
            period_unit: t.period_unit().into(),
            delta: t.is_delta(),
        })
    }
}

/// The profile types of series with profiles in `[start_ms, end_ms]`, sorted.
pub fn profile_types(
    engine: &crate::Engine,
    start_ms: i64,
    end_ms: i64,
) -> Result<Vec<ProfileType>, Error> {
    let mut types: Vec<ProfileType> = engine
        .querier(start_ms, end_ms)
        .label_values(NAME_LABEL, &[])?
        .iter()
        .filter_map(|name| ProfileType::parse(name))
        .collect();
    types.sort();
    Ok(types)
}

/// The store's matchers for a selector: its profile type as `__name__`, then its matchers.
pub fn selector_matchers(selector: &Selector) -> Result<Vec<Matcher>, Error> {
    matchers(selector)
}

pub(crate) fn matchers(selector: &Selector) -> Result<Vec<Matcher>, Error> {
    let mut out = Vec::with_capacity(selector.matchers.len() + 1);
    if let Some(name) = &selector.profile_type {
        out.push(Matcher::new(MatchOp::Equal, NAME_LABEL, name.as_str()).map_err(Error::Matcher)?);
    }
    for m in &selector.matchers {
        // The query language's operators are the store's (`parca_vocab::MatchOp`).
        out.push(Matcher::new(m.op, m.name.as_str(), m.value.as_str()).map_err(Error::Matcher)?);
    }
    Ok(out)
}

/// A selector's matchers split into the series' and the spans' (on names in
/// [`parca_tsdb::span_labels`], stored per sample): `(series, spans)`. A selector without span
/// matchers gives an empty second list, and its reads do no per-sample work for spans.
pub(crate) fn split_spans(matchers: Vec<Matcher>) -> (Vec<Matcher>, Vec<Matcher>) {
    let names = parca_tsdb::span_labels();
    matchers.into_iter().partition(|m| !names.contains(&m.name))
}

/// The profile model's filter for a query's stack filter.
pub(crate) fn stack_filter(filter: &parca_querylang::StackFilter) -> Result<StackFilter, Error> {
    let pattern = &filter.pattern;
    let profile_error = |source| Error::Profile {
        what: "stack filter".into(),
        source,
    };
    let test = match filter.op {
        StackFilterOp::Contains => StackFilter::contains(pattern),
        StackFilterOp::NotContains => StackFilter::not_contains(pattern),
        StackFilterOp::Matches => StackFilter::matches(pattern).map_err(profile_error)?,
        StackFilterOp::NotMatches => StackFilter::not_matches(pattern).map_err(profile_error)?,
    };
    Ok(if filter.leaf { test.at_leaf() } else { test })
}

/// Checks a selection as [`series`] does, without listing the shards' series (a round trip to
/// each) when no series limit is set and this store and its bucket match something already.
pub(crate) fn check(
    engine: &crate::Engine,
    selector: &Selector,
    matchers: &[Matcher],
    window: (i64, i64),
    limits: &Limits,
) -> Result<(), Error> {
    if limits.max_series == 0
        && !engine
            .db()
            .querier_without_shards(window.0, window.1)
            .series(matchers)?
            .is_empty()
    {
        return Ok(());
    }
    series(engine, selector, matchers, window, limits).map(|_| ())
}

/// The series a selector matches in a window, checked against the series limit (when set). When none
/// match and the selector names a type the store does not know at all, the error says so and
/// suggests the nearest known types.
pub(crate) fn series(
    engine: &crate::Engine,
    selector: &Selector,
    matchers: &[Matcher],
    window: (i64, i64),
    limits: &Limits,
) -> Result<Vec<Labels>, Error> {
    let found = engine.querier(window.0, window.1).series(matchers)?;
    if limits.max_series > 0 && found.len() > limits.max_series {
        return Err(Error::TooManySeries {
            n_series: found.len(),
            limit: limits.max_series,
        });
    }
    if found.is_empty()
        && let Some(name) = &selector.profile_type
    {
        let known = engine
            .querier(i64::MIN, i64::MAX)
            .label_values(NAME_LABEL, &[])?;
        if !known.iter().any(|k| k == name.as_str()) {
            return Err(Error::UnknownProfileType {
                name: name.as_str().to_owned(),
                nearest: nearest(name.as_str(), &known),
            });
        }
    }
    Ok(found)
}

/// Up to three of `known` nearest to `name`: those sharing its profile name first, then by edit
/// distance.
fn nearest(name: &str, known: &[String]) -> Vec<String> {
    let head = name.split(':').next().unwrap_or("");
    let mut scored: Vec<(usize, &String)> = known
        .iter()
        .map(|k| {
            let same_name = k.split(':').next() == Some(head);
            let distance = strsim::levenshtein(name, k);
            (if same_name { distance } else { distance + 1000 }, k)
        })
        .filter(|(score, k)| *score < 1000 || *score - 1000 <= k.len().max(name.len()) / 2)
        .collect();
    scored.sort();
    scored.into_iter().take(3).map(|(_, k)| k.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_prefers_the_same_profile_name() {
        let known = [
            "process_cpu:samples:count:cpu:nanoseconds:delta".to_owned(),
            "process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta".to_owned(),
            "memory:inuse_space:bytes:space:bytes".to_owned(),
        ];
        assert_eq!(
            nearest("process_cpu:samples:count:cpu:nanoseconds", &known),
            [
                "process_cpu:samples:count:cpu:nanoseconds:delta",
                "process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta"
            ]
        );
        assert_eq!(
            nearest("memory:inuse_spac:bytes:space:bytes", &known)[0],
            "memory:inuse_space:bytes:space:bytes"
        );
        assert!(nearest("goroutine:goroutine:count:goroutine:count", &known).is_empty());
    }

    #[test]
    fn parses_profile_types() {
        let t = ProfileType::parse("process_cpu:samples:count:cpu:nanoseconds:delta").unwrap();
        assert!(t.delta);
        assert_eq!(t.period_unit, "nanoseconds");
        assert!(ProfileType::parse("memory:inuse_space:bytes:space:bytes").is_some());
        assert!(ProfileType::parse("memory").is_none());
    }
}
