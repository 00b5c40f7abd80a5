//! Parca's own protobuf API, so that Parca's clients (its web UI and `@parca/client`, Grafana's
//! Parca data source, Parca Agent) can talk to this server unchanged: the messages and the
//! tonic server traits of `parca.query.v1alpha1.QueryService` and
//! `parca.profilestore.v1alpha1.ProfileStoreService`, generated at build time from the
//! `.proto` files vendored in `proto/` (their source commit and licenses are in
//! `proto/README.md`).

#![allow(missing_docs, clippy::all, clippy::too_many_lines)] // Generated code: documented by the .proto files.

// The modules follow the packages: `parca::query::v1alpha1`, `parca::profilestore::v1alpha1`,
// `parca::metastore::v1alpha1`, `google::api`.
include!(concat!(env!("OUT_DIR"), "/parca_api.rs"));

pub use parca::metastore::v1alpha1 as metastore;
pub use parca::profilestore::v1alpha1 as profilestore;
pub use parca::query::v1alpha1 as query;

/// The encoded `FileDescriptorSet` of the `.proto` files (with their imports), for readers that
/// work by reflection (Connect's JSON encoding).
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/parca_api.fds"));
