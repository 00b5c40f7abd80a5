//! A querier's shards, read over HTTP: the [`parca_tsdb::Peers`] of `parca --mode=query`.
//!
//! Shards are named by `--query-store` URLs, `--query-store-file` lists of them, and parca.yaml's
//! `query_stores` groups (written as scrape jobs: static and file_sd targets, TLS and
//! credentials). Every
//! [`Options::refresh_interval`] the list is read again (file_sd files included) and each
//! shard's `GET /api/v1/status/store` polled: its external labels and how far the bucket holds
//! its profiles. A query then asks each shard, all at once, for its own profiles after that
//! point (`POST /api/v1/store/read`); the store reads the bucket for the rest.
//!
//! # Design constraints
//!
//! - No silent gaps: a shard whose status or answer cannot be had is a warning naming it and
//!   the time its part covers, in every answer it is missing from.
//! - Two shipping shards with the same external labels cannot be told apart in the bucket:
//!   both are refused (with a warning) rather than read twice or not at all.
//! - Reads block the calling thread (the store's queriers are synchronous and run on the
//!   blocking pool), driving the requests on the server's runtime.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures_util::future::join_all;
use parca_config::ScrapeConfig;
use parca_scrape::JobClient;
use parca_tsdb::{PeerAnswer, PeerRequest, PeerStore, Peers};
use parca_vocab::with_causes;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use reqwest::Method;

/// How the shards are found and read.
#[derive(Debug, Clone)]
pub struct Options {
    /// Shards by base URL (`--query-store`), reached without credentials.
    pub urls: Vec<String>,
    /// Files of shards' base URLs, one per line (`#` starts a comment), read again at every
    /// refresh (`--query-store-file`).
    pub files: Vec<std::path::PathBuf>,
    /// Whether this server reads the bucket the shards ship to. Without it, each shard is
    /// asked for everything it holds, since what it shipped cannot be read elsewhere.
    pub reads_bucket: bool,
    /// How often the list is read again and each shard's status polled.
    pub refresh_interval: Duration,
    /// How long one read of a shard may take (`--query-store-timeout`).
    pub timeout: Duration,
    /// Largest answer taken from a shard, decompressed.
    pub max_answer_bytes: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            urls: Vec::new(),
            files: Vec::new(),
            reads_bucket: true,
            refresh_interval: Duration::from_secs(15),
            timeout: Duration::from_secs(60),
            max_answer_bytes: 1 << 30,
        }
    }
}

/// How long a shard's status may take: polls must not hold up a start or each other.
const STATUS_TIMEOUT: Duration = Duration::from_secs(5);

/// How requests to a shard are made.
#[derive(Clone)]
enum Client {
    /// A `--query-store` URL: no credentials.
    Plain(reqwest::Client),
    /// A `query_stores` group's settings.
    Job(Arc<JobClient>),
}

impl Client {
    async fn request(&self, method: Method, url: &str) -> Result<reqwest::RequestBuilder, String> {
        match self {
            Client::Plain(c) => Ok(c.request(method, url)),
            Client::Job(j) => j.request(method, url).await.map_err(|e| e.to_string()),
        }
    }
}

/// One shard as last polled.
#[derive(Clone)]
struct Shard {
    url: String,
    client: Client,
    status: Result<PeerStore, String>,
    /// Whether it ships blocks to a bucket.
    shipping: bool,
}

/// The shards of a querier; see the crate's documentation.
pub struct Shards {
    plain: reqwest::Client,
    urls: Vec<String>,
    /// parca.yaml's `query_stores` groups, replaced on a reload.
    jobs: RwLock<Vec<Arc<JobClient>>>,
    options: Options,
    runtime: tokio::runtime::Handle,
    shards: RwLock<Vec<Shard>>,
    metrics: Metrics,
}

