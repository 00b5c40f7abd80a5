//! Rule endpoints in Prometheus' shapes: `GET /api/v1/rules` (groups, rules, their health and
//! alerts), `GET /api/v1/alerts` (the pending and firing alerts) and `GET /federate` (the
//! recorded series in the text format, for a Prometheus to scrape) and `GET /api/v1/insights`
//! (deploy insights).

use std::collections::BTreeMap;
use std::sync::Arc;

use hyper::Response;
use parca_rules::{Alert, Group, RuleState};
use serde::Serialize;

use crate::Api;
use crate::call::Call;
use crate::response::{ApiError, Body, success};

/// A time as Prometheus writes it in these answers: RFC 3339 with nanoseconds, UTC; Go's zero
/// time for "never".
fn rfc3339(ms: Option<i64>) -> String {
    ms.and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
        .map_or_else(|| "0001-01-01T00:00:00Z".to_owned(), |t| t.to_string())
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct AlertJson<'a> {
    labels: &'a BTreeMap<String, String>,
    annotations: &'a BTreeMap<String, String>,
    state: &'static str,
    active_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    keep_firing_since: Option<String>,
    value: String,
}

impl<'a> AlertJson<'a> {
    fn new(alert: &'a Alert) -> Self {
        AlertJson {
            labels: &alert.labels,
            annotations: &alert.annotations,
            state: alert.state.as_str(),
            active_at: rfc3339(Some(alert.active_at_ms)),
            keep_firing_since: alert.keep_firing_since_ms.map(|ms| rfc3339(Some(ms))),
            value: parca_rules::template::go_e(alert.value),
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RuleJson<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    state: Option<&'static str>,
    name: &'a str,
    query: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    duration: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    keep_firing_for: Option<f64>,
    labels: &'a BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    annotations: Option<&'a BTreeMap<String, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    alerts: Option<Vec<AlertJson<'a>>>,
    health: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_error: Option<&'a str>,
    evaluation_time: f64,
    last_evaluation: String,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct GroupJson<'a> {
    name: &'a str,
    file: String,
    rules: Vec<RuleJson<'a>>,
    interval: f64,
    limit: usize,
    evaluation_time: f64,
    last_evaluation: String,
}

/// Which rules an answer holds: Prometheus' filters.
struct Filter<'a> {
    kind: Option<bool>,
    names: &'a [String],
    groups: &'a [String],
    files: &'a [String],
    exclude_alerts: bool,
}

impl<'a> Filter<'a> {
    fn from_call(call: &'a Call) -> Result<Self, ApiError> {
        let p = &call.params;
        let kind = match p.get("type") {
            None | Some("") => None,
            Some("alert") => Some(true),
            Some("record") => Some(false),
            Some(other) => {
                return Err(ApiError::bad_data(format!(
                    "unsupported type `{other}`: use `alert` or `record`"
                )));
            }
        };
        let exclude_alerts = match p.get("exclude_alerts") {
            None | Some("") | Some("false") => false,
            Some("true") => true,
            Some(other) => {
                return Err(ApiError::bad_data(format!(
                    "parameter `exclude_alerts` must be true or false, got `{other}`"
                )));
            }
        };
        Ok(Filter {
            kind,
            names: p.all("rule_name[]"),
            groups: p.all("rule_group[]"),
            files: p.all("file[]"),
            exclude_alerts,
        })
    }

    /// Whether a rule filter is set: groups left without rules are then left out.
    fn filters_rules(&self) -> bool {
        self.kind.is_some() || !self.names.is_empty()
    }

