//! Which handler answers which method and path, with request metrics around every answer.

use std::sync::Arc;
use std::time::Instant;

use hyper::body::Incoming;
use hyper::header::{
    ACCESS_CONTROL_ALLOW_CREDENTIALS, ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS,
    ACCESS_CONTROL_ALLOW_ORIGIN, ACCESS_CONTROL_EXPOSE_HEADERS, ACCESS_CONTROL_MAX_AGE,
    ACCESS_CONTROL_REQUEST_HEADERS, ACCESS_CONTROL_REQUEST_METHOD, HeaderName, HeaderValue, ORIGIN,
    WWW_AUTHENTICATE,
};
use hyper::{Method, Request, Response};

use crate::Api;
use crate::call::{Call, admit, read};
use crate::handlers::query::Metadata;
use crate::handlers::{ingest, ops, query, selfprof};
use crate::protocols::parca_rest;
use crate::response::{ApiError, Body, ErrorType};

pub(crate) async fn route(api: &Arc<Api>, request: Request<Incoming>) -> Response<Body> {
    let started = Instant::now();
    let (parts, mut body) = request.into_parts();
    let path = parts.uri.path().to_owned();
    let handler = handler_name(&path);
    let origin = parts.headers.get(ORIGIN).cloned();
    if parts.method == Method::OPTIONS
        && origin.is_some()
        && parts.headers.contains_key(ACCESS_CONTROL_REQUEST_METHOD)
    {
        let response = preflight(api, &parts.headers, origin.as_ref());
        api.metrics
            .observe_request(handler, response.status().as_u16(), started.elapsed());
        return response;
    }
    let mut challenge = None;
    let mut warnings = Vec::new();
    let response = match admit(api, &parts, &mut challenge).await {
        // The permit is held until the answer is made.
        Ok(_permit) => match read(api, parts, &mut body).await {
            Ok(call) => {
                let (response, noted) = crate::warnings::collecting(dispatch(api, call)).await;
                warnings = noted;
                response
            }
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    };
    // What the answer did not need of the body (all of it, for a refusal) is read first, so
    // that an HTTP/2 client still uploading reads the answer, not a reset stream.
    crate::body::drain(&mut body).await;
    let response = response.unwrap_or_else(|e| {
        if e.kind == ErrorType::Internal {
            tracing::error!(path, error = %e.message, "request failed");
        }
        e.into_response()
    });
    // An error too: "no profiles" from a store whose shard did not answer must say so.
    let mut response = crate::warnings::attach(response, &warnings);
    let headers = response.headers_mut();
    allow_origin(api, headers, origin.as_ref());
    if let Some(challenge) = challenge {
        headers.insert(WWW_AUTHENTICATE, HeaderValue::from_static(challenge));
    }
    for (name, value) in api.options.security.response_headers().iter() {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            headers.insert(name, value);
        }
    }
    api.metrics
        .observe_request(handler, response.status().as_u16(), started.elapsed());
    response
}

/// Whether `--cors-allowed-origins` lets pages of `origin` call the API.
fn origin_allowed(api: &Api, origin: &HeaderValue) -> bool {
    let allowed = &api.options.cors_allowed_origins;
    allowed
        .iter()
        .any(|a| a == "*" || a.as_bytes() == origin.as_bytes())
}

