//! Alert state across restarts, as Prometheus keeps it: each active alert's `ALERTS_FOR_STATE`
//! (when it became active) and when it was last seen active, kept in a file beside the store;
//! after a restart each group's first evaluation restores its alerts' `for` clocks from it
//! (Prometheus' `RestoreForState`), so a condition that held for 9 of a rule's 10 minutes before
//! the restart fires a minute (at least the grace period) after it, not 10 minutes after.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::rule::{Alert, AlertState, CompiledRule, RuleState};

/// The file, in the store's directory.
pub const FOR_STATE_FILE: &str = "alerts_for_state.json";

/// How often the file is written at most while only the alerts' last-seen times change (a new
/// or ended alert is written at once), whatever the number of groups: a restored `for` clock
/// loses at most this, or its group's interval, of the time it was pending before a crash.
const SAVE_EVERY: Duration = Duration::from_secs(1);

/// One active alert as saved: its rule, labels, when it became active and when it was last
/// seen active (ms since the epoch).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedAlert {
    /// The alerting rule's name.
    pub rule: String,
    /// The alert's labels (`alertname` included).
    pub labels: BTreeMap<String, String>,
    /// `ALERTS_FOR_STATE`'s value, in ms.
    pub active_at_ms: i64,
    /// The last evaluation that saw it active.
    pub seen_ms: i64,
}

/// The saved alerts of every group, by the group's file and name (`file;name`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Saved {
    groups: BTreeMap<String, Vec<SavedAlert>>,
}

/// The file of saved alert state, and what the server started with.
#[derive(Debug)]
pub struct ForStateStore {
    path: PathBuf,
    /// What the file held at start: each group restores from it once.
    at_start: Saved,
    current: Mutex<(Saved, Option<Instant>)>,
}

impl ForStateStore {
    /// The store of `dir/alerts_for_state.json`, with what it holds now. A file that cannot
    /// be read is logged and ignored: alerts then start over, as they would without it.
    pub fn open(dir: &Path) -> ForStateStore {
        let path = dir.join(FOR_STATE_FILE);
        let at_start = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                tracing::warn!(file = %path.display(), error = %e, "cannot read the saved alert state: pending and firing alerts start over");
                Saved::default()
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Saved::default(),
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "cannot read the saved alert state: pending and firing alerts start over");
                Saved::default()
            }
        };
        ForStateStore {
            path,
            current: Mutex::new((at_start.clone(), None)),
            at_start,
        }
    }

    /// What group `key` saved before the server started.
    pub fn saved(&self, key: &str) -> Vec<SavedAlert> {
        self.at_start.groups.get(key).cloned().unwrap_or_default()
    }

    /// Records group `key`'s active alerts after an evaluation; writes the file when the set of
    /// alerts changed or [`SAVE_EVERY`] passed. A failed write is logged (the next one tries
    /// again).
    pub fn record(&self, key: &str, alerts: Vec<SavedAlert>) {
        let mut current = self.current.lock().expect("alert state lock");
        let (saved, written_at) = &mut *current;
        let before = saved.groups.get(key);
        let same_alerts = |a: &[SavedAlert], b: &[SavedAlert]| {
            a.len() == b.len()
                && a.iter().zip(b).all(|(x, y)| {
                    (&x.rule, &x.labels, x.active_at_ms) == (&y.rule, &y.labels, y.active_at_ms)
                })
        };
        let changed = !before.is_some_and(|b| same_alerts(b, &alerts));
        if alerts.is_empty() {
            saved.groups.remove(key);
        } else {
            saved.groups.insert(key.to_owned(), alerts);
        }
        let due = written_at.is_none_or(|at| at.elapsed() >= SAVE_EVERY);
        if !(changed || (due && !saved.groups.is_empty())) {
            return;
        }
        match crate::persist::write_json(&self.path, saved) {
            Ok(()) => *written_at = Some(Instant::now()),
            Err(e) => tracing::warn!(error = %e, "cannot save the alert state"),
        }
    }
}

/// The alerts of an alerting rule to save: those pending or firing.
pub fn to_save(
    rule: &CompiledRule,
    state: &RuleState,
    ts: i64,
) -> impl Iterator<Item = SavedAlert> {
    let name = rule.name().to_owned();
    state
        .alerts
        .values()
        .filter(|a| a.state != AlertState::Inactive)
        .map(move |a| SavedAlert {
            rule: name.clone(),
            labels: a.labels.clone(),
            active_at_ms: a.active_at_ms,
            seen_ms: ts,
        })
        .collect::<Vec<_>>()
        .into_iter()
}

/// How the `for` clocks are restored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestoreOptions {
    /// Saved alerts last seen longer ago than this are not restored
    /// (`--rules-alert-for-outage-tolerance`, Prometheus' 1h).
    pub outage_tolerance: Duration,
    /// A restored alert fires no sooner than this after the restart
    /// (`--rules-alert-for-grace-period`, Prometheus' 10m).
    pub grace_period: Duration,
}

impl Default for RestoreOptions {
    fn default() -> Self {
        RestoreOptions {
            outage_tolerance: Duration::from_secs(3600),
            grace_period: Duration::from_secs(600),
        }
    }
}

