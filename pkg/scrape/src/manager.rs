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
    client: Result<reqwest::Client, String>,
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
                    client: client(&config, None),
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
                client: loop_client(&job.client, &config, &key.0),
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

/// The HTTP client of a job: TLS settings, no proxies from the environment (as Prometheus).
/// With `connect_to`, requests for its server name go to its host instead.
fn client(config: &ScrapeConfig, connect_to: Option<ConnectTo>) -> Result<reqwest::Client, String> {
    let tls = &config.tls_config;
    let mut builder = reqwest::Client::builder()
        .user_agent(concat!("parca-rs/", env!("CARGO_PKG_VERSION")))
        .no_proxy()
        .pool_idle_timeout(config.scrape_interval * 2)
        .danger_accept_invalid_certs(tls.insecure_skip_verify);
    if let Some(ca) = &tls.ca_file {
        let pem = std::fs::read(ca)
            .map_err(|e| format!("cannot read ca_file `{}`: {e}", ca.display()))?;
        let certificate = reqwest::Certificate::from_pem(&pem)
            .map_err(|e| format!("ca_file `{}` is not a PEM certificate: {e}", ca.display()))?;
        builder = builder.add_root_certificate(certificate);
    }
    if let (Some(cert), Some(key)) = (&tls.cert_file, &tls.key_file) {
        let mut pem = std::fs::read(cert)
            .map_err(|e| format!("cannot read cert_file `{}`: {e}", cert.display()))?;
        pem.extend(
            std::fs::read(key)
                .map_err(|e| format!("cannot read key_file `{}`: {e}", key.display()))?,
        );
        let identity = reqwest::Identity::from_pem(&pem).map_err(|e| {
            format!("cert_file and key_file are not a PEM certificate and key: {e}")
        })?;
        builder = builder.identity(identity);
    }
    if let Some(connect_to) = connect_to {
        builder = builder.dns_resolver(Arc::new(connect_to));
    }
    builder
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))
}

/// The client of one target's loop: the job's, except with `tls_config.server_name`, where the
/// request names that server (SNI, certificate check, and so the connection pool) and so needs a
/// client of its own that connects to the target's host, as Prometheus does.
fn loop_client(
    job_client: &Result<reqwest::Client, String>,
    config: &ScrapeConfig,
    target: &Target,
) -> Result<reqwest::Client, String> {
    let Some(server_name) = &config.tls_config.server_name else {
        return job_client.clone();
    };
    let url = target.url("/", None);
    let host = reqwest::Url::parse(&url)
        .ok()
        .and_then(|u| u.host_str().map(|h| h.trim_matches(['[', ']']).to_owned()))
        .ok_or_else(|| format!("the target URL `{url}` has no host to connect to"))?;
    client(
        config,
        Some(ConnectTo {
            server_name: server_name.clone(),
            host,
        }),
    )
}

/// Resolves `server_name` to the addresses of `host` (looked up afresh each time, so DNS changes
/// are followed) and every other name as usual.
struct ConnectTo {
    server_name: String,
    host: String,
}

impl reqwest::dns::Resolve for ConnectTo {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = if name.as_str().eq_ignore_ascii_case(&self.server_name) {
            self.host.clone()
        } else {
            name.as_str().to_owned()
        };
        Box::pin(async move {
            let addrs: Vec<std::net::SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let addrs: reqwest::dns::Addrs = Box::new(addrs.into_iter());
            Ok(addrs)
        })
    }
}
