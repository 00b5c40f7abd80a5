//! The rule manager's metrics, by group (`rule_group="FILE;NAME"`, as Prometheus labels them).

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The label set of a group's metrics.
type GroupLabel = Vec<(&'static str, String)>;

/// Evaluations, failures, durations and missed evaluations of each group.
#[derive(Debug, Clone, Default)]
pub struct RuleMetrics {
    evaluations: Family<GroupLabel, Counter>,
    failures: Family<GroupLabel, Counter>,
    last_duration: Family<GroupLabel, Gauge<f64, std::sync::atomic::AtomicU64>>,
    missed: Family<GroupLabel, Counter>,
}

impl RuleMetrics {
    /// The metrics, registered in `registry`.
    pub fn register(registry: &mut Registry) -> RuleMetrics {
        let metrics = RuleMetrics::default();
        registry.register(
            "parca_rule_evaluations",
            "Rule evaluations, by group",
            metrics.evaluations.clone(),
        );
        registry.register(
            "parca_rule_evaluation_failures",
            "Rule evaluations that failed, by group",
            metrics.failures.clone(),
        );
        registry.register(
            "parca_rule_group_last_duration_seconds",
            "How long the last evaluation of the group took",
            metrics.last_duration.clone(),
        );
        registry.register(
            "parca_rule_group_iterations_missed",
            "Evaluations skipped because the one before ran past the group's interval",
            metrics.missed.clone(),
        );
        metrics
    }

    /// Counts one evaluation of `group`: `n_rules` rules, `n_failed` of them failed, in
    /// `seconds`, after `n_missed` skipped evaluation times.
    pub(crate) fn observe(
        &self,
        group: &str,
        n_rules: usize,
        n_failed: usize,
        seconds: f64,
        n_missed: u64,
    ) {
        let label = vec![("rule_group", group.to_owned())];
        self.evaluations
            .get_or_create(&label)
            .inc_by(n_rules as u64);
        self.failures.get_or_create(&label).inc_by(n_failed as u64);
        self.last_duration.get_or_create(&label).set(seconds);
        if n_missed > 0 {
            self.missed.get_or_create(&label).inc_by(n_missed);
        }
    }
}
