//! Query endpoints: profiles (`/api/v1/query`), series of totals (`/api/v1/query_range`), and
//! metadata (profile types, label names and values, series).

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;

use hyper::Response;
use parca_profile::{
    CallGraph, FlameGraph, FrameHider, Granularity, Profile, Pruning, Sandwich, TopTable,
};

use crate::render::{CallGraphJson, ColumnsWriter, TopTableJson, write_flame_graph_json};
use parca_query::{Engine, InstantQuery, ProfileGroup, RangeQuery};
use parca_querylang::{Expr, ExprKind};
use parca_tsdb::{Labels, Matcher};
use serde::Serialize;

use crate::Api;
use crate::call::Call;
use crate::clock::now_ms;
use crate::response::{ApiError, Body, ErrorType, success, with_type};

/// Parses a query; a syntax error answers 400 with the caret picture.
pub(crate) fn parse(query: &str) -> Result<Expr, ApiError> {
    parca_querylang::parse(query)
        .map_err(|e| ApiError::bad_data(e.render(query)).at(e.line, e.column))
}

pub(crate) fn query_error(e: parca_query::Error) -> ApiError {
    match e {
        parca_query::Error::Matcher(_) => ApiError::bad_data(e.to_string()),
        parca_query::Error::Store(e) => ApiError::from_store("cannot read the store", &e),
        parca_query::Error::NoProfiles(_) => {
            ApiError::execution(e.to_string()).because("no_profiles")
        }
        parca_query::Error::Timeout => {
            ApiError::limit(ErrorType::Execution, e, "--query-timeout").because("timeout")
        }
        parca_query::Error::TooManySeries { .. } => {
            ApiError::limit(ErrorType::Execution, e, "--query-max-series")
        }
        parca_query::Error::TooManySamples { .. } => {
            ApiError::limit(ErrorType::Execution, e, "--query-max-samples")
        }
        parca_query::Error::TooManyPoints { .. } => {
            ApiError::limit(ErrorType::Execution, e, "--query-max-points")
        }
        parca_query::Error::TooManySteps { .. } => {
            ApiError::limit(ErrorType::Execution, e, "--query-max-steps")
        }
        _ => ApiError::execution(e.to_string()),
    }
}

/// Runs `f` with the engine on the blocking pool, its time observed as a query of `endpoint`.
pub(crate) async fn evaluate<T: Send + 'static>(
    api: &Arc<Api>,
    endpoint: &'static str,
    f: impl FnOnce(&Engine) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let started = std::time::Instant::now();
    let result = with_engine(api, f).await;
    api.metrics.observe_query(endpoint, started.elapsed());
    result
}

/// Runs `f` with the engine on the blocking pool, within the query concurrency limit and
/// the query timeout. A query past its timeout is answered then; its evaluation runs to its
/// end on the blocking pool and keeps its place among the concurrent queries until it does,
/// so the limit bounds the work, not only the answers.
pub(crate) async fn with_engine<T: Send + 'static>(
    api: &Arc<Api>,
    f: impl FnOnce(&Engine) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let timeout = api.options.query_timeout;
    let engine = request_engine(api)?;
    let permit = Arc::clone(&api.queries).try_acquire_owned().map_err(|_| {
        ApiError::limit(
            ErrorType::TooManyRequests,
            format_args!(
                "{} queries are being evaluated already; retry shortly",
                api.options.max_concurrent_queries
            ),
            "--query-max-concurrency",
        )
    })?;
    let watched = engine.clone();
    let task = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        f(&engine)
    });
    // The engine stops itself at the deadline; this answers in time should it be slow to.
    let answered = tokio::time::timeout(timeout + std::time::Duration::from_secs(1), task).await;
    crate::warnings::note(watched.warnings());
    match answered {
        Ok(joined) => joined.map_err(|e| ApiError::internal(format!("query task failed: {e}")))?,
        Err(_) => Err(ApiError::limit(
            ErrorType::Execution,
            format_args!(
                "the query did not finish within {}; shorten the time range or narrow the selector",
                parca_querylang::duration::format(timeout)
            ),
            "--query-timeout",
        )
        .because("timeout")),
    }
}

