//! The store's synchronous API: open, append in committed batches, query, statistics.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock, RwLockReadGuard};

use parca_profile::{Extractor, Importer, Meta, Profile, Samples, Tables};
use rustc_hash::FxHashMap;

use crate::labels::{Labels, Matcher, NAME_LABEL};
use crate::postings::MemPostings;
use crate::wal::{self, Wal};
use crate::{Error, record};

/// How a store behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Profiles with more distinct stacks than this are refused (a guard against runaway
    /// producers; real profiles have thousands to tens of thousands).
    pub max_stacks_per_profile: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_stacks_per_profile: 1_000_000,
        }
    }
}

/// Figures about what the store holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    /// Series.
    pub n_series: usize,
    /// Stored profiles.
    pub n_profiles: usize,
    /// Stored (stack, value) pairs.
    pub n_samples: usize,
    /// Distinct stacks in the head.
    pub n_head_stacks: usize,
    /// Immutable blocks on disk.
    pub n_blocks: usize,
}

/// One stored profile of a series, its samples in the head's ids.
#[derive(Debug, Clone)]
struct HeadProfile {
    timestamp_ms: i64,
    duration_nanos: i64,
    period: i64,
    samples: Samples,
}

#[derive(Debug)]
struct Series {
    labels: Labels,
    /// Sample type, period type and unit, from the series' first profile.
    meta: Meta,
    /// Time-ordered.
    profiles: Vec<HeadProfile>,
}

/// The in-memory part of the store: every series, their postings, and the interned symbols and
/// stacks that all head profiles share.
#[derive(Debug, Default)]
struct Head {
    series: Vec<Series>,
    by_labels: FxHashMap<Labels, u32>,
    postings: MemPostings,
    tables: Tables,
}

impl Head {
    /// The series with these labels, created (and logged) if new.
    fn series_ref(&mut self, labels: &Labels, meta: &Meta, wal: &Wal) -> Result<u32, Error> {
        if let Some(&series) = self.by_labels.get(labels) {
            return Ok(series);
        }
        let series = self.series.len() as u32;
        wal.write(&record::encode_series(series, labels))?;
        self.add_series(series, labels.clone(), meta.clone());
        Ok(series)
    }

    fn add_series(&mut self, series: u32, labels: Labels, meta: Meta) {
        self.postings.add(series, &labels);
        self.by_labels.insert(labels.clone(), series);
        self.series.push(Series {
            labels,
            meta,
            profiles: Vec::new(),
        });
    }

    fn insert(&mut self, series: u32, timestamp_ms: i64, profile: &Profile) {
        let samples = Importer::new().import(&mut self.tables, profile);
        let s = &mut self.series[series as usize];
        s.profiles.push(HeadProfile {
            timestamp_ms,
            duration_nanos: profile.meta.duration_nanos,
            period: profile.meta.period,
            samples,
        });
    }
}

/// A profile store in a directory. Cheap to share between threads (`&Db` is `Sync`).
pub struct Db {
    dir: PathBuf,
    options: Options,
    head: RwLock<Head>,
    wal: Wal,
}