/// The CORS headers of an answer to a page of an allowed origin: the origin echoed (so that
/// credentials work, which `*` forbids), and the headers of gRPC-web answers exposed.
fn allow_origin(api: &Api, headers: &mut hyper::HeaderMap, origin: Option<&HeaderValue>) {
    let Some(origin) = origin.filter(|o| origin_allowed(api, o)) else {
        return;
    };
    headers.insert(ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
    headers.insert(
        ACCESS_CONTROL_ALLOW_CREDENTIALS,
        HeaderValue::from_static("true"),
    );
    headers.insert(
        ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static(
            "grpc-status, grpc-message, grpc-status-details-bin, content-type",
        ),
    );
    headers.append(hyper::header::VARY, HeaderValue::from_static("Origin"));
}

/// A CORS preflight (`OPTIONS` with `Access-Control-Request-Method`), answered before any
/// credential check (browsers send none with it): 204, with the permissions when the origin is
/// allowed and without them (so the browser refuses) when it is not.
fn preflight(
    api: &Api,
    request: &hyper::HeaderMap,
    origin: Option<&HeaderValue>,
) -> Response<Body> {
    let mut response = crate::response::with_type(Vec::new(), "text/plain; charset=utf-8");
    *response.status_mut() = hyper::StatusCode::NO_CONTENT;
    let headers = response.headers_mut();
    allow_origin(api, headers, origin);
    if headers.contains_key(ACCESS_CONTROL_ALLOW_ORIGIN) {
        headers.insert(
            ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("GET, POST, PUT, HEAD, OPTIONS"),
        );
        if let Some(asked) = request.get(ACCESS_CONTROL_REQUEST_HEADERS) {
            headers.insert(ACCESS_CONTROL_ALLOW_HEADERS, asked.clone());
        }
        headers.insert(ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("600"));
    }
    response
}

/// A low-cardinality name for metrics: the route, not the raw path.
fn handler_name(path: &str) -> &'static str {
    match path {
        p if p.starts_with("/api/v1/label/") => "/api/v1/label/:name/values",
        p if p.starts_with("/debug/pprof/") => "/debug/pprof",
        p if p.starts_with("/profiles/") => "/profiles",
        p => ROUTES
            .iter()
            .find(|(route, _)| *route == p)
            .map_or("other", |(route, _)| route),
    }
}

/// Paths and the methods they take (for 405 answers and metric names).
const ROUTES: &[(&str, &[Method])] = &[
    ("/api/v1/query", &[Method::GET, Method::POST]),
    ("/api/v1/query_range", &[Method::GET, Method::POST]),
    ("/api/v1/query_exemplars", &[Method::GET, Method::POST]),
    ("/api/v1/profile_types", &[Method::GET]),
    ("/api/v1/parse_query", &[Method::GET, Method::POST]),
    ("/api/v1/labels", &[Method::GET, Method::POST]),
    ("/api/v1/series", &[Method::GET, Method::POST]),
    ("/api/v1/write", &[Method::POST]),
    ("/ingest", &[Method::POST]),
    ("/push.v1.PusherService/Push", &[Method::POST]),
    ("/v1development/profiles", &[Method::POST]),
    ("/api/v1/targets", &[Method::GET]),
    ("/api/v1/rules", &[Method::GET]),
    ("/api/v1/alerts", &[Method::GET]),
    ("/api/v1/insights", &[Method::GET]),
    ("/federate", &[Method::GET]),
    ("/api/v1/status/config", &[Method::GET]),
    ("/api/v1/status/tsdb", &[Method::GET]),
    ("/api/v1/status/buildinfo", &[Method::GET]),
    ("/api/v1/status/flags", &[Method::GET]),
    ("/api/v1/status/store", &[Method::GET]),
    ("/api/v1/store/read", &[Method::POST]),
    ("/-/healthy", &[Method::GET, Method::HEAD]),
    ("/-/ready", &[Method::GET, Method::HEAD]),
    ("/-/reload", &[Method::POST, Method::PUT]),
    ("/-/quit", &[Method::POST, Method::PUT]),
    ("/metrics", &[Method::GET]),
];

