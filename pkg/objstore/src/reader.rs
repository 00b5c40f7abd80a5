//! Reading the bucket: every block in it is served beside the local ones, so a server answers
//! over what it (or any other server sharing the bucket) shipped, after its local copies are
//! gone. Only a block's small files (`meta.json`, `index`, `symbols`) are copied to a local
//! cache; its profile data stays in the bucket and is read by byte ranges, chunk by chunk, as
//! queries need it (Thanos' store gateway reads blocks the same way).

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use futures_util::TryStreamExt as _;
use object_store::ObjectStoreExt as _;
use object_store::path::Path as ObjectPath;
use parca_tsdb::{LazyBlock, OpenBlock, RangeRead, RemoteBlock};
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
    /// Blocks whose small files the cache let go to stay within its bound.
    pub evictions: Counter,
    /// Blocks fetched again after the cache had let them go.
    pub refetches: Counter,
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
            "Bytes of the object store's block indexes and symbols cached on local disk (blocks open now)",
            m.cached_bytes.clone(),
        );
        registry.register(
            "parca_bucket_cache_evictions",
            "Blocks whose index and symbols the local cache let go to stay within --objstore-cache-size",
            m.evictions.clone(),
        );
        registry.register(
            "parca_bucket_cache_refetches",
            "Blocks whose index and symbols were fetched again for a query after the cache let them go",
            m.refetches.clone(),
        );
        registry.register(
            "parca_bucket_unreadable_blocks",
            "Blocks of the object store that cannot be read (each is logged with the reason)",
            m.unreadable_blocks.clone(),
        );
        m
    }
}

/// Serves the bucket's blocks: lists them, and keeps their small files in a cache bounded in
/// size, fetching them again when a query needs a block the cache let go.
#[derive(Debug)]
pub struct BucketReader {
    bucket: Bucket,
    cache: Arc<BlockCache>,
    /// The blocks served, by name.
    served: HashMap<String, LazyBlock>,
    /// Blocks that failed to open, with the reason (logged once).
    unreadable: HashMap<String, String>,
    metrics: Arc<ReaderMetrics>,
}

/// The local copies of blocks' small files (`meta.json`, `index`, `symbols`): at most
/// `max_bytes` of open blocks (0: no bound), the least recently read let go first.
#[derive(Debug)]
struct BlockCache {
    dir: PathBuf,
    max_bytes: u64,
    store: Arc<dyn object_store::ObjectStore>,
    description: String,
    runtime: tokio::runtime::Handle,
    metrics: Arc<ReaderMetrics>,
    /// The blocks served (owned by their [`LazyBlock`]s, so no cycle keeps them).
    blocks: Mutex<HashMap<String, Weak<CachedBlock>>>,
    /// A counter standing for time, for "least recently read".
    clock: AtomicU64,
}

/// One block of the bucket and, while the cache holds it, the block opened.
#[derive(Debug)]
struct CachedBlock {
    name: String,
    /// Its folder in the bucket.
    object_dir: ObjectPath,
    /// Bytes of its `profiles`.
    profiles_size: u64,
    opened: Mutex<Option<RemoteBlock>>,
    last_read: AtomicU64,
    cache: Arc<BlockCache>,
}

impl BucketReader {
    /// A reader of `bucket` that caches blocks' small files under `cache_dir`, at most
    /// `cache_bytes` of them (0: no bound). Must be created inside a tokio runtime: queries
    /// read profile data through it from blocking threads.
    pub fn new(
        bucket: Bucket,
        cache_dir: PathBuf,
        cache_bytes: u64,
        metrics: Arc<ReaderMetrics>,
    ) -> Result<BucketReader, Error> {
        std::fs::create_dir_all(&cache_dir).map_err(|source| Error::Io {
            action: "create the bucket cache directory",
            path: cache_dir.display().to_string(),
            source,
        })?;
        let cache = Arc::new(BlockCache {
            dir: cache_dir,
            max_bytes: cache_bytes,
            store: Arc::clone(&bucket.store),
            description: bucket.description.clone(),
            runtime: tokio::runtime::Handle::current(),
            metrics: Arc::clone(&metrics),
            blocks: Mutex::new(HashMap::new()),
            clock: AtomicU64::new(0),
        });
        Ok(BucketReader {
            bucket,
            cache,
            served: HashMap::new(),
            unreadable: HashMap::new(),
            metrics,
        })
    }

