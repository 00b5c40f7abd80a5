//! A target: the labels it was discovered with, the labels its series carry, and its health.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use parca_config::ScrapeConfig;

/// A target to scrape, after relabeling.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Target {
    /// The job.
    pub job: String,
    /// Labels before relabeling (`__address__`, `__scheme__`, `job`, group labels, …).
    pub discovered: BTreeMap<String, String>,
    /// Labels after relabeling, `__`-labels included (they decide address, scheme and params).
    pub relabeled: BTreeMap<String, String>,
}

impl Target {
    /// The labels its series carry: the relabeled ones without `__` names.
    pub fn series_labels(&self) -> BTreeMap<String, String> {
        self.relabeled
            .iter()
            .filter(|(k, _)| !k.starts_with("__"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// The URL of a profile endpoint: scheme and address from the labels, the path, the job's
    /// params (relabeled through `__param_<name>`), and `seconds` for delta endpoints.
    pub fn url(&self, path: &str, delta_seconds: Option<u64>) -> String {
        let scheme = self
            .relabeled
            .get("__scheme__")
            .map_or("http", String::as_str);
        let address = self.relabeled.get("__address__").map_or("", String::as_str);
        let mut url = format!("{scheme}://{address}{path}");
        let mut query = Vec::new();
        for (k, v) in &self.relabeled {
            if let Some(name) = k.strip_prefix("__param_") {
                query.push((name.to_owned(), v.clone()));
            }
        }
        if let Some(seconds) = delta_seconds {
            query.retain(|(k, _)| k != "seconds");
            query.push(("seconds".into(), seconds.to_string()));
        }
        if !query.is_empty() {
            let encoded: Vec<String> = query
                .iter()
                .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
                .collect();
            url.push('?');
            url.push_str(&encoded.join("&"));
        }
        url
    }
}

/// Percent-encodes a query component.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The labels a target is discovered with, before relabeling (Prometheus' set).
pub(crate) fn discovered_labels(
    config: &ScrapeConfig,
    address: &str,
    group_labels: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut labels = group_labels.clone();
    labels.insert("__address__".into(), address.into());
    labels.insert("__scheme__".into(), config.scheme.as_str().into());
    labels.insert("job".into(), config.job_name.clone());
    labels.insert(
        "__scrape_interval__".into(),
        parca_config::format_duration(config.scrape_interval),
    );
    labels.insert(
        "__scrape_timeout__".into(),
        parca_config::format_duration(config.scrape_timeout),
    );
    for (name, values) in &config.params {
        if let Some(first) = values.first() {
            labels.insert(format!("__param_{name}"), first.clone());
        }
    }
    labels
}

/// `up`, `down` or `unknown` (not scraped yet), as Prometheus says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Health {
    /// Not scraped yet.
    #[default]
    Unknown,
    /// The last scrape succeeded.
    Up,
    /// The last scrape failed.
    Down,
}

impl Health {
    /// `up`, `down` or `unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Unknown => "unknown",
            Health::Up => "up",
            Health::Down => "down",
        }
    }
}

/// The state of one profile endpoint of a target.
#[derive(Debug, Clone, Default)]
pub struct ProfileStatus {
    /// The profile name, e.g. `process_cpu`.
    pub name: String,
    /// The URL scraped.
    pub url: String,
    /// Health of the last scrape.
    pub health: Health,
    /// The last scrape's error, if it failed.
    pub last_error: Option<String>,
    /// When the last scrape started.
    pub last_scrape: Option<SystemTime>,
    /// How long it took.
    pub last_duration: Duration,
}

/// A target and the state of each of its profile endpoints.
#[derive(Debug, Clone)]
pub struct TargetStatus {
    /// The target.
    pub target: Target,
    /// Its interval and timeout.
    pub interval: Duration,
    /// Its timeout.
    pub timeout: Duration,
    /// One per enabled endpoint.
    pub profiles: Vec<ProfileStatus>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_carry_params_and_seconds() {
        let target = Target {
            job: "j".into(),
            discovered: BTreeMap::new(),
            relabeled: [
                ("__address__", "h:1"),
                ("__scheme__", "https"),
                ("__param_debug", "1 2"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
        };
        assert_eq!(
            target.url("/debug/pprof/profile", Some(10)),
            "https://h:1/debug/pprof/profile?debug=1%202&seconds=10"
        );
        assert_eq!(target.url("/x", None), "https://h:1/x?debug=1%202");
    }
}