impl Db {
    /// Opens (or creates) the store in `dir`, replaying its write-ahead log.
    pub fn open(dir: &Path, options: Options) -> Result<Db, Error> {
        std::fs::create_dir_all(dir).map_err(Error::io("cannot create data directory", dir))?;
        let wal_dir = dir.join("wal");
        std::fs::create_dir_all(&wal_dir)
            .map_err(Error::io("cannot create WAL directory", &wal_dir))?;
        let mut head = Head::default();
        let mut n_records = 0u64;
        wal::replay(&wal_dir, |bytes, segment, offset| {
            n_records += 1;
            let corrupt = |what: String| Error::WalCorrupt {
                segment: segment.to_owned(),
                offset,
                what,
            };
            match record::decode(bytes).map_err(corrupt)? {
                record::Record::Series { series, labels } => {
                    if series as usize != head.series.len() {
                        return Err(corrupt(format!(
                            "series {series} out of sequence (expected {})",
                            head.series.len()
                        )));
                    }
                    head.add_series(series, labels, Meta::default());
                }
                record::Record::Profile {
                    series,
                    timestamp_ms,
                    duration_nanos,
                    pprof,
                } => {
                    if series as usize >= head.series.len() {
                        return Err(corrupt(format!("profile of unknown series {series}")));
                    }
                    let decoded =
                        parca_pprof::Pprof::parse(pprof).map_err(|source| Error::WalProfile {
                            segment: segment.to_owned(),
                            offset,
                            source,
                        })?;
                    let mut profiles = parca_profile::from_pprof(&decoded);
                    let Some(mut profile) = profiles.pop() else {
                        return Err(corrupt("profile record without a sample type".into()));
                    };
                    profile.meta.duration_nanos = duration_nanos;
                    let s = &mut head.series[series as usize];
                    if s.profiles.is_empty() {
                        s.meta = Meta {
                            time_nanos: 0,
                            duration_nanos: 0,
                            ..profile.meta.clone()
                        };
                    }
                    head.insert(series, timestamp_ms, &profile);
                }
            }
            Ok(())
        })?;
        tracing::info!(dir = %dir.display(), records = n_records, series = head.series.len(), "replayed WAL");
        let wal = Wal::open(&wal_dir)?;
        Ok(Db {
            dir: dir.to_owned(),
            options,
            head: RwLock::new(head),
            wal,
        })
    }

    /// The directory the store lives in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A batch of appends; nothing is durable before [`Appender::commit`] returns.
    pub fn appender(&self) -> Appender<'_> {
        Appender {
            db: self,
            last_seq: 0,
        }
    }

    /// Reads profiles whose timestamp lies in `[min_ms, max_ms]`.
    pub fn querier(&self, min_ms: i64, max_ms: i64) -> Querier<'_> {
        Querier {
            head: self.head.read().expect("head lock poisoned"),
            min_ms,
            max_ms,
        }
    }

    /// What the store holds now.
    pub fn stats(&self) -> Stats {
        let head = self.head.read().expect("head lock poisoned");
        Stats {
            n_series: head.series.len(),
            n_profiles: head.series.iter().map(|s| s.profiles.len()).sum(),
            n_samples: head
                .series
                .iter()
                .flat_map(|s| &s.profiles)
                .map(|p| p.samples.len())
                .sum(),
            n_head_stacks: head.tables.n_stacks(),
            n_blocks: 0,
        }
    }
}

/// Appends profiles; [`Appender::commit`] makes them durable.
///
/// An appended profile is visible to queries at once and durable once `commit` returns; a crash in
/// between may lose it, and its writer was never told it was stored.
pub struct Appender<'a> {
    db: &'a Db,
    last_seq: u64,
}

impl Appender<'_> {
    /// Appends `profile` to the series `labels` at `timestamp_ms`. Refuses, and stores nothing
    /// of, a profile without a `__name__` label, one not newer than the series' last, or one
    /// with more stacks than [`Options::max_stacks_per_profile`].
    pub fn append(
        &mut self,
        labels: &Labels,
        timestamp_ms: i64,
        profile: &Profile,
    ) -> Result<(), Error> {
        if labels.get(NAME_LABEL).is_none() {
            return Err(Error::MissingName {
                labels: labels.to_string(),
            });
        }
        let limit = self.db.options.max_stacks_per_profile;
        if profile.samples.len() > limit {
            return Err(Error::TooManyStacks {
                labels: labels.to_string(),
                n_stacks: profile.samples.len(),
                limit,
            });
        }
        // Encode before taking the lock: it is the costly part and needs no shared state.
        let pprof = parca_pprof::encode(&parca_profile::to_pprof(profile), false);
        let mut head = self.db.head.write().expect("head lock poisoned");
        let last = head
            .by_labels
            .get(labels)
            .and_then(|&s| head.series[s as usize].profiles.last());
        if let Some(last) = last
            && timestamp_ms <= last.timestamp_ms
        {
            return Err(Error::OutOfOrder {
                labels: labels.to_string(),
                timestamp_ms,
                last_ms: last.timestamp_ms,
                what: if timestamp_ms == last.timestamp_ms {
                    "at the same time as"
                } else {
                    "older than"
                },
            });
        }
        let meta = Meta {
            time_nanos: 0,
            duration_nanos: 0,
            ..profile.meta.clone()
        };
        let series = head.series_ref(labels, &meta, &self.db.wal)?;
        let record =
            record::encode_profile(series, timestamp_ms, profile.meta.duration_nanos, &pprof);
        self.last_seq = self.db.wal.write(&record)?;
        head.insert(series, timestamp_ms, profile);
        Ok(())
    }

    /// Returns once every profile appended so far is on disk. Concurrent commits share fsyncs.
    pub fn commit(self) -> Result<(), Error> {
        if self.last_seq > 0 {
            self.db.wal.sync_through(self.last_seq)?;
        }
        Ok(())
    }
}

