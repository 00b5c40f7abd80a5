//! Sending alerts to Alertmanagers (`alerting.alertmanagers`), as Prometheus' notifier does:
//! a bounded queue that drops its oldest alerts when full, drained in batches by one task that
//! POSTs each batch to `/api/v2/alerts` of every Alertmanager found (static or file_sd), with
//! the `global.external_labels` a series lacks and `alert_relabel_configs` applied.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use parca_config::{AlertingConfig, RelabelConfig};
use parca_scrape::JobClient;

/// Most alerts waiting to be sent: Prometheus' default `--alertmanager.notification-queue-capacity`.
pub const QUEUE_CAPACITY: usize = 10_000;

/// Most alerts in one POST, as Prometheus.
const MAX_BATCH: usize = 256;

/// An alert as Alertmanager's v2 API takes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Notification {
    /// Labels (`alertname` among them).
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
    /// When it started firing (ms).
    pub starts_at_ms: i64,
    /// When it was resolved, or until when it is valid unless sent again (ms).
    pub ends_at_ms: i64,
    /// A link to the rule's expression.
    pub generator_url: String,
}

impl Notification {
    /// The JSON object of Alertmanager's `postableAlert`.
    fn to_json(&self) -> serde_json::Value {
        let time = |ms: i64| {
            jiff::Timestamp::from_millisecond(ms)
                .map(|t| t.to_string())
                .unwrap_or_default()
        };
        serde_json::json!({
            "labels": self.labels,
            "annotations": self.annotations,
            "startsAt": time(self.starts_at_ms),
            "endsAt": time(self.ends_at_ms),
            "generatorURL": self.generator_url,
        })
    }
}

/// One `alertmanagers` entry, ready to send.
struct AlertmanagerSet {
    client: JobClient,
    path_prefix: String,
    timeout: Duration,
}

/// What the notifier sends to, swapped whole on reload.
#[derive(Default)]
struct Targets {
    sets: Vec<Arc<AlertmanagerSet>>,
    external_labels: BTreeMap<String, String>,
    relabel: Vec<RelabelConfig>,
}

/// The queue of alerts and where they go.
pub struct Notifier {
    queue: Mutex<VecDeque<Notification>>,
    targets: Mutex<Arc<Targets>>,
    wake: tokio::sync::Notify,
    dropped: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier").finish_non_exhaustive()
    }
}

impl Notifier {
    /// A notifier sending nowhere yet ([`Notifier::apply`]), its sending task started on the
    /// current tokio runtime.
    pub fn start() -> Arc<Notifier> {
        let notifier = Arc::new(Notifier {
            queue: Mutex::new(VecDeque::new()),
            targets: Mutex::new(Arc::new(Targets::default())),
            wake: tokio::sync::Notify::new(),
            dropped: Default::default(),
        });
        tokio::spawn(Arc::clone(&notifier).run());
        notifier
    }

