//! Evaluation of the profile query language over the store: where querylang's AST meets tsdb.
//!
//! Two ways to evaluate, as Prometheus has: [`Engine::instant`] gives profiles (for the
//! flame graph, `merge`, `diff`), [`Engine::range`] gives series of totals per step (for the
//! metrics graph, `sum by`, `topk`, binary operators with PromQL's vector matching), and
//! [`Engine::instant_series`] one step of it, over the lookback ([`Limits::lookback_ms`]).
//!
//! # Design constraints
//!
//! - Synchronous, like the store; callers in async code use a blocking thread.
//! - Limits are checked before profiles are read: the series a query selects and the samples it
//!   would merge are counted from the index and the head first, so a query that is too large
//!   fails fast with a message that says how to narrow it.
//! - Stack filters commute with merging (they keep or drop whole stacks), so they are applied
//!   once to a merged profile rather than to every stored profile.
//! - A metrics graph needs totals only: range evaluation of plain selectors reads per-profile
//!   totals from the store and never copies samples.
//! - Queries evaluated together (a rule group's, [`Engine::sharing_reads`]) read each selector
//!   over each window once: a hundred rules that filter the stacks of one profile type select
//!   its profiles once, and each filter tests each distinct stack once.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use parca_query::{Engine, InstantQuery, Limits};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let db = Arc::new(parca_tsdb::Db::open(dir.path(), Default::default()).unwrap());
//! let engine = Engine::new(db, Limits::default());
//! let expr = parca_querylang::parse("merge(memory:inuse_space:bytes:space:bytes[1h])").unwrap();
//! // An empty store knows no profile types.
//! let err = engine.instant(&expr, &InstantQuery::at(0)).unwrap_err();
//! assert!(err.to_string().starts_with("unknown profile type"));
//! ```

mod binary;
mod error;
mod exemplars;
mod instant;
mod range;
mod select;
mod series;
mod shared;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use parca_tsdb::{Db, Matcher};

pub use error::Error;
pub use exemplars::{DEFAULT_EXEMPLARS_PER_SERIES, MAX_EXEMPLARS_PER_SERIES, SeriesExemplars};
pub use instant::{InstantQuery, ProfileGroup};
pub use range::{Omitted, top_series};
pub use select::{ProfileType, profile_types, selector_matchers};
pub use series::{Point, RangeQuery, RangeSeries};

/// What a query may cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most series one query may read; 0 for no limit (the default: a fleet's query merges
    /// thousands of series, and what bounds its work is `max_samples` and `max_points`).
    pub max_series: usize,
    /// Most (stack, value) pairs one query may merge: the bound on a profile query's work.
    pub max_samples: usize,
    /// Most values (series × steps) a selector of a range query may produce: the bound on a
    /// range query's memory (about 32 bytes each).
    pub max_points: usize,
    /// Most steps of a range query.
    pub max_steps: i64,
    /// How far back an instant selector without a range looks for the latest profile of each
    /// series (Prometheus' lookback delta).
    pub lookback_ms: i64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_series: 0,
            max_samples: 100_000_000,
            max_points: 20_000_000,
            max_steps: 11_000,
            lookback_ms: 5 * 60 * 1000,
        }
    }
}

/// Series the rules recorded, for rule queries that name them (`job:cpu:sum > 0.5`, read with
/// [`parca_querylang::parse_rule_query`]): the latest sample of each, as the rules keep it.
pub trait RecordedSeries: Send + Sync {
    /// The latest sample of each series named `name`: its labels (`__name__` included), value
    /// and time (ms since the epoch).
    fn latest(&self, name: &str) -> Vec<(parca_tsdb::Labels, f64, i64)>;
}

/// Evaluates queries over one store.
#[derive(Clone)]
pub struct Engine {
    db: Arc<Db>,
    limits: Limits,
    /// When evaluation gives up ([`Error::Timeout`]); checked between the steps of a query.
    deadline: Option<std::time::Instant>,
    /// What the reads of this evaluation could not cover (a shard down), in order, once each.
    warnings: Arc<std::sync::Mutex<Vec<String>>>,
    /// The reads queries of one evaluation share ([`Engine::sharing_reads`]); `None`: each
    /// query reads for itself.
    shared: Option<Arc<shared::SharedReads>>,
    /// Where selectors naming a recorded series read it; `None`: such a name is an error.
    recorded: Option<Arc<dyn RecordedSeries>>,
}

