//! A rule group: its rules, evaluated one after another at the group's interval, and their
//! state.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use parca_config::RuleGroup;
use parca_query::{Engine, InstantQuery};

use crate::Error;
use crate::for_state::{self, RestoreOptions, SavedAlert};
use crate::rule::{self, CompiledRule, Env, Health, RuleState, Sample};

/// A group of rules from one file, with the state of its rules.
#[derive(Debug)]
pub struct Group {
    /// The rule file it was read from.
    pub file: PathBuf,
    /// The group as written.
    pub spec: RuleGroup,
    /// Its interval: its own, or `global.evaluation_interval`.
    pub interval: Duration,
    rules: Vec<CompiledRule>,
    state: Mutex<GroupState>,
    /// The alerts saved before a restart, until its first evaluation restores them.
    to_restore: Mutex<Option<Vec<SavedAlert>>>,
}

/// What a group keeps between evaluations.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GroupState {
    /// Each rule's state, in the group's order.
    pub rules: Vec<RuleState>,
    /// When the group was last evaluated (ms).
    pub last_evaluation_ms: Option<i64>,
    /// How long its last evaluation took, all rules.
    pub evaluation_time: Duration,
}

impl Group {
    /// A group of `file`, its rules' expressions parsed, with fresh state.
    pub fn new(file: PathBuf, spec: RuleGroup, interval: Duration) -> Result<Group, Error> {
        let rules = spec
            .rules
            .iter()
            .map(|r| CompiledRule::new(r, &spec.labels))
            .collect::<Result<Vec<_>, _>>()?;
        let state = GroupState {
            rules: vec![RuleState::default(); rules.len()],
            ..Default::default()
        };
        Ok(Group {
            file,
            spec,
            interval,
            rules,
            state: Mutex::new(state),
            to_restore: Mutex::new(None),
        })
    }

    /// `file;name`: what tells the group from every other (metrics, saved alert state).
    pub fn key(&self) -> String {
        format!("{};{}", self.file.display(), self.name())
    }

    /// Has the group's next evaluation restore its alerts' `for` clocks from `saved` (the
    /// alerts it had before the server restarted).
    pub fn restore_after_next_evaluation(&self, saved: Vec<SavedAlert>) {
        if !saved.is_empty() {
            *self.to_restore.lock().expect("group state lock") = Some(saved);
        }
    }

    /// After an evaluation at `ts`: restores the `for` clocks of its alerts, once, if a restart
    /// left them saved ([`for_state::restore`], Prometheus' `RestoreForState`).
    pub fn restore_for_state(&self, ts: i64, options: RestoreOptions) {
        let Some(saved) = self.to_restore.lock().expect("group state lock").take() else {
            return;
        };
        let mut state = self.state.lock().expect("group state lock");
        for (rule, rule_state) in self.rules.iter().zip(state.rules.iter_mut()) {
            if rule.is_alert() {
                for_state::restore(rule, rule_state, &saved, ts, options);
            }
        }
    }

    /// Its pending and firing alerts to save, as seen by the evaluation at `ts`.
    pub fn alerts_to_save(&self, ts: i64) -> Vec<SavedAlert> {
        let state = self.state.lock().expect("group state lock");
        self.rules
            .iter()
            .zip(&state.rules)
            .filter(|(rule, _)| rule.is_alert())
            .flat_map(|(rule, rule_state)| for_state::to_save(rule, rule_state, ts))
            .collect()
    }

    /// The group's name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// Its rules, in order.
    pub fn rules(&self) -> &[CompiledRule] {
        &self.rules
    }

    /// A copy of its state.
    pub fn state(&self) -> GroupState {
        self.state.lock().expect("group state lock").clone()
    }

