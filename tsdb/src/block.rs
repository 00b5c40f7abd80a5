//! Immutable blocks: a directory per time range holding `meta.json`, `index`, `symbols` and
//! `profiles`, written once by [`BlockWriter`] and read through memory maps by [`Block`].
//! `documentation/tsdb-format.md` describes every byte.
//!
//! Every file ends with the footer of [`encoding::seal`] (magic, version, crc32), checked when
//! the block is opened, and the index's structure is checked then too: a block that opens is
//! one whose every reference points inside its files.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use parca_profile::{Meta, Tables, ValueType};
use roaring::RoaringBitmap;
use serde::{Deserialize, Serialize};

use crate::Error;
use crate::block_profile::BlockProfile;
use crate::encoding::{self, Reader, put_ivarint, put_uvarint};
use crate::head::{ExtractedSeries, StoredProfile};
use crate::labels::Labels;
use crate::mmap::MappedFile;
use crate::postings::PostingsIndex;

/// Footer magic of each file (the last bytes but eight of the file).
pub(crate) const META_MAGIC: &[u8; 4] = b"PTMT";
pub(crate) const INDEX_MAGIC: &[u8; 4] = b"PTIX";
pub(crate) const SYMBOLS_MAGIC: &[u8; 4] = b"PTSY";
pub(crate) const PROFILES_MAGIC: &[u8; 4] = b"PTPF";

/// A frame of `profiles` is closed once its raw bytes pass this: big enough to compress well,
/// small enough that reading one profile does not decompress a whole day. From format 4 the
/// series of a block share frames (one after another, in label order), so that the profiles of
/// small series compress together: the four sample types of a heap profile hold the same stacks.
/// (Tests use small frames, so that series cross frames and share them in every test.)
const FRAME_RAW_BYTES: usize = if cfg!(test) { 16 << 10 } else { 1 << 20 };

/// A page of the index's series entries (one zstd frame, format 4) is closed once its raw
/// bytes pass this: reading one series decompresses at most about this much.
/// (Tests use small pages, so that every test reads several pages and the cache.)
const INDEX_PAGE_RAW_BYTES: usize = if cfg!(test) { 512 } else { 64 << 10 };

/// Bytes of decompressed index pages kept for all open blocks together ([`PageCache`]).
const INDEX_PAGE_CACHE_BYTES: usize = 64 << 20;

/// Decompressed frames of `profiles` a [`ChunkReader`] keeps at least, and per block it reads:
/// the frame its stored profiles are read from and a frame of each resolution of summaries.
const CACHED_FRAMES: usize = 8;
const CACHED_FRAMES_PER_BLOCK: usize = 4;

/// A page of a block's index: ([`Block::cache_id`], page number).
type PageKey = (u64, u32);

/// Decompressed index pages of every open block, the least recently used dropped once they
/// pass [`INDEX_PAGE_CACHE_BYTES`]: every query reads the series entries of its blocks, and
/// dashboards repeat their queries; pages are small beside the blocks' profiles. Keyed by the
/// block's [`Block::cache_id`], unique to each opening of a block.
#[derive(Default)]
struct PageCache {
    /// By (block, page): the page and when it was last used.
    pages: std::collections::HashMap<PageKey, (Arc<Vec<u8>>, u64)>,
    bytes: usize,
    clock: u64,
}

impl PageCache {
    fn get() -> std::sync::MutexGuard<'static, PageCache> {
        static CACHE: OnceLock<std::sync::Mutex<PageCache>> = OnceLock::new();
        CACHE
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn lookup(&mut self, key: PageKey) -> Option<Arc<Vec<u8>>> {
        self.clock += 1;
        let clock = self.clock;
        self.pages.get_mut(&key).map(|(page, used)| {
            *used = clock;
            page.clone()
        })
    }

    fn insert(&mut self, key: PageKey, page: Arc<Vec<u8>>) {
        self.clock += 1;
        self.bytes += page.len();
        if let Some((old, _)) = self.pages.insert(key, (page, self.clock)) {
            self.bytes -= old.len();
        }
        while self.bytes > INDEX_PAGE_CACHE_BYTES && self.pages.len() > 1 {
            let oldest = *self
                .pages
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k)
                .expect("not empty");
            if let Some((old, _)) = self.pages.remove(&oldest) {
                self.bytes -= old.len();
            }
        }
    }

    fn forget_block(&mut self, id: u64) {
        let mut freed = 0;
        self.pages.retain(|&(block, _), (page, _)| {
            let keep = block != id;
            if !keep {
                freed += page.len();
            }
            keep
        });
        self.bytes -= freed;
    }
}

/// Bytes of one page table entry (format 4): `offset: u64, len: u32, raw_len: u32`.
const PAGE_ENTRY_BYTES: usize = 16;

/// Largest raw (decompressed) size accepted for a chunk or the symbols: larger is damage.
const MAX_RAW_BYTES: u64 = 1 << 32;

/// zstd level for blocks' profiles and index pages: on profiles of real programs level 9
/// writes 6% fewer bytes than zstd's default 3, and level 11 1.5% fewer than 9, compressing at
/// about 80 MB/s and decompressing as fast. (Level 19 writes 7% fewer still, but compresses at
/// about 5 MB/s: too slow for the blocks of a busy server.)
const ZSTD_LEVEL: i32 = 11;

/// zstd level for a block's symbols, up to [`HIGH_LEVEL_BUDGET_BYTES`] of them: function
/// names and paths compress 12% better than at level 9, at about 5 MB/s (at most about a
/// second a block); they are decoded once per block, when it is first queried.
const HIGH_LEVEL: i32 = 19;

/// Raw bytes of symbols compressed at [`HIGH_LEVEL`]; larger symbols at [`ZSTD_LEVEL`].
const HIGH_LEVEL_BUDGET_BYTES: usize = 4 << 20;

/// Bytes of one postings table entry: `name: u32, value: u32, offset: u64, len: u32`.
const POSTINGS_ENTRY_BYTES: usize = 20;

/// Bytes of the index's table of contents, just before its footer (formats 1 to 3).
const TOC_BYTES_V3: usize = 40;

/// Bytes of the index's table of contents in format 4, which adds the page table.
const TOC_BYTES_V4: usize = 56;

/// Bytes of the index's table of contents from format 5, which adds the summary entries.
const TOC_BYTES: usize = 80;

/// The page number of a series without a summary entry in the summary offsets (format 5).
const NO_ENTRY: u32 = u32::MAX;

/// Page numbers of summary pages in the [`PageCache`] have this bit set.
const SUMMARY_PAGE_BIT: u32 = 1 << 31;

/// Where the index's sections are, from its table of contents.
struct Toc {
    symbols_offset: usize,
    series_offsets_offset: usize,
    n_series: usize,
    postings_table_offset: usize,
    n_postings: usize,
    /// Format 4: the table of the pages holding the series entries, and their number.
    page_table_offset: usize,
    n_pages: usize,
    /// Format 5: the summary entries' offsets, the table of their pages, and their number.
    summary_offsets_offset: usize,
    summary_page_table_offset: usize,
    n_summary_pages: usize,
}

/// What `meta.json` says about a block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct BlockMeta {
    /// The block's name (its directory), a ULID.
    pub ulid: String,
    /// Oldest profile time in the block (inclusive).
    pub min_time_ms: i64,
    /// End of the block's time range (exclusive): every profile is older.
    pub max_time_ms: i64,
    pub stats: BlockStats,
    pub compaction: Compaction,
    /// Format version of the block's files.
    pub version: u32,
    /// For a block holding profiles cut from the head: the end of the cut (every profile the
    /// write-ahead log held before it is in a block, so replay skips those). `Some(None)`
    /// (`null`): none of its profiles came from the head (imported or pushed past the
    /// out-of-order window). Absent (`None`) in blocks written before imports existed, all of
    /// which were cut from the head: read as `max_time_ms`.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub head_cut_ms: Option<Option<i64>>,
    /// The labels of the server that wrote the block (`global.external_labels`), set when the
    /// block is uploaded to an object store, so blocks of many servers can share a bucket.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub external_labels: BTreeMap<String, String>,
}

impl BlockMeta {
    /// The end of the head's time this block's profiles were cut from, if any came from it.
    pub fn head_cut_ms(&self) -> Option<i64> {
        self.head_cut_ms.unwrap_or(Some(self.max_time_ms))
    }
}

/// Tells a field that is present (`null` included) from one that is absent.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<i64>>, D::Error> {
    Option::<i64>::deserialize(d).map(Some)
}

/// Counts of what a block holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub(crate) struct BlockStats {
    pub n_series: u64,
    pub n_profiles: u64,
    pub n_samples: u64,
    pub n_stacks: u64,
    /// (stack, value) pairs of the summaries' windows (format 5; absent: none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub n_summary_samples: u64,
    /// Compressed bytes of the summaries' frames in `profiles` (format 5; absent: none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub summary_bytes: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// Where a block comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Compaction {
    /// 1 for a block cut from the head, one more than its sources' highest for a compacted one.
    pub level: u32,
    /// The level-1 blocks whose data this block holds (itself for a level-1 block).
    pub sources: Vec<String>,
}

/// A new sortable block name: a ULID (48 bits of milliseconds since the epoch, then 80 random
/// bits, in Crockford's base 32), so names sort by creation time.
pub(crate) fn new_ulid() -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    const ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let ms = now.as_millis() as u64 & ((1 << 48) - 1);
    // Randomness from std's per-process random hash keys, the clock and a counter.
    let mut random = 0u128;
    for i in 0..2u64 {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(now.as_nanos());
        h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
        h.write_u32(std::process::id());
        h.write_u64(i);
        random = (random << 64) | u128::from(h.finish());
    }
    let value: u128 = (u128::from(ms) << 80) | (random & ((1u128 << 80) - 1));
    (0..26)
        .rev()
        .map(|i| ALPHABET[((value >> (5 * i)) & 31) as usize] as char)
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Writing

/// Consecutive profiles of a series in one zstd frame of the `profiles` file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChunkRef {
    pub n_profiles: u32,
    /// Where the frame starts in `profiles`.
    pub offset: u64,
    /// The frame's compressed bytes.
    pub len: u64,
    /// The frame's decompressed bytes.
    pub raw_len: u64,
    /// Where the series' profiles start in the decompressed frame (format 4; 0 before, when
    /// every frame held one series' profiles alone).
    pub raw_offset: u64,
    /// Bytes before `raw_offset` of the chunk's profiles that a chunk narrowed to later
    /// profiles leaves out ([`chunks_of`]; 0 in the index): read again only when the first
    /// profile left in is written as differences ([`crate::differences`]) and needs them.
    pub lead: u64,
}

#[derive(Debug)]
struct WrittenSeries {
    labels: Labels,
    meta: Meta,
    profiles: Vec<BlockProfile>,
    chunks: Vec<ChunkRef>,
    /// Its summaries ([`crate::summary`]), finest first.
    levels: Vec<WrittenLevel>,
}

/// One level of a series' summaries as written: its windows' headers and their chunks.
#[derive(Debug)]
struct WrittenLevel {
    resolution_ms: i64,
    profiles: Vec<BlockProfile>,
    chunks: Vec<ChunkRef>,
}

/// Which list of chunks of a written series a frame's chunk belongs to.
#[derive(Debug, Clone, Copy)]
enum ChunkList {
    Profiles,
    Level(usize),
}

/// A frame of `profiles` being filled: its raw bytes and the chunks (series, list, chunk) in
/// it, completed when it is written. Stored profiles and summaries fill frames of their own,
/// so that a read of summaries decompresses no stored profile.
#[derive(Default)]
struct OpenFrame {
    raw: Vec<u8>,
    pending: Vec<(usize, ChunkList, usize)>,
}