/// `/metrics` of the fan-out.
struct Metrics {
    up: Family<Vec<(&'static str, String)>, Gauge>,
    reads: Family<Vec<(&'static str, String)>, Counter>,
    failed_reads: Family<Vec<(&'static str, String)>, Counter>,
    fetched_bytes: Family<Vec<(&'static str, String)>, Counter>,
}

impl Metrics {
    fn register(registry: &mut Registry) -> Metrics {
        let m = Metrics {
            up: Family::default(),
            reads: Family::default(),
            failed_reads: Family::default(),
            fetched_bytes: Family::default(),
        };
        registry.register(
            "parca_query_store_up",
            "Whether the shard's status was read at the last poll (1) or not (0)",
            m.up.clone(),
        );
        registry.register(
            "parca_query_store_reads",
            "Reads of a shard's own profiles for queries",
            m.reads.clone(),
        );
        registry.register(
            "parca_query_store_failed_reads",
            "Reads of a shard that failed: each is a warning in a partial answer",
            m.failed_reads.clone(),
        );
        registry.register(
            "parca_query_store_fetched_bytes",
            "Bytes of shards' answers, as sent (compressed)",
            m.fetched_bytes.clone(),
        );
        m
    }
}

/// `GET /api/v1/status/store`'s `data`.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct StoreStatus {
    external_labels: BTreeMap<String, String>,
    #[serde(default)]
    shipping: bool,
    shipped_until: Option<i64>,
    shipped_blocks: Vec<ShippedBlock>,
    #[serde(default)]
    only_in_bucket: usize,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ShippedBlock {
    ulid: String,
    min_time: i64,
}

#[derive(serde::Deserialize)]
struct Envelope<T> {
    data: T,
}

impl Shards {
    /// The shards of `options.urls` and of parca.yaml's `query_stores`, polled once before
    /// this returns (so the first query knows them) and then every refresh interval on
    /// `runtime`. An error names a `query_stores` group whose client cannot be built.
    pub async fn start(
        options: Options,
        query_stores: &[ScrapeConfig],
        registry: &mut Registry,
    ) -> Result<Arc<Shards>, String> {
        let jobs = job_clients(query_stores)?;
        let plain = reqwest::Client::builder()
            .user_agent(concat!("parca-rs/", env!("CARGO_PKG_VERSION")))
            .no_proxy()
            .build()
            .map_err(|e| format!("cannot build the HTTP client for shards: {e}"))?;
        let shards = Arc::new(Shards {
            plain,
            urls: options
                .urls
                .iter()
                .map(|u| u.trim_end_matches('/').to_owned())
                .collect(),
            jobs: RwLock::new(jobs),
            runtime: tokio::runtime::Handle::current(),
            options,
            shards: RwLock::new(Vec::new()),
            metrics: Metrics::register(registry),
        });
        shards.refresh().await;
        let weak = Arc::downgrade(&shards);
        let every = shards.options.refresh_interval;
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                let Some(shards) = weak.upgrade() else { return };
                shards.refresh().await;
            }
        });
        Ok(shards)
    }

    /// Takes parca.yaml's `query_stores` anew (a reload), from the next [`Shards::refresh`]
    /// on. An error names a group whose client cannot be built; the groups before stay.
    pub fn set_query_stores(&self, query_stores: &[ScrapeConfig]) -> Result<(), String> {
        let jobs = job_clients(query_stores)?;
        *self.jobs.write().expect("jobs lock poisoned") = jobs;
        Ok(())
    }

    /// The shards' addresses, as last listed.
    pub fn addresses(&self) -> Vec<String> {
        self.shards
            .read()
            .expect("shards lock poisoned")
            .iter()
            .map(|s| s.url.clone())
            .collect()
    }

    /// Lists the shards again and polls each one's status.
    pub async fn refresh(&self) {
        let mut urls = self.urls.clone();
        for file in &self.options.files {
            match read_url_list(file) {
                Ok(listed) => urls.extend(listed),
                // The file's shards are not read now: their absence is not silent.
                Err(why) => {
                    tracing::error!(file = %file.display(), error = why, "cannot read a file of shards; its shards are left out until it can be read")
                }
            }
        }
        let mut listed: Vec<(String, Client)> = urls
            .into_iter()
            .map(|u| (u, Client::Plain(self.plain.clone())))
            .collect();
        let jobs = self.jobs.read().expect("jobs lock poisoned").clone();
        for job in &jobs {
            listed.extend(
                job.targets()
                    .into_iter()
                    .map(|u| (u, Client::Job(Arc::clone(job)))),
            );
        }
        listed.sort_by(|a, b| a.0.cmp(&b.0));
        listed.dedup_by(|a, b| a.0 == b.0);
        let polled = join_all(listed.into_iter().map(|(url, client)| async move {
            let (status, shipping) = match self.status(&url, &client).await {
                Ok((status, shipping)) => (Ok(status), shipping),
                Err(why) => (Err(why), false),
            };
            Shard {
                url,
                client,
                status,
                shipping,
            }
        }))
        .await;
        let mut shards = polled;
        refuse_shared_labels(&mut shards);
        for s in &shards {
            self.metrics
                .up
                .get_or_create(&vec![("store", s.url.clone())])
                .set(i64::from(s.status.is_ok()));
            if let Err(why) = &s.status {
                tracing::warn!(store = s.url, error = why, "cannot read a shard's status");
            }
        }
        let mut current = self.shards.write().expect("shards lock poisoned");
        // A shard no longer listed leaves `/metrics` too.
        for old in current
            .iter()
            .filter(|o| !shards.iter().any(|s| s.url == o.url))
        {
            self.metrics.up.remove(&vec![("store", old.url.clone())]);
        }
        *current = shards;
    }

    /// A shard's status, and whether it ships blocks.
    async fn status(&self, url: &str, client: &Client) -> Result<(PeerStore, bool), String> {
        let cannot = |why: String| {
            format!(
                "shard {url} cannot be read ({why}): its profiles not in the bucket yet are missing from this answer"
            )
        };
        let response = client
            .request(Method::GET, &format!("{url}/api/v1/status/store"))
            .await
            .map_err(cannot)?
            .timeout(self.options.timeout.min(STATUS_TIMEOUT))
            .send()
            .await
            .map_err(|e| cannot(with_causes(&e)))?;
        let code = response.status();
        let body = response
            .bytes()
            .await
            .map_err(|e| cannot(with_causes(&e)))?;
        if !code.is_success() {
            return Err(cannot(format!(
                "its status answered {code}: {}",
                String::from_utf8_lossy(&body[..body.len().min(300)])
            )));
        }
        let status: Envelope<StoreStatus> = serde_json::from_slice(&body)
            .map_err(|e| cannot(format!("its status is not what a shard answers: {e}")))?;
        let s = status.data;
        let shipping = s.shipping;
        let store = if self.options.reads_bucket {
            PeerStore {
                name: url.to_owned(),
                external_labels: s.external_labels,
                shipped_until_ms: s.shipped_until,
                shipped_blocks: s
                    .shipped_blocks
                    .into_iter()
                    .map(|b| (b.ulid, b.min_time))
                    .collect(),
                only_in_bucket: s.only_in_bucket,
            }
        } else {
            // Nothing of the shard is read from a bucket here: it answers for all it holds.
            PeerStore {
                name: url.to_owned(),
                external_labels: s.external_labels,
                shipped_until_ms: None,
                shipped_blocks: Vec::new(),
                only_in_bucket: 0,
            }
        };
        Ok((store, shipping))
    }

    async fn read_one(&self, shard: &Shard, request: &PeerRequest) -> Result<PeerAnswer, String> {
        let url = &shard.url;
        let missing = |why: String| {
            let since = if request.min_ms == i64::MIN {
                "all its profiles not in the bucket".to_owned()
            } else {
                format!("its profiles from {} on", format_ms(request.min_ms))
            };
            format!("shard {url} did not answer ({why}): {since} are missing from this answer")
        };
        let labels = vec![("store", url.clone())];
        self.metrics.reads.get_or_create(&labels).inc();
        let result = async {
            let response = shard
                .client
                .request(Method::POST, &format!("{url}/api/v1/store/read"))
                .await?
                .header(reqwest::header::CONTENT_TYPE, parca_tsdb::PEER_CONTENT_TYPE)
                .timeout(self.options.timeout)
                .body(request.encode())
                .send()
                .await
                .map_err(|e| with_causes(&e))?;
            let code = response.status();
            let body = response.bytes().await.map_err(|e| with_causes(&e))?;
            self.metrics
                .fetched_bytes
                .get_or_create(&labels)
                .inc_by(body.len() as u64);
            if !code.is_success() {
                return Err(format!(
                    "{code}: {}",
                    String::from_utf8_lossy(&body[..body.len().min(300)])
                ));
            }
            let max = self.options.max_answer_bytes;
            tokio::task::spawn_blocking(move || PeerAnswer::decode(&body, max))
                .await
                .map_err(|e| format!("decoding failed: {e}"))?
                .map_err(|e| e.to_string())
        }
        .await;
        result.map_err(|why| {
            self.metrics.failed_reads.get_or_create(&labels).inc();
            tracing::warn!(store = url, error = why, "a shard did not answer a query");
            missing(why)
        })
    }
}

impl Peers for Shards {
    fn stores(&self) -> Vec<Result<PeerStore, String>> {
        self.shards
            .read()
            .expect("shards lock poisoned")
            .iter()
            .map(|s| s.status.clone())
            .collect()
    }