/// The engine for one request: its deadline `--query-timeout` away, its warnings its own.
fn request_engine(api: &Api) -> Result<Engine, ApiError> {
    Ok(api
        .engine()?
        .with_deadline(std::time::Instant::now() + api.options.query_timeout))
}

/// Runs a metadata read `f` (labels, series, profile types) with the engine on the blocking
/// pool: outside the query concurrency limit, as metadata is cheap and the UI asks for it all
/// the time; its warnings go to the answer as a query's do.
async fn with_engine_for_metadata<T: Send + 'static>(
    api: &Arc<Api>,
    f: impl FnOnce(&Engine) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let engine = request_engine(api)?;
    let watched = engine.clone();
    let result = tokio::task::spawn_blocking(move || f(&engine))
        .await
        .map_err(|e| ApiError::internal(format!("metadata task failed: {e}")))?;
    crate::warnings::note(watched.warnings());
    result
}

pub(crate) fn labels_map(labels: &Labels) -> BTreeMap<&str, &str> {
    labels
        .iter()
        .map(|l| (l.name.as_str(), l.value.as_str()))
        .collect()
}

/// The content type of `format=columns` (layout: `render::ColumnsWriter`).
pub(crate) const COLUMNS_CONTENT_TYPE: &str = "application/vnd.parca.flamegraph-columns";

/// `GET/POST /api/v1/query`: a profile in the asked format.
#[expect(
    clippy::too_many_lines,
    reason = "reads the parameters of /api/v1/query in Prometheus' order and evaluates"
)]
pub(crate) async fn instant(api: &Arc<Api>, call: Call) -> Result<Response<Body>, ApiError> {
    let p = &call.params;
    let text = p.required("query")?.to_owned();
    let expr = parse(&text)?;
    let query = match (p.time_ms("start")?, p.time_ms("end")?) {
        (Some(start), Some(end)) => {
            if end < start {
                return Err(ApiError::bad_data("`end` is before `start`"));
            }
            InstantQuery::over(start, end)
        }
        (None, None) => InstantQuery::at(p.time_ms("time")?.unwrap_or_else(now_ms)),
        _ => return Err(ApiError::bad_data("give both `start` and `end`, or `time`")),
    };
    let format = p.get("format").unwrap_or("json").to_owned();
    if gives_numbers(&expr) {
        if format != "json" {
            return Err(ApiError::bad_data(format!(
                "the query gives series (an aggregation or arithmetic), which are answered as a JSON vector, not as `{format}`: drop `format`, or query profiles with merge(…)"
            )));
        }
        return instant_vector(api, expr, query).await;
    }
    if !FORMATS.contains(&format.as_str()) {
        return Err(ApiError::bad_data(format!(
            "unknown format `{format}`: use json, columns, pprof, top, folded, svg, callgraph, dot or sandwich"
        )));
    }
    let view = View::from_params(p, &format)?;
    let min_share = match p.get("min_share") {
        None => 0.0,
        Some(v) => match v.parse::<f64>() {
            Ok(x) if (0.0..=1.0).contains(&x) => x,
            _ => {
                return Err(ApiError::bad_data(format!(
                    "parameter `min_share` must be a number from 0 to 1, got `{v}`"
                )));
            }
        },
    };
    if min_share > 0.0 && format != "columns" {
        return Err(ApiError::bad_data(
            "parameter `min_share` applies to `format=columns` only",
        ));
    }
    let limit = match p.get("limit") {
        None => None,
        Some(v) => Some(v.parse::<usize>().map_err(|_| {
            ApiError::bad_data(format!(
                "parameter `limit` must be a whole number, got `{v}`"
            ))
        })?),
    };
    // Frames hidden as in the UI, so that a download holds what was on screen.
    let hider = FrameHider::new(p.get("hide"), p.get("hide_binary")).map_err(|e| match e {
        parca_profile::Error::Regex { pattern, source } => ApiError::bad_data(format!(
            "parameter `hide` or `hide_binary` is not a valid regex: `{pattern}`: {source}"
        )),
        e => ApiError::bad_data(e.to_string()),
    })?;
    let grouped = matches!(
        &expr.kind,
        ExprKind::Merge {
            grouping: Some(_),
            ..
        }
    );
    evaluate(api, "query", move |engine| {
        let mut groups = engine.instant(&expr, &query).map_err(query_error)?;
        if !hider.is_empty() {
            for g in &mut groups {
                g.profile = hider.apply(&g.profile);
            }
        }
        if groups.is_empty() {
            return Err(ApiError::execution(
                "no profiles match the query in this time range: widen the range, or check the selector against /api/v1/series",
            )
            .because("no_profiles"));
        }
        for g in &mut groups {
            g.profile = view.shape(&g.profile, &format);
        }
        if groups.len() > 1
            && ((format != "json" && format != "columns") || view.function.is_some())
        {
            return Err(ApiError::bad_data(format!(
                "the query gives {} profiles (one per group of `merge by`); the `{format}` format holds one: drop `by`, or select one group with a matcher",
                groups.len()
            )));
        }
        render(&groups, grouped, &format, limit, min_share, &view)
    })
    .await
}

