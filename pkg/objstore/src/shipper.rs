//! Uploading the store's blocks to a bucket.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use object_store::{ObjectStoreExt as _, PutPayload};
use parca_tsdb::BlockInfo;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::io::AsyncWriteExt;

use crate::{Bucket, Error};

/// The file beside the store's blocks that lists the blocks already in the bucket.
pub const SHIPPER_STATE_FILE: &str = "shipper.json";

/// First wait after a failed upload; doubled after each further failure of the same block.
const FIRST_RETRY: Duration = Duration::from_secs(1);
/// Longest wait between two attempts at one block.
const LAST_RETRY: Duration = Duration::from_secs(300);

/// `shipper.json`.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct State {
    version: u32,
    /// Names of the blocks whose files and `meta.json` are all in the bucket.
    shipped: BTreeSet<String>,
}

/// The shipper's figures, for `/metrics`.
#[derive(Debug, Default)]
pub struct ShipperMetrics {
    /// Blocks uploaded whole.
    pub uploaded_blocks: Counter,
    /// Bytes uploaded.
    pub uploaded_bytes: Counter,
    /// Attempts at a block that failed (each is retried).
    pub failed_uploads: Counter,
    /// Blocks on disk not yet in the bucket.
    pub pending_blocks: Gauge,
    /// How long the oldest block not yet in the bucket has waited, in seconds.
    pub lag_seconds: Gauge<f64, AtomicU64>,
    /// Passes over the local blocks made (each uploads what the bucket lacks): that the
    /// shipper runs, even when it has nothing to do. Thanos' shipper counts the same.
    pub dir_syncs: Counter,
}

impl ShipperMetrics {
    /// Creates the figures and adds them to `registry`.
    pub fn register(registry: &mut Registry) -> Arc<ShipperMetrics> {
        let m = Arc::new(ShipperMetrics::default());
        registry.register(
            "parca_shipper_uploaded_blocks",
            "Blocks uploaded whole to the object store",
            m.uploaded_blocks.clone(),
        );
        registry.register(
            "parca_shipper_uploaded_bytes",
            "Bytes of blocks uploaded to the object store",
            m.uploaded_bytes.clone(),
        );
        registry.register(
            "parca_shipper_failed_uploads",
            "Attempts to upload a block that failed (each is retried with backoff)",
            m.failed_uploads.clone(),
        );
        registry.register(
            "parca_shipper_pending_blocks",
            "Blocks on local disk not yet in the object store",
            m.pending_blocks.clone(),
        );
        registry.register(
            "parca_shipper_lag_seconds",
            "How long the oldest block not yet in the object store has waited",
            m.lag_seconds.clone(),
        );
        registry.register(
            "parca_shipper_dir_syncs",
            "Passes over the local blocks, each uploading what the object store does not hold yet",
            m.dir_syncs.clone(),
        );
        m
    }
}

/// Uploads the store's blocks to a bucket, each once.
#[derive(Debug)]
pub struct Shipper {
    bucket: Bucket,
    state_path: PathBuf,
    state: State,
    external_labels: BTreeMap<String, String>,
    /// Per block that failed: when to try again, and the wait after the next failure.
    retry: HashMap<String, (Instant, Duration)>,
    /// When each pending block was first seen.
    waiting_since: HashMap<String, Instant>,
    metrics: Arc<ShipperMetrics>,
}

