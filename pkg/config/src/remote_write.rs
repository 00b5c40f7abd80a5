//! `remote_write:`: where recorded series are sent with Prometheus' remote-write protocol 1.0.
//! Credentials, TLS and proxy are written as a scrape job's and decoded by the same code (a
//! [`ScrapeConfig`] holds them).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::checked::{Checked, FromRaw, unwrap_list};
use crate::duration;
use crate::http_client::{EndpointUrl, HttpUrl, OAuth2, ProxyUrl};
use crate::relabel::RelabelConfig;
use crate::scrape::{Authorization, BasicAuth, RawScrapeConfig, ScrapeConfig};
use crate::secret::Secret;
use crate::tls::TlsConfig;

/// Headers the protocol sets itself, which `headers` may not set (Prometheus' list).
const RESERVED_HEADERS: &[&str] = &[
    "authorization",
    "content-encoding",
    "content-type",
    "x-prometheus-remote-write-version",
    "user-agent",
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "www-authenticate",
];

/// One `remote_write` entry.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RemoteWriteConfig {
    /// `url`: the receiver, e.g. `http://prometheus:9090/api/v1/write`.
    pub url: HttpUrl,
    /// `name`: for logs. Default: the URL.
    pub name: String,
    /// `remote_timeout`: how long one request may take. Default 30s.
    #[serde(serialize_with = "duration::serialize")]
    pub remote_timeout: Duration,
    /// `headers`: sent with every request (not the protocol's own).
    #[serde(skip)]
    pub headers: BTreeMap<String, String>,
    /// `write_relabel_configs`: applied to each series before it is sent.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub write_relabel_configs: Vec<RelabelConfig>,
    /// `queue_config`.
    pub queue_config: QueueConfig,
    /// `basic_auth`, `authorization`, `oauth2`, `tls_config`, proxy settings,
    /// `follow_redirects`, `enable_http2`, as a scrape job's. Not written back by `to_yaml`.
    #[serde(skip)]
    pub client: ScrapeConfig,
}

/// `queue_config`: the bounded queue in front of the receiver.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct QueueConfig {
    /// `capacity`: most samples waiting; the oldest are dropped beyond it. Default 10000.
    pub capacity: usize,
    /// `max_samples_per_send`: most samples in one request. Default 2000.
    pub max_samples_per_send: usize,
    /// `min_shards`: fewest requests in flight at once where there are samples to spread.
    /// Default 1.
    pub min_shards: usize,
    /// `max_shards`: most requests in flight at once, as the backlog needs (a series always
    /// goes by one shard, so its samples stay in order). Default 50, as Prometheus'.
    pub max_shards: usize,
    /// `batch_send_deadline`: longest a sample waits for its batch to fill. Samples are sent
    /// as soon as their evaluation ends, so they never wait that long; kept for Prometheus'
    /// configurations. Default 5s.
    #[serde(serialize_with = "duration::serialize")]
    pub batch_send_deadline: Duration,
    /// `sample_age_limit`: samples older than this are dropped instead of sent again while
    /// the receiver fails (0: never). Default 0.
    #[serde(serialize_with = "duration::serialize")]
    pub sample_age_limit: Duration,
    /// `min_backoff`: the first wait before a retry. Default 30ms.
    #[serde(serialize_with = "duration::serialize")]
    pub min_backoff: Duration,
    /// `max_backoff`: the longest wait between retries (each doubles). Default 5s.
    #[serde(serialize_with = "duration::serialize")]
    pub max_backoff: Duration,
    /// `retry_on_http_429`: retry a 429 as a 5xx (default true); false drops the batch.
    pub retry_on_http_429: bool,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            capacity: 10_000,
            max_samples_per_send: 2_000,
            min_shards: 1,
            max_shards: 50,
            batch_send_deadline: Duration::from_secs(5),
            sample_age_limit: Duration::ZERO,
            min_backoff: Duration::from_millis(30),
            max_backoff: Duration::from_secs(5),
            retry_on_http_429: true,
        }
    }
}

