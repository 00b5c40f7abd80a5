//! The API's own metrics: requests by handler and code, their duration, pushed profiles, and the
//! store's figures read at scrape time.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parca_tsdb::Db;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of request metrics.
type HandlerCode = Vec<(&'static str, String)>;

/// The API's metric handles.
#[derive(Clone)]
pub struct ApiMetrics {
    requests: Family<HandlerCode, Counter>,
    request_seconds: Family<Vec<(&'static str, &'static str)>, Histogram>,
    ingested_profiles: Family<Vec<(&'static str, &'static str)>, Counter>,
    ingested_samples: Family<Vec<(&'static str, &'static str)>, Counter>,
    refused_profiles: Family<Vec<(&'static str, &'static str)>, Counter>,
    query_seconds: Family<Vec<(&'static str, &'static str)>, Histogram>,
    store: Arc<OnceLock<Arc<Db>>>,
}

impl std::fmt::Debug for ApiMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiMetrics")
    }
}

impl ApiMetrics {
    /// Creates the metrics and adds them to `registry`.
    pub fn register(registry: &mut Registry) -> ApiMetrics {
        let metrics = ApiMetrics {
            requests: Family::default(),
            request_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 4.0, 9))
            }),
            ingested_profiles: Family::default(),
            ingested_samples: Family::default(),
            refused_profiles: Family::default(),
            query_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 4.0, 9))
            }),
            store: Arc::new(OnceLock::new()),
        };
        registry.register(
            "parca_http_requests",
            "HTTP requests by handler and status code",
            metrics.requests.clone(),
        );
        registry.register(
            "parca_http_request_duration_seconds",
            "Time to answer HTTP requests, by handler",
            metrics.request_seconds.clone(),
        );
        registry.register(
            "parca_ingest_profiles",
            "Pushed profiles stored, by protocol (one per series)",
            metrics.ingested_profiles.clone(),
        );
        registry.register(
            "parca_ingest_samples",
            "Samples of pushed profiles, by protocol",
            metrics.ingested_samples.clone(),
        );
        registry.register(
            "parca_ingest_refused_profiles",
            "Pushed profiles the store refused (out of order, too large, bad labels), by protocol",
            metrics.refused_profiles.clone(),
        );
        registry.register(
            "parca_query_duration_seconds",
            "Time to evaluate queries, by endpoint",
            metrics.query_seconds.clone(),
        );
        registry.register_collector(Box::new(StoreCollector {
            store: Arc::clone(&metrics.store),
        }));
        metrics
    }

    pub(crate) fn watch_store(&self, db: Arc<Db>) {
        let _ = self.store.set(db);
    }

    pub(crate) fn observe_request(&self, handler: &'static str, code: u16, took: Duration) {
        self.requests
            .get_or_create(&vec![
                ("handler", handler.to_owned()),
                ("code", code.to_string()),
            ])
            .inc();
        self.request_seconds
            .get_or_create(&vec![("handler", handler)])
            .observe(took.as_secs_f64());
    }

    pub(crate) fn observe_query(&self, endpoint: &'static str, took: Duration) {
        self.query_seconds
            .get_or_create(&vec![("endpoint", endpoint)])
            .observe(took.as_secs_f64());
    }

    pub(crate) fn observe_ingest(
        &self,
        protocol: &'static str,
        n_profiles: usize,
        n_samples: usize,
        n_refused: usize,
    ) {
        let labels = vec![("protocol", protocol)];
        self.ingested_profiles
            .get_or_create(&labels)
            .inc_by(n_profiles as u64);
        self.ingested_samples
            .get_or_create(&labels)
            .inc_by(n_samples as u64);
        self.refused_profiles
            .get_or_create(&labels)
            .inc_by(n_refused as u64);
    }
}

/// Reads the store's figures when `/metrics` is scraped.
struct StoreCollector {
    store: Arc<OnceLock<Arc<Db>>>,
}

impl std::fmt::Debug for StoreCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StoreCollector")
    }
}

impl Collector for StoreCollector {
    #[expect(
        clippy::too_many_lines,
        reason = "a table of the store's metric families with their help texts, read under one lock"
    )]
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(db) = self.store.get() else {
            return Ok(());
        };
        let stats = db.stats();
        let gauges: [(&str, &str, u64); 12] = [
            (
                "parca_tsdb_head_series",
                "Series in the head",
                stats.n_series as u64,
            ),
            (
                "parca_tsdb_head_profiles",
                "Profiles in the head",
                stats.n_head_profiles as u64,
            ),
            (
                "parca_tsdb_head_samples",
                "Stack-value pairs in the head",
                stats.n_head_samples as u64,
            ),
            (
                "parca_tsdb_head_stacks",
                "Distinct stacks in the head",
                stats.n_head_stacks as u64,
            ),
            (
                "parca_tsdb_head_sample_bytes",
                "Bytes of memory the head's samples take",
                stats.head_sample_bytes,
            ),
            (
                "parca_tsdb_profiles",
                "Profiles stored, blocks and head",
                stats.n_profiles as u64,
            ),
            (
                "parca_tsdb_samples",
                "Stack-value pairs stored, blocks and head",
                stats.n_samples as u64,
            ),
            ("parca_tsdb_blocks", "Blocks on disk", stats.n_blocks as u64),
            (
                "parca_tsdb_block_bytes",
                "Bytes of the blocks on disk",
                stats.block_bytes,
            ),
            (
                "parca_tsdb_wal_bytes",
                "Bytes of the write-ahead log on disk",
                stats.wal_bytes,
            ),
            (
                "parca_tsdb_quarantined_blocks",
                "Blocks set aside as corrupt since start",
                stats.n_quarantined as u64,
            ),
            (
                "parca_tsdb_read_only",
                "1 while the store refuses writes after a failed write to its disk (it heals by itself)",
                u64::from(stats.read_only),
            ),
        ];
        for (name, help, value) in gauges {
            let gauge = ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX));
            let metric = encoder.encode_descriptor(name, help, None, gauge.metric_type())?;
            gauge.encode(metric)?;
        }
        if let Some(memory) = parca_selfprof::memory_stats() {
            let gauges: [(&str, &str, u64); 3] = [
                (
                    "parca_memory_heap_allocated_bytes",
                    "Bytes of heap the server holds (jemalloc)",
                    memory.heap_allocated_bytes,
                ),
                (
                    "parca_memory_heap_resident_bytes",
                    "Bytes of memory the allocator holds: the heap, its metadata and free pages not yet returned",
                    memory.heap_resident_bytes,
                ),
                (
                    "process_resident_memory_bytes",
                    "Resident memory of the server (VmRSS)",
                    memory.resident_bytes,
                ),
            ];
            for (name, help, value) in gauges {
                let gauge = ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX));
                let metric = encoder.encode_descriptor(name, help, None, gauge.metric_type())?;
                gauge.encode(metric)?;
            }
            if stats.n_samples > 0 {
                let per_sample =
                    ConstGauge::new(memory.heap_allocated_bytes as f64 / stats.n_samples as f64);
                let metric = encoder.encode_descriptor(
                    "parca_memory_heap_bytes_per_stored_sample",
                    "Heap the server holds per stack-value pair stored (blocks and head)",
                    None,
                    per_sample.metric_type(),
                )?;
                per_sample.encode(metric)?;
            }
        }
        let errors = ConstCounter::new(stats.n_wal_write_errors);
        let metric = encoder.encode_descriptor(
            "parca_tsdb_wal_write_errors",
            "Failed writes and syncs of the write-ahead log since start",
            None,
            errors.metric_type(),
        )?;
        errors.encode(metric)?;
        Ok(())
    }
}
