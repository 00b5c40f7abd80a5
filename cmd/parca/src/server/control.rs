//! The server's [`Control`] of the API: the configuration in force and its reload (rules,
//! insights, shards and scrapes taking the new file), the scrape targets' health in the API's
//! shape, and `/-/quit`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use parca_api::{Control, TargetsReport};
use prometheus_client::registry::Registry;

/// The configuration in force, its reload, and the scrapers' health, for the API.
pub(super) struct ServerControl {
    pub(super) config_path: PathBuf,
    pub(super) config: Mutex<parca_config::Config>,
    pub(super) scrape: OnceLock<Arc<parca_scrape::Manager>>,
    /// The shards read beside the bucket, when there are any.
    pub(super) shards: OnceLock<Arc<parca_fanout::Shards>>,
    /// The rule groups, once the store is open.
    pub(super) rules: OnceLock<Arc<parca_rules::Manager>>,
    /// The deploy insights, once the store is open.
    pub(super) insights: OnceLock<Arc<parca_rules::Insights>>,
    pub(super) reloads: prometheus_client::metrics::family::Family<
        Vec<(&'static str, &'static str)>,
        prometheus_client::metrics::counter::Counter,
    >,
    pub(super) last_reload_ok: prometheus_client::metrics::gauge::Gauge,
    pub(super) last_reload_error: Mutex<Option<String>>,
    /// Set by `/-/quit`.
    pub(super) quit: tokio::sync::Notify,
}

impl ServerControl {
    /// The control of a server started with `config` (read from `config_path`), its reload
    /// metrics registered.
    pub(super) fn new(
        config_path: &Path,
        config: parca_config::Config,
        registry: &mut Registry,
    ) -> Arc<Self> {
        let control = Arc::new(ServerControl {
            config_path: config_path.to_owned(),
            config: Mutex::new(config),
            scrape: OnceLock::new(),
            shards: OnceLock::new(),
            rules: OnceLock::new(),
            insights: OnceLock::new(),
            reloads: Default::default(),
            last_reload_ok: Default::default(),
            last_reload_error: Mutex::new(None),
            quit: tokio::sync::Notify::new(),
        });
        control.last_reload_ok.set(1);
        registry.register(
            "parca_config_reloads",
            "Configuration reloads by result",
            control.reloads.clone(),
        );
        registry.register(
            "parca_config_last_reload_successful",
            "Whether the last configuration reload succeeded (1) or failed (0)",
            control.last_reload_ok.clone(),
        );
        control
    }

    /// The configuration in force.
    pub(super) fn config(&self) -> std::sync::MutexGuard<'_, parca_config::Config> {
        self.config.lock().expect("config lock")
    }

    /// Uses a reloaded parca.yaml's `query_stores`, when they changed; an error names a group
    /// whose client cannot be built (the reload then fails and nothing of it is applied).
    fn take_query_stores(&self, config: &parca_config::Config) -> Result<(), String> {
        let stores_changed =
            self.config.lock().expect("config lock").query_stores != config.query_stores;
        if stores_changed {
            match self.shards.get() {
                Some(shards) => {
                    shards.set_query_stores(&config.query_stores)?;
                    let shards = Arc::clone(shards);
                    tokio::spawn(async move { shards.refresh().await });
                }
                None => tracing::warn!(
                    "query_stores were added: a server started without shards reads them from its next start"
                ),
            }
        }
        Ok(())
    }
}

impl ServerControl {
    /// Runs a reloaded parca.yaml's rule groups (unchanged ones keep running with their
    /// state) and deploy insights; an error names a rule that cannot be evaluated (the reload
    /// then fails).
    fn take_rules(&self, config: &parca_config::Config) -> Result<(), String> {
        if let Some(rules) = self.rules.get() {
            rules.update(config).map_err(|e| e.to_string())?;
        }
        if let Some(insights) = self.insights.get() {
            insights.update(&config.insights);
        }
        Ok(())
    }
}

impl Control for ServerControl {
    fn config_yaml(&self) -> String {
        self.config.lock().expect("config lock").to_yaml()
    }

