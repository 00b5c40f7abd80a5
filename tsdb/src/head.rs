//! The head: the newest profiles, in memory, as compact encoded columns over one set of
//! interned tables; and the cut that moves its oldest part into a block.

use parca_profile::{Extractor, Importer, Meta, Profile, Samples, Tables};
use roaring::RoaringBitmap;
use rustc_hash::FxHashMap;

use crate::Error;
use crate::encoding::{self, IdLimits, Reader};
use crate::labels::{Labels, Matcher};
use crate::postings::MemPostings;

/// One stored profile: its header figures and its samples encoded by
/// [`encoding::encode_samples`] (about 2–4 bytes a sample, against 16 as plain columns).
#[derive(Debug, Clone)]
pub(crate) struct StoredProfile {
    pub timestamp_ms: i64,
    pub duration_nanos: i64,
    pub period: i64,
    /// The capture it came from ([`parca_profile::Meta::capture_id`]).
    pub capture_id: u64,
    /// Sum of the values, kept so totals need no decoding.
    pub total: i64,
    pub n_samples: u32,
    pub data: Box<[u8]>,
}

impl StoredProfile {
    /// Encodes `samples` (ids of some tables) into a stored profile.
    pub fn encode(
        timestamp_ms: i64,
        duration_nanos: i64,
        period: i64,
        capture_id: u64,
        samples: &Samples,
    ) -> Self {
        let mut data = Vec::new();
        let total = encoding::encode_samples(samples, &mut data);
        StoredProfile {
            timestamp_ms,
            duration_nanos,
            period,
            capture_id,
            total,
            n_samples: samples.len() as u32,
            data: data.into_boxed_slice(),
        }
    }

    /// The same profile with its ids translated by `extractor` into `dst`.
    pub fn reencode(
        &self,
        src_limits: IdLimits,
        extractor: &mut Extractor<'_>,
        dst: &mut Tables,
    ) -> Self {
        let samples = encoding::decode_samples(&mut Reader::new(&self.data), src_limits)
            .expect("head data was encoded by this process against these tables");
        let samples = extractor.samples(dst, &samples);
        StoredProfile::encode(
            self.timestamp_ms,
            self.duration_nanos,
            self.period,
            self.capture_id,
            &samples,
        )
    }
}

#[derive(Debug)]
pub(crate) struct Series {
    pub labels: Labels,
    /// Sample type, period type and comments, from the series' first profile.
    pub meta: Meta,
    /// Time-ordered.
    pub profiles: Vec<StoredProfile>,
}

impl Series {
    /// The profiles whose timestamps lie in `[min_ms, max_ms]`.
    pub fn in_range(&self, min_ms: i64, max_ms: i64) -> &[StoredProfile] {
        let start = self.profiles.partition_point(|p| p.timestamp_ms < min_ms);
        let end = self.profiles.partition_point(|p| p.timestamp_ms <= max_ms);
        &self.profiles[start..end.max(start)]
    }
}

/// The in-memory part of the store: every series, their postings, and the interned symbols and
/// stacks that all head profiles share.
#[derive(Debug, Default)]
pub(crate) struct Head {
    pub series: Vec<Series>,
    pub by_labels: FxHashMap<Labels, u32>,
    pub postings: MemPostings,
    pub tables: Tables,
    /// Appends older than this are refused: that time range has been cut into blocks.
    pub min_valid_ms: i64,
    /// Oldest profile time held (`i64::MAX` when empty).
    pub oldest_ms: i64,
    /// Newest profile time held (`i64::MIN` when empty; not lowered when a profile whose
    /// write failed is taken out again).
    pub newest_ms: i64,
    /// Figures of the profiles held, kept as they change so that statistics never walk them.
    pub totals: HeadTotals,
    /// Bumped each time a cut replaces the head (renumbering its series and tables): a query
    /// that reads the head between holds of its lock starts again when it changed.
    pub generation: u64,
    /// Memos of the tables appended from, kept for the next appends: the profiles of one pprof
    /// share tables (one per sample type, or one per sample-label set after ingest's split),
    /// and a decoder that keeps its tables from push to push has its symbols and stacks
    /// translated from the memo, one lookup each, with no hashing into the head's tables.
    /// A cut makes a new head, and with it new memos.
    importer: Importer,
}

/// Running figures of a head's profiles.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HeadTotals {
    pub n_profiles: usize,
    pub n_samples: usize,
    /// Bytes of encoded samples.
    pub sample_bytes: usize,
}