    /// Lists the bucket's blocks, opens those new to it (fetching and checking their small
    /// files once), drops those no longer in the bucket (or whose `meta.json` is gone: being
    /// deleted), and returns every block served now. A block without `meta.json` is still
    /// being uploaded and is left for a later call; a block that cannot be read is set aside
    /// with a log naming it, and the others are served.
    #[expect(
        clippy::too_many_lines,
        reason = "one listing of the bucket: new blocks fetched and opened, gone ones dropped, under one cache"
    )]
    pub async fn sync(&mut self) -> Result<Vec<LazyBlock>, Error> {
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
            if self.served.contains_key(&name) || self.unreadable.contains_key(&name) {
                continue;
            }
            let opened = match profiles_size {
                Some(size) => self.open_new(&name, size).await,
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
                    self.served.insert(name, block);
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
        let gone: Vec<String> = self
            .served
            .keys()
            .filter(|n| !present.contains(*n))
            .cloned()
            .collect();
        for name in gone {
            self.served.remove(&name);
            self.cache.forget(&name);
        }
        self.unreadable.retain(|name, _| present.contains(name));
        self.cache.let_go_over_bound();
        self.metrics.blocks.set(self.served.len() as i64);
        self.metrics
            .unreadable_blocks
            .set(self.unreadable.len() as i64);
        Ok(self.served.values().cloned().collect())
    }

    /// Fetches a block new to the reader, checks it by opening it, and returns it served.
    async fn open_new(&self, name: &str, profiles_size: u64) -> Result<LazyBlock, Error> {
        let block = Arc::new(CachedBlock {
            name: name.to_owned(),
            object_dir: self.bucket.path(name),
            profiles_size,
            opened: Mutex::new(None),
            last_read: AtomicU64::new(self.cache.tick()),
            cache: Arc::clone(&self.cache),
        });
        self.cache.fetch(&block).await?;
        let cache = Arc::clone(&self.cache);
        let opening = Arc::clone(&block);
        let opened = tokio::task::spawn_blocking(move || cache.open_fetched(&opening))
            .await
            .map_err(|e| Error::Io {
                action: "open",
                path: name.to_owned(),
                source: std::io::Error::other(e.to_string()),
            })??;
        let meta =
            std::fs::read(self.cache.dir.join(name).join("meta.json")).map_err(|source| {
                Error::Io {
                    action: "read",
                    path: name.to_owned(),
                    source,
                }
            })?;
        *block.opened.lock().expect("block lock poisoned") = Some(opened);
        let lazy = LazyBlock::new(name, &meta, Arc::clone(&block) as Arc<dyn OpenBlock>)
            .map_err(Error::Block)?;
        self.cache
            .blocks
            .lock()
            .expect("cache lock poisoned")
            .insert(name.to_owned(), Arc::downgrade(&block));
        Ok(lazy)
    }
}

