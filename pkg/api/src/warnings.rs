//! Warnings of partial answers: what a query could not cover (a shard that did not answer).
//!
//! Reads note their warnings into the request's collector ([`note`]) wherever they run; the
//! router puts them into the answer ([`attach`]): into the JSON envelope's `warnings` (as
//! Prometheus' API does; an error's envelope too, as "no profiles" may be the missing shard's
//! doing) and, for every format, a `Parca-Warning` header each.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::Full;
use hyper::Response;
use hyper::header::{HeaderName, HeaderValue};

use crate::response::Body;

tokio::task_local! {
    static WARNINGS: Arc<Mutex<Vec<String>>>;
}

/// The header that carries each warning, for answers that are not JSON.
pub(crate) const WARNING_HEADER: HeaderName = HeaderName::from_static("parca-warning");

/// Runs `answer` (a request's handling) and returns its result with the warnings noted
/// meanwhile.
pub(crate) async fn collecting<T>(answer: impl Future<Output = T>) -> (T, Vec<String>) {
    let collector = Arc::new(Mutex::new(Vec::new()));
    let out = WARNINGS.scope(Arc::clone(&collector), answer).await;
    let warnings = std::mem::take(&mut *collector.lock().expect("warnings lock poisoned"));
    (out, warnings)
}

/// Adds `warnings` to the request's answer; none outside a request.
pub(crate) fn note(warnings: Vec<String>) {
    if warnings.is_empty() {
        return;
    }
    let _ = WARNINGS.try_with(|all| {
        let mut all = all.lock().expect("warnings lock poisoned");
        for w in warnings {
            if !all.contains(&w) {
                all.push(w);
            }
        }
    });
}

/// `response` with `warnings`: a header each, and in its JSON envelope if it has one.
pub(crate) fn attach(response: Response<Body>, warnings: &[String]) -> Response<Body> {
    if warnings.is_empty() {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    add_headers(&mut parts.headers, warnings);
    let bytes = body_bytes(body);
    let json = parts
        .headers
        .get(hyper::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes() == b"application/json");
    let body = if json && bytes.starts_with(b"{\"") {
        let mut out = Vec::with_capacity(bytes.len() + 64 * warnings.len());
        out.extend_from_slice(b"{\"warnings\":");
        out.extend_from_slice(&serde_json::to_vec(warnings).expect("strings serialize"));
        out.push(b',');
        out.extend_from_slice(&bytes[1..]);
        Bytes::from(out)
    } else {
        bytes
    };
    Response::from_parts(parts, Full::new(body))
}

/// A `Parca-Warning` header per warning (characters a header cannot hold become `?`): what
/// answers that are not JSON carry, gRPC's included (as response metadata).
pub(crate) fn add_headers(headers: &mut hyper::HeaderMap, warnings: &[String]) {
    for w in warnings {
        let visible: String = w
            .chars()
            .map(|c| {
                if c.is_ascii_graphic() || c == ' ' {
                    c
                } else {
                    '?'
                }
            })
            .collect();
        if let Ok(v) = HeaderValue::from_str(&visible) {
            headers.append(WARNING_HEADER, v);
        }
    }
}

/// The bytes of a whole body.
fn body_bytes(body: Body) -> Bytes {
    use http_body_util::BodyExt;
    // A `Full` body is one frame, there at once: polled with a no-op waker it is ready.
    let mut collect = std::pin::pin!(body.collect());
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match collect.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(Ok(collected)) => collected.to_bytes(),
        std::task::Poll::Ready(Err(never)) => match never {},
        std::task::Poll::Pending => unreachable!("a Full body is ready at once"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn warnings_go_into_the_envelope_and_headers() {
        let ((), warnings) = collecting(async {
            note(vec!["shard a did not answer".into()]);
            note(vec!["shard a did not answer".into(), "shard b: é".into()]);
        })
        .await;
        assert_eq!(warnings.len(), 2);
        let response = attach(crate::response::success(&[1, 2]), &warnings);
        let headers: Vec<_> = response.headers().get_all(WARNING_HEADER).iter().collect();
        assert_eq!(headers, ["shard a did not answer", "shard b: ?"]);
        let body = body_bytes(response.into_body());
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(json["status"], "success");
        assert_eq!(json["data"], serde_json::json!([1, 2]));
        assert_eq!(json["warnings"][1], "shard b: é");
        // An error's envelope too.
        let error = attach(
            crate::response::ApiError::bad_data("nothing").into_response(),
            &warnings,
        );
        let json: serde_json::Value =
            serde_json::from_slice(&body_bytes(error.into_body())).unwrap();
        assert_eq!(json["status"], "error");
        assert_eq!(json["warnings"][0], "shard a did not answer");
        // Not JSON: headers only.
        let svg = attach(crate::response::text("x"), &warnings);
        assert_eq!(body_bytes(svg.into_body()), "x");
    }
}
