//! Binary operators over series per step, with PromQL's semantics: arithmetic and comparisons
//! between series sets and numbers, vector matching (`on`, `ignoring`, `group_left`,
//! `group_right`) and its errors.
//!
//! Each step is matched on its own, as Prometheus evaluates a range query step by step: a
//! series pairs with another at the steps where both have a value, and duplicate series within
//! a match group are an error at the first step where both have one. Labels are matched once
//! per series (a signature), not once per step.

use parca_querylang::{BinaryOp, GroupSide, VectorMatching};
use parca_tsdb::{Labels, NAME_LABEL};
use rustc_hash::FxHashMap;

use crate::Error;
use crate::series::{Point, RangeQuery, RangeSeries};

/// What one side of an operator evaluated to.
pub(crate) enum Side {
    /// A number at every step (one series without labels, a point per step).
    Scalar(RangeSeries),
    /// A series set.
    Vector(Vec<RangeSeries>),
}

/// An operator with its modifiers.
#[derive(Clone, Copy)]
pub(crate) struct Operator<'a> {
    pub(crate) op: BinaryOp,
    pub(crate) return_bool: bool,
    pub(crate) matching: Option<&'a VectorMatching>,
}

/// `lhs op rhs` at every step of `query`; one series without labels if both are numbers.
pub(crate) fn evaluate(
    operator: Operator<'_>,
    lhs: Side,
    rhs: Side,
    query: &RangeQuery,
) -> Result<Vec<RangeSeries>, Error> {
    match (lhs, rhs) {
        (Side::Scalar(l), Side::Scalar(r)) => {
            let values: FxHashMap<i64, f64> =
                r.points.iter().map(|p| (p.timestamp_ms, p.value)).collect();
            let points = l
                .points
                .iter()
                .filter_map(|p| {
                    let r = values.get(&p.timestamp_ms)?;
                    Some(Point {
                        timestamp_ms: p.timestamp_ms,
                        value: operator.op.apply(p.value, *r),
                        period_value: None,
                    })
                })
                .collect();
            Ok(vec![RangeSeries {
                labels: Labels::default(),
                points,
                unit: String::new(),
                period_unit: None,
            }])
        }
        (Side::Vector(v), Side::Scalar(s)) => with_scalar(operator, v, &s, false),
        (Side::Scalar(s), Side::Vector(v)) => with_scalar(operator, v, &s, true),
        (Side::Vector(l), Side::Vector(r)) => vectors(operator, l, r, query),
    }
}

/// The series of a result, each point added at most once per step and labels.
#[derive(Default)]
struct Output {
    index: FxHashMap<Labels, usize>,
    series: Vec<RangeSeries>,
}

impl Output {
    /// Adds `point` to the series of `labels`.
    fn push(&mut self, labels: Labels, point: Point, unit: &str, period_unit: Option<&str>) {
        let i = match self.index.get(&labels) {
            Some(&i) => i,
            None => {
                self.index.insert(labels.clone(), self.series.len());
                self.series.push(RangeSeries {
                    labels,
                    points: Vec::new(),
                    unit: unit.to_owned(),
                    period_unit: period_unit.map(str::to_owned),
                });
                self.series.len() - 1
            }
        };
        let series = &mut self.series[i];
        if series.period_unit.as_deref() != period_unit {
            series.period_unit = None;
        }
        series.points.push(Point {
            period_value: point.period_value.filter(|_| series.period_unit.is_some()),
            ..point
        });
    }

    /// The series, each in time order; two results with the same labels at one step are an
    /// error, as in Prometheus.
    fn finish(mut self) -> Result<Vec<RangeSeries>, Error> {
        for series in &mut self.series {
            series.points.sort_by_key(|p| p.timestamp_ms);
            if series
                .points
                .windows(2)
                .any(|w| w[0].timestamp_ms == w[1].timestamp_ms)
            {
                return Err(Error::Matching(format!(
                    "the result has two series with the labels {} at one time: the operation \
                     dropped the labels that told them apart (`__name__` for arithmetic, or \
                     those of `on`/`ignoring`); aggregate them first or keep a label that tells \
                     them apart",
                    series.labels
                )));
            }
        }
        Ok(self.series)
    }
}

/// The labels without `__name__`: arithmetic, and comparisons with `bool`, no longer give
/// the profile type's values.
fn drop_name(labels: &Labels) -> Labels {
    if labels.get(NAME_LABEL).is_none() {
        return labels.clone();
    }
    Labels::new(
        labels
            .iter()
            .filter(|l| l.name != NAME_LABEL)
            .map(|l| (l.name.clone(), l.value.clone())),
    )
    .expect("a subset of valid labels is valid")
}