    fn read(&self, asks: &[(usize, PeerRequest)]) -> Vec<Result<PeerAnswer, String>> {
        let shards = self.shards.read().expect("shards lock poisoned").clone();
        self.runtime
            .block_on(join_all(asks.iter().map(|(i, request)| {
                let shard = shards.get(*i);
                async move {
                    match shard {
                        Some(shard) => self.read_one(shard, request).await,
                        None => Err(format!("shard {i} left the list during the query")),
                    }
                }
            })))
    }
}

/// The base URLs a `--query-store-file` lists: one per line, `#` starting a comment. An error
/// names an unreadable file or a line that is not an http(s) URL.
fn read_url_list(path: &std::path::Path) -> Result<Vec<String>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let url = line.split('#').next().unwrap_or("").trim();
        if url.is_empty() {
            continue;
        }
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(format!(
                "line {}: `{url}` is not a URL: write http://host:port or https://host:port",
                n + 1
            ));
        }
        out.push(url.trim_end_matches('/').to_owned());
    }
    Ok(out)
}

/// A client per `query_stores` group.
fn job_clients(query_stores: &[ScrapeConfig]) -> Result<Vec<Arc<JobClient>>, String> {
    query_stores
        .iter()
        .map(|c| {
            JobClient::new(c.clone())
                .map(Arc::new)
                .map_err(|e| format!("query_stores `{}`: {e}", c.job_name))
        })
        .collect()
}

