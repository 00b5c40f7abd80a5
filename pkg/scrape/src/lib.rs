//! Pulling profiles, the Prometheus way.
//!
//! For each job of the configuration, targets are discovered (static lists and file_sd files),
//! relabeled, and scraped by one loop per target and profile endpoint. Each loop is pinned to a
//! fixed phase of its interval (a hash of the target and profile, so targets spread out over the
//! interval), never overlaps itself, and hands what it fetched to a [`parca_ingest::Sink`].
//! Cumulative profiles (allocations, block and mutex contention) are also turned into deltas
//! between consecutive scrapes, so that they can be merged over time.
//!
//! # Design constraints
//!
//! - Knows nothing of the HTTP API or the query engine: profiles leave through the sink, health
//!   leaves through [`Manager::targets`].
//! - A reload keeps loops whose job configuration and target are unchanged, so their phase,
//!   health and delta baselines survive; other loops stop and new ones start.
//! - A slow or broken target only affects its own loops: each loop has its own timeout, body
//!   limit and error, and the store is written from the blocking pool.
//!
//! # Example
//!
//! ```no_run
//! # async fn run(db: std::sync::Arc<parca_tsdb::Db>) -> Result<(), parca_config::Error> {
//! let config = parca_config::load("parca.yaml")?;
//! let mut registry = prometheus_client::registry::Registry::default();
//! let metrics = parca_scrape::ScrapeMetrics::register(&mut registry);
//! let manager = parca_scrape::Manager::new(db, Default::default(), metrics);
//! manager.apply(&config);
//! // … later, on shutdown:
//! manager.stop().await;
//! # Ok(()) }
//! ```

mod delta;
mod discovery;
mod error;
mod http;
mod manager;
mod scrape_loop;
mod target;

pub use error::ScrapeError;
pub use http::JobClient;
pub use manager::{Manager, Options};
pub use scrape_loop::ScrapeMetrics;
pub use target::{Health, ProfileStatus, Target, TargetStatus};