impl Shipper {
    /// A shipper of the store in `storage_dir` to `bucket`, writing `external_labels` into each
    /// block's `meta.json` in the bucket. Reads which blocks were shipped before (none when
    /// `shipper.json` is absent).
    pub fn new(
        bucket: Bucket,
        storage_dir: &Path,
        external_labels: BTreeMap<String, String>,
        metrics: Arc<ShipperMetrics>,
    ) -> Result<Shipper, Error> {
        let state_path = storage_dir.join(SHIPPER_STATE_FILE);
        let state = match std::fs::read(&state_path) {
            Ok(bytes) => serde_json::from_slice::<State>(&bytes).map_err(|e| Error::State {
                path: state_path.display().to_string(),
                why: e.to_string(),
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => State {
                version: 1,
                ..State::default()
            },
            Err(source) => {
                return Err(Error::Io {
                    action: "read",
                    path: state_path.display().to_string(),
                    source,
                });
            }
        };
        Ok(Shipper {
            bucket,
            state_path,
            state,
            external_labels,
            retry: HashMap::new(),
            waiting_since: HashMap::new(),
            metrics,
        })
    }

    /// The blocks known to be in the bucket.
    pub fn shipped(&self) -> impl Iterator<Item = &String> {
        self.state.shipped.iter()
    }

    /// The bucket blocks go to.
    pub fn bucket(&self) -> &Bucket {
        &self.bucket
    }

    /// Uploads each of `blocks` not in the bucket yet (oldest first), except those waiting
    /// after a failure; returns the names of the blocks shipped now. A failure is logged,
    /// counted and retried later with a doubling wait; it never stops the others.
    pub async fn ship(&mut self, blocks: &[BlockInfo]) -> Vec<String> {
        let now = Instant::now();
        let mut shipped_now = Vec::new();
        let present: BTreeSet<&str> = blocks.iter().map(|b| b.name.as_str()).collect();
        self.waiting_since
            .retain(|name, _| present.contains(name.as_str()));
        self.retry.retain(|name, _| present.contains(name.as_str()));
        for block in blocks {
            if self.state.shipped.contains(&block.name) {
                continue;
            }
            self.waiting_since.entry(block.name.clone()).or_insert(now);
            if self.retry.get(&block.name).is_some_and(|(at, _)| now < *at) {
                continue;
            }
            match upload_block(&self.bucket, &block.name, &block.dir, &self.external_labels).await {
                Ok(bytes) => {
                    tracing::info!(
                        block = block.name,
                        bytes,
                        bucket = self.bucket.description,
                        "shipped block to the object store"
                    );
                    self.metrics.uploaded_blocks.inc();
                    self.metrics.uploaded_bytes.inc_by(bytes);
                    self.state.shipped.insert(block.name.clone());
                    self.retry.remove(&block.name);
                    self.waiting_since.remove(&block.name);
                    shipped_now.push(block.name.clone());
                }
                Err(error) => {
                    self.metrics.failed_uploads.inc();
                    let wait = self
                        .retry
                        .get(&block.name)
                        .map_or(FIRST_RETRY, |(_, wait)| (*wait * 2).min(LAST_RETRY));
                    tracing::warn!(
                        block = block.name,
                        bucket = self.bucket.description,
                        retry_in_seconds = wait.as_secs(),
                        %error,
                        "cannot ship a block to the object store; it stays on local disk and is tried again"
                    );
                    self.retry.insert(block.name.clone(), (now + wait, wait));
                }
            }
        }
        if !shipped_now.is_empty()
            && let Err(error) = self.save()
        {
            // The blocks are in the bucket; without the record they are uploaded again after a
            // restart, which overwrites them with the same bytes.
            tracing::error!(%error, "cannot record the shipped blocks");
        }
        let pending = self.waiting_since.len();
        self.metrics.pending_blocks.set(pending as i64);
        let lag = self
            .waiting_since
            .values()
            .map(|since| now.saturating_duration_since(*since))
            .max()
            .unwrap_or_default();
        self.metrics.lag_seconds.set(lag.as_secs_f64());
        self.metrics.dir_syncs.inc();
        shipped_now
    }

    /// Writes `shipper.json` whole: a temporary file, synced, renamed over the old one.
    fn save(&self) -> Result<(), Error> {
        let io = |action, source| Error::Io {
            action,
            path: self.state_path.display().to_string(),
            source,
        };
        let tmp = self.state_path.with_extension("json.tmp");
        let bytes = serde_json::to_vec_pretty(&self.state).expect("state serializes");
        {
            use std::io::Write as _;
            let mut file = std::fs::File::create(&tmp).map_err(|e| io("create", e))?;
            file.write_all(&bytes).map_err(|e| io("write", e))?;
            file.sync_all().map_err(|e| io("sync", e))?;
        }
        std::fs::rename(&tmp, &self.state_path).map_err(|e| io("rename", e))
    }
}

/// Uploads a block's files, then its `meta.json` with the external labels; returns the bytes
/// sent.
pub(crate) async fn upload_block(
    bucket: &Bucket,
    name: &str,
    dir: &Path,
    external_labels: &BTreeMap<String, String>,
) -> Result<u64, Error> {
    let io = |action, path: &Path, source| Error::Io {
        action,
        path: path.display().to_string(),
        source,
    };
    let mut files = Vec::new();
    let mut entries = tokio::fs::read_dir(dir)
        .await
        .map_err(|e| io("list", dir, e))?;
    while let Some(entry) = entries.next_entry().await.map_err(|e| io("list", dir, e))? {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name != "meta.json" {
            files.push(name);
        }
    }
    files.sort();
    let mut bytes = 0;
    for file_name in files {
        let local = dir.join(&file_name);
        let object = bucket.path(&format!("{name}/{file_name}"));
        let mut file = tokio::fs::File::open(&local)
            .await
            .map_err(|e| io("open", &local, e))?;
        // Large files go up in parts (multipart upload), small ones in one request.
        let mut writer =
            object_store::buffered::BufWriter::new(Arc::clone(&bucket.store), object.clone());
        let copied = tokio::io::copy(&mut file, &mut writer).await;
        let closed = match copied {
            Ok(n) => {
                bytes += n;
                writer.shutdown().await
            }
            Err(e) => {
                let _ = writer.abort().await;
                Err(e)
            }
        };
        closed.map_err(|e| Error::Upload {
            object: object.to_string(),
            source: object_store::Error::Generic {
                store: "upload",
                source: Box::new(e),
            },
        })?;
    }
    let meta = parca_tsdb::meta_for_upload(dir, external_labels)?;
    let object = bucket.path(&format!("{name}/meta.json"));
    bytes += meta.len() as u64;
    bucket
        .store
        .put(&object, PutPayload::from(meta))
        .await
        .map_err(|source| Error::Upload {
            object: object.to_string(),
            source,
        })?;
    Ok(bytes)
}
