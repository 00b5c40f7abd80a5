//! Instant evaluation: a query to profiles, for the flame graph, `merge` and `diff`.

use parca_profile::{Merger, Profile, StackFilter, filter_stacks};
use parca_querylang::{Expr, ExprKind, Grouping};
use parca_tsdb::{Labels, Matcher, NAME_LABEL};
use rustc_hash::FxHashMap;

use crate::{Engine, Error, select};

/// When an instant query is evaluated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InstantQuery {
    /// The evaluation time, milliseconds since the epoch: ranges `[5m]` end here.
    pub time_ms: i64,
    /// A window for selectors without a range; without it, such a selector takes the latest
    /// profile of each series at `time_ms` (within the lookback).
    pub window: Option<(i64, i64)>,
}

impl InstantQuery {
    /// Evaluation at `time_ms`.
    pub fn at(time_ms: i64) -> InstantQuery {
        InstantQuery {
            time_ms,
            window: None,
        }
    }

    /// Evaluation over `[start_ms, end_ms]`.
    pub fn over(start_ms: i64, end_ms: i64) -> InstantQuery {
        InstantQuery {
            time_ms: end_ms,
            window: Some((start_ms, end_ms)),
        }
    }

    fn shifted(self, by_ms: i64) -> InstantQuery {
        InstantQuery {
            time_ms: self.time_ms.saturating_sub(by_ms),
            window: self
                .window
                .map(|(a, b)| (a.saturating_sub(by_ms), b.saturating_sub(by_ms))),
        }
    }
}

/// One profile of an instant result, with the labels of its group (empty when not grouped).
#[derive(Debug, Clone)]
pub struct ProfileGroup {
    /// The group's labels: those named in `by`, or all but those in `without`.
    pub labels: Labels,
    /// The merged profile.
    pub profile: Profile,
    /// How many stored profiles were merged into it.
    pub n_profiles: usize,
}

/// A profile set before merging: the selection, read only when it is merged (so a merge can
/// run inside the store without materializing each profile), with the filters still to apply.
struct ProfileSet {
    matchers: Vec<Matcher>,
    /// Matchers on span attributes: only the selected spans' samples count.
    spans: Vec<Matcher>,
    window: (i64, i64),
    /// Only the latest profile of each series (a selector without a range).
    latest_only: bool,
    filters: Vec<StackFilter>,
}

enum Value {
    Set(ProfileSet),
    Groups(Vec<ProfileGroup>),
}

impl Engine {
    /// Evaluates `expr` to profiles: one, or one per group of `merge by`. A profile set is merged
    /// implicitly. Aggregations (`sum`, `topk`, …) give series, not profiles: use
    /// [`Engine::range`] for them.
    pub fn instant(&self, expr: &Expr, query: &InstantQuery) -> Result<Vec<ProfileGroup>, Error> {
        match self.eval(expr, query)? {
            Value::Groups(groups) => Ok(groups),
            set => self.merge_groups(set, None),
        }
    }

