//! Reading other stores beside this one: the shards of a querier.
//!
//! A querier (`parca --mode=query` with shards) reads the bucket for what the shards have
//! shipped and asks each shard's own store (head and local blocks) for the rest. This module is
//! the store's side of that: what a shard says of itself ([`PeerStore`]), what is asked of it
//! ([`PeerRequest`]), what it answers ([`PeerAnswer`]), their bytes on the wire, and the
//! [`Peers`] trait through which a [`Querier`](crate::Querier) reaches the shards without
//! knowing how (HTTP lives in the server's crates).
//!
//! Selection and merging happen at the shard: a merge is answered with one profile per series
//! (its samples summed), with every merged profile's header so that the querier folds times,
//! durations and periods exactly as if it had read the profiles itself.

use std::collections::BTreeMap;
use std::sync::Arc;

use parca_profile::{Meta, Samples, Tables, ValueType};

use crate::Error;
use crate::encoding::{self, IdLimits, Reader, TableCounts, put_ivarint, put_str, put_uvarint};
use crate::labels::{Labels, MatchOp, Matcher};
use crate::query::TotalPoint;

/// What a shard says of itself, polled by a querier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerStore {
    /// Where it is, as the querier names it in warnings (its address).
    pub name: String,
    /// Its `global.external_labels`: the labels its blocks carry in the bucket.
    pub external_labels: BTreeMap<String, String>,
    /// Every profile it stored before this time is in the bucket; `None` if it ships nothing.
    pub shipped_until_ms: Option<i64>,
    /// Its blocks on local disk that are in the bucket too, with their start: the querier reads
    /// from the shard whatever of these it does not see in the bucket yet.
    pub shipped_blocks: Vec<(String, i64)>,
    /// How many blocks it shipped are no longer on its disk: only the bucket has them.
    pub only_in_bucket: usize,
}

/// What a shard is asked to read from its own store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerRead {
    /// The labels of the matching series.
    Series,
    /// Each matching profile's header (time, total, duration, period).
    Totals,
    /// Per series, its profiles merged, with every profile's header.
    Merge,
    /// Per series, every profile.
    Select,
}

/// One read asked of a shard: matchers over a time range (both ends included).
#[derive(Debug, Clone)]
pub struct PeerRequest {
    /// What to read.
    pub read: PeerRead,
    /// Which series.
    pub matchers: Vec<Matcher>,
    /// From (ms).
    pub min_ms: i64,
    /// To (ms).
    pub max_ms: i64,
}

/// One series of a shard's answer.
#[derive(Debug, Clone)]
pub struct PeerSeries {
    /// The series.
    pub labels: Labels,
    /// Its sample and period types, comments and frame rules (times are per profile).
    pub meta: Meta,
    /// Its profiles in range, time-ordered.
    pub profiles: Vec<PeerProfile>,
    /// Samples in the answer's tables: none ([`PeerRead::Series`], [`PeerRead::Totals`]), the
    /// merge of all profiles ([`PeerRead::Merge`]), or one per profile ([`PeerRead::Select`]).
    pub samples: Vec<Samples>,
}

/// The header of one profile a shard read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerProfile {
    /// Its time, its total, its period and its duration.
    pub point: TotalPoint,
    /// The capture it came from (0: unknown).
    pub capture_id: u64,
}

/// A shard's answer: series over one set of tables.
#[derive(Debug, Clone)]
pub struct PeerAnswer {
    /// The symbols and stacks every series' samples point into.
    pub tables: Arc<Tables>,
    /// The matching series, sorted by labels.
    pub series: Vec<PeerSeries>,
}

/// The shards a querier reads beside its own store.
pub trait Peers: Send + Sync {
    /// Each shard as last heard of, or why it cannot be read now (named in the answer's
    /// warnings).
    fn stores(&self) -> Vec<Result<PeerStore, String>>;

    /// Reads `asks` (a shard's index in [`Peers::stores`] and what to read there), all at once;
    /// per ask, the shard's answer or why there is none.
    fn read(&self, asks: &[(usize, PeerRequest)]) -> Vec<Result<PeerAnswer, String>>;
}

