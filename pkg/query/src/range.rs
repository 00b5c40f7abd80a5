//! Range evaluation: a query to series of numbers per step, for the metrics graph.

use std::sync::Arc;

use parca_profile::Meta;
use parca_profile::{StackFilter, StackFilters};
use parca_querylang::{AggregateOp, Expr, ExprKind, ValueType};
use parca_tsdb::{Labels, NAME_LABEL, TotalPoint};
use rustc_hash::FxHashMap;

use crate::binary::{self, Operator, Side};
use crate::instant::group_labels;
use crate::select::{self, ProfileType};
use crate::series::{Point, RangeQuery, RangeSeries};
use crate::{Engine, Error};

impl Engine {
    /// A selector naming a recorded series (a rule's query): at each step, the latest sample
    /// of each matching series the rules keep, when it was taken within the lookback delta
    /// before the step (so a rule reads what rules before it in its group recorded at the same
    /// evaluation, and another group's last evaluation).
    fn recorded_range(
        &self,
        selector: &parca_querylang::Selector,
        query: &RangeQuery,
        offset_ms: i64,
        filters: &[StackFilter],
    ) -> Result<Vec<RangeSeries>, Error> {
        let name = selector
            .profile_type
            .as_ref()
            .map(|n| n.as_str())
            .unwrap_or_default();
        let Some(source) = &self.recorded else {
            return Err(Error::WrongKind(format!(
                "`{name}` is not a profile type; only rules read recorded series by name"
            )));
        };
        if selector.range.is_some() {
            return Err(Error::WrongKind(format!(
                "`{name}` is a recorded series: the rules keep its latest sample only, so it \
                 takes no range"
            )));
        }
        if !filters.is_empty() {
            return Err(Error::WrongKind(format!(
                "`{name}` is a recorded series of numbers: it has no stacks to filter"
            )));
        }
        let matchers = select::matchers(selector)?;
        let lookback_ms = self.limits.lookback_ms;
        let mut out = Vec::new();
        for (labels, value, at_ms) in source.latest(name) {
            if !matchers.iter().all(|m| m.matches_labels(&labels)) {
                continue;
            }
            let points: Vec<Point> = (0..)
                .map(|k| query.start_ms + k * query.step_ms)
                .take_while(|&t| t <= query.end_ms)
                .filter(|&t| {
                    let read_at = t - offset_ms;
                    at_ms <= read_at && at_ms > read_at - lookback_ms
                })
                .map(|t| Point {
                    timestamp_ms: t,
                    value,
                    period_value: None,
                })
                .collect();
            if !points.is_empty() {
                out.push(RangeSeries {
                    labels,
                    points,
                    unit: String::new(),
                    period_unit: None,
                });
            }
        }
        Ok(out)
    }

    /// Evaluates a series-valued `expr` (an aggregation or `topk`) at one instant, as
    /// Prometheus' instant query does: each series' value is what [`Engine::range`] gives for a
    /// step ending at the query's time, the step being the query's window when it has one, else
    /// the lookback (5 minutes by default); a range `x[1h]` in the expression widens it as in a
    /// range query. Series without a value there are left out.
    pub fn instant_series(
        &self,
        expr: &Expr,
        query: &crate::InstantQuery,
    ) -> Result<Vec<RangeSeries>, Error> {
        let step_ms = match query.window {
            Some((start, end)) => (end - start).max(1),
            None => self.limits.lookback_ms.max(1),
        };
        let at = RangeQuery {
            start_ms: query.time_ms,
            end_ms: query.time_ms,
            step_ms,
        };
        let mut series = self.range(expr, &at)?;
        series.retain(|s| !s.points.is_empty());
        Ok(series)
    }

    /// Evaluates `expr` at every step of `query`. A profile set gives one series per matched
    /// series: at each step, the sum of the totals of profiles in the step (for `…:delta` types,
    /// whose profiles each cover a window) or the latest total (for snapshots such as memory in
    /// use). A range `x[5m]` widens the window each step looks back over. Aggregations combine
    /// the series per step.
    pub fn range(&self, expr: &Expr, query: &RangeQuery) -> Result<Vec<RangeSeries>, Error> {
        if query.step_ms <= 0 {
            return Err(Error::WrongKind("the step must be positive".into()));
        }
        if query.end_ms < query.start_ms {
            return Err(Error::WrongKind(
                "the end of the range is before its start".into(),
            ));
        }
        let n_steps = (query.end_ms - query.start_ms) / query.step_ms + 1;
        if n_steps > self.limits.max_steps {
            return Err(Error::TooManySteps {
                n_steps,
                limit: self.limits.max_steps,
            });
        }
        let mut series = self.eval_range(expr, query, 0, &mut Vec::new())?;
        series.sort_by(|a, b| a.labels.cmp(&b.labels));
        Ok(series)
    }

