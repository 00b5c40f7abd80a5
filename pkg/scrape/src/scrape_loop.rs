//! One scrape loop: one profile endpoint of one target, on a fixed phase of its interval.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parca_config::{ProfileEndpoint, ScrapeConfig};
use parca_ingest::{Durability, Series, Sink};
use parca_tsdb::Labels;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use tokio::sync::watch;

use crate::ScrapeError;
use crate::delta::{Baseline, delta};
use crate::http::JobHttp;
use crate::target::{Health, ProfileStatus, Target};

/// Labels of scrape metrics.
pub(crate) type MetricLabels = Vec<(&'static str, String)>;

/// The scrape metrics every loop records into: scrapes by result, their duration, samples.
#[derive(Clone, Debug)]
pub struct ScrapeMetrics {
    pub(crate) scrapes: Family<MetricLabels, Counter>,
    pub(crate) duration: Family<MetricLabels, Histogram, fn() -> Histogram>,
    pub(crate) samples: Family<MetricLabels, Counter>,
}

/// Everything a loop needs, fixed for its life.
pub(crate) struct LoopSpec {
    pub target: Target,
    pub endpoint: ProfileEndpoint,
    pub config: Arc<ScrapeConfig>,
    pub http: Result<JobHttp, String>,
    pub sink: Arc<dyn Sink>,
    pub body_limit: usize,
    pub decode: parca_pprof::DecodeOptions,
    pub metrics: ScrapeMetrics,
    pub status: Arc<Mutex<ProfileStatus>>,
}

impl LoopSpec {
    /// Seconds a delta endpoint is asked for: one less than the interval, so that each scrape
    /// ends before the next one starts (newer Parca's choice), and at least one.
    fn delta_seconds(&self) -> Option<u64> {
        self.endpoint.delta.then(|| {
            self.config
                .scrape_interval
                .as_secs()
                .saturating_sub(1)
                .max(1)
        })
    }

    pub(crate) fn url(&self) -> String {
        self.target.url(&self.endpoint.path, self.delta_seconds())
    }

    /// This loop's fixed offset within its interval: a hash of target and profile.
    fn phase(&self) -> Duration {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        self.target.relabeled.hash(&mut hasher);
        self.endpoint.name.hash(&mut hasher);
        let interval_ns = self.config.scrape_interval.as_nanos().max(1) as u64;
        Duration::from_nanos(hasher.finish() % interval_ns)
    }
}

/// Runs until `stop` turns true; a scrape in flight is finished first.
pub(crate) async fn run(spec: LoopSpec, mut stop: watch::Receiver<bool>) {
    let interval = spec.config.scrape_interval;
    // Wait for this loop's phase in wall-clock terms, so phases survive restarts.
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let interval_ns = interval.as_nanos().max(1);
    let phase_ns = spec.phase().as_nanos();
    let wait_ns = (phase_ns + interval_ns - now % interval_ns) % interval_ns;
    let first = tokio::time::Instant::now() + Duration::from_nanos(wait_ns as u64);
    let mut ticker = tokio::time::interval_at(first, interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut baselines: HashMap<String, Baseline> = HashMap::new();
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        match scrape_once(&spec, baselines, &mut stop).await {
            Some(kept) => baselines = kept,
            None => return,
        }
    }
}

/// One scrape: fetch, decode, store, record health. Returns the updated delta baselines, or
/// `None` when the loop was stopped during the fetch (a fetch is abandoned; a store that has
/// begun is always finished).
async fn scrape_once(
    spec: &LoopSpec,
    baselines: HashMap<String, Baseline>,
    stop: &mut watch::Receiver<bool>,
) -> Option<HashMap<String, Baseline>> {
    let started_at = SystemTime::now();
    let started = Instant::now();
    let timeout = spec.config.scrape_timeout;
    let fetched = tokio::select! {
        result = tokio::time::timeout(timeout, fetch(spec)) => match result {
            Ok(result) => result,
            Err(_) => Err(ScrapeError::Timeout(timeout)),
        },
        _ = stop.wait_for(|s| *s) => return None,
    };
    let (result, baselines, n_samples) = match fetched {
        Ok(body) => store(spec, body, started_at, baselines).await,
        Err(e) => (Err(e), baselines, 0),
    };
    let took = started.elapsed();
    let job = spec.target.job.clone();
    let outcome = match &result {
        Ok(()) => "success",
        Err(ScrapeError::Timeout(_)) => "timeout",
        Err(ScrapeError::Store(_)) => "not_stored",
        Err(_) => "error",
    };
    spec.metrics
        .scrapes
        .get_or_create(&vec![
            ("job", job.clone()),
            ("profile", spec.endpoint.name.clone()),
            ("result", outcome.to_owned()),
        ])
        .inc();
    spec.metrics
        .duration
        .get_or_create(&vec![("job", job.clone())])
        .observe(took.as_secs_f64());
    spec.metrics
        .samples
        .get_or_create(&vec![("job", job)])
        .inc_by(n_samples as u64);
    if let Err(e) = &result {
        tracing::debug!(url = spec.url(), error = %e, "scrape failed");
    }
    let mut status = spec.status.lock().expect("status lock");
    // A target that answered is up even when the store could not keep its profile (a full
    // disk): `last_error` says why its data was not stored.
    status.health = match &result {
        Ok(()) | Err(ScrapeError::Store(_)) => Health::Up,
        Err(_) => Health::Down,
    };
    status.last_error = result.err().map(|e| e.to_string());
    status.last_scrape = Some(started_at);
    status.last_duration = took;
    Some(baselines)
}

/// The body of the endpoint, within the size limit.
async fn fetch(spec: &LoopSpec) -> Result<Vec<u8>, ScrapeError> {
    let http = spec
        .http
        .as_ref()
        .map_err(|e| ScrapeError::Request(e.clone()))?;
    let client = &http.client;
    let url = spec.url();
    let request = match &spec.config.tls_config.server_name {
        None => client.get(url),
        // The request names the server (for SNI and the certificate); the loop's client connects
        // to the target's host, and the Host header still names the target, as in Prometheus.
        Some(server_name) => {
            let mut named = reqwest::Url::parse(&url)
                .map_err(|e| ScrapeError::Request(format!("bad target URL `{url}`: {e}")))?;
            let host = match (named.host_str(), named.port()) {
                (Some(host), Some(port)) => format!("{host}:{port}"),
                (Some(host), None) => host.to_owned(),
                (None, _) => String::new(),
            };
            named.set_host(Some(server_name)).map_err(|e| {
                ScrapeError::Request(format!("tls_config.server_name `{server_name}`: {e}"))
            })?;
            client.get(named).header(reqwest::header::HOST, host)
        }
    };
    let request = crate::http::authorize(&spec.config, http, request).await?;
    let mut response = request
        .send()
        .await
        .map_err(|e| ScrapeError::Request(parca_vocab::with_causes(&e)))?;
    let status = response.status();
    let expected = response.content_length().unwrap_or(0) as usize;
    let mut body = Vec::with_capacity(expected.min(spec.body_limit));
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| ScrapeError::Request(parca_vocab::with_causes(&e)))?
    {
        if body.len() + chunk.len() > spec.body_limit {
            return Err(ScrapeError::TooLarge(spec.body_limit));
        }
        body.extend_from_slice(&chunk);
    }
    if !status.is_success() {
        let text = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
        return Err(ScrapeError::Status {
            status: status.as_u16(),
            body: text,
        });
    }
    Ok(body)
}