impl RemoteWriteConfig {
    /// Makes relative file paths (credentials, TLS files) relative to `dir`.
    pub(crate) fn set_directory(&mut self, dir: &std::path::Path) {
        self.client.set_directory(dir);
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawQueueConfig {
    capacity: Option<usize>,
    max_samples_per_send: Option<usize>,
    min_shards: Option<usize>,
    max_shards: Option<usize>,
    #[serde(default, deserialize_with = "duration::deserialize_positive_opt")]
    batch_send_deadline: Option<Duration>,
    #[serde(default, deserialize_with = "duration::deserialize_opt")]
    sample_age_limit: Option<Duration>,
    #[serde(default, deserialize_with = "duration::deserialize_positive_opt")]
    min_backoff: Option<Duration>,
    #[serde(default, deserialize_with = "duration::deserialize_positive_opt")]
    max_backoff: Option<Duration>,
    retry_on_http_429: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRemoteWrite {
    url: Option<EndpointUrl>,
    name: Option<String>,
    #[serde(default, deserialize_with = "duration::deserialize_positive_opt")]
    remote_timeout: Option<Duration>,
    headers: Option<BTreeMap<String, String>>,
    write_relabel_configs: Option<Vec<Checked<RelabelConfig>>>,
    queue_config: Option<RawQueueConfig>,
    basic_auth: Option<Checked<BasicAuth>>,
    authorization: Option<Checked<Authorization>>,
    bearer_token: Option<Secret>,
    bearer_token_file: Option<PathBuf>,
    oauth2: Option<Checked<OAuth2>>,
    tls_config: Option<Checked<TlsConfig>>,
    proxy_url: Option<ProxyUrl>,
    no_proxy: Option<String>,
    #[serde(default)]
    proxy_from_environment: bool,
    #[serde(default)]
    proxy_connect_header: BTreeMap<String, Vec<Secret>>,
    follow_redirects: Option<bool>,
    enable_http2: Option<bool>,
}

impl FromRaw for RemoteWriteConfig {
    type Raw = RawRemoteWrite;
    const EXPECTING: &'static str = "a remote write config with `url`";

    fn from_raw(raw: RawRemoteWrite) -> Result<Self, String> {
        let Some(EndpointUrl(url)) = raw.url else {
            return Err("`url` must be set".to_owned());
        };
        let headers = raw.headers.unwrap_or_default();
        if let Some(name) = headers
            .keys()
            .find(|h| RESERVED_HEADERS.contains(&h.to_ascii_lowercase().as_str()))
        {
            return Err(format!(
                "header {name:?} is reserved: the protocol (or `basic_auth`, `authorization`) sets it"
            ));
        }
        let defaults = QueueConfig::default();
        let queue_config = match raw.queue_config {
            None => defaults,
            Some(q) => QueueConfig {
                capacity: q.capacity.unwrap_or(defaults.capacity),
                max_samples_per_send: q
                    .max_samples_per_send
                    .unwrap_or(defaults.max_samples_per_send),
                min_shards: q.min_shards.unwrap_or(defaults.min_shards),
                max_shards: q.max_shards.unwrap_or(defaults.max_shards),
                batch_send_deadline: q
                    .batch_send_deadline
                    .unwrap_or(defaults.batch_send_deadline),
                sample_age_limit: q.sample_age_limit.unwrap_or(defaults.sample_age_limit),
                min_backoff: q.min_backoff.unwrap_or(defaults.min_backoff),
                max_backoff: q.max_backoff.unwrap_or(defaults.max_backoff),
                retry_on_http_429: q.retry_on_http_429.unwrap_or(defaults.retry_on_http_429),
            },
        };
        if queue_config.capacity == 0 || queue_config.max_samples_per_send == 0 {
            return Err(
                "`queue_config.capacity` and `queue_config.max_samples_per_send` must be positive"
                    .to_owned(),
            );
        }
        if queue_config.min_shards == 0 || queue_config.min_shards > queue_config.max_shards {
            return Err(format!(
                "`queue_config.min_shards` ({}) must be at least 1 and at most `max_shards` ({})",
                queue_config.min_shards, queue_config.max_shards
            ));
        }
        let client = ScrapeConfig::client_only(
            "remote_write",
            RawScrapeConfig {
                basic_auth: raw.basic_auth,
                authorization: raw.authorization,
                bearer_token: raw.bearer_token,
                bearer_token_file: raw.bearer_token_file,
                oauth2: raw.oauth2,
                tls_config: raw.tls_config,
                proxy_url: raw.proxy_url,
                no_proxy: raw.no_proxy,
                proxy_from_environment: raw.proxy_from_environment,
                proxy_connect_header: raw.proxy_connect_header,
                follow_redirects: raw.follow_redirects,
                enable_http2: raw.enable_http2,
                ..Default::default()
            },
        )?;
        Ok(RemoteWriteConfig {
            name: raw.name.unwrap_or_else(|| url.as_str().to_owned()),
            url,
            remote_timeout: raw.remote_timeout.unwrap_or(Duration::from_secs(30)),
            headers,
            write_relabel_configs: unwrap_list(raw.write_relabel_configs),
            queue_config,
            client,
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::parse;

    #[test]
    fn remote_write_as_prometheus_writes_it() {
        let config = parse(
            "remote_write:\n  - url: https://prom.example/api/v1/write\n    remote_timeout: 5s\n    headers: {X-Scope-OrgID: team}\n    authorization: {credentials: t}\n    write_relabel_configs: [{source_labels: [__name__], regex: 'job:.*', action: keep}]\n    queue_config: {capacity: 100, max_backoff: 1s}\n",
            "parca.yaml",
        )
        .unwrap();
        let rw = &config.remote_write[0];
        assert_eq!(rw.url.as_str(), "https://prom.example/api/v1/write");
        assert_eq!(rw.name, "https://prom.example/api/v1/write");
        assert_eq!(rw.remote_timeout.as_secs(), 5);
        assert_eq!(rw.headers["X-Scope-OrgID"], "team");
        assert_eq!(rw.write_relabel_configs.len(), 1);
        assert_eq!(rw.queue_config.capacity, 100);
        assert_eq!(rw.queue_config.max_samples_per_send, 2000);
        assert_eq!(rw.queue_config.max_backoff.as_secs(), 1);
        assert!(rw.client.authorization.is_some());
        for (yaml, want) in [
            (
                "remote_write:\n  - name: x\n",
                "parca.yaml:2:5: remote_write[0]: `url` must be set",
            ),
            (
                "remote_write:\n  - url: ftp://x/\n",
                "the scheme must be `http` or `https`",
            ),
            (
                "remote_write:\n  - url: http://x/\n    headers: {Content-Type: a}\n",
                "header \"Content-Type\" is reserved",
            ),
            (
                "remote_write:\n  - url: http://x/\n    queue_config: {min_shards: 3, max_shards: 2}\n",
                "`queue_config.min_shards` (3) must be at least 1 and at most `max_shards` (2)",
            ),
            (
                "remote_write:\n  - url: http://x/\n    queue_config: {max_shards: 2, min_samples: 1}\n",
                "unknown field `min_samples`",
            ),
        ] {
            let err = parse(yaml, "parca.yaml").unwrap_err().to_string();
            assert!(err.contains(want), "{yaml}: {err}");
        }
    }
}