/// Writes a block under `<name>.tmp` and renames it into place on [`BlockWriter::finish`]; a
/// writer dropped before that removes its temporary directory.
pub(crate) struct BlockWriter {
    name: String,
    data_dir: PathBuf,
    tmp: PathBuf,
    tables: Tables,
    profiles_path: PathBuf,
    profiles: BufWriter<File>,
    profiles_crc: crc32fast::Hasher,
    profiles_len: u64,
    compressor: zstd::bulk::Compressor<'static>,
    series: Vec<WrittenSeries>,
    /// The frames being filled: of stored profiles (0), and of each resolution of summaries
    /// (1 + its place in [`crate::SUMMARY_RESOLUTIONS_MS`]): a read of days decompresses no
    /// 5-minute windows.
    frames: Vec<OpenFrame>,
    /// Reused by the sums of the summaries.
    sums: crate::summary::StackSums,
    /// Whether the block gets summaries ([`crate::summary::summarizes`]).
    summarize: bool,
    /// Writes each chunk's profiles whole or as differences ([`crate::differences`]).
    differ: crate::differences::Differ,
    /// Reused for a profile written as differences.
    differences: Vec<u8>,
    min_time_ms: i64,
    max_time_ms: i64,
    stats: BlockStats,
    finished: bool,
}

impl BlockWriter {
    /// Starts a block in `data_dir` whose samples point into `tables`, with summaries if
    /// `summarize` ([`crate::summary::summarizes`] of its time range).
    pub fn new(data_dir: &Path, tables: Tables, summarize: bool) -> Result<BlockWriter, Error> {
        let name = new_ulid();
        let tmp = data_dir.join(format!("{name}.tmp"));
        fs::create_dir_all(&tmp).map_err(Error::io("cannot create block directory", &tmp))?;
        let profiles_path = tmp.join("profiles");
        let file = File::create(&profiles_path)
            .map_err(Error::io("cannot create block file", &profiles_path))?;
        let compressor = zstd::bulk::Compressor::new(ZSTD_LEVEL)
            .and_then(|mut c| {
                // A checksum in every frame: damage is caught when the chunk is read, too.
                c.set_parameter(zstd::zstd_safe::CParameter::ChecksumFlag(true))?;
                c.set_pledged_src_size(None)?;
                Ok(c)
            })
            .map_err(Error::io("cannot start zstd", &profiles_path))?;
        Ok(BlockWriter {
            name,
            data_dir: data_dir.to_owned(),
            tmp,
            tables,
            profiles_path,
            profiles: BufWriter::with_capacity(1 << 20, file),
            profiles_crc: crc32fast::Hasher::new(),
            profiles_len: 0,
            compressor,
            series: Vec::new(),
            frames: (0..=crate::SUMMARY_RESOLUTIONS_MS.len())
                .map(|_| OpenFrame::default())
                .collect(),
            sums: Default::default(),
            summarize,
            differ: Default::default(),
            differences: Vec::new(),
            min_time_ms: i64::MAX,
            max_time_ms: i64::MIN,
            stats: BlockStats::default(),
            finished: false,
        })
    }

    /// The tables the samples of added series must point into.
    pub fn tables_mut(&mut self) -> &mut Tables {
        &mut self.tables
    }

    fn write_profiles_bytes(&mut self, bytes: &[u8]) -> Result<(), Error> {
        self.profiles
            .write_all(bytes)
            .map_err(Error::io("cannot write block file", &self.profiles_path))?;
        self.profiles_crc.update(bytes);
        self.profiles_len += bytes.len() as u64;
        Ok(())
    }

    /// Compresses and writes frame `k` (of [`BlockWriter::frames`]), completing the chunks that
    /// lie in it.
    fn flush_frame(&mut self, k: usize) -> Result<(), Error> {
        let mut frame = std::mem::take(&mut self.frames[k]);
        if !frame.raw.is_empty() {
            let compressed = self.compressor.compress(&frame.raw).map_err(Error::io(
                "cannot compress block chunk",
                &self.profiles_path,
            ))?;
            let (offset, len, raw_len) = (
                self.profiles_len,
                compressed.len() as u64,
                frame.raw.len() as u64,
            );
            self.write_profiles_bytes(&compressed)?;
            if k > 0 {
                self.stats.summary_bytes += len;
            }
            for (s, list, c) in frame.pending.drain(..) {
                let series = &mut self.series[s];
                let chunk = match list {
                    ChunkList::Profiles => &mut series.chunks[c],
                    ChunkList::Level(l) => &mut series.levels[l].chunks[c],
                };
                chunk.offset = offset;
                chunk.len = len;
                chunk.raw_len = raw_len;
            }
            frame.raw.clear();
        }
        // The buffers are reused.
        self.frames[k] = frame;
        Ok(())
    }

    /// Adds a series; series must come in ascending label order, profiles in time order.
    /// Its summaries are computed from its profiles and written too.
    pub fn add_series(&mut self, series: ExtractedSeries) -> Result<(), Error> {
        assert!(
            self.series.last().is_none_or(|s| s.labels < series.labels),
            "block series must be added in ascending label order"
        );
        if series.profiles.is_empty() {
            return Ok(());
        }
        let inputs: Vec<(BlockProfile, &[u8])> = series
            .profiles
            .iter()
            .map(|p| (BlockProfile::from(p), &p.data[..]))
            .collect();
        for (p, _) in &inputs {
            self.min_time_ms = self.min_time_ms.min(p.timestamp_ms);
            self.max_time_ms = self.max_time_ms.max(p.timestamp_ms);
            self.stats.n_profiles += 1;
            self.stats.n_samples += u64::from(p.n_samples);
        }
        let limits = encoding::IdLimits::of(&self.tables);
        let levels = if self.summarize {
            crate::summary::summarize(&inputs, limits, &mut self.sums).map_err(|e| {
                Error::BlockCorrupt {
                    block: self.name.clone(),
                    file: "profiles",
                    what: format!("cannot summarize series {}: {e}", series.labels),
                }
            })?
        } else {
            Vec::new()
        };
        self.series.push(WrittenSeries {
            labels: series.labels,
            meta: series.meta,
            profiles: Vec::with_capacity(inputs.len()),
            chunks: Vec::new(),
            levels: levels
                .iter()
                .map(|l| WrittenLevel {
                    resolution_ms: l.resolution_ms,
                    profiles: Vec::with_capacity(l.windows.len()),
                    chunks: Vec::new(),
                })
                .collect(),
        });
        let s = self.series.len() - 1;
        self.append_chunks(s, ChunkList::Profiles, &inputs)?;
        for (l, level) in levels.iter().enumerate() {
            let windows: Vec<(BlockProfile, &[u8])> = level
                .windows
                .iter()
                .map(|(p, b)| (*p, b.as_slice()))
                .collect();
            self.append_chunks(s, ChunkList::Level(l), &windows)?;
        }
        Ok(())
    }

    /// Appends `profiles` to list `list` of series `s`: their bytes to the open frame of their
    /// kind, their headers, and chunks (a new one in each frame they reach).
    fn append_chunks(
        &mut self,
        s: usize,
        list: ChunkList,
        profiles: &[(BlockProfile, &[u8])],
    ) -> Result<(), Error> {
        let k = match list {
            ChunkList::Profiles => 0,
            ChunkList::Level(l) => {
                let r = self.series[s].levels[l].resolution_ms;
                1 + crate::SUMMARY_RESOLUTIONS_MS
                    .iter()
                    .position(|&x| x == r)
                    .expect("a level of a known resolution")
            }
        };
        let values = match list {
            ChunkList::Profiles => crate::differences::ValuesAs::DifferencesWhereShorter,
            ChunkList::Level(_) => crate::differences::ValuesAs::Whole,
        };
        let mut chunk_open = false;
        for (p, whole) in profiles {
            let frame = &mut self.frames[k];
            let series = &mut self.series[s];
            let (headers, chunks) = match list {
                ChunkList::Profiles => (&mut series.profiles, &mut series.chunks),
                ChunkList::Level(l) => {
                    let level = &mut series.levels[l];
                    (&mut level.profiles, &mut level.chunks)
                }
            };
            if !chunk_open {
                chunks.push(ChunkRef {
                    n_profiles: 0,
                    offset: 0,
                    len: 0,
                    raw_len: 0,
                    raw_offset: frame.raw.len() as u64,
                    lead: 0,
                });
                frame.pending.push((s, list, chunks.len() - 1));
                chunk_open = true;
                self.differ.start_chunk();
            }
            let bytes = self
                .differ
                .next(whole, values, &mut self.differences)
                .map_err(|e| Error::BlockCorrupt {
                    block: self.name.clone(),
                    file: "profiles",
                    what: format!("gets a profile that does not decode: {e}"),
                })?;
            frame.raw.extend_from_slice(bytes);
            headers.push(BlockProfile {
                len: bytes.len() as u32,
                ..*p
            });
            if k > 0 {
                self.stats.n_summary_samples += u64::from(p.n_samples);
            }
            chunks.last_mut().expect("opened above").n_profiles += 1;
            if frame.raw.len() >= FRAME_RAW_BYTES {
                self.flush_frame(k)?;
                chunk_open = false;
            }
        }
        Ok(())
    }

    /// Writes the index, symbols and meta, syncs everything and renames the block into place.
    /// `range` is the block's time range `[min, max)`; `None` takes it from the data.
    pub fn finish(
        self,
        range: Option<(i64, i64)>,
        compaction: Compaction,
        head_cut_ms: Option<i64>,
    ) -> Result<PathBuf, Error> {
        self.seal(range, compaction, head_cut_ms)?.publish()
    }

    /// Writes the index, symbols and meta and syncs every file and the directory, leaving the
    /// block complete under its temporary name; [`SealedBlock::publish`] renames it into place.
    /// A `compaction` without sources lists the block itself.
    pub fn seal(
        mut self,
        range: Option<(i64, i64)>,
        mut compaction: Compaction,
        head_cut_ms: Option<i64>,
    ) -> Result<SealedBlock, Error> {
        // profiles: the last frames, the footer, then sync.
        for k in 0..self.frames.len() {
            self.flush_frame(k)?;
        }
        let mut footer = Vec::with_capacity(8);
        footer.extend_from_slice(PROFILES_MAGIC);
        footer.extend_from_slice(&encoding::FORMAT_VERSION.to_le_bytes());
        self.write_profiles_bytes(&footer)?;
        let crc = std::mem::take(&mut self.profiles_crc).finalize();
        self.write_profiles_bytes(&crc.to_le_bytes())?;
        self.profiles
            .flush()
            .and_then(|()| self.profiles.get_ref().sync_all())
            .map_err(Error::io("cannot write block file", &self.profiles_path))?;

        // symbols: raw length, one zstd frame, footer.
        let mut raw = Vec::new();
        encoding::encode_block_tables(&self.tables, &mut raw);
        let symbols_path = self.tmp.join("symbols");
        let mut symbols = (raw.len() as u64).to_le_bytes().to_vec();
        let level = if raw.len() <= HIGH_LEVEL_BUDGET_BYTES {
            HIGH_LEVEL
        } else {
            ZSTD_LEVEL
        };
        symbols.extend_from_slice(
            &zstd::bulk::compress(&raw, level)
                .map_err(Error::io("cannot compress block symbols", &symbols_path))?,
        );
        encoding::seal(SYMBOLS_MAGIC, &mut symbols);
        write_synced(&symbols_path, &symbols)?;

        let index = build_index(&self.series);
        write_synced(&self.tmp.join("index"), &index)?;

        self.stats.n_series = self.series.len() as u64;
        self.stats.n_stacks = self.tables.n_stacks() as u64;
        let (min_time_ms, max_time_ms) =
            range.unwrap_or((self.min_time_ms, self.max_time_ms.saturating_add(1)));
        if compaction.sources.is_empty() {
            compaction.sources = vec![self.name.clone()];
        }
        let meta = BlockMeta {
            ulid: self.name.clone(),
            min_time_ms,
            max_time_ms,
            stats: self.stats,
            compaction,
            version: encoding::FORMAT_VERSION,
            head_cut_ms: Some(head_cut_ms),
            external_labels: BTreeMap::new(),
        };
        let mut meta_bytes = serde_json::to_vec_pretty(&meta).expect("meta serializes");
        meta_bytes.push(b'\n');
        encoding::seal(META_MAGIC, &mut meta_bytes);
        write_synced(&self.tmp.join("meta.json"), &meta_bytes)?;

        sync_dir(&self.tmp)?;
        // The sealed block owns the temporary directory from here on.
        self.finished = true;
        Ok(SealedBlock {
            meta,
            data_dir: std::mem::take(&mut self.data_dir),
            tmp: std::mem::take(&mut self.tmp),
            published: false,
        })
    }
}

