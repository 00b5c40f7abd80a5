//! The API's shared state ([`Api`]): its options, the store once it is ready, the query
//! engine, the rules, the binary's controls, the metrics and the request and query limits.
//! Every handler reads it; it knows none of them.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parca_tsdb::Db;
use prometheus_client::registry::Registry;

use crate::control::{BuildInfo, Control};
use crate::metrics::ApiMetrics;
use crate::response::ApiError;

/// What the API is configured with.
#[derive(Debug, Clone)]
pub struct Options {
    /// TLS, credentials, rate limit and response headers (`--web-config-file`).
    pub security: Arc<parca_webconfig::Security>,
    /// Whether `/-/reload` and `/-/quit` are served (`--web-enable-lifecycle`); 403 otherwise.
    pub lifecycle: bool,
    /// Whether the push endpoints are served (`--web-enable-push`); 403 otherwise, so that a
    /// query-only server has no write path.
    pub push: bool,
    /// Whether the server's own `/debug/pprof` is served (`--web-enable-pprof`).
    pub self_pprof: bool,
    /// Requests answered at once; more get 429 (`--web-max-concurrent-requests`).
    pub max_concurrent_requests: usize,
    /// Largest accepted request body, in bytes (before decompression); larger get 413
    /// (`--web-max-request-body-size`).
    pub max_body_bytes: usize,
    /// What one push may hold.
    pub push_limits: PushLimits,
    /// Queries evaluated at once; more get 429 (`--query-max-concurrency`).
    pub max_concurrent_queries: usize,
    /// How long a query may take before it is answered 422 (`--query-timeout`).
    pub query_timeout: Duration,
    /// Origins whose pages may call the API from a browser (`--cors-allowed-origins`; `*`:
    /// any). Empty: no CORS headers, so browsers allow only the UI's own origin.
    pub cors_allowed_origins: Vec<String>,
    /// How pushed pprof bodies are decoded (the decompressed-size limit).
    pub decode: parca_pprof::DecodeOptions,
    /// Version and revision for `/api/v1/status/buildinfo`.
    pub build: BuildInfo,
    /// What one query may cost.
    pub limits: parca_query::Limits,
    /// The process's heap profile as gzipped pprof, for `/debug/pprof/heap`, when the binary's
    /// allocator can give one.
    pub heap_profile: Option<HeapProfile>,
    /// The server's `global.external_labels`, which its blocks carry in the bucket: a querier
    /// that reads this server as a shard matches them (`/api/v1/status/store`).
    pub external_labels: std::collections::BTreeMap<String, String>,
    /// The server's flags as given or defaulted (long names without dashes in front, values as
    /// text), served at `/api/v1/status/flags` as Prometheus serves its own: the web UI reads
    /// its settings there (`web-trace-url-template`).
    pub flags: std::collections::BTreeMap<String, String>,
}

/// What one push may hold; each refusal names its flag.
#[derive(Debug, Clone, Copy)]
pub struct PushLimits {
    /// Series (label sets) one push may write (`--ingest-max-series-per-push`).
    pub max_series: usize,
    /// Labels one series may have, `__name__` included (`--ingest-max-labels-per-series`).
    pub max_labels: usize,
    /// Bytes of a label name (`--ingest-max-label-name-length`).
    pub max_name_bytes: usize,
    /// Bytes of a label value (`--ingest-max-label-value-length`).
    pub max_value_bytes: usize,
}

impl Default for PushLimits {
    /// Pyroscope's and Mimir's defaults for labels; series enough for an agent's window of a
    /// busy node (one series per process).
    fn default() -> Self {
        PushLimits {
            max_series: 10_000,
            max_labels: 30,
            max_name_bytes: 1024,
            max_value_bytes: 2048,
        }
    }
}

/// Takes the process's heap profile, or says why it cannot (the binary's allocator decides
/// whether there is one: [`parca_selfprof::heap_profile`] for jemalloc).
pub type HeapProfile = fn() -> Result<parca_pprof::proto::Profile, parca_selfprof::Error>;

