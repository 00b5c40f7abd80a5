//! One rule's evaluation and state: a recording rule's latest samples, an alerting rule's
//! alerts through pending → firing → inactive, as Prometheus' `rules/recording.go` and
//! `rules/alerting.go` do it.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use parca_config::{Rule, RuleKind};
use parca_query::RangeSeries;
use parca_querylang::Expr;

use crate::Error;
use crate::template::{TemplateData, expand};

/// The label of the alert's name, as Prometheus sets it.
pub const ALERT_NAME_LABEL: &str = "alertname";

/// How long a resolved alert is kept (and sent to Alertmanager as resolved), as Prometheus.
pub const RESOLVED_RETENTION: Duration = Duration::from_secs(15 * 60);

/// A sample of a recorded series (or of `ALERTS`): its labels, `__name__` included.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Labels, `__name__` the rule's `record`.
    pub labels: BTreeMap<String, String>,
    /// The value.
    pub value: f64,
    /// The evaluation time, milliseconds since the epoch.
    pub timestamp_ms: i64,
}

/// Where an alert is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum AlertState {
    /// Its condition no longer holds (resolved): kept a while to be sent as resolved.
    Inactive,
    /// Its condition holds, not yet for `for`.
    Pending,
    /// Its condition has held for `for`.
    Firing,
}

impl AlertState {
    /// Prometheus' name: `inactive`, `pending`, `firing`.
    pub fn as_str(self) -> &'static str {
        match self {
            AlertState::Inactive => "inactive",
            AlertState::Pending => "pending",
            AlertState::Firing => "firing",
        }
    }
}

/// One alert of an alerting rule.
#[derive(Debug, Clone, PartialEq)]
pub struct Alert {
    /// Its labels: the sample's (without `__name__`), the rule's and group's expanded, and
    /// `alertname`.
    pub labels: BTreeMap<String, String>,
    /// The rule's annotations, expanded.
    pub annotations: BTreeMap<String, String>,
    /// Its state.
    pub state: AlertState,
    /// The sample's value at the last evaluation that saw it.
    pub value: f64,
    /// When it became pending (ms).
    pub active_at_ms: i64,
    /// When it fired (ms), if it did.
    pub fired_at_ms: Option<i64>,
    /// When it was resolved (ms), if it was.
    pub resolved_at_ms: Option<i64>,
    /// Since when it fires only by `keep_firing_for` (ms).
    pub keep_firing_since_ms: Option<i64>,
    /// When it was last sent to Alertmanager (ms), for the resend delay.
    pub last_sent_at_ms: Option<i64>,
}

/// A rule's health after its last evaluation, as Prometheus names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// Not evaluated yet.
    Unknown,
    /// The last evaluation succeeded.
    Ok,
    /// The last evaluation failed ([`RuleState::last_error`]).
    Err,
}

impl Health {
    /// Prometheus' name: `unknown`, `ok`, `err`.
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Unknown => "unknown",
            Health::Ok => "ok",
            Health::Err => "err",
        }
    }
}

/// What a rule keeps between evaluations.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleState {
    /// Health after the last evaluation.
    pub health: Health,
    /// Why the last evaluation failed.
    pub last_error: Option<String>,
    /// When it was last evaluated (ms).
    pub last_evaluation_ms: Option<i64>,
    /// How long its last evaluation took.
    pub evaluation_time: Duration,
    /// A recording rule's samples of its last successful evaluation.
    pub samples: Vec<Sample>,
    /// An alerting rule's alerts, by their labels (pending, firing, and recently resolved).
    pub alerts: BTreeMap<BTreeMap<String, String>, Alert>,
}

impl Default for RuleState {
    fn default() -> Self {
        RuleState {
            health: Health::Unknown,
            last_error: None,
            last_evaluation_ms: None,
            evaluation_time: Duration::ZERO,
            samples: Vec::new(),
            alerts: BTreeMap::new(),
        }
    }
}