/// Bodies up to this size are decoded and stored on the async worker that fetched them (a
/// millisecond or two at most), which spares the two thread switches of the blocking pool: at
/// thousands of scrapes a second those cost more CPU than the decoding. Larger bodies, and any
/// body when the store is busy, go to the blocking pool.
const INLINE_BODY_BYTES: usize = 64 << 10;

/// How one scrape's profiles become series.
struct StoreContext {
    decode: parca_pprof::DecodeOptions,
    endpoint: ProfileEndpoint,
    labels: Labels,
    time_nanos: i64,
}

/// Decodes, computes deltas and stores: on this worker when the body is small and the store
/// free, else on the blocking pool.
async fn store(
    spec: &LoopSpec,
    body: Vec<u8>,
    started_at: SystemTime,
    mut baselines: HashMap<String, Baseline>,
) -> (Result<(), ScrapeError>, HashMap<String, Baseline>, usize) {
    let labels = match Labels::new(spec.target.series_labels()) {
        Ok(labels) => labels,
        Err(e) => {
            return (
                Err(ScrapeError::Store(parca_tsdb::with_causes(&e))),
                baselines,
                0,
            );
        }
    };
    let context = StoreContext {
        decode: spec.decode,
        endpoint: spec.endpoint.clone(),
        labels,
        time_nanos: started_at
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i64),
    };
    let sink = Arc::clone(&spec.sink);
    if body.len() <= INLINE_BODY_BYTES {
        let batch = match to_batch(&context, &body, &mut baselines) {
            Ok(batch) => batch,
            Err(e) => return (Err(e), baselines, 0),
        };
        let result = match sink.try_write_buffered(&batch) {
            Some(outcome) => written(&batch, outcome),
            None => tokio::task::spawn_blocking(move || {
                written(&batch, sink.write(&batch, Durability::Buffered))
            })
            .await
            .unwrap_or_else(|e| Err(ScrapeError::Store(format!("store task failed: {e}")))),
        };
        let n = result.as_ref().map_or(0, |n| *n);
        return (result.map(|_| ()), baselines, n);
    }
    let task = tokio::task::spawn_blocking(move || {
        let result = to_batch(&context, &body, &mut baselines)
            .and_then(|batch| written(&batch, sink.write(&batch, Durability::Buffered)));
        (result, baselines)
    });
    match task.await {
        Ok((Ok(n), baselines)) => (Ok(()), baselines, n),
        Ok((Err(e), baselines)) => (Err(e), baselines, 0),
        Err(e) => (
            Err(ScrapeError::Store(format!("store task failed: {e}"))),
            HashMap::new(),
            0,
        ),
    }
}

