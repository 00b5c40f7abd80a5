//! The bucket's compactor and retention, as Thanos' compactor keeps a bucket: exactly one
//! process runs it (a server started with `--objstore-compactor`, or `parca compact`).
//!
//! - **Compaction.** Blocks of one origin (the same external labels) that overlap in time, or
//!   that fill a window of a level (1 day, then 14 days) once the window is over, are merged
//!   into one block (series joined, symbols and stacks deduplicated, each profile once), which
//!   lists them in its `compaction.sources`: readers that see it ignore them at once.
//! - **Retention.** With a retention time, blocks that ended longer ago than it are marked.
//! - **Deletion.** Replaced or expired blocks get a `deletion-mark.json` (Thanos' format) and are
//!   deleted only after a delay, so a query that already opened them finishes.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures_util::TryStreamExt as _;
use object_store::{ObjectStoreExt as _, PutPayload};
use parca_tsdb::LazyBlock;

use crate::{Bucket, BucketReader, Error};

/// The marker a block to be deleted carries in the bucket.
pub const DELETION_MARK: &str = "deletion-mark.json";

/// How the compactor keeps the bucket.
#[derive(Debug, Clone)]
pub struct CompactorOptions {
    /// Blocks that ended longer ago than this are deleted; `None` keeps everything.
    pub retention: Option<Duration>,
    /// How long a block marked for deletion stays readable before it is deleted.
    pub delete_delay: Duration,
    /// The windows of the compaction levels, smallest first.
    pub ranges: Vec<Duration>,
}

impl Default for CompactorOptions {
    fn default() -> Self {
        CompactorOptions {
            retention: None,
            delete_delay: Duration::from_secs(30 * 60),
            ranges: vec![
                Duration::from_secs(24 * 3600),
                Duration::from_secs(14 * 24 * 3600),
            ],
        }
    }
}

/// What one pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CompactionReport {
    /// New blocks, each with the blocks it replaced.
    pub compacted: Vec<(String, Vec<String>)>,
    /// Blocks marked for deletion (replaced, or past retention).
    pub marked: Vec<String>,
    /// Blocks deleted from the bucket (marked longer ago than the delay).
    pub deleted: Vec<String>,
}

impl CompactionReport {
    /// Whether the pass changed nothing.
    pub fn is_empty(&self) -> bool {
        self.compacted.is_empty() && self.marked.is_empty() && self.deleted.is_empty()
    }
}

/// `deletion-mark.json`, as Thanos writes it.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct DeletionMark {
    id: String,
    /// When the block was marked, in Unix seconds.
    deletion_time: i64,
    version: u32,
}

/// One pass over the bucket: deletes blocks whose mark is older than the delay, marks blocks
/// past retention, and compacts what is due (each merge uploaded whole, its sources marked).
/// `scratch` holds the merged blocks while they are uploaded. `now_ms` is the time to judge by.
#[expect(
    clippy::too_many_lines,
    reason = "one pass of the bucket's compactor (plan, merge, upload, mark, delete) over one listing"
)]
pub async fn compact_bucket(
    bucket: &Bucket,
    reader: &mut BucketReader,
    scratch: &Path,
    options: &CompactorOptions,
    now_ms: i64,
) -> Result<CompactionReport, Error> {
    let mut report = CompactionReport::default();
    let blocks = reader.sync().await?;
    let mut marks: HashMap<String, i64> = HashMap::new();
    for b in &blocks {
        if let Some(at) = deletion_time(bucket, b.name()).await? {
            marks.insert(b.name().to_owned(), at);
        }
    }
    let delay_ms = options.delete_delay.as_millis() as i64;
    for (name, at_s) in &marks {
        if now_ms - at_s * 1000 >= delay_ms {
            delete_block(bucket, name).await?;
            tracing::info!(
                block = name,
                bucket = bucket.description,
                "deleted a block from the object store"
            );
            report.deleted.push(name.clone());
        }
    }
    report.deleted.sort();
    // What readers see: neither marked nor replaced.
    let replaced: HashSet<&str> = blocks
        .iter()
        .flat_map(|b| b.sources().iter().filter(move |s| *s != b.name()))
        .map(String::as_str)
        .collect();
    for b in &blocks {
        if replaced.contains(b.name()) && !marks.contains_key(b.name()) {
            mark(bucket, b.name(), now_ms).await?;
            report.marked.push(b.name().to_owned());
        }
    }
    let mut visible: Vec<&LazyBlock> = blocks
        .iter()
        .filter(|b| !replaced.contains(b.name()) && !marks.contains_key(b.name()))
        .collect();
    if let Some(retention) = options.retention {
        let oldest = now_ms - retention.as_millis() as i64;
        let (expired, kept): (Vec<&LazyBlock>, Vec<&LazyBlock>) = visible
            .into_iter()
            .partition(|b| b.time_range_ms().1 <= oldest);
        for b in expired {
            mark(bucket, b.name(), now_ms).await?;
            tracing::info!(
                block = b.name(),
                "block past the object store's retention, marked for deletion"
            );
            report.marked.push(b.name().to_owned());
        }
        visible = kept;
    }
    let ranges: Vec<i64> = options
        .ranges
        .iter()
        .map(|r| r.as_millis() as i64)
        .collect();
    for group in plan(&visible, &ranges) {
        let names: Vec<String> = group.iter().map(|b| b.name().to_owned()).collect();
        let labels = group[0].external_labels().clone();
        let sources: Vec<LazyBlock> = group.into_iter().cloned().collect();
        let out = scratch.to_owned();
        let dir = tokio::task::spawn_blocking(move || {
            std::fs::create_dir_all(&out).map_err(|source| Error::Io {
                action: "create",
                path: out.display().to_string(),
                source,
            })?;
            let sources = sources
                .iter()
                .map(LazyBlock::open)
                .collect::<Result<Vec<_>, _>>()
                .map_err(Error::Block)?;
            parca_tsdb::compact_remote(&out, &sources).map_err(Error::Block)
        })
        .await
        .map_err(|e| Error::Io {
            action: "compact blocks in",
            path: scratch.display().to_string(),
            source: std::io::Error::other(e.to_string()),
        })??;
        let name = block_name(&dir);
        let uploaded = crate::shipper::upload_block(bucket, &name, &dir, &labels).await;
        let _ = std::fs::remove_dir_all(&dir);
        uploaded?;
        for source in &names {
            mark(bucket, source, now_ms).await?;
            report.marked.push(source.clone());
        }
        tracing::info!(
            block = name,
            sources = ?names,
            bucket = bucket.description,
            "compacted blocks in the object store"
        );
        report.compacted.push((name, names));
    }
    Ok(report)
}

