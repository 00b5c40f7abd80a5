//! Blocks whose `profiles` file stays elsewhere (an object store): the small files (meta,
//! index, symbols) are read from a local copy, profile data by byte ranges on demand, so a
//! query of one series over many blocks fetches only that series' chunks.

use std::path::Path;
use std::sync::Arc;

use crate::Error;
use crate::block::{Block, BlockMeta};
use crate::range_read::RangeRead;

/// A block read from a local copy of its index and symbols and a [`RangeRead`] of its
/// profile data, for [`crate::Db::set_remote_blocks`].
#[derive(Debug, Clone)]
pub struct RemoteBlock {
    pub(crate) block: Arc<Block>,
}

impl RemoteBlock {
    /// Opens the block whose `meta.json`, `index` and `symbols` are in `dir` (named after the
    /// block) and whose `profiles` is `profiles`. The small files are verified whole; of
    /// `profiles` its footer (format and length), and each chunk as it is read.
    pub fn open(dir: &Path, profiles: Arc<dyn RangeRead>) -> Result<RemoteBlock, Error> {
        Ok(RemoteBlock {
            block: Arc::new(Block::open_with(dir, Some(profiles))?),
        })
    }

    /// The block's name (a ULID).
    pub fn name(&self) -> &str {
        self.block.name()
    }

    /// The level-1 blocks whose data it holds (itself when it was cut from a head): a block
    /// listed in another's sources was replaced by it.
    pub fn sources(&self) -> &[String] {
        &self.block.meta.compaction.sources
    }

    /// Its time range, `[min, max)` in milliseconds.
    pub fn time_range_ms(&self) -> (i64, i64) {
        (self.block.meta.min_time_ms, self.block.meta.max_time_ms)
    }

    /// Bytes of its local files (meta, index, symbols).
    pub fn local_bytes(&self) -> u64 {
        self.block.size_bytes
    }

    /// Its compaction level: 1 when cut from a head, one more than its sources' highest.
    pub fn level(&self) -> u32 {
        self.block.meta.compaction.level
    }

    /// The external labels of the server that wrote it (from its `meta.json` in the bucket).
    pub fn external_labels(&self) -> &std::collections::BTreeMap<String, String> {
        &self.block.meta.external_labels
    }
}

/// Opens a block of an object store when a read first needs it: a cache of blocks' small files
/// may have let them go, and fetches them again.
pub trait OpenBlock: Send + Sync + std::fmt::Debug {
    /// The block, opened.
    fn open(&self) -> Result<RemoteBlock, Error>;
}

impl OpenBlock for RemoteBlock {
    fn open(&self) -> Result<RemoteBlock, Error> {
        Ok(self.clone())
    }
}

/// A block of an object store, known by its `meta.json` and opened when a read of its time
/// range first needs it ([`crate::Db::set_remote_blocks`]): so the blocks' indexes and symbols
/// need not all be on local disk at once.
#[derive(Debug, Clone)]
pub struct LazyBlock {
    pub(crate) meta: Arc<BlockMeta>,
    opener: Arc<dyn OpenBlock>,
}

impl LazyBlock {
    /// The block whose `meta.json` holds `meta_json` (checked: it must name `name`), opened by
    /// `opener` when needed.
    pub fn new(
        name: &str,
        meta_json: &[u8],
        opener: Arc<dyn OpenBlock>,
    ) -> Result<LazyBlock, Error> {
        Ok(LazyBlock {
            meta: Arc::new(crate::block::parse_meta(name, meta_json)?),
            opener,
        })
    }

    /// The block's name (a ULID).
    pub fn name(&self) -> &str {
        &self.meta.ulid
    }

    /// The level-1 blocks whose data it holds (itself when it was cut from a head).
    pub fn sources(&self) -> &[String] {
        &self.meta.compaction.sources
    }

    /// Its time range, `[min, max)` in milliseconds.
    pub fn time_range_ms(&self) -> (i64, i64) {
        (self.meta.min_time_ms, self.meta.max_time_ms)
    }

    /// Its compaction level.
    pub fn level(&self) -> u32 {
        self.meta.compaction.level
    }

    /// The external labels of the server that wrote it.
    pub fn external_labels(&self) -> &std::collections::BTreeMap<String, String> {
        &self.meta.external_labels
    }

    /// The block, opened (its small files fetched again if they were let go).
    pub fn open(&self) -> Result<RemoteBlock, Error> {
        self.opener.open()
    }
}

impl From<RemoteBlock> for LazyBlock {
    fn from(block: RemoteBlock) -> LazyBlock {
        LazyBlock {
            meta: Arc::new(block.block.meta.clone()),
            opener: Arc::new(block),
        }
    }
}