/// The HTTP content type of an encoded [`PeerRequest`] and [`PeerAnswer`].
pub const PEER_CONTENT_TYPE: &str = "application/vnd.parca.store";

/// Magic of an encoded [`PeerRequest`].
const REQUEST_MAGIC: &[u8; 4] = b"PQRQ";
/// Magic of an encoded [`PeerAnswer`].
const ANSWER_MAGIC: &[u8; 4] = b"PQAN";

impl PeerRead {
    fn code(self) -> u8 {
        match self {
            PeerRead::Series => 0,
            PeerRead::Totals => 1,
            PeerRead::Merge => 2,
            PeerRead::Select => 3,
        }
    }

    fn of_code(code: u8) -> Option<Self> {
        Some(match code {
            0 => PeerRead::Series,
            1 => PeerRead::Totals,
            2 => PeerRead::Merge,
            3 => PeerRead::Select,
            _ => return None,
        })
    }
}

fn op_code(op: MatchOp) -> u8 {
    match op {
        MatchOp::Equal => 0,
        MatchOp::NotEqual => 1,
        MatchOp::Re => 2,
        MatchOp::NotRe => 3,
    }
}

fn op_of_code(code: u8) -> Option<MatchOp> {
    Some(match code {
        0 => MatchOp::Equal,
        1 => MatchOp::NotEqual,
        2 => MatchOp::Re,
        3 => MatchOp::NotRe,
        _ => return None,
    })
}

/// Bytes that do not decode as a request or an answer.
fn bad(what: &str, e: impl std::fmt::Display) -> Error {
    Error::PeerWire {
        what: format!("{what}: {e}"),
    }
}

impl PeerRequest {
    /// The request's bytes, sealed (magic, version, checksum).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![self.read.code()];
        put_ivarint(&mut out, self.min_ms);
        put_ivarint(&mut out, self.max_ms);
        put_uvarint(&mut out, self.matchers.len() as u64);
        for m in &self.matchers {
            out.push(op_code(m.op));
            put_str(&mut out, &m.name);
            put_str(&mut out, &m.value);
        }
        encoding::seal(REQUEST_MAGIC, &mut out);
        out
    }

    /// Reads a request written by [`PeerRequest::encode`]; an error names what is wrong.
    pub fn decode(bytes: &[u8]) -> Result<PeerRequest, Error> {
        let body = encoding::unseal(REQUEST_MAGIC, bytes).map_err(|e| bad("request", e))?;
        let mut r = Reader::new(body);
        let wire = |e| bad("request", e);
        let read = PeerRead::of_code(r.u8().map_err(wire)?)
            .ok_or_else(|| bad("request", "unknown read kind"))?;
        let min_ms = r.ivarint().map_err(wire)?;
        let max_ms = r.ivarint().map_err(wire)?;
        let n = r.count(3, "matcher").map_err(wire)?;
        let mut matchers = Vec::with_capacity(n);
        for _ in 0..n {
            let op = op_of_code(r.u8().map_err(wire)?)
                .ok_or_else(|| bad("request", "unknown matcher operator"))?;
            let name = r.str().map_err(wire)?;
            let value = r.str().map_err(wire)?;
            matchers.push(Matcher::new(op, name, value)?);
        }
        Ok(PeerRequest {
            read,
            matchers,
            min_ms,
            max_ms,
        })
    }
}

