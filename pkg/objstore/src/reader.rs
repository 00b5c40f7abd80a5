//! Reading the bucket: every block in it is served beside the local ones, so a server answers
//! over what it (or any other server sharing the bucket) shipped, after its local copies are
//! gone. Only a block's small files (`meta.json`, `index`, `symbols`) are copied to a local
//! cache; its profile data stays in the bucket and is read by byte ranges, chunk by chunk, as
//! queries need it (Thanos' store gateway reads blocks the same way).

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use futures_util::TryStreamExt as _;
use object_store::ObjectStoreExt as _;
use object_store::path::Path as ObjectPath;
use parca_tsdb::{RangeRead, RemoteBlock};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::{Bucket, Error};

/// The small files of a block copied to the cache; `profiles` is read by ranges.
const CACHED_FILES: [&str; 3] = ["meta.json", "index", "symbols"];

/// The reader's figures, for `/metrics`.
#[derive(Debug, Default)]
pub struct ReaderMetrics {
    /// Blocks of the bucket served.
    pub blocks: Gauge,
    /// Bytes of profile data read from the bucket by queries.
    pub fetched_bytes: Counter,
    /// Byte ranges read from the bucket by queries.
    pub fetched_ranges: Counter,
    /// Bytes of blocks' small files copied to the local cache.
    pub cached_bytes: Gauge,
    /// Blocks of the bucket that could not be opened (set aside and logged).
    pub unreadable_blocks: Gauge,
}

impl ReaderMetrics {
    /// Creates the figures and adds them to `registry`.
    pub fn register(registry: &mut Registry) -> Arc<ReaderMetrics> {
        let m = Arc::new(ReaderMetrics::default());
        registry.register(
            "parca_bucket_blocks",
            "Blocks of the object store served beside the local ones",
            m.blocks.clone(),
        );
        registry.register(
            "parca_bucket_fetched_bytes",
            "Bytes of profile data read from the object store by queries",
            m.fetched_bytes.clone(),
        );
        registry.register(
            "parca_bucket_fetched_ranges",
            "Byte ranges read from the object store by queries",
            m.fetched_ranges.clone(),
        );
        registry.register(
            "parca_bucket_cached_bytes",
            "Bytes of the object store's block indexes and symbols cached on local disk",
            m.cached_bytes.clone(),
        );
        registry.register(
            "parca_bucket_unreadable_blocks",
            "Blocks of the object store that cannot be read (each is logged with the reason)",
            m.unreadable_blocks.clone(),
        );
        m
    }
}

/// Keeps the bucket's blocks open for reading.
#[derive(Debug)]
pub struct BucketReader {
    bucket: Bucket,
    cache_dir: PathBuf,
    runtime: tokio::runtime::Handle,
    open: HashMap<String, RemoteBlock>,
    /// Blocks that failed to open, with the reason (logged once).
    unreadable: HashMap<String, String>,
    metrics: Arc<ReaderMetrics>,
}

impl BucketReader {
    /// A reader of `bucket` that caches blocks' small files under `cache_dir`. Must be created
    /// inside a tokio runtime: queries read profile data through it from blocking threads.
    pub fn new(
        bucket: Bucket,
        cache_dir: PathBuf,
        metrics: Arc<ReaderMetrics>,
    ) -> Result<BucketReader, Error> {
        std::fs::create_dir_all(&cache_dir).map_err(|source| Error::Io {
            action: "create the bucket cache directory",
            path: cache_dir.display().to_string(),
            source,
        })?;
        Ok(BucketReader {
            bucket,
            cache_dir,
            runtime: tokio::runtime::Handle::current(),
            open: HashMap::new(),
            unreadable: HashMap::new(),
            metrics,
        })
    }

