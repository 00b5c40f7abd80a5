//! The scrape manager: jobs from the configuration, their targets and loops, reloads.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use parca_config::{Config, ScrapeConfig};
use parca_ingest::Sink;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::discovery::discover;
use crate::http::JobHttp;
use crate::scrape_loop::{self, LoopSpec, ScrapeMetrics};
use crate::target::{ProfileStatus, Target, TargetStatus};

/// How scraping behaves beyond the configuration file.
#[derive(Debug, Clone)]
pub struct Options {
    /// Largest accepted answer of a target, in bytes.
    pub body_limit_bytes: usize,
    /// How profiles are decoded (the decompressed-size limit).
    pub decode: parca_pprof::DecodeOptions,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            body_limit_bytes: 64 << 20,
            decode: Default::default(),
        }
    }
}

struct RunningLoop {
    status: Arc<Mutex<ProfileStatus>>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

struct Job {
    config: Arc<ScrapeConfig>,
    http: Result<JobHttp, String>,
    loops: BTreeMap<(Target, String), RunningLoop>,
    dropped: Vec<BTreeMap<String, String>>,
    refresher: Option<JoinHandle<()>>,
}

/// Runs the scrape loops of a configuration and reports their health.
pub struct Manager {
    sink: Arc<dyn Sink>,
    options: Options,
    metrics: ScrapeMetrics,
    runtime: tokio::runtime::Handle,
    jobs: Mutex<BTreeMap<String, Job>>,
    me: Weak<Manager>,
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager")
            .field("options", &self.options)
            .finish()
    }
}

fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.5, 10))
}

impl ScrapeMetrics {
    /// Creates the scrape metrics and adds them to `registry`.
    pub fn register(registry: &mut Registry) -> ScrapeMetrics {
        let metrics = ScrapeMetrics {
            scrapes: Family::default(),
            duration: Family::new_with_constructor(duration_histogram as fn() -> Histogram),
            samples: Family::default(),
        };
        registry.register(
            "parca_scrapes",
            "Scrapes by job, profile and result (success, error, timeout)",
            metrics.scrapes.clone(),
        );
        registry.register(
            "parca_scrape_duration_seconds",
            "Time a scrape took, fetch and store, by job",
            metrics.duration.clone(),
        );
        registry.register(
            "parca_scrape_samples",
            "Samples stored from scrapes, by job",
            metrics.samples.clone(),
        );
        metrics
    }
}

impl Manager {
    /// A manager storing into `sink` and recording into `metrics`. Must be called within a
    /// tokio runtime, which runs the loops.
    pub fn new(sink: Arc<dyn Sink>, options: Options, metrics: ScrapeMetrics) -> Arc<Manager> {
        Arc::new_cyclic(|me| Manager {
            sink,
            options,
            metrics,
            runtime: tokio::runtime::Handle::current(),
            jobs: Mutex::new(BTreeMap::new()),
            me: me.clone(),
        })
    }

    /// Makes the running loops match `config`: jobs whose configuration did not change keep
    /// their loops (phase, health and delta baselines); others are stopped and started anew.
    pub fn apply(&self, config: &Config) {
        let mut jobs = self.jobs.lock().expect("jobs lock");
        let wanted: HashMap<&str, &ScrapeConfig> = config
            .scrape_configs
            .iter()
            .map(|c| (c.job_name.as_str(), c))
            .collect();
        let stale: Vec<String> = jobs
            .iter()
            .filter(|(name, job)| wanted.get(name.as_str()).is_none_or(|c| **c != *job.config))
            .map(|(name, _)| name.clone())
            .collect();
        for name in stale {
            if let Some(job) = jobs.remove(&name) {
                stop_job(job);
            }
        }
        for config in &config.scrape_configs {
            if jobs.contains_key(&config.job_name) {
                continue;
            }
            let config = Arc::new(config.clone());
            let refresher = (!config.file_sd_configs.is_empty()).then(|| {
                let every = config
                    .file_sd_configs
                    .iter()
                    .map(|f| f.refresh_interval)
                    .min()
                    .unwrap_or(Duration::from_secs(300))
                    .max(Duration::from_secs(1));
                let me = self.me.clone();
                let job_name = config.job_name.clone();
                let generation = Arc::clone(&config);
                self.runtime.spawn(async move {
                    let mut ticker = tokio::time::interval(every);
                    ticker.tick().await;
                    loop {
                        ticker.tick().await;
                        let Some(manager) = me.upgrade() else { return };
                        if !manager.sync_job(&job_name, &generation) {
                            return;
                        }
                    }
                })
            });
            jobs.insert(
                config.job_name.clone(),
                Job {
                    http: JobHttp::for_job(&config),
                    config,
                    loops: BTreeMap::new(),
                    dropped: Vec::new(),
                    refresher,
                },
            );
        }
        let names: Vec<(String, Arc<ScrapeConfig>)> = jobs
            .iter()
            .map(|(n, j)| (n.clone(), Arc::clone(&j.config)))
            .collect();
        drop(jobs);
        for (name, config) in names {
            self.sync_job(&name, &config);
        }
    }