impl RuleState {
    /// The alerts that are pending or firing.
    pub fn active_alerts(&self) -> impl Iterator<Item = &Alert> {
        self.alerts
            .values()
            .filter(|a| a.state != AlertState::Inactive)
    }

    /// An alerting rule's state, as Prometheus shows it: its most advanced alert's.
    pub fn alerting_state(&self) -> AlertState {
        self.active_alerts()
            .map(|a| a.state)
            .max()
            .unwrap_or(AlertState::Inactive)
    }
}

/// A rule with its expression parsed and its group's labels folded in.
#[derive(Debug, Clone)]
pub struct CompiledRule {
    /// The rule as written.
    pub rule: Rule,
    /// Its expression, parsed.
    pub expr: Expr,
    /// The group's labels with the rule's over them.
    pub labels: BTreeMap<String, String>,
}

impl CompiledRule {
    /// Parses the rule's expression (checked already when the file was read) and merges its
    /// group's labels.
    pub fn new(rule: &Rule, group_labels: &BTreeMap<String, String>) -> Result<Self, Error> {
        let expr = parca_querylang::parse_rule_query(&rule.expr).map_err(|e| Error::Parse {
            rule: rule.kind.name().to_owned(),
            message: e.message,
        })?;
        let mut labels = group_labels.clone();
        labels.extend(rule.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        Ok(CompiledRule {
            rule: rule.clone(),
            expr,
            labels,
        })
    }

    /// The rule's name (`record` or `alert`).
    pub fn name(&self) -> &str {
        self.rule.kind.name()
    }

    /// Whether it is an alerting rule.
    pub fn is_alert(&self) -> bool {
        matches!(self.rule.kind, RuleKind::Alert(_))
    }
}

/// The environment a rule's templates see beside the alert.
#[derive(Clone, Copy)]
pub struct Env<'a> {
    /// `global.external_labels`.
    pub external_labels: &'a BTreeMap<String, String>,
    /// `--web-external-url`, or empty.
    pub external_url: &'a str,
    /// What templates' `query` evaluates with (at the evaluation time); `None`: they cannot.
    pub query: Option<&'a crate::template::QueryFn>,
}

impl std::fmt::Debug for Env<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Env")
            .field("external_labels", &self.external_labels)
            .field("external_url", &self.external_url)
            .field("query", &self.query.is_some())
            .finish()
    }
}

/// A sample of the query's result: its labels and value at the evaluation time.
pub(crate) fn latest(series: &[RangeSeries]) -> Vec<(BTreeMap<String, String>, f64)> {
    series
        .iter()
        .filter_map(|s| {
            let point = s.points.last()?;
            let labels = s
                .labels
                .iter()
                .map(|l| (l.name.clone(), l.value.clone()))
                .collect();
            Some((labels, point.value))
        })
        .collect()
}

/// A recording rule's samples from the query's result (Prometheus' `RecordingRule.Eval`): each
/// series renamed to the rule's `record`, the rule's labels set over its own (an empty value
/// removes a label); two samples with the same labels, or more than `limit` (when not 0), are
/// an error.
pub fn record(
    rule: &CompiledRule,
    series: &[RangeSeries],
    timestamp_ms: i64,
    limit: usize,
) -> Result<Vec<Sample>, Error> {
    let mut samples: Vec<Sample> = latest(series)
        .into_iter()
        .map(|(mut labels, value)| {
            labels.insert(parca_tsdb::NAME_LABEL.to_owned(), rule.name().to_owned());
            for (name, value) in &rule.labels {
                if value.is_empty() {
                    labels.remove(name);
                } else {
                    labels.insert(name.clone(), value.clone());
                }
            }
            Sample {
                labels,
                value,
                timestamp_ms,
            }
        })
        .collect();
    samples.sort_by(|a, b| a.labels.cmp(&b.labels));
    if samples.windows(2).any(|w| w[0].labels == w[1].labels) {
        return Err(Error::SameLabelset {
            what: "rule labels",
        });
    }
    if limit > 0 && samples.len() > limit {
        return Err(Error::Limit {
            limit,
            n: samples.len(),
            what: "series",
        });
    }
    Ok(samples)
}