impl HeadTotals {
    fn add(&mut self, p: &StoredProfile) {
        self.n_profiles += 1;
        self.n_samples += p.n_samples as usize;
        self.sample_bytes += p.data.len();
    }

    fn remove(&mut self, p: &StoredProfile) {
        self.n_profiles -= 1;
        self.n_samples -= p.n_samples as usize;
        self.sample_bytes -= p.data.len();
    }
}

impl Head {
    pub fn new(min_valid_ms: i64) -> Self {
        Head {
            min_valid_ms,
            oldest_ms: i64::MAX,
            newest_ms: i64::MIN,
            ..Head::default()
        }
    }

    /// Interns `profile`'s stacks and labels into the head's tables; returns its samples in
    /// the head's ids.
    pub fn import(&mut self, profile: &Profile) -> Samples {
        self.importer.import(&mut self.tables, profile)
    }

    /// Adds a profile to a series in time order (it may be older than the series' last,
    /// within the out-of-order window the appender checks).
    pub fn push(&mut self, series: u32, profile: StoredProfile) {
        self.oldest_ms = self.oldest_ms.min(profile.timestamp_ms);
        self.newest_ms = self.newest_ms.max(profile.timestamp_ms);
        self.totals.add(&profile);
        let profiles = &mut self.series[series as usize].profiles;
        if profiles
            .last()
            .is_none_or(|last| last.timestamp_ms < profile.timestamp_ms)
        {
            profiles.push(profile);
        } else {
            let at = profiles.partition_point(|p| p.timestamp_ms < profile.timestamp_ms);
            profiles.insert(at, profile);
        }
    }

    /// Takes the profile at `timestamp_ms` out of a series, if it is there (its write failed).
    pub fn remove_profile(&mut self, series: u32, timestamp_ms: i64) {
        if let Some(s) = self.series.get_mut(series as usize)
            && let Ok(i) = s
                .profiles
                .binary_search_by_key(&timestamp_ms, |p| p.timestamp_ms)
        {
            let removed = s.profiles.remove(i);
            self.totals.remove(&removed);
        }
    }

    /// Whether the head takes a profile of series `labels` at `timestamp_ms`: returns the
    /// series' number if it exists. Refuses a time the series holds already
    /// ([`Error::Duplicate`]), one older than the series' newest by more than `window_ms`
    /// ([`Error::OutOfOrder`]) and one older than the time cut into blocks
    /// ([`Error::OutOfBounds`]).
    pub fn check_time(
        &self,
        labels: &Labels,
        timestamp_ms: i64,
        window_ms: i64,
    ) -> Result<Option<u32>, Error> {
        if timestamp_ms < self.min_valid_ms {
            return Err(Error::OutOfBounds {
                labels: labels.to_string(),
                timestamp_ms,
                min_valid_ms: self.min_valid_ms,
            });
        }
        let existing = self.by_labels.get(labels).copied();
        if let Some(s) = existing {
            let profiles = &self.series[s as usize].profiles;
            if let Some(last) = profiles.last() {
                if profiles
                    .binary_search_by_key(&timestamp_ms, |p| p.timestamp_ms)
                    .is_ok()
                {
                    return Err(Error::Duplicate {
                        labels: labels.to_string(),
                        timestamp_ms,
                    });
                }
                if timestamp_ms < last.timestamp_ms.saturating_sub(window_ms) {
                    return Err(Error::OutOfOrder {
                        labels: labels.to_string(),
                        timestamp_ms,
                        last_ms: last.timestamp_ms,
                        window_ms,
                    });
                }
            }
        }
        Ok(existing)
    }

    /// Whether the head takes a profile of `labels` at `timestamp_ms` rather than refusing it as
    /// too old ([`Error::is_too_old`]) by [`Head::check_time`].
    pub fn takes(&self, labels: &Labels, timestamp_ms: i64, window_ms: i64) -> bool {
        !matches!(
            self.check_time(labels, timestamp_ms, window_ms),
            Err(e) if e.is_too_old()
        )
    }

    pub fn add_series(&mut self, labels: Labels, meta: Meta) -> u32 {
        let series = self.series.len() as u32;
        self.postings.add(series, &labels);
        self.by_labels.insert(labels.clone(), series);
        self.series.push(Series {
            labels,
            meta,
            profiles: Vec::new(),
        });
        series
    }

