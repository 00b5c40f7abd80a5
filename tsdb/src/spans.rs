//! Which label names are span attributes (`span_id`, `trace_id`, …): stored per sample
//! (`parca_profile::SampleSpans`) rather than as series labels, and selected by matchers on them
//! ([`crate::Querier::with_span_matchers`]). One setting for the process, read by ingest (which
//! takes them out of labels) and by the query engine (which tells them from series matchers),
//! so that both always agree.

use std::sync::{Arc, RwLock};

/// The label names taken as span attributes by default: what the OpenTelemetry span
/// processors of Pyroscope's SDKs (Go's `otelpyroscope`, Python's `pyroscope-otel`, Java, Ruby)
/// and Pyroscope's older `profile_id` put on samples.
pub const DEFAULT_SPAN_LABELS: [&str; 3] = ["span_id", "trace_id", "profile_id"];

static SPAN_LABELS: RwLock<Option<Arc<[String]>>> = RwLock::new(None);

/// Sets, for the whole process, which label names are span attributes. The server sets it from
/// `parca.yaml` (`span_labels`) at start and on reload. Profiles stored before a change keep the
/// spans they were stored with.
pub fn set_span_labels(names: Vec<String>) {
    *SPAN_LABELS.write().expect("span labels lock poisoned") = Some(names.into());
}

/// The label names that are span attributes ([`set_span_labels`], else
/// [`DEFAULT_SPAN_LABELS`]).
pub fn span_labels() -> Arc<[String]> {
    if let Some(names) = SPAN_LABELS
        .read()
        .expect("span labels lock poisoned")
        .as_ref()
    {
        return Arc::clone(names);
    }
    DEFAULT_SPAN_LABELS.map(String::from).into()
}
