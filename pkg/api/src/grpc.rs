//! gRPC on the API's port: requests whose content type is `application/grpc` go to tonic's
//! generated servers (today OTLP's `ProfilesService/Export`), after the same admission as every
//! other request (credentials, rate and concurrency limits, the push gate), whose refusals
//! become gRPC statuses through [`crate::ErrorType::grpc_code`].

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
use tonic::codegen::Service as _;

use crate::response::ApiError;
use crate::{Api, ServedBody, ingest};

/// The path of OTLP's profiles export.
pub(crate) const OTLP_EXPORT: &str =
    "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export";

/// Whether a request is gRPC (`application/grpc`, `application/grpc+proto`); gRPC-web is not.
pub(crate) fn is_grpc(request: &Request<Incoming>) -> bool {
    request
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == "application/grpc" || v.starts_with("application/grpc+"))
}

/// Answers a gRPC request.
pub(crate) async fn handle(api: &Arc<Api>, request: Request<Incoming>) -> Response<ServedBody> {
    let started = std::time::Instant::now();
    let (parts, body) = request.into_parts();
    let path = parts.uri.path().to_owned();
    let response = match crate::router::admit_parts(api, &parts).await {
        Err(e) => status_response(status_of(&e)),
        Ok(_permit) => match path.as_str() {
            OTLP_EXPORT => {
                let mut server = ProfilesServiceServer::new(OtlpProfiles {
                    api: Arc::clone(api),
                })
                .max_decoding_message_size(api.options.max_body_bytes)
                .accept_compressed(tonic::codec::CompressionEncoding::Gzip);
                let request = Request::from_parts(parts, body);
                match server.call(request).await {
                    Ok(response) => response.map(|b| b.map_err(Into::into).boxed_unsync()),
                    Err(never) => match never {},
                }
            }
            other => status_response(tonic::Status::unimplemented(format!(
                "no gRPC method {other} here; served: {OTLP_EXPORT}"
            ))),
        },
    };
    let handler = if path == OTLP_EXPORT {
        OTLP_EXPORT
    } else {
        "grpc other"
    };
    api.metrics
        .observe_request(handler, response.status().as_u16(), started.elapsed());
    response
}

/// A gRPC status as a whole answer (HTTP 200, the status in the headers: "trailers only").
fn status_response(status: tonic::Status) -> Response<ServedBody> {
    status
        .into_http::<tonic::body::Body>()
        .map(|b| b.map_err(Into::into).boxed_unsync())
}

/// Our error as a gRPC status: the code from the one mapping, the message as it is.
fn status_of(error: &ApiError) -> tonic::Status {
    tonic::Status::new(
        tonic::Code::from_i32(error.kind.grpc_code() as i32),
        error.message.clone(),
    )
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
        let batch = parca_ingest::export_request_series(&request, ingest::now_ms())
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
