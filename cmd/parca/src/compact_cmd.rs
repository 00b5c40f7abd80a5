//! `parca compact`: one pass of the object store's compactor and retention (as Thanos'
//! `compact` without `--wait`), for a bucket that no server compacts. Passes repeat until one
//! compacts nothing more.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, bail};

use crate::server::ObjstoreArgs;

/// Flags of `parca compact`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The configuration file whose `object_storage` names the bucket.
    #[arg(long, default_value = "parca.yaml")]
    config_path: PathBuf,
    /// Where the blocks' indexes are cached and merged blocks are written before upload
    /// (default: a temporary directory, removed at the end).
    #[arg(long)]
    work_dir: Option<PathBuf>,
    #[command(flatten)]
    objstore: ObjstoreArgs,
}

/// Most passes of one run: each compacts a level more at most.
const MAX_PASSES: usize = 16;

pub fn run(args: &Args) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.config_path)
        .with_context(|| format!("cannot read `{}`", args.config_path.display()))?;
    let config = parca_config::parse(&text, &args.config_path.display().to_string())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let Some(storage) = &config.object_storage else {
        bail!(
            "`{}` has no object_storage: there is no bucket to compact",
            args.config_path.display()
        );
    };
    let bucket =
        parca_objstore::Bucket::open(&storage.bucket).context("cannot set up object_storage")?;
    let (work, remove_after) = match &args.work_dir {
        Some(dir) => (dir.clone(), false),
        None => (
            std::env::temp_dir().join(format!("parca-compact-{}", std::process::id())),
            true,
        ),
    };
    let options = args.objstore.compactor_options();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    let mut out = std::io::stdout().lock();
    let result = runtime.block_on(async {
        let mut reader = parca_objstore::BucketReader::new(
            bucket.clone(),
            work.join("bucket-cache"),
            0,
            std::sync::Arc::new(parca_objstore::ReaderMetrics::default()),
        )?;
        for _ in 0..MAX_PASSES {
            let now_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64);
            let report = parca_objstore::compact_bucket(
                &bucket,
                &mut reader,
                &parca_objstore::scratch_dir(&work),
                &options,
                now_ms,
            )
            .await?;
            for (block, sources) in &report.compacted {
                writeln!(
                    out,
                    "compacted {} blocks into {block}: {}",
                    sources.len(),
                    sources.join(" ")
                )?;
            }
            for block in &report.marked {
                writeln!(out, "marked {block} for deletion")?;
            }
            for block in &report.deleted {
                writeln!(out, "deleted {block}")?;
            }
            if report.compacted.is_empty() {
                break;
            }
        }
        anyhow::Ok(())
    });
    if remove_after {
        let _ = std::fs::remove_dir_all(&work);
    }
    result?;
    writeln!(out, "{}: compacted", bucket.description)?;
    Ok(())
}
