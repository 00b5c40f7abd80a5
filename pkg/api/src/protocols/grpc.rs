//! gRPC and gRPC-web on the API's port: requests whose content type is `application/grpc…` go
//! to tonic's generated servers (OTLP's `ProfilesService/Export`, Parca's `QueryService` and
//! `ProfileStoreService`), gRPC-web ones through tonic-web's translation first, after the same
//! admission as every other request (credentials, rate and concurrency limits, the push gate),
//! whose refusals become gRPC statuses through [`crate::ErrorType::grpc_code`]. Connect's
//! unary protocol is plain HTTP and goes through the router (`connect.rs`).

use std::convert::Infallible;
use std::sync::Arc;

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::{Request, Response};
use opentelemetry_proto::tonic::collector::profiles::v1development::profiles_service_server::{
    ProfilesService, ProfilesServiceServer,
};
use opentelemetry_proto::tonic::collector::profiles::v1development::{
    ExportProfilesPartialSuccess, ExportProfilesServiceRequest, ExportProfilesServiceResponse,
};
use parca_grpc_proto::profilestore::profile_store_service_server::ProfileStoreServiceServer;
use parca_grpc_proto::query::query_service_server::QueryServiceServer;
use tower_layer::Layer as _;
use tower_service::Service as _;

use crate::call::OTLP_EXPORT;
use crate::handlers::ingest;
use crate::protocols::parca_grpc::{ParcaProfileStore, ParcaQueries, status_of};
use crate::{Api, ServedBody};

/// Which of the gRPC protocols a request speaks, by its content type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protocol {
    /// `application/grpc`, `application/grpc+proto` (HTTP/2).
    Grpc,
    /// `application/grpc-web`, `application/grpc-web-text` and their `+proto` forms (any HTTP
    /// version; what browsers and `@parca/client`'s web transport send).
    GrpcWeb,
}

/// The gRPC protocol of a request, if it speaks one.
pub(crate) fn protocol(request: &Request<Incoming>) -> Option<Protocol> {
    let content_type = request
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())?;
    if content_type.starts_with("application/grpc-web") {
        Some(Protocol::GrpcWeb)
    } else if content_type == "application/grpc" || content_type.starts_with("application/grpc+") {
        Some(Protocol::Grpc)
    } else {
        None
    }
}

/// The service a method path belongs to, with any prefix before the package removed (Parca's
/// UI calls `/api/parca.query.v1alpha1.QueryService/Query`, as Parca's server allows).
fn method_path(path: &str) -> &str {
    ["/parca.", "/opentelemetry."]
        .iter()
        .find_map(|package| path.find(package).map(|i| &path[i..]))
        .unwrap_or(path)
}

/// Parca's query service.
pub(crate) const PARCA_QUERY: &str = "/parca.query.v1alpha1.QueryService/";
/// Parca's profile store.
pub(crate) const PARCA_STORE: &str = "/parca.profilestore.v1alpha1.ProfileStoreService/";