/// A block written and synced under its temporary name (`<ulid>.tmp`), not yet served: nothing
/// reads it until [`SealedBlock::publish`] renames it into place. Dropped unpublished, it
/// removes its directory.
#[derive(Debug)]
pub(crate) struct SealedBlock {
    pub meta: BlockMeta,
    data_dir: PathBuf,
    tmp: PathBuf,
    published: bool,
}

impl SealedBlock {
    /// Renames the block into place (one atomic step: a reader of the data directory sees all
    /// of it or nothing) and syncs the data directory. Returns the block's directory.
    pub fn publish(mut self) -> Result<PathBuf, Error> {
        let dst = self.data_dir.join(&self.meta.ulid);
        fs::rename(&self.tmp, &dst).map_err(Error::io("cannot rename block into place", &dst))?;
        self.published = true;
        sync_dir(&self.data_dir)?;
        Ok(dst)
    }
}

impl Drop for SealedBlock {
    fn drop(&mut self) {
        if !self.published {
            let _ = fs::remove_dir_all(&self.tmp);
        }
    }
}

impl Drop for BlockWriter {
    fn drop(&mut self) {
        if !self.finished {
            let _ = fs::remove_dir_all(&self.tmp);
        }
    }
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let mut f = File::create(path).map_err(Error::io("cannot create block file", path))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .map_err(Error::io("cannot write block file", path))
}

pub(crate) fn sync_dir(dir: &Path) -> Result<(), Error> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(Error::io("cannot sync directory", dir))
}

/// The index file's bytes (see the module docs of the format).
fn build_index(series: &[WrittenSeries]) -> Vec<u8> {
    // Symbols: every label name and value and every meta string, sorted.
    let mut strings: Vec<&str> = Vec::new();
    for s in series {
        for l in s.labels.iter() {
            strings.push(&l.name);
            strings.push(&l.value);
        }
        let m = &s.meta;
        strings.extend([
            m.sample_type.kind.as_str(),
            m.sample_type.unit.as_str(),
            m.period_type.kind.as_str(),
            m.period_type.unit.as_str(),
        ]);
        strings.extend(m.comments.iter().map(String::as_str));
        strings.extend([m.drop_frames.as_str(), m.keep_frames.as_str()]);
    }
    strings.sort_unstable();
    strings.dedup();
    let sym = |s: &str| strings.binary_search(&s).expect("collected above") as u64;

    let mut out = Vec::new();
    let symbols_offset = out.len() as u64;
    put_uvarint(&mut out, strings.len() as u64);
    for s in &strings {
        put_uvarint(&mut out, s.len() as u64);
        out.extend_from_slice(s.as_bytes());
    }

    // Series entries, in pages of about INDEX_PAGE_RAW_BYTES, each one zstd frame.
    let mut postings: std::collections::BTreeMap<(u64, u64), RoaringBitmap> = Default::default();
    for (i, s) in series.iter().enumerate() {
        for l in s.labels.iter() {
            postings
                .entry((sym(&l.name), sym(&l.value)))
                .or_default()
                .insert(i as u32);
        }
    }
    let (series_offsets_offset, page_table_offset, n_pages) = write_paged(
        &mut out,
        series
            .iter()
            .map(|s| Some(|page: &mut Vec<u8>| encode_series_entry(s, &sym, page))),
    );
    let mut table = Vec::with_capacity(postings.len() * POSTINGS_ENTRY_BYTES);
    for ((n, v), bitmap) in &postings {
        let offset = out.len() as u64;
        bitmap
            .serialize_into(&mut out)
            .expect("writing to a Vec cannot fail");
        table.extend_from_slice(&(*n as u32).to_le_bytes());
        table.extend_from_slice(&(*v as u32).to_le_bytes());
        table.extend_from_slice(&offset.to_le_bytes());
        table.extend_from_slice(&((out.len() as u64 - offset) as u32).to_le_bytes());
    }
    let postings_table_offset = out.len() as u64;
    out.extend_from_slice(&table);
    // Summary entries (format 5), in pages of their own: a read of summaries decompresses no
    // series entry.
    let (summary_offsets_offset, summary_page_table_offset, n_summary_pages) = write_paged(
        &mut out,
        series.iter().map(|s| {
            (!s.levels.is_empty())
                .then_some(|page: &mut Vec<u8>| encode_summary_entry(s, &sym, page))
        }),
    );
    for v in [
        symbols_offset,
        series_offsets_offset,
        series.len() as u64,
        postings_table_offset,
        postings.len() as u64,
        page_table_offset,
        n_pages,
        summary_offsets_offset,
        summary_page_table_offset,
        n_summary_pages,
    ] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    encoding::seal(INDEX_MAGIC, &mut out);
    out
}

/// Appends entries (`None`: the series has none) in zstd pages of about
/// [`INDEX_PAGE_RAW_BYTES`], then their offsets (page and offset in the page, both `u32`; page
/// `u32::MAX` for none; no offsets at all when no series has an entry), then the page table
/// (offset, length, raw length). Returns where the
/// offsets and the page table start, and the number of pages.
fn write_paged<F: FnOnce(&mut Vec<u8>)>(
    out: &mut Vec<u8>,
    entries: impl Iterator<Item = Option<F>>,
) -> (u64, u64, u64) {
    let mut offsets: Vec<(u32, u32)> = Vec::new();
    let mut pages: Vec<(u64, u32, u32)> = Vec::new();
    let mut page = Vec::new();
    let close_page = |page: &mut Vec<u8>, out: &mut Vec<u8>, pages: &mut Vec<(u64, u32, u32)>| {
        let compressed =
            zstd::bulk::compress(page, ZSTD_LEVEL).expect("compressing into memory cannot fail");
        pages.push((out.len() as u64, compressed.len() as u32, page.len() as u32));
        out.extend_from_slice(&compressed);
        page.clear();
    };
    for entry in entries {
        let Some(encode) = entry else {
            offsets.push((NO_ENTRY, 0));
            continue;
        };
        if page.len() >= INDEX_PAGE_RAW_BYTES {
            close_page(&mut page, out, &mut pages);
        }
        offsets.push((pages.len() as u32, page.len() as u32));
        encode(&mut page);
    }
    if !page.is_empty() {
        close_page(&mut page, out, &mut pages);
    }
    let offsets_offset = out.len() as u64;
    // Without pages (no series has an entry), no offsets either.
    if pages.is_empty() {
        offsets.clear();
    }
    for (page, offset) in &offsets {
        out.extend_from_slice(&page.to_le_bytes());
        out.extend_from_slice(&offset.to_le_bytes());
    }
    let page_table_offset = out.len() as u64;
    for (offset, len, raw_len) in &pages {
        out.extend_from_slice(&offset.to_le_bytes());
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&raw_len.to_le_bytes());
    }
    (offsets_offset, page_table_offset, pages.len() as u64)
}

/// Appends a series entry (format 4) to `out`: labels and meta as symbol numbers, then the
/// profiles' columns and chunks ([`encode_profiles`]).
fn encode_series_entry(s: &WrittenSeries, sym: &dyn Fn(&str) -> u64, out: &mut Vec<u8>) {
    encode_labels_and_meta(s, sym, out);
    encode_profiles(&s.profiles, &s.chunks, out);
}

/// Appends a series' summary entry (format 5) to `out`: labels and meta as in its series entry
/// (a read of summaries reads no series entry), the first and last time of its profiles, then
/// per level its resolution, its windows' columns and chunks ([`encode_profiles`], the times
/// being the windows' ends) and two columns more, as differences: the profiles each window
/// sums, and the total of its latest profile.
fn encode_summary_entry(s: &WrittenSeries, sym: &dyn Fn(&str) -> u64, out: &mut Vec<u8>) {
    encode_labels_and_meta(s, sym, out);
    let first = s.profiles.first().map_or(0, |p| p.timestamp_ms);
    let last = s.profiles.last().map_or(0, |p| p.timestamp_ms);
    put_ivarint(out, first);
    put_uvarint(out, last.wrapping_sub(first) as u64);
    put_uvarint(out, s.levels.len() as u64);
    for level in &s.levels {
        put_uvarint(out, level.resolution_ms as u64);
        encode_profiles(&level.profiles, &level.chunks, out);
        put_deltas(out, &level.profiles, &|p| i64::from(p.merged));
        put_deltas(out, &level.profiles, &|p| p.latest_total);
    }
}

fn encode_labels_and_meta(s: &WrittenSeries, sym: &dyn Fn(&str) -> u64, out: &mut Vec<u8>) {
    put_uvarint(out, s.labels.len() as u64);
    for l in s.labels.iter() {
        put_uvarint(out, sym(&l.name));
        put_uvarint(out, sym(&l.value));
    }
    let m = &s.meta;
    for part in [
        &m.sample_type.kind,
        &m.sample_type.unit,
        &m.period_type.kind,
        &m.period_type.unit,
    ] {
        put_uvarint(out, sym(part));
    }
    put_uvarint(out, m.comments.len() as u64);
    for c in &m.comments {
        put_uvarint(out, sym(c));
    }
    put_uvarint(out, sym(&m.drop_frames));
    put_uvarint(out, sym(&m.keep_frames));
}

/// Appends profiles' columns, each value as its difference from the one before (times,
/// durations, periods, totals, sizes, capture ids), then their chunks.
fn encode_profiles(profiles: &[BlockProfile], chunks: &[ChunkRef], out: &mut Vec<u8>) {
    put_uvarint(out, profiles.len() as u64);
    let mut prev = 0i64;
    for (j, p) in profiles.iter().enumerate() {
        if j == 0 {
            put_ivarint(out, p.timestamp_ms);
        } else {
            put_uvarint(out, p.timestamp_ms.wrapping_sub(prev) as u64);
        }
        prev = p.timestamp_ms;
    }
    put_deltas(out, profiles, &|p| p.duration_nanos);
    put_deltas(out, profiles, &|p| p.period);
    // Totals in whole periods and the rest (format 6): a CPU profile's total is a multiple of
    // its period, and the counts of periods are small.
    put_deltas(out, profiles, &|p| p.total.div_euclid(total_divisor(p)));
    // The rests only where some is not 0 (a byte says which): reading totals of CPU series
    // then costs one column, as before.
    let rest = |p: &BlockProfile| p.total.rem_euclid(total_divisor(p));
    let has_rest = profiles.iter().any(|p| rest(p) != 0);
    out.push(u8::from(has_rest));
    if has_rest {
        put_deltas(out, profiles, &rest);
    }
    put_deltas(out, profiles, &|p| i64::from(p.n_samples));
    put_deltas(out, profiles, &|p| i64::from(p.len));
    put_deltas(out, profiles, &|p| p.capture_id as i64);
    put_uvarint(out, chunks.len() as u64);
    for c in chunks {
        put_uvarint(out, u64::from(c.n_profiles));
        put_uvarint(out, c.offset);
        put_uvarint(out, c.len);
        put_uvarint(out, c.raw_len);
        put_uvarint(out, c.raw_offset);
    }
}

/// What a profile's total is written as a multiple of (plus a rest): its period, or 1.
fn total_divisor(p: &BlockProfile) -> i64 {
    p.period.max(1)
}

/// Appends a column of `profiles`, each value as its difference from the one before.
fn put_deltas(out: &mut Vec<u8>, profiles: &[BlockProfile], column: &dyn Fn(&BlockProfile) -> i64) {
    let mut prev = 0i64;
    for p in profiles {
        let v = column(p);
        put_ivarint(out, v.wrapping_sub(prev));
        prev = v;
    }
}

// ---------------------------------------------------------------------------------------------
// Reading