    /// Oldest and newest profile time, if any.
    pub fn time_range(&self) -> Option<(i64, i64)> {
        let min = self
            .series
            .iter()
            .filter_map(|s| s.profiles.first())
            .map(|p| p.timestamp_ms)
            .min()?;
        let max = self
            .series
            .iter()
            .filter_map(|s| s.profiles.last())
            .map(|p| p.timestamp_ms)
            .max()?;
        Some((min, max))
    }

    /// Series matching `matchers` with a profile in `[min_ms, max_ms]`.
    pub fn series_in_range(&self, matchers: &[Matcher], min_ms: i64, max_ms: i64) -> RoaringBitmap {
        self.postings
            .select(matchers)
            .iter()
            .filter(|&s| !self.series[s as usize].in_range(min_ms, max_ms).is_empty())
            .collect()
    }

    pub fn limits(&self) -> IdLimits {
        IdLimits::of(&self.tables)
    }
}

/// A series' profiles copied out of the head (or out of blocks) into other tables.
#[derive(Debug)]
pub(crate) struct ExtractedSeries {
    pub labels: Labels,
    pub meta: Meta,
    pub profiles: Vec<StoredProfile>,
}

/// What the head's profiles older than `boundary` become: series sorted by labels, in new
/// tables that hold only what they use.
pub(crate) fn extract_before(head: &Head, boundary: i64) -> (Tables, Vec<ExtractedSeries>) {
    let mut tables = Tables::new();
    let mut extractor = Extractor::new(&head.tables);
    let limits = head.limits();
    let mut order: Vec<&Series> = head
        .series
        .iter()
        .filter(|s| {
            s.profiles
                .first()
                .is_some_and(|p| p.timestamp_ms < boundary)
        })
        .collect();
    order.sort_by(|a, b| a.labels.cmp(&b.labels));
    let out = order
        .into_iter()
        .map(|s| {
            let end = s.profiles.partition_point(|p| p.timestamp_ms < boundary);
            ExtractedSeries {
                labels: s.labels.clone(),
                meta: s.meta.clone(),
                profiles: s.profiles[..end]
                    .iter()
                    .map(|p| p.reencode(limits, &mut extractor, &mut tables))
                    .collect(),
            }
        })
        .collect();
    (tables, out)
}

/// The head that remains after a cut at `boundary`, being built: profiles at or after the
/// boundary, in new tables (so that symbols only the cut data used are dropped).
pub(crate) struct Remainder {
    tables: Tables,
    /// Per old series ref: profiles re-encoded so far, and how many of the old series'
    /// profiles that covers.
    series: Vec<(Vec<StoredProfile>, usize)>,
}

impl Remainder {
    /// Re-encodes what the head holds now at or after `boundary` (under a read lock).
    pub fn build(head: &Head, boundary: i64) -> Remainder {
        let mut tables = Tables::new();
        let mut extractor = Extractor::new(&head.tables);
        let limits = head.limits();
        let series = head
            .series
            .iter()
            .map(|s| {
                let start = s.profiles.partition_point(|p| p.timestamp_ms < boundary);
                let kept = s.profiles[start..]
                    .iter()
                    .map(|p| p.reencode(limits, &mut extractor, &mut tables))
                    .collect();
                (kept, s.profiles.len())
            })
            .collect();
        Remainder { tables, series }
    }

    /// Adds what was appended since [`Remainder::build`] (under the write lock) and returns the
    /// new head. Series left without profiles are dropped; the rest are renumbered, and the
    /// second value maps each old series number to its new one.
    pub fn finish(mut self, head: &Head, min_valid_ms: i64) -> (Head, Vec<Option<u32>>) {
        let mut extractor = Extractor::new(&head.tables);
        let limits = head.limits();
        self.series
            .resize_with(head.series.len(), || (Vec::new(), 0));
        let mut new = Head::new(min_valid_ms);
        let mut renumbered = Vec::with_capacity(head.series.len());
        for (old, (mut kept, seen)) in head.series.iter().zip(self.series) {
            for p in &old.profiles[seen..] {
                kept.push(p.reencode(limits, &mut extractor, &mut self.tables));
            }
            if kept.is_empty() {
                renumbered.push(None);
                continue;
            }
            new.oldest_ms = new.oldest_ms.min(kept[0].timestamp_ms);
            new.newest_ms = new.newest_ms.max(kept[kept.len() - 1].timestamp_ms);
            for p in &kept {
                new.totals.add(p);
            }
            let series = new.add_series(old.labels.clone(), old.meta.clone());
            new.series[series as usize].profiles = kept;
            renumbered.push(Some(series));
        }
        new.tables = self.tables;
        (new, renumbered)
    }
}