/// The merged profile of a profile-valued `query` (for Parca's `/profiles/query`): one group,
/// or an error saying why there is none.
pub(crate) async fn one_profile(
    api: &Arc<Api>,
    text: &str,
    query: InstantQuery,
) -> Result<parca_profile::Profile, ApiError> {
    let mut groups = profile_groups(api, text, query).await?;
    if groups.len() > 1 {
        return Err(ApiError::bad_data(format!(
            "the query gives {} profiles; give a selector whose profiles merge into one",
            groups.len()
        )));
    }
    groups.pop().map(|g| g.profile).ok_or_else(|| {
        ApiError::execution("no profiles match the query in this time range").because("no_profiles")
    })
}

/// The profiles a query gives (several for `merge by`), each with its group's labels.
pub(crate) async fn profile_groups(
    api: &Arc<Api>,
    text: &str,
    query: InstantQuery,
) -> Result<Vec<parca_query::ProfileGroup>, ApiError> {
    let expr = parse(text)?;
    if gives_numbers(&expr) {
        return Err(ApiError::bad_data(
            "the query gives series (an aggregation or arithmetic), not a profile: give a selector",
        ));
    }
    evaluate(api, "query", move |engine| {
        engine.instant(&expr, &query).map_err(query_error)
    })
    .await
}

/// Whether `expr` gives numbers (series, or one number) rather than profiles.
fn gives_numbers(expr: &Expr) -> bool {
    matches!(
        expr.value_type(),
        parca_querylang::ValueType::SeriesSet | parca_querylang::ValueType::Scalar
    )
}

/// A series-valued instant query, answered as Prometheus answers one:
/// `{"resultType":"vector","result":[{"metric":{…},"value":[t,"v"]}]}`, or for a number
/// `{"resultType":"scalar","result":[t,"v"]}`.
async fn instant_vector(
    api: &Arc<Api>,
    expr: Expr,
    query: InstantQuery,
) -> Result<Response<Body>, ApiError> {
    let scalar = expr.value_type() == parca_querylang::ValueType::Scalar;
    let series = evaluate(api, "query", move |engine| {
        engine.instant_series(&expr, &query).map_err(query_error)
    })
    .await;
    let series = series?;
    if scalar {
        let (t, v) = series
            .first()
            .and_then(|s| s.points.last())
            .map_or((query.time_ms, f64::NAN), |p| (p.timestamp_ms, p.value));
        return Ok(success(&serde_json::json!({
            "resultType": "scalar",
            "result": [seconds(t), prom_float(v)],
        })));
    }
    let result: Vec<serde_json::Value> = series
        .iter()
        .filter_map(|s| {
            let point = s.points.last()?;
            Some(serde_json::json!({
                "metric": labels_map(&s.labels),
                "value": [seconds(point.timestamp_ms), prom_float(point.value)],
            }))
        })
        .collect();
    Ok(success(&serde_json::json!({
        "resultType": "vector",
        "result": result,
    })))
}

