//! Answers: Prometheus' JSON envelope, and the one place where an error kind becomes a status.

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use hyper::{Response, StatusCode};
use serde::Serialize;

/// What a 503 asks the client to wait before it retries: the store retries a failed disk every
/// second, and opening replays the log in seconds.
pub const RETRY_AFTER_SECONDS: u32 = 5;

/// The body of every answer.
pub type Body = Full<Bytes>;

/// Prometheus' error types; each has its HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorType {
    /// The request is malformed (400).
    BadData,
    /// The query is valid but cannot be executed, e.g. a limit was hit (422).
    Execution,
    /// The server is not ready yet (503).
    Unavailable,
    /// No such endpoint or resource (404).
    NotFound,
    /// The method is not allowed on this path (405).
    MethodNotAllowed,
    /// The request is refused because the resource is busy, e.g. a profile already runs (409).
    Conflict,
    /// No or wrong credentials (401, with a `WWW-Authenticate` challenge).
    Unauthorized,
    /// The endpoint is turned off by a flag (403).
    Forbidden,
    /// The request body is over the size limit (413).
    PayloadTooLarge,
    /// Too many requests at once, or over the rate limit (429).
    TooManyRequests,
    /// The body's content type is not one the endpoint reads (415).
    UnsupportedMediaType,
    /// Our own fault (500).
    Internal,
}

impl ErrorType {
    /// The HTTP status of the kind.
    pub fn status(self) -> StatusCode {
        match self {
            ErrorType::BadData => StatusCode::BAD_REQUEST,
            ErrorType::Execution => StatusCode::UNPROCESSABLE_ENTITY,
            ErrorType::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            ErrorType::NotFound => StatusCode::NOT_FOUND,
            ErrorType::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ErrorType::Conflict => StatusCode::CONFLICT,
            ErrorType::Unauthorized => StatusCode::UNAUTHORIZED,
            ErrorType::Forbidden => StatusCode::FORBIDDEN,
            ErrorType::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorType::TooManyRequests => StatusCode::TOO_MANY_REQUESTS,
            ErrorType::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorType::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The gRPC status code of the kind, for Parca's APIs (gRPC, and its HTTP gateway's JSON
    /// errors): the one mapping from our errors to gRPC's.
    pub fn grpc_code(self) -> u32 {
        match self {
            ErrorType::BadData | ErrorType::Execution | ErrorType::UnsupportedMediaType => 3, // INVALID_ARGUMENT
            ErrorType::NotFound => 5,  // NOT_FOUND
            ErrorType::Forbidden => 7, // PERMISSION_DENIED
            ErrorType::TooManyRequests | ErrorType::PayloadTooLarge => 8, // RESOURCE_EXHAUSTED
            ErrorType::Conflict => 10, // ABORTED
            ErrorType::MethodNotAllowed => 12, // UNIMPLEMENTED
            ErrorType::Internal => 13, // INTERNAL
            ErrorType::Unavailable => 14, // UNAVAILABLE
            ErrorType::Unauthorized => 16, // UNAUTHENTICATED
        }
    }

    fn name(self) -> &'static str {
        match self {
            ErrorType::BadData => "bad_data",
            ErrorType::Execution => "execution",
            ErrorType::Unavailable => "unavailable",
            ErrorType::NotFound => "not_found",
            ErrorType::MethodNotAllowed => "method_not_allowed",
            ErrorType::Conflict => "conflict",
            ErrorType::Unauthorized => "unauthorized",
            ErrorType::Forbidden => "forbidden",
            ErrorType::PayloadTooLarge => "payload_too_large",
            ErrorType::TooManyRequests => "too_many_requests",
            ErrorType::UnsupportedMediaType => "unsupported_media_type",
            ErrorType::Internal => "internal",
        }
    }
}

/// A failed request: its kind and a message that says what was wrong, in words, and for
/// clients that act on it (the web UI), the place in the query and the reason as fields of the
/// envelope, so that nobody reads them out of the message.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// The kind, which decides the status.
    pub kind: ErrorType,
    /// What went wrong.
    pub message: String,
    /// For a query that does not parse: the 1-based line and column of the fault
    /// (`"position": {"line": 1, "column": 12}` in the envelope).
    pub position: Option<(usize, usize)>,
    /// A stable name of a condition clients handle (`"reason"` in the envelope), such as
    /// `no_profiles` when a query matched nothing in its time range.
    pub reason: Option<&'static str>,
}

