//! The rule manager: one task per group, evaluating it at its interval, and reloads that keep
//! the state of what did not change.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use parca_config::Config;
use parca_query::Engine;
use tokio::task::JoinHandle;

use crate::Error;
use crate::clock::now_ms;
use crate::for_state::{ForStateStore, RestoreOptions};
use crate::group::{Environment, Group};
use crate::notifier::Notifier;
use crate::remote_write::RemoteWriter;
use crate::rule::Sample;

/// How a [`Manager`] evaluates and where its alerts go.
#[derive(Debug, Clone)]
pub struct Options {
    /// The URL the server is reached at (`--web-external-url`): `$externalURL` of templates
    /// and the alerts' links.
    pub external_url: String,
    /// Where firing and resolved alerts are sent; `None`: nowhere.
    pub notifier: Option<Arc<Notifier>>,
    /// Where recorded series (and `ALERTS`) are sent after each evaluation; `None`: nowhere.
    pub remote_writer: Option<Arc<RemoteWriter>>,
    /// Where evaluations are counted (`/metrics`).
    pub metrics: crate::RuleMetrics,
    /// How long before a firing alert is sent again (`--rules-alert-resend-delay`). Default 1m,
    /// as Prometheus.
    pub resend_delay: std::time::Duration,
    /// Where alerts' `for` state is kept across restarts (the store's directory); `None`:
    /// nowhere, alerts start over.
    pub state_dir: Option<PathBuf>,
    /// How alerts' `for` clocks are restored after a restart.
    pub restore: RestoreOptions,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            external_url: String::new(),
            notifier: None,
            remote_writer: None,
            metrics: Default::default(),
            resend_delay: std::time::Duration::from_secs(60),
            state_dir: None,
            restore: RestoreOptions::default(),
        }
    }
}

/// Runs the rule groups of a configuration over one store.
pub struct Manager {
    engine: Engine,
    options: Options,
    runtime: tokio::runtime::Handle,
    /// Read by the groups' tasks at each evaluation, so a reload's external labels apply to
    /// groups that keep running.
    environment: Arc<RwLock<Arc<Environment>>>,
    running: Mutex<Vec<Running>>,
    /// The saved alert state (`Options::state_dir`).
    for_state: Option<Arc<ForStateStore>>,
    /// Whether the groups of the first configuration were given their saved alerts (only
    /// those restore, as in Prometheus: a group added by a reload starts afresh).
    restored: AtomicBool,
}

struct Running {
    group: Arc<Group>,
    task: JoinHandle<()>,
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager")
            .field("groups", &self.groups().len())
            .finish()
    }
}

impl Manager {
    /// A manager evaluating with `engine`, with no groups yet ([`Manager::update`] gives
    /// them). Its tasks run on the current tokio runtime: call it inside one.
    pub fn new(engine: Engine, options: Options) -> Arc<Manager> {
        Arc::new_cyclic(|manager| Manager {
            // Rules read what rules recorded by name, as Prometheus' rules read its TSDB.
            engine: engine.with_recorded_series(Arc::new(Recorded(manager.clone()))),
            runtime: tokio::runtime::Handle::current(),
            environment: Arc::new(RwLock::new(Arc::new(Environment {
                external_url: options.external_url.clone(),
                ..Default::default()
            }))),
            for_state: options
                .state_dir
                .as_deref()
                .map(|dir| Arc::new(ForStateStore::open(dir))),
            options,
            running: Mutex::new(Vec::new()),
            restored: AtomicBool::new(false),
        })
    }

