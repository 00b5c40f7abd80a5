//! Recording and alerting rules over profile queries, evaluated as Prometheus evaluates its
//! rules.
//!
//! The rule files are read and checked by `parca_config` (`rule_files:`); a [`Manager`] runs
//! their groups: each group on its own task, at its `interval` (default
//! `global.evaluation_interval`), evaluating its rules one after another at the group's
//! evaluation time exactly as `/api/v1/query` evaluates a series-valued instant query
//! ([`parca_query::Engine::instant_series`]). A recording rule keeps the samples of its last
//! evaluation (renamed to its `record`, with its group's and its own labels; [`Sample`]); an
//! alerting rule keeps its [`Alert`]s through pending → firing → inactive with `for` and
//! `keep_firing_for`, its labels and annotations expanded as Go templates
//! ([`template::expand`]); their `for` clocks survive a restart ([`for_state`], Prometheus'
//! `ALERTS_FOR_STATE`). Firing and resolved alerts go to Alertmanagers' v2 API through a
//! [`Notifier`] (`alerting.alertmanagers`), resent while firing; recorded series go to
//! `remote_write` receivers through a [`RemoteWriter`] (remote-write 1.0). [`Insights`] watch
//! the store for deploys (`insights:`) and compare each function's share before and after.
//!
//! # Design constraints
//!
//! - Reads only: evaluation runs on the blocking pool through the query engine, whose
//!   queriers hold no store lock, so rules never hold up pushes or scrapes.
//! - Prometheus' semantics, word for word where it has words: the errors of duplicate label
//!   sets and of `limit`, the alert state machine, the resolved alerts' retention, health
//!   names, template variables and functions.
//! - A reload never loses state it can keep: unchanged groups keep running untouched; changed
//!   ones take the state of rules that kept their name and labels. A group that cannot be
//!   built leaves the running ones as they are.
//! - No HTTP and no JSON here: the API shapes what it reads ([`Manager::groups`],
//!   [`Manager::samples`]).
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let dir = tempfile::tempdir().unwrap();
//! let db = Arc::new(parca_tsdb::Db::open(dir.path(), Default::default()).unwrap());
//! let engine = parca_query::Engine::new(db, Default::default());
//! let rules = parca_rules::Manager::new(engine, parca_rules::Options::default());
//! let mut config = parca_config::Config::default();
//! let file = parca_config::parse_rules(
//!     "groups: [{name: cpu, rules: [{record: 'job:cpu:sum', expr: 'sum by (job) (process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta)'}]}]",
//!     "cpu.yml",
//! )
//! .unwrap();
//! config.rules.push(("cpu.yml".into(), file));
//! rules.update(&config).unwrap();
//! assert_eq!(rules.groups()[0].name(), "cpu");
//! # }
//! ```

mod clock;
pub mod for_state;
mod group;
pub mod insights;
mod manager;
mod metrics;
mod notifier;
mod persist;
pub mod remote_write;
mod rule;
pub mod template;

pub use for_state::{ForStateStore, RestoreOptions};
pub use group::{Environment, Group, GroupState};
pub use insights::{Change, FunctionShare, INSIGHT_METRIC, Insight, Insights};
pub use manager::{Manager, Options};
pub use metrics::RuleMetrics;
pub use notifier::{Notification, Notifier, QUEUE_CAPACITY};
pub use remote_write::RemoteWriter;
pub use rule::{
    ALERT_NAME_LABEL, Alert, AlertState, CompiledRule, Env, Health, RESOLVED_RETENTION, RuleState,
    Sample,
};

/// Why a rule could not be evaluated, or a group not built. Messages are Prometheus' where it
/// has them.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The rule's query failed.
    #[error(transparent)]
    Query(parca_query::Error),
    /// The rule's expression does not parse (it was checked when its file was read, so only a
    /// rule built by hand gets this).
    #[error("rule `{rule}`: {message}")]
    Parse {
        /// The rule's name.
        rule: String,
        /// The parser's message.
        message: String,
    },
    /// Two samples have the same labels once the rule's labels are set.
    #[error("vector contains metrics with the same labelset after applying {what}")]
    SameLabelset {
        /// `rule labels` or `alert labels`.
        what: &'static str,
    },
    /// An `alerting.alertmanagers` or `remote_write` entry cannot be used (its message names
    /// it).
    #[error("{0}")]
    Alerting(String),
    /// Deploy insights could not read or write their file, or build a matcher (the message
    /// says which).
    #[error("deploy insights: {0}")]
    Insights(String),
    /// The group's `limit` was exceeded.
    #[error("exceeded limit of {limit} with {n} {what}")]
    Limit {
        /// The group's limit.
        limit: usize,
        /// How many there were.
        n: usize,
        /// `series` or `alerts`.
        what: &'static str,
    },
}