    fn keeps_group(&self, group: &Group) -> bool {
        (self.groups.is_empty() || self.groups.iter().any(|g| g == group.name()))
            && (self.files.is_empty()
                || self
                    .files
                    .iter()
                    .any(|f| *f == group.file.display().to_string()))
    }
}

/// The rules of the server, when it evaluates any.
fn groups(api: &Api) -> Vec<Arc<Group>> {
    api.rules.get().map(|m| m.groups()).unwrap_or_default()
}

/// `GET /api/v1/rules`: `{"groups":[{name, file, rules:[…], interval, limit, evaluationTime,
/// lastEvaluation}]}`, with Prometheus' filters `type=alert|record`, `rule_name[]`,
/// `rule_group[]`, `file[]` and `exclude_alerts`.
pub(crate) fn rules(api: &Arc<Api>, call: &Call) -> Result<Response<Body>, ApiError> {
    let filter = Filter::from_call(call)?;
    let groups = groups(api);
    let states: Vec<_> = groups.iter().map(|g| g.state()).collect();
    let mut out = Vec::new();
    for (group, state) in groups.iter().zip(&states) {
        if !filter.keeps_group(group) {
            continue;
        }
        let mut rules = Vec::new();
        for (rule, rs) in group.rules().iter().zip(&state.rules) {
            if filter.kind.is_some_and(|alert| alert != rule.is_alert())
                || (!filter.names.is_empty() && !filter.names.iter().any(|n| n == rule.name()))
            {
                continue;
            }
            rules.push(rule_json(rule, rs, filter.exclude_alerts));
        }
        if rules.is_empty() && filter.filters_rules() {
            continue;
        }
        out.push(GroupJson {
            name: group.name(),
            file: group.file.display().to_string(),
            rules,
            interval: group.interval.as_secs_f64(),
            limit: group.spec.limit,
            evaluation_time: state.evaluation_time.as_secs_f64(),
            last_evaluation: rfc3339(state.last_evaluation_ms),
        });
    }
    Ok(success(&serde_json::json!({ "groups": out })))
}

fn rule_json<'a>(
    rule: &'a parca_rules::CompiledRule,
    state: &'a RuleState,
    exclude_alerts: bool,
) -> RuleJson<'a> {
    let alert = rule.is_alert();
    RuleJson {
        state: alert.then(|| state.alerting_state().as_str()),
        name: rule.name(),
        query: &rule.rule.expr,
        duration: alert.then_some(rule.rule.for_.as_secs_f64()),
        keep_firing_for: alert.then_some(rule.rule.keep_firing_for.as_secs_f64()),
        labels: &rule.labels,
        annotations: alert.then_some(&rule.rule.annotations),
        alerts: (alert && !exclude_alerts)
            .then(|| state.active_alerts().map(AlertJson::new).collect()),
        health: state.health.as_str(),
        last_error: state.last_error.as_deref(),
        evaluation_time: state.evaluation_time.as_secs_f64(),
        last_evaluation: rfc3339(state.last_evaluation_ms),
        kind: if alert { "alerting" } else { "recording" },
    }
}

/// `GET /api/v1/alerts`: `{"alerts":[{labels, annotations, state, activeAt, value}]}`, every
/// pending and firing alert.
pub(crate) fn alerts(api: &Arc<Api>) -> Response<Body> {
    let groups = groups(api);
    let states: Vec<_> = groups.iter().map(|g| g.state()).collect();
    let alerts: Vec<AlertJson<'_>> = states
        .iter()
        .flat_map(|s| s.rules.iter())
        .flat_map(|r| r.active_alerts())
        .map(AlertJson::new)
        .collect();
    success(&serde_json::json!({ "alerts": alerts }))
}

/// Seconds since the epoch, as Prometheus writes times in JSON.
fn unix_s(ms: i64) -> f64 {
    ms as f64 / 1000.0
}

#[derive(Serialize)]
struct InsightJson<'a> {
    labels: &'a BTreeMap<String, String>,
    profile_type: &'a str,
    change: &'a parca_rules::Change,
    at: f64,
    before: [f64; 2],
    after: [f64; 2],
    functions: &'a [parca_rules::FunctionShare],
}

/// `GET /api/v1/insights`: every deploy insight, the newest first: `{labels, profile_type,
/// change: {label, from, to}, at, before: [start, end], after: [start, end], functions:
/// [{name, before, after, self_before, self_after}]}`, times in seconds since the epoch,
/// functions by `after − before` of the inclusive share, largest first.
pub(crate) fn insights(api: &Arc<Api>) -> Response<Body> {
    let list = api.insights.get().map(|i| i.list()).unwrap_or_default();
    let out: Vec<InsightJson<'_>> = list
        .iter()
        .map(|i| InsightJson {
            labels: &i.labels,
            profile_type: &i.profile_type,
            change: &i.change,
            at: unix_s(i.at_ms),
            before: i.before.map(unix_s),
            after: i.after.map(unix_s),
            functions: &i.functions,
        })
        .collect();
    success(&out)
}