/// A series as a block's index records it.
#[derive(Debug, Clone)]
pub(crate) struct SeriesEntry {
    pub labels: Labels,
    pub meta: Meta,
    pub profiles: Vec<BlockProfile>,
    pub chunks: Vec<ChunkRef>,
}

impl SeriesEntry {
    /// Whether a profile lies in `[min_ms, max_ms]`.
    pub fn has_profiles_in(&self, min_ms: i64, max_ms: i64) -> bool {
        let start = self.profiles.partition_point(|p| p.timestamp_ms < min_ms);
        self.profiles
            .get(start)
            .is_some_and(|p| p.timestamp_ms <= max_ms)
    }
}

/// A series' summaries as a block's index records them (format 5; see [`crate::summary`]).
#[derive(Debug, Clone)]
pub(crate) struct SummaryEntry {
    pub labels: Labels,
    pub meta: Meta,
    /// The time of the series' first and last profile in the block.
    pub first_ms: i64,
    pub last_ms: i64,
    /// Finest first.
    pub levels: Vec<SummaryLevel>,
}

/// One level of a series' summaries: per window, a profile (its time the window's end).
#[derive(Debug, Clone)]
pub(crate) struct SummaryLevel {
    pub resolution_ms: i64,
    pub profiles: Vec<BlockProfile>,
    pub chunks: Vec<ChunkRef>,
}

/// The chunks that hold `profiles[range]`, given the chunks of all of `profiles`: each chunk
/// that holds some of them, narrowed to them.
pub(crate) fn chunks_of(
    profiles: &[BlockProfile],
    chunks: &[ChunkRef],
    range: std::ops::Range<usize>,
) -> Vec<ChunkRef> {
    let mut out = Vec::new();
    let mut first = 0usize;
    for c in chunks {
        let end = first + c.n_profiles as usize;
        let (lo, hi) = (range.start.max(first), range.end.min(end));
        if lo < hi {
            let skipped: u64 = profiles[first..lo].iter().map(|p| u64::from(p.len)).sum();
            out.push(ChunkRef {
                n_profiles: (hi - lo) as u32,
                raw_offset: c.raw_offset + skipped,
                lead: c.lead + skipped,
                ..*c
            });
        }
        first = end;
    }
    out
}

/// A block's profile data: its `profiles` file mapped, or read by ranges from elsewhere.
#[derive(Debug)]
enum ProfileData {
    Mapped(MappedFile),
    Ranges(Arc<dyn crate::range_read::RangeRead>),
}

/// An open, verified block.
#[derive(Debug)]
pub(crate) struct Block {
    pub meta: BlockMeta,
    pub dir: PathBuf,
    /// Bytes of its files on disk.
    pub size_bytes: u64,
    index: MappedFile,
    symbols: MappedFile,
    profiles: ProfileData,
    /// Where each index string lies in `index`: (start, len).
    strings: Vec<(usize, usize)>,
    series_offsets_offset: usize,
    n_series: u32,
    /// Format 4: where each page of series entries lies in `index` (offset, len, raw_len).
    pages: Vec<(usize, usize, usize)>,
    /// Format 5: where the summary entries' offsets start (0 without), and their pages.
    summary_offsets_offset: usize,
    summary_pages: Vec<(usize, usize, usize)>,
    /// This opening's key in the [`PageCache`].
    cache_id: u64,
    /// Where the postings bitmaps start (the end of the series sections).
    postings_offset: usize,
    postings_table_offset: usize,
    n_postings: usize,
    tables: OnceLock<Result<Arc<Tables>, String>>,
}

impl Drop for Block {
    fn drop(&mut self) {
        if !self.pages.is_empty() || !self.summary_pages.is_empty() {
            PageCache::get().forget_block(self.cache_id);
        }
    }
}

impl Block {
    /// The block's name (directory name, a ULID).
    pub fn name(&self) -> &str {
        &self.meta.ulid
    }

    /// Opens the block in `dir`, verifying every file's footer and checksum and the index's
    /// structure. An error is `Error::BlockCorrupt` naming the block and file, or `Error::Io`.
    pub fn open(dir: &Path) -> Result<Block, Error> {
        Self::open_with(dir, None)
    }

