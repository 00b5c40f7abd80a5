//! The native endpoints, one file per family: queries and metadata (`query.rs`, which the
//! others use for selectors and evaluation), exemplars, pushes (`ingest.rs`), rules and
//! alerts, operations, the store's status and reads for queriers, the parse endpoint and the
//! server's own profiles. Each takes the shared [`crate::Api`] and a [`crate::call::Call`].

pub(crate) mod exemplars;
pub(crate) mod ingest;
pub(crate) mod ops;
pub(crate) mod parse_query;
pub(crate) mod query;
pub(crate) mod rules;
pub(crate) mod selfprof;
pub(crate) mod store;