/// Restores the `for` clocks of `rule`'s alerts after its first evaluation at `ts` since a
/// restart, from `saved` (Prometheus' `RestoreForState`): an alert still active that was saved
/// within the outage tolerance keeps its pending time from before the restart, but not the
/// downtime, and fires no sooner than the grace period from now unless it was firing already.
/// Rules whose `for` is 0, or shorter than the grace period, are left as they are.
pub fn restore(
    rule: &CompiledRule,
    state: &mut RuleState,
    saved: &[SavedAlert],
    ts: i64,
    options: RestoreOptions,
) {
    let hold_ms = rule.rule.for_.as_millis() as i64;
    let grace_ms = options.grace_period.as_millis() as i64;
    if hold_ms == 0 || hold_ms < grace_ms {
        return;
    }
    let oldest_ms = ts - options.outage_tolerance.as_millis() as i64;
    for alert in state.alerts.values_mut() {
        if alert.state == AlertState::Inactive {
            continue;
        }
        let Some(before) = saved
            .iter()
            .find(|s| s.rule == rule.name() && s.labels == alert.labels && s.seen_ms >= oldest_ms)
        else {
            continue;
        };
        restore_alert(alert, before, ts, hold_ms, grace_ms);
    }
}

fn restore_alert(alert: &mut Alert, before: &SavedAlert, ts: i64, hold_ms: i64, grace_ms: i64) {
    let pending_ms = before.seen_ms - before.active_at_ms;
    let remaining_ms = hold_ms - pending_ms;
    alert.active_at_ms = if remaining_ms <= 0 {
        // It was firing: the next evaluation fires it again.
        before.active_at_ms
    } else if remaining_ms < grace_ms {
        ts + grace_ms - hold_ms
    } else {
        // The time pending before the restart counts; the downtime does not.
        before.active_at_ms + (ts - before.seen_ms)
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(for_: &str) -> CompiledRule {
        let yaml = format!(
            "groups: [{{name: g, rules: [{{alert: A, expr: 'sum(memory:inuse_space:bytes:space:bytes)', for: {for_}}}]}}]"
        );
        let file = parca_config::parse_rules(&yaml, "r.yml").unwrap();
        CompiledRule::new(&file.groups[0].rules[0], &Default::default()).unwrap()
    }

    fn pending(ts: i64) -> (RuleState, BTreeMap<String, String>) {
        let labels = BTreeMap::from([("alertname".to_owned(), "A".to_owned())]);
        let mut state = RuleState::default();
        state.alerts.insert(
            labels.clone(),
            Alert {
                labels: labels.clone(),
                annotations: BTreeMap::new(),
                state: AlertState::Pending,
                value: 1.0,
                active_at_ms: ts,
                fired_at_ms: None,
                resolved_at_ms: None,
                keep_firing_since_ms: None,
                last_sent_at_ms: None,
            },
        );
        (state, labels)
    }

    const MIN: i64 = 60_000;

    fn restored(for_: &str, active_at: i64, seen: i64, now: i64) -> i64 {
        let (mut state, labels) = pending(now);
        let saved = [SavedAlert {
            rule: "A".into(),
            labels: labels.clone(),
            active_at_ms: active_at,
            seen_ms: seen,
        }];
        restore(
            &rule(for_),
            &mut state,
            &saved,
            now,
            RestoreOptions::default(),
        );
        state.alerts[&labels].active_at_ms
    }

    #[test]
    fn for_clocks_restore_as_prometheus_restores_them() {
        let now = 1_000 * MIN;
        // Pending 20 of 30 minutes, down 5: 10 minutes left, the grace period: pending time
        // kept, downtime not counted.
        assert_eq!(
            restored("30m", now - 25 * MIN, now - 5 * MIN, now),
            now - 20 * MIN
        );
        // 25 of 30 minutes: 5 left, under the grace period: fires 10 minutes from now.
        assert_eq!(
            restored("30m", now - 30 * MIN, now - 5 * MIN, now),
            now - 20 * MIN
        );
        // Firing before the restart: fires at the next evaluation.
        assert_eq!(
            restored("30m", now - 45 * MIN, now - 5 * MIN, now),
            now - 45 * MIN
        );
        // Down longer than the outage tolerance: starts over.
        assert_eq!(restored("30m", now - 95 * MIN, now - 65 * MIN, now), now);
        // A `for` under the grace period is not restored.
        assert_eq!(restored("5m", now - 4 * MIN, now - MIN, now), now);
    }

    #[test]
    fn the_file_survives_a_restart_and_a_bad_one_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let store = ForStateStore::open(dir.path());
        assert!(store.saved("r.yml;g").is_empty());
        let alert = SavedAlert {
            rule: "A".into(),
            labels: BTreeMap::from([("alertname".into(), "A".into())]),
            active_at_ms: 5,
            seen_ms: 9,
        };
        store.record("r.yml;g", vec![alert.clone()]);
        let again = ForStateStore::open(dir.path());
        assert_eq!(again.saved("r.yml;g"), vec![alert]);
        // Resolved: the group's entry goes.
        again.record("r.yml;g", Vec::new());
        assert!(ForStateStore::open(dir.path()).saved("r.yml;g").is_empty());
        std::fs::write(dir.path().join(FOR_STATE_FILE), b"{not json").unwrap();
        assert!(ForStateStore::open(dir.path()).saved("r.yml;g").is_empty());
    }
}
