//! Sending recorded series to `remote_write` receivers with Prometheus' remote-write protocol
//! 1.0: a `WriteRequest` protobuf, snappy-compressed, POSTed with `Content-Encoding: snappy`,
//! `Content-Type: application/x-protobuf` and `X-Prometheus-Remote-Write-Version: 0.1.0`.
//! Each receiver has a bounded queue (its oldest samples dropped when full) drained by one
//! task in rounds: a round splits what waits into as many shards as the backlog needs (between
//! `min_shards` and `max_shards`, each series always in one shard so its samples stay in order)
//! and sends them at once; each shard retries what can be retried (network errors, 5xx, 429
//! unless told not to) with exponential backoff, dropping samples past `sample_age_limit`, and
//! drops what cannot (other 4xx).

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use parca_config::RemoteWriteConfig;
use parca_scrape::JobClient;
use tokio::task::JoinHandle;

use crate::rule::Sample;

/// The messages of Prometheus' `prompb` (remote.proto, types.proto) that version 1.0 sends,
/// with their field numbers.
pub mod proto {
    /// `prometheus.WriteRequest`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct WriteRequest {
        /// Field 1.
        #[prost(message, repeated, tag = "1")]
        pub timeseries: Vec<TimeSeries>,
    }

    /// `prometheus.TimeSeries`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TimeSeries {
        /// Field 1: sorted by name.
        #[prost(message, repeated, tag = "1")]
        pub labels: Vec<Label>,
        /// Field 2: in time order.
        #[prost(message, repeated, tag = "2")]
        pub samples: Vec<Sample>,
    }

    /// `prometheus.Label`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Label {
        /// Field 1.
        #[prost(string, tag = "1")]
        pub name: String,
        /// Field 2.
        #[prost(string, tag = "2")]
        pub value: String,
    }

    /// `prometheus.Sample`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        /// Field 1.
        #[prost(double, tag = "1")]
        pub value: f64,
        /// Field 2: milliseconds since the epoch.
        #[prost(int64, tag = "2")]
        pub timestamp: i64,
    }
}

/// The queues of every `remote_write` receiver.
#[derive(Default)]
pub struct RemoteWriter {
    queues: Mutex<Vec<Arc<Queue>>>,
    external_labels: Mutex<BTreeMap<String, String>>,
}

impl std::fmt::Debug for RemoteWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteWriter").finish_non_exhaustive()
    }
}