    /// Opens the block in `dir`, its profile data from `profiles` when given (then only the
    /// `profiles` footer is checked here: its format and the length the index refers to; each
    /// chunk is checked as it is read).
    #[expect(
        clippy::too_many_lines,
        reason = "the checks of opening a block (meta, footers, checksums, index) in the order the files depend on each other"
    )]
    pub fn open_with(
        dir: &Path,
        profiles: Option<Arc<dyn crate::range_read::RangeRead>>,
    ) -> Result<Block, Error> {
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let corrupt = |file: &'static str, what: String| Error::BlockCorrupt {
            block: name.clone(),
            file,
            what,
        };
        let mut size_bytes = 0u64;
        let mut map = |file: &'static str| -> Result<MappedFile, Error> {
            let path = dir.join(file);
            let m = MappedFile::open(&path).map_err(|e| {
                if e.kind() == std::io::ErrorKind::NotFound {
                    corrupt(file, "is missing".into())
                } else {
                    Error::Io {
                        action: "cannot map block file",
                        path: path.clone(),
                        source: e,
                    }
                }
            })?;
            size_bytes += m.len() as u64;
            Ok(m)
        };
        let meta_file = map("meta.json")?;
        let index = map("index")?;
        let symbols = map("symbols")?;
        let profiles = match profiles {
            Some(ranges) => ProfileData::Ranges(ranges),
            None => ProfileData::Mapped(map("profiles")?),
        };

        let meta = parse_meta(&name, &meta_file)?;
        let index_len = encoding::unseal(INDEX_MAGIC, &index)
            .map_err(|w| corrupt("index", w))?
            .len();
        let symbols_body =
            encoding::unseal(SYMBOLS_MAGIC, &symbols).map_err(|w| corrupt("symbols", w))?;
        if symbols_body.len() < 8 {
            return Err(corrupt("symbols", "has no length header".into()));
        }
        let profiles_len = match &profiles {
            ProfileData::Mapped(bytes) => encoding::unseal(PROFILES_MAGIC, bytes)
                .map_err(|w| corrupt("profiles", w))?
                .len(),
            ProfileData::Ranges(ranges) => {
                let len = ranges.len();
                let footer = (len >= encoding::FOOTER_BYTES as u64)
                    .then(|| {
                        ranges.read(
                            len - encoding::FOOTER_BYTES as u64,
                            encoding::FOOTER_BYTES as u64,
                        )
                    })
                    .transpose()
                    .map_err(|e| Error::Io {
                        action: "cannot read the footer of",
                        path: PathBuf::from(ranges.describe()),
                        source: e,
                    })?;
                encoding::check_footer(PROFILES_MAGIC, footer.as_deref().unwrap_or(&[]))
                    .map_err(|w| corrupt("profiles", w))?;
                (len - encoding::FOOTER_BYTES as u64) as usize
            }
        };

        let mut block = Block {
            meta,
            dir: dir.to_owned(),
            size_bytes,
            index,
            symbols,
            profiles,
            strings: Vec::new(),
            series_offsets_offset: 0,
            n_series: 0,
            pages: Vec::new(),
            summary_offsets_offset: 0,
            summary_pages: Vec::new(),
            cache_id: {
                static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
                NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            },
            postings_offset: 0,
            postings_table_offset: 0,
            n_postings: 0,
            tables: OnceLock::new(),
        };
        block
            .parse_index(index_len, profiles_len)
            .map_err(|e| corrupt("index", e.to_string()))?;
        Ok(block)
    }

    fn index_body(&self) -> &[u8] {
        &self.index[..self.index.len() - encoding::FOOTER_BYTES]
    }

    /// Reads the table of contents and symbols, and walks every series and postings entry to
    /// check that all references point inside the files.
    /// Reads and checks the index: its table of contents, symbols, every series entry (against
    /// `profiles`' length and the block's time range and counts) and every postings entry.
    fn parse_index(&mut self, body_len: usize, profiles_len: usize) -> encoding::Result<()> {
        let toc = self.parse_toc(body_len)?;
        let symbols_end = if self.paged() {
            self.read_pages(body_len, &toc)?
        } else {
            toc.series_offsets_offset
        };
        self.read_symbols(body_len, toc.symbols_offset, symbols_end)?;
        self.series_offsets_offset = toc.series_offsets_offset;
        self.n_series = toc.n_series as u32;
        self.postings_offset = if self.paged() {
            toc.page_table_offset + PAGE_ENTRY_BYTES * toc.n_pages
        } else {
            toc.series_offsets_offset + 8 * toc.n_series
        };
        self.postings_table_offset = toc.postings_table_offset;
        self.n_postings = toc.n_postings;
        if self.summarized() {
            let summary_pages_end = toc.summary_offsets_offset;
            self.summary_pages = read_page_table(
                &self.index[..body_len],
                toc.summary_page_table_offset,
                toc.n_summary_pages,
            )?;
            let start = self
                .summary_pages
                .first()
                .map_or(summary_pages_end, |p| p.0);
            let end = self.summary_pages.last().map_or(start, |p| p.0 + p.1);
            if start != toc.postings_table_offset + toc.n_postings * POSTINGS_ENTRY_BYTES
                || end != summary_pages_end
            {
                return Reader::new(&[])
                    .fail("summary pages do not lie between the postings and their offsets");
            }
            self.summary_offsets_offset = toc.summary_offsets_offset;
        }
        self.check_series(body_len, profiles_len)?;
        self.check_summaries(profiles_len)?;
        self.check_postings(body_len)
    }

    /// Whether the index holds summary entries (format 5 on).
    fn summarized(&self) -> bool {
        self.meta.version >= 5
    }

    /// Whether any series of the block has summaries.
    pub fn has_summaries(&self) -> bool {
        !self.summary_pages.is_empty()
    }

    /// Whether the index keeps its series entries in compressed pages (format 4 on).
    fn paged(&self) -> bool {
        self.meta.version >= 4
    }

    /// The index's table of contents, its offsets checked to leave neither gaps nor overlaps.
    fn parse_toc(&self, body_len: usize) -> encoding::Result<Toc> {
        let body = &self.index[..body_len];
        let toc_bytes = if self.summarized() {
            TOC_BYTES
        } else if self.paged() {
            TOC_BYTES_V4
        } else {
            TOC_BYTES_V3
        };
        let mut toc = Reader::new(
            body.get(body_len.saturating_sub(toc_bytes)..)
                .unwrap_or(&[]),
        );
        if body_len < toc_bytes {
            return toc.fail("index is shorter than its table of contents");
        }
        let toc_start = body_len - toc_bytes;
        let mut field = |what: &str, limit: usize| -> encoding::Result<usize> {
            let v = toc.u64_le()?;
            if v > limit as u64 {
                return toc.fail(format!("{what} {v} is beyond {limit}"));
            }
            Ok(v as usize)
        };
        let symbols_offset = field("symbols offset", toc_start)?;
        let series_offsets_offset = field("series offsets offset", toc_start)?;
        let n_series = field("series count", (toc_start - series_offsets_offset) / 8)?;
        let postings_table_offset = field("postings table offset", toc_start)?;
        let n_postings = field(
            "postings count",
            toc_start.saturating_sub(postings_table_offset) / POSTINGS_ENTRY_BYTES,
        )?;
        let (page_table_offset, n_pages) = if self.paged() {
            let offset = field("page table offset", toc_start)?;
            let n = field(
                "page count",
                toc_start.saturating_sub(offset) / PAGE_ENTRY_BYTES,
            )?;
            (offset, n)
        } else {
            (series_offsets_offset + 8 * n_series, 0)
        };
        let (summary_offsets_offset, summary_page_table_offset, n_summary_pages) =
            if self.summarized() {
                let offsets = field("summary offsets offset", toc_start)?;
                let table = field("summary page table offset", toc_start)?;
                let n = field(
                    "summary page count",
                    toc_start.saturating_sub(table) / PAGE_ENTRY_BYTES,
                )?;
                (offsets, table, n)
            } else {
                (0, toc_start, 0)
            };
        // Summary offsets are written only when some series has summaries.
        let n_summary_offsets = if n_summary_pages == 0 { 0 } else { n_series };
        let postings_end = postings_table_offset + n_postings * POSTINGS_ENTRY_BYTES;
        if series_offsets_offset + 8 * n_series != page_table_offset
            || page_table_offset + PAGE_ENTRY_BYTES * n_pages > postings_table_offset
            || (!self.summarized() && postings_end != toc_start)
            || (self.summarized()
                && (summary_offsets_offset < postings_end
                    || summary_offsets_offset + 8 * n_summary_offsets != summary_page_table_offset
                    || summary_page_table_offset + PAGE_ENTRY_BYTES * n_summary_pages != toc_start))
        {
            return Reader::new(body).fail("index sections overlap or leave gaps");
        }
        Ok(Toc {
            symbols_offset,
            series_offsets_offset,
            n_series,
            postings_table_offset,
            n_postings,
            page_table_offset,
            n_pages,
            summary_offsets_offset,
            summary_page_table_offset,
            n_summary_pages,
        })
    }

    /// Reads the page table (format 4), checking that the pages lie back to back just before
    /// the series offsets; returns where the first page starts (the end of the symbols).
    fn read_pages(&mut self, body_len: usize, toc: &Toc) -> encoding::Result<usize> {
        let pages = read_page_table(&self.index[..body_len], toc.page_table_offset, toc.n_pages)?;
        let r = Reader::new(&[]);
        let start = pages.first().map_or(toc.series_offsets_offset, |p| p.0);
        let end = pages.last().map_or(start, |p| p.0 + p.1);
        if start < toc.symbols_offset || end != toc.series_offsets_offset {
            return r.fail("index pages do not end where the series offsets start");
        }
        self.pages = pages;
        Ok(start)
    }

    /// Page `k` of the series entries (or of the summary entries), decompressed (from the
    /// [`PageCache`] when read lately).
    fn page(&self, k: u32, summary: bool) -> encoding::Result<Arc<Vec<u8>>> {
        let key = if summary { k | SUMMARY_PAGE_BIT } else { k };
        if let Some(page) = PageCache::get().lookup((self.cache_id, key)) {
            return Ok(page);
        }
        let pages = if summary {
            &self.summary_pages
        } else {
            &self.pages
        };
        let Some(&(offset, len, raw_len)) = pages.get(k as usize) else {
            return Reader::new(&[]).fail(format!("index page {k} does not exist"));
        };
        let raw =
            zstd::bulk::decompress(&self.index[offset..offset + len], raw_len).or_else(|e| {
                Reader::new(&[]).fail(format!("index page {k} does not decompress: {e}"))
            })?;
        if raw.len() != raw_len {
            return Reader::new(&[]).fail(format!(
                "index page {k} holds {} bytes, the page table says {raw_len}",
                raw.len()
            ));
        }
        let raw = Arc::new(raw);
        PageCache::get().insert((self.cache_id, key), raw.clone());
        Ok(raw)
    }

    /// The symbol table's strings (sorted and distinct), as places in the index.
    fn read_symbols(
        &mut self,
        body_len: usize,
        symbols_offset: usize,
        symbols_end: usize,
    ) -> encoding::Result<()> {
        let body = &self.index[..body_len];
        let mut r = Reader::new(&body[..symbols_end]);
        r.take(symbols_offset)?;
        let n_strings = r.count(1, "symbol")?;
        let mut strings = Vec::with_capacity(n_strings);
        let mut prev: Option<&str> = None;
        for _ in 0..n_strings {
            let s = r.str()?;
            if prev.is_some_and(|p| p >= s) {
                return r.fail("index symbols are not sorted and distinct");
            }
            prev = Some(s);
            strings.push((r.pos() - s.len(), s.len()));
        }
        self.strings = strings;
        Ok(())
    }

    /// Checks every series entry: label order, chunks within `profiles` and agreeing with the
    /// profiles' sizes, profiles within the block's time range, and the counts of `meta.json`.
    fn check_series(&self, body_len: usize, profiles_len: usize) -> encoding::Result<()> {
        let body = &self.index[..body_len];
        let mut prev_labels: Option<Labels> = None;
        let mut stats = BlockStats {
            n_series: u64::from(self.n_series),
            ..BlockStats::default()
        };
        for i in 0..self.n_series {
            let entry = self.series_entry(i)?;
            if prev_labels.as_ref().is_some_and(|p| *p >= entry.labels) {
                return Reader::new(body).fail(format!("series {i} is out of label order"));
            }
            self.check_chunks(i, &entry.profiles, &entry.chunks, profiles_len)?;
            if entry
                .profiles
                .first()
                .is_some_and(|p| p.timestamp_ms < self.meta.min_time_ms)
                || entry
                    .profiles
                    .last()
                    .is_some_and(|p| p.timestamp_ms >= self.meta.max_time_ms)
            {
                return Reader::new(body).fail(format!(
                    "series {i} has profiles outside the block's time range"
                ));
            }
            stats.n_profiles += entry.profiles.len() as u64;
            stats.n_samples += entry
                .profiles
                .iter()
                .map(|p| u64::from(p.n_samples))
                .sum::<u64>();
            prev_labels = Some(entry.labels);
        }
        if (stats.n_series, stats.n_profiles, stats.n_samples)
            != (
                self.meta.stats.n_series,
                self.meta.stats.n_profiles,
                self.meta.stats.n_samples,
            )
        {
            return Reader::new(body).fail("index and meta.json disagree on counts");
        }
        Ok(())
    }

    /// Checks that `chunks` lie within `profiles` (the file, `profiles_len` bytes) and agree
    /// with the sizes of `profiles` (the headers), covering them all.
    fn check_chunks(
        &self,
        i: u32,
        profiles: &[BlockProfile],
        chunks: &[ChunkRef],
        profiles_len: usize,
    ) -> encoding::Result<()> {
        let body = &self.index[..];
        let mut profile = 0usize;
        for c in chunks {
            let end = c.offset.checked_add(c.len);
            if end.is_none_or(|e| e > profiles_len as u64) || c.raw_len > MAX_RAW_BYTES {
                return Reader::new(body)
                    .fail(format!("series {i} has a chunk outside `profiles`"));
            }
            let raw: u64 = profiles
                .get(profile..profile + c.n_profiles as usize)
                .map(|ps| ps.iter().map(|p| u64::from(p.len)).sum())
                .unwrap_or(u64::MAX);
            // Before format 4 a frame held one chunk; from it, chunks share frames.
            let fits = if self.paged() {
                c.raw_offset
                    .checked_add(raw)
                    .is_some_and(|end| end <= c.raw_len)
            } else {
                raw == c.raw_len
            };
            if !fits {
                return Reader::new(body).fail(format!("series {i}: chunk sizes disagree"));
            }
            profile += c.n_profiles as usize;
        }
        if profile != profiles.len() {
            return Reader::new(body).fail(format!("series {i}: chunks do not cover its profiles"));
        }
        Ok(())
    }

    /// Checks every postings entry: known symbols, sorted keys, its bitmap within the postings
    /// section, readable, and naming only known series.
    fn check_postings(&self, body_len: usize) -> encoding::Result<()> {
        let body = &self.index[..body_len];
        let series_end = self.postings_offset;
        let mut prev_key = None;
        for k in 0..self.n_postings {
            let (name, value, offset, len) = self.postings_entry(k);
            if name as usize >= self.strings.len() || value as usize >= self.strings.len() {
                return Reader::new(body)
                    .fail(format!("postings entry {k} names an unknown symbol"));
            }
            if prev_key.is_some_and(|p| p >= (name, value)) {
                return Reader::new(body).fail("postings entries are not sorted");
            }
            prev_key = Some((name, value));
            if offset < series_end || offset + len > self.postings_table_offset {
                return Reader::new(body)
                    .fail(format!("postings entry {k} points outside the postings"));
            }
            let bitmap = RoaringBitmap::deserialize_from(&body[offset..offset + len])
                .or_else(|e| Reader::new(body).fail(format!("postings entry {k}: {e}")))?;
            if bitmap.max().is_some_and(|m| m >= self.n_series) {
                return Reader::new(body)
                    .fail(format!("postings entry {k} names an unknown series"));
            }
        }
        Ok(())
    }

    fn string(&self, id: u64) -> encoding::Result<&str> {
        let Some(&(start, len)) = self.strings.get(id as usize) else {
            return Reader::new(&[]).fail(format!("symbol {id} is out of range"));
        };
        std::str::from_utf8(&self.index[start..start + len])
            .or_else(|_| Reader::new(&[]).fail("symbol is not UTF-8"))
    }

    fn find_string(&self, s: &str) -> Option<u32> {
        self.strings
            .binary_search_by(|&(start, len)| self.index[start..start + len].cmp(s.as_bytes()))
            .ok()
            .map(|i| i as u32)
    }

    fn postings_entry(&self, k: usize) -> (u32, u32, usize, usize) {
        let at = self.postings_table_offset + k * POSTINGS_ENTRY_BYTES;
        let b = &self.index[at..at + POSTINGS_ENTRY_BYTES];
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut offset = [0u8; 8];
        offset.copy_from_slice(&b[8..16]);
        (
            u32_at(0),
            u32_at(4),
            u64::from_le_bytes(offset) as usize,
            u32_at(16) as usize,
        )
    }

    /// The postings bitmap of entry `k` (checked when the block was opened).
    fn bitmap(&self, k: usize) -> RoaringBitmap {
        let (_, _, offset, len) = self.postings_entry(k);
        RoaringBitmap::deserialize_from(&self.index_body()[offset..offset + len]).unwrap_or_else(
            |e| {
                tracing::error!(block = self.name(), entry = k, error = %e, "unreadable postings");
                RoaringBitmap::new()
            },
        )
    }

    /// The range of postings entries of label name `name`.
    fn postings_of_name(&self, name: u32) -> std::ops::Range<usize> {
        let start = partition(self.n_postings, |k| self.postings_entry(k).0 < name);
        let end = partition(self.n_postings, |k| self.postings_entry(k).0 <= name);
        start..end
    }

    /// Number of series.
    pub fn n_series(&self) -> u32 {
        self.n_series
    }

    /// Reads series `i` from the index.
    pub fn series_entry(&self, i: u32) -> encoding::Result<SeriesEntry> {
        let at = self.series_offsets_offset + 8 * i as usize;
        let mut off = Reader::new(self.index.get(at..at + 8).unwrap_or(&[]));
        if self.paged() {
            let page = off.u32_le()?;
            let offset = off.u32_le()? as usize;
            let bytes = self.page(page, false)?;
            if offset > bytes.len() {
                return off.fail(format!("series {i} offset {offset} is outside its page"));
            }
            let mut r = Reader::new(&bytes);
            r.take(offset)?;
            return self.decode_series_entry(&mut r);
        }
        let offset = off.u64_le()? as usize;
        let body = &self.index_body()[..self.series_offsets_offset];
        if offset > body.len() {
            return off.fail(format!("series {i} offset {offset} is outside the index"));
        }
        let mut r = Reader::new(body);
        r.take(offset)?;
        self.decode_series_entry(&mut r)
    }

    /// Decodes the series entry `r` is at.
    fn decode_series_entry(&self, r: &mut Reader<'_>) -> encoding::Result<SeriesEntry> {
        let (labels, meta) = self.decode_labels_and_meta(r)?;
        let (profiles, chunks) = self.decode_profiles(r)?;
        Ok(SeriesEntry {
            labels,
            meta,
            profiles,
            chunks,
        })
    }

    /// Decodes the labels and meta at the start of a series or summary entry.
    fn decode_labels_and_meta(&self, r: &mut Reader<'_>) -> encoding::Result<(Labels, Meta)> {
        let n_labels = r.count(2, "label")?;
        let mut pairs = Vec::with_capacity(n_labels);
        for _ in 0..n_labels {
            let name = self.string(r.uvarint()?)?;
            let value = self.string(r.uvarint()?)?;
            pairs.push((name, value));
        }
        let labels = Labels::new(pairs).or_else(|e| r.fail(e.to_string()))?;
        if labels.len() != n_labels {
            return r.fail("series has an empty label value");
        }
        let mut meta_part =
            || -> encoding::Result<String> { Ok(self.string(r.uvarint()?)?.to_owned()) };
        let sample_type = ValueType {
            kind: meta_part()?,
            unit: meta_part()?,
        };
        let period_type = ValueType {
            kind: meta_part()?,
            unit: meta_part()?,
        };
        let n_comments = r.count(1, "comment")?;
        let comments = (0..n_comments)
            .map(|_| Ok(self.string(r.uvarint()?)?.to_owned()))
            .collect::<encoding::Result<Vec<_>>>()?;
        // Version 1 blocks did not keep them.
        let (drop_frames, keep_frames) = if self.meta.version >= 2 {
            (
                self.string(r.uvarint()?)?.to_owned(),
                self.string(r.uvarint()?)?.to_owned(),
            )
        } else {
            (String::new(), String::new())
        };
        let meta = Meta {
            sample_type,
            period_type,
            period: 0,
            time_nanos: 0,
            duration_nanos: 0,
            capture_id: 0,
            comments,
            drop_frames,
            keep_frames,
        };
        Ok((labels, meta))
    }

    /// Decodes the profiles' columns and chunks of a series or summary entry.
    #[expect(
        clippy::too_many_lines,
        reason = "reads the index's per-profile columns in the order each format version writes them"
    )]
    fn decode_profiles(
        &self,
        r: &mut Reader<'_>,
    ) -> encoding::Result<(Vec<BlockProfile>, Vec<ChunkRef>)> {
        let n = r.count(6, "profile")?;
        let mut profiles = vec![
            BlockProfile {
                merged: 1,
                ..BlockProfile::default()
            };
            n
        ];
        let mut t = 0i64;
        for (j, p) in profiles.iter_mut().enumerate() {
            if j == 0 {
                t = r.ivarint()?;
            } else {
                let delta = r.uvarint()?;
                match i64::try_from(delta)
                    .ok()
                    .filter(|&d| d > 0)
                    .and_then(|d| t.checked_add(d))
                {
                    Some(next) => t = next,
                    None => return r.fail("timestamps are not increasing"),
                }
            }
            p.timestamp_ms = t;
        }
        if self.paged() {
            // Differences from the profile before.
            read_deltas(r, &mut profiles, |p, v| p.duration_nanos = v)?;
            read_deltas(r, &mut profiles, |p, v| p.period = v)?;
            read_deltas(r, &mut profiles, |p, v| p.total = v)?;
            if self.meta.version >= 6 {
                // Whole periods, then the rests if any (kept in `latest_total` meanwhile).
                match r.u8()? {
                    0 => {}
                    1 => read_deltas(r, &mut profiles, |p, rest| p.latest_total = rest)?,
                    other => return r.fail(format!("bad rest flag {other}")),
                }
                for p in profiles.iter_mut() {
                    match p
                        .total
                        .checked_mul(total_divisor(p))
                        .and_then(|t| t.checked_add(p.latest_total))
                    {
                        Some(t) => p.total = t,
                        None => return r.fail("a profile's total is out of range"),
                    }
                }
            }
            for p in profiles.iter_mut() {
                p.latest_total = p.total;
            }
            let mut out_of_range = false;
            read_deltas(r, &mut profiles, |p, v| match u32::try_from(v) {
                Ok(v) => p.n_samples = v,
                Err(_) => out_of_range = true,
            })?;
            read_deltas(r, &mut profiles, |p, v| match u32::try_from(v) {
                Ok(v) => p.len = v,
                Err(_) => out_of_range = true,
            })?;
            if out_of_range {
                return r.fail("a sample count or profile length is out of range");
            }
            read_deltas(r, &mut profiles, |p, v| p.capture_id = v as u64)?;
        } else {
            for p in profiles.iter_mut() {
                p.duration_nanos = r.ivarint()?;
            }
            for p in profiles.iter_mut() {
                p.period = r.ivarint()?;
            }
            for p in profiles.iter_mut() {
                p.total = r.ivarint()?;
                p.latest_total = p.total;
            }
            for p in profiles.iter_mut() {
                p.n_samples = r.below(u64::from(u32::MAX), "sample count")? as u32;
            }
            for p in profiles.iter_mut() {
                p.len = r.below(u64::from(u32::MAX), "profile length")? as u32;
            }
        }
        if self.meta.version == 2 || self.meta.version == 3 {
            let mut capture = 0u64;
            for p in profiles.iter_mut() {
                capture = capture.wrapping_add(r.ivarint()? as u64);
                p.capture_id = capture;
            }
        }
        let n_chunks = r.count(4, "chunk")?;
        let mut chunks = Vec::with_capacity(n_chunks);
        for _ in 0..n_chunks {
            chunks.push(ChunkRef {
                n_profiles: r.below(u64::from(u32::MAX), "chunk profile count")? as u32,
                offset: r.uvarint()?,
                len: r.uvarint()?,
                raw_len: r.uvarint()?,
                raw_offset: if self.paged() { r.uvarint()? } else { 0 },
                lead: 0,
            });
        }
        Ok((profiles, chunks))
    }

    /// Reads the summary entry of series `i` (format 5), if it has one.
    pub fn summary_entry(&self, i: u32) -> encoding::Result<Option<SummaryEntry>> {
        if !self.has_summaries() {
            return Ok(None);
        }
        let at = self.summary_offsets_offset + 8 * i as usize;
        let mut off = Reader::new(self.index.get(at..at + 8).unwrap_or(&[]));
        let page = off.u32_le()?;
        let offset = off.u32_le()? as usize;
        if page == NO_ENTRY {
            return Ok(None);
        }
        let bytes = self.page(page, true)?;
        if offset > bytes.len() {
            return off.fail(format!("summary {i} offset {offset} is outside its page"));
        }
        let mut r = Reader::new(&bytes);
        r.take(offset)?;
        let (labels, meta) = self.decode_labels_and_meta(&mut r)?;
        let first_ms = r.ivarint()?;
        let last_ms = first_ms.wrapping_add(r.uvarint()? as i64);
        let n_levels = r.count(2, "summary level")?;
        let mut levels = Vec::with_capacity(n_levels);
        for _ in 0..n_levels {
            let resolution_ms = r.uvarint()? as i64;
            if resolution_ms <= 0 {
                return r.fail(format!(
                    "summary resolution {resolution_ms} is not positive"
                ));
            }
            let (mut profiles, chunks) = self.decode_profiles(&mut r)?;
            let mut out_of_range = false;
            read_deltas(&mut r, &mut profiles, |p, v| match u32::try_from(v) {
                Ok(v) => p.merged = v,
                Err(_) => out_of_range = true,
            })?;
            if out_of_range {
                return r.fail("a summary's profile count is out of range");
            }
            read_deltas(&mut r, &mut profiles, |p, v| p.latest_total = v)?;
            levels.push(SummaryLevel {
                resolution_ms,
                profiles,
                chunks,
            });
        }
        Ok(Some(SummaryEntry {
            labels,
            meta,
            first_ms,
            last_ms,
            levels,
        }))
    }

    /// Checks every summary entry: labels those of its series, chunks within `profiles` and
    /// agreeing with the windows' sizes.
    fn check_summaries(&self, profiles_len: usize) -> encoding::Result<()> {
        for i in 0..self.n_series {
            let Some(summary) = self.summary_entry(i)? else {
                continue;
            };
            let entry = self.series_entry(i)?;
            if summary.labels != entry.labels
                || entry.profiles.first().map(|p| p.timestamp_ms) != Some(summary.first_ms)
                || entry.profiles.last().map(|p| p.timestamp_ms) != Some(summary.last_ms)
            {
                return Reader::new(&[]).fail(format!("summary {i} disagrees with its series"));
            }
            for level in &summary.levels {
                self.check_chunks(i, &level.profiles, &level.chunks, profiles_len)?;
            }
        }
        Ok(())
    }

    /// Decompresses the frame of `profiles` that `chunk` lies in into `out`.
    fn read_frame(
        &self,
        chunk: &ChunkRef,
        decompressor: &mut zstd::bulk::Decompressor<'_>,
        out: &mut Vec<u8>,
    ) -> Result<(), Error> {
        let corrupt = |what: String| Error::BlockCorrupt {
            block: self.name().to_owned(),
            file: "profiles",
            what,
        };
        let start = chunk.offset as usize;
        let fetched;
        let src = match &self.profiles {
            ProfileData::Mapped(bytes) => bytes
                .get(start..start.saturating_add(chunk.len as usize))
                .ok_or_else(|| corrupt(format!("chunk at byte {start} runs past the end")))?,
            ProfileData::Ranges(ranges) => {
                fetched = ranges
                    .read(chunk.offset, chunk.len)
                    .map_err(|e| Error::Io {
                        action: "cannot read a chunk of",
                        path: PathBuf::from(ranges.describe()),
                        source: e,
                    })?;
                if fetched.len() != chunk.len as usize {
                    return Err(corrupt(format!(
                        "chunk at byte {start} came back with {} of its {} bytes",
                        fetched.len(),
                        chunk.len
                    )));
                }
                &fetched[..]
            }
        };
        out.clear();
        out.reserve(chunk.raw_len as usize);
        decompressor
            .decompress_to_buffer(src, out)
            .map_err(|e| corrupt(format!("chunk at byte {start} does not decompress: {e}")))?;
        if out.len() as u64 != chunk.raw_len {
            return Err(corrupt(format!(
                "chunk at byte {start} holds {} bytes, the index says {}",
                out.len(),
                chunk.raw_len
            )));
        }
        Ok(())
    }

    /// The block's interned symbols and stacks, read on first use and kept.
    pub fn tables(&self) -> Result<Arc<Tables>, Error> {
        self.tables
            .get_or_init(|| {
                let body = &self.symbols[..self.symbols.len() - encoding::FOOTER_BYTES];
                let mut len = [0u8; 8];
                len.copy_from_slice(&body[..8]);
                let raw_len = u64::from_le_bytes(len);
                if raw_len > MAX_RAW_BYTES {
                    return Err(format!("raw length {raw_len} is beyond the limit"));
                }
                let raw = zstd::bulk::decompress(&body[8..], raw_len as usize)
                    .map_err(|e| format!("does not decompress: {e}"))?;
                if raw.len() as u64 != raw_len {
                    return Err(format!(
                        "holds {} bytes, its header says {raw_len}",
                        raw.len()
                    ));
                }
                let mut tables = Tables::new();
                let mut r = Reader::new(&raw);
                if self.meta.version >= 4 {
                    encoding::decode_block_tables(&mut r, &mut tables, self.meta.version)
                } else {
                    encoding::decode_tables(&mut r, &mut tables)
                }
                .map_err(|e| e.to_string())?;
                if !r.is_empty() {
                    return Err(format!("has {} bytes after its tables", r.remaining()));
                }
                Ok(Arc::new(tables))
            })
            .clone()
            .map_err(|what| Error::BlockCorrupt {
                block: self.name().to_owned(),
                file: "symbols",
                what,
            })
    }

    /// The error of a damaged index: names the block and the file.
    pub(crate) fn index_corrupt(&self, e: encoding::DecodeError) -> Error {
        Error::BlockCorrupt {
            block: self.name().to_owned(),
            file: "index",
            what: e.to_string(),
        }
    }

    /// Label names of the series in `within`.
    pub fn label_names(
        &self,
        within: &RoaringBitmap,
        out: &mut std::collections::BTreeSet<String>,
    ) -> Result<(), Error> {
        let mut k = 0;
        while k < self.n_postings {
            let name = self.postings_entry(k).0;
            let range = self.postings_of_name(name);
            if range.clone().any(|j| !self.bitmap(j).is_disjoint(within)) {
                let s = self
                    .string(u64::from(name))
                    .map_err(|e| self.index_corrupt(e))?;
                out.insert(s.to_owned());
            }
            k = range.end.max(k + 1);
        }
        Ok(())
    }

    /// Values of label `name` among the series in `within`.
    pub fn label_values(
        &self,
        name: &str,
        within: &RoaringBitmap,
        out: &mut std::collections::BTreeSet<String>,
    ) -> Result<(), Error> {
        let Some(name) = self.find_string(name) else {
            return Ok(());
        };
        for k in self.postings_of_name(name) {
            if !self.bitmap(k).is_disjoint(within) {
                let s = self
                    .string(u64::from(self.postings_entry(k).1))
                    .map_err(|e| self.index_corrupt(e))?;
                out.insert(s.to_owned());
            }
        }
        Ok(())
    }
}

