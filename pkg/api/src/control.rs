//! What the server binary lets the API see and do ([`Control`]), and the reports it gives
//! back (targets, build info): the API's side of its contract with the binary.

use std::collections::BTreeMap;

use serde::Serialize;

/// What the server binary lets the API see and do: the configuration and its reload, and the
/// scrape targets' health.
pub trait Control: Send + Sync {
    /// The configuration in force, as YAML.
    fn config_yaml(&self) -> String;
    /// Reloads the configuration file. On error the old configuration stays in force and the
    /// message says what is wrong with the file.
    fn reload(&self) -> Result<(), String>;
    /// The scrape targets and their health.
    fn targets(&self) -> TargetsReport;
    /// Asks the server to shut down gracefully, as SIGTERM does (`/-/quit`).
    fn quit(&self);
    /// Why the last reload failed, while the configuration in force is older than the file.
    fn last_reload_error(&self) -> Option<String> {
        None
    }
}

/// `/api/v1/targets`, Prometheus' shape.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TargetsReport {
    /// Targets being scraped.
    pub active_targets: Vec<ActiveTarget>,
    /// Targets that relabeling dropped.
    pub dropped_targets: Vec<DroppedTarget>,
}

/// A target being scraped and its health.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ActiveTarget {
    /// Labels before relabeling (`__address__`, `__scheme__`, `job`, …).
    pub discovered_labels: BTreeMap<String, String>,
    /// Labels after relabeling: what its series carry.
    pub labels: BTreeMap<String, String>,
    /// The job.
    pub scrape_pool: String,
    /// The URL of its first profile endpoint (others differ only in path).
    pub scrape_url: String,
    /// Every profile endpoint of the target with its own health.
    pub profiles: Vec<ProfileHealth>,
    /// `up`, `down` or `unknown`: down when any endpoint's last scrape failed.
    pub health: String,
    /// The last error of any endpoint, empty when none.
    pub last_error: String,
    /// When it was last scraped, RFC 3339, or empty.
    pub last_scrape: String,
    /// Seconds the last scrape took.
    pub last_scrape_duration: f64,
    /// The scrape interval, e.g. `10s`.
    pub scrape_interval: String,
    /// The scrape timeout, e.g. `13s`.
    pub scrape_timeout: String,
}

/// The health of one profile endpoint of a target.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProfileHealth {
    /// The profile name, e.g. `process_cpu`.
    pub name: String,
    /// The URL scraped.
    pub scrape_url: String,
    /// `up`, `down` or `unknown`.
    pub health: String,
    /// The last error, empty when none.
    pub last_error: String,
    /// When it was last scraped, RFC 3339, or empty.
    pub last_scrape: String,
    /// Seconds the last scrape took.
    pub last_scrape_duration: f64,
}

/// A target that relabeling dropped.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DroppedTarget {
    /// Labels before relabeling.
    pub discovered_labels: BTreeMap<String, String>,
}

/// Version and revision of the running binary.
#[derive(Debug, Clone, Default, Serialize)]
pub struct BuildInfo {
    /// e.g. `0.1.0`.
    pub version: String,
    /// The git commit, or `unknown`.
    pub revision: String,
}