impl BlockCache {
    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::Relaxed)
    }

    /// Copies a block's small files into the cache, unless they are there from before.
    async fn fetch(&self, block: &CachedBlock) -> Result<(), Error> {
        let local = self.dir.join(&block.name);
        if CACHED_FILES.iter().all(|f| local.join(f).is_file()) {
            return Ok(());
        }
        let tmp = self.dir.join(format!("{}.tmp", block.name));
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
            let object = block.object_dir.clone().join(file);
            let bytes = self
                .store
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
        Ok(())
    }

    /// Opens a block whose small files are in the cache, its `profiles` read by ranges.
    fn open_fetched(&self, block: &CachedBlock) -> Result<RemoteBlock, Error> {
        let ranges = Arc::new(ObjectRanges {
            store: Arc::clone(&self.store),
            path: block.object_dir.clone().join("profiles"),
            len: block.profiles_size,
            description: format!("{}/{}/profiles", self.description, block.name),
            runtime: self.runtime.clone(),
            metrics: Arc::clone(&self.metrics),
        });
        RemoteBlock::open(&self.dir.join(&block.name), ranges).map_err(Error::Block)
    }

    /// Stops caching a block no longer in the bucket.
    fn forget(&self, name: &str) {
        let removed = self
            .blocks
            .lock()
            .expect("cache lock poisoned")
            .remove(name);
        if let Some(block) = removed.and_then(|b| b.upgrade()) {
            *block.opened.lock().expect("block lock poisoned") = None;
        }
        let _ = std::fs::remove_dir_all(self.dir.join(name));
    }

    /// Lets go of the least recently read blocks (their opened state and their files) until the
    /// open ones fit the bound. A block being opened or read right now is passed over; a query
    /// that still holds a let-go block reads it to its end (its files stay mapped).
    fn let_go_over_bound(&self) {
        let blocks: Vec<Arc<CachedBlock>> = self
            .blocks
            .lock()
            .expect("cache lock poisoned")
            .values()
            .filter_map(Weak::upgrade)
            .collect();
        let size = |b: &CachedBlock| {
            b.opened
                .try_lock()
                .ok()
                .and_then(|o| o.as_ref().map(RemoteBlock::local_bytes))
                .unwrap_or(0)
        };
        let mut open: Vec<(u64, u64, &Arc<CachedBlock>)> = blocks
            .iter()
            .map(|b| (b.last_read.load(Ordering::Relaxed), size(b), b))
            .filter(|(_, bytes, _)| *bytes > 0)
            .collect();
        let mut total: u64 = open.iter().map(|(_, bytes, _)| bytes).sum();
        if self.max_bytes > 0 && total > self.max_bytes {
            open.sort_by_key(|(last, _, _)| *last);
            for (_, bytes, block) in &open {
                if total <= self.max_bytes {
                    break;
                }
                let Ok(mut opened) = block.opened.try_lock() else {
                    continue;
                };
                *opened = None;
                // Under the block's lock, so that no read opens the files being removed.
                let _ = std::fs::remove_dir_all(self.dir.join(&block.name));
                drop(opened);
                total -= bytes;
                self.metrics.evictions.inc();
            }
        }
        self.metrics.cached_bytes.set(total as i64);
    }
}

impl OpenBlock for CachedBlock {
    fn open(&self) -> Result<RemoteBlock, parca_tsdb::Error> {
        let cache = &self.cache;
        self.last_read.store(cache.tick(), Ordering::Relaxed);
        let mut opened = self.opened.lock().expect("block lock poisoned");
        if let Some(block) = &*opened {
            return Ok(block.clone());
        }
        // Let go by the cache: fetched again, from this query's (blocking) thread.
        cache
            .runtime
            .block_on(cache.fetch(self))
            .map_err(|e| fetch_error(&self.name, &e.to_string()))?;
        let block = cache.open_fetched(self).map_err(|e| match e {
            Error::Block(e) => e,
            e => fetch_error(&self.name, &e.to_string()),
        })?;
        *opened = Some(block.clone());
        drop(opened);
        cache.metrics.refetches.inc();
        cache.let_go_over_bound();
        Ok(block)
    }
}

/// A block's small files that could not be fetched again, as the store reports it.
fn fetch_error(name: &str, why: &str) -> parca_tsdb::Error {
    parca_tsdb::Error::Io {
        action: "cannot fetch a block's index and symbols from the object store for",
        path: PathBuf::from(name),
        source: std::io::Error::other(why.to_owned()),
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