    /// Takes the state of `old` (the same group before a reload): the group's last evaluation,
    /// and each rule's state where `old` has a rule of the same kind, name and labels (the
    /// n-th such rule takes the n-th one's), as Prometheus' `CopyState`. So a changed
    /// expression keeps its firing alerts.
    pub fn copy_state(&self, old: &Group) {
        let old_state = old.state();
        let mut state = self.state.lock().expect("group state lock");
        state.last_evaluation_ms = old_state.last_evaluation_ms;
        state.evaluation_time = old_state.evaluation_time;
        let key = |r: &CompiledRule| (r.is_alert(), r.name().to_owned(), r.labels.clone());
        let mut taken = vec![false; old.rules.len()];
        for (i, rule) in self.rules.iter().enumerate() {
            let found = old
                .rules
                .iter()
                .enumerate()
                .find(|(j, r)| !taken[*j] && key(r) == key(rule));
            if let Some((j, _)) = found {
                taken[j] = true;
                state.rules[i] = old_state.rules[j].clone();
            }
        }
    }

    /// When the group is evaluated next after `after_ms`: on multiples of its interval, shifted
    /// by a phase fixed by its file and name (so groups spread out, and a restart keeps the
    /// phase), as Prometheus' `EvalTimestamp`.
    pub fn next_evaluation_ms(&self, after_ms: i64) -> i64 {
        let interval = (self.interval.as_millis() as i64).max(1);
        let offset = (fnv1a(
            self.file.to_string_lossy().as_bytes(),
            self.name().as_bytes(),
        ) % interval as u64) as i64;
        let base = (after_ms - offset).div_euclid(interval) * interval + offset;
        if base > after_ms {
            base
        } else {
            base + interval
        }
    }

    /// Evaluates every rule at `ts` (ms), one after another, each as `/api/v1/query`
    /// evaluates a series-valued query at that time ([`Engine::instant_series`]), within
    /// the group's interval. A failing rule is marked `err` with its error; the others go
    /// on. The rules share their reads ([`Engine::sharing_reads`]): rules over one selector
    /// read its profiles once per evaluation.
    pub fn evaluate(&self, engine: &Engine, ts: i64, env: Env<'_>) {
        let started = Instant::now();
        // The rules read at one time: each selector's profiles are read once for all of them.
        let engine = engine.clone().sharing_reads();
        // Templates' `query` runs at the same time, with the same reads.
        let query: crate::template::QueryFn = {
            let engine = engine.clone();
            std::sync::Arc::new(move |text: &str| {
                let expr = parca_querylang::parse_rule_query(text).map_err(|e| e.message)?;
                let series = engine
                    .instant_series(&expr, &InstantQuery::at(ts))
                    .map_err(|e| e.to_string())?;
                Ok(rule::latest(&series))
            })
        };
        let env = Env {
            query: Some(&query),
            ..env
        };
        for (i, rule) in self.rules.iter().enumerate() {
            let rule_started = Instant::now();
            let result = engine
                .clone()
                .with_deadline(rule_started + self.interval)
                .instant_series(&rule.expr, &InstantQuery::at(ts))
                .map_err(Error::Query);
            // Worked on outside the lock: its templates' `query` may read this group's
            // recorded series.
            let mut rule_state = self.state.lock().expect("group state lock").rules[i].clone();
            let outcome = result.and_then(|series| {
                if rule.is_alert() {
                    rule::alert(rule, &mut rule_state, &series, ts, self.spec.limit, env)
                } else {
                    rule::record(rule, &series, ts, self.spec.limit)
                        .map(|samples| rule_state.samples = samples)
                }
            });
            match outcome {
                Ok(()) => {
                    rule_state.health = Health::Ok;
                    rule_state.last_error = None;
                }
                Err(e) => {
                    tracing::warn!(group = self.name(), rule = rule.name(), error = %e, "rule evaluation failed");
                    rule_state.health = Health::Err;
                    rule_state.last_error = Some(e.to_string());
                    if !rule.is_alert() {
                        rule_state.samples.clear();
                    }
                }
            }
            rule_state.last_evaluation_ms = Some(ts);
            rule_state.evaluation_time = rule_started.elapsed();
            self.state.lock().expect("group state lock").rules[i] = rule_state;
        }
        let mut state = self.state.lock().expect("group state lock");
        state.last_evaluation_ms = Some(ts);
        state.evaluation_time = started.elapsed();
    }

