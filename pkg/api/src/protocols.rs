//! Parca's and OpenTelemetry's protocols on the API's port, over the native handlers: gRPC and
//! gRPC-web framing (`grpc.rs`: OTLP's export, Parca's query and profile-store services),
//! Connect's unary protocol (`connect.rs`) and Parca's REST gateway (`parca_rest.rs`) over the
//! same services (`parca_grpc.rs`), and Parca's Arrow-encoded flame graphs and tables
//! (`parca_arrow.rs`).

pub(crate) mod connect;
pub(crate) mod grpc;
pub(crate) mod parca_arrow;
pub(crate) mod parca_grpc;
pub(crate) mod parca_rest;
