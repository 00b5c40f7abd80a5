//! `GET/POST /api/v1/query_exemplars`: Prometheus' exemplar query over profiles. For each series
//! the query's selectors read, its largest spans in `[start, end]` (`parca_query::Engine::exemplars`):
//! `[{"seriesLabels": {…}, "exemplars": [{"labels": {"span_id": …, "trace_id": …}, "value": "…",
//! "timestamp": seconds}]}]`, the value in the series' sample unit.

use std::sync::Arc;

use hyper::Response;
use serde::Serialize;

use crate::Api;
use crate::call::Call;
use crate::handlers::query::{evaluate, labels_map, parse, prom_float, query_error, seconds};
use crate::response::{ApiError, Body, success};

/// `GET/POST /api/v1/query_exemplars?query=…&start=…&end=…[&limit=N]`: `limit` is exemplars per
/// series (default [`parca_query::DEFAULT_EXEMPLARS_PER_SERIES`], at most
/// [`parca_query::MAX_EXEMPLARS_PER_SERIES`]), an extension of Prometheus' API. `start` and
/// `end` default, as Prometheus', to all time.
pub(crate) async fn query_exemplars(
    api: &Arc<Api>,
    call: Call,
) -> Result<Response<Body>, ApiError> {
    let text = call
        .params
        .get("query")
        .filter(|q| !q.is_empty())
        .ok_or_else(|| ApiError::bad_data("parameter `query` is required"))?
        .to_owned();
    let expr = parse(&text)?;
    let start = call.params.time_ms("start")?.unwrap_or(i64::MIN);
    let end = call.params.time_ms("end")?.unwrap_or(i64::MAX);
    if end < start {
        return Err(ApiError::bad_data(
            "invalid parameter `end`: end timestamp must not be before start time",
        ));
    }
    let limit = match call.params.get("limit") {
        None | Some("") => parca_query::DEFAULT_EXEMPLARS_PER_SERIES,
        Some(text) => text
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=parca_query::MAX_EXEMPLARS_PER_SERIES).contains(n))
            .ok_or_else(|| {
                ApiError::bad_data(format!(
                    "parameter `limit` must be a whole number from 1 to {}, got `{text}`",
                    parca_query::MAX_EXEMPLARS_PER_SERIES
                ))
            })?,
    };
    let found = evaluate(api, "/api/v1/query_exemplars", move |engine| {
        engine
            .exemplars(&expr, start, end, limit)
            .map_err(query_error)
    })
    .await?;
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Series<'a> {
        series_labels: std::collections::BTreeMap<&'a str, &'a str>,
        exemplars: Vec<Exemplar<'a>>,
    }
    #[derive(Serialize)]
    struct Exemplar<'a> {
        labels: std::collections::BTreeMap<&'a str, &'a str>,
        value: String,
        timestamp: f64,
    }
    let data: Vec<Series> = found
        .iter()
        .map(|s| Series {
            series_labels: labels_map(&s.labels),
            exemplars: s
                .exemplars
                .iter()
                .map(|e| Exemplar {
                    labels: e
                        .attributes
                        .iter()
                        .map(|(n, v)| (n.as_str(), v.as_str()))
                        .collect(),
                    value: prom_float(e.value as f64),
                    timestamp: seconds(e.timestamp_ms),
                })
                .collect(),
        })
        .collect();
    Ok(success(&data))
}