    /// Rediscovers a job's targets and starts or stops loops to match. Returns false when the
    /// job (in this configuration) no longer exists.
    fn sync_job(&self, name: &str, generation: &Arc<ScrapeConfig>) -> bool {
        let config = {
            let jobs = self.jobs.lock().expect("jobs lock");
            match jobs.get(name) {
                Some(job) if Arc::ptr_eq(&job.config, generation) => Arc::clone(&job.config),
                _ => return false,
            }
        };
        // Discovery reads files: outside the lock.
        let found = discover(&config);
        let mut jobs = self.jobs.lock().expect("jobs lock");
        let Some(job) = jobs.get_mut(name) else {
            return false;
        };
        if !Arc::ptr_eq(&job.config, generation) {
            return false;
        }
        let mut wanted: BTreeMap<(Target, String), &parca_config::ProfileEndpoint> =
            BTreeMap::new();
        for target in &found.active {
            for endpoint in config.enabled_endpoints() {
                wanted.insert((target.clone(), endpoint.name.clone()), endpoint);
            }
        }
        let gone: Vec<_> = job
            .loops
            .keys()
            .filter(|k| !wanted.contains_key(k))
            .cloned()
            .collect();
        for key in gone {
            if let Some(running) = job.loops.remove(&key) {
                let _ = running.stop.send(true);
            }
        }
        for (key, endpoint) in wanted {
            if job.loops.contains_key(&key) {
                continue;
            }
            let status = Arc::new(Mutex::new(ProfileStatus {
                name: endpoint.name.clone(),
                ..Default::default()
            }));
            let spec = LoopSpec {
                target: key.0.clone(),
                endpoint: endpoint.clone(),
                config: Arc::clone(&config),
                http: JobHttp::for_target(&job.http, &config, &key.0),
                sink: Arc::clone(&self.sink),
                body_limit: self.options.body_limit_bytes,
                decode: self.options.decode,
                metrics: self.metrics.clone(),
                status: Arc::clone(&status),
            };
            status.lock().expect("status lock").url = spec.url();
            let (stop, stopped) = watch::channel(false);
            let task = self.runtime.spawn(scrape_loop::run(spec, stopped));
            job.loops.insert(key, RunningLoop { status, stop, task });
        }
        job.dropped = found.dropped;
        true
    }

    /// Every target with the state of each of its profile endpoints, and the discovered labels
    /// of dropped targets.
    pub fn targets(&self) -> (Vec<TargetStatus>, Vec<BTreeMap<String, String>>) {
        let jobs = self.jobs.lock().expect("jobs lock");
        let mut active: Vec<TargetStatus> = Vec::new();
        let mut dropped = Vec::new();
        for job in jobs.values() {
            for ((target, _), running) in &job.loops {
                let status = running.status.lock().expect("status lock").clone();
                match active.last_mut() {
                    Some(last) if last.target == *target => last.profiles.push(status),
                    _ => active.push(TargetStatus {
                        target: target.clone(),
                        interval: job.config.scrape_interval,
                        timeout: job.config.scrape_timeout,
                        profiles: vec![status],
                    }),
                }
            }
            dropped.extend(job.dropped.iter().cloned());
        }
        (active, dropped)
    }

    /// Stops every loop, waiting for scrapes in flight to be stored.
    pub async fn stop(&self) {
        let jobs = std::mem::take(&mut *self.jobs.lock().expect("jobs lock"));
        let mut tasks = Vec::new();
        for job in jobs.into_values() {
            if let Some(refresher) = job.refresher {
                refresher.abort();
            }
            for running in job.loops.into_values() {
                let _ = running.stop.send(true);
                tasks.push(running.task);
            }
        }
        for task in tasks {
            let _ = task.await;
        }
    }
}

fn stop_job(job: Job) {
    if let Some(refresher) = job.refresher {
        refresher.abort();
    }
    for running in job.loops.into_values() {
        let _ = running.stop.send(true);
    }
}
