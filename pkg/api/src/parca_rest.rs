//! Parca's HTTP/JSON routes (what its grpc-gateway maps from the `google.api.http` annotations
//! of `parca.query.v1alpha1.QueryService`): `GET /profiles/types`, `/profiles/labels`,
//! `/profiles/labels/{label_name}/values` and `/profiles/query_range`, answered with the JSON
//! grpc-gateway writes (protojson: lowerCamelCase names, 64-bit integers as strings, RFC 3339
//! timestamps), so scripts written against Parca run unchanged. Errors are grpc-gateway's
//! `{"code", "message", "details"}`.

use std::sync::Arc;

use hyper::Response;
use parca_tsdb::NAME_LABEL;

use crate::Api;
use crate::query::{self, Metadata};
use crate::response::{ApiError, Body, ErrorType, json_response};
use crate::router::Call;

/// Steps of a range query without `step`: Parca's UI always sends one; a script that does not
/// gets about this many points.
const DEFAULT_POINTS: i64 = 300;

/// Answers a path under `/profiles/`; unknown ones get a JSON 404.
pub(crate) async fn handle(api: &Arc<Api>, call: Call) -> Response<Body> {
    answer(api, call)
        .await
        .unwrap_or_else(ApiError::into_gateway_response)
}

async fn answer(api: &Arc<Api>, call: Call) -> Result<Response<Body>, ApiError> {
    if call.method != hyper::Method::GET && call.method != hyper::Method::HEAD {
        return Err(ApiError::new(
            ErrorType::MethodNotAllowed,
            format!("{} is not allowed on {}; use GET", call.method, call.path),
        ));
    }
    if let Some(name) = call
        .path
        .strip_prefix("/profiles/labels/")
        .and_then(|rest| rest.strip_suffix("/values"))
    {
        let name = percent_decode(name);
        let values = query::metadata_data(api, &call, Metadata::Values(name), "match").await?;
        return Ok(json_response(&serde_json::json!({
            "labelValues": values,
            "warnings": [],
        })));
    }
    match call.path.as_str() {
        "/profiles/types" => {
            let types: Vec<serde_json::Value> = query::stored_profile_types(api, &call)
                .await?
                .into_iter()
                .map(|t| {
                    serde_json::json!({
                        "name": t.name,
                        "sampleType": t.sample_type,
                        "sampleUnit": t.sample_unit,
                        "periodType": t.period_type,
                        "periodUnit": t.period_unit,
                        "delta": t.delta,
                    })
                })
                .collect();
            Ok(json_response(&serde_json::json!({ "types": types })))
        }
        "/profiles/labels" => {
            let names = query::metadata_data(api, &call, Metadata::Names, "match").await?;
            Ok(json_response(&serde_json::json!({
                "labelNames": names,
                "warnings": [],
            })))
        }
        "/profiles/query_range" => query_range(api, &call).await,
        "/profiles/query" => profile_query(api, &call).await,
        _ => Err(ApiError::new(
            ErrorType::NotFound,
            format!(
                "no endpoint at {}: Parca's HTTP routes served here are /profiles/types, \
                 /profiles/labels, /profiles/labels/{{name}}/values, /profiles/query_range and \
                 /profiles/query",
                call.path
            ),
        )),
    }
}

/// `QueryRange`: one series per stored series (or group), each point a step's total with
/// Parca's `valuePerSecond` (the total over the step's length) and `duration` (the step, in
/// nanoseconds).
async fn query_range(api: &Arc<Api>, call: &Call) -> Result<Response<Body>, ApiError> {
    let step_ms = match call.params.duration_ms("step")? {
        Some(step) => step,
        None => {
            let start = call.params.time_ms("start")?.unwrap_or(0);
            let end = call.params.time_ms("end")?.unwrap_or(start);
            ((end - start) / DEFAULT_POINTS).max(1000)
        }
    };
    let limit = match call.params.get("limit") {
        None | Some("0") => usize::MAX,
        Some(text) => text.parse().map_err(|_| {
            ApiError::bad_data(format!(
                "parameter `limit` must be a whole number, got `{text}`"
            ))
        })?,
    };
    let series = query::range_series(api, call, step_ms).await?;
    let step_seconds = step_ms as f64 / 1000.0;
    let out: Vec<serde_json::Value> = series
        .iter()
        .take(limit)
        .map(|s| {
            let labels: Vec<serde_json::Value> = s
                .labels
                .iter()
                .filter(|l| l.name != NAME_LABEL)
                .map(|l| serde_json::json!({"name": l.name, "value": l.value}))
                .collect();
            let samples: Vec<serde_json::Value> = s
                .points
                .iter()
                .map(|p| {
                    let value = p.value.round() as i64;
                    serde_json::json!({
                        "timestamp": rfc3339(p.timestamp_ms),
                        "value": value.to_string(),
                        "valuePerSecond": p.value / step_seconds,
                        "duration": (step_ms.saturating_mul(1_000_000)).to_string(),
                    })
                })
                .collect();
            let (sample_type, period_type) = type_parts(&s.labels);
            serde_json::json!({
                "labelset": {"labels": labels},
                "samples": samples,
                "sampleType": sample_type,
                "periodType": period_type,
            })
        })
        .collect();
    Ok(json_response(&serde_json::json!({ "series": out })))
}