    /// Its latest samples of the series named `name`: a recording rule's (`record: name`), or
    /// `ALERTS` and `ALERTS_FOR_STATE` of its alerting rules.
    pub fn samples_named(&self, name: &str) -> Vec<Sample> {
        let state = self.state.lock().expect("group state lock");
        let mut out = Vec::new();
        for (rule, rule_state) in self.rules.iter().zip(&state.rules) {
            let at = rule_state.last_evaluation_ms.unwrap_or(0);
            match (rule.is_alert(), name) {
                (true, "ALERTS") => out.extend(rule::alerts_series(rule_state, at)),
                (true, "ALERTS_FOR_STATE") => {
                    out.extend(rule::alerts_for_state_series(rule_state, at));
                }
                (false, _) if rule.name() == name => {
                    out.extend(rule_state.samples.iter().cloned());
                }
                _ => {}
            }
        }
        out
    }

    /// [`Group::samples_named`] as the query engine reads a recorded series: labels, value, time.
    pub fn latest_named(&self, name: &str) -> Vec<(parca_tsdb::Labels, f64, i64)> {
        self.samples_named(name)
            .into_iter()
            .filter_map(|s| {
                let labels = parca_tsdb::Labels::new(s.labels).ok()?;
                Some((labels, s.value, s.timestamp_ms))
            })
            .collect()
    }

    /// The group's recorded samples and `ALERTS` and `ALERTS_FOR_STATE` series, from its last
    /// evaluation.
    pub fn samples(&self) -> Vec<Sample> {
        let state = self.state.lock().expect("group state lock");
        let mut out = Vec::new();
        for (rule, rule_state) in self.rules.iter().zip(&state.rules) {
            if rule.is_alert() {
                let at = rule_state.last_evaluation_ms.unwrap_or(0);
                out.extend(rule::alerts_series(rule_state, at));
                out.extend(rule::alerts_for_state_series(rule_state, at));
            } else {
                out.extend(rule_state.samples.iter().cloned());
            }
        }
        out
    }

    /// The alerts to send to Alertmanager after the evaluation at `ts` (Prometheus'
    /// `sendAlerts`): firing ones not sent for `resend_delay`, and resolved ones not sent since
    /// they were resolved (then again every `resend_delay` while they are kept). Each is valid
    /// for four times the larger of `resend_delay` and the group's interval unless sent again;
    /// a resolved one ends when it was resolved.
    pub fn notifications(
        &self,
        ts: i64,
        resend_delay: Duration,
        external_url: &str,
    ) -> Vec<crate::Notification> {
        let resend_ms = resend_delay.as_millis() as i64;
        let valid_ms = 4 * resend_ms.max(self.interval.as_millis() as i64);
        let mut state = self.state.lock().expect("group state lock");
        let mut out = Vec::new();
        for (rule, rule_state) in self.rules.iter().zip(state.rules.iter_mut()) {
            if !rule.is_alert() {
                continue;
            }
            let generator_url = generator_url(external_url, &rule.rule.expr);
            for alert in rule_state.alerts.values_mut() {
                if !needs_sending(alert, ts, resend_ms) {
                    continue;
                }
                alert.last_sent_at_ms = Some(ts);
                out.push(crate::Notification {
                    labels: alert.labels.clone(),
                    annotations: alert.annotations.clone(),
                    starts_at_ms: alert.fired_at_ms.unwrap_or(alert.active_at_ms),
                    ends_at_ms: alert.resolved_at_ms.unwrap_or(ts + valid_ms),
                    generator_url: generator_url.clone(),
                });
            }
        }
        out
    }

    /// Whether `other` is the same group, unchanged (file, rules, interval): a reload keeps
    /// such a group running as it is.
    pub fn same_as(&self, other: &Group) -> bool {
        self.file == other.file && self.spec == other.spec && self.interval == other.interval
    }
}

