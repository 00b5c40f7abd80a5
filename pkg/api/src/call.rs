//! A request admitted and read: the checks before a request is read (the web configuration's
//! rate limit and credentials, the concurrency limit, the endpoints turned off by flags, the
//! declared body size), and the request taken apart into a [`Call`] with its body read within
//! the size limit. The router and the gRPC services both admit through here.

use std::sync::Arc;

use hyper::Method;
use hyper::body::Incoming;
use hyper::header::{AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, HeaderValue};

use crate::Params;
use crate::response::{ApiError, ErrorType};
use crate::state::Api;

/// A request taken apart: what handlers need, with the body read (within the size limit).
pub(crate) struct Call {
    pub method: Method,
    pub path: String,
    pub params: Params,
    pub headers: hyper::HeaderMap,
    pub body: bytes::Bytes,
}

/// The path of OTLP's profiles export.
pub(crate) const OTLP_EXPORT: &str =
    "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export";

/// [`admit`] for a caller that answers refusals its own way (gRPC: a status, no challenge).
pub(crate) async fn admit_parts(
    api: &Api,
    parts: &hyper::http::request::Parts,
) -> Result<Option<tokio::sync::OwnedSemaphorePermit>, ApiError> {
    let mut challenge = None;
    admit(api, parts, &mut challenge).await
}

/// Paths that answer however busy the server is: orchestrators' probes must not fail for load.
const PROBES: &[&str] = &["/-/healthy", "/-/ready"];

/// The checks before a request is read: the web configuration's rate limit and credentials,
/// the concurrency limit, and the endpoints turned off by flags. On success, the request's
/// place among those answered at once.
pub(crate) async fn admit(
    api: &Api,
    parts: &hyper::http::request::Parts,
    challenge: &mut Option<&'static str>,
) -> Result<Option<tokio::sync::OwnedSemaphorePermit>, ApiError> {
    let security = &api.options.security;
    if security.rate_limited() {
        return Err(ApiError::new(
            ErrorType::TooManyRequests,
            "over the request rate allowed by rate_limit in the web configuration file",
        ));
    }
    let authorization = parts.headers.get(AUTHORIZATION).map(HeaderValue::as_bytes);
    if let Err(denied) = security.authorize(authorization).await {
        *challenge = Some(denied.challenge);
        return Err(ApiError::new(ErrorType::Unauthorized, "Unauthorized"));
    }
    let path = parts.uri.path();
    let permit = if PROBES.contains(&path) {
        None
    } else {
        let permit = Arc::clone(&api.requests).try_acquire_owned().map_err(|_| {
            ApiError::limit(
                ErrorType::TooManyRequests,
                format_args!(
                    "{} requests are being answered already; retry shortly",
                    api.options.max_concurrent_requests
                ),
                "--web-max-concurrent-requests",
            )
        })?;
        Some(permit)
    };
    let options = &api.options;
    if matches!(path, "/-/reload" | "/-/quit") && !options.lifecycle {
        return Err(ApiError::new(
            ErrorType::Forbidden,
            format!("{path} is off: start the server with --web-enable-lifecycle to allow it"),
        ));
    }
    if is_push(path) && !options.push {
        return Err(ApiError::new(
            ErrorType::Forbidden,
            format!("{path} is off: this server takes no pushes (--web-enable-push=false)"),
        ));
    }
    if path.starts_with("/debug/pprof") && !options.self_pprof {
        return Err(ApiError::new(
            ErrorType::Forbidden,
            format!(
                "{path} is off: the server's own profiles are not served (--web-enable-pprof=false)"
            ),
        ));
    }
    let declared = parts
        .headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > options.max_body_bytes as u64) {
        return Err(body_too_large(options.max_body_bytes));
    }
    Ok(permit)
}

fn body_too_large(limit: usize) -> ApiError {
    ApiError::limit(
        ErrorType::PayloadTooLarge,
        format_args!("the request body is over {limit} bytes"),
        "--web-max-request-body-size",
    )
}

/// Paths that write profiles.
fn is_push(path: &str) -> bool {
    matches!(
        path,
        "/api/v1/write"
            | "/ingest"
            | "/push.v1.PusherService/Push"
            | "/v1development/profiles"
            | OTLP_EXPORT
    )
}

pub(crate) async fn read(
    api: &Api,
    parts: hyper::http::request::Parts,
    body: &mut Incoming,
) -> Result<Call, ApiError> {
    let limit = api.options.max_body_bytes;
    let body = crate::body::read_limited(body, limit)
        .await
        .map_err(|e| match e {
            crate::body::ReadError::TooLarge => body_too_large(limit),
            crate::body::ReadError::Failed(e) => {
                ApiError::bad_data(format!("cannot read the request body: {e}"))
            }
        })?;
    let mut params = Params::default();
    if let Some(query) = parts.uri.query() {
        params.add_encoded(query.as_bytes());
    }
    let is_form = parts
        .headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    // Push bodies are profiles whatever their client calls them (curl says form by default).
    if parts.method == Method::POST && is_form && !is_push(parts.uri.path()) {
        params.add_encoded(&body);
    }
    Ok(Call {
        method: parts.method,
        path: parts.uri.path().to_owned(),
        params,
        headers: parts.headers,
        body,
    })
}