impl ApiError {
    /// An error of `kind`.
    pub fn new(kind: ErrorType, message: impl Into<String>) -> Self {
        ApiError {
            kind,
            message: message.into(),
            position: None,
            reason: None,
        }
    }

    /// The same error, placed at `line` and `column` of the query.
    pub fn at(mut self, line: usize, column: usize) -> Self {
        self.position = Some((line, column));
        self
    }

    /// The same error, with a stable reason clients act on.
    pub fn because(mut self, reason: &'static str) -> Self {
        self.reason = Some(reason);
        self
    }

    /// A malformed request.
    pub fn bad_data(message: impl Into<String>) -> Self {
        ApiError::new(ErrorType::BadData, message)
    }

    /// A request that cannot be executed.
    pub fn execution(message: impl Into<String>) -> Self {
        ApiError::new(ErrorType::Execution, message)
    }

    /// Our own fault.
    pub fn internal(message: impl Into<String>) -> Self {
        ApiError::new(ErrorType::Internal, message)
    }

    /// A request refused by a limit: `kind` decides the status, and `flag` is named so the
    /// operator knows which setting to change.
    pub fn limit(kind: ErrorType, what: impl std::fmt::Display, flag: &str) -> Self {
        ApiError::new(kind, format!("{what} (limit set by {flag})"))
    }

    /// A store error as an answer: its class decides the kind (a refusal is the request's
    /// fault, a store that takes no writes for now is unavailable, anything else is ours), and
    /// `context` says what was being done.
    pub fn from_store(context: &str, error: &parca_tsdb::Error) -> Self {
        let kind = match error.class() {
            parca_tsdb::ErrorClass::Refused => ErrorType::BadData,
            parca_tsdb::ErrorClass::Unavailable => ErrorType::Unavailable,
            _ => ErrorType::Internal,
        };
        ApiError::new(
            kind,
            format!("{context}: {}", parca_tsdb::with_causes(error)),
        )
    }

    /// Not ready yet.
    pub fn unavailable(message: impl Into<String>) -> Self {
        ApiError::new(ErrorType::Unavailable, message)
    }

    /// The HTTP status of the error.
    pub fn status(&self) -> StatusCode {
        self.kind.status()
    }

    /// The error as Prometheus' envelope with its status.
    pub fn into_response(self) -> Response<Body> {
        let mut body = serde_json::json!({
            "status": "error",
            "errorType": self.kind.name(),
            "error": self.message,
        });
        if let Some((line, column)) = self.position {
            body["position"] = serde_json::json!({"line": line, "column": column});
        }
        if let Some(reason) = self.reason {
            body["reason"] = reason.into();
        }
        let mut response = json_response(&body);
        *response.status_mut() = self.kind.status();
        if self.kind == ErrorType::Unavailable {
            response
                .headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS));
        }
        response
    }
}

/// `{"status":"success","data":…}`.
pub fn success(data: &impl Serialize) -> Response<Body> {
    #[derive(Serialize)]
    struct Envelope<'a, T> {
        status: &'static str,
        data: &'a T,
    }
    json_response(&Envelope {
        status: "success",
        data,
    })
}

/// `value` as JSON, outside the envelope.
pub fn json_response(value: &impl Serialize) -> Response<Body> {
    let bytes = serde_json::to_vec(value).expect("API values serialize");
    with_type(bytes, "application/json")
}

/// Raw bytes with a content type.
pub fn with_type(bytes: impl Into<Bytes>, content_type: &'static str) -> Response<Body> {
    let mut response = Response::new(Full::new(bytes.into()));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// Plain text.
pub fn text(body: impl Into<String>) -> Response<Body> {
    with_type(body.into(), "text/plain; charset=utf-8")
}

/// The body of every answer as served: our own answers and gRPC's (which end with trailers)
/// share it.
pub type ServedBody = http_body_util::combinators::UnsyncBoxBody<
    bytes::Bytes,
    Box<dyn std::error::Error + Send + Sync + 'static>,
>;
