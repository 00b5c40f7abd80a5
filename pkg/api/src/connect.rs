//! Connect's unary protocol (connectrpc.com) for Parca's services: `POST
//! /<package>.<Service>/<Method>` with the bare message as the body (`application/proto`), the
//! bare answer back with 200, and errors as Connect's JSON (`{"code", "message"}`) with the
//! HTTP status Connect assigns to the code. The methods are the same implementations gRPC calls
//! (`parca_grpc.rs`). Connect's JSON encoding is refused with a message saying so.

use std::future::Future;
use std::sync::Arc;

use hyper::Response;
use hyper::header::CONTENT_TYPE;
use parca_grpc_proto::profilestore::profile_store_service_server::ProfileStoreService as _;
use parca_grpc_proto::query::query_service_server::QueryService as _;
use prost::Message;

use crate::grpc::{PARCA_QUERY, PARCA_STORE};
use crate::parca_grpc::{ParcaProfileStore, ParcaQueries};
use crate::response::{Body, with_type};
use crate::router::Call;
use crate::{Api, ingest};

/// Whether `call` is a Connect request for one of Parca's services (a prefix before the
/// package is allowed, as for gRPC-web).
pub(crate) fn is_connect(call: &Call) -> bool {
    call.method == hyper::Method::POST
        && (call.path.contains(PARCA_QUERY) || call.path.contains(PARCA_STORE))
        && call
            .headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| {
                let t = t.split(';').next().unwrap_or("").trim();
                t == "application/proto" || t == "application/json"
            })
}

/// Answers a Connect unary call.
pub(crate) async fn handle(api: &Arc<Api>, call: Call) -> Response<Body> {
    let content_type = call
        .headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if content_type.starts_with("application/json") {
        return error(
            tonic::Code::Unimplemented,
            "Connect's JSON encoding is not served yet: send `Content-Type: application/proto`",
        );
    }
    let body = match ingest::content_decoded(api, &call) {
        Ok(body) => body.into_owned(),
        Err(e) => return error(tonic::Code::InvalidArgument, &e.message),
    };
    let path = &call.path[call.path.find("/parca.").unwrap_or(0)..];
    let queries = ParcaQueries {
        api: Arc::clone(api),
    };
    let store = ParcaProfileStore {
        api: Arc::clone(api),
    };
    let Some(method) = path
        .strip_prefix(PARCA_QUERY)
        .or_else(|| path.strip_prefix(PARCA_STORE))
    else {
        return error(tonic::Code::NotFound, &format!("no method {path}"));
    };
    match (path.starts_with(PARCA_QUERY), method) {
        (true, "QueryRange") => unary(&body, |r| queries.query_range(r)).await,
        (true, "Query") => unary(&body, |r| queries.query(r)).await,
        (true, "Series") => unary(&body, |r| queries.series(r)).await,
        (true, "ProfileTypes") => unary(&body, |r| queries.profile_types(r)).await,
        (true, "Labels") => unary(&body, |r| queries.labels(r)).await,
        (true, "Values") => unary(&body, |r| queries.values(r)).await,
        (true, "ShareProfile") => unary(&body, |r| queries.share_profile(r)).await,
        (true, "HasProfileData") => unary(&body, |r| queries.has_profile_data(r)).await,
        (false, "WriteRaw") => unary(&body, |r| store.write_raw(r)).await,
        (false, "WriteArrow") => unary(&body, |r| store.write_arrow(r)).await,
        (false, "Write") => error(
            tonic::Code::Unimplemented,
            "Write is a bidirectional stream, which Connect's unary protocol cannot carry: use gRPC",
        ),
        _ => error(tonic::Code::NotFound, &format!("no method {path}")),
    }
}

/// Decodes the request message, calls `method`, encodes its answer or its status.
async fn unary<Req, Res, F, Fut>(body: &[u8], method: F) -> Response<Body>
where
    Req: Message + Default,
    Res: Message,
    F: FnOnce(tonic::Request<Req>) -> Fut,
    Fut: Future<Output = Result<tonic::Response<Res>, tonic::Status>>,
{
    let request = match Req::decode(body) {
        Ok(r) => r,
        Err(e) => {
            return error(
                tonic::Code::InvalidArgument,
                &format!("the body is not the method's protobuf message: {e}"),
            );
        }
    };
    match method(tonic::Request::new(request)).await {
        Ok(response) => with_type(response.into_inner().encode_to_vec(), "application/proto"),
        Err(status) => error(status.code(), status.message()),
    }
}

/// Connect's error answer: the code's name and the message as JSON, with its HTTP status.
fn error(code: tonic::Code, message: &str) -> Response<Body> {
    use tonic::Code as C;
    let (http, name) = match code {
        C::Cancelled => (499, "canceled"),
        C::Unknown => (500, "unknown"),
        C::InvalidArgument => (400, "invalid_argument"),
        C::DeadlineExceeded => (504, "deadline_exceeded"),
        C::NotFound => (404, "not_found"),
        C::AlreadyExists => (409, "already_exists"),
        C::PermissionDenied => (403, "permission_denied"),
        C::ResourceExhausted => (429, "resource_exhausted"),
        C::FailedPrecondition => (400, "failed_precondition"),
        C::Aborted => (409, "aborted"),
        C::OutOfRange => (400, "out_of_range"),
        C::Unimplemented => (501, "unimplemented"),
        C::Internal => (500, "internal"),
        C::Unavailable => (503, "unavailable"),
        C::DataLoss => (500, "data_loss"),
        C::Unauthenticated => (401, "unauthenticated"),
        C::Ok => (200, "ok"),
    };
    let mut response = with_type(
        serde_json::json!({"code": name, "message": message}).to_string(),
        "application/json",
    );
    *response.status_mut() = hyper::StatusCode::from_u16(http).unwrap_or_default();
    response
}