/// The profiles of one series over a query's time range, sharing the query's tables.
#[derive(Debug, Clone)]
pub struct SeriesProfiles {
    /// The series.
    pub labels: Labels,
    /// Its profiles with their timestamps, time-ordered.
    pub profiles: Vec<(i64, Profile)>,
}

/// The totals of one series' profiles over a query's time range.
#[derive(Debug, Clone)]
pub struct SeriesTotals {
    /// The series.
    pub labels: Labels,
    /// Its sample type and period type (time and duration are per point).
    pub meta: Meta,
    /// One point per profile, time-ordered.
    pub points: Vec<TotalPoint>,
}

/// The total of one stored profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TotalPoint {
    /// When the profile was taken.
    pub timestamp_ms: i64,
    /// The sum of its values.
    pub total: i64,
    /// Its sampling period, in the period type's unit.
    pub period: i64,
    /// The window it covers (0 for a snapshot).
    pub duration_nanos: i64,
}

/// A profile read out of the head before the query's tables are frozen: time, meta, samples.
type ExtractedProfile = (i64, Meta, Samples);

/// A read view of the store over a time range; holds the head's read lock while it lives.
pub struct Querier<'a> {
    head: RwLockReadGuard<'a, Head>,
    min_ms: i64,
    max_ms: i64,
}