    #[expect(
        clippy::too_many_lines,
        reason = "one match over the expression kinds a range query evaluates, each arm short"
    )]
    fn eval_range(
        &self,
        expr: &Expr,
        query: &RangeQuery,
        offset_ms: i64,
        filters: &mut Vec<StackFilter>,
    ) -> Result<Vec<RangeSeries>, Error> {
        self.check_deadline()?;
        match &expr.kind {
            ExprKind::Selector(selector)
                if selector
                    .profile_type
                    .as_ref()
                    .is_some_and(|n| parca_querylang::is_recorded_series_name(n.as_str())) =>
            {
                self.recorded_range(selector, query, offset_ms, filters)
            }
            ExprKind::Selector(selector) => {
                let (matchers, spans) = select::split_spans(select::matchers(selector)?);
                let range_ms = selector.range.map(|r| r.as_millis() as i64);
                // Each step looks back over its range, or one step (for windows) or the
                // lookback (for snapshots).
                let widest = range_ms
                    .unwrap_or(0)
                    .max(query.step_ms)
                    .max(self.limits.lookback_ms);
                let window = (
                    query.start_ms.saturating_sub(offset_ms).saturating_sub(widest),
                    query.end_ms.saturating_sub(offset_ms),
                );
                let n_series = select::series(self, selector, &matchers, window, &self.limits)?.len();
                let n_steps = ((query.end_ms - query.start_ms) / query.step_ms + 1) as usize;
                let n_points = n_series.saturating_mul(n_steps);
                if n_points > self.limits.max_points {
                    return Err(Error::TooManyPoints {
                        n_points,
                        n_series,
                        n_steps,
                        limit: self.limits.max_points,
                    });
                }
                // Summaries keep a window's latest total, not its latest profile: a stack
                // filter of a snapshot type needs that profile, so filters read every profile.
                let summaries_ms = if filters.is_empty() {
                    summary_resolution(query, offset_ms, range_ms, self.limits.lookback_ms)
                } else {
                    0
                };
                let querier = self.summarized_querier(window.0, window.1, &spans, summaries_ms);
                // Stored totals count whole profiles: stack filters and span selections read
                // the samples.
                let totals: Vec<(Labels, Meta, Vec<TotalPoint>)> = if filters.is_empty()
                    && spans.is_empty()
                {
                    let read = || querier.totals(&matchers);
                    let totals = match &self.shared {
                        Some(shared) => {
                            shared.totals(&matchers, &spans, window, summaries_ms, read)?
                        }
                        None => Arc::new(read()?),
                    };
                    totals
                        .iter()
                        .map(|s| (s.labels.clone(), s.meta.clone(), s.points.clone()))
                        .collect()
                } else {
                    let n_samples = querier.n_samples(&matchers)?;
                    if n_samples > self.limits.max_samples {
                        return Err(Error::TooManySamples {
                            n_samples,
                            limit: self.limits.max_samples,
                        });
                    }
                    let read = || querier.select(&matchers);
                    let selected = match &self.shared {
                        Some(shared) => shared.selected(
                            &matchers,
                            &spans,
                            window,
                            summaries_ms,
                            (n_samples, self.limits.max_samples),
                            read,
                        )?,
                        None => Arc::new(read()?),
                    };
                    // The selected profiles share their tables: each filter tests each
                    // distinct stack once.
                    let filters: &[StackFilter] = filters;
                    let mut memo: Option<StackFilters<'_>> = None;
                    selected
                        .iter()
                        .map(|s| {
                            let meta = s
                                .profiles
                                .first()
                                .map(|(_, p)| p.meta.clone())
                                .unwrap_or_default();
                            let points = s
                                .profiles
                                .iter()
                                .map(|(t, p)| {
                                    let memo = match &mut memo {
                                        Some(m) if m.reads(&p.tables) => m,
                                        slot => slot.insert(StackFilters::new(&p.tables, filters)),
                                    };
                                    let total = memo.total(p);
                                    TotalPoint {
                                        timestamp_ms: *t,
                                        total,
                                        period: p.meta.period,
                                        duration_nanos: p.meta.duration_nanos,
                                        latest_total: total,
                                    }
                                })
                                .collect();
                            (s.labels.clone(), meta, points)
                        })
                        .collect()
                };
                Ok(totals
                    .into_iter()
                    .map(|(labels, meta, points)| {
                        step_series(labels, &meta, &points, query, offset_ms, range_ms, self.limits.lookback_ms)
                    })
                    .filter(|s| !s.points.is_empty())
                    .collect())
            }
            ExprKind::Offset { expr, offset } => {
                self.eval_range(expr, query, offset_ms + offset.as_millis() as i64, filters)
            }
            ExprKind::Paren(inner) => self.eval_range(inner, query, offset_ms, filters),
            ExprKind::StackFilter { expr, filter } => {
                filters.push(select::stack_filter(filter)?);
                let out = self.eval_range(expr, query, offset_ms, filters);
                filters.pop();
                out
            }
            ExprKind::Aggregate { op, grouping, expr } => {
                let inner = self.eval_range(expr, query, offset_ms, filters)?;
                Ok(aggregate(*op, inner, |labels| group_labels(labels, grouping.as_ref())))
            }
            ExprKind::TopK { k, expr } => {
                let inner = self.eval_range(expr, query, offset_ms, filters)?;
                Ok(topk(*k as usize, inner))
            }
            ExprKind::Number(n) => Ok(vec![scalar_series(n.0, query)]),
            ExprKind::Binary {
                op,
                lhs,
                rhs,
                return_bool,
                matching,
                ..
            } => {
                let mut side = |e: &Expr| -> Result<Side, Error> {
                    let series = self.eval_range(e, query, offset_ms, filters)?;
                    Ok(if e.value_type() == ValueType::Scalar {
                        Side::Scalar(series.into_iter().next().unwrap_or_else(|| scalar_series(f64::NAN, query)))
                    } else {
                        Side::Vector(series)
                    })
                };
                let lhs = side(lhs)?;
                let rhs = side(rhs)?;
                let operator = Operator {
                    op: *op,
                    return_bool: *return_bool,
                    matching: matching.as_ref(),
                };
                binary::evaluate(operator, lhs, rhs, query)
            }
            ExprKind::Merge { .. } | ExprKind::Diff { .. } => Err(Error::WrongKind(
                "`merge` and `diff` give a profile, not numbers over time: ask /api/v1/query for it, or graph the profile set itself (drop merge)".into(),
            )),
        }
    }
}

