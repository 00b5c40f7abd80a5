//! Connect's unary protocol (connectrpc.com) for Parca's services: `POST
//! /<package>.<Service>/<Method>` with the bare message as the body, in protobuf
//! (`application/proto`) or in proto3's JSON (`application/json`, transcoded by reflection over
//! the `.proto` files' descriptors), the bare answer back with 200 in the same encoding, and
//! errors as Connect's JSON (`{"code", "message"}`) with the HTTP status Connect assigns to the
//! code. The methods are the same implementations gRPC calls (`parca_grpc.rs`).

use std::future::Future;
use std::sync::Arc;

use hyper::Response;
use hyper::header::CONTENT_TYPE;
use parca_grpc_proto::profilestore::profile_store_service_server::ProfileStoreService as _;
use parca_grpc_proto::query::query_service_server::QueryService as _;
use prost::Message;

use crate::Api;
use crate::call::Call;
use crate::handlers::ingest;
use crate::protocols::grpc::{PARCA_QUERY, PARCA_STORE};
use crate::protocols::parca_grpc::{ParcaProfileStore, ParcaQueries};
use crate::response::{Body, with_type};

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
    let json = call
        .headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/json"));
    let body = match ingest::content_decoded(api, &call) {
        Ok(body) => body.into_owned(),
        Err(e) => return error(tonic::Code::InvalidArgument, &e.message),
    };
    let path = &call.path[call.path.find("/parca.").unwrap_or(0)..];
    let Some((service, method)) = path.strip_prefix('/').and_then(|p| p.split_once('/')) else {
        return error(tonic::Code::NotFound, &format!("no method {path}"));
    };
    let body = if json {
        match json_to_proto(service, method, &body) {
            Ok(bytes) => bytes,
            Err(status) => return error(status.code(), status.message()),
        }
    } else {
        body
    };
    let answer = call_method(api, path, &body).await;
    match answer {
        Ok(bytes) if json => match proto_to_json(service, method, &bytes, false) {
            Ok(text) => with_type(text, "application/json"),
            Err(status) => error(status.code(), status.message()),
        },
        Ok(bytes) => with_type(bytes, "application/proto"),
        Err(status) => error(status.code(), status.message()),
    }
}

/// Calls the method at `path` with the protobuf `body`; its protobuf answer.
pub(crate) async fn call_method(
    api: &Arc<Api>,
    path: &str,
    body: &[u8],
) -> Result<Vec<u8>, tonic::Status> {
    let queries = ParcaQueries {
        api: Arc::clone(api),
    };
    let store = ParcaProfileStore {
        api: Arc::clone(api),
    };
    let no_method = || tonic::Status::not_found(format!("no method {path}"));
    let method = path
        .strip_prefix(PARCA_QUERY)
        .or_else(|| path.strip_prefix(PARCA_STORE))
        .ok_or_else(no_method)?;
    match (path.starts_with(PARCA_QUERY), method) {
        (true, "QueryRange") => unary(body, |r| queries.query_range(r)).await,
        (true, "Query") => unary(body, |r| queries.query(r)).await,
        (true, "Series") => unary(body, |r| queries.series(r)).await,
        (true, "ProfileTypes") => unary(body, |r| queries.profile_types(r)).await,
        (true, "Labels") => unary(body, |r| queries.labels(r)).await,
        (true, "Values") => unary(body, |r| queries.values(r)).await,
        (true, "ShareProfile") => unary(body, |r| queries.share_profile(r)).await,
        (true, "HasProfileData") => unary(body, |r| queries.has_profile_data(r)).await,
        (false, "WriteRaw") => unary(body, |r| store.write_raw(r)).await,
        (false, "WriteArrow") => unary(body, |r| store.write_arrow(r)).await,
        (false, "Write") => Err(tonic::Status::unimplemented(
            "Write is a bidirectional stream, which Connect's unary protocol cannot carry: use gRPC",
        )),
        _ => Err(no_method()),
    }
}

/// Decodes the request message, calls `method`, encodes its answer.
async fn unary<Req, Res, F, Fut>(body: &[u8], method: F) -> Result<Vec<u8>, tonic::Status>
where
    Req: Message + Default,
    Res: Message,
    F: FnOnce(tonic::Request<Req>) -> Fut,
    Fut: Future<Output = Result<tonic::Response<Res>, tonic::Status>>,
{
    let request = Req::decode(body).map_err(|e| {
        tonic::Status::invalid_argument(format!(
            "the body is not the method's protobuf message: {e}"
        ))
    })?;
    let response = method(tonic::Request::new(request)).await?;
    Ok(response.into_inner().encode_to_vec())
}