/// The series of one scrape's body: its profiles of the kept sample types, and for cumulative
/// types the growth since the last scrape (which updates `baselines`).
fn to_batch(
    context: &StoreContext,
    body: &[u8],
    baselines: &mut HashMap<String, Baseline>,
) -> Result<Vec<Series>, ScrapeError> {
    let StoreContext {
        decode,
        endpoint,
        labels,
        time_nanos,
    } = context;
    let mut profiles =
        parca_profile::decode(body, decode).map_err(|e| ScrapeError::Profile(e.to_string()))?;
    if !endpoint.keep_sample_type.is_empty() {
        profiles.retain(|p| {
            endpoint
                .keep_sample_type
                .iter()
                .any(|k| k.kind == p.meta.sample_type.kind && k.unit == p.meta.sample_type.unit)
        });
    }
    for p in &mut profiles {
        p.meta.time_nanos = *time_nanos;
    }
    let mut batch: Vec<Series> = Vec::new();
    if !endpoint.delta {
        for p in &profiles {
            if parca_profile::is_cumulative(&p.meta.sample_type.kind) {
                let key = p.meta.sample_type.to_string();
                let (grown, baseline) = delta(baselines.remove(&key), p, *time_nanos);
                baselines.insert(key, baseline);
                if let Some(grown) = grown {
                    batch.extend(
                        parca_ingest::to_series(&endpoint.name, labels, vec![grown], 0)
                            .map_err(|e| ScrapeError::Profile(e.to_string()))?,
                    );
                }
            }
        }
    }
    batch.extend(
        parca_ingest::to_series(&endpoint.name, labels, profiles, 0)
            .map_err(|e| ScrapeError::Profile(e.to_string()))?,
    );
    Ok(batch)
}

/// The samples stored, or why the batch was not (wholly) stored.
fn written(
    batch: &[Series],
    outcome: Result<parca_ingest::WriteOutcome, parca_tsdb::Error>,
) -> Result<usize, ScrapeError> {
    let outcome = outcome.map_err(|e| ScrapeError::Store(parca_tsdb::with_causes(&e)))?;
    if let Some(refused) = outcome.refused.first() {
        return Err(ScrapeError::Store(format!(
            "{} of {} series refused, e.g. {refused}",
            outcome.refused.len(),
            batch.len()
        )));
    }
    Ok(batch.iter().map(|s| s.profile.samples.len()).sum())
}