    /// Lists the bucket's blocks, opens those not open yet (copying their small files), drops
    /// those no longer in the bucket (or whose `meta.json` is gone: being deleted), and returns
    /// every block open now. A block without
    /// `meta.json` is still being uploaded and is left for a later call; a block that cannot be
    /// read is set aside with a log naming it, and the others are served.
    pub async fn sync(&mut self) -> Result<Vec<RemoteBlock>, Error> {
        // One listing of every object: which blocks have a `meta.json` (whole), and the size
        // of their `profiles`.
        let objects: Vec<object_store::ObjectMeta> = self
            .bucket
            .store
            .list(Some(&self.bucket.prefix))
            .try_collect()
            .await
            .map_err(crate::access("list", &self.bucket.prefix))?;
        let mut blocks: HashMap<String, (bool, Option<u64>)> = HashMap::new();
        for object in &objects {
            let Some(mut parts) = object.location.prefix_match(&self.bucket.prefix) else {
                continue;
            };
            let (Some(name), Some(file)) = (parts.next(), parts.next()) else {
                continue;
            };
            let entry = blocks.entry(name.as_ref().to_owned()).or_default();
            match file.as_ref() {
                "meta.json" => entry.0 = true,
                "profiles" => entry.1 = Some(object.size),
                _ => {}
            }
        }
        let mut present = HashSet::new();
        for (name, (whole, profiles_size)) in blocks {
            if !is_block_name(&name) || !whole {
                continue;
            }
            present.insert(name.clone());
            if self.open.contains_key(&name) || self.unreadable.contains_key(&name) {
                continue;
            }
            let dir = self.bucket.path(&name);
            let opened = match profiles_size {
                Some(size) => self.open_block(&dir, &name, size).await,
                None => Err(Error::Io {
                    action: "read",
                    path: format!("{}/{name}/profiles", self.bucket.description),
                    source: std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        "the block has a meta.json but no profiles",
                    ),
                }),
            };
            match opened {
                Ok(block) => {
                    tracing::info!(
                        block = name,
                        bucket = self.bucket.description,
                        "serving a block of the object store"
                    );
                    self.open.insert(name, block);
                }
                Err(error) => {
                    tracing::error!(
                        block = name,
                        bucket = self.bucket.description,
                        %error,
                        "cannot read a block of the object store; it is set aside and the other blocks are served"
                    );
                    self.unreadable.insert(name, error.to_string());
                }
            }
        }
        for gone in self
            .open
            .keys()
            .filter(|n| !present.contains(*n))
            .cloned()
            .collect::<Vec<_>>()
        {
            self.open.remove(&gone);
            let _ = std::fs::remove_dir_all(self.cache_dir.join(&gone));
        }
        self.unreadable.retain(|name, _| present.contains(name));
        self.metrics.blocks.set(self.open.len() as i64);
        self.metrics
            .unreadable_blocks
            .set(self.unreadable.len() as i64);
        self.metrics
            .cached_bytes
            .set(self.open.values().map(|b| b.local_bytes() as i64).sum());
        Ok(self.open.values().cloned().collect())
    }

    /// Copies a block's small files into the cache (unless there from before) and opens it
    /// with its `profiles` (`size` bytes) read by ranges.
    async fn open_block(
        &self,
        dir: &ObjectPath,
        name: &str,
        size: u64,
    ) -> Result<RemoteBlock, Error> {
        let store = &self.bucket.store;
        let profiles = dir.clone().join("profiles");
        let local = self.cache_dir.join(name);
        if !CACHED_FILES.iter().all(|f| local.join(f).is_file()) {
            let tmp = self.cache_dir.join(format!("{name}.tmp"));
            let _ = std::fs::remove_dir_all(&tmp);
            let io = |action: &'static str, path: &std::path::Path| {
                let path = path.display().to_string();
                move |source| Error::Io {
                    action,
                    path,
                    source,
                }
            };
            std::fs::create_dir_all(&tmp).map_err(io("create", &tmp))?;
            for file in CACHED_FILES {
                let object = dir.clone().join(file);
                let bytes = store
                    .get(&object)
                    .await
                    .map_err(crate::access("read", &object))?
                    .bytes()
                    .await
                    .map_err(crate::access("read", &object))?;
                let path = tmp.join(file);
                tokio::fs::write(&path, &bytes)
                    .await
                    .map_err(io("write", &path))?;
            }
            let _ = std::fs::remove_dir_all(&local);
            std::fs::rename(&tmp, &local).map_err(io("rename into place", &local))?;
        }
        let ranges = Arc::new(ObjectRanges {
            store: Arc::clone(store),
            path: profiles,
            len: size,
            description: format!("{}/{name}/profiles", self.bucket.description),
            runtime: self.runtime.clone(),
            metrics: Arc::clone(&self.metrics),
        });
        let local_dir = local.clone();
        let block = tokio::task::spawn_blocking(move || RemoteBlock::open(&local_dir, ranges))
            .await
            .map_err(|e| Error::Io {
                action: "open",
                path: local.display().to_string(),
                source: std::io::Error::other(e.to_string()),
            })??;
        Ok(block)
    }
}

/// Whether `name` looks like a block (a ULID: 26 characters of Crockford's base 32).
fn is_block_name(name: &str) -> bool {
    name.len() == 26 && name.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// A block's `profiles` in the bucket, read by ranges.
#[derive(Debug)]
struct ObjectRanges {
    store: Arc<dyn object_store::ObjectStore>,
    path: ObjectPath,
    len: u64,
    description: String,
    runtime: tokio::runtime::Handle,
    metrics: Arc<ReaderMetrics>,
}

impl RangeRead for ObjectRanges {
    fn len(&self) -> u64 {
        self.len
    }

    fn read(&self, offset: u64, len: u64) -> std::io::Result<Vec<u8>> {
        let end = offset.saturating_add(len);
        let bytes = self
            .runtime
            .block_on(self.store.get_range(&self.path, offset..end))
            .map_err(std::io::Error::other)?;
        self.metrics.fetched_ranges.inc();
        self.metrics.fetched_bytes.inc_by(bytes.len() as u64);
        Ok(bytes.to_vec())
    }

    fn describe(&self) -> String {
        self.description.clone()
    }
}