/// Reads a page table (`n` entries at `at` of `body`), checking that the pages lie back to back.
fn read_page_table(
    body: &[u8],
    at: usize,
    n: usize,
) -> encoding::Result<Vec<(usize, usize, usize)>> {
    let mut r = Reader::new(body.get(at..at + PAGE_ENTRY_BYTES * n).unwrap_or(&[]));
    let mut pages: Vec<(usize, usize, usize)> = Vec::with_capacity(n);
    for _ in 0..n {
        let offset = r.u64_le()? as usize;
        let len = r.u32_le()? as usize;
        let raw_len = r.u32_le()? as usize;
        if pages.last().is_some_and(|&(o, l, _)| o + l != offset) {
            return r.fail("index pages are not back to back");
        }
        pages.push((offset, len, raw_len));
    }
    Ok(pages)
}

/// Reads a column of differences (format 4), one per profile, setting each sum with `set`.
fn read_deltas(
    r: &mut Reader<'_>,
    profiles: &mut [BlockProfile],
    mut set: impl FnMut(&mut BlockProfile, i64),
) -> encoding::Result<()> {
    let mut v = 0i64;
    for p in profiles.iter_mut() {
        v = v.wrapping_add(r.ivarint()?);
        set(p, v);
    }
    Ok(())
}