/// The coarsest summaries ([`parca_tsdb::SUMMARY_RESOLUTIONS_MS`]) whose windows every step of
/// `query` holds whole: the steps, their first end (less the offset) and how far each looks
/// back (its range, or one step for profiles of windows and the lookback for snapshots) are
/// multiples of it, so each step sums whole windows and the graph is the same as from every
/// profile. 0 when none is.
fn summary_resolution(
    query: &RangeQuery,
    offset_ms: i64,
    range_ms: Option<i64>,
    lookback_ms: i64,
) -> i64 {
    let reaches = match range_ms {
        Some(range) => [range, range],
        None => [query.step_ms, lookback_ms.max(query.step_ms)],
    };
    parca_tsdb::SUMMARY_RESOLUTIONS_MS
        .iter()
        .rev()
        .copied()
        .find(|&r| {
            query.step_ms % r == 0
                && (query.start_ms - offset_ms).rem_euclid(r) == 0
                && reaches.iter().all(|reach| reach % r == 0)
        })
        .unwrap_or(0)
}

/// A number as a series without labels, with a point at every step.
fn scalar_series(value: f64, query: &RangeQuery) -> RangeSeries {
    let mut points = Vec::new();
    let mut t = query.start_ms;
    while t <= query.end_ms {
        points.push(Point {
            timestamp_ms: t,
            value,
            period_value: None,
        });
        t += query.step_ms;
    }
    RangeSeries {
        labels: Labels::default(),
        points,
        unit: String::new(),
        period_unit: None,
    }
}