async fn dispatch(api: &Arc<Api>, call: Call) -> Result<Response<Body>, ApiError> {
    if let Some((_, methods)) = ROUTES.iter().find(|(p, _)| *p == call.path)
        && !methods.contains(&call.method)
    {
        return Err(ApiError::new(
            ErrorType::MethodNotAllowed,
            format!(
                "{} is not allowed on {}; use {}",
                call.method,
                call.path,
                methods
                    .iter()
                    .map(Method::as_str)
                    .collect::<Vec<_>>()
                    .join(" or ")
            ),
        ));
    }
    if crate::protocols::connect::is_connect(&call) {
        return Ok(crate::protocols::connect::handle(api, call).await);
    }
    if let Some(name) = call
        .path
        .strip_prefix("/api/v1/label/")
        .and_then(|rest| rest.strip_suffix("/values"))
    {
        let name = name.to_owned();
        return query::metadata(api, call, Metadata::Values(name)).await;
    }
    match call.path.as_str() {
        "/api/v1/query" => query::instant(api, call).await,
        "/api/v1/query_range" => query::range(api, call).await,
        "/api/v1/query_exemplars" => crate::handlers::exemplars::query_exemplars(api, call).await,
        "/api/v1/profile_types" => query::profile_types(api, call).await,
        "/api/v1/parse_query" => crate::handlers::parse_query::parse_query(&call),
        "/api/v1/labels" => query::metadata(api, call, Metadata::Names).await,
        "/api/v1/series" => query::metadata(api, call, Metadata::Series).await,
        "/api/v1/write" => ingest::write(api, call).await,
        "/ingest" => ingest::pyroscope_ingest(api, call).await,
        "/push.v1.PusherService/Push" => Ok(ingest::pyroscope_push(api, call).await),
        "/v1development/profiles" => Ok(ingest::otlp_export(api, call).await),
        "/api/v1/targets" => ops::targets(api, &call),
        "/api/v1/rules" => crate::handlers::rules::rules(api, &call),
        "/api/v1/alerts" => Ok(crate::handlers::rules::alerts(api)),
        "/api/v1/insights" => Ok(crate::handlers::rules::insights(api)),
        "/federate" => crate::handlers::rules::federate(api, &call),
        "/api/v1/status/config" => Ok(ops::config(api)),
        "/api/v1/status/tsdb" => ops::tsdb_status(api).await,
        "/api/v1/status/buildinfo" => Ok(ops::buildinfo(api)),
        "/api/v1/status/flags" => Ok(ops::flags(api)),
        "/api/v1/status/store" => crate::handlers::store::status(api).await,
        "/api/v1/store/read" => crate::handlers::store::read(api, call).await,
        "/-/healthy" => Ok(crate::response::text("Parca is Healthy.\n")),
        "/-/ready" => ops::ready(api),
        "/-/reload" => ops::reload(api).await,
        "/-/quit" => Ok(ops::quit(api)),
        // The store's figures take its locks and list its files: off the async workers.
        "/metrics" => {
            let api = Arc::clone(api);
            tokio::task::spawn_blocking(move || ops::metrics(&api))
                .await
                .map_err(|e| ApiError::internal(format!("metrics task failed: {e}")))
        }
        p if p.starts_with("/debug/pprof") => selfprof::handle(api, call).await,
        p if p.starts_with("/profiles/") => Ok(parca_rest::handle(api, call).await),
        _ if is_ui(&call) => ui_asset(&call),
        _ => Err(ApiError::new(
            ErrorType::NotFound,
            format!("no endpoint at {}", call.path),
        )),
    }
}

/// Paths the API owns; GET and HEAD on any other path is the web UI's.
const API_PREFIXES: &[&str] = &[
    "/api/",
    "/-/",
    "/metrics",
    "/federate",
    "/debug/pprof",
    "/ingest",
    "/push.v1.",
    // Parca's HTTP gateway and gRPC services, OTLP's: a script that asks one of these for
    // something we do not serve gets a JSON 404, never the UI's page with 200.
    "/profiles/",
    "/parca.",
    "/opentelemetry.",
    "/v1development/",
];

fn is_ui(call: &Call) -> bool {
    (call.method == Method::GET || call.method == Method::HEAD)
        && !API_PREFIXES.iter().any(|p| call.path.starts_with(p))
}

/// A file of the embedded UI (`index.html` for client-side routes), 304 when the ETag matches.
fn ui_asset(call: &Call) -> Result<Response<Body>, ApiError> {
    use hyper::header::{CACHE_CONTROL, ETAG, HeaderValue, IF_NONE_MATCH};
    let asset = parca_web::asset(&call.path)
        .ok_or_else(|| ApiError::new(ErrorType::NotFound, format!("no file at {}", call.path)))?;
    let fresh = call
        .headers
        .get(IF_NONE_MATCH)
        .is_some_and(|v| v.as_bytes() == asset.etag.as_bytes());
    let mut response = crate::response::with_type(
        if fresh { &[][..] } else { asset.bytes },
        asset.content_type,
    );
    if fresh {
        *response.status_mut() = hyper::StatusCode::NOT_MODIFIED;
    }
    let headers = response.headers_mut();
    headers.insert(ETAG, HeaderValue::from_static(asset.etag));
    headers.insert(
        CACHE_CONTROL,
        HeaderValue::from_static(parca_web::CACHE_CONTROL),
    );
    Ok(response)
}