impl PeerAnswer {
    /// The answer's bytes: tables, then per series its labels, meta, profile headers and
    /// samples, zstd-compressed and sealed.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        encoding::encode_tables(&self.tables, TableCounts::empty(), &mut out);
        put_uvarint(&mut out, self.series.len() as u64);
        for s in &self.series {
            put_uvarint(&mut out, s.labels.len() as u64);
            for l in s.labels.iter() {
                put_str(&mut out, &l.name);
                put_str(&mut out, &l.value);
            }
            let m = &s.meta;
            for t in [&m.sample_type, &m.period_type] {
                put_str(&mut out, &t.kind);
                put_str(&mut out, &t.unit);
            }
            put_uvarint(&mut out, m.comments.len() as u64);
            for c in &m.comments {
                put_str(&mut out, c);
            }
            put_str(&mut out, &m.drop_frames);
            put_str(&mut out, &m.keep_frames);
            put_uvarint(&mut out, s.profiles.len() as u64);
            for p in &s.profiles {
                put_ivarint(&mut out, p.point.timestamp_ms);
                put_ivarint(&mut out, p.point.total);
                put_ivarint(&mut out, p.point.period);
                put_ivarint(&mut out, p.point.duration_nanos);
                put_uvarint(&mut out, p.capture_id);
            }
            put_uvarint(&mut out, s.samples.len() as u64);
            for samples in &s.samples {
                encoding::encode_samples(samples, &mut out);
            }
        }
        // A flag byte says how the body is stored: 1 zstd, 0 as is (zstd fails only when it
        // cannot allocate).
        let mut sealed = match zstd::bulk::compress(&out, 1) {
            Ok(compressed) => {
                let mut v = Vec::with_capacity(compressed.len() + 1 + encoding::FOOTER_BYTES);
                v.push(1);
                v.extend_from_slice(&compressed);
                v
            }
            Err(_) => {
                let mut v = Vec::with_capacity(out.len() + 1 + encoding::FOOTER_BYTES);
                v.push(0);
                v.extend_from_slice(&out);
                v
            }
        };
        encoding::seal(ANSWER_MAGIC, &mut sealed);
        sealed
    }

    /// Reads an answer written by [`PeerAnswer::encode`], checking every id against the tables;
    /// at most `max_bytes` once decompressed. An error names what is wrong.
    #[expect(
        clippy::too_many_lines,
        reason = "reads a shard's answer in the order the wire format writes it"
    )]
    pub fn decode(bytes: &[u8], max_bytes: usize) -> Result<PeerAnswer, Error> {
        let body = encoding::unseal(ANSWER_MAGIC, bytes).map_err(|e| bad("answer", e))?;
        let raw;
        let body = match body.split_first() {
            Some((0, rest)) => rest,
            Some((1, rest)) => {
                raw = zstd::bulk::decompress(rest, max_bytes).map_err(|e| bad("answer", e))?;
                &raw[..]
            }
            _ => return Err(bad("answer", "unknown compression flag")),
        };
        let mut r = Reader::new(body);
        let wire = |e: encoding::DecodeError| bad("answer", e);
        let mut tables = Tables::new();
        encoding::decode_tables(&mut r, &mut tables).map_err(wire)?;
        let limits = IdLimits::of(&tables);
        let n_series = r.count(8, "series").map_err(wire)?;
        let mut series = Vec::with_capacity(n_series);
        for _ in 0..n_series {
            let n_labels = r.count(2, "label").map_err(wire)?;
            let mut pairs = Vec::with_capacity(n_labels);
            for _ in 0..n_labels {
                pairs.push((r.str().map_err(wire)?, r.str().map_err(wire)?));
            }
            let labels = Labels::new(pairs)?;
            let value_type = |r: &mut Reader<'_>| -> Result<ValueType, Error> {
                Ok(ValueType {
                    kind: r.str().map_err(wire)?.to_owned(),
                    unit: r.str().map_err(wire)?.to_owned(),
                })
            };
            let sample_type = value_type(&mut r)?;
            let period_type = value_type(&mut r)?;
            let n_comments = r.count(1, "comment").map_err(wire)?;
            let mut comments = Vec::with_capacity(n_comments);
            for _ in 0..n_comments {
                comments.push(r.str().map_err(wire)?.to_owned());
            }
            let drop_frames = r.str().map_err(wire)?.to_owned();
            let keep_frames = r.str().map_err(wire)?.to_owned();
            let n_profiles = r.count(5, "profile").map_err(wire)?;
            let mut profiles = Vec::with_capacity(n_profiles);
            for _ in 0..n_profiles {
                let timestamp_ms = r.ivarint().map_err(wire)?;
                let total = r.ivarint().map_err(wire)?;
                profiles.push(PeerProfile {
                    // A shard answers with its stored profiles, never summaries.
                    point: TotalPoint {
                        timestamp_ms,
                        total,
                        period: r.ivarint().map_err(wire)?,
                        duration_nanos: r.ivarint().map_err(wire)?,
                        latest_total: total,
                    },
                    capture_id: r.uvarint().map_err(wire)?,
                });
            }
            let n_samples = r.count(5, "sample set").map_err(wire)?;
            let mut samples = Vec::with_capacity(n_samples);
            for _ in 0..n_samples {
                samples.push(encoding::decode_samples(&mut r, limits).map_err(wire)?);
            }
            series.push(PeerSeries {
                labels,
                meta: Meta {
                    sample_type,
                    period_type,
                    comments,
                    drop_frames,
                    keep_frames,
                    ..Meta::default()
                },
                profiles,
                samples,
            });
        }
        if !r.is_empty() {
            return Err(bad(
                "answer",
                format!("{} bytes after its end", r.remaining()),
            ));
        }
        Ok(PeerAnswer {
            tables: Arc::new(tables),
            series,
        })
    }
}