    /// Sends to the Alertmanagers of `alerting` from now on, adding `external_labels`. An
    /// error names an entry whose client cannot be built (an unreadable CA file, say); then
    /// nothing changes.
    pub fn apply(
        &self,
        alerting: &AlertingConfig,
        external_labels: &BTreeMap<String, String>,
    ) -> Result<(), String> {
        let sets = alerting
            .alertmanagers
            .iter()
            .enumerate()
            .map(|(i, am)| {
                JobClient::new(am.client.clone())
                    .map(|client| {
                        Arc::new(AlertmanagerSet {
                            client,
                            path_prefix: am.path_prefix.clone(),
                            timeout: am.timeout,
                        })
                    })
                    .map_err(|e| format!("alerting.alertmanagers[{i}]: {e}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        *self.targets.lock().expect("notifier lock") = Arc::new(Targets {
            sets,
            external_labels: external_labels.clone(),
            relabel: alerting.alert_relabel_configs.clone(),
        });
        Ok(())
    }

    /// Queues `alerts` to be sent; when the queue is full the oldest are dropped (and
    /// counted), as Prometheus does.
    pub fn send(&self, alerts: Vec<Notification>) {
        if alerts.is_empty() || self.targets.lock().expect("notifier lock").sets.is_empty() {
            return;
        }
        let mut queue = self.queue.lock().expect("notifier lock");
        queue.extend(alerts);
        let excess = queue.len().saturating_sub(QUEUE_CAPACITY);
        if excess > 0 {
            queue.drain(..excess);
            self.dropped
                .fetch_add(excess as u64, std::sync::atomic::Ordering::Relaxed);
            tracing::warn!(dropped = excess, "alert queue full: oldest alerts dropped");
        }
        drop(queue);
        self.wake.notify_one();
    }

    /// Alerts dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Drains the queue in batches, for the life of the process.
    async fn run(self: Arc<Self>) {
        loop {
            self.wake.notified().await;
            loop {
                let batch: Vec<Notification> = {
                    let mut queue = self.queue.lock().expect("notifier lock");
                    let n = queue.len().min(MAX_BATCH);
                    queue.drain(..n).collect()
                };
                if batch.is_empty() {
                    break;
                }
                let targets = Arc::clone(&self.targets.lock().expect("notifier lock"));
                let body = match prepare(&batch, &targets) {
                    Some(body) => body,
                    None => continue,
                };
                let mut sends = Vec::new();
                for set in &targets.sets {
                    for base in set.client.targets() {
                        let url = format!("{base}{}/api/v2/alerts", set.path_prefix);
                        sends.push(post(Arc::clone(set), url, body.clone()));
                    }
                }
                futures_util::future::join_all(sends).await;
            }
        }
    }
}

/// The JSON body of a batch: external labels added where absent, then relabeled; `None` when
/// relabeling dropped every alert.
fn prepare(batch: &[Notification], targets: &Targets) -> Option<Vec<u8>> {
    let alerts: Vec<serde_json::Value> = batch
        .iter()
        .filter_map(|n| {
            let mut n = n.clone();
            for (name, value) in &targets.external_labels {
                n.labels
                    .entry(name.clone())
                    .or_insert_with(|| value.clone());
            }
            if !targets.relabel.is_empty() {
                n.labels = parca_config::relabel(&n.labels, &targets.relabel)?;
            }
            Some(n.to_json())
        })
        .collect();
    (!alerts.is_empty()).then(|| serde_json::to_vec(&alerts).expect("JSON of strings"))
}

/// POSTs `body` to one Alertmanager within its set's timeout; a failure is logged (the alerts
/// are sent again at the next resend).
async fn post(set: Arc<AlertmanagerSet>, url: String, body: Vec<u8>) {
    let sent = async {
        let request = set
            .client
            .request(reqwest::Method::POST, &url)
            .await
            .map_err(|e| e.to_string())?;
        let response = request
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .timeout(set.timeout)
            .body(body)
            .send()
            .await
            .map_err(|e| parca_vocab::with_causes(&e))?;
        let status = response.status();
        if status.is_success() {
            Ok(())
        } else {
            let text = response.text().await.unwrap_or_default();
            Err(format!("HTTP {status}: {}", text.trim()))
        }
    };
    if let Err(error) = sent.await {
        tracing::warn!(%url, %error, "cannot send alerts to Alertmanager");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_carry_external_labels_and_relabeling() {
        let config = parca_config::parse(
            "alerting:\n  alert_relabel_configs: [{source_labels: [severity], regex: none, action: drop}]\n",
            "parca.yaml",
        )
        .unwrap();
        let targets = Targets {
            sets: Vec::new(),
            external_labels: BTreeMap::from([
                ("region".into(), "eu".into()),
                ("job".into(), "ignored".into()),
            ]),
            relabel: config.alerting.alert_relabel_configs.clone(),
        };
        let alert = |severity: &str| Notification {
            labels: BTreeMap::from([
                ("alertname".into(), "A".into()),
                ("job".into(), "api".into()),
                ("severity".into(), severity.into()),
            ]),
            annotations: BTreeMap::from([("summary".into(), "s".into())]),
            starts_at_ms: 1_700_000_000_000,
            ends_at_ms: 1_700_000_240_000,
            generator_url: "http://parca/".into(),
        };
        let body = prepare(&[alert("page"), alert("none")], &targets).unwrap();
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            json,
            serde_json::json!([{
                "labels": {"alertname": "A", "job": "api", "region": "eu", "severity": "page"},
                "annotations": {"summary": "s"},
                "startsAt": "2023-11-14T22:13:20Z",
                "endsAt": "2023-11-14T22:17:20Z",
                "generatorURL": "http://parca/",
            }])
        );
        assert!(prepare(&[alert("none")], &targets).is_none());
    }
}