impl Default for Options {
    fn default() -> Self {
        Options {
            security: Arc::new(parca_webconfig::Security::open()),
            lifecycle: false,
            push: true,
            self_pprof: true,
            max_concurrent_requests: 512,
            max_body_bytes: 64 << 20,
            push_limits: PushLimits::default(),
            max_concurrent_queries: 20,
            query_timeout: Duration::from_secs(120),
            cors_allowed_origins: Vec::new(),
            decode: parca_pprof::DecodeOptions::default(),
            build: BuildInfo::default(),
            limits: parca_query::Limits::default(),
            heap_profile: None,
            external_labels: Default::default(),
            flags: Default::default(),
        }
    }
}

/// The API's shared state: the store (once ready), the server's controls and metrics.
pub struct Api {
    pub(crate) options: Options,
    pub(crate) store: OnceLock<Arc<Db>>,
    pub(crate) engine: OnceLock<parca_query::Engine>,
    /// The rule groups the server evaluates (`/api/v1/rules`, `/api/v1/alerts`, `/federate`).
    pub(crate) rules: OnceLock<Arc<parca_rules::Manager>>,
    /// The deploy insights (`/api/v1/insights`, and their series on `/federate`).
    pub(crate) insights: OnceLock<Arc<parca_rules::Insights>>,
    pub(crate) control: Arc<dyn Control>,
    pub(crate) registry: Registry,
    pub(crate) metrics: ApiMetrics,
    /// Requests being answered ([`Options::max_concurrent_requests`]).
    pub(crate) requests: Arc<tokio::sync::Semaphore>,
    /// Queries being evaluated ([`Options::max_concurrent_queries`]).
    pub(crate) queries: Arc<tokio::sync::Semaphore>,
    /// Held by a push appending on an async worker: pushes that find the head busy with
    /// another push wait here as tasks, not on the head's lock as threads.
    pub(crate) appending: tokio::sync::Mutex<()>,
    /// Tables that pushes are decoded into, reused from push to push.
    pub(crate) decoders: parca_ingest::TablesPool,
}

impl Api {
    /// An API over `control`. Its own metrics are added to `registry`, which `/metrics` serves.
    pub fn new(options: Options, control: Arc<dyn Control>, mut registry: Registry) -> Api {
        let metrics = ApiMetrics::register(&mut registry);
        Api {
            requests: Arc::new(tokio::sync::Semaphore::new(options.max_concurrent_requests)),
            queries: Arc::new(tokio::sync::Semaphore::new(options.max_concurrent_queries)),
            appending: tokio::sync::Mutex::new(()),
            decoders: parca_ingest::TablesPool::new(),
            options,
            store: OnceLock::new(),
            engine: OnceLock::new(),
            rules: OnceLock::new(),
            insights: OnceLock::new(),
            control,
            registry,
            metrics,
        }
    }

    /// Makes the store available: data endpoints and `/-/ready` answer from now on. Only the
    /// first call has an effect.
    pub fn set_store(&self, db: Arc<Db>) {
        if self.store.set(Arc::clone(&db)).is_ok() {
            let _ = self.engine.set(parca_query::Engine::new(
                Arc::clone(&db),
                self.options.limits,
            ));
            self.metrics.watch_store(db);
        }
    }

    /// Serves the rule groups of `rules` at `/api/v1/rules` and `/api/v1/alerts` (empty until
    /// set). Only the first call counts.
    pub fn set_rules(&self, rules: Arc<parca_rules::Manager>) {
        let _ = self.rules.set(rules);
    }

    /// Serves `insights` at `/api/v1/insights` and their series on `/federate` (empty until
    /// set). Only the first call counts.
    pub fn set_insights(&self, insights: Arc<parca_rules::Insights>) {
        let _ = self.insights.set(insights);
    }

    /// The store, or 503 while it opens.
    pub(crate) fn store(&self) -> Result<Arc<Db>, ApiError> {
        self.store.get().cloned().ok_or_else(|| {
            ApiError::unavailable("the store is still replaying its write-ahead log; retry shortly")
        })
    }

    /// The query engine, or 503 while the store opens.
    pub(crate) fn engine(&self) -> Result<parca_query::Engine, ApiError> {
        self.store()?;
        Ok(self.engine.get().expect("set with the store").clone())
    }
}