/// Whether the result keeps the labels' `__name__`: only a comparison that filters does.
fn keeps_name(operator: Operator<'_>) -> bool {
    operator.op.is_comparison() && !operator.return_bool
}

/// The unit of an arithmetic result: that of the series for `+`, `-`, and for `*`, `/` by a
/// number; none (a ratio or a product of units) for `*`, `/` between series.
fn arithmetic_unit(op: BinaryOp, lhs: &str, rhs: Option<&str>) -> String {
    match (op, rhs) {
        (BinaryOp::Add | BinaryOp::Sub, Some(rhs)) if rhs == lhs => lhs.to_owned(),
        (BinaryOp::Add | BinaryOp::Sub, Some(_)) => String::new(),
        (_, None) => lhs.to_owned(),
        _ => String::new(),
    }
}

/// A series set with a number at every step. For a comparison the series' value is kept,
/// whichever side it is on (Prometheus' rule).
fn with_scalar(
    operator: Operator<'_>,
    series: Vec<RangeSeries>,
    scalar: &RangeSeries,
    scalar_on_left: bool,
) -> Result<Vec<RangeSeries>, Error> {
    let values: FxHashMap<i64, f64> = scalar
        .points
        .iter()
        .map(|p| (p.timestamp_ms, p.value))
        .collect();
    let mut out = Output::default();
    for s in series {
        let labels = if keeps_name(operator) {
            s.labels.clone()
        } else {
            drop_name(&s.labels)
        };
        let (unit, period_unit) = if operator.op.is_comparison() {
            if operator.return_bool {
                (String::new(), None)
            } else {
                (s.unit.clone(), s.period_unit.as_deref())
            }
        } else if scalar_on_left && operator.op == BinaryOp::Div {
            // A number divided by a series: the unit inverted, which has no name here.
            (String::new(), None)
        } else {
            // Scaled by a number, a series keeps its unit, but not the period's (`x / 1e9`
            // no longer counts nanoseconds of CPU).
            (arithmetic_unit(operator.op, &s.unit, None), None)
        };
        for p in &s.points {
            let Some(&x) = values.get(&p.timestamp_ms) else {
                continue;
            };
            let (l, r) = if scalar_on_left {
                (x, p.value)
            } else {
                (p.value, x)
            };
            let computed = operator.op.apply(l, r);
            let point = if !operator.op.is_comparison() || operator.return_bool {
                Point {
                    value: computed,
                    period_value: None,
                    ..*p
                }
            } else if computed == 1.0 {
                *p
            } else {
                continue;
            };
            out.push(labels.clone(), point, &unit, period_unit);
        }
    }
    out.finish()
}

/// The labels a series is matched by: those of `on`, or all but those of `ignoring` and
/// `__name__` (no modifier: all but `__name__`).
fn signature(labels: &Labels, matching: Option<&VectorMatching>) -> Labels {
    let kept = labels.iter().filter(|l| match matching {
        Some(m) if m.on => m.labels.contains(&l.name),
        Some(m) => l.name != NAME_LABEL && !m.labels.contains(&l.name),
        None => l.name != NAME_LABEL,
    });
    Labels::new(kept.map(|l| (l.name.clone(), l.value.clone())))
        .expect("a subset of valid labels is valid")
}

/// The labels of a result from a series of the "many" side (`many`, the left side for one to
/// one) and its match on the "one" side, as Prometheus' `resultMetric`.
fn result_labels(many: &Labels, one: &Labels, operator: Operator<'_>, one_to_one: bool) -> Labels {
    let mut labels: Vec<(String, String)> = many
        .iter()
        .filter(|l| keeps_name(operator) || l.name != NAME_LABEL)
        .map(|l| (l.name.clone(), l.value.clone()))
        .collect();
    if let Some(m) = operator.matching {
        if one_to_one {
            labels.retain(|(name, _)| m.on == m.labels.contains(name));
        }
        if let Some(group) = &m.group {
            for name in &group.labels {
                labels.retain(|(n, _)| n != name);
                if let Some(value) = one.get(name).filter(|v| !v.is_empty()) {
                    labels.push((name.clone(), value.to_owned()));
                }
            }
        }
    }
    Labels::new(labels).expect("labels of stored series are valid")
}

