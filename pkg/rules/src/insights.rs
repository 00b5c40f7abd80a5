//! Deploy insights: when a new value of a `change_label` (`version`) appears in a service's
//! profiles, the last `window` of the old value(s) is compared with the first `window` of the
//! new one, each function's share of the total (self and inclusive) before and after, and the
//! functions that moved by at least `min_change` are kept as an [`Insight`].
//!
//! A [`Insights`] watches the store for each `insights:` entry of parca.yaml: every tick it
//! reads the totals (no samples) of the profile type's series since what it read last, in time
//! order, and notes per service (the values of `by`) when each value of the change label was
//! last seen. A value *appears* at a profile when it was not seen in the `window` before it
//! while another value was (a deploy, or a rollback to an old version); the values seen in the
//! `window` before that other value's last profile are the old ones. The change is compared
//! once its new window is complete: both windows' profiles are merged in the store and their
//! top tables read. What it watched and every insight are kept in `insights.json` in the
//! store's directory (written whole to a temporary file, fsynced and renamed), so a restart
//! goes on where it stopped and serves the same insights.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use parca_config::InsightConfig;
use parca_query::Engine;
use parca_tsdb::{MatchOp, Matcher};
use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;

use crate::Error;
use crate::rule::Sample;

/// The file in the store's directory that holds the insights and what was watched.
pub const INSIGHTS_FILE: &str = "insights.json";

/// How many insights are kept; the oldest go first.
pub const MAX_INSIGHTS: usize = 1_000;

/// How many functions an insight lists at most: those that moved most (inclusive or self).
pub const MAX_FUNCTIONS: usize = 100;

/// How far back the first read of an entry looks, at least (a deploy shortly before the
/// server started, or before the entry was added, is still compared).
const FIRST_LOOKBACK_MS: i64 = 3_600_000;

/// How far before the latest profile read each read starts again, so that profiles that arrive
/// late (an agent pushes a window after it ends) are still seen.
const REREAD_MS: i64 = 120_000;

/// How often what was read is saved when no insight was made: a restart reads again from the
/// saved watermark, so a later save only spares it reading.
const SAVE_EVERY: Duration = Duration::from_secs(60);

/// How long a value that is no longer seen is remembered.
const FORGET_MS: i64 = 7 * 86_400_000;

/// The name of the series [`Insights::samples`] gives: a function's inclusive share after a
/// change minus before it.
pub const INSIGHT_METRIC: &str = "parca_insight_share_change";

/// One comparison of a service's profiles before and after its change label changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Insight {
    /// The profile type compared.
    pub profile_type: String,
    /// The service: the values of the entry's `by` labels.
    pub labels: BTreeMap<String, String>,
    /// What changed.
    pub change: Change,
    /// When the new value was first seen (ms since the epoch).
    pub at_ms: i64,
    /// The profiles of the old value(s) compared: `[start, end]` in ms.
    pub before: [i64; 2],
    /// The profiles of the new value compared: `[start, end]` in ms.
    pub after: [i64; 2],
    /// The functions whose share moved by at least the floor, by `after − before` of the
    /// inclusive share, largest first.
    pub functions: Vec<FunctionShare>,
}

/// The label that changed, from which value(s) to which.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// The change label, e.g. `version`.
    pub label: String,
    /// The old value; several, when several ran in the window before, joined by `,`.
    pub from: String,
    /// The new value.
    pub to: String,
}

/// A function's share of the total before and after a change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionShare {
    /// The function, named as the top table names it.
    pub name: String,
    /// Its inclusive share before (samples with it anywhere on the stack, over the total).
    pub before: f64,
    /// Its inclusive share after.
    pub after: f64,
    /// Its self share before (samples whose innermost frame it is, over the total).
    pub self_before: f64,
    /// Its self share after.
    pub self_after: f64,
}

/// What is kept on disk.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct State {
    /// Per entry ([`key`]), what was read.
    watches: BTreeMap<String, Watch>,
    /// Every insight, oldest first.
    insights: Vec<Insight>,
}

