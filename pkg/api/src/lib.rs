//! The HTTP API of the server, on hyper: query and metadata endpoints in Prometheus' manner,
//! push ingest (ours and Pyroscope's two protocols), operations (targets, status, reload,
//! metrics, health) and the server's own pprof endpoints.
//!
//! Paths and parameters follow `documentation/http-api.md`. Every JSON answer uses
//! Prometheus' envelope, and every error names what was wrong with the request.
//!
//! # Design constraints
//!
//! - Only this crate sees hyper, HTTP and JSON envelopes; the store, the query engine and the
//!   scrapers know nothing of them. The server binary wires them together through [`Control`].
//! - The store is synchronous: every call into it runs on tokio's blocking pool, and no lock is
//!   held across an `.await`.
//! - The status code of an error is decided in one place, [`ErrorType`]'s mapping.
//! - Until the store has replayed its WAL ([`Api::set_store`]), data endpoints answer 503 and
//!   `/-/ready` says why; `/-/healthy` answers at once.
//!
//! # Example
//!
//! ```no_run
//! # async fn run(api: std::sync::Arc<parca_api::Api>) -> std::io::Result<()> {
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:7070").await?;
//! parca_api::serve(listener, api, std::future::pending()).await;
//! # Ok(()) }
//! ```

mod body;
mod connect;
mod exemplars;
mod grpc;
mod ingest;
mod metrics;
mod ops;
mod params;
mod parca_arrow;
mod parca_grpc;
mod parca_rest;
mod parse_query;
mod query;
pub mod render;
mod response;
mod router;
mod rules;
mod selfprof;
mod store;
mod trace_link;
mod warnings;

use std::convert::Infallible;
use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use parca_tsdb::Db;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

pub use metrics::ApiMetrics;
pub use ops::{ActiveTarget, BuildInfo, Control, DroppedTarget, ProfileHealth, TargetsReport};
pub use params::{ParamError, Params, parse_duration_ms, parse_time_ms};
pub use response::{ApiError, Body, ErrorType};
pub use trace_link::{TRACE_URL_PLACEHOLDERS, TraceUrlTemplateError, parse_trace_url_template};

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

/// The body of every answer as served: our own answers and gRPC's (which end with trailers)
/// share it.
pub type ServedBody = http_body_util::combinators::UnsyncBoxBody<
    bytes::Bytes,
    Box<dyn std::error::Error + Send + Sync + 'static>,
>;

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
    options: Options,
    store: OnceLock<Arc<Db>>,
    engine: OnceLock<parca_query::Engine>,
    /// The rule groups the server evaluates (`/api/v1/rules`, `/api/v1/alerts`, `/federate`).
    rules: OnceLock<Arc<parca_rules::Manager>>,
    /// The deploy insights (`/api/v1/insights`, and their series on `/federate`).
    insights: OnceLock<Arc<parca_rules::Insights>>,
    control: Arc<dyn Control>,
    registry: Registry,
    metrics: ApiMetrics,
    /// Requests being answered ([`Options::max_concurrent_requests`]).
    requests: Arc<tokio::sync::Semaphore>,
    /// Queries being evaluated ([`Options::max_concurrent_queries`]).
    queries: Arc<tokio::sync::Semaphore>,
}

impl Api {
    /// An API over `control`. Its own metrics are added to `registry`, which `/metrics` serves.
    pub fn new(options: Options, control: Arc<dyn Control>, mut registry: Registry) -> Api {
        let metrics = ApiMetrics::register(&mut registry);
        Api {
            requests: Arc::new(tokio::sync::Semaphore::new(options.max_concurrent_requests)),
            queries: Arc::new(tokio::sync::Semaphore::new(options.max_concurrent_queries)),
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

    /// The store, or 503 while it opens.
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

    fn store(&self) -> Result<Arc<Db>, ApiError> {
        self.store.get().cloned().ok_or_else(|| {
            ApiError::unavailable("the store is still replaying its write-ahead log; retry shortly")
        })
    }

    /// The query engine, or 503 while the store opens.
    fn engine(&self) -> Result<parca_query::Engine, ApiError> {
        self.store()?;
        Ok(self.engine.get().expect("set with the store").clone())
    }

    /// Answers one request of the HTTP API.
    pub async fn handle(self: &Arc<Self>, request: Request<Incoming>) -> Response<Body> {
        router::route(self, request).await
    }

    /// Answers one request as served on the port: gRPC to its services, the rest to
    /// [`Api::handle`].
    pub async fn serve_request(
        self: &Arc<Self>,
        request: Request<Incoming>,
    ) -> Response<ServedBody> {
        if let Some(protocol) = grpc::protocol(&request) {
            grpc::handle(self, request, protocol).await
        } else {
            grpc::boxed(self.handle(request).await)
        }
    }
}

/// Serves `api` on `listener` until `shutdown` completes, then lets open requests finish for
/// up to 30 seconds. Each connection goes through [`Options::security`] first (TLS when
/// configured); a failed handshake is logged at debug level and the connection dropped.
pub async fn serve(listener: TcpListener, api: Arc<Api>, shutdown: impl Future<Output = ()>) {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(conn) => conn,
                    Err(error) => {
                        tracing::warn!(%error, "cannot accept a connection");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let api = Arc::clone(&api);
                let watcher = graceful.watcher();
                tokio::spawn(async move {
                    let security = Arc::clone(&api.options.security);
                    let stream = match security.accept(stream).await {
                        Ok(stream) => stream,
                        Err(error) => {
                            tracing::debug!(%peer, %error, "connection refused");
                            return;
                        }
                    };
                    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                    if !security.http2_enabled() {
                        builder = builder.http1_only();
                    } else if stream.negotiated_h2() {
                        builder = builder.http2_only();
                    }
                    let service = service_fn(move |request| {
                        let api = Arc::clone(&api);
                        async move { Ok::<_, Infallible>(api.serve_request(request).await) }
                    });
                    let connection = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
                    let connection = watcher.watch(connection.into_owned());
                    if let Err(error) = connection.await {
                        tracing::debug!(%error, "connection ended with an error");
                    }
                });
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    if tokio::time::timeout(Duration::from_secs(30), graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("open HTTP requests did not finish within 30 s of shutdown");
    }
}