/// Two series sets, matched per step.
#[expect(
    clippy::too_many_lines,
    reason = "PromQL's vector matching (one-to-one, group_left, group_right) as Prometheus writes it, in one place"
)]
fn vectors(
    operator: Operator<'_>,
    lhs: Vec<RangeSeries>,
    rhs: Vec<RangeSeries>,
    query: &RangeQuery,
) -> Result<Vec<RangeSeries>, Error> {
    let matching = operator.matching;
    let group = matching.and_then(|m| m.group.as_ref());
    let one_to_one = group.is_none();
    // The "many" side first (the left unless `group_right`), as Prometheus swaps them.
    let swapped = group.is_some_and(|g| g.side == GroupSide::Right);
    let (many, one) = if swapped { (rhs, lhs) } else { (lhs, rhs) };
    let one_side = if swapped { "left" } else { "right" };
    let many_signatures: Vec<Labels> = many
        .iter()
        .map(|s| signature(&s.labels, matching))
        .collect();
    let mut one_by_signature: FxHashMap<Labels, Vec<usize>> = FxHashMap::default();
    for (i, s) in one.iter().enumerate() {
        one_by_signature
            .entry(signature(&s.labels, matching))
            .or_default()
            .push(i);
    }
    let mut many_cursors = vec![0usize; many.len()];
    let mut one_cursors = vec![0usize; one.len()];
    let mut out = Output::default();
    // Result labels per (many, one) pair, computed once.
    let mut labels_of: FxHashMap<(usize, usize), Labels> = FxHashMap::default();
    let mut t = query.start_ms;
    while t <= query.end_ms {
        // The match of each signature on the "one" side at this step.
        let mut one_at: FxHashMap<&Labels, (usize, Point)> = FxHashMap::default();
        for (sig, members) in &one_by_signature {
            for &i in members {
                let Some(p) = point_at(&one[i].points, &mut one_cursors[i], t) else {
                    continue;
                };
                if let Some((j, _)) = one_at.insert(sig, (i, p)) {
                    return Err(Error::Matching(format!(
                        "found duplicate series for the match group {sig} on the {one_side} \
                         hand-side of the operation: [{}, {}]; many-to-many matching not \
                         allowed: matching labels must be unique on one side",
                        one[j].labels, one[i].labels
                    )));
                }
            }
        }
        // For one to one: the signatures matched so far; for many to one: the result labels
        // per signature.
        let mut matched: FxHashMap<&Labels, Vec<Labels>> = FxHashMap::default();
        for (i, s) in many.iter().enumerate() {
            let Some(p) = point_at(&s.points, &mut many_cursors[i], t) else {
                continue;
            };
            let sig = &many_signatures[i];
            let Some(&(j, q)) = one_at.get(sig) else {
                continue;
            };
            // The operands in the query's order.
            let (l, r) = if swapped { (q, p) } else { (p, q) };
            let computed = operator.op.apply(l.value, r.value);
            let (point, unit, period_unit) = if !operator.op.is_comparison() {
                let unit = arithmetic_unit(
                    operator.op,
                    &unit_of(&many, &one, swapped, true, i, j).0,
                    Some(&unit_of(&many, &one, swapped, false, i, j).0),
                );
                let point = Point {
                    timestamp_ms: t,
                    value: computed,
                    period_value: None,
                };
                (point, unit, None)
            } else if operator.return_bool {
                let point = Point {
                    timestamp_ms: t,
                    value: computed,
                    period_value: None,
                };
                (point, String::new(), None)
            } else if computed == 1.0 {
                // The left operand's value, as Prometheus keeps it.
                let (unit, period_unit) = unit_of(&many, &one, swapped, true, i, j);
                (l, unit, period_unit)
            } else {
                continue;
            };
            let labels = labels_of
                .entry((i, j))
                .or_insert_with(|| result_labels(&s.labels, &one[j].labels, operator, one_to_one))
                .clone();
            let seen = matched.entry(sig).or_default();
            if one_to_one {
                if !seen.is_empty() {
                    return Err(Error::Matching(format!(
                        "multiple matches for labels {sig}: many-to-one matching must be \
                         explicit (group_left/group_right)"
                    )));
                }
            } else if seen.contains(&labels) {
                return Err(Error::Matching(format!(
                    "multiple matches for matching labels {sig}: grouping labels must ensure \
                     unique matches"
                )));
            }
            seen.push(labels.clone());
            out.push(
                labels,
                Point {
                    timestamp_ms: t,
                    ..point
                },
                &unit,
                period_unit.as_deref(),
            );
        }
        t += query.step_ms;
    }
    out.finish()
}