/// Answers a gRPC or gRPC-web request.
pub(crate) async fn handle(
    api: &Arc<Api>,
    request: Request<Incoming>,
    protocol: Protocol,
) -> Response<ServedBody> {
    let started = std::time::Instant::now();
    let (mut parts, mut body) = request.into_parts();
    let path = method_path(parts.uri.path()).to_owned();
    if path != parts.uri.path()
        && let Ok(uri) = path.parse()
    {
        parts.uri = uri;
    }
    let web = protocol == Protocol::GrpcWeb;
    let handler = if path == OTLP_EXPORT {
        OTLP_EXPORT
    } else if path.starts_with(PARCA_QUERY) {
        "parca.query.v1alpha1.QueryService"
    } else if path.starts_with(PARCA_STORE) {
        "parca.profilestore.v1alpha1.ProfileStoreService"
    } else {
        "grpc other"
    };
    let response = match crate::call::admit_parts(api, &parts).await {
        Err(e) => {
            // As the router does: the refusal is read as a status, not a reset stream.
            crate::body::drain(&mut body).await;
            status_response(status_of(&e))
        }
        Ok(_permit) => {
            let request = Request::from_parts(parts, tonic::body::Body::new(body));
            let limit = api.options.max_body_bytes;
            let gzip = tonic::codec::CompressionEncoding::Gzip;
            let api = Arc::clone(api);
            match handler {
                OTLP_EXPORT => {
                    let server = ProfilesServiceServer::new(OtlpProfiles { api })
                        .max_decoding_message_size(limit)
                        .accept_compressed(gzip);
                    answer(server, web, request).await
                }
                "parca.query.v1alpha1.QueryService" => {
                    let server = QueryServiceServer::new(ParcaQueries { api })
                        .max_decoding_message_size(limit)
                        .accept_compressed(gzip)
                        .send_compressed(gzip);
                    // A partial answer's warnings as response metadata (`parca-warning`).
                    let (mut response, warnings) =
                        crate::warnings::collecting(answer(server, web, request)).await;
                    crate::warnings::add_headers(response.headers_mut(), &warnings);
                    response
                }
                "parca.profilestore.v1alpha1.ProfileStoreService" => {
                    let server = ProfileStoreServiceServer::new(ParcaProfileStore { api })
                        .max_decoding_message_size(limit)
                        .accept_compressed(gzip);
                    answer(server, web, request).await
                }
                _ => status_response(tonic::Status::unimplemented(format!(
                    "no gRPC method {path} here; served: {OTLP_EXPORT}, {PARCA_QUERY}… and                      {PARCA_STORE}…"
                ))),
            }
        }
    };
    api.metrics
        .observe_request(handler, response.status().as_u16(), started.elapsed());
    response
}

/// Calls a generated tonic server, through the gRPC-web translation when `web`.
async fn answer<S>(
    service: S,
    web: bool,
    request: Request<tonic::body::Body>,
) -> Response<ServedBody>
where
    S: tower_service::Service<
            Request<tonic::body::Body>,
            Response = Response<tonic::body::Body>,
            Error = Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let response = if web {
        tonic_web::GrpcWebLayer::new()
            .layer(service)
            .call(request)
            .await
    } else {
        let mut service = service;
        service.call(request).await
    };
    match response {
        Ok(response) => response.map(|b| b.map_err(Into::into).boxed_unsync()),
        Err(never) => match never {},
    }
}

/// A gRPC status as a whole answer (HTTP 200, the status in the headers: "trailers only").
fn status_response(status: tonic::Status) -> Response<ServedBody> {
    status
        .into_http::<tonic::body::Body>()
        .map(|b| b.map_err(Into::into).boxed_unsync())
}

/// OTLP's `ProfilesService`, storing what `/v1development/profiles` stores.
struct OtlpProfiles {
    api: Arc<Api>,
}

#[tonic::async_trait]
impl ProfilesService for OtlpProfiles {
    async fn export(
        &self,
        request: tonic::Request<ExportProfilesServiceRequest>,
    ) -> Result<tonic::Response<ExportProfilesServiceResponse>, tonic::Status> {
        let request = request.into_inner();
        let batch = parca_ingest::export_request_series(&request, crate::clock::now_ms())
            .map_err(|e| tonic::Status::invalid_argument(e.to_string()))?;
        let outcome = ingest::write_batch(&self.api, "otlp_grpc", batch)
            .await
            .map_err(|e| status_of(&e))?;
        let refused: Vec<String> = outcome.refused.iter().map(ToString::to_string).collect();
        Ok(tonic::Response::new(ExportProfilesServiceResponse {
            partial_success: (!refused.is_empty()).then(|| ExportProfilesPartialSuccess {
                rejected_profiles: refused.len() as i64,
                error_message: refused.join("; "),
            }),
        }))
    }
}

/// Our own answers as the body type gRPC answers share.
pub(crate) fn boxed(response: Response<crate::Body>) -> Response<ServedBody> {
    response.map(|b| b.map_err(|never: Infallible| match never {}).boxed_unsync())
}