/// A value as Prometheus writes it in JSON: a string, with `+Inf`, `-Inf` and `NaN` (a ratio
/// over a step whose divisor is 0).
pub(crate) fn prom_float(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_owned()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_owned()
    } else {
        v.to_string()
    }
}

/// Milliseconds since the epoch as Prometheus' seconds.
pub(crate) fn seconds(t: i64) -> f64 {
    t as f64 / 1000.0
}

/// The formats of `/api/v1/query`.
const FORMATS: [&str; 9] = [
    "json",
    "columns",
    "pprof",
    "top",
    "folded",
    "svg",
    "callgraph",
    "dot",
    "sandwich",
];

/// How a profile is viewed, from the parameters that shape it: `granularity` (every format),
/// pruning of the call graph (`node_fraction`, `edge_fraction`, `max_nodes`: `callgraph` and
/// `dot`) and the function of a sandwich (`function`: `sandwich`, and `columns` for the UI).
struct View {
    granularity: Option<Granularity>,
    pruning: Pruning,
    function: Option<String>,
}

impl View {
    fn from_params(p: &crate::params::Params, format: &str) -> Result<View, ApiError> {
        let granularity = match p.get("granularity").filter(|g| !g.is_empty()) {
            None => None,
            Some(g) => Some(Granularity::parse(g).ok_or_else(|| {
                ApiError::bad_data(format!(
                    "parameter `granularity` must be `function`, `line` or `address` (or pprof's `functions`, `lines`, `addresses`), got `{g}`"
                ))
            })?),
        };
        let graph = matches!(format, "callgraph" | "dot");
        let fraction = |name: &str| -> Result<f64, ApiError> {
            match p.get(name) {
                None => Ok(0.0),
                Some(_) if !graph => Err(ApiError::bad_data(format!(
                    "parameter `{name}` applies to `format=callgraph` and `format=dot` only"
                ))),
                Some(v) => match v.parse::<f64>() {
                    Ok(x) if (0.0..=1.0).contains(&x) => Ok(x),
                    _ => Err(ApiError::bad_data(format!(
                        "parameter `{name}` must be a number from 0 to 1, got `{v}`"
                    ))),
                },
            }
        };
        let max_nodes = match p.get("max_nodes") {
            None => None,
            Some(_) if !graph => {
                return Err(ApiError::bad_data(
                    "parameter `max_nodes` applies to `format=callgraph` and `format=dot` only",
                ));
            }
            Some(v) => Some(v.parse::<usize>().ok().filter(|&n| n > 0).ok_or_else(|| {
                ApiError::bad_data(format!(
                    "parameter `max_nodes` must be a positive whole number, got `{v}`"
                ))
            })?),
        };
        let pruning = Pruning {
            node_fraction: fraction("node_fraction")?,
            edge_fraction: fraction("edge_fraction")?,
            max_nodes,
        };
        let function = p
            .get("function")
            .filter(|f| !f.is_empty())
            .map(str::to_owned);
        match (format, &function) {
            ("sandwich", None) => {
                return Err(ApiError::bad_data(
                    "`format=sandwich` needs the parameter `function`: the name of the function (as the top table names it)",
                ));
            }
            ("sandwich" | "columns", _) | (_, None) => {}
            (_, Some(_)) => {
                return Err(ApiError::bad_data(
                    "parameter `function` applies to `format=sandwich` and `format=columns` only",
                ));
            }
        }
        Ok(View {
            granularity,
            pruning,
            function,
        })
    }