/// Groups of blocks to merge, each of one origin: blocks that overlap in time, else blocks
/// that fill one window of a level that has ended (the origin has a block reaching past it).
fn plan<'b>(blocks: &[&'b LazyBlock], ranges: &[i64]) -> Vec<Vec<&'b LazyBlock>> {
    let mut by_origin: BTreeMap<Vec<(String, String)>, Vec<&'b LazyBlock>> = BTreeMap::new();
    for b in blocks {
        let key = b
            .external_labels()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        by_origin.entry(key).or_default().push(b);
    }
    let mut groups = Vec::new();
    for mut stream in by_origin.into_values() {
        stream.sort_by(|a, b| (a.time_range_ms(), a.name()).cmp(&(b.time_range_ms(), b.name())));
        let mut used: HashSet<&str> = HashSet::new();
        // Overlapping runs first (imports, or two servers with one set of labels).
        let mut i = 0;
        while i < stream.len() {
            let mut end = stream[i].time_range_ms().1;
            let mut j = i + 1;
            while j < stream.len() && stream[j].time_range_ms().0 < end {
                end = end.max(stream[j].time_range_ms().1);
                j += 1;
            }
            if j - i >= 2 {
                used.extend(stream[i..j].iter().map(|b| b.name()));
                groups.push(stream[i..j].to_vec());
            }
            i = j;
        }
        let newest = stream
            .iter()
            .map(|b| b.time_range_ms().1)
            .max()
            .unwrap_or(0);
        for &range in ranges {
            let mut windows: BTreeMap<i64, Vec<&'b LazyBlock>> = BTreeMap::new();
            for b in stream.iter().filter(|b| !used.contains(b.name())) {
                let (min, max) = b.time_range_ms();
                let window = min.div_euclid(range) * range;
                if max <= window + range {
                    windows.entry(window).or_default().push(b);
                }
            }
            for (window, members) in windows {
                let whole_window = members
                    .iter()
                    .any(|b| b.time_range_ms() == (window, window + range));
                if members.len() >= 2 && window + range <= newest && !whole_window {
                    used.extend(members.iter().map(|b| b.name()));
                    groups.push(members);
                }
            }
        }
    }
    groups
}

fn block_name(dir: &Path) -> String {
    dir.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// When block `name` was marked for deletion (Unix seconds), if it was.
async fn deletion_time(bucket: &Bucket, name: &str) -> Result<Option<i64>, Error> {
    let object = bucket.path(&format!("{name}/{DELETION_MARK}"));
    match bucket.store.get(&object).await {
        Ok(got) => {
            let bytes = got.bytes().await.map_err(crate::access("read", &object))?;
            let mark: DeletionMark = serde_json::from_slice(&bytes).map_err(|e| Error::State {
                path: object.to_string(),
                why: e.to_string(),
            })?;
            Ok(Some(mark.deletion_time))
        }
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(crate::access("read", &object)(e)),
    }
}

async fn mark(bucket: &Bucket, name: &str, now_ms: i64) -> Result<(), Error> {
    let object = bucket.path(&format!("{name}/{DELETION_MARK}"));
    let mark = DeletionMark {
        id: name.to_owned(),
        deletion_time: now_ms.div_euclid(1000),
        version: 1,
    };
    let bytes = serde_json::to_vec_pretty(&mark).expect("mark serializes");
    bucket
        .store
        .put(&object, PutPayload::from(bytes))
        .await
        .map(|_| ())
        .map_err(crate::access("write", &object))
}

/// Deletes every object of block `name`, its `meta.json` first so that no reader takes what is
/// left for a block.
async fn delete_block(bucket: &Bucket, name: &str) -> Result<(), Error> {
    let prefix = bucket.path(name);
    let meta = bucket.path(&format!("{name}/meta.json"));
    match bucket.store.delete(&meta).await {
        Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
        Err(e) => return Err(crate::access("delete", &meta)(e)),
    }
    let objects: Vec<object_store::ObjectMeta> = bucket
        .store
        .list(Some(&prefix))
        .try_collect()
        .await
        .map_err(crate::access("list", &prefix))?;
    for object in objects {
        match bucket.store.delete(&object.location).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(crate::access("delete", &object.location)(e)),
        }
    }
    Ok(())
}

/// The scratch folder the compactor merges blocks in, under `dir`.
pub fn scratch_dir(dir: &Path) -> PathBuf {
    dir.join("compactor")
}