/// The unit and period unit of the left (`left`) or right operand of the pair of `many[i]` and
/// `one[j]`.
fn unit_of(
    many: &[RangeSeries],
    one: &[RangeSeries],
    swapped: bool,
    left: bool,
    i: usize,
    j: usize,
) -> (String, Option<String>) {
    let s = if left != swapped { &many[i] } else { &one[j] };
    (s.unit.clone(), s.period_unit.clone())
}

/// The point of `points` at step `t`, moving `cursor` forward (steps are visited in order).
fn point_at(points: &[Point], cursor: &mut usize, t: i64) -> Option<Point> {
    while points.get(*cursor).is_some_and(|p| p.timestamp_ms < t) {
        *cursor += 1;
    }
    points.get(*cursor).filter(|p| p.timestamp_ms == t).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    const STEPS: RangeQuery = RangeQuery {
        start_ms: 0,
        end_ms: 20,
        step_ms: 10,
    };

    /// A series with these labels and a value per step (`None`: no value there).
    fn series(labels: &[(&str, &str)], values: &[Option<f64>]) -> RangeSeries {
        RangeSeries {
            labels: Labels::new(labels.iter().copied()).expect("labels"),
            points: values
                .iter()
                .enumerate()
                .filter_map(|(i, v)| {
                    Some(Point {
                        timestamp_ms: i as i64 * 10,
                        value: (*v)?,
                        period_value: None,
                    })
                })
                .collect(),
            unit: "nanoseconds".into(),
            period_unit: None,
        }
    }

    fn scalar(value: f64) -> Side {
        Side::Scalar(series(&[], &[Some(value); 3]))
    }

    /// `query`'s operator between two sides, as text: one line per series.
    fn eval(query: &str, lhs: Side, rhs: Side) -> Result<String, Error> {
        let expr = parca_querylang::parse(query).expect("valid");
        let parca_querylang::ExprKind::Binary {
            op,
            return_bool,
            matching,
            ..
        } = &expr.kind
        else {
            panic!("{query} is not binary")
        };
        let operator = Operator {
            op: *op,
            return_bool: *return_bool,
            matching: matching.as_ref(),
        };
        let mut out = evaluate(operator, lhs, rhs, &STEPS)?;
        out.sort_by(|a, b| a.labels.cmp(&b.labels));
        Ok(out
            .iter()
            .map(|s| {
                let values: Vec<String> = s
                    .points
                    .iter()
                    .map(|p| format!("{}@{}", p.value, p.timestamp_ms))
                    .collect();
                format!("{} {}", s.labels, values.join(" "))
            })
            .collect::<Vec<_>>()
            .join("\n"))
    }

    fn cpu(job: &str, values: &[Option<f64>]) -> RangeSeries {
        series(&[("__name__", "cpu:a:b:c:d"), ("job", job)], values)
    }

    fn filtered(job: &str, values: &[Option<f64>]) -> RangeSeries {
        series(&[("job", job)], values)
    }

    #[test]
    fn one_to_one_on_all_labels_but_the_name() {
        let lhs = Side::Vector(vec![
            filtered("api", &[Some(1.0), Some(2.0), None]),
            filtered("db", &[Some(5.0), Some(5.0), Some(5.0)]),
        ]);
        let rhs = Side::Vector(vec![
            cpu("api", &[Some(4.0), Some(0.0), Some(4.0)]),
            cpu("web", &[Some(1.0), Some(1.0), Some(1.0)]),
        ]);
        assert_eq!(
            eval("a:a:a:a:a / a:a:a:a:a", lhs, rhs).unwrap(),
            r#"{job="api"} 0.25@0 inf@10"#
        );
    }

    #[test]
    fn comparisons_filter_or_give_bools() {
        let set = || Side::Vector(vec![cpu("api", &[Some(1.0), Some(3.0), Some(5.0)])]);
        assert_eq!(
            eval("a:a:a:a:a > 2", set(), scalar(2.0)).unwrap(),
            r#"{__name__="cpu:a:b:c:d", job="api"} 3@10 5@20"#
        );
        // A number on the left: the series' value is kept all the same.
        assert_eq!(
            eval("2 < a:a:a:a:a", scalar(2.0), set()).unwrap(),
            r#"{__name__="cpu:a:b:c:d", job="api"} 3@10 5@20"#
        );
        assert_eq!(
            eval("a:a:a:a:a > bool 2", set(), scalar(2.0)).unwrap(),
            r#"{job="api"} 0@0 1@10 1@20"#
        );
        assert_eq!(
            eval("a:a:a:a:a * 2", set(), scalar(2.0)).unwrap(),
            r#"{job="api"} 2@0 6@10 10@20"#
        );
        assert_eq!(
            eval("1 - 2", scalar(1.0), scalar(2.0)).unwrap(),
            "{} -1@0 -1@10 -1@20"
        );
        // Between series, the left value is kept where the comparison holds.
        let other = Side::Vector(vec![cpu("api", &[Some(2.0), Some(2.0), Some(9.0)])]);
        assert_eq!(
            eval("a:a:a:a:a >= a:a:a:a:a", set(), other).unwrap(),
            r#"{__name__="cpu:a:b:c:d", job="api"} 3@10"#
        );
    }

    #[test]
    fn many_to_one_copies_the_group_labels() {
        let pods = Side::Vector(vec![
            series(&[("job", "api"), ("pod", "1")], &[Some(1.0); 3]),
            series(&[("job", "api"), ("pod", "2")], &[Some(3.0); 3]),
        ]);
        let jobs = || {
            Side::Vector(vec![series(
                &[("job", "api"), ("team", "core")],
                &[Some(4.0); 3],
            )])
        };
        assert_eq!(
            eval(
                "a:a:a:a:a / on (job) group_left (team) a:a:a:a:a",
                pods,
                jobs()
            )
            .unwrap(),
            "{job=\"api\", pod=\"1\", team=\"core\"} 0.25@0 0.25@10 0.25@20\n\
             {job=\"api\", pod=\"2\", team=\"core\"} 0.75@0 0.75@10 0.75@20"
        );
        let pods = Side::Vector(vec![
            series(&[("job", "api"), ("pod", "1")], &[Some(1.0); 3]),
            series(&[("job", "api"), ("pod", "2")], &[Some(3.0); 3]),
        ]);
        // The same from the other side: the values in the query's order.
        assert_eq!(
            eval("a:a:a:a:a - on (job) group_right a:a:a:a:a", jobs(), pods).unwrap(),
            "{job=\"api\", pod=\"1\"} 3@0 3@10 3@20\n{job=\"api\", pod=\"2\"} 1@0 1@10 1@20"
        );
    }

    #[test]
    fn matching_errors_are_prometheus_errors() {
        let pods = || {
            Side::Vector(vec![
                series(&[("job", "api"), ("pod", "1")], &[Some(1.0), None, None]),
                series(&[("job", "api"), ("pod", "2")], &[None, Some(3.0), None]),
            ])
        };
        let jobs = || Side::Vector(vec![series(&[("job", "api")], &[Some(4.0); 3])]);
        // Never two at one step: each step matches one to one.
        assert_eq!(
            eval("a:a:a:a:a / on (job) a:a:a:a:a", pods(), jobs()).unwrap(),
            r#"{job="api"} 0.25@0 0.75@10"#
        );
        let both = || {
            Side::Vector(vec![
                series(&[("job", "api"), ("pod", "1")], &[Some(1.0); 3]),
                series(&[("job", "api"), ("pod", "2")], &[Some(3.0); 3]),
            ])
        };
        assert_eq!(
            eval("a:a:a:a:a / on (job) a:a:a:a:a", both(), jobs())
                .unwrap_err()
                .to_string(),
            r#"multiple matches for labels {job="api"}: many-to-one matching must be explicit (group_left/group_right)"#
        );
        assert_eq!(
            eval("a:a:a:a:a / on (job) a:a:a:a:a", jobs(), both())
                .unwrap_err()
                .to_string(),
            r#"found duplicate series for the match group {job="api"} on the right hand-side of the operation: [{job="api", pod="1"}, {job="api", pod="2"}]; many-to-many matching not allowed: matching labels must be unique on one side"#
        );
        assert_eq!(
            eval("a:a:a:a:a * on (job) group_left a:a:a:a:a", both(), both())
                .unwrap_err()
                .to_string(),
            r#"found duplicate series for the match group {job="api"} on the right hand-side of the operation: [{job="api", pod="1"}, {job="api", pod="2"}]; many-to-many matching not allowed: matching labels must be unique on one side"#
        );
        // Two profile types of one job lose what told them apart.
        let types = Side::Vector(vec![
            series(&[("__name__", "a:a:a:a:a"), ("job", "x")], &[Some(1.0); 3]),
            series(&[("__name__", "b:b:b:b:b"), ("job", "x")], &[Some(1.0); 3]),
        ]);
        assert!(
            eval("a:a:a:a:a * 2", types, scalar(2.0))
                .unwrap_err()
                .to_string()
                .starts_with(r#"the result has two series with the labels {job="x"} at one time"#)
        );
    }
}
