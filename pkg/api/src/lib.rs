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
//! - The store is synchronous: every call into it that may wait for a lock held for long (a
//!   query's, a cut's) runs on tokio's blocking pool, and no lock of the store is held across
//!   an `.await`. The exception is a push that the head takes at once, appended on the async
//!   worker under `try_hold` (`handlers/ingest.rs`): it waits at most for the WAL's buffer to
//!   be handed to the operating system, or, once per segment, for the segment's sync.
//! - The status code of an error is decided in one place, [`ErrorType`]'s mapping.
//! - Until the store has replayed its WAL ([`Api::set_store`]), data endpoints answer 503 and
//!   `/-/ready` says why; `/-/healthy` answers at once.
//!
//! # Layout
//!
//! Leaves first, each used by what is above it and using nothing above it: [`Api`]'s shared
//! state (`state.rs`) with the binary's [`Control`] (`control.rs`), answers and errors
//! (`response.rs`), parameters (`params.rs`), bodies (`body.rs`) and a request admitted and
//! read (`call.rs`); then the native endpoints (`handlers/`: queries, pushes, rules,
//! operations, the server's own profiles), Parca's and OpenTelemetry's protocols on top of
//! them (`protocols/`: gRPC, Connect, Parca's REST gateway and services, Arrow answers); the
//! router, which picks a handler for a path; and this file's accept loop.
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
mod call;
mod clock;
mod control;
mod handlers;
mod metrics;
mod params;
mod protocols;
pub mod render;
mod response;
mod router;
mod state;
mod trace_link;
mod warnings;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::{Request, Response};
use tokio::net::TcpListener;

pub use control::{ActiveTarget, BuildInfo, Control, DroppedTarget, ProfileHealth, TargetsReport};
pub use metrics::ApiMetrics;
pub use params::{ParamError, Params, parse_duration_ms, parse_time_ms};
pub use response::{ApiError, Body, ErrorType, ServedBody};
pub use state::{Api, HeapProfile, Options, PushLimits};
pub use trace_link::{TRACE_URL_PLACEHOLDERS, TraceUrlTemplateError, parse_trace_url_template};

impl Api {
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
        if let Some(protocol) = protocols::grpc::protocol(&request) {
            protocols::grpc::handle(self, request, protocol).await
        } else {
            protocols::grpc::boxed(self.handle(request).await)
        }
    }
}

/// Serves `api` on `listener` until `shutdown` completes, then lets open requests finish for
/// up to 30 seconds. Each connection goes through [`Options::security`] first (TLS when
/// configured); a failed handshake is logged at debug level and the connection dropped.
pub async fn serve(listener: TcpListener, api: Arc<Api>, shutdown: impl Future<Output = ()>) {
    let security = Arc::clone(&api.options.security);
    let answer = move |request| {
        let api = Arc::clone(&api);
        async move { api.serve_request(request).await }
    };
    parca_httpserve::serve(
        listener,
        security,
        answer,
        shutdown,
        Duration::from_secs(30),
    )
    .await;
}