/// One stored series as values per step.
fn step_series(
    labels: Labels,
    meta: &Meta,
    points: &[TotalPoint],
    query: &RangeQuery,
    offset_ms: i64,
    range_ms: Option<i64>,
    lookback_ms: i64,
) -> RangeSeries {
    let delta = labels
        .get(NAME_LABEL)
        .and_then(ProfileType::parse)
        .map_or_else(|| points.iter().any(|p| p.duration_nanos > 0), |t| t.delta);
    let cpu_counts = meta.sample_type.unit == "count" && meta.period_type.kind == "cpu";
    let mut out = Vec::new();
    let mut t = query.start_ms;
    while t <= query.end_ms {
        let at = t - offset_ms;
        let reach = match (range_ms, delta) {
            (Some(range), _) => range,
            (None, true) => query.step_ms,
            (None, false) => lookback_ms.max(query.step_ms),
        };
        let first = points.partition_point(|p| p.timestamp_ms <= at - reach);
        let last = points.partition_point(|p| p.timestamp_ms <= at);
        let inside = &points[first..last];
        if !inside.is_empty() {
            let (value, period_value) = if delta {
                inside.iter().fold((0f64, 0f64), |(v, pv), p| {
                    (v + p.total as f64, pv + p.total as f64 * p.period as f64)
                })
            } else {
                // The latest profile's total (a summary's point sums its window's profiles).
                let p = inside[inside.len() - 1];
                (
                    p.latest_total as f64,
                    p.latest_total as f64 * p.period as f64,
                )
            };
            out.push(Point {
                timestamp_ms: t,
                value,
                period_value: cpu_counts.then_some(period_value),
            });
        }
        t += query.step_ms;
    }
    RangeSeries {
        labels,
        points: out,
        unit: meta.sample_type.unit.clone(),
        period_unit: cpu_counts.then(|| meta.period_type.unit.clone()),
    }
}

/// Combines series per step within groups.
fn aggregate(
    op: AggregateOp,
    series: Vec<RangeSeries>,
    group_of: impl Fn(&Labels) -> Labels,
) -> Vec<RangeSeries> {
    struct Acc {
        unit: String,
        period_unit: Option<String>,
        // step → (sum, period sum, min, max, count)
        steps: std::collections::BTreeMap<i64, (f64, f64, f64, f64, usize)>,
        has_period: bool,
    }
    let mut groups: FxHashMap<Labels, Acc> = FxHashMap::default();
    for s in series {
        let acc = groups.entry(group_of(&s.labels)).or_insert_with(|| Acc {
            unit: s.unit.clone(),
            period_unit: s.period_unit.clone(),
            steps: Default::default(),
            has_period: true,
        });
        acc.has_period &= s.period_unit.is_some();
        for p in s.points {
            let e = acc.steps.entry(p.timestamp_ms).or_insert((
                0.0,
                0.0,
                f64::INFINITY,
                f64::NEG_INFINITY,
                0,
            ));
            e.0 += p.value;
            e.1 += p.period_value.unwrap_or(0.0);
            e.2 = e.2.min(p.value);
            e.3 = e.3.max(p.value);
            e.4 += 1;
        }
    }
    groups
        .into_iter()
        .map(|(labels, acc)| {
            let with_period = acc.has_period && matches!(op, AggregateOp::Sum | AggregateOp::Avg);
            RangeSeries {
                labels,
                points: acc
                    .steps
                    .into_iter()
                    .map(|(t, (sum, psum, min, max, n))| {
                        let (value, period_value) = match op {
                            AggregateOp::Sum => (sum, psum),
                            AggregateOp::Avg => (sum / n as f64, psum / n as f64),
                            AggregateOp::Min => (min, 0.0),
                            AggregateOp::Max => (max, 0.0),
                            AggregateOp::Count => (n as f64, 0.0),
                        };
                        Point {
                            timestamp_ms: t,
                            value,
                            period_value: with_period.then_some(period_value),
                        }
                    })
                    .collect(),
                unit: if op == AggregateOp::Count {
                    "count".into()
                } else {
                    acc.unit
                },
                period_unit: if with_period { acc.period_unit } else { None },
            }
        })
        .collect()
}