    /// Runs the groups of `config.rules` (the files `rule_files` matched, already read and
    /// checked by [`parca_config::load`]). A group that is unchanged (same file, name, rules
    /// and interval) keeps running with its state; a changed one starts afresh but takes
    /// the state of its rules that kept their name and labels ([`Group::copy_state`]); a
    /// removed one stops. Alerts go to `config.alerting`'s Alertmanagers from now on. If any
    /// group cannot be built, or an Alertmanager's client, the groups do not change and the
    /// error says why.
    pub fn update(&self, config: &Config) -> Result<(), Error> {
        if let Some(notifier) = &self.options.notifier {
            notifier
                .apply(&config.alerting, &config.global.external_labels)
                .map_err(Error::Alerting)?;
        }
        if let Some(writer) = &self.options.remote_writer {
            writer
                .apply(&config.remote_write, &config.global.external_labels)
                .map_err(Error::Alerting)?;
        }
        let mut wanted = Vec::new();
        for (file, rule_file) in &config.rules {
            for spec in &rule_file.groups {
                let interval = spec.interval.unwrap_or(config.global.evaluation_interval);
                wanted.push(Group::new(file.clone(), spec.clone(), interval)?);
            }
        }
        {
            let mut environment = self.environment.write().expect("environment lock");
            if environment.external_labels != config.global.external_labels {
                let mut changed = Environment::clone(&environment);
                changed.external_labels = config.global.external_labels.clone();
                *environment = Arc::new(changed);
            }
        }
        if !self.restored.swap(true, Ordering::Relaxed)
            && let Some(store) = &self.for_state
        {
            for group in &wanted {
                group.restore_after_next_evaluation(store.saved(&group.key()));
            }
        }
        let mut running = self.running.lock().expect("rule groups lock");
        let mut old: Vec<Option<Running>> = running.drain(..).map(Some).collect();
        let mut kept = Vec::with_capacity(wanted.len());
        for group in wanted {
            let same_key = old.iter().position(|r| {
                r.as_ref()
                    .is_some_and(|r| r.group.file == group.file && r.group.name() == group.name())
            });
            match same_key.and_then(|i| old[i].take().map(|r| (i, r))) {
                Some((_, r)) if r.group.same_as(&group) => kept.push(r),
                previous => {
                    if let Some((_, r)) = previous {
                        r.task.abort();
                        group.copy_state(&r.group);
                    }
                    kept.push(self.start(Arc::new(group)));
                }
            }
        }
        for r in old.into_iter().flatten() {
            r.task.abort();
        }
        *running = kept;
        Ok(())
    }

    /// Starts the task of `group`.
    fn start(&self, group: Arc<Group>) -> Running {
        let task = self.runtime.spawn(run_group(
            Arc::clone(&group),
            self.engine.clone(),
            Arc::clone(&self.environment),
            self.options.clone(),
            self.for_state.clone(),
        ));
        Running { group, task }
    }

    /// The groups being evaluated, in file and group order.
    pub fn groups(&self) -> Vec<Arc<Group>> {
        self.running
            .lock()
            .expect("rule groups lock")
            .iter()
            .map(|r| Arc::clone(&r.group))
            .collect()
    }

    /// Every recording rule's samples of its last evaluation and the `ALERTS` series of the
    /// active alerts.
    pub fn samples(&self) -> Vec<Sample> {
        self.groups().iter().flat_map(|g| g.samples()).collect()
    }

    /// Stops every group's task and the remote-write queues.
    pub fn stop(&self) {
        if let Some(writer) = &self.options.remote_writer {
            writer.stop();
        }
        for r in self.running.lock().expect("rule groups lock").drain(..) {
            r.task.abort();
        }
    }
}