/// One receiver: its settings, client, queue and sending task.
struct Queue {
    config: RemoteWriteConfig,
    client: JobClient,
    samples: Mutex<VecDeque<Sample>>,
    wake: tokio::sync::Notify,
    dropped: AtomicU64,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl RemoteWriter {
    /// A writer sending nowhere yet ([`RemoteWriter::apply`]).
    pub fn new() -> Arc<RemoteWriter> {
        Arc::new(RemoteWriter::default())
    }

    /// Sends to the receivers of `configs` from now on, adding `external_labels` where a
    /// series lacks them. A receiver whose settings did not change keeps its queue; the others
    /// start afresh (their unsent samples dropped). Call inside a tokio runtime. An error
    /// names an entry whose client cannot be built; then nothing changes.
    pub fn apply(
        &self,
        configs: &[RemoteWriteConfig],
        external_labels: &BTreeMap<String, String>,
    ) -> Result<(), String> {
        let mut queues = self.queues.lock().expect("remote write lock");
        let mut next = Vec::with_capacity(configs.len());
        let mut fresh = Vec::new();
        for (i, config) in configs.iter().enumerate() {
            if let Some(q) = queues.iter().find(|q| q.config == *config) {
                next.push(Arc::clone(q));
                continue;
            }
            let client = JobClient::new(config.client.clone())
                .map_err(|e| format!("remote_write[{i}]: {e}"))?;
            let queue = Arc::new(Queue {
                config: config.clone(),
                client,
                samples: Mutex::new(VecDeque::new()),
                wake: tokio::sync::Notify::new(),
                dropped: AtomicU64::new(0),
                task: Mutex::new(None),
            });
            fresh.push(Arc::clone(&queue));
            next.push(queue);
        }
        for old in queues.iter() {
            if !next.iter().any(|q| Arc::ptr_eq(q, old))
                && let Some(task) = old.task.lock().expect("remote write lock").take()
            {
                task.abort();
            }
        }
        for queue in fresh {
            let task = tokio::spawn(Arc::clone(&queue).run());
            *queue.task.lock().expect("remote write lock") = Some(task);
        }
        *queues = next;
        *self.external_labels.lock().expect("remote write lock") = external_labels.clone();
        Ok(())
    }

    /// Queues `samples` for every receiver: external labels added where absent, then its
    /// `write_relabel_configs` (which may drop a series); beyond `queue_config.capacity` the
    /// oldest are dropped (and counted).
    pub fn send(&self, samples: &[Sample]) {
        let queues = self.queues.lock().expect("remote write lock").clone();
        if queues.is_empty() || samples.is_empty() {
            return;
        }
        let external = self
            .external_labels
            .lock()
            .expect("remote write lock")
            .clone();
        for queue in queues {
            let relabel = &queue.config.write_relabel_configs;
            let mut pending = queue.samples.lock().expect("remote write lock");
            for sample in samples {
                let mut labels = sample.labels.clone();
                for (name, value) in &external {
                    labels.entry(name.clone()).or_insert_with(|| value.clone());
                }
                if !relabel.is_empty() && !parca_config::relabel_in_place(&mut labels, relabel) {
                    continue;
                }
                pending.push_back(Sample {
                    labels,
                    value: sample.value,
                    timestamp_ms: sample.timestamp_ms,
                });
            }
            let excess = pending
                .len()
                .saturating_sub(queue.config.queue_config.capacity);
            if excess > 0 {
                pending.drain(..excess);
                queue.dropped.fetch_add(excess as u64, Ordering::Relaxed);
                tracing::warn!(
                    remote_write = %queue.config.name,
                    dropped = excess,
                    "remote write queue full: oldest samples dropped"
                );
            }
            drop(pending);
            queue.wake.notify_one();
        }
    }

    /// Samples dropped so far because a queue was full, over every receiver.
    pub fn dropped(&self) -> u64 {
        self.queues
            .lock()
            .expect("remote write lock")
            .iter()
            .map(|q| q.dropped.load(Ordering::Relaxed))
            .sum()
    }

    /// Stops every queue's task.
    pub fn stop(&self) {
        for queue in self.queues.lock().expect("remote write lock").drain(..) {
            if let Some(task) = queue.task.lock().expect("remote write lock").take() {
                task.abort();
            }
        }
    }
}

/// Why a request failed, and whether to try it again.
enum Failure {
    Retry(String),
    Drop(String),
}

impl Queue {
    /// Sends the queue's samples in rounds of shards, for the life of the queue.
    async fn run(self: Arc<Self>) {
        loop {
            self.wake.notified().await;
            loop {
                let shards = {
                    let mut pending = self.samples.lock().expect("remote write lock");
                    take_round(&mut pending, &self.config.queue_config)
                };
                if shards.is_empty() {
                    break;
                }
                futures_util::future::join_all(shards.iter().map(|shard| self.send_shard(shard)))
                    .await;
            }
        }
    }

    /// Sends one shard's samples in requests of at most `max_samples_per_send`, one after
    /// another.
    async fn send_shard(&self, samples: &[Sample]) {
        for batch in samples.chunks(self.config.queue_config.max_samples_per_send) {
            self.send_batch(batch.to_vec()).await;
        }
    }