/// Shards that ship blocks and share external labels: their blocks cannot be told apart in
/// the bucket, so none of them is read, each with a status that says why.
fn refuse_shared_labels(shards: &mut [Shard]) {
    let mut by_labels: BTreeMap<BTreeMap<String, String>, Vec<String>> = BTreeMap::new();
    for s in shards.iter().filter(|s| s.shipping) {
        if let Ok(status) = &s.status {
            by_labels
                .entry(status.external_labels.clone())
                .or_default()
                .push(s.url.clone());
        }
    }
    for s in shards.iter_mut().filter(|s| s.shipping) {
        let Ok(status) = &s.status else { continue };
        let same = &by_labels[&status.external_labels];
        if same.len() > 1 {
            s.status = Err(format!(
                "shards {} have the same external labels {:?}: give each shard its own in \
                 `global.external_labels` (e.g. `shard`), so that their blocks in the bucket \
                 can be told apart",
                same.join(", "),
                status.external_labels
            ));
        }
    }
}

/// A time in milliseconds as RFC 3339.
fn format_ms(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms).map_or_else(|_| format!("{ms} ms"), |t| t.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_of_shards_lists_urls_and_names_a_bad_line() {
        let dir = std::env::temp_dir().join(format!("parca-fanout-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("shards");
        std::fs::write(&file, "# shards\nhttp://a:7070/\n\n  https://b:7070 # eu\n").unwrap();
        assert_eq!(
            read_url_list(&file).unwrap(),
            ["http://a:7070", "https://b:7070"]
        );
        std::fs::write(&file, "http://a:7070\nb:7070\n").unwrap();
        let e = read_url_list(&file).unwrap_err();
        assert!(e.contains("line 2") && e.contains("b:7070"), "{e}");
        assert!(read_url_list(&dir.join("missing")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