/// One evaluation of an alerting rule (Prometheus' `AlertingRule.Eval`) over the query's
/// result at `ts`: each sample is an alert, with its labels (the sample's without `__name__`,
/// then the rule's, expanded, then `alertname`) and annotations expanded; an alert seen before
/// keeps its `activeAt` and state, a new one is pending, one pending for `for` fires, one no
/// longer seen is resolved (unless `keep_firing_for` holds it), a pending one is dropped, and a
/// resolved one is forgotten after [`RESOLVED_RETENTION`]. More than `limit` active alerts (when
/// not 0) drop them all and are an error.
#[expect(
    clippy::too_many_lines,
    reason = "one evaluation of an alerting rule follows Prometheus' state machine (inactive, pending, firing, resolved) step by step"
)]
pub fn alert(
    rule: &CompiledRule,
    state: &mut RuleState,
    series: &[RangeSeries],
    ts: i64,
    limit: usize,
    env: Env<'_>,
) -> Result<(), Error> {
    let alertname = rule.name().to_owned();
    let mut seen: HashMap<BTreeMap<String, String>, Alert> = HashMap::new();
    for (sample_labels, value) in latest(series) {
        let data = TemplateData {
            labels: &sample_labels,
            value,
            external_labels: env.external_labels,
            external_url: env.external_url,
            query: env.query,
        };
        let expand_or_note = |name: &str, text: &str| {
            expand(name, text, &data).unwrap_or_else(|why| {
                tracing::warn!(alert = %alertname, error = %why, "cannot expand a template");
                format!("<error expanding template: {why}>")
            })
        };
        let mut labels = sample_labels.clone();
        labels.remove(parca_tsdb::NAME_LABEL);
        for (name, text) in &rule.labels {
            let value = expand_or_note(name, text);
            if value.is_empty() {
                labels.remove(name);
            } else {
                labels.insert(name.clone(), value);
            }
        }
        labels.insert(ALERT_NAME_LABEL.to_owned(), alertname.clone());
        let annotations = rule
            .rule
            .annotations
            .iter()
            .map(|(name, text)| (name.clone(), expand_or_note(name, text)))
            .collect();
        if seen.contains_key(&labels) {
            return Err(Error::SameLabelset {
                what: "alert labels",
            });
        }
        seen.insert(
            labels.clone(),
            Alert {
                labels,
                annotations,
                state: AlertState::Pending,
                value,
                active_at_ms: ts,
                fired_at_ms: None,
                resolved_at_ms: None,
                keep_firing_since_ms: None,
                last_sent_at_ms: None,
            },
        );
    }
    for (labels, new) in seen.iter() {
        match state.alerts.get_mut(labels) {
            Some(old) if old.state != AlertState::Inactive => {
                old.value = new.value;
                old.annotations = new.annotations.clone();
            }
            _ => {
                state.alerts.insert(labels.clone(), new.clone());
            }
        }
    }
    let hold_ms = rule.rule.for_.as_millis() as i64;
    let keep_firing_ms = rule.rule.keep_firing_for.as_millis() as i64;
    let retention_ms = RESOLVED_RETENTION.as_millis() as i64;
    let mut n_active = 0;
    state.alerts.retain(|labels, a| {
        if !seen.contains_key(labels) {
            if keep_firing_ms > 0 && a.state == AlertState::Firing {
                let since = *a.keep_firing_since_ms.get_or_insert(ts);
                if ts - since < keep_firing_ms {
                    n_active += 1;
                    return true;
                }
            }
            if a.state == AlertState::Pending
                || a.resolved_at_ms.is_some_and(|at| ts - at > retention_ms)
            {
                return false;
            }
            if a.state != AlertState::Inactive {
                a.state = AlertState::Inactive;
                a.resolved_at_ms = Some(ts);
            }
            return true;
        }
        a.keep_firing_since_ms = None;
        n_active += 1;
        if a.state == AlertState::Pending && ts - a.active_at_ms >= hold_ms {
            a.state = AlertState::Firing;
            a.fired_at_ms = Some(ts);
        }
        true
    });
    if limit > 0 && n_active > limit {
        state.alerts.clear();
        return Err(Error::Limit {
            limit,
            n: n_active,
            what: "alerts",
        });
    }
    Ok(())
}