impl Querier<'_> {
    fn series_in_range(&self, matchers: &[Matcher]) -> Vec<u32> {
        self.head
            .postings
            .select(matchers)
            .iter()
            .filter(|&s| {
                self.head.series[s as usize]
                    .profiles
                    .iter()
                    .any(|p| (self.min_ms..=self.max_ms).contains(&p.timestamp_ms))
            })
            .collect()
    }

    /// The series that match all `matchers` and have profiles in range, with those profiles.
    /// All returned profiles share one set of tables holding only what they use, so merging
    /// them is an array add.
    pub fn select(&self, matchers: &[Matcher]) -> Vec<SeriesProfiles> {
        let mut tables = Tables::new();
        let mut extractor = Extractor::new(&self.head.tables);
        let mut out: Vec<(Labels, Vec<ExtractedProfile>)> = Vec::new();
        for series in self.series_in_range(matchers) {
            let s = &self.head.series[series as usize];
            let profiles = s
                .profiles
                .iter()
                .filter(|p| (self.min_ms..=self.max_ms).contains(&p.timestamp_ms))
                .map(|p| {
                    let meta = Meta {
                        time_nanos: p.timestamp_ms.saturating_mul(1_000_000),
                        duration_nanos: p.duration_nanos,
                        period: p.period,
                        ..s.meta.clone()
                    };
                    (
                        p.timestamp_ms,
                        meta,
                        extractor.samples(&mut tables, &p.samples),
                    )
                })
                .collect();
            out.push((s.labels.clone(), profiles));
        }
        let tables = Arc::new(tables);
        out.into_iter()
            .map(|(labels, profiles)| SeriesProfiles {
                labels,
                profiles: profiles
                    .into_iter()
                    .map(|(t, meta, samples)| {
                        (
                            t,
                            Profile {
                                tables: Arc::clone(&tables),
                                meta,
                                samples,
                            },
                        )
                    })
                    .collect(),
            })
            .collect()
    }

    /// The labels of the series that match all `matchers` and have profiles in range, without
    /// reading any profile. Cheap: use it to check limits before [`Querier::select`].
    pub fn series(&self, matchers: &[Matcher]) -> Vec<Labels> {
        self.series_in_range(matchers)
            .into_iter()
            .map(|s| self.head.series[s as usize].labels.clone())
            .collect()
    }

    /// Number of (stack, value) pairs the matching profiles in range hold: what a
    /// [`Querier::select`] would read.
    pub fn n_samples(&self, matchers: &[Matcher]) -> usize {
        self.series_in_range(matchers)
            .into_iter()
            .flat_map(|s| &self.head.series[s as usize].profiles)
            .filter(|p| (self.min_ms..=self.max_ms).contains(&p.timestamp_ms))
            .map(|p| p.samples.len())
            .sum()
    }

    /// The total (sum of values) of every matching profile in range, per series, without
    /// copying samples: what a metrics graph needs.
    pub fn totals(&self, matchers: &[Matcher]) -> Vec<SeriesTotals> {
        self.series_in_range(matchers)
            .into_iter()
            .map(|series| {
                let s = &self.head.series[series as usize];
                SeriesTotals {
                    labels: s.labels.clone(),
                    meta: s.meta.clone(),
                    points: s
                        .profiles
                        .iter()
                        .filter(|p| (self.min_ms..=self.max_ms).contains(&p.timestamp_ms))
                        .map(|p| TotalPoint {
                            timestamp_ms: p.timestamp_ms,
                            total: p
                                .samples
                                .values
                                .iter()
                                .fold(0i64, |a, &v| a.wrapping_add(v)),
                            period: p.period,
                            duration_nanos: p.duration_nanos,
                        })
                        .collect(),
                }
            })
            .collect()
    }

    /// Label names of the matching series with profiles in range, sorted.
    pub fn label_names(&self, matchers: &[Matcher]) -> Vec<String> {
        let within = self.series_in_range(matchers).into_iter().collect();
        self.head.postings.label_names(&within)
    }

    /// Values of label `name` among the matching series with profiles in range, sorted.
    pub fn label_values(&self, name: &str, matchers: &[Matcher]) -> Vec<String> {
        let within = self.series_in_range(matchers).into_iter().collect();
        self.head.postings.label_values(name, &within)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::MatchOp;

    fn corpus_cpu(rel: &str) -> Profile {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/testdata/pprof")
            .join(rel);
        let bytes = std::fs::read(&path).expect("corpus file");
        let profiles = parca_profile::decode(&bytes, &Default::default()).expect("decodes");
        parca_profile::select_sample_type(profiles, Some("cpu"), None).expect("cpu")
    }

    fn labels(job: &str, instance: &str) -> Labels {
        Labels::new([
            (
                NAME_LABEL,
                "process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta",
            ),
            ("job", job),
            ("instance", instance),
        ])
        .expect("valid")
    }

    fn fill(db: &Db) -> Profile {
        let cpu = corpus_cpu("go/go-cpu.pb.gz");
        let mut app = db.appender();
        for (i, instance) in ["a", "b"].iter().enumerate() {
            for t in 0..3 {
                app.append(&labels("api", instance), 1_000 * t + i as i64, &cpu)
                    .expect("append");
            }
        }
        app.append(&labels("db", "a"), 5, &cpu).expect("append");
        app.commit().expect("commit");
        cpu
    }

    fn totals(db: &Db, matchers: &[Matcher]) -> Vec<(String, Vec<(i64, i64)>)> {
        db.querier(i64::MIN, i64::MAX)
            .select(matchers)
            .into_iter()
            .map(|s| {
                (
                    s.labels.to_string(),
                    s.profiles.iter().map(|(t, p)| (*t, p.total())).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn appended_profiles_come_back_by_matchers_and_after_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = Db::open(dir.path(), Options::default()).expect("open");
        let cpu = fill(&db);
        let api = [Matcher::new(MatchOp::Equal, "job", "api").expect("valid")];
        let before = totals(&db, &api);
        assert_eq!(before.len(), 2);
        assert_eq!(
            before[0].1,
            vec![(0, cpu.total()), (1000, cpu.total()), (2000, cpu.total())]
        );
        let stats = db.stats();
        assert_eq!((stats.n_series, stats.n_profiles), (3, 7));
        drop(db);
        let db = Db::open(dir.path(), Options::default()).expect("reopen");
        assert_eq!(totals(&db, &api), before);
        assert_eq!(db.stats().n_samples, stats.n_samples);
        // The profiles read back are the ones written, stack for stack.
        let back = db.querier(0, 0).select(&api);
        let original = parca_profile::TopTable::build(&cpu);
        assert_eq!(
            parca_profile::TopTable::build(&back[0].profiles[0].1).rows,
            original.rows
        );
    }

    #[test]
    fn selected_profiles_share_tables_and_merge() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = Db::open(dir.path(), Options::default()).expect("open");
        let cpu = fill(&db);
        let all = db.querier(0, 10_000).select(&[]);
        let profiles: Vec<&Profile> = all
            .iter()
            .flat_map(|s| s.profiles.iter().map(|(_, p)| p))
            .collect();
        assert!(
            profiles
                .windows(2)
                .all(|w| Arc::ptr_eq(&w[0].tables, &w[1].tables))
        );
        let merged = parca_profile::merge(profiles.iter().copied()).expect("merge");
        assert_eq!(merged.total(), 7 * cpu.total());
    }

    #[test]
    fn time_range_limits_profiles_and_labels() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = Db::open(dir.path(), Options::default()).expect("open");
        fill(&db);
        let q = db.querier(500, 1500);
        assert_eq!(q.label_values("job", &[]), vec!["api"]);
        assert_eq!(q.label_names(&[]), vec!["__name__", "instance", "job"]);
        let series = q.select(&[]);
        assert_eq!(series.iter().map(|s| s.profiles.len()).sum::<usize>(), 2);
    }

    #[test]
    fn bad_appends_are_refused_and_store_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = Db::open(
            dir.path(),
            Options {
                max_stacks_per_profile: 10,
            },
        )
        .expect("open");
        let cpu = corpus_cpu("go/go-cpu.pb.gz");
        let small = cpu.retain_samples(|i| i < 5);
        let mut app = db.appender();
        app.append(&labels("api", "a"), 100, &small).expect("first");
        let err = app
            .append(&labels("api", "a"), 100, &small)
            .expect_err("duplicate");
        assert_eq!(
            err.to_string(),
            r#"series {__name__="process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta", instance="a", job="api"}: profile at 100 ms is at the same time as the last stored one at 100 ms"#
        );
        let err = app
            .append(&labels("api", "a"), 50, &small)
            .expect_err("older");
        assert!(
            err.to_string()
                .contains("profile at 50 ms is older than the last stored one at 100 ms"),
            "{err}"
        );
        let err = app
            .append(&labels("api", "b"), 200, &cpu)
            .expect_err("too many stacks");
        assert!(
            err.to_string().ends_with(&format!(
                "profile has {} stacks, more than the limit of 10",
                cpu.samples.len()
            )),
            "{err}"
        );
        let nameless = Labels::new([("job", "x")]).expect("valid");
        let err = app.append(&nameless, 1, &small).expect_err("no name");
        assert_eq!(
            err.to_string(),
            r#"series {job="x"} has no `__name__` label (the profile type)"#
        );
        app.commit().expect("commit");
        drop(db);
        let db = Db::open(dir.path(), Options::default()).expect("reopen");
        let stats = db.stats();
        assert_eq!(
            (stats.n_series, stats.n_profiles),
            (1, 1),
            "only the one good profile was stored"
        );
    }
}