    /// Sends one request's samples, retrying as the failure allows.
    async fn send_batch(&self, mut batch: Vec<Sample>) {
        let q = self.config.queue_config;
        let mut backoff = q.min_backoff;
        let mut body = encode(&batch);
        loop {
            match self.post(body.clone()).await {
                Ok(()) => return,
                Err(Failure::Drop(why)) => {
                    tracing::warn!(remote_write = %self.config.name, error = %why, samples = batch.len(), "remote write refused: samples dropped");
                    return;
                }
                Err(Failure::Retry(why)) => {
                    tracing::warn!(remote_write = %self.config.name, error = %why, retry_in = ?backoff, "remote write failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(q.max_backoff);
                    if !q.sample_age_limit.is_zero() {
                        let oldest = crate::clock::now_ms() - q.sample_age_limit.as_millis() as i64;
                        let before = batch.len();
                        batch.retain(|s| s.timestamp_ms >= oldest);
                        let aged = before - batch.len();
                        if aged > 0 {
                            self.dropped.fetch_add(aged as u64, Ordering::Relaxed);
                            tracing::warn!(remote_write = %self.config.name, dropped = aged, "remote write: samples older than sample_age_limit dropped");
                            if batch.is_empty() {
                                return;
                            }
                            body = encode(&batch);
                        }
                    }
                }
            }
        }
    }

    /// One request.
    async fn post(&self, body: Vec<u8>) -> Result<(), Failure> {
        let mut request = self
            .client
            .request(reqwest::Method::POST, self.config.url.as_str())
            .await
            .map_err(|e| Failure::Retry(e.to_string()))?
            .timeout(self.config.remote_timeout)
            .header(reqwest::header::CONTENT_ENCODING, "snappy")
            .header(reqwest::header::CONTENT_TYPE, "application/x-protobuf")
            .header("X-Prometheus-Remote-Write-Version", "0.1.0")
            .header(
                reqwest::header::USER_AGENT,
                concat!("parca/", env!("CARGO_PKG_VERSION")),
            );
        for (name, value) in &self.config.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        let response = request
            .body(body)
            .send()
            .await
            .map_err(|e| Failure::Retry(parca_vocab::with_causes(&e)))?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        let text = response.text().await.unwrap_or_default();
        let why = format!("HTTP {status}: {}", text.trim());
        let retry = status.is_server_error()
            || (status == reqwest::StatusCode::TOO_MANY_REQUESTS
                && self.config.queue_config.retry_on_http_429);
        Err(if retry {
            Failure::Retry(why)
        } else {
            Failure::Drop(why)
        })
    }
}

/// The next round's shards, taken from the front of `pending`: as many shards as the waiting
/// samples fill requests, between `min_shards` and `max_shards`, each series in one shard
/// (by a hash of its labels) so that its samples keep their order.
fn take_round(pending: &mut VecDeque<Sample>, q: &parca_config::QueueConfig) -> Vec<Vec<Sample>> {
    if pending.is_empty() {
        return Vec::new();
    }
    let per = q.max_samples_per_send;
    let n = pending
        .len()
        .div_ceil(per)
        .clamp(q.min_shards, q.max_shards);
    let take = (n * per).min(pending.len());
    let mut shards = vec![Vec::new(); n];
    for sample in pending.drain(..take) {
        let shard = if n == 1 {
            0
        } else {
            let mut hasher = std::hash::DefaultHasher::new();
            std::hash::Hash::hash(&sample.labels, &mut hasher);
            (std::hash::Hasher::finish(&hasher) % n as u64) as usize
        };
        shards[shard].push(sample);
    }
    shards.retain(|s| !s.is_empty());
    shards
}

/// A batch as a snappy-compressed `WriteRequest`: one time series per label set, its samples
/// in time order.
pub fn encode(batch: &[Sample]) -> Vec<u8> {
    let mut series: BTreeMap<&BTreeMap<String, String>, Vec<proto::Sample>> = BTreeMap::new();
    for s in batch {
        series.entry(&s.labels).or_default().push(proto::Sample {
            value: s.value,
            timestamp: s.timestamp_ms,
        });
    }
    let request = proto::WriteRequest {
        timeseries: series
            .into_iter()
            .map(|(labels, mut samples)| {
                samples.sort_by_key(|s| s.timestamp);
                proto::TimeSeries {
                    labels: labels
                        .iter()
                        .map(|(name, value)| proto::Label {
                            name: name.clone(),
                            value: value.clone(),
                        })
                        .collect(),
                    samples,
                }
            })
            .collect(),
    };
    let bytes = prost::Message::encode_to_vec(&request);
    snap::raw::Encoder::new()
        .compress_vec(&bytes)
        .expect("snappy takes any input of less than 4 GiB")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(series: usize, ts: i64) -> Sample {
        Sample {
            labels: BTreeMap::from([("series".to_owned(), series.to_string())]),
            value: ts as f64,
            timestamp_ms: ts,
        }
    }

    #[test]
    fn rounds_take_as_many_shards_as_the_backlog_needs_and_keep_each_series_in_order() {
        let q = parca_config::QueueConfig {
            max_samples_per_send: 10,
            min_shards: 1,
            max_shards: 4,
            ..Default::default()
        };
        // A small backlog: one shard.
        let mut pending: VecDeque<Sample> = (0..7).map(|i| sample(i, 1)).collect();
        assert_eq!(take_round(&mut pending, &q).len(), 1);
        assert!(pending.is_empty());
        // 100 samples of 20 series, 5 each in time order: 4 shards take 40 this round.
        let mut pending: VecDeque<Sample> =
            (0..100).map(|i| sample(i % 20, (i / 20) as i64)).collect();
        let shards = take_round(&mut pending, &q);
        assert!(shards.len() > 1 && shards.len() <= 4, "{}", shards.len());
        assert_eq!(shards.iter().map(Vec::len).sum::<usize>(), 40);
        assert_eq!(pending.len(), 60);
        for shard in &shards {
            for s in shard {
                // Each series is in one shard only, and in order there.
                assert!(
                    shards
                        .iter()
                        .filter(|o| o.iter().any(|x| x.labels == s.labels))
                        .count()
                        == 1
                );
            }
            for pair in shard.windows(2) {
                if pair[0].labels == pair[1].labels {
                    assert!(pair[0].timestamp_ms <= pair[1].timestamp_ms);
                }
            }
        }
        // min_shards is a floor only where there are samples to spread.
        let q = parca_config::QueueConfig { min_shards: 3, ..q };
        let mut pending: VecDeque<Sample> = (0..2).map(|i| sample(i, 1)).collect();
        assert!(take_round(&mut pending, &q).len() <= 2);
    }

    #[test]
    fn write_requests_decode_as_prometheus_reads_them() {
        let sample = |job: &str, t: i64, v: f64| Sample {
            labels: BTreeMap::from([
                ("__name__".to_owned(), "job:cpu:sum".to_owned()),
                ("job".to_owned(), job.to_owned()),
            ]),
            value: v,
            timestamp_ms: t,
        };
        let body = encode(&[
            sample("b", 2, 2.0),
            sample("a", 1, 1.0),
            sample("b", 1, 0.5),
        ]);
        let raw = snap::raw::Decoder::new().decompress_vec(&body).unwrap();
        let request: proto::WriteRequest = prost::Message::decode(raw.as_slice()).unwrap();
        assert_eq!(request.timeseries.len(), 2);
        let b = &request.timeseries[1];
        assert_eq!(b.labels[0].name, "__name__");
        assert_eq!(b.labels[1].value, "b");
        assert_eq!(
            b.samples,
            [
                proto::Sample {
                    value: 0.5,
                    timestamp: 1
                },
                proto::Sample {
                    value: 2.0,
                    timestamp: 2
                }
            ]
        );
    }

    #[tokio::test]
    async fn queues_are_bounded_and_relabeled() {
        let config = parca_config::parse(
            "remote_write:\n  - url: http://127.0.0.1:1/api/v1/write\n    write_relabel_configs: [{source_labels: [job], regex: drop, action: drop}]\n    queue_config: {capacity: 3, min_backoff: 1h}\n",
            "parca.yaml",
        )
        .unwrap();
        let writer = RemoteWriter::new();
        writer
            .apply(
                &config.remote_write,
                &BTreeMap::from([("region".into(), "eu".into())]),
            )
            .unwrap();
        let samples: Vec<Sample> = ["a", "drop", "b", "c", "d"]
            .iter()
            .map(|job| Sample {
                labels: BTreeMap::from([("job".to_owned(), (*job).to_owned())]),
                value: 1.0,
                timestamp_ms: 1,
            })
            .collect();
        // The receiver is down (port 1) and the backoff long: the first batch is held by the
        // sender, what comes after waits in the queue, bounded.
        writer.send(&samples);
        writer.send(&samples);
        let queue = Arc::clone(&writer.queues.lock().unwrap()[0]);
        let pending = queue.samples.lock().unwrap().clone();
        assert!(pending.len() <= 3, "{pending:?}");
        assert!(
            pending
                .iter()
                .all(|s| s.labels["job"] != "drop" && s.labels["region"] == "eu")
        );
        assert!(writer.dropped() >= 1);
        writer.stop();
    }
}