/// A [`parca_tsdb::Querier`] whose warnings go to its engine when it is dropped.
pub struct WatchedQuerier<'e> {
    querier: parca_tsdb::Querier<'e>,
    warnings: &'e std::sync::Mutex<Vec<String>>,
}

impl<'e> std::ops::Deref for WatchedQuerier<'e> {
    type Target = parca_tsdb::Querier<'e>;

    fn deref(&self) -> &Self::Target {
        &self.querier
    }
}

impl Drop for WatchedQuerier<'_> {
    fn drop(&mut self) {
        let mut all = self.warnings.lock().expect("warnings lock poisoned");
        for w in self.querier.warnings() {
            if !all.contains(&w) {
                all.push(w);
            }
        }
    }
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("limits", &self.limits)
            .finish()
    }
}

impl Engine {
    /// An engine over `db` with `limits`.
    pub fn new(db: Arc<Db>, limits: Limits) -> Engine {
        Engine {
            db,
            limits,
            deadline: None,
            warnings: Arc::default(),
            shared: None,
            recorded: None,
        }
    }

    /// The same engine, reading selectors that name a recorded series from `recorded` (a rule
    /// manager's latest samples).
    pub fn with_recorded_series(mut self, recorded: Arc<dyn RecordedSeries>) -> Engine {
        self.recorded = Some(recorded);
        self
    }

    /// The same engine, its queries (and those of its clones) sharing what they read from
    /// now on: a selector's series and profiles over one window are read once. For queries
    /// evaluated together at one time, such as a rule group's rules: a profile that arrives
    /// meanwhile is seen by all of them or by none. Drop the engine to let go of what it read.
    pub fn sharing_reads(mut self) -> Engine {
        self.shared = Some(Arc::default());
        self
    }

    /// The same engine, giving up with [`Error::Timeout`] once `deadline` has passed. The
    /// deadline is checked before each selector and between series, so a query stops soon
    /// after it, not at once.
    /// The engine's warnings start empty: one engine per request.
    pub fn with_deadline(mut self, deadline: std::time::Instant) -> Engine {
        self.deadline = Some(deadline);
        self.warnings = Arc::default();
        self
    }

    /// A querier of the store over `[min_ms, max_ms]` whose warnings (a shard that did not
    /// answer) become this engine's once it is dropped.
    pub fn querier(&self, min_ms: i64, max_ms: i64) -> WatchedQuerier<'_> {
        WatchedQuerier {
            querier: self.db.querier(min_ms, max_ms),
            warnings: &self.warnings,
        }
    }

    /// A querier like [`Engine::querier`] reading only the samples of the spans `spans` select
    /// (matchers on `span_id`, `trace_id`, …: [`parca_tsdb::span_labels`]).
    pub fn span_querier(&self, min_ms: i64, max_ms: i64, spans: &[Matcher]) -> WatchedQuerier<'_> {
        WatchedQuerier {
            querier: self
                .db
                .querier(min_ms, max_ms)
                .with_span_matchers(spans.to_vec()),
            warnings: &self.warnings,
        }
    }

    /// A querier like [`Engine::span_querier`] that reads the store's summaries of resolution
    /// up to `summaries_ms` where they cover whole windows ([`parca_tsdb::Querier::with_summaries`]):
    /// `i64::MAX` for merges, a resolution the steps are aligned to for metrics graphs.
    pub fn summarized_querier(
        &self,
        min_ms: i64,
        max_ms: i64,
        spans: &[Matcher],
        summaries_ms: i64,
    ) -> WatchedQuerier<'_> {
        WatchedQuerier {
            querier: self
                .db
                .querier(min_ms, max_ms)
                .with_span_matchers(spans.to_vec())
                .with_summaries(summaries_ms),
            warnings: &self.warnings,
        }
    }

    /// What the evaluations of this engine could not cover: each names a shard that did not
    /// answer and the time it would have covered. Empty for a whole answer.
    pub fn warnings(&self) -> Vec<String> {
        self.warnings
            .lock()
            .expect("warnings lock poisoned")
            .clone()
    }

    /// An error once the deadline has passed.
    fn check_deadline(&self) -> Result<(), Error> {
        match self.deadline {
            Some(deadline) if std::time::Instant::now() >= deadline => Err(Error::Timeout),
            _ => Ok(()),
        }
    }

    /// The store queried.
    pub fn db(&self) -> &Arc<Db> {
        &self.db
    }
}