/// How a querier splits its reads between the bucket and the shards, for one query.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    /// Per shard asked (index in [`Peers::stores`]): from when it is read.
    pub asks: Vec<(usize, i64)>,
    /// Bucket blocks of a shard, by name: only their profiles before this time are read (the
    /// shard answers for the rest).
    pub clamps: rustc_hash::FxHashMap<String, i64>,
    /// Shards that cannot be read, and why.
    pub warnings: Vec<String>,
}

impl Plan {
    /// Splits `[min_ms, max_ms]` per shard at the time before which the bucket holds all its
    /// profiles *and this querier sees them*: the shard's shipped horizon, moved back to the
    /// start of any block it shipped that `seen` (names of blocks read here, and the blocks
    /// they replaced) does not hold yet. `remote` are the bucket's blocks: (name, external
    /// labels).
    pub fn new<'b>(
        stores: Vec<Result<PeerStore, String>>,
        remote: impl Iterator<Item = (&'b str, &'b BTreeMap<String, String>)> + Clone,
        seen: &std::collections::HashSet<&str>,
        min_ms: i64,
        max_ms: i64,
    ) -> Plan {
        let mut plan = Plan::default();
        for (i, store) in stores.into_iter().enumerate() {
            let store = match store {
                Ok(s) => s,
                Err(why) => {
                    plan.warnings.push(why);
                    continue;
                }
            };
            let mut from = store.shipped_until_ms.unwrap_or(i64::MIN);
            for (name, start) in &store.shipped_blocks {
                if !seen.contains(name.as_str()) {
                    from = from.min(*start);
                }
            }
            let mut lists_its_blocks = false;
            for (name, labels) in remote.clone() {
                if *labels == store.external_labels {
                    plan.clamps.insert(name.to_owned(), from);
                    lists_its_blocks = true;
                }
            }
            // Only the bucket holds some of the shard's profiles, and none of its blocks is
            // listed here.
            if !lists_its_blocks && store.only_in_bucket > 0 && from > min_ms {
                plan.warnings.push(format!(
                    "shard {} says {} of its blocks are only in the object store, and this server \
                     lists none of its blocks there (external labels {:?}): its profiles before \
                     {from} ms are missing from this answer; check that both name the same bucket \
                     and prefix",
                    store.name, store.only_in_bucket, store.external_labels
                ));
            }
            if from <= max_ms {
                plan.asks.push((i, from.max(min_ms)));
            }
        }
        plan
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::corpus;

    #[test]
    fn requests_and_answers_read_back_as_written() {
        let request = PeerRequest {
            read: PeerRead::Merge,
            matchers: vec![
                Matcher::new(MatchOp::Equal, "__name__", "cpu").unwrap(),
                Matcher::new(MatchOp::Re, "job", "a|b").unwrap(),
            ],
            min_ms: -5,
            max_ms: 1_000,
        };
        let back = PeerRequest::decode(&request.encode()).unwrap();
        assert_eq!(back.read, PeerRead::Merge);
        assert_eq!((back.min_ms, back.max_ms), (-5, 1_000));
        assert_eq!(back.matchers.len(), 2);
        assert!(back.matchers[1].matches("b") && !back.matchers[1].matches("c"));

        let profile = corpus("go/go-cpu.pb.gz", "cpu");
        let answer = PeerAnswer {
            tables: Arc::clone(&profile.tables),
            series: vec![PeerSeries {
                labels: Labels::new([("__name__", "cpu"), ("job", "a")]).unwrap(),
                meta: profile.meta.clone(),
                profiles: vec![PeerProfile {
                    point: TotalPoint {
                        timestamp_ms: 7,
                        total: 42,
                        period: 10,
                        duration_nanos: 1_000_000_000,
                        latest_total: 42,
                    },
                    capture_id: 99,
                }],
                samples: vec![profile.samples.clone()],
            }],
        };
        let bytes = answer.encode();
        let back = PeerAnswer::decode(&bytes, 1 << 20).unwrap();
        assert_eq!(back.series.len(), 1);
        let s = &back.series[0];
        assert_eq!(s.labels, answer.series[0].labels);
        assert_eq!(s.meta.sample_type, profile.meta.sample_type);
        assert_eq!(s.profiles, answer.series[0].profiles);
        let as_profile = |tables: &Arc<Tables>, samples: &Samples| parca_profile::Profile {
            tables: Arc::clone(tables),
            meta: profile.meta.clone(),
            samples: samples.clone(),
        };
        assert_eq!(
            crate::test_support::canonical(&as_profile(&back.tables, &s.samples[0])),
            crate::test_support::canonical(&profile)
        );

        let mut damaged = bytes.clone();
        let mid = damaged.len() / 2;
        damaged[mid] ^= 0xff;
        let e = PeerAnswer::decode(&damaged, 1 << 20)
            .unwrap_err()
            .to_string();
        assert!(e.contains("checksum"), "{e}");
        assert!(
            PeerAnswer::decode(&bytes, 16).is_err(),
            "the size bound holds"
        );
    }

    #[test]
    fn a_shard_is_read_from_its_horizon_or_from_a_shipped_block_the_bucket_does_not_show() {
        let labels = |shard: &str| BTreeMap::from([("shard".to_owned(), shard.to_owned())]);
        let (a, b) = (labels("a"), labels("b"));
        let store = |name: &str, ext: &BTreeMap<String, String>, until, shipped: &[(&str, i64)]| {
            Ok(PeerStore {
                name: name.into(),
                external_labels: ext.clone(),
                shipped_until_ms: until,
                shipped_blocks: shipped.iter().map(|(n, t)| ((*n).to_owned(), *t)).collect(),
                only_in_bucket: 1,
            })
        };
        let remote = [("A1", &a), ("A2", &a), ("B1", &b)];
        let seen: std::collections::HashSet<&str> = ["A1", "A2", "B1"].into();
        let plan = Plan::new(
            vec![
                store("a", &a, Some(4_000), &[("A2", 2_000)]),
                store("b", &b, Some(2_000), &[("B2", 2_000), ("B1", 0)]),
                Err("c is down".into()),
            ],
            remote.iter().map(|(n, l)| (*n, *l)),
            &seen,
            1_000,
            10_000,
        );
        assert_eq!(plan.asks, vec![(0, 4_000), (1, 2_000)]);
        assert_eq!(plan.clamps["A1"], 4_000);
        assert_eq!(plan.clamps["B1"], 2_000);
        assert_eq!(plan.warnings, vec!["c is down".to_owned()]);

        // A2 shipped but not listed here yet: the shard answers from its start.
        let seen: std::collections::HashSet<&str> = ["A1"].into();
        let plan = Plan::new(
            vec![store("a", &a, Some(4_000), &[("A2", 2_000)])],
            remote[..1].iter().map(|(n, l)| (*n, *l)),
            &seen,
            0,
            10_000,
        );
        assert_eq!(plan.asks, vec![(0, 2_000)]);
        assert_eq!(plan.clamps["A1"], 2_000);

        // A shard whose blocks this store does not list (another bucket or prefix): said.
        let plan = Plan::new(
            vec![store("b", &b, Some(2_000), &[])],
            remote[..2].iter().map(|(n, l)| (*n, *l)),
            &seen,
            0,
            10_000,
        );
        assert!(
            plan.warnings[0].contains("lists none of its blocks"),
            "{:?}",
            plan.warnings
        );
        let plan = Plan::new(
            vec![store("b", &b, Some(2_000), &[])],
            remote[..2].iter().map(|(n, l)| (*n, *l)),
            &seen,
            2_000,
            10_000,
        );
        assert!(
            plan.warnings.is_empty(),
            "the window starts where the shard answers"
        );

        // A window the bucket covers asks nothing of the shard.
        let plan = Plan::new(
            vec![store("a", &a, Some(4_000), &[])],
            remote.iter().map(|(n, l)| (*n, *l)),
            &seen,
            0,
            3_000,
        );
        assert!(plan.asks.is_empty());
    }

    /// Shards answered in this process, through the wire format both ways.
    struct InProcess {
        shards: Vec<(Arc<crate::Db>, BTreeMap<String, String>)>,
        down: std::sync::atomic::AtomicBool,
    }

    impl Peers for InProcess {
        fn stores(&self) -> Vec<Result<PeerStore, String>> {
            self.shards
                .iter()
                .enumerate()
                .map(|(i, (db, labels))| {
                    Ok(PeerStore {
                        name: format!("shard {i}"),
                        external_labels: labels.clone(),
                        shipped_until_ms: db.shipped_until(),
                        shipped_blocks: db.shipped_blocks(),
                        only_in_bucket: db.shipped_only_in_bucket(),
                    })
                })
                .collect()
        }

        fn read(&self, asks: &[(usize, PeerRequest)]) -> Vec<Result<PeerAnswer, String>> {
            asks.iter()
                .map(|(i, request)| {
                    if self.down.load(std::sync::atomic::Ordering::Relaxed) {
                        return Err(format!("shard {i} is down"));
                    }
                    let request = PeerRequest::decode(&request.encode()).expect("request");
                    let answer = self.shards[*i]
                        .0
                        .local_querier(request.min_ms, request.max_ms)
                        .peer_answer(request.read, &request.matchers)
                        .expect("answer");
                    Ok(PeerAnswer::decode(&answer.encode(), 1 << 30).expect("decodes"))
                })
                .collect()
        }
    }

    /// [`crate::test_support::answers`] without the samples count, which counts this store's
    /// own samples only, and with a merge grouped by job.
    fn answers(db: &crate::Db, ranges: &[(i64, i64)]) -> Vec<String> {
        let mut out: Vec<String> = crate::test_support::answers(db, ranges)
            .into_iter()
            .filter(|l| !l.starts_with("n_samples"))
            .collect();
        for &(min, max) in ranges {
            let groups = db
                .querier(min, max)
                .merge_grouped(&[], |l| {
                    (
                        l.get("__name__").map(str::to_owned),
                        l.get("job").map(str::to_owned),
                    )
                })
                .expect("merge");
            for g in groups {
                out.push(format!(
                    "group {:?} {} {} {} {:?}",
                    g.key,
                    g.n_profiles,
                    g.profile.meta.duration_nanos,
                    g.profile.meta.time_nanos,
                    crate::test_support::canonical(&g.profile)
                ));
            }
        }
        out
    }

    #[test]
    fn a_querier_over_the_bucket_and_a_shards_own_store_answers_as_one_store() {
        use crate::test_support::fill;
        const RANGES: [(i64, i64); 5] = [
            (i64::MIN, i64::MAX),
            (0, 999),
            (950, 5050),
            (2500, 2500),
            (4_000, i64::MAX),
        ];
        let options = |block_duration_ms, ship_blocks| crate::Options {
            block_duration_ms,
            retention_ms: 0,
            ship_blocks,
            ..crate::Options::default()
        };
        let all = tempfile::tempdir().expect("tempdir");
        let one = crate::Db::open(all.path(), options(i64::MAX / 4, false)).expect("open");
        fill(&one, 1, 0, 12_000);
        let want = answers(&one, &RANGES);

        let shard_dir = tempfile::tempdir().expect("tempdir");
        let shard = Arc::new(crate::Db::open(shard_dir.path(), options(1000, true)).expect("open"));
        fill(&shard, 1, 0, 12_000);
        shard.compact().expect("cut");
        let blocks = shard.blocks();
        assert!(blocks.len() >= 5, "{} blocks", blocks.len());
        // The first three blocks are shipped, the fourth too but not listed by the querier yet.
        let labels = BTreeMap::from([("shard".to_owned(), "a".to_owned())]);
        let bucket = tempfile::tempdir().expect("bucket");
        let remote = in_bucket(&blocks[..3], &labels, bucket.path());
        shard.mark_shipped(blocks[..4].iter().map(|b| b.name.clone()));
        assert_eq!(shard.shipped_until(), Some(blocks[4].min_time_ms));

        let empty = tempfile::tempdir().expect("tempdir");
        let querier = crate::Db::open(empty.path(), options(1000, false)).expect("open");
        querier.set_remote_blocks(remote);
        let peers = Arc::new(InProcess {
            shards: vec![(Arc::clone(&shard), labels.clone())],
            down: Default::default(),
        });
        querier.set_peers(Arc::clone(&peers) as Arc<dyn Peers>);
        let got = answers(&querier, &RANGES);
        for (i, (a, b)) in want.iter().zip(&got).enumerate() {
            assert_eq!(a, b, "answer {i} differs");
        }
        assert_eq!(want.len(), got.len());
        assert!(querier.querier(0, i64::MAX).warnings().is_empty());

        // A shard that does not answer: what it holds is missing, and the answer says so.
        peers.down.store(true, std::sync::atomic::Ordering::Relaxed);
        let q = querier.querier(0, i64::MAX);
        let totals = q.totals(&[]).expect("totals");
        let n: usize = totals.iter().map(|s| s.points.len()).sum();
        assert_eq!(
            n,
            4 * 30,
            "the bucket's three blocks of 10 profiles a series"
        );
        assert_eq!(q.warnings(), vec!["shard 0 is down".to_owned()]);
        // The bucket alone covers an early window: the shard is not asked.
        let q = querier.querier(0, 999);
        let cpu = Matcher::new(MatchOp::Equal, crate::NAME_LABEL, "cpu").expect("valid");
        assert!(q.merge(&[cpu]).expect("merge").is_some());
        assert!(q.warnings().is_empty());

        // A block that failed to upload, with a later one shipped: the shard answers from the
        // failed one's start, and the later one in the bucket is not read at all.
        let shard_dir = tempfile::tempdir().expect("tempdir");
        let shard = Arc::new(crate::Db::open(shard_dir.path(), options(1000, true)).expect("open"));
        fill(&shard, 1, 0, 12_000);
        shard.compact().expect("cut");
        let blocks = shard.blocks();
        let shipped = [&blocks[0], &blocks[1], &blocks[3]];
        shard.mark_shipped(shipped.iter().map(|b| b.name.clone()));
        assert_eq!(shard.shipped_until(), Some(blocks[2].min_time_ms));
        let bucket = tempfile::tempdir().expect("bucket");
        let shipped: Vec<crate::BlockInfo> = shipped.into_iter().cloned().collect();
        let remote = in_bucket(&shipped, &labels, bucket.path());
        let empty = tempfile::tempdir().expect("tempdir");
        let querier = crate::Db::open(empty.path(), options(1000, false)).expect("open");
        querier.set_remote_blocks(remote);
        querier.set_peers(Arc::new(InProcess {
            shards: vec![(Arc::clone(&shard), labels)],
            down: Default::default(),
        }));
        assert_eq!(answers(&querier, &RANGES), want);
    }

    /// Copies of `blocks` in a bucket folder as a shard with `labels` ships them, opened as the
    /// bucket reader opens them (profile data by ranges).
    fn in_bucket(
        blocks: &[crate::BlockInfo],
        labels: &BTreeMap<String, String>,
        bucket: &std::path::Path,
    ) -> Vec<crate::LazyBlock> {
        blocks
            .iter()
            .map(|b| {
                let dir = bucket.join(&b.name);
                std::fs::create_dir_all(&dir).expect("mkdir");
                std::fs::write(
                    dir.join("meta.json"),
                    crate::meta_for_upload(&b.dir, labels).expect("meta"),
                )
                .expect("write");
                for file in ["index", "symbols"] {
                    std::fs::copy(b.dir.join(file), dir.join(file)).expect("copy");
                }
                let profiles = Arc::new(crate::test_support::MemRanges {
                    bytes: std::fs::read(b.dir.join("profiles")).expect("profiles"),
                    read: Default::default(),
                });
                crate::RemoteBlock::open(&dir, profiles)
                    .expect("opens")
                    .into()
            })
            .collect()
    }
}