/// Prometheus' `needsSending`: never a pending alert; a resolved one not sent since it was
/// resolved; otherwise one not sent for `resend_ms`.
fn needs_sending(alert: &crate::Alert, ts: i64, resend_ms: i64) -> bool {
    if alert.state == crate::AlertState::Pending {
        return false;
    }
    match (alert.resolved_at_ms, alert.last_sent_at_ms) {
        (Some(resolved), Some(sent)) if resolved > sent => true,
        (_, None) => true,
        (_, Some(sent)) => sent + resend_ms <= ts,
    }
}

/// The link Prometheus gives an alert: the expression in the expression browser's table,
/// under `--web-external-url`.
fn generator_url(external_url: &str, expr: &str) -> String {
    let mut encoded = String::with_capacity(expr.len() * 3);
    for b in expr.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            encoded.push(b as char);
        } else {
            encoded.push_str(&format!("%{b:02X}"));
        }
    }
    let base = external_url.trim_end_matches('/');
    format!("{base}/graph?g0.expr={encoded}&g0.tab=1")
}

/// FNV-1a over two byte strings with a separator: a phase that stays the same across runs.
fn fnv1a(a: &[u8], b: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in a.iter().chain(&[0xff]).chain(b) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// The external labels and URL templates see, owned.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Environment {
    /// `global.external_labels`.
    pub external_labels: BTreeMap<String, String>,
    /// `--web-external-url`, or empty.
    pub external_url: String,
}