/// Keeps, at each step, the `k` series with the largest values there.
fn topk(k: usize, series: Vec<RangeSeries>) -> Vec<RangeSeries> {
    let mut by_step: std::collections::BTreeMap<i64, Vec<(f64, usize)>> = Default::default();
    for (i, s) in series.iter().enumerate() {
        for p in &s.points {
            by_step
                .entry(p.timestamp_ms)
                .or_default()
                .push((p.value, i));
        }
    }
    let mut keep: FxHashMap<(usize, i64), ()> = FxHashMap::default();
    for (t, mut values) in by_step {
        values.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        for &(_, i) in values.iter().take(k) {
            keep.insert((i, t), ());
        }
    }
    series
        .into_iter()
        .enumerate()
        .map(|(i, mut s)| {
            s.points.retain(|p| keep.contains_key(&(i, p.timestamp_ms)));
            s
        })
        .filter(|s| !s.points.is_empty())
        .collect()
}

/// What [`top_series`] left out: how many series, and their sum per step.
#[derive(Debug, Clone, PartialEq)]
pub struct Omitted {
    /// Series left out.
    pub n_series: usize,
    /// Their values summed per step (`period_value` summed too when every point has one).
    pub points: Vec<Point>,
}

/// The `n` series of `series` with the largest sum over their points, in their order, and the
/// rest summed per step: what a graph of a fleet's thousands of series can show readably.
/// Ties go to the series that sorts first.
pub fn top_series(series: Vec<RangeSeries>, n: usize) -> (Vec<RangeSeries>, Option<Omitted>) {
    if series.len() <= n {
        return (series, None);
    }
    let total = |s: &RangeSeries| s.points.iter().map(|p| p.value).sum::<f64>();
    let mut ranked: Vec<(usize, f64)> = series.iter().map(total).enumerate().collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut keep = vec![false; series.len()];
    for &(i, _) in ranked.iter().take(n) {
        keep[i] = true;
    }
    let mut rest: std::collections::BTreeMap<i64, (f64, Option<f64>)> = Default::default();
    let mut kept = Vec::with_capacity(n);
    let mut n_omitted = 0;
    for (s, keep) in series.into_iter().zip(keep) {
        if keep {
            kept.push(s);
            continue;
        }
        n_omitted += 1;
        for p in &s.points {
            let (value, period) = rest.entry(p.timestamp_ms).or_insert((0.0, Some(0.0)));
            *value += p.value;
            *period = match (*period, p.period_value) {
                (Some(a), Some(b)) => Some(a + b),
                _ => None,
            };
        }
    }
    let points = rest
        .into_iter()
        .map(|(timestamp_ms, (value, period_value))| Point {
            timestamp_ms,
            value,
            period_value,
        })
        .collect();
    (
        kept,
        Some(Omitted {
            n_series: n_omitted,
            points,
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const M5: i64 = 300_000;
    const H1: i64 = 3_600_000;

    fn query(start_ms: i64, step_ms: i64) -> RangeQuery {
        RangeQuery {
            start_ms,
            end_ms: start_ms + 100 * step_ms,
            step_ms,
        }
    }

    #[test]
    fn steps_read_the_coarsest_summaries_they_hold_whole() {
        // Hour steps on the hour: hours; with an hour's offset too.
        assert_eq!(summary_resolution(&query(48 * H1, H1), 0, None, M5), H1);
        assert_eq!(summary_resolution(&query(48 * H1, H1), H1, None, M5), H1);
        // Hour steps ending at 10:05: 5-minute windows; at 10:05:01, none.
        assert_eq!(
            summary_resolution(&query(48 * H1 + M5, H1), 0, None, M5),
            M5
        );
        assert_eq!(
            summary_resolution(&query(48 * H1 + M5 + 1, H1), 0, None, M5),
            0
        );
        // A range that is not a multiple: the next finer resolution, or none.
        assert_eq!(
            summary_resolution(&query(48 * H1, H1), 0, Some(2 * M5), M5),
            M5
        );
        assert_eq!(
            summary_resolution(&query(48 * H1, H1), 0, Some(90_000), M5),
            0
        );
        // Steps of a minute: none; a lookback that is not a multiple of the step: none.
        assert_eq!(summary_resolution(&query(48 * H1, 60_000), 0, None, M5), 0);
        assert_eq!(
            summary_resolution(&query(48 * H1, M5), 0, None, 7 * 60_000),
            0
        );
    }
}