/// Parca's `.proto` files, read once, for transcoding JSON.
fn descriptors() -> &'static prost_reflect::DescriptorPool {
    static POOL: std::sync::OnceLock<prost_reflect::DescriptorPool> = std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        prost_reflect::DescriptorPool::decode(parca_grpc_proto::FILE_DESCRIPTOR_SET)
            .expect("the descriptors generated at build time decode")
    })
}

/// The request (`input`) or response message of `service`'s `method`.
pub(crate) fn message(
    service: &str,
    method: &str,
    input: bool,
) -> Result<prost_reflect::MessageDescriptor, tonic::Status> {
    let method = descriptors()
        .get_service_by_name(service)
        .and_then(|s| s.methods().find(|m| m.name() == method))
        .ok_or_else(|| tonic::Status::not_found(format!("no method /{service}/{method}")))?;
    Ok(if input {
        method.input()
    } else {
        method.output()
    })
}

/// A JSON request (proto3's JSON mapping) as the method's protobuf message.
pub(crate) fn json_to_proto(
    service: &str,
    method: &str,
    body: &[u8],
) -> Result<Vec<u8>, tonic::Status> {
    let descriptor = message(service, method, true)?;
    let body = if body.iter().all(u8::is_ascii_whitespace) {
        &b"{}"[..]
    } else {
        body
    };
    let mut json = serde_json::Deserializer::from_slice(body);
    let message = prost_reflect::DynamicMessage::deserialize(descriptor, &mut json)
        .and_then(|m| json.end().map(|()| m))
        .map_err(|e| {
            tonic::Status::invalid_argument(format!(
                "the body is not the method's message in JSON: {e}"
            ))
        })?;
    Ok(message.encode_to_vec())
}

/// A protobuf answer as proto3's JSON; with `every_field`, fields at their default values are
/// written too (grpc-gateway's `EmitUnpopulated`), else left out (Connect's way).
pub(crate) fn proto_to_json(
    service: &str,
    method: &str,
    bytes: &[u8],
    every_field: bool,
) -> Result<Vec<u8>, tonic::Status> {
    let descriptor = message(service, method, false)?;
    let message = prost_reflect::DynamicMessage::decode(descriptor, bytes)
        .map_err(|e| tonic::Status::internal(format!("cannot read the answer back: {e}")))?;
    let options = prost_reflect::SerializeOptions::new().skip_default_fields(!every_field);
    let mut out = Vec::new();
    message
        .serialize_with_options(&mut serde_json::Serializer::new(&mut out), &options)
        .map_err(|e| tonic::Status::internal(format!("cannot write the answer as JSON: {e}")))?;
    Ok(out)
}

/// The HTTP status of a gRPC code, as Connect and grpc-gateway both map them.
pub(crate) fn http_status(code: tonic::Code) -> hyper::StatusCode {
    use tonic::Code as C;
    let status = match code {
        C::Ok => 200,
        C::Cancelled => 499,
        C::InvalidArgument | C::FailedPrecondition | C::OutOfRange => 400,
        C::Unauthenticated => 401,
        C::PermissionDenied => 403,
        C::NotFound => 404,
        C::AlreadyExists | C::Aborted => 409,
        C::ResourceExhausted => 429,
        C::Unimplemented => 501,
        C::Unavailable => 503,
        C::DeadlineExceeded => 504,
        C::Unknown | C::Internal | C::DataLoss => 500,
    };
    hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR)
}

/// Connect's error answer: the code's name and the message as JSON, with its HTTP status.
fn error(code: tonic::Code, message: &str) -> Response<Body> {
    use tonic::Code as C;
    let name = match code {
        C::Cancelled => "canceled",
        C::Unknown => "unknown",
        C::InvalidArgument => "invalid_argument",
        C::DeadlineExceeded => "deadline_exceeded",
        C::NotFound => "not_found",
        C::AlreadyExists => "already_exists",
        C::PermissionDenied => "permission_denied",
        C::ResourceExhausted => "resource_exhausted",
        C::FailedPrecondition => "failed_precondition",
        C::Aborted => "aborted",
        C::OutOfRange => "out_of_range",
        C::Unimplemented => "unimplemented",
        C::Internal => "internal",
        C::Unavailable => "unavailable",
        C::DataLoss => "data_loss",
        C::Unauthenticated => "unauthenticated",
        C::Ok => "ok",
    };
    let mut response = with_type(
        serde_json::json!({"code": name, "message": message}).to_string(),
        "application/json",
    );
    *response.status_mut() = http_status(code);
    response
}