/// `Query` in modes `MODE_MERGE` (`merge.query`, `merge.start`, `merge.end`) and
/// `MODE_SINGLE_UNSPECIFIED` (`single.query`, `single.time`), with reports
/// `REPORT_TYPE_TOP` and `REPORT_TYPE_PPROF` (the JSON the gateway writes for them).
async fn profile_query(api: &Arc<Api>, call: &Call) -> Result<Response<Body>, ApiError> {
    let p = &call.params;
    let (text, query) = match p.get("mode").unwrap_or("MODE_SINGLE_UNSPECIFIED") {
        "MODE_MERGE" => {
            let start = p
                .time_ms("merge.start")?
                .ok_or_else(|| ApiError::bad_data("parameter `merge.start` is required"))?;
            let end = p
                .time_ms("merge.end")?
                .ok_or_else(|| ApiError::bad_data("parameter `merge.end` is required"))?;
            (
                p.required("merge.query")?,
                parca_query::InstantQuery::over(start, end),
            )
        }
        "MODE_SINGLE_UNSPECIFIED" => {
            let time = p
                .time_ms("single.time")?
                .ok_or_else(|| ApiError::bad_data("parameter `single.time` is required"))?;
            (
                p.required("single.query")?,
                parca_query::InstantQuery::at(time),
            )
        }
        "MODE_DIFF" => {
            return Err(ApiError::bad_data(
                "MODE_DIFF is not served over the HTTP gateway: ask /api/v1/query with diff(…)",
            ));
        }
        other => {
            return Err(ApiError::bad_data(format!(
                "mode `{other}` is not one of MODE_SINGLE_UNSPECIFIED, MODE_MERGE, MODE_DIFF"
            )));
        }
    };
    let report = p
        .get("reportType")
        .or_else(|| p.get("report_type"))
        .unwrap_or("REPORT_TYPE_FLAMEGRAPH_UNSPECIFIED");
    if !matches!(report, "REPORT_TYPE_TOP" | "REPORT_TYPE_PPROF") {
        return Err(ApiError::bad_data(format!(
            "report type `{report}` is not served over the HTTP gateway: use REPORT_TYPE_TOP or \
             REPORT_TYPE_PPROF (or /api/v1/query's formats)"
        )));
    }
    let report = report.to_owned();
    let profile = query::one_profile(api, text, query).await?;
    let total = profile.total();
    let body = if report == "REPORT_TYPE_PPROF" {
        use base64::Engine as _;
        let bytes = parca_pprof::encode(&parca_profile::to_pprof(&profile), true);
        serde_json::json!({
            "pprof": base64::engine::general_purpose::STANDARD.encode(bytes),
            "total": total.to_string(),
            "filtered": "0",
        })
    } else {
        let table = parca_profile::TopTable::build(&profile);
        let list: Vec<serde_json::Value> = table
            .rows
            .iter()
            .map(|r| {
                serde_json::json!({
                    "meta": {"function": {"name": r.name}},
                    "cumulative": r.cum.to_string(),
                    "flat": r.flat.to_string(),
                })
            })
            .collect();
        serde_json::json!({
            "top": {
                "list": list,
                "reported": table.rows.len(),
                "total": table.rows.len(),
                "unit": profile.meta.sample_type.unit,
            },
            "total": total.to_string(),
            "filtered": "0",
        })
    };
    Ok(json_response(&body))
}

/// The sample and period types named by a series' `__name__`
/// (`name:sample_type:sample_unit:period_type:period_unit[:delta]`).
fn type_parts(labels: &parca_tsdb::Labels) -> (serde_json::Value, serde_json::Value) {
    let name = labels.get(NAME_LABEL).unwrap_or("");
    match parca_querylang::ProfileTypeName::parse(name) {
        Ok(t) => (
            serde_json::json!({"type": t.sample_type(), "unit": t.sample_unit()}),
            serde_json::json!({"type": t.period_type(), "unit": t.period_unit()}),
        ),
        // A group of an aggregation has no `__name__`.
        Err(_) => (serde_json::json!({}), serde_json::json!({})),
    }
}

/// protojson's `Timestamp`: RFC 3339 in UTC.
fn rfc3339(timestamp_ms: i64) -> String {
    jiff::Timestamp::from_millisecond(timestamp_ms)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// A path segment with its `%XX` escapes decoded (label names are ASCII; anything else is
/// left as it is and will match nothing).
fn percent_decode(segment: &str) -> String {
    form_urlencoded::parse(format!("x={}", segment.replace('+', "%2B")).as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_times_as_grpc_gateway_writes_them() {
        let labels = parca_tsdb::Labels::new([
            (
                NAME_LABEL,
                "process_cpu:samples:count:cpu:nanoseconds:delta",
            ),
            ("job", "api"),
        ])
        .unwrap();
        let (sample, period) = type_parts(&labels);
        assert_eq!(
            sample,
            serde_json::json!({"type": "samples", "unit": "count"})
        );
        assert_eq!(
            period,
            serde_json::json!({"type": "cpu", "unit": "nanoseconds"})
        );
        assert_eq!(rfc3339(1_700_000_000_500), "2023-11-14T22:13:20.5Z");
        assert_eq!(percent_decode("service_name"), "service_name");
        assert_eq!(percent_decode("a%2Eb"), "a.b");
    }
}