/// The content type of Prometheus' text exposition format.
const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// `GET /federate?match[]=…`: the recorded series (and `ALERTS`) whose labels match any of the
/// selectors, in Prometheus' text format with their evaluation times, as a Prometheus scrapes
/// another's `/federate`. `global.external_labels` are added where a series lacks them.
/// Samples older than the lookback (`--query-lookback-delta`) are left out, as Prometheus
/// leaves out stale series. Without `match[]`: 400, as Prometheus.
#[expect(
    clippy::too_many_lines,
    reason = "Prometheus' /federate: matchers, rule series and insights in its text format"
)]
pub(crate) fn federate(api: &Arc<Api>, call: &Call) -> Result<Response<Body>, ApiError> {
    let texts = call.params.all("match[]");
    if texts.is_empty() {
        return Err(ApiError::bad_data(
            "give at least one `match[]` selector, such as match[]={__name__=~\"job:.*\"}",
        ));
    }
    let selectors: Vec<String> = texts.iter().map(|t| metric_selector(t)).collect();
    let selectors = crate::handlers::query::selectors_matchers(&selectors, "match[]")?;
    let now_ms = crate::clock::now_ms();
    let oldest_ms = now_ms - api.options.limits.lookback_ms;
    let mut samples: Vec<parca_rules::Sample> = api
        .rules
        .get()
        .map(|m| m.samples())
        .unwrap_or_default()
        .into_iter()
        .chain(
            api.insights
                .get()
                .map(|i| i.samples(now_ms))
                .unwrap_or_default(),
        )
        .filter(|s| s.timestamp_ms >= oldest_ms)
        .map(|mut s| {
            for (name, value) in &api.options.external_labels {
                s.labels
                    .entry(name.clone())
                    .or_insert_with(|| value.clone());
            }
            s
        })
        .filter(|s| {
            selectors.iter().any(|matchers| {
                matchers
                    .iter()
                    .all(|m| m.matches(s.labels.get(&m.name).map_or("", String::as_str)))
            })
        })
        .collect();
    let name = |s: &parca_rules::Sample| {
        s.labels
            .get(parca_tsdb::NAME_LABEL)
            .cloned()
            .unwrap_or_default()
    };
    samples.sort_by(|a, b| (name(a), &a.labels).cmp(&(name(b), &b.labels)));
    let mut out = String::new();
    let mut family = None;
    for s in &samples {
        let metric = name(s);
        if family.as_ref() != Some(&metric) {
            out.push_str(&format!("# TYPE {metric} untyped\n"));
            family = Some(metric.clone());
        }
        out.push_str(&metric);
        let mut first = true;
        for (label, value) in &s.labels {
            if label == parca_tsdb::NAME_LABEL {
                continue;
            }
            out.push(if first { '{' } else { ',' });
            first = false;
            out.push_str(label);
            out.push_str("=\"");
            for c in value.chars() {
                match c {
                    '\\' => out.push_str("\\\\"),
                    '"' => out.push_str("\\\""),
                    '\n' => out.push_str("\\n"),
                    c => out.push(c),
                }
            }
            out.push('"');
        }
        if !first {
            out.push('}');
        }
        out.push_str(&format!(
            " {} {}\n",
            crate::handlers::query::prom_float(s.value),
            s.timestamp_ms
        ));
    }
    Ok(crate::response::with_type(out, TEXT_FORMAT))
}

/// A PromQL selector led by a metric name (`job:cpu:sum{job="api"}`) as a label selector
/// (`{__name__="job:cpu:sum",job="api"}`): recorded series' names are metric names, not
/// profile types, which the query language's selectors name. Other text is kept.
fn metric_selector(text: &str) -> String {
    let text = text.trim();
    let end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(text.len());
    let (name, rest) = text.split_at(end);
    let rest = rest.trim_start();
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        return text.to_owned();
    }
    let inner = match rest.strip_prefix('{').and_then(|r| r.strip_suffix('}')) {
        Some(inner) => inner.trim(),
        None if rest.is_empty() => "",
        None => return text.to_owned(),
    };
    if inner.is_empty() {
        format!("{{__name__=\"{name}\"}}")
    } else {
        format!("{{__name__=\"{name}\",{inner}}}")
    }
}

#[cfg(test)]
mod tests {
    use super::metric_selector;

    #[test]
    fn metric_names_become_name_matchers() {
        assert_eq!(
            metric_selector("job:cpu:sum"),
            r#"{__name__="job:cpu:sum"}"#
        );
        assert_eq!(
            metric_selector(r#"job:cpu:sum{job="api"}"#),
            r#"{__name__="job:cpu:sum",job="api"}"#
        );
        assert_eq!(metric_selector("ALERTS {}"), r#"{__name__="ALERTS"}"#);
        assert_eq!(
            metric_selector(r#"{__name__=~"job:.*"}"#),
            r#"{__name__=~"job:.*"}"#
        );
    }
}
