//! From decoded profiles to stored series.
//!
//! Scraping and every push protocol end here: a pprof becomes one profile per sample type, each
//! split by its samples' string labels, each named with Parca's profile-type string
//! (`process_cpu:samples:count:cpu:nanoseconds:delta`) in `__name__`, and the lot is handed to a
//! [`Sink`] that stores it durably. The store implements [`Sink`]; tests and tools may use others.
//! [`import`] takes the same path from saved files into complete blocks of a store's directory
//! (`parca import`), so imported series are named exactly as pushed ones. [`TablesPool`] decodes
//! pushes into tables kept from one push to the next, which the store's head imports from
//! memory of what each id became.
//!
//! # Design constraints
//!
//! - No HTTP and no async here: the API decodes requests into bytes and parameters, this crate
//!   turns them into series, and the sink's `write` blocks until the data is durable. The only
//!   file reading is [`import`]'s.
//! - A sample label that clashes with a label of the target is renamed `exported_<name>`, as
//!   Prometheus does, so the target's identity is never overwritten by what a program says.
//! - Bad input is an [`Error`] that names the fault; nothing of a refused profile is stored.
//!
//! # Example
//!
//! ```
//! use parca_ingest::{Series, to_series};
//! use parca_tsdb::Labels;
//!
//! let pprof = std::fs::read(concat!(
//!     env!("CARGO_MANIFEST_DIR"),
//!     "/../../tests/testdata/pprof/go/go-heap.pb.gz"
//! ))
//! .unwrap();
//! let profiles = parca_profile::decode(&pprof, &Default::default()).unwrap();
//! let target = Labels::new([("job", "api"), ("instance", "host:6060")]).unwrap();
//! let series: Vec<Series> = to_series("memory", &target, profiles, 0).unwrap();
//! let name = series[0].labels.get("__name__").unwrap();
//! assert!(name.starts_with("memory:"), "{name}");
//! ```

mod error;
mod import;
mod otlp;
pub mod parca_arrow;
mod pyroscope;
mod reuse;
mod series;
mod sink;

pub use error::Error;
pub use import::{BadFile, ImportOptions, ImportReport, import, list_files};
pub use otlp::{decode_export_request, export_request_series, export_response, rpc_status};
pub use parca_tsdb::{DEFAULT_SPAN_LABELS, set_span_labels, span_labels};
pub use pyroscope::{IngestBody, LegacyIngest, decode_push_request, legacy_ingest};
pub use reuse::TablesPool;
pub use series::{Series, profile_type_name, to_series};
pub use sink::{Durability, Sink, WriteOutcome};