/// What one entry has read.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Watch {
    /// The latest profile time read.
    watermark_ms: Option<i64>,
    /// Per service (its labels as JSON), its values and changes waiting for their window.
    groups: BTreeMap<String, Service>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Service {
    labels: BTreeMap<String, String>,
    /// Per value of the change label, the latest profile time seen.
    last_seen: BTreeMap<String, i64>,
    /// Changes whose new window is not complete yet.
    pending: Vec<Pending>,
    /// When each value last made a change (so a change is compared once).
    changed_at: BTreeMap<String, i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Pending {
    from: Vec<String>,
    to: String,
    at_ms: i64,
    /// The end of the old values' window.
    before_end_ms: i64,
}

/// The identity of an entry: a change of `window` or `min_change` keeps what it read.
fn key(c: &InsightConfig) -> String {
    format!("{}|{}|{}", c.profile_type, c.by.join(","), c.change_label)
}

/// Watches the store for the `insights:` entries and keeps their insights.
pub struct Insights {
    engine: Engine,
    path: PathBuf,
    configs: Mutex<Vec<InsightConfig>>,
    state: Mutex<State>,
    /// When the state was last written.
    saved_at: Mutex<Option<std::time::Instant>>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Insights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Insights")
            .field("path", &self.path)
            .finish()
    }
}