    fn reload(&self) -> Result<(), String> {
        let result = parca_config::load(&self.config_path)
            .map_err(|e| e.to_string())
            .and_then(|config| self.take_rules(&config).map(|()| config))
            .and_then(|config| self.take_query_stores(&config).map(|()| config));
        let outcome = if result.is_ok() { "success" } else { "failure" };
        self.reloads.get_or_create(&vec![("result", outcome)]).inc();
        let config = result.inspect_err(|why| {
            self.last_reload_ok.set(0);
            *self.last_reload_error.lock().expect("config lock") = Some(why.clone());
        })?;
        self.last_reload_ok.set(1);
        *self.last_reload_error.lock().expect("config lock") = None;
        apply_span_labels(&config);
        if let Some(scrape) = self.scrape.get() {
            scrape.apply(&config);
        }
        let mut current = self.config.lock().expect("config lock");
        if current.object_storage != config.object_storage {
            tracing::warn!(
                "object_storage changed: the bucket blocks are shipped to changes at the next start"
            );
        }
        *current = config;
        drop(current);
        tracing::info!(path = %self.config_path.display(), "configuration reloaded");
        Ok(())
    }

    fn quit(&self) {
        self.quit.notify_one();
    }

    fn last_reload_error(&self) -> Option<String> {
        self.last_reload_error.lock().expect("config lock").clone()
    }

    fn targets(&self) -> TargetsReport {
        let Some(scrape) = self.scrape.get() else {
            return TargetsReport::default();
        };
        let (active, dropped) = scrape.targets();
        TargetsReport {
            active_targets: active.iter().map(active_target).collect(),
            dropped_targets: dropped
                .into_iter()
                .map(|discovered_labels| parca_api::DroppedTarget { discovered_labels })
                .collect(),
        }
    }
}

fn rfc3339(time: Option<std::time::SystemTime>) -> String {
    time.and_then(|t| jiff::Timestamp::try_from(t).ok())
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// A target's status in the API's shape: down when any of its profiles is down, the latest
/// error and scrape of any of them.
fn active_target(status: &parca_scrape::TargetStatus) -> parca_api::ActiveTarget {
    use parca_scrape::Health;
    let profiles: Vec<parca_api::ProfileHealth> = status
        .profiles
        .iter()
        .map(|p| parca_api::ProfileHealth {
            name: p.name.clone(),
            scrape_url: p.url.clone(),
            health: p.health.as_str().into(),
            last_error: p.last_error.clone().unwrap_or_default(),
            last_scrape: rfc3339(p.last_scrape),
            last_scrape_duration: p.last_duration.as_secs_f64(),
        })
        .collect();
    let health = if status.profiles.iter().any(|p| p.health == Health::Down) {
        Health::Down
    } else if status.profiles.iter().any(|p| p.health == Health::Up) {
        Health::Up
    } else {
        Health::Unknown
    };
    let latest = status.profiles.iter().max_by_key(|p| p.last_scrape);
    parca_api::ActiveTarget {
        discovered_labels: status.target.discovered.clone(),
        labels: status.target.series_labels(),
        scrape_pool: status.target.job.clone(),
        scrape_url: status
            .profiles
            .first()
            .map(|p| p.url.clone())
            .unwrap_or_default(),
        health: health.as_str().into(),
        last_error: status
            .profiles
            .iter()
            .find_map(|p| p.last_error.clone())
            .unwrap_or_default(),
        last_scrape: rfc3339(latest.and_then(|p| p.last_scrape)),
        last_scrape_duration: latest.map_or(0.0, |p| p.last_duration.as_secs_f64()),
        scrape_interval: parca_config::format_duration(status.interval),
        scrape_timeout: parca_config::format_duration(status.timeout),
        profiles,
    }
}

/// Makes `span_labels` of parca.yaml the names every ingest path stores per sample.
pub(super) fn apply_span_labels(config: &parca_config::Config) {
    let names = config
        .span_labels
        .clone()
        .unwrap_or_else(|| parca_ingest::DEFAULT_SPAN_LABELS.map(String::from).to_vec());
    parca_ingest::set_span_labels(names);
}