impl Drop for Manager {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The rules' latest samples, for rule queries that name a recorded series.
struct Recorded(std::sync::Weak<Manager>);

impl parca_query::RecordedSeries for Recorded {
    fn latest(&self, name: &str) -> Vec<(parca_tsdb::Labels, f64, i64)> {
        let Some(manager) = self.0.upgrade() else {
            return Vec::new();
        };
        manager
            .groups()
            .iter()
            .flat_map(|g| g.latest_named(name))
            .collect()
    }
}

/// Evaluates `group` at each of its evaluation times, for as long as its task runs. Each
/// evaluation runs on the blocking pool (the store is synchronous and reads never hold up
/// writes); one that overruns its interval skips the times it missed, as Prometheus does.
async fn run_group(
    group: Arc<Group>,
    engine: Engine,
    environment: Arc<RwLock<Arc<Environment>>>,
    options: Options,
    for_state: Option<Arc<ForStateStore>>,
) {
    let mut last_ms = now_ms();
    loop {
        let next_ms = group.next_evaluation_ms(last_ms.max(now_ms()));
        let interval_ms = (group.interval.as_millis() as i64).max(1);
        let n_missed = u64::try_from((next_ms - last_ms) / interval_ms - 1).unwrap_or(0);
        let wait_ms = u64::try_from(next_ms - now_ms()).unwrap_or(0);
        tokio::time::sleep(std::time::Duration::from_millis(wait_ms)).await;
        let env = Arc::clone(&environment.read().expect("environment lock"));
        let (g, e, o, saved) = (
            Arc::clone(&group),
            engine.clone(),
            options.clone(),
            for_state.clone(),
        );
        let evaluated = tokio::task::spawn_blocking(move || {
            let started = std::time::Instant::now();
            g.evaluate(&e, next_ms, env.env());
            g.restore_for_state(next_ms, o.restore);
            if let Some(store) = &saved {
                store.record(&g.key(), g.alerts_to_save(next_ms));
            }
            let n_failed = g
                .state()
                .rules
                .iter()
                .filter(|r| r.health == crate::Health::Err)
                .count();
            o.metrics.observe(
                &g.key(),
                g.rules().len(),
                n_failed,
                started.elapsed().as_secs_f64(),
                n_missed,
            );
            if let Some(notifier) = &o.notifier {
                notifier.send(g.notifications(next_ms, o.resend_delay, &o.external_url));
            }
            if let Some(writer) = &o.remote_writer {
                writer.send(&g.samples());
            }
        })
        .await;
        if let Err(error) = evaluated {
            tracing::error!(group = group.name(), %error, "rule evaluation task failed");
        }
        last_ms = next_ms;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(yaml: &str, interval_s: u64) -> Config {
        let mut config = Config::default();
        config.global.evaluation_interval = std::time::Duration::from_secs(interval_s);
        config.rules.push((
            "r.yml".into(),
            parca_config::parse_rules(yaml, "r.yml").expect("rules"),
        ));
        config
    }

    #[tokio::test]
    async fn reload_keeps_unchanged_groups_running() {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(parca_tsdb::Db::open(dir.path(), Default::default()).unwrap());
        let manager = Manager::new(Engine::new(db, Default::default()), Options::default());
        let a =
            "{name: a, rules: [{record: r, expr: 'sum(memory:inuse_space:bytes:space:bytes)'}]}";
        let b =
            "{name: b, rules: [{record: r, expr: 'sum(memory:inuse_space:bytes:space:bytes)'}]}";
        let b2 =
            "{name: b, rules: [{record: r2, expr: 'sum(memory:inuse_space:bytes:space:bytes)'}]}";
        manager
            .update(&config(&format!("groups: [{a}, {b}]"), 60))
            .unwrap();
        let before = manager.groups();
        assert_eq!(before.len(), 2);
        assert_eq!(before[0].interval, std::time::Duration::from_secs(60));
        manager
            .update(&config(&format!("groups: [{a}, {b2}]"), 60))
            .unwrap();
        let after = manager.groups();
        assert!(Arc::ptr_eq(&before[0], &after[0]), "unchanged group kept");
        assert!(
            !Arc::ptr_eq(&before[1], &after[1]),
            "changed group replaced"
        );
        // A new evaluation interval changes every group that has none of its own.
        manager
            .update(&config(&format!("groups: [{a}]"), 30))
            .unwrap();
        let last = manager.groups();
        assert_eq!(last.len(), 1);
        assert!(!Arc::ptr_eq(&before[0], &last[0]));
        assert_eq!(last[0].interval, std::time::Duration::from_secs(30));
    }
}