impl Insights {
    /// Insights over `engine`'s store, kept in `dir/insights.json` (read now if it is there).
    /// A file that cannot be read is an error naming it.
    pub fn open(engine: Engine, dir: &Path) -> Result<Arc<Insights>, Error> {
        let path = dir.join(INSIGHTS_FILE);
        let state = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| Error::Insights(format!("cannot read `{}`: {e}", path.display())))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => State::default(),
            Err(e) => {
                return Err(Error::Insights(format!(
                    "cannot read `{}`: {e}",
                    path.display()
                )));
            }
        };
        Ok(Arc::new(Insights {
            engine,
            path,
            configs: Mutex::new(Vec::new()),
            state: Mutex::new(state),
            saved_at: Mutex::new(None),
            task: Mutex::new(None),
        }))
    }

    /// Watches `configs` from now on (start and reload); entries no longer configured are
    /// forgotten, their insights kept. Starts the watching task on the current tokio runtime
    /// if it does not run yet.
    pub fn update(self: &Arc<Self>, configs: &[InsightConfig]) {
        *self.configs.lock().expect("insights lock") = configs.to_vec();
        {
            let mut state = self.state.lock().expect("insights lock");
            let keys: BTreeSet<String> = configs.iter().map(key).collect();
            state.watches.retain(|k, _| keys.contains(k));
        }
        let mut task = self.task.lock().expect("insights lock");
        if task.is_none() && !configs.is_empty() {
            let me = Arc::clone(self);
            *task = Some(tokio::spawn(async move { me.run().await }));
        }
    }

    /// Ticks as long as the task runs: at a quarter of the shortest window, between 1 s and
    /// 15 s.
    async fn run(self: Arc<Self>) {
        loop {
            let every = {
                let configs = self.configs.lock().expect("insights lock");
                let shortest = configs.iter().map(|c| c.window).min();
                shortest.map_or(Duration::from_secs(15), |w| {
                    (w / 4).clamp(Duration::from_secs(1), Duration::from_secs(15))
                })
            };
            let me = Arc::clone(&self);
            let ticked = tokio::task::spawn_blocking(move || me.tick(crate::clock::now_ms())).await;
            match ticked {
                Ok(Err(error)) => tracing::warn!(%error, "deploy insights"),
                Err(error) => tracing::error!(%error, "deploy insights task failed"),
                Ok(Ok(())) => {}
            }
            tokio::time::sleep(every).await;
        }
    }

    /// Reads what the store got since the last tick, compares the changes whose window is
    /// complete at `now_ms`, and saves at once if an insight was made (else at most every
    /// minute: the saved state is whole, and a restart reads again from its watermark).
    /// Blocking.
    pub fn tick(&self, now_ms: i64) -> Result<(), Error> {
        let configs = self.configs.lock().expect("insights lock").clone();
        let before = self.state.lock().expect("insights lock").clone();
        let mut state = before.clone();
        let mut first_error = None;
        for config in &configs {
            let watch = state.watches.entry(key(config)).or_default();
            let made = watch_once(&self.engine, config, watch, now_ms);
            match made {
                Ok(made) => state.insights.extend(made),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if state.insights.len() > MAX_INSIGHTS {
            let n = state.insights.len() - MAX_INSIGHTS;
            state.insights.drain(..n);
        }
        if state != before {
            let mut saved_at = self.saved_at.lock().expect("insights lock");
            if state.insights != before.insights
                || saved_at.is_none_or(|t| t.elapsed() >= SAVE_EVERY)
            {
                crate::persist::write_json(&self.path, &state)
                    .map_err(|e| Error::Insights(e.to_string()))?;
                *saved_at = Some(std::time::Instant::now());
            }
            *self.state.lock().expect("insights lock") = state;
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Every insight, the newest first.
    pub fn list(&self) -> Vec<Insight> {
        let state = self.state.lock().expect("insights lock");
        let mut out = state.insights.clone();
        out.reverse();
        out
    }

    /// The latest insight of each service as series for `/federate`, stamped `now_ms`: per
    /// listed function, `parca_insight_share_change{<by labels>, profile_type, change_label,
    /// from, to, function}` = its inclusive share after minus before. An alerting rule of the
    /// Prometheus that scrapes them reads them (`parca_insight_share_change > 0.1`).
    pub fn samples(&self, now_ms: i64) -> Vec<Sample> {
        let state = self.state.lock().expect("insights lock");
        let mut latest: HashMap<(&str, &BTreeMap<String, String>, &str), &Insight> = HashMap::new();
        for insight in &state.insights {
            let k = (
                insight.profile_type.as_str(),
                &insight.labels,
                insight.change.label.as_str(),
            );
            if latest.get(&k).is_none_or(|i| i.at_ms <= insight.at_ms) {
                latest.insert(k, insight);
            }
        }
        let mut out = Vec::new();
        for insight in latest.into_values() {
            for f in &insight.functions {
                let mut labels = insight.labels.clone();
                labels.insert(parca_tsdb::NAME_LABEL.to_owned(), INSIGHT_METRIC.to_owned());
                labels.insert("profile_type".to_owned(), insight.profile_type.clone());
                labels.insert("change_label".to_owned(), insight.change.label.clone());
                labels.insert("from".to_owned(), insight.change.from.clone());
                labels.insert("to".to_owned(), insight.change.to.clone());
                labels.insert("function".to_owned(), f.name.clone());
                out.push(Sample {
                    labels,
                    value: f.after - f.before,
                    timestamp_ms: now_ms,
                });
            }
        }
        out
    }

    /// Stops watching.
    pub fn stop(&self) {
        if let Some(task) = self.task.lock().expect("insights lock").take() {
            task.abort();
        }
    }
}

impl Drop for Insights {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One tick of one entry: reads the profiles' times since the watermark, notes changes, and
/// compares those whose new window ended by `now_ms`.
fn watch_once(
    engine: &Engine,
    config: &InsightConfig,
    watch: &mut Watch,
    now_ms: i64,
) -> Result<Vec<Insight>, Error> {
    let window_ms = config.window.as_millis() as i64;
    let from_ms = match watch.watermark_ms {
        Some(w) => w - REREAD_MS,
        None => now_ms - FIRST_LOOKBACK_MS.max(2 * window_ms),
    };
    let matchers = [
        matcher(MatchOp::Equal, parca_tsdb::NAME_LABEL, &config.profile_type)?,
        matcher(MatchOp::NotEqual, &config.change_label, "")?,
    ];
    let series = engine
        .querier(from_ms, now_ms)
        .totals(&matchers)
        .map_err(|e| Error::Query(e.into()))?;
    // (time, service, value), in time order, each once.
    let mut seen: BTreeSet<(i64, String, String)> = BTreeSet::new();
    let mut services: HashMap<String, BTreeMap<String, String>> = HashMap::new();
    for s in &series {
        let labels: BTreeMap<String, String> = config
            .by
            .iter()
            .map(|n| (n.clone(), s.labels.get(n).unwrap_or("").to_owned()))
            .collect();
        let service = serde_json::to_string(&labels).unwrap_or_default();
        let value = s.labels.get(&config.change_label).unwrap_or("").to_owned();
        for p in &s.points {
            seen.insert((p.timestamp_ms, service.clone(), value.clone()));
        }
        services.entry(service).or_insert(labels);
    }
    for (t, service, value) in seen {
        let entry = watch
            .groups
            .entry(service.clone())
            .or_insert_with(|| Service {
                labels: services[&service].clone(),
                ..Default::default()
            });
        note(entry, &value, t, window_ms);
        watch.watermark_ms = Some(watch.watermark_ms.map_or(t, |w| w.max(t)));
    }
    let mut made = Vec::new();
    for service in watch.groups.values_mut() {
        let (due, waiting): (Vec<Pending>, Vec<Pending>) = std::mem::take(&mut service.pending)
            .into_iter()
            .partition(|p| p.at_ms + window_ms <= now_ms);
        service.pending = waiting;
        for p in due {
            match compare(engine, config, &service.labels, &p) {
                Ok(Some(insight)) => made.push(insight),
                Ok(None) => tracing::info!(
                    labels = ?service.labels, from = ?p.from, to = p.to,
                    "deploy insight not made: a window holds no profile"
                ),
                Err(e) => {
                    // Tried again at the next tick.
                    service.pending.push(p);
                    return Err(e);
                }
            }
        }
        if let Some(latest) = watch.watermark_ms {
            service.last_seen.retain(|_, t| *t > latest - FORGET_MS);
            service.changed_at.retain(|_, t| *t > latest - FORGET_MS);
        }
    }
    watch
        .groups
        .retain(|_, s| !s.last_seen.is_empty() || !s.pending.is_empty());
    Ok(made)
}

/// Notes a profile of `value` at `t` in `service`: a change when the value was not seen in the
/// window before and another value was.
fn note(service: &mut Service, value: &str, t: i64, window_ms: i64) {
    let previous = service.last_seen.get(value).copied();
    if previous.is_some_and(|p| p > t - window_ms) {
        service
            .last_seen
            .insert(value.to_owned(), previous.unwrap_or(t).max(t));
        return;
    }
    service
        .last_seen
        .insert(value.to_owned(), previous.unwrap_or(t).max(t));
    // The old values: those seen in the window before the latest other profile (at most `t`).
    let others = service
        .last_seen
        .iter()
        .filter(|(v, _)| v.as_str() != value);
    let Some(end) = others.clone().map(|(_, &last)| last.min(t)).max() else {
        return; // the first value of the service: nothing to compare with
    };
    let from: Vec<String> = others
        .filter(|(_, last)| **last > end - window_ms)
        .map(|(v, _)| v.clone())
        .collect();
    if from.is_empty() {
        return;
    }
    if service
        .changed_at
        .get(value)
        .is_some_and(|&at| (t - at).abs() < window_ms)
    {
        return;
    }
    service.changed_at.insert(value.to_owned(), t);
    service.pending.push(Pending {
        from,
        to: value.to_owned(),
        at_ms: t,
        before_end_ms: end,
    });
}

fn matcher(op: MatchOp, name: &str, value: &str) -> Result<Matcher, Error> {
    Matcher::new(op, name, value).map_err(|e| Error::Insights(e.to_string()))
}

/// The matchers of one side: the profile type, the service and the change label's value(s).
fn side_matchers(
    config: &InsightConfig,
    labels: &BTreeMap<String, String>,
    values: &[String],
) -> Result<Vec<Matcher>, Error> {
    let mut out = vec![matcher(
        MatchOp::Equal,
        parca_tsdb::NAME_LABEL,
        &config.profile_type,
    )?];
    for (name, value) in labels {
        out.push(matcher(MatchOp::Equal, name, value)?);
    }
    let pattern: Vec<String> = values.iter().map(|v| regex::escape(v)).collect();
    out.push(matcher(
        MatchOp::Re,
        &config.change_label,
        &pattern.join("|"),
    )?);
    Ok(out)
}

/// Compares the two windows of a change; `None` if either holds no profile.
fn compare(
    engine: &Engine,
    config: &InsightConfig,
    labels: &BTreeMap<String, String>,
    p: &Pending,
) -> Result<Option<Insight>, Error> {
    let window_ms = config.window.as_millis() as i64;
    let before = [p.before_end_ms - window_ms + 1, p.before_end_ms];
    let after = [p.at_ms, p.at_ms + window_ms - 1];
    let read = |[start, end]: [i64; 2], values: &[String]| -> Result<Option<Shares>, Error> {
        let matchers = side_matchers(config, labels, values)?;
        let merged = engine
            .summarized_querier(start, end, &[], i64::MAX)
            .merge(&matchers)
            .map_err(|e| Error::Query(e.into()))?;
        Ok(merged.as_ref().and_then(Shares::of))
    };
    let (Some(old), Some(new)) = (
        read(before, &p.from)?,
        read(after, std::slice::from_ref(&p.to))?,
    ) else {
        return Ok(None);
    };
    Ok(Some(Insight {
        profile_type: config.profile_type.clone(),
        labels: labels.clone(),
        change: Change {
            label: config.change_label.clone(),
            from: p.from.join(","),
            to: p.to.clone(),
        },
        at_ms: p.at_ms,
        before,
        after,
        functions: moved(&old, &new, config.min_change),
    }))
}

/// Per function, its (self, inclusive) share of a profile's total.
struct Shares(HashMap<String, (f64, f64)>);

impl Shares {
    /// `None` for a profile whose total is not positive.
    fn of(profile: &parca_profile::Profile) -> Option<Shares> {
        let top = parca_profile::TopTable::build(profile);
        if top.total <= 0 {
            return None;
        }
        let total = top.total as f64;
        Some(Shares(
            top.rows
                .into_iter()
                .map(|r| (r.name, (r.flat as f64 / total, r.cum as f64 / total)))
                .collect(),
        ))
    }
}

/// The functions whose self or inclusive share moved by at least `floor`, the
/// [`MAX_FUNCTIONS`] that moved most, sorted by the inclusive share's change, largest first.
fn moved(old: &Shares, new: &Shares, floor: f64) -> Vec<FunctionShare> {
    let names: BTreeSet<&String> = old.0.keys().chain(new.0.keys()).collect();
    let mut out: Vec<FunctionShare> = names
        .into_iter()
        .map(|name| {
            let (self_before, before) = old.0.get(name).copied().unwrap_or_default();
            let (self_after, after) = new.0.get(name).copied().unwrap_or_default();
            FunctionShare {
                name: name.clone(),
                before,
                after,
                self_before,
                self_after,
            }
        })
        .filter(|f| {
            (f.after - f.before).abs() >= floor || (f.self_after - f.self_before).abs() >= floor
        })
        .collect();
    let size = |f: &FunctionShare| {
        (f.after - f.before)
            .abs()
            .max((f.self_after - f.self_before).abs())
    };
    out.sort_by(|a, b| size(b).total_cmp(&size(a)));
    out.truncate(MAX_FUNCTIONS);
    out.sort_by(|a, b| {
        (b.after - b.before)
            .total_cmp(&(a.after - a.before))
            .then_with(|| a.name.cmp(&b.name))
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const CPU: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta";
    const T0: i64 = 1_700_000_000_000;

    fn config(window_s: u64) -> InsightConfig {
        InsightConfig {
            profile_type: CPU.into(),
            by: vec!["job".into()],
            change_label: "version".into(),
            window: Duration::from_secs(window_s),
            min_change: 0.01,
        }
    }

    /// Appends, every 10 s in `[from_s, to_s)` after T0, a profile of `job` at `version` with
    /// `stacks`.
    fn push(
        db: &parca_tsdb::Db,
        job: &str,
        version: &str,
        from_s: i64,
        to_s: i64,
        stacks: &[(&str, i64)],
    ) {
        let profile = parca_profile::test_support::profile(stacks);
        let labels =
            parca_tsdb::Labels::new([("__name__", CPU), ("job", job), ("version", version)])
                .expect("labels");
        let mut appender = db.appender();
        for s in (from_s..to_s).step_by(10) {
            appender
                .append(&labels, T0 + s * 1_000, &profile)
                .expect("append");
        }
        appender.commit().expect("commit");
    }

    const V1: &[(&str, i64)] = &[("main;serve;parse", 80), ("main;serve;encode", 20)];
    const V2: &[(&str, i64)] = &[("main;serve;parse", 30), ("main;serve;encode", 70)];

    #[tokio::test]
    async fn a_new_version_is_compared_with_the_old_and_kept_across_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(parca_tsdb::Db::open(dir.path(), Default::default()).unwrap());
        let engine = Engine::new(Arc::clone(&db), Default::default());
        let insights = Insights::open(engine.clone(), dir.path()).unwrap();
        insights.update(&[config(60)]);
        insights.stop(); // ticked by hand below
        push(&db, "api", "1", 0, 120, V1);
        push(&db, "other", "a", 0, 240, V1);
        insights.tick(T0 + 120_000).unwrap();
        assert!(
            insights.list().is_empty(),
            "one version: nothing to compare"
        );
        push(&db, "api", "2", 120, 170, V2);
        insights.tick(T0 + 170_000).unwrap();
        assert!(insights.list().is_empty(), "the new window is not complete");
        push(&db, "api", "2", 170, 240, V2);
        insights.tick(T0 + 180_000).unwrap();
        let list = insights.list();
        assert_eq!(list.len(), 1, "{list:?}");
        let insight = &list[0];
        assert_eq!(
            insight.labels,
            BTreeMap::from([("job".into(), "api".into())])
        );
        assert_eq!(
            insight.change,
            Change {
                label: "version".into(),
                from: "1".into(),
                to: "2".into()
            }
        );
        assert_eq!(insight.at_ms, T0 + 120_000);
        assert_eq!(insight.before, [T0 + 50_001, T0 + 110_000]);
        assert_eq!(insight.after, [T0 + 120_000, T0 + 179_999]);
        let names: Vec<&str> = insight.functions.iter().map(|f| f.name.as_str()).collect();
        // main and serve are at 100% on both sides: below the floor.
        assert_eq!(names, ["encode", "parse"]);
        let encode = &insight.functions[0];
        assert!((encode.before - 0.2).abs() < 1e-9 && (encode.after - 0.7).abs() < 1e-9);
        assert!((encode.self_before - 0.2).abs() < 1e-9 && (encode.self_after - 0.7).abs() < 1e-9);
        // Compared once, however often the store is read again.
        insights.tick(T0 + 240_000).unwrap();
        assert_eq!(insights.list().len(), 1);
        let samples = insights.samples(T0 + 240_000);
        assert_eq!(samples.len(), 2);
        let encode = samples
            .iter()
            .find(|s| s.labels["function"] == "encode")
            .unwrap();
        assert_eq!(encode.labels["__name__"], INSIGHT_METRIC);
        assert_eq!(
            (encode.labels["from"].as_str(), encode.labels["to"].as_str()),
            ("1", "2")
        );
        assert!((encode.value - 0.5).abs() < 1e-9);

        // A new server over the same folder serves the same insights and does not compare
        // again.
        drop(insights);
        let again = Insights::open(engine, dir.path()).unwrap();
        again.update(&[config(60)]);
        again.stop();
        assert_eq!(again.list(), list);
        again.tick(T0 + 250_000).unwrap();
        assert_eq!(again.list(), list);

        // A rollback to version 1 is a change too.
        push(&db, "api", "1", 300, 400, V1);
        again.tick(T0 + 400_000).unwrap();
        let list = again.list();
        assert_eq!(list.len(), 2);
        assert_eq!(
            (list[0].change.from.as_str(), list[0].change.to.as_str()),
            ("2", "1")
        );
        assert_eq!(list[0].functions[0].name, "parse");
    }

    #[test]
    fn changes_are_noted_once_with_their_old_values() {
        let mut s = Service::default();
        note(&mut s, "1", 0, 60_000);
        note(&mut s, "1", 10_000, 60_000);
        assert!(s.pending.is_empty(), "the first value is no change");
        // A rolling deploy: 2 appears while 1 still runs, then 1 goes.
        note(&mut s, "2", 15_000, 60_000);
        note(&mut s, "1", 20_000, 60_000);
        note(&mut s, "2", 25_000, 60_000);
        assert_eq!(
            s.pending,
            [Pending {
                from: vec!["1".into()],
                to: "2".into(),
                at_ms: 15_000,
                before_end_ms: 10_000
            }]
        );
        // Read again (late profiles): no second change.
        note(&mut s, "2", 15_000, 60_000);
        assert_eq!(s.pending.len(), 1);
        // The service stops for an hour and comes back with 3: compared with the last window
        // before it stopped, where 1 and 2 both ran.
        note(&mut s, "3", 3_700_000, 60_000);
        assert_eq!(s.pending[1].from, ["1", "2"]);
        assert_eq!(s.pending[1].before_end_ms, 25_000);
    }

    #[test]
    fn the_floor_leaves_out_small_moves() {
        let shares = |v: &[(&str, f64, f64)]| {
            Shares(v.iter().map(|&(n, s, c)| (n.to_owned(), (s, c))).collect())
        };
        let old = shares(&[("a", 0.1, 0.5), ("b", 0.2, 0.2), ("c", 0.0, 0.3)]);
        let new = shares(&[("a", 0.105, 0.505), ("b", 0.1, 0.1), ("d", 0.4, 0.4)]);
        let moved = moved(&old, &new, 0.01);
        let names: Vec<&str> = moved.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["d", "b", "c"]);
        assert_eq!(moved[2].after, 0.0);
    }
}