impl Environment {
    /// Borrowed, for templates.
    pub fn env(&self) -> Env<'_> {
        Env {
            external_labels: &self.external_labels,
            external_url: &self.external_url,
            query: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::AlertState;

    const HEAP: &str = "memory:inuse_space:bytes:space:bytes{job=\"go\"}";

    /// A store with one heap profile of job `go` and one of job `other` at 1,000 s.
    fn engine() -> (tempfile::TempDir, Engine) {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = parca_tsdb::Db::open(dir.path(), Default::default()).expect("open");
        let path = format!(
            "{}/../../tests/testdata/pprof/go/go-heap.pb.gz",
            env!("CARGO_MANIFEST_DIR")
        );
        let profiles =
            parca_profile::decode(&std::fs::read(path).expect("corpus"), &Default::default())
                .expect("valid");
        let mut appender = db.appender();
        for profile in profiles {
            let name = format!(
                "memory:{}:{}:{}:{}",
                profile.meta.sample_type.kind,
                profile.meta.sample_type.unit,
                profile.meta.period_type.kind,
                profile.meta.period_type.unit
            );
            for job in ["go", "other"] {
                let labels = parca_tsdb::Labels::new([("__name__", name.as_str()), ("job", job)])
                    .expect("labels");
                appender
                    .append(&labels, 1_000_000, &profile)
                    .expect("append");
            }
        }
        appender.commit().expect("commit");
        (dir, Engine::new(Arc::new(db), Default::default()))
    }

    fn group(yaml: &str) -> Group {
        let mut file = parca_config::parse_rules(yaml, "r.yml").expect("rules");
        Group::new(
            "r.yml".into(),
            file.groups.remove(0),
            Duration::from_secs(60),
        )
        .expect("group")
    }

    /// The group's own recorded series, for its rules' queries.
    struct OwnSeries(std::sync::Arc<Group>);

    impl parca_query::RecordedSeries for OwnSeries {
        fn latest(&self, name: &str) -> Vec<(parca_tsdb::Labels, f64, i64)> {
            self.0.latest_named(name)
        }
    }

    #[test]
    fn rules_read_the_series_rules_before_them_recorded() {
        let (_dir, engine) = engine();
        let g = std::sync::Arc::new(group(&format!(
            "groups: [{{name: g, rules: [
               {{record: 'job:heap:sum', expr: 'sum by (job) ({HEAP})'}},
               {{alert: Held, expr: 'job:heap:sum > 0', annotations: {{all: '{{{{ with query \"job:heap:sum\" }}}}{{{{ . | first | value }}}}{{{{ end }}}}'}}}},
               {{record: 'job:heap:double', expr: 'job:heap:sum{{job=\"go\"}} * 2'}},
               {{record: 'firing', expr: 'count(ALERTS{{alertstate=\"firing\"}})'}},
               {{record: 'ranged', expr: 'sum(job:heap:sum[5m])'}}
             ]}}]"
        )));
        let engine = engine.with_recorded_series(std::sync::Arc::new(OwnSeries(g.clone())));
        let at = 1_000_000 + 10_000;
        g.evaluate(&engine, at, Environment::default().env());
        let state = g.state();
        let recorded = state.rules[0].samples[0].value;
        assert!(recorded > 0.0);
        let alert = state.rules[1].alerts.values().next().expect("an alert");
        assert_eq!(alert.state, AlertState::Firing);
        assert_eq!(alert.value, recorded);
        assert_eq!(alert.annotations["all"], recorded.to_string());
        assert_eq!(state.rules[2].samples[0].value, 2.0 * recorded);
        assert_eq!(state.rules[3].samples[0].value, 1.0);
        assert_eq!(state.rules[4].health, Health::Err);
        assert!(
            state.rules[4]
                .last_error
                .as_deref()
                .is_some_and(|e| e.contains("takes no range")),
            "{:?}",
            state.rules[4].last_error
        );
        // Past the lookback, nothing recorded then is read.
        let later = at + 10 * 60_000;
        assert!(g.latest_named("job:heap:sum")[0].2 == at);
        g.evaluate(&engine, later, Environment::default().env());
        assert!(g.state().rules[2].samples.is_empty());
    }

    #[test]
    fn rules_evaluate_as_the_query_api_does() {
        let (_dir, engine) = engine();
        let g = group(&format!(
            "groups: [{{name: g, labels: {{team: t}}, rules: [
               {{record: 'job:heap:sum', expr: 'sum by (job) ({HEAP})'}},
               {{alert: Big, expr: 'sum by (job) ({HEAP}) > 0', annotations: {{summary: '{{{{ $labels.job }}}}: {{{{ $value | humanize1024 }}}}B'}}}},
               {{record: 'clash', expr: 'sum by (job) (memory:inuse_space:bytes:space:bytes)', labels: {{job: same}}}}
             ]}}]"
        ));
        let at = 1_000_000 + 10_000;
        let env = Environment::default();
        g.evaluate(&engine, at, env.env());
        let want = engine
            .instant_series(
                &parca_querylang::parse(&format!("sum by (job) ({HEAP})")).unwrap(),
                &parca_query::InstantQuery::at(at),
            )
            .unwrap();
        let value = want[0].points[0].value;
        assert!(value > 0.0);
        let state = g.state();
        assert_eq!(state.last_evaluation_ms, Some(at));
        let recorded = &state.rules[0];
        assert_eq!(recorded.health, Health::Ok);
        assert_eq!(recorded.samples.len(), 1);
        assert_eq!(recorded.samples[0].value, value);
        assert_eq!(recorded.samples[0].timestamp_ms, at);
        assert_eq!(recorded.samples[0].labels["__name__"], "job:heap:sum");
        assert_eq!(recorded.samples[0].labels["team"], "t");
        let alerting = &state.rules[1];
        assert_eq!(alerting.alerting_state(), AlertState::Firing);
        let alert = alerting.alerts.values().next().unwrap();
        assert_eq!(alert.labels["team"], "t");
        assert!(
            alert.annotations["summary"].starts_with("go: "),
            "{alert:?}"
        );
        assert_eq!(state.rules[2].health, Health::Err);
        assert_eq!(
            state.rules[2].last_error.as_deref(),
            Some("vector contains metrics with the same labelset after applying rule labels")
        );
        // Samples: the recorded series, and `ALERTS` and `ALERTS_FOR_STATE` of the firing
        // alert (when it became active, in seconds).
        let samples = g.samples();
        assert_eq!(samples.len(), 3);
        assert_eq!(samples[1].labels["__name__"], "ALERTS");
        assert_eq!(samples[1].labels["alertstate"], "firing");
        assert_eq!(samples[2].labels["__name__"], "ALERTS_FOR_STATE");
        assert_eq!(samples[2].labels.get("alertstate"), None);
        assert_eq!(samples[2].value, (alert.active_at_ms / 1000) as f64);
        // Past the lookback the profile is no longer seen: the alert resolves, the series
        // goes away.
        g.evaluate(&engine, at + 10 * 60_000, env.env());
        let state = g.state();
        assert!(state.rules[0].samples.is_empty());
        assert_eq!(state.rules[1].alerting_state(), AlertState::Inactive);
    }

    #[test]
    fn alerts_are_sent_firing_resent_and_resolved() {
        let (_dir, engine) = engine();
        let g = group(&format!(
            "groups: [{{name: g, rules: [{{alert: A, expr: 'sum({HEAP}) > 0', for: 1m}}]}}]"
        ));
        let env = Environment::default();
        let minute = Duration::from_secs(60);
        let t0 = 1_000_000 + 1_000;
        g.evaluate(&engine, t0, env.env());
        assert!(
            g.notifications(t0, minute, "http://p/").is_empty(),
            "pending: not sent"
        );
        let t1 = t0 + 60_000;
        g.evaluate(&engine, t1, env.env());
        let sent = g.notifications(t1, minute, "http://p:7070/");
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].starts_at_ms, t1);
        assert_eq!(sent[0].ends_at_ms, t1 + 4 * 60_000);
        assert_eq!(sent[0].labels["alertname"], "A");
        assert!(
            sent[0]
                .generator_url
                .starts_with("http://p:7070/graph?g0.expr=sum%28memory"),
            "{}",
            sent[0].generator_url
        );
        // Not again before the resend delay; again after it.
        assert!(g.notifications(t1 + 59_999, minute, "").is_empty());
        assert_eq!(g.notifications(t1 + 60_000, minute, "").len(), 1);
        // Resolved (past the lookback): sent at once with its end.
        let t2 = t1 + 10 * 60_000;
        g.evaluate(&engine, t2, env.env());
        let sent = g.notifications(t2, minute, "");
        assert_eq!(sent.len(), 1);
        assert_eq!((sent[0].starts_at_ms, sent[0].ends_at_ms), (t1, t2));
        assert!(g.notifications(t2 + 1, minute, "").is_empty());
    }

    #[test]
    fn evaluation_times_keep_their_phase() {
        let g = group(&format!(
            "groups: [{{name: g, rules: [{{record: r, expr: 'sum({HEAP})'}}]}}]"
        ));
        let first = g.next_evaluation_ms(1_000_000);
        assert!(first > 1_000_000 && first <= 1_060_000);
        assert_eq!(g.next_evaluation_ms(first), first + 60_000);
        assert_eq!(g.next_evaluation_ms(first - 1), first);
    }

    #[test]
    fn copied_state_follows_names_and_labels() {
        let (_dir, engine) = engine();
        let old = group(&format!(
            "groups: [{{name: g, rules: [{{alert: A, expr: 'sum({HEAP}) > 0', for: 1m}}, {{record: r, expr: 'sum({HEAP})'}}]}}]"
        ));
        old.evaluate(&engine, 1_000_000, Environment::default().env());
        assert_eq!(old.state().rules[0].alerting_state(), AlertState::Pending);
        // The alert's expression changed and a rule was added before it: its pending alert
        // stays, with its activeAt.
        let new = group(&format!(
            "groups: [{{name: g, rules: [{{record: r2, expr: 'sum({HEAP})'}}, {{alert: A, expr: 'sum({HEAP}) > 1', for: 1m}}]}}]"
        ));
        new.copy_state(&old);
        let state = new.state();
        assert_eq!(state.rules[0], RuleState::default());
        assert_eq!(state.rules[1].alerting_state(), AlertState::Pending);
        assert_eq!(state.last_evaluation_ms, Some(1_000_000));
        new.evaluate(&engine, 1_060_000, Environment::default().env());
        let alert = new.state().rules[1]
            .alerts
            .values()
            .next()
            .cloned()
            .unwrap();
        assert_eq!(
            (alert.state, alert.active_at_ms),
            (AlertState::Firing, 1_000_000)
        );
    }
}