/// The first `k` in `0..n` for which `before(k)` is false (`before` must be monotone).
fn partition(n: usize, before: impl Fn(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if before(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

impl PostingsIndex for Block {
    fn all_series(&self) -> RoaringBitmap {
        let mut all = RoaringBitmap::new();
        all.insert_range(0..self.n_series);
        all
    }

    fn postings(&self, name: &str, value: &str) -> RoaringBitmap {
        let (Some(n), Some(v)) = (self.find_string(name), self.find_string(value)) else {
            return RoaringBitmap::new();
        };
        let k = partition(self.n_postings, |k| {
            let e = self.postings_entry(k);
            (e.0, e.1) < (n, v)
        });
        if k < self.n_postings && self.postings_entry(k).0 == n && self.postings_entry(k).1 == v {
            self.bitmap(k)
        } else {
            RoaringBitmap::new()
        }
    }

    fn values_of(&self, name: &str, keep: &dyn Fn(&str) -> bool) -> Option<Vec<RoaringBitmap>> {
        let name = self.find_string(name)?;
        let range = self.postings_of_name(name);
        if range.is_empty() {
            return None;
        }
        Some(
            range
                .filter(|&k| {
                    self.string(u64::from(self.postings_entry(k).1))
                        .is_ok_and(keep)
                })
                .map(|k| self.bitmap(k))
                .collect(),
        )
    }
}

/// Writes `series` (already in `tables`' ids) as a block of level 1 in `data_dir` and opens it.
pub(crate) fn write_block(
    data_dir: &Path,
    tables: Tables,
    series: Vec<ExtractedSeries>,
    range: (i64, i64),
) -> Result<Block, Error> {
    let summarize = crate::summary::summarizes(range);
    let mut writer = BlockWriter::new(data_dir, tables, summarize)?;
    for s in series {
        writer.add_series(s)?;
    }
    let compaction = Compaction {
        level: 1,
        sources: Vec::new(),
    };
    let dir = writer.finish(Some(range), compaction, Some(range.1))?;
    Block::open(&dir)
}

/// Reads chunks of blocks' `profiles` for one query, keeping the decompressed frames it read
/// last: four per block it reads (at least [`CACHED_FRAMES`]), the least recently used dropped.
/// The series of a block share frames (format 4) and are read one after another, each series
/// in every block before the next series (so each block's current frames must stay), and a read
/// of summaries reads a block's frames of summaries and of stored profiles in turns.
pub(crate) struct ChunkReader {
    decompressor: zstd::bulk::Decompressor<'static>,
    /// (block cache id, frame offset, raw bytes), the most recently used last.
    frames: Vec<(u64, u64, Vec<u8>)>,
    capacity: usize,
}

impl ChunkReader {
    /// A reader of `n_blocks` blocks; `dir` names the store in the error of a zstd that does
    /// not start.
    pub fn new(dir: &Path, n_blocks: usize) -> Result<ChunkReader, Error> {
        Ok(ChunkReader {
            decompressor: zstd::bulk::Decompressor::new()
                .map_err(Error::io("cannot start zstd to read blocks in", dir))?,
            frames: Vec::new(),
            capacity: (CACHED_FRAMES_PER_BLOCK * n_blocks).max(CACHED_FRAMES),
        })
    }

    /// The raw bytes of `chunk` of `block` (from its lead) and those after it in its frame: its
    /// profiles, one after another ([`split_chunk`]).
    pub fn read(&mut self, block: &Block, chunk: &ChunkRef) -> Result<&[u8], Error> {
        let key = (block.cache_id, chunk.offset);
        match self.frames.iter().rposition(|(b, o, _)| (*b, *o) == key) {
            Some(i) => {
                let hit = self.frames.remove(i);
                self.frames.push(hit);
            }
            None => {
                let mut raw = if self.frames.len() >= self.capacity {
                    self.frames.remove(0).2
                } else {
                    Vec::new()
                };
                block.read_frame(chunk, &mut self.decompressor, &mut raw)?;
                self.frames.push((key.0, key.1, raw));
            }
        }
        let raw = &self.frames[self.frames.len() - 1].2;
        chunk
            .raw_offset
            .checked_sub(chunk.lead)
            .and_then(|start| raw.get(start as usize..))
            .ok_or_else(|| Error::BlockCorrupt {
                block: block.name().to_owned(),
                file: "profiles",
                what: format!(
                    "a chunk starts at byte {} of a frame of {} bytes",
                    chunk.raw_offset,
                    raw.len()
                ),
            })
    }
}

/// Decodes the profiles of one chunk's raw bytes (from its lead, as [`ChunkReader::read`]
/// gives them): calls `each` with each profile's header and encoded samples, whole (those
/// written as differences rebuilt: [`crate::differences`]).
pub(crate) fn split_chunk(
    raw: &[u8],
    chunk: &ChunkRef,
    profiles: &[BlockProfile],
    mut each: impl FnMut(&BlockProfile, &[u8]),
) -> Result<(), encoding::DecodeError> {
    use crate::differences::{depends, differs};
    let mut undo = crate::differences::Undo::default();
    let lead = chunk.lead as usize;
    let mut at = 0usize;
    if raw.get(lead..).is_some_and(depends) {
        // The profiles left out are the bases of the first one left in.
        while at < lead {
            let len = undo.stored_len(&raw[at..])?;
            let end = at + len;
            undo.next(&raw[at..end], raw.get(end..).is_some_and(differs))?;
            at = end;
        }
        if at != lead {
            return Err(encoding::DecodeError {
                offset: at,
                what: format!("the profiles before a chunk's part end at byte {at}, not {lead}"),
            });
        }
    }
    at = lead;
    for (i, p) in profiles.iter().enumerate() {
        let end = at + p.len as usize;
        let next_differs = profiles.get(i + 1).is_some_and(|n| {
            raw.get(end..end + n.len as usize)
                .is_some_and(crate::differences::differs)
        });
        each(p, undo.next(&raw[at..end], next_differs)?);
        at = end;
    }
    Ok(())
}

impl From<&StoredProfile> for BlockProfile {
    fn from(p: &StoredProfile) -> Self {
        BlockProfile {
            timestamp_ms: p.timestamp_ms,
            duration_nanos: p.duration_nanos,
            period: p.period,
            capture_id: p.capture_id,
            total: p.total,
            n_samples: p.n_samples,
            len: p.data.len() as u32,
            merged: 1,
            latest_total: p.total,
        }
    }
}

/// The meta of block `name` from the bytes of its `meta.json`, checked (seal, name, times).
pub(crate) fn parse_meta(name: &str, bytes: &[u8]) -> Result<BlockMeta, Error> {
    let corrupt = |what: String| Error::BlockCorrupt {
        block: name.to_owned(),
        file: "meta.json",
        what,
    };
    let json = encoding::unseal(META_MAGIC, bytes).map_err(corrupt)?;
    let meta: BlockMeta = serde_json::from_slice(json)
        .map_err(|e| corrupt(format!("is not valid block metadata: {e}")))?;
    if meta.ulid != name {
        return Err(corrupt(format!(
            "names block `{}`, not its directory",
            meta.ulid
        )));
    }
    if meta.min_time_ms > meta.max_time_ms {
        return Err(corrupt("has min time after max time".into()));
    }
    Ok(meta)
}

/// The `meta.json` of the block in `block_dir` with `external_labels` added, sealed as the
/// block's own: what is uploaded to an object store in its place.
pub fn meta_for_upload(
    block_dir: &Path,
    external_labels: &BTreeMap<String, String>,
) -> Result<Vec<u8>, Error> {
    let path = block_dir.join("meta.json");
    let bytes = fs::read(&path).map_err(Error::io("cannot read block file", &path))?;
    let corrupt = |what: String| Error::BlockCorrupt {
        block: block_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        file: "meta.json",
        what,
    };
    let json = encoding::unseal(META_MAGIC, &bytes).map_err(corrupt)?;
    let mut meta: BlockMeta = serde_json::from_slice(json)
        .map_err(|e| corrupt(format!("is not valid block metadata: {e}")))?;
    meta.external_labels
        .extend(external_labels.iter().map(|(k, v)| (k.clone(), v.clone())));
    let mut out = serde_json::to_vec_pretty(&meta).expect("meta serializes");
    out.push(b'\n');
    encoding::seal(META_MAGIC, &mut out);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::test_support::{Lcg, corpus, series_labels, store_options, vary};
    use crate::{Db, MatchOp, Matcher};

    /// A store with two blocks (`[0, 1000)` and `[1000, 2000)`) and a head, closed.
    fn store_with_two_blocks(dir: &Path) -> Vec<String> {
        let db = Db::open(dir, store_options(1000)).expect("open");
        let cpu = corpus("go/go-cpu.pb.gz", "cpu");
        let heap = corpus("go/go-heap.pb.gz", "alloc_space");
        let mut rng = Lcg(7);
        for t in (0..2600).step_by(100) {
            let mut app = db.appender();
            app.append(&series_labels("cpu", "api", "a"), t, &vary(&cpu, &mut rng))
                .expect("append");
            app.append(&series_labels("heap", "db", "b"), t, &vary(&heap, &mut rng))
                .expect("append");
            app.commit().expect("commit");
        }
        db.compact().expect("compact");
        let names: Vec<String> = db
            .inner()
            .block_set()
            .iter()
            .map(|b| b.name().to_owned())
            .collect();
        assert_eq!(names.len(), 2, "two blocks, not yet compactable");
        db.close().expect("close");
        names
    }

    fn copy_dir(from: &Path, to: &Path) {
        fs::create_dir_all(to).expect("mkdir");
        for e in fs::read_dir(from).expect("read dir") {
            let e = e.expect("entry");
            let dst = to.join(e.file_name());
            if e.file_type().expect("type").is_dir() {
                copy_dir(&e.path(), &dst);
            } else {
                fs::copy(e.path(), dst).expect("copy");
            }
        }
    }

    /// Per series: number of profiles in the whole store.
    fn counts(db: &Db) -> Vec<(String, usize)> {
        db.querier(i64::MIN, i64::MAX)
            .select(&[])
            .expect("query")
            .into_iter()
            .map(|s| (s.labels.to_string(), s.profiles.len()))
            .collect()
    }

    #[test]
    fn cumulative_profiles_are_stored_as_differences_and_any_window_reads_them_whole() {
        // A cumulative profile (Go's alloc_space): a fifth of its rows grow each time.
        let base = crate::test_support::corpus("go/go-heap.pb.gz", "alloc_space");
        let profiles: Vec<parca_profile::Profile> = (0..30i64)
            .map(|t| {
                let mut p = base.clone();
                for (i, v) in p.samples.values.iter_mut().enumerate() {
                    if i % 5 == 0 {
                        *v += 4096 * t * (i as i64 + 1);
                    }
                }
                p
            })
            .collect();
        let dir = tempfile::tempdir().expect("tempdir");
        let db = Db::open(dir.path(), store_options(1000)).expect("open");
        let labels = series_labels("heap", "db", "b");
        for (t, p) in profiles.iter().enumerate() {
            let mut app = db.appender();
            app.append(&labels, 100 * t as i64, p).expect("append");
            app.commit().expect("commit");
        }
        db.compact().expect("compact");
        // The blocks hold profiles written as differences.
        let blocks = db.inner().block_set();
        assert!(!blocks.is_empty());
        let mut n_differences = 0;
        for b in blocks.iter() {
            let e = b.series_entry(0).expect("entry");
            let mut chunks = ChunkReader::new(dir.path(), 1).expect("reader");
            let mut first = 0usize;
            for c in &e.chunks {
                let raw = chunks.read(b, c).expect("chunk").to_vec();
                let mut at = 0usize;
                for p in &e.profiles[first..first + c.n_profiles as usize] {
                    n_differences += usize::from(crate::differences::differs(&raw[at..]));
                    at += p.len as usize;
                }
                first += c.n_profiles as usize;
            }
        }
        assert!(
            n_differences >= 10,
            "{n_differences} profiles written as differences"
        );
        // Every window, whatever profile it starts at, reads each profile whole.
        let m = [Matcher::new(MatchOp::Equal, "job", "db").expect("valid")];
        for from in [0usize, 1, 3, 9, 10, 11, 17, 25] {
            for to in [from, from + 1, from + 6, 29] {
                let to = to.min(29);
                let got = db
                    .querier(100 * from as i64, 100 * to as i64)
                    .select(&m)
                    .expect("query");
                assert_eq!(got.len(), 1);
                let got: Vec<_> = got[0]
                    .profiles
                    .iter()
                    .map(|(t, p)| (*t, crate::test_support::canonical(p)))
                    .collect();
                let want: Vec<_> = (from..=to)
                    .map(|t| (100 * t as i64, crate::test_support::canonical(&profiles[t])))
                    .collect();
                assert_eq!(got, want, "window of profiles {from}..={to}");
            }
        }
    }

    #[test]
    fn a_flipped_byte_in_any_block_file_quarantines_that_block_and_the_rest_answers() {
        let pristine = tempfile::tempdir().expect("tempdir");
        let names = store_with_two_blocks(pristine.path());
        let bad = &names[0];
        let full = {
            let db = Db::open(pristine.path(), store_options(1000)).expect("open");
            let c = counts(&db);
            assert_eq!(c.iter().map(|(_, n)| n).sum::<usize>(), 52);
            c
        };
        let mut trials = 0;
        for file in ["meta.json", "index", "symbols", "profiles"] {
            let len = fs::metadata(pristine.path().join(bad).join(file))
                .expect("file")
                .len() as usize;
            for at in [0, len / 3, len / 2, len - 13, len - 12, len - 5, len - 1] {
                let dir = tempfile::tempdir().expect("tempdir");
                copy_dir(pristine.path(), dir.path());
                let path = dir.path().join(bad).join(file);
                let mut bytes = fs::read(&path).expect("read");
                bytes[at] ^= 0x5a;
                fs::write(&path, &bytes).expect("write");

                let db =
                    Db::open(dir.path(), store_options(1000)).expect("opens despite the damage");
                let q = db.quarantined();
                assert_eq!(q.len(), 1, "{file}@{at}: {q:?}");
                assert_eq!(&q[0].block, bad);
                assert!(
                    q[0].reason.contains(&format!("`{file}`"))
                        && q[0].reason.contains(bad.as_str()),
                    "{file}@{at}: {}",
                    q[0].reason
                );
                assert!(dir.path().join("quarantine").join(bad).join(file).exists());
                assert!(!dir.path().join(bad).exists());
                // The other block and the head still answer: only the first block's 10
                // timestamps of both series are gone.
                let c = counts(&db);
                assert_eq!(c.len(), full.len(), "{file}@{at}");
                for ((l1, n1), (l2, n2)) in c.iter().zip(&full) {
                    assert_eq!(l1, l2);
                    assert_eq!(*n1, n2 - 10, "{file}@{at}: {l1}");
                }
                let m = Matcher::new(MatchOp::Equal, "job", "api").expect("valid");
                assert!(db.querier(1000, 1999).merge(&[m]).expect("merge").is_some());
                trials += 1;
            }
        }
        assert_eq!(trials, 28);
    }

    #[test]
    fn the_page_cache_keeps_the_recently_used_pages_within_its_bytes() {
        let mut cache = PageCache::default();
        let page = |n: u8| Arc::new(vec![n; 1 << 20]);
        for k in 0..70u32 {
            cache.insert((1, k), page(k as u8));
            // Page 0 stays in use: it is never the least recently used.
            assert!(cache.lookup((1, 0)).is_some(), "page 0 after {k}");
        }
        assert!(cache.bytes <= INDEX_PAGE_CACHE_BYTES, "{}", cache.bytes);
        assert_eq!(cache.bytes, cache.pages.len() << 20);
        assert!(cache.lookup((1, 69)).is_some());
        assert!(
            cache.lookup((1, 1)).is_none(),
            "the oldest unused page is gone"
        );
        cache.insert((2, 0), page(9));
        cache.forget_block(1);
        assert_eq!(cache.pages.len(), 1);
        assert_eq!(cache.bytes, 1 << 20);
    }

    #[test]
    fn blocks_read_by_ranges_answer_as_blocks_on_disk() {
        let pristine = tempfile::tempdir().expect("tempdir");
        let names = store_with_two_blocks(pristine.path());
        // Only the blocks' time: the head stays with the first store.
        let ranges = [(0, 1999), (500, 1500), (1000, 1000)];
        let expected = {
            let db = Db::open(pristine.path(), store_options(1000)).expect("open");
            crate::test_support::answers(&db, &ranges)
        };
        let cache = tempfile::tempdir().expect("cache");
        let mut remote = Vec::new();
        let mut sources = Vec::new();
        for name in &names {
            let dir = cache.path().join(name);
            fs::create_dir_all(&dir).expect("mkdir");
            for file in ["meta.json", "index", "symbols"] {
                fs::copy(pristine.path().join(name).join(file), dir.join(file)).expect("copy");
            }
            let ranges = Arc::new(crate::test_support::MemRanges {
                bytes: fs::read(pristine.path().join(name).join("profiles")).expect("profiles"),
                read: Default::default(),
            });
            sources.push(Arc::clone(&ranges));
            remote.push(crate::RemoteBlock::open(&dir, ranges).expect("opens"));
        }
        let empty = tempfile::tempdir().expect("tempdir");
        let db = Db::open(empty.path(), store_options(1000)).expect("open");
        assert_eq!(
            db.set_remote_blocks(remote.iter().cloned().map(crate::LazyBlock::from).collect()),
            2
        );
        assert_eq!(crate::test_support::answers(&db, &ranges), expected);
        // A query of one series reads less than the blocks' profile data.
        let before: u64 = sources
            .iter()
            .map(|s| s.read.load(std::sync::atomic::Ordering::Relaxed))
            .sum();
        let m = Matcher::new(MatchOp::Equal, "job", "api").expect("valid");
        assert!(db.querier(0, 1999).merge(&[m]).expect("merge").is_some());
        let one: u64 = sources
            .iter()
            .map(|s| s.read.load(std::sync::atomic::Ordering::Relaxed))
            .sum::<u64>()
            - before;
        // Exactly the frames that chunks of the series lie in, each once (the series of a
        // block share frames: in blocks this small, one frame).
        let mut frames = std::collections::BTreeSet::new();
        for name in &names {
            let block = Block::open(&pristine.path().join(name)).expect("opens");
            for i in 0..block.n_series() {
                let e = block.series_entry(i).expect("entry");
                if e.labels.get("job") == Some("api") {
                    frames.extend(e.chunks.iter().map(|c| (name.clone(), c.offset, c.len)));
                }
            }
        }
        let want: u64 = frames.iter().map(|f| f.2).sum();
        assert_eq!(one, want, "{frames:?}");
        // A block also on disk is read from disk; a remote block that another lists among its
        // sources is not read at all.
        drop(db);
        let both = tempfile::tempdir().expect("tempdir");
        copy_dir(pristine.path(), both.path());
        let db = Db::open(both.path(), store_options(1000)).expect("open");
        db.set_remote_blocks(remote.into_iter().map(crate::LazyBlock::from).collect());
        let view = crate::query::View::of(db.inner(), false);
        assert_eq!(
            view.readable(i64::MIN, i64::MAX, None).expect("open").len(),
            2
        );

        // A footer that is not a block's: refused, naming the file.
        let bad = Arc::new(crate::test_support::MemRanges {
            bytes: vec![0; 64],
            read: Default::default(),
        });
        let e = crate::RemoteBlock::open(&cache.path().join(&names[0]), bad).unwrap_err();
        assert!(e.to_string().contains("profiles"), "{e}");
    }

    /// Changes one byte and fixes the footer's checksum: only the structure checks stand
    /// between the bytes and the readers.
    fn damage_behind_the_checksum(path: &Path, at: usize, magic: &[u8; 4]) {
        let mut bytes = fs::read(path).expect("read");
        bytes.truncate(bytes.len() - encoding::FOOTER_BYTES);
        bytes[at] ^= 0x5a;
        encoding::seal(magic, &mut bytes);
        fs::write(path, &bytes).expect("write");
    }

    #[test]
    fn damage_with_a_valid_checksum_is_refused_or_read_without_panicking() {
        let pristine = tempfile::tempdir().expect("tempdir");
        let names = store_with_two_blocks(pristine.path());
        let bad = &names[1];
        for (file, magic) in [
            ("meta.json", META_MAGIC),
            ("index", INDEX_MAGIC),
            ("symbols", SYMBOLS_MAGIC),
            ("profiles", PROFILES_MAGIC),
        ] {
            let len = fs::metadata(pristine.path().join(bad).join(file))
                .expect("file")
                .len() as usize
                - encoding::FOOTER_BYTES;
            let step = (len / 40).max(1);
            for at in (0..len).step_by(step) {
                let dir = tempfile::tempdir().expect("tempdir");
                copy_dir(pristine.path(), dir.path());
                let path: PathBuf = dir.path().join(bad).join(file);
                damage_behind_the_checksum(&path, at, magic);
                let db =
                    Db::open(dir.path(), store_options(1000)).expect("opens despite the damage");
                // Whatever opened must answer every kind of query without panicking: with
                // the data, or with an error naming the damaged block.
                let q = db.querier(i64::MIN, i64::MAX);
                let api = Matcher::new(MatchOp::Equal, "job", "api").expect("valid");
                let results = [
                    q.select(&[]).map(drop),
                    q.merge(&[api]).map(drop),
                    q.totals(&[]).map(drop),
                    q.label_names(&[]).map(drop),
                    q.label_values("job", &[]).map(drop),
                ];
                // (A changed type name in the index can make a series look of another type.)
                for e in results.into_iter().filter_map(Result::err) {
                    assert!(
                        e.to_string().contains(bad.as_str())
                            || matches!(e, Error::IncompatibleProfiles { .. }),
                        "{file}@{at}: {e}"
                    );
                }
                drop(q);
                let _ = db.compact();
            }
        }
    }
}
