//! The object store's part of a running server, for its whole life: which bucket it ships to
//! ([`shipping_bucket`]), the loop that uploads the blocks it cuts ([`ship_blocks`]), and the
//! loop that serves the bucket's blocks beside the local ones, with the compactor's passes
//! when this server compacts the bucket ([`serve_bucket`]). The server binary only wires them.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use parca_tsdb::Db;

use crate::{Bucket, BucketReader, CompactorOptions, Error, Shipper};

/// How often the shipper looks for blocks to upload.
pub const SHIP_EVERY: Duration = Duration::from_secs(10);

/// How often the object store is listed for blocks to serve.
pub const READ_BUCKET_EVERY: Duration = Duration::from_secs(15);

/// Where, under the store's directory `storage_path`, the bucket's blocks' indexes are cached.
pub fn cache_dir(storage_path: &Path) -> PathBuf {
    storage_path.join("bucket-cache")
}

/// The bucket to ship blocks to: `object_storage`'s, unless it is a `FILESYSTEM` bucket in the
/// store's own directory (Parca's default `parca.yaml` names `./data`, where the blocks already
/// are: nothing to ship).
pub fn shipping_bucket(
    config: &parca_config::Config,
    storage_path: &Path,
) -> Result<Option<Bucket>, Error> {
    let Some(storage) = &config.object_storage else {
        return Ok(None);
    };
    if storage.bucket.kind == parca_config::BucketType::Filesystem {
        let directory = Path::new(storage.bucket.get_str("directory").unwrap_or("."));
        if same_directory(directory, storage_path) {
            tracing::info!(
                directory = %directory.display(),
                "object_storage is a FILESYSTEM bucket in the store's own directory: the blocks are already there, nothing is shipped"
            );
            return Ok(None);
        }
    }
    Bucket::open(&storage.bucket).map(Some)
}

/// Whether `a` and `b` name one directory (resolved when both exist, else made absolute).
fn same_directory(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => std::path::absolute(a).ok() == std::path::absolute(b).ok(),
    }
}

/// Uploads new blocks of `db` every [`SHIP_EVERY`], for the life of the server; what was
/// shipped before a restart is marked shipped first (retention deletes only shipped blocks).
pub async fn ship_blocks(mut shipper: Shipper, db: Arc<Db>) {
    db.mark_shipped(shipper.shipped().cloned());
    loop {
        let shipped = shipper.ship(&db.blocks()).await;
        db.mark_shipped(shipped);
        tokio::time::sleep(SHIP_EVERY).await;
    }
}

/// The compactor's part of [`serve_bucket`]: which bucket, where to merge, how, how often.
#[derive(Debug)]
pub struct Compacting {
    /// The bucket compacted (the one served).
    pub bucket: Bucket,
    /// The folder blocks are merged in ([`crate::scratch_dir`]).
    pub scratch: PathBuf,
    /// Ranges, retention and the deletion delay.
    pub options: CompactorOptions,
    /// Time between passes.
    pub every: Duration,
}

/// Serves the object store's blocks beside `db`'s own, listing it every
/// [`READ_BUCKET_EVERY`], for the life of the server; with `compactor`, runs a compaction
/// pass first whenever one is due. A failed listing keeps the blocks known so far served; a
/// failed pass is tried again at the next.
pub async fn serve_bucket(mut reader: BucketReader, db: Arc<Db>, compactor: Option<Compacting>) {
    let mut last_compaction: Option<std::time::Instant> = None;
    loop {
        if let Some(c) = &compactor
            && last_compaction.is_none_or(|at| at.elapsed() >= c.every)
        {
            last_compaction = Some(std::time::Instant::now());
            compaction_pass(c, &mut reader).await;
        }
        match reader.sync().await {
            Ok(blocks) => {
                db.set_remote_blocks(blocks);
            }
            Err(error) => tracing::warn!(
                %error,
                "cannot list the object store; its blocks known so far stay served"
            ),
        }
        tokio::time::sleep(READ_BUCKET_EVERY).await;
    }
}

/// One pass of the bucket's compactor, logged.
async fn compaction_pass(c: &Compacting, reader: &mut BucketReader) {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    match crate::compact_bucket(&c.bucket, reader, &c.scratch, &c.options, now_ms).await {
        Ok(report) if !report.is_empty() => tracing::info!(
            compacted = report.compacted.len(),
            marked = report.marked.len(),
            deleted = report.deleted.len(),
            "object store compaction pass"
        ),
        Ok(_) => {}
        Err(error) => {
            tracing::warn!(%error, "object store compaction pass failed; it runs again later")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::same_directory;

    #[test]
    fn one_directory_by_two_names_is_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let data = dir.path().join("data");
        std::fs::create_dir(&data).expect("mkdir");
        assert!(same_directory(&data, &dir.path().join("data/../data")));
        assert!(!same_directory(&data, dir.path()));
        // Not yet made: compared as absolute paths.
        assert!(same_directory(
            &dir.path().join("later"),
            &dir.path().join("./later")
        ));
    }
}