/// Prometheus' `ALERTS` series of a rule's active alerts: `ALERTS{alertname, alertstate, …} 1`.
pub fn alerts_series(state: &RuleState, timestamp_ms: i64) -> impl Iterator<Item = Sample> + '_ {
    state.active_alerts().map(move |a| {
        let mut labels = a.labels.clone();
        labels.insert(parca_tsdb::NAME_LABEL.to_owned(), "ALERTS".to_owned());
        labels.insert("alertstate".to_owned(), a.state.as_str().to_owned());
        Sample {
            labels,
            value: 1.0,
            timestamp_ms,
        }
    })
}

/// Prometheus' `ALERTS_FOR_STATE` series of a rule's active alerts: the alert's labels, valued
/// at when it became active (seconds since the epoch), from which a restart restores its `for`
/// clock.
pub fn alerts_for_state_series(
    state: &RuleState,
    timestamp_ms: i64,
) -> impl Iterator<Item = Sample> + '_ {
    state.active_alerts().map(move |a| {
        let mut labels = a.labels.clone();
        labels.insert(
            parca_tsdb::NAME_LABEL.to_owned(),
            "ALERTS_FOR_STATE".to_owned(),
        );
        Sample {
            labels,
            value: (a.active_at_ms / 1000) as f64,
            timestamp_ms,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use parca_query::Point;
    use parca_tsdb::Labels;

    fn series(pairs: &[(&str, f64)]) -> Vec<RangeSeries> {
        pairs
            .iter()
            .map(|(job, v)| RangeSeries {
                labels: Labels::new([("job", *job)]).unwrap(),
                points: vec![Point {
                    timestamp_ms: 0,
                    value: *v,
                    period_value: None,
                }],
                unit: "bytes".into(),
                period_unit: None,
            })
            .collect()
    }

    fn rule(yaml: &str) -> CompiledRule {
        let file = parca_config::parse_rules(yaml, "r.yml").unwrap();
        let group = &file.groups[0];
        CompiledRule::new(&group.rules[0], &group.labels).unwrap()
    }

    const ENV: Env<'static> = Env {
        external_labels: &BTreeMap::new(),
        external_url: "",
        query: None,
    };

    #[test]
    fn recording_renames_and_labels() {
        let r = rule(
            "groups: [{name: g, labels: {team: a, drop: x}, rules: [{record: 'job:x:sum', expr: 'sum(memory:inuse_space:bytes:space:bytes)', labels: {drop: ''}}]}]",
        );
        let out = record(&r, &series(&[("api", 2.0), ("db", 3.0)]), 7, 0).unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(
            out[0].labels,
            BTreeMap::from([
                ("__name__".into(), "job:x:sum".into()),
                ("job".into(), "api".into()),
                ("team".into(), "a".into())
            ])
        );
        assert_eq!((out[0].value, out[0].timestamp_ms), (2.0, 7));
        let err = record(&r, &series(&[("api", 2.0), ("db", 3.0)]), 7, 1).unwrap_err();
        assert_eq!(err.to_string(), "exceeded limit of 1 with 2 series");
        let r = rule(
            "groups: [{name: g, rules: [{record: r, expr: 'sum(memory:inuse_space:bytes:space:bytes)', labels: {job: same}}]}]",
        );
        let err = record(&r, &series(&[("api", 2.0), ("db", 3.0)]), 7, 0).unwrap_err();
        assert_eq!(
            err.to_string(),
            "vector contains metrics with the same labelset after applying rule labels"
        );
    }

    #[test]
    fn pending_firing_resolved_with_for() {
        let r = rule(
            "groups: [{name: g, rules: [{alert: Hot, expr: 'sum(memory:inuse_space:bytes:space:bytes)', for: 2m, labels: {severity: '{{ if gt $value 5.0 }}page{{ else }}ticket{{ end }}'}, annotations: {summary: '{{ $labels.job }} at {{ $value }}'}}]}]",
        );
        let mut state = RuleState::default();
        let min = 60_000;
        alert(&r, &mut state, &series(&[("api", 3.0)]), 0, 0, ENV).unwrap();
        let a = state.alerts.values().next().unwrap();
        assert_eq!(a.state, AlertState::Pending);
        assert_eq!(a.labels["alertname"], "Hot");
        assert_eq!(a.labels["severity"], "ticket");
        assert_eq!(a.annotations["summary"], "api at 3");
        alert(&r, &mut state, &series(&[("api", 4.0)]), min, 0, ENV).unwrap();
        assert_eq!(state.alerting_state(), AlertState::Pending);
        alert(&r, &mut state, &series(&[("api", 4.5)]), 2 * min, 0, ENV).unwrap();
        let a = state.alerts.values().next().unwrap();
        assert_eq!(
            (a.state, a.active_at_ms, a.fired_at_ms),
            (AlertState::Firing, 0, Some(2 * min))
        );
        assert_eq!(a.annotations["summary"], "api at 4.5");
        assert_eq!(
            alerts_series(&state, 1).next().unwrap().labels["alertstate"],
            "firing"
        );
        alert(&r, &mut state, &[], 3 * min, 0, ENV).unwrap();
        let a = state.alerts.values().next().unwrap();
        assert_eq!(
            (a.state, a.resolved_at_ms),
            (AlertState::Inactive, Some(3 * min))
        );
        assert_eq!(state.active_alerts().count(), 0);
        // Resolved alerts are kept 15 minutes, then forgotten.
        alert(&r, &mut state, &[], 18 * min, 0, ENV).unwrap();
        assert_eq!(state.alerts.len(), 1);
        alert(&r, &mut state, &[], 18 * min + 1, 0, ENV).unwrap();
        assert!(state.alerts.is_empty());
        // A pending alert whose condition goes away is dropped at once.
        alert(&r, &mut state, &series(&[("api", 3.0)]), 20 * min, 0, ENV).unwrap();
        alert(&r, &mut state, &[], 21 * min, 0, ENV).unwrap();
        assert!(state.alerts.is_empty());
    }

    #[test]
    fn keep_firing_for_and_limit() {
        let r = rule(
            "groups: [{name: g, rules: [{alert: Hot, expr: 'sum(memory:inuse_space:bytes:space:bytes)', keep_firing_for: 1m}]}]",
        );
        let mut state = RuleState::default();
        alert(&r, &mut state, &series(&[("api", 1.0)]), 0, 0, ENV).unwrap();
        assert_eq!(state.alerting_state(), AlertState::Firing);
        alert(&r, &mut state, &[], 10_000, 0, ENV).unwrap();
        let a = state.alerts.values().next().unwrap();
        assert_eq!(
            (a.state, a.keep_firing_since_ms),
            (AlertState::Firing, Some(10_000))
        );
        alert(&r, &mut state, &[], 69_999, 0, ENV).unwrap();
        assert_eq!(state.alerting_state(), AlertState::Firing);
        alert(&r, &mut state, &[], 70_000, 0, ENV).unwrap();
        assert_eq!(state.alerting_state(), AlertState::Inactive);
        let err = alert(
            &r,
            &mut state,
            &series(&[("a", 1.0), ("b", 1.0)]),
            80_000,
            1,
            ENV,
        )
        .unwrap_err();
        assert_eq!(err.to_string(), "exceeded limit of 1 with 2 alerts");
        assert!(state.alerts.is_empty());
    }
}