    /// The profile at the asked granularity: for pprof, aggregated as pprof aggregates it; for
    /// the views, with a frame per line or address.
    fn shape(&self, profile: &Profile, format: &str) -> Profile {
        match (self.granularity, format) {
            (None, _) => profile.clone(),
            (Some(g), "pprof") => parca_profile::aggregate(profile, g),
            (Some(g), _) => parca_profile::with_granularity(profile, g),
        }
    }

    /// The sandwich of the asked function, or a 422 saying it is not in the profile.
    fn sandwich(&self, profile: &Profile) -> Result<Option<Sandwich>, ApiError> {
        let Some(function) = &self.function else {
            return Ok(None);
        };
        parca_profile::sandwich(profile, function)
            .map(Some)
            .ok_or_else(|| {
                ApiError::execution(format!(
                    "no frame of the profile is named `{function}`: give the name as the top table shows it (at this granularity)"
                ))
                .because("no_such_function")
            })
    }
}

#[expect(
    clippy::too_many_lines,
    reason = "one match over the answer formats (JSON, pprof, top, folded, SVG, call graph, columns), each arm short"
)]
fn render(
    groups: &[ProfileGroup],
    grouped: bool,
    format: &str,
    limit: Option<usize>,
    min_share: f64,
    view: &View,
) -> Result<Response<Body>, ApiError> {
    let profile = &groups[0].profile;
    let io = |e: std::io::Error| ApiError::internal(format!("cannot render the profile: {e}"));
    Ok(match format {
        "columns" if view.function.is_some() => {
            let Some(halves) = view.sandwich(profile)? else {
                unreachable!("a function was given")
            };
            let graphs = [
                ("callers", FlameGraph::build(&halves.callers)),
                ("callees", FlameGraph::build(&halves.callees)),
            ];
            let mut writer = ColumnsWriter::new();
            for (part, graph) in &graphs {
                writer
                    .add(graph, min_share)
                    .insert("sandwich".into(), (*part).into());
            }
            with_type(writer.finish(), COLUMNS_CONTENT_TYPE)
        }
        "sandwich" => {
            let Some(halves) = view.sandwich(profile)? else {
                unreachable!("checked: `format=sandwich` has a function")
            };
            let mut out = Vec::with_capacity(1 << 14);
            out.extend_from_slice(br#"{"status":"success","data":{"function":"#);
            serde_json::to_writer(&mut out, view.function.as_deref().unwrap_or_default())
                .map_err(|e| ApiError::internal(e.to_string()))?;
            out.extend_from_slice(br#","callers":"#);
            write_flame_graph_json(&FlameGraph::build(&halves.callers), &mut out).map_err(io)?;
            out.extend_from_slice(br#","callees":"#);
            write_flame_graph_json(&FlameGraph::build(&halves.callees), &mut out).map_err(io)?;
            out.extend_from_slice(b"}}");
            with_type(out, "application/json")
        }
        "callgraph" => success(&CallGraphJson::from(&CallGraph::build_pruned(
            profile,
            &view.pruning,
        ))),
        "dot" => with_type(
            CallGraph::build_pruned(profile, &view.pruning).to_dot(),
            "text/vnd.graphviz; charset=utf-8",
        ),
        "columns" => {
            let graphs: Vec<FlameGraph> = groups
                .iter()
                .map(|g| FlameGraph::build(&g.profile))
                .collect();
            let mut writer = ColumnsWriter::new();
            for (g, graph) in groups.iter().zip(&graphs) {
                let head = writer.add(graph, min_share);
                if grouped {
                    let labels = serde_json::to_value(labels_map(&g.labels))
                        .map_err(|e| ApiError::internal(e.to_string()))?;
                    head.insert("labels".into(), labels);
                    head.insert("profiles".into(), g.n_profiles.into());
                }
            }
            with_type(writer.finish(), COLUMNS_CONTENT_TYPE)
        }
        "pprof" => with_type(
            parca_pprof::encode(&parca_profile::to_pprof(profile), true),
            "application/vnd.google.protobuf+gzip",
        ),
        "top" => {
            let mut table = TopTable::build(profile);
            if let Some(limit) = limit {
                table.rows.truncate(limit);
            }
            success(&TopTableJson::from(&table))
        }
        "folded" => {
            let mut out = Vec::new();
            FlameGraph::build(profile)
                .write_folded(&mut out)
                .map_err(io)?;
            with_type(out, "text/plain; charset=utf-8")
        }
        "svg" => {
            let mut folded = Vec::new();
            FlameGraph::build(profile)
                .write_folded(&mut folded)
                .map_err(io)?;
            let folded = String::from_utf8_lossy(&folded);
            let mut options = inferno::flamegraph::Options::default();
            options.count_name = profile.meta.sample_type.unit.clone();
            options.title = format!(
                "{} ({})",
                profile.meta.sample_type.kind, profile.meta.sample_type.unit
            );
            let mut svg = Vec::new();
            inferno::flamegraph::from_lines(&mut options, folded.lines(), &mut svg)
                .map_err(|e| ApiError::internal(format!("cannot draw the flame graph: {e}")))?;
            with_type(svg, "image/svg+xml")
        }
        _ => {
            let mut out = Vec::with_capacity(1 << 16);
            out.extend_from_slice(br#"{"status":"success","data":"#);
            if grouped {
                out.extend_from_slice(br#"{"groups":["#);
                for (i, g) in groups.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    out.extend_from_slice(br#"{"labels":"#);
                    serde_json::to_writer(&mut out, &labels_map(&g.labels))
                        .map_err(|e| ApiError::internal(e.to_string()))?;
                    write!(out, r#","profiles":{},"flamegraph":"#, g.n_profiles).map_err(io)?;
                    write_flame_graph_json(&FlameGraph::build(&g.profile), &mut out).map_err(io)?;
                    out.push(b'}');
                }
                out.extend_from_slice(b"]}");
            } else {
                write_flame_graph_json(&FlameGraph::build(profile), &mut out).map_err(io)?;
            }
            out.push(b'}');
            with_type(out, "application/json")
        }
    })
}

/// `GET/POST /api/v1/query_range`: Prometheus' matrix of totals per step.
#[expect(
    clippy::too_many_lines,
    reason = "reads the parameters of /api/v1/query_range in Prometheus' order and evaluates"
)]
pub(crate) async fn range(api: &Arc<Api>, call: Call) -> Result<Response<Body>, ApiError> {
    let step = call
        .params
        .duration_ms("step")?
        .ok_or_else(|| ApiError::bad_data("parameter `step` is required"))?;
    // `limit=N`: the N series with the largest totals, the rest summed into `omitted` (an
    // extension of Prometheus' API, for graphs of a fleet's thousands of series).
    let limit = match call.params.get("limit") {
        None | Some("") => None,
        Some(text) => Some(
            text.parse::<usize>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| {
                    ApiError::bad_data(format!(
                        "parameter `limit` must be a positive whole number, got `{text}`"
                    ))
                })?,
        ),
    };
    let series = range_series(api, &call, step).await?;
    let (series, omitted) = match limit {
        Some(n) => parca_query::top_series(series, n),
        None => (series, None),
    };
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Series<'a> {
        metric: BTreeMap<&'a str, &'a str>,
        values: Vec<(f64, String)>,
        unit: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        period_unit: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        period_values: Option<Vec<(f64, String)>>,
    }
    let result: Vec<Series> = series
        .iter()
        .map(|s| Series {
            metric: labels_map(&s.labels),
            values: s
                .points
                .iter()
                .map(|p| (seconds(p.timestamp_ms), prom_float(p.value)))
                .collect(),
            unit: &s.unit,
            period_unit: s.period_unit.as_deref(),
            period_values: s.period_unit.as_ref().map(|_| {
                s.points
                    .iter()
                    .map(|p| {
                        (
                            seconds(p.timestamp_ms),
                            prom_float(p.period_value.unwrap_or(0.0)),
                        )
                    })
                    .collect()
            }),
        })
        .collect();
    let mut data = serde_json::json!({
        "resultType": "matrix",
        "result": result,
    });
    if let Some(omitted) = omitted {
        let values = |f: &dyn Fn(&parca_query::Point) -> Option<f64>| -> Vec<(f64, String)> {
            omitted
                .points
                .iter()
                .filter_map(|p| Some((seconds(p.timestamp_ms), prom_float(f(p)?))))
                .collect()
        };
        let mut o = serde_json::json!({
            "series": omitted.n_series,
            "values": values(&|p| Some(p.value)),
        });
        if omitted.points.iter().all(|p| p.period_value.is_some()) {
            o["periodValues"] = serde_json::json!(values(&|p| p.period_value));
        }
        data["omitted"] = o;
    }
    Ok(success(&data))
}

/// Evaluates the request's `query` over `start`..`end` at `step_ms` (the caller reads the step,
/// whose default differs between the APIs).
pub(crate) async fn range_series(
    api: &Arc<Api>,
    call: &Call,
    step_ms: i64,
) -> Result<Vec<parca_query::RangeSeries>, ApiError> {
    let p = &call.params;
    let text = p.required("query")?;
    let start = p
        .time_ms("start")?
        .ok_or_else(|| ApiError::bad_data("parameter `start` is required"))?;
    let end = p
        .time_ms("end")?
        .ok_or_else(|| ApiError::bad_data("parameter `end` is required"))?;
    range_series_of(api, text, start, end, step_ms).await
}

/// Evaluates `text` over `start_ms`..`end_ms` at `step_ms`.
pub(crate) async fn range_series_of(
    api: &Arc<Api>,
    text: &str,
    start_ms: i64,
    end_ms: i64,
    step_ms: i64,
) -> Result<Vec<parca_query::RangeSeries>, ApiError> {
    let expr = parse(text)?;
    if step_ms <= 0 {
        return Err(ApiError::bad_data(
            "zero or negative query resolution step widths are not accepted. Try a positive integer",
        ));
    }
    if end_ms < start_ms {
        return Err(ApiError::bad_data(
            "end timestamp must not be before start time",
        ));
    }
    let query = RangeQuery {
        start_ms,
        end_ms,
        step_ms,
    };
    evaluate(api, "query_range", move |engine| {
        engine.range(&expr, &query).map_err(query_error)
    })
    .await
}

/// The optional `[start, end]` of metadata endpoints (everything when absent).
fn metadata_window(call: &Call) -> Result<(i64, i64), ApiError> {
    Ok((
        call.params.time_ms("start")?.unwrap_or(i64::MIN),
        call.params.time_ms("end")?.unwrap_or(i64::MAX),
    ))
}

/// The matchers of each selector in the parameter `param` (`match[]`, or Parca's `match`).
fn match_selectors(call: &Call, param: &str) -> Result<Vec<Vec<Matcher>>, ApiError> {
    selectors_matchers(call.params.all(param), param)
}

/// The matchers of each selector text (`param` names them in errors).
pub(crate) fn selectors_matchers(
    texts: &[impl AsRef<str>],
    param: &str,
) -> Result<Vec<Vec<Matcher>>, ApiError> {
    texts
        .iter()
        .map(|text| {
            let text = text.as_ref();
            let selector = parca_querylang::parse_series_selector(text).map_err(|e| {
                ApiError::bad_data(format!("invalid `{param}`: {}", e.render(text)))
            })?;
            parca_query::selector_matchers(&selector).map_err(query_error)
        })
        .collect()
}

/// The profile types stored in the request's `[start, end]`.
pub(crate) async fn stored_profile_types(
    api: &Arc<Api>,
    call: &Call,
) -> Result<Vec<parca_query::ProfileType>, ApiError> {
    let (start, end) = metadata_window(call)?;
    profile_types_between(api, start, end).await
}

/// The profile types stored in `[start, end]` (milliseconds).
pub(crate) async fn profile_types_between(
    api: &Arc<Api>,
    start: i64,
    end: i64,
) -> Result<Vec<parca_query::ProfileType>, ApiError> {
    with_engine_for_metadata(api, move |engine| {
        parca_query::profile_types(engine, start, end).map_err(query_error)
    })
    .await
}

/// `GET /api/v1/profile_types`.
pub(crate) async fn profile_types(api: &Arc<Api>, call: Call) -> Result<Response<Body>, ApiError> {
    let types = stored_profile_types(api, &call).await?;
    let types: Vec<_> = types
        .iter()
        .map(|t| {
            serde_json::json!({
                "name": t.name,
                "sample_type": t.sample_type,
                "sample_unit": t.sample_unit,
                "period_type": t.period_type,
                "period_unit": t.period_unit,
                "delta": t.delta,
            })
        })
        .collect();
    Ok(success(&types))
}

/// Label names, label values or series over the union of the `match[]` selectors.
pub(crate) enum Metadata {
    /// `/api/v1/labels`.
    Names,
    /// `/api/v1/label/<name>/values`.
    Values(String),
    /// `/api/v1/series`.
    Series,
}

pub(crate) async fn metadata(
    api: &Arc<Api>,
    call: Call,
    what: Metadata,
) -> Result<Response<Body>, ApiError> {
    Ok(success(&metadata_data(api, &call, what, "match[]").await?))
}

/// What [`metadata`] answers, outside the envelope; the selectors are in `match_param`.
pub(crate) async fn metadata_data(
    api: &Arc<Api>,
    call: &Call,
    what: Metadata,
    match_param: &str,
) -> Result<serde_json::Value, ApiError> {
    let (start, end) = metadata_window(call)?;
    let selectors = match_selectors(call, match_param)?;
    metadata_between(api, start, end, selectors, what).await
}

/// Label names, values or series of the union of `selectors` over `[start, end]`.
pub(crate) async fn metadata_between(
    api: &Arc<Api>,
    start: i64,
    end: i64,
    mut selectors: Vec<Vec<Matcher>>,
    what: Metadata,
) -> Result<serde_json::Value, ApiError> {
    if let Metadata::Series = what
        && selectors.is_empty()
    {
        return Err(ApiError::bad_data(
            "no `match[]` parameter: give at least one series selector",
        ));
    }
    if selectors.is_empty() {
        selectors.push(Vec::new());
    }
    with_engine_for_metadata(api, move |engine| {
        let querier = engine.querier(start, end);
        let read = |e| ApiError::from_store("cannot read the store", &e);
        let json = |v: Result<serde_json::Value, serde_json::Error>| {
            v.map_err(|e| ApiError::internal(e.to_string()))
        };
        match what {
            Metadata::Names | Metadata::Values(_) => {
                let mut out = std::collections::BTreeSet::new();
                for matchers in &selectors {
                    out.extend(
                        match &what {
                            Metadata::Values(name) => querier.label_values(name, matchers),
                            _ => querier.label_names(matchers),
                        }
                        .map_err(read)?,
                    );
                }
                json(serde_json::to_value(out))
            }
            Metadata::Series => {
                let mut out = std::collections::BTreeSet::new();
                for matchers in &selectors {
                    out.extend(querier.series(matchers).map_err(read)?);
                }
                let out: Vec<_> = out.iter().map(labels_map).collect();
                json(serde_json::to_value(out))
            }
        }
    })
    .await
}
