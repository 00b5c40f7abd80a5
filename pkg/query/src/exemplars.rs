//! Exemplars, as Prometheus' `query_exemplars` gives them: for each series a query's selectors
//! read, its largest spans in a window, each a point (time, value) with the span's ids as
//! labels, so that a graph can mark them and a click open that span's profile.

use parca_querylang::{Expr, ExprKind};
use parca_tsdb::{Labels, SpanTotal};

use crate::{Engine, Error, select};

/// The exemplars of one series.
#[derive(Debug, Clone)]
pub struct SeriesExemplars {
    /// The series.
    pub labels: Labels,
    /// Its largest spans in the window, time-ordered: each the span's part of one stored
    /// profile, in the series' sample unit.
    pub exemplars: Vec<SpanTotal>,
}

/// The number of exemplars per series of [`Engine::exemplars`] when the caller names none.
pub const DEFAULT_EXEMPLARS_PER_SERIES: usize = 100;
/// The largest `per_series` [`Engine::exemplars`] takes.
pub const MAX_EXEMPLARS_PER_SERIES: usize = 10_000;

impl Engine {
    /// For every selector of `expr` (a range or offset of its own is ignored, as Prometheus
    /// does), the `per_series` largest spans of each series it selects in `[start_ms, end_ms]`;
    /// span matchers in a selector (`{trace_id="…"}`) keep only those spans. Series come in
    /// label order, each once (the union of the selectors).
    pub fn exemplars(
        &self,
        expr: &Expr,
        start_ms: i64,
        end_ms: i64,
        per_series: usize,
    ) -> Result<Vec<SeriesExemplars>, Error> {
        let mut selectors = Vec::new();
        collect_selectors(expr, &mut selectors);
        let mut out: std::collections::BTreeMap<Labels, Vec<SpanTotal>> = Default::default();
        for selector in selectors {
            self.check_deadline()?;
            let (matchers, spans) = select::split_spans(select::matchers(selector)?);
            let querier = self.span_querier(start_ms, end_ms, &spans);
            // Nothing selected is no exemplar, not an error.
            if self.limits.max_series > 0 {
                let n_series = querier.series(&matchers)?.len();
                if n_series > self.limits.max_series {
                    return Err(Error::TooManySeries {
                        n_series,
                        limit: self.limits.max_series,
                    });
                }
            }
            let found = querier.largest_spans(&matchers, per_series)?;
            for s in found {
                // A series two selectors read is listed once, with the first one's spans.
                out.entry(s.labels).or_insert(s.spans);
            }
        }
        Ok(out
            .into_iter()
            .map(|(labels, exemplars)| SeriesExemplars { labels, exemplars })
            .collect())
    }
}

/// The selectors of `expr`, left to right.
fn collect_selectors<'e>(expr: &'e Expr, out: &mut Vec<&'e parca_querylang::Selector>) {
    // An explicit stack, so that a deep query cannot overflow ours.
    let mut stack = vec![expr];
    while let Some(e) = stack.pop() {
        match &e.kind {
            ExprKind::Selector(s) => out.push(s),
            ExprKind::Offset { expr, .. }
            | ExprKind::StackFilter { expr, .. }
            | ExprKind::Merge { expr, .. }
            | ExprKind::Aggregate { expr, .. }
            | ExprKind::TopK { expr, .. }
            | ExprKind::Paren(expr) => stack.push(expr),
            ExprKind::Diff { base, comparison } => {
                stack.push(comparison);
                stack.push(base);
            }
            ExprKind::Binary { lhs, rhs, .. } => {
                stack.push(rhs);
                stack.push(lhs);
            }
            ExprKind::Number(_) => {}
        }
    }
}