    #[expect(
        clippy::too_many_lines,
        reason = "one match over the expression kinds an instant query evaluates, each arm short"
    )]
    fn eval(&self, expr: &Expr, query: &InstantQuery) -> Result<Value, Error> {
        self.check_deadline()?;
        match &expr.kind {
            ExprKind::Selector(selector) => {
                let (matchers, spans) = select::split_spans(select::matchers(selector)?);
                let (window, latest_only) = match (selector.range, query.window) {
                    (Some(range), _) => (
                        (query.time_ms.saturating_sub(range.as_millis() as i64) + 1, query.time_ms),
                        false,
                    ),
                    (None, Some(window)) => (window, false),
                    (None, None) => (
                        (query.time_ms.saturating_sub(self.limits.lookback_ms), query.time_ms),
                        true,
                    ),
                };
                select::check(self, selector, &matchers, window, &self.limits)?;
                // A set is merged (from summaries where they cover whole windows), or only
                // its latest profiles are read.
                let summaries = if latest_only { 0 } else { i64::MAX };
                let querier = self.summarized_querier(window.0, window.1, &[], summaries);
                let n_samples = querier.n_samples(&matchers)?;
                if n_samples > self.limits.max_samples {
                    return Err(Error::TooManySamples {
                        n_samples,
                        limit: self.limits.max_samples,
                    });
                }
                Ok(Value::Set(ProfileSet {
                    matchers,
                    spans,
                    window,
                    latest_only,
                    filters: Vec::new(),
                }))
            }
            ExprKind::Offset { expr, offset } => {
                self.eval(expr, &query.shifted(offset.as_millis() as i64))
            }
            ExprKind::Paren(inner) => self.eval(inner, query),
            ExprKind::StackFilter { expr, filter } => {
                let filter = select::stack_filter(filter)?;
                match self.eval(expr, query)? {
                    Value::Set(mut set) => {
                        set.filters.push(filter);
                        Ok(Value::Set(set))
                    }
                    Value::Groups(groups) => Ok(Value::Groups(
                        groups
                            .into_iter()
                            .map(|g| ProfileGroup {
                                profile: filter_stacks(&g.profile, std::slice::from_ref(&filter)),
                                ..g
                            })
                            .collect(),
                    )),
                }
            }
            ExprKind::Merge { grouping, expr } => {
                let value = self.eval(expr, query)?;
                Ok(Value::Groups(self.merge_groups(value, grouping.as_ref())?))
            }
            ExprKind::Diff { base, comparison } => {
                let base = self.single(self.eval(base, query)?, "the first argument of diff")?;
                let comparison =
                    self.single(self.eval(comparison, query)?, "the second argument of diff")?;
                let profile = parca_profile::diff(&base.profile, &comparison.profile)
                    .map_err(|source| profile_error("cannot compare the two sides of diff", source))?;
                Ok(Value::Groups(vec![ProfileGroup {
                    labels: Labels::default(),
                    profile,
                    n_profiles: base.n_profiles + comparison.n_profiles,
                }]))
            }
            ExprKind::Aggregate { op, .. } => Err(Error::WrongKind(format!(
                "`{}` gives a series set (numbers over time), not a profile: ask /api/v1/query_range for it, or use merge(…) to get a profile",
                op.as_str()
            ))),
            ExprKind::TopK { .. } => Err(Error::WrongKind(
                "`topk` gives a series set (numbers over time), not a profile: ask /api/v1/query_range for it".into(),
            )),
            ExprKind::Binary { op, .. } => Err(Error::WrongKind(format!(
                "`{}` gives series (numbers over time), not a profile: ask /api/v1/query_range for them, or /api/v1/query for their values at one time",
                op.as_str()
            ))),
            ExprKind::Number(_) => Err(Error::WrongKind(
                "a number is not a profile: give a selector, merge(…) or diff(…)".into(),
            )),
        }
    }

    /// The one profile of a value, merging a profile set.
    fn single(&self, value: Value, what: &str) -> Result<ProfileGroup, Error> {
        let mut groups = match value {
            Value::Groups(groups) => groups,
            set => self.merge_groups(set, None)?,
        };
        if groups.is_empty() {
            return Err(Error::NoProfiles(format!(
                "{what} has no profiles in its time range: widen its range or check its selector"
            )));
        }
        if groups.len() != 1 {
            return Err(Error::WrongKind(format!(
                "{what} gives {} profiles (one per group of `merge by`); diff compares one profile with one: drop `by`",
                groups.len()
            )));
        }
        Ok(groups.pop().expect("one group"))
    }

    /// Merges a value into groups (`None`: one group of everything).
    fn merge_groups(
        &self,
        value: Value,
        grouping: Option<&Grouping>,
    ) -> Result<Vec<ProfileGroup>, Error> {
        let mut groups: FxHashMap<Labels, (Merger, usize, Vec<String>)> = FxHashMap::default();
        let mut order: Vec<Labels> = Vec::new();
        let mut add = |labels: &Labels, profile: &Profile, n: usize| -> Result<(), Error> {
            let key = group_labels(labels, grouping);
            let entry = groups.entry(key.clone()).or_insert_with(|| {
                order.push(key);
                (Merger::new(), 0, Vec::new())
            });
            let name = labels.get(NAME_LABEL).unwrap_or("").to_owned();
            if !entry.2.contains(&name) {
                entry.2.push(name);
            }
            entry.0.add(profile).map_err(|source| {
                if entry.2.len() > 1 {
                    different_types(&entry.2)
                } else {
                    profile_error("cannot merge", source)
                }
            })?;
            entry.1 += n;
            Ok(())
        };
        let filters = match value {
            Value::Set(set) if !set.latest_only => {
                return self.merge_in_store(set, grouping);
            }
            Value::Set(set) => {
                let querier = self.span_querier(set.window.0, set.window.1, &set.spans);
                for series in querier.select(&set.matchers)? {
                    self.check_deadline()?;
                    if let Some((_, latest)) = series.profiles.last() {
                        add(&series.labels, latest, 1)?;
                    }
                }
                set.filters
            }
            Value::Groups(groups) => {
                for g in &groups {
                    add(&g.labels, &g.profile, g.n_profiles)?;
                }
                Vec::new()
            }
        };
        let mut out = Vec::with_capacity(order.len());
        for labels in order {
            let (merger, n_profiles, _) = groups.remove(&labels).expect("grouped");
            if let Some(mut profile) = merger.finish() {
                if !filters.is_empty() {
                    profile = filter_stacks(&profile, &filters);
                }
                out.push(ProfileGroup {
                    labels,
                    profile,
                    n_profiles,
                });
            }
        }
        out.sort_by(|a, b| a.labels.cmp(&b.labels));
        Ok(out)
    }

    /// Merges a profile set per group inside the store: values are summed per stored stack,
    /// and no profile is materialized on its own.
    fn merge_in_store(
        &self,
        set: ProfileSet,
        grouping: Option<&Grouping>,
    ) -> Result<Vec<ProfileGroup>, Error> {
        let querier = self.summarized_querier(set.window.0, set.window.1, &set.spans, i64::MAX);
        let merged = querier
            .merge_grouped(&set.matchers, |labels| group_labels(labels, grouping))
            .map_err(|e| match e {
                parca_tsdb::Error::IncompatibleProfiles { left, right } => {
                    let series = match querier.series(&set.matchers) {
                        Ok(series) => series,
                        Err(e) => return Error::Store(e),
                    };
                    let mut names: Vec<String> = series
                        .iter()
                        .map(|l| l.get(NAME_LABEL).unwrap_or("").to_owned())
                        .collect();
                    names.dedup();
                    if names.len() > 1 {
                        different_types(&names)
                    } else {
                        profile_error(
                            "cannot merge",
                            parca_profile::Error::IncompatibleTypes { left, right },
                        )
                    }
                }
                other => Error::Store(other),
            })?;
        let mut out: Vec<ProfileGroup> = merged
            .into_iter()
            .map(|g| ProfileGroup {
                labels: g.key,
                profile: if set.filters.is_empty() {
                    g.profile
                } else {
                    filter_stacks(&g.profile, &set.filters)
                },
                n_profiles: g.n_profiles,
            })
            .collect();
        out.sort_by(|a, b| a.labels.cmp(&b.labels));
        Ok(out)
    }
}

/// The labels a series contributes to its group.
pub(crate) fn group_labels(labels: &Labels, grouping: Option<&Grouping>) -> Labels {
    let Some(grouping) = grouping else {
        return Labels::default();
    };
    let kept = labels.iter().filter(|l| {
        let named = grouping.labels.contains(&l.name);
        if grouping.without {
            !named && l.name != NAME_LABEL
        } else {
            named
        }
    });
    Labels::new(kept.map(|l| (l.name.clone(), l.value.clone())))
        .expect("a subset of valid labels is valid")
}

fn different_types(names: &[String]) -> Error {
    Error::WrongKind(format!(
        "the query selects profiles of different types ({}), which cannot be merged: choose one with __name__=\"…\" or a profile type before the braces",
        names.join(", ")
    ))
}

fn profile_error(what: &str, source: parca_profile::Error) -> Error {
    Error::Profile {
        what: what.into(),
        source,
    }
}
