//! Downsampled summaries: per series and block, the profiles of every 5-minute, hour and day
//! window summed into one, written beside the profiles when compaction writes a block (format
//! 5; blocks of [`SUMMARIZED_BLOCK_MS`] or longer).
//!
//! A read of a long window (a week's flame graph, a month's metrics graph at one point an hour)
//! reads the day summaries for the days the window holds whole, hour summaries for the hours
//! around them, 5-minute summaries around those, and stored profiles only for the minutes at
//! its edges:
//! the answer is the same as from every profile, to the sample. Windows are aligned to the
//! epoch and closed at their end, `(end - resolution, end]`, as a range query's steps are, so a
//! step of a metrics graph aligned to a resolution is a whole number of windows.
//!
//! Every window keeps the sum of its profiles (values, durations, totals: what a merge needs,
//! for every profile type) and the total of its latest profile (what a graph of a snapshot type
//! such as memory in use shows). A level is written only where it saves reading: when its
//! windows hold on average [`MIN_PROFILES_PER_WINDOW`] profiles (or finer windows) or more, and
//! at most a quarter of their pairs ([`MIN_PAIRS_FOLD`]); and only for series that hold enough
//! in the block for a read of every profile to cost something ([`MIN_PROFILES_SUMMARIZED`],
//! [`MIN_PAIRS_SUMMARIZED`]): a pod that lived five minutes is read whole.

use parca_profile::Samples;
use parca_profile::tables::{LabelSetId, StackId};
use rustc_hash::FxHashMap;

use crate::block_profile::BlockProfile;
use crate::encoding::{self, IdLimits, NoSelect, Reader, SpanSelect};

/// The resolutions of the summaries, finest first: 5 minutes, 1 hour and 1 day (days for the
/// reads of weeks and months: a week of a fleet is then a few summaries per series).
pub const SUMMARY_RESOLUTIONS_MS: [i64; 3] = [5 * 60_000, 60 * 60_000, 24 * 60 * 60_000];

/// Blocks spanning this long or longer get summaries: those compaction writes (from three
/// block durations of 2 hours on), and imports of windows this long; not the blocks cut from
/// the head every block duration, which a long read finds few of (as Thanos downsamples only
/// blocks that compaction has made large).
pub(crate) const SUMMARIZED_BLOCK_MS: i64 = 6 * 60 * 60_000;

/// Whether a block over `range` (`[min, max)`, milliseconds) gets summaries.
pub(crate) fn summarizes((min_ms, max_ms): (i64, i64)) -> bool {
    max_ms.saturating_sub(min_ms) >= SUMMARIZED_BLOCK_MS
}

/// A level is written only when its windows hold at most a quarter of the (stack, value) pairs
/// of what they sum (profiles, or the finer level's windows): so summaries add at most a
/// quarter to the bytes of the profiles they sum, and a level is read only when it makes a read
/// four times smaller. A series' 5-minute windows of profiles whose stacks seldom repeat are
/// then left out, its hours and days kept.
const MIN_PAIRS_FOLD: u64 = 4;

/// A level is written when its windows hold this many profiles (or windows of the level below)
/// each on average: below that, reading the level saves little over reading what it sums.
const MIN_PROFILES_PER_WINDOW: usize = 4;

/// A series is summarized in a block only when it holds there at least this many profiles or
/// [`MIN_PAIRS_SUMMARIZED`] pairs. Below both, a read of every profile of the series in the
/// block is short, while its summaries would cost bytes out of proportion: on five minutes of
/// real 5-second scrapes (58 profiles a series, `tests/testdata/fleet`) they were 12% of the
/// block (0.12 of 1.12 bytes a sample) and saved 15 ms over all 85 series read whole (0.17 ms
/// a series; `cargo bench -p parca-ingest --bench bytes_per_sample`). 120 is ten minutes of 5-second scrapes; the
/// long-lived series that long reads are made of hold thousands.
const MIN_PROFILES_SUMMARIZED: usize = 120;

/// See [`MIN_PROFILES_SUMMARIZED`]: a short series of large profiles (tens of thousands of
/// stacks summed) is still summarized.
const MIN_PAIRS_SUMMARIZED: u64 = 1 << 16;

/// The end of the window of resolution `r` that time `t` falls in: the smallest multiple of
/// `r` at or after `t` (windows are `(end - r, end]`).
pub(crate) fn window_end(t: i64, r: i64) -> i64 {
    let down = t.div_euclid(r).saturating_mul(r);
    if down == t { t } else { down.saturating_add(r) }
}

/// The largest multiple of `r` at or before `t`.
fn floor_to(t: i64, r: i64) -> i64 {
    t.div_euclid(r).saturating_mul(r)
}

/// One level of a series' summaries in a block: its resolution and its windows, one profile
/// each (header and encoded samples), in time order.
pub(crate) struct Level {
    pub resolution_ms: i64,
    pub windows: Vec<(BlockProfile, Vec<u8>)>,
}

/// Sums of values per stack of one set of tables (reused across windows and groups): a dense
/// array by stack id, the ids touched, and the rare samples with labels apart.
#[derive(Default)]
pub(crate) struct StackSums {
    pub dense: Vec<i64>,
    /// The ids of `dense` to read back and reset.
    pub touched: Vec<u32>,
    pub labelled: FxHashMap<(StackId, LabelSetId), i64>,
}

impl StackSums {
    /// The samples summed so far, leaving the sums empty for the next use.
    pub fn take(&mut self) -> Samples {
        let mut samples = Samples::default();
        // In stack-id order, as a dense scan would give; an id touched again after summing to
        // zero appears twice and is read once.
        self.touched.sort_unstable();
        for &s in &self.touched {
            let v = std::mem::take(&mut self.dense[s as usize]);
            if v != 0 {
                samples.stacks.push(StackId(s));
                samples.labels.push(LabelSetId::EMPTY);
                samples.values.push(v);
            }
        }
        self.touched.clear();
        for ((s, l), v) in self.labelled.drain() {
            samples.stacks.push(s);
            samples.labels.push(l);
            samples.values.push(v);
        }
        samples
    }

    /// Adds the samples of one profile encoded by [`encoding::encode_samples`] (of the spans
    /// `spans` selects, with a selection). Always inlined: the per-sample loop of every merge.
    #[inline(always)]
    pub fn add_encoded(
        &mut self,
        bytes: &[u8],
        limits: IdLimits,
        spans: Option<&impl SpanSelect>,
    ) -> encoding::Result<()> {
        // The head's tables grow between holds of its lock: so may its stack ids.
        if self.dense.len() < limits.n_stacks as usize {
            self.dense.resize(limits.n_stacks as usize, 0);
        }
        let StackSums {
            dense,
            touched,
            labelled,
        } = self;
        let each = |s: StackId, l: LabelSetId, v: i64| {
            if l == LabelSetId::EMPTY {
                let slot = &mut dense[s.idx()];
                if *slot == 0 {
                    touched.push(s.0);
                }
                *slot = slot.wrapping_add(v);
            } else {
                add_labelled(labelled, s, l, v);
            }
        };
        let mut r = Reader::new(bytes);
        // Without a span selection, the merge's loop is the one it always was.
        match spans {
            None => encoding::for_each_sample(&mut r, limits, each),
            Some(select) => encoding::for_each_sample_in(&mut r, limits, Some(select), each),
        }
    }
}

/// The rare labelled sample of a sum, kept out of the per-sample loop so that the loop's common
/// case inlines (with the hash map in it, it did not, and merges ran 1.6 times slower).
#[inline(never)]
pub(crate) fn add_labelled(
    labelled: &mut FxHashMap<(StackId, LabelSetId), i64>,
    s: StackId,
    l: LabelSetId,
    v: i64,
) {
    let slot = labelled.entry((s, l)).or_insert(0);
    *slot = slot.wrapping_add(v);
}

/// The summaries of one series' profiles (`profiles`, in time order, as header and encoded
/// samples in the ids that `limits` bound): each level that saves reading, finest first. The
/// level above the finest sums the finest's windows.
pub(crate) fn summarize(
    profiles: &[(BlockProfile, &[u8])],
    limits: IdLimits,
    sums: &mut StackSums,
) -> encoding::Result<Vec<Level>> {
    let mut levels: Vec<Level> = Vec::new();
    // What a read would read without the next level: the profiles, or the finer level (their
    // number, and their pairs).
    let mut below = profiles.len();
    let mut below_pairs: u64 = profiles.iter().map(|(p, _)| u64::from(p.n_samples)).sum();
    if below < MIN_PROFILES_SUMMARIZED && below_pairs < MIN_PAIRS_SUMMARIZED {
        return Ok(levels);
    }
    for r in SUMMARY_RESOLUTIONS_MS {
        let n_windows = count_windows(profiles.iter().map(|(p, _)| p.timestamp_ms), r);
        if n_windows == 0 || n_windows * MIN_PROFILES_PER_WINDOW > below {
            continue;
        }
        let windows = match levels.last() {
            Some(finer) => {
                let inputs: Vec<(BlockProfile, &[u8])> = finer
                    .windows
                    .iter()
                    .map(|(p, b)| (*p, b.as_slice()))
                    .collect();
                sum_windows(&inputs, r, limits, sums)?
            }
            None => sum_windows(profiles, r, limits, sums)?,
        };
        let pairs: u64 = windows.iter().map(|(p, _)| u64::from(p.n_samples)).sum();
        if pairs * MIN_PAIRS_FOLD > below_pairs {
            // The windows hold nearly every stack of their profiles (stacks that seldom
            // repeat): the level would cost bytes and save little reading.
            continue;
        }
        below = windows.len();
        below_pairs = pairs;
        levels.push(Level {
            resolution_ms: r,
            windows,
        });
    }
    Ok(levels)
}

/// The number of windows of resolution `r` that times `ts` (ascending) fall in.
fn count_windows(ts: impl Iterator<Item = i64>, r: i64) -> usize {
    let mut n = 0;
    let mut last = None;
    for t in ts {
        let end = window_end(t, r);
        if last != Some(end) {
            n += 1;
            last = Some(end);
        }
    }
    n
}

/// Sums `inputs` (in time order) per window of resolution `r`.
fn sum_windows(
    inputs: &[(BlockProfile, &[u8])],
    r: i64,
    limits: IdLimits,
    sums: &mut StackSums,
) -> encoding::Result<Vec<(BlockProfile, Vec<u8>)>> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < inputs.len() {
        let end_ms = window_end(inputs[start].0.timestamp_ms, r);
        let n = inputs[start..]
            .iter()
            .take_while(|(p, _)| p.timestamp_ms <= end_ms)
            .count();
        let window = &inputs[start..start + n];
        start += n;
        let mut header = BlockProfile {
            timestamp_ms: end_ms,
            latest_total: window[n - 1].0.latest_total,
            ..BlockProfile::default()
        };
        let mut captures = Captures::default();
        for (p, bytes) in window {
            sums.add_encoded(bytes, limits, None::<&NoSelect>)?;
            header.duration_nanos = header.duration_nanos.saturating_add(p.duration_nanos);
            header.period = header.period.max(p.period);
            header.merged = header.merged.saturating_add(p.merged);
            captures.add(p.capture_id);
        }
        header.capture_id = captures.id();
        let samples = sums.take();
        let mut data = Vec::new();
        header.total = encoding::encode_samples(&samples, &mut data);
        header.n_samples = samples.len() as u32;
        header.len = data.len() as u32;
        out.push((header, data));
    }
    Ok(out)
}

/// The capture id of a summary: one number for the set of captures it sums, the same in every
/// series those captures were split into (a heap profile's four sample types), so that a merge
/// of those series counts the captures' durations once, as it does for the profiles themselves.
/// 0 (unknown) if any capture is unknown.
#[derive(Default)]
struct Captures {
    hash: u64,
    unknown: bool,
}

impl Captures {
    fn add(&mut self, id: u64) {
        if id == 0 {
            self.unknown = true;
        }
        // Order-dependent on purpose: every series of a capture sees its captures in time order.
        self.hash = (self.hash.rotate_left(5) ^ id).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn id(&self) -> u64 {
        if self.unknown { 0 } else { self.hash.max(1) }
    }
}

/// A part of a read's window, and what covers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Part {
    /// The windows of level `level` whose ends lie in `(after, until]`.
    Level {
        level: usize,
        after: i64,
        until: i64,
    },
    /// The stored profiles in `(after, until]`.
    Profiles { after: i64, until: i64 },
}

/// How to read `(after, until]` from summaries of the given resolutions (index = level; only
/// those at most `max_resolution_ms` used): coarsest windows that fit whole in the middle,
/// finer ones around them, stored profiles at the edges. In time order.
pub(crate) fn plan(
    after: i64,
    until: i64,
    resolutions: &[i64],
    max_resolution_ms: i64,
) -> Vec<Part> {
    let mut usable: Vec<(usize, i64)> = resolutions
        .iter()
        .copied()
        .enumerate()
        .filter(|&(_, r)| r > 0 && r <= max_resolution_ms)
        .collect();
    usable.sort_by_key(|&(_, r)| std::cmp::Reverse(r));
    let mut out = Vec::new();
    plan_into(after, until, &usable, &mut out);
    out
}

fn plan_into(after: i64, until: i64, levels: &[(usize, i64)], out: &mut Vec<Part>) {
    if after >= until {
        return;
    }
    let Some((&(level, r), finer)) = levels.split_first() else {
        out.push(Part::Profiles { after, until });
        return;
    };
    let first_end = window_end(after, r);
    let last_end = floor_to(until, r);
    if first_end >= last_end {
        // No window of this level fits whole: `(after, first_end]` is the part of a window.
        return plan_into(after, until, finer, out);
    }
    plan_into(after, first_end, finer, out);
    out.push(Part::Level {
        level,
        after: first_end,
        until: last_end,
    });
    plan_into(last_end, until, finer, out);
}

#[cfg(test)]
#[allow(
    clippy::too_many_lines,
    reason = "tests are scenarios read top to bottom; the line budget is for product code"
)]
mod tests {
    use super::*;

    const M5: i64 = 300_000;
    const H1: i64 = 3_600_000;

    #[test]
    fn windows_end_on_multiples_of_their_resolution_and_hold_their_end() {
        assert_eq!(window_end(0, M5), 0);
        assert_eq!(window_end(1, M5), M5);
        assert_eq!(window_end(M5, M5), M5);
        assert_eq!(window_end(M5 + 1, M5), 2 * M5);
        assert_eq!(window_end(-1, M5), 0);
        assert_eq!(window_end(-M5 - 1, M5), -M5);
    }

    #[test]
    fn a_plan_takes_whole_hours_then_whole_5_minute_windows_then_profiles() {
        let levels = [M5, H1];
        // 00:02 to 03:07 (inclusive, as `(after, until]`).
        let after = 2 * 60_000 - 1;
        let until = 3 * H1 + 7 * 60_000;
        assert_eq!(
            plan(after, until, &levels, i64::MAX),
            vec![
                Part::Profiles { after, until: M5 },
                Part::Level {
                    level: 0,
                    after: M5,
                    until: H1
                },
                Part::Level {
                    level: 1,
                    after: H1,
                    until: 3 * H1
                },
                Part::Level {
                    level: 0,
                    after: 3 * H1,
                    until: 3 * H1 + M5
                },
                Part::Profiles {
                    after: 3 * H1 + M5,
                    until
                },
            ]
        );
        // Only 5-minute windows allowed.
        assert_eq!(
            plan(after, until, &levels, M5),
            vec![
                Part::Profiles { after, until: M5 },
                Part::Level {
                    level: 0,
                    after: M5,
                    until: 3 * H1 + M5
                },
                Part::Profiles {
                    after: 3 * H1 + M5,
                    until
                },
            ]
        );
        // Aligned: summaries only.
        assert_eq!(
            plan(0, 2 * H1, &levels, i64::MAX),
            vec![Part::Level {
                level: 1,
                after: 0,
                until: 2 * H1
            }]
        );
        // Too short for any window, or no level: profiles.
        assert_eq!(
            plan(10, 20, &levels, i64::MAX),
            vec![Part::Profiles {
                after: 10,
                until: 20
            }]
        );
        assert_eq!(
            plan(0, 2 * H1, &[], i64::MAX),
            vec![Part::Profiles {
                after: 0,
                until: 2 * H1
            }]
        );
    }

    /// One profile's samples, a value of 3 for each stack of `stacks`, encoded.
    fn encoded(stacks: impl Iterator<Item = u32>) -> Vec<u8> {
        let mut samples = Samples::default();
        for k in stacks {
            samples.stacks.push(StackId(k));
            samples.labels.push(LabelSetId::EMPTY);
            samples.values.push(3);
        }
        let mut bytes = Vec::new();
        encoding::encode_samples(&samples, &mut bytes);
        bytes
    }

    /// A stored profile at `t` of `n_samples` pairs, encoded as `bytes`.
    fn stored(t: i64, n_samples: u32, bytes: &[u8]) -> (BlockProfile, &[u8]) {
        let header = BlockProfile {
            timestamp_ms: t,
            duration_nanos: 10,
            period: 1,
            capture_id: t as u64 + 1,
            merged: 1,
            n_samples,
            len: bytes.len() as u32,
            ..BlockProfile::default()
        };
        (header, bytes)
    }

    /// Ids up to `n_stacks` stacks and the empty label set.
    fn stacks_up_to(n_stacks: u32) -> IdLimits {
        IdLimits {
            n_stacks,
            n_label_sets: 1,
        }
    }

    #[test]
    fn levels_are_written_only_where_they_save_reading() {
        let bytes = encoded(1..2);
        let total = 3;
        let limits = stacks_up_to(2);
        let mut sums = StackSums::default();
        let every = |step: i64, n: i64| -> Vec<(BlockProfile, &[u8])> {
            (1..=n)
                .map(|k| {
                    let (mut p, b) = stored(k * step, 1, &bytes);
                    p.total = total;
                    p.latest_total = total;
                    (p, b)
                })
                .collect()
        };
        // Every 10 s for two hours: both levels; the hour sums 360 profiles.
        let levels = summarize(&every(10_000, 720), limits, &mut sums).unwrap();
        assert_eq!(levels.len(), 2);
        assert_eq!(levels[0].windows.len(), 24);
        assert_eq!(levels[1].windows.len(), 2);
        let (hour, data) = &levels[1].windows[0];
        assert_eq!(
            (hour.timestamp_ms, hour.merged, hour.total),
            (H1, 360, 3 * 360)
        );
        assert_eq!(hour.duration_nanos, 3600);
        assert_eq!(hour.latest_total, 3);
        let mut decoded = Vec::new();
        encoding::for_each_sample(&mut Reader::new(data), limits, |s, _, v| {
            decoded.push((s, v))
        })
        .unwrap();
        assert_eq!(decoded, vec![(StackId(1), 3 * 360)]);
        // Every 2 minutes for 6 hours: 5-minute windows hold 2 or 3, not worth it; hours
        // hold 30, the day the 6 hours.
        let levels = summarize(&every(120_000, 180), limits, &mut sums).unwrap();
        let resolutions: Vec<i64> = levels.iter().map(|l| l.resolution_ms).collect();
        assert_eq!(resolutions, [H1, 24 * H1]);
        // Every 30 minutes for 60 hours: hours hold 2, not worth it; days hold 48.
        let levels = summarize(&every(1_800_000, 120), limits, &mut sums).unwrap();
        assert_eq!(levels.len(), 1);
        assert_eq!(levels[0].resolution_ms, 24 * H1);
        // Every 5 s for 9 minutes, a pod that lived that long: fewer profiles than a
        // summary is worth (its 5-minute windows would hold 60), read whole.
        assert!(
            summarize(&every(5_000, 108), limits, &mut sums)
                .unwrap()
                .is_empty()
        );
        // The same pod with a thousand stacks a profile: its windows save enough reading.
        let large = encoded(0..1_000);
        let pod: Vec<(BlockProfile, &[u8])> = (1..=108)
            .map(|k| stored(k * 5_000, 1_000, &large))
            .collect();
        let levels = summarize(&pod, stacks_up_to(1_000), &mut sums).unwrap();
        assert_eq!(levels.len(), 1);
        assert_eq!(levels[0].resolution_ms, M5);
        // Every 10 s for two hours, each profile a stack of its own: no window sums fewer
        // pairs than its profiles hold, so no level saves reading.
        let distinct: Vec<Vec<u8>> = (0..720u32).map(|k| encoded(k..k + 1)).collect();
        let profiles: Vec<(BlockProfile, &[u8])> = distinct
            .iter()
            .enumerate()
            .map(|(k, b)| stored((k as i64 + 1) * 10_000, 1, b))
            .collect();
        assert!(
            summarize(&profiles, stacks_up_to(720), &mut sums)
                .unwrap()
                .is_empty()
        );
        // Every 30 minutes for 1 hour: nothing.
        assert!(
            summarize(&every(1_800_000, 2), limits, &mut sums)
                .unwrap()
                .is_empty()
        );
    }

    mod store {
        use super::{H1, M5};
        use crate::test_support::{Lcg, canonical, corpus, series_labels, vary};
        use crate::{Db, MatchOp, Matcher, Options};

        /// A multiple of 54 hours: compaction's windows of 6 and 18 hours start there.
        const T0: i64 = 8_745 * 54 * H1;

        /// A store holding a CPU series and a heap series, a profile every 10 s for 10 hours,
        /// cut into blocks and compacted: the first 6 hours in a block with summaries, the
        /// next ones in blocks cut from the head (without) and in the head.
        fn store() -> (tempfile::TempDir, Db) {
            let dir = tempfile::tempdir().expect("tempdir");
            let options = Options {
                retention_ms: i64::MAX / 2,
                ..Options::default()
            };
            let db = Db::open(dir.path(), options).expect("open");
            let cpu = corpus("go/go-cpu.pb.gz", "cpu");
            let heap = corpus("go/go-heap.pb.gz", "inuse_space");
            let mut rng = Lcg(7);
            let mut t = T0 + 3_000;
            while t < T0 + 10 * H1 {
                let mut app = db.appender();
                app.append(&series_labels("cpu", "api", "a"), t, &vary(&cpu, &mut rng))
                    .expect("append");
                app.append(
                    &series_labels("heap", "api", "a"),
                    t,
                    &vary(&heap, &mut rng),
                )
                .expect("append");
                app.commit().expect("commit");
                t += 10_000;
            }
            db.compact().expect("compact");
            (dir, db)
        }

        fn job() -> Vec<Matcher> {
            vec![Matcher::new(MatchOp::Equal, "job", "api").expect("valid")]
        }

        #[test]
        fn merges_from_summaries_equal_merges_of_every_profile() {
            let (_dir, db) = store();
            assert!(db.stats().n_blocks >= 2, "{:?}", db.stats());
            let windows = [
                (T0 + 1, T0 + 4 * H1),
                (T0 + 123_457, T0 + 3 * H1 + 7 * 60_000 + 3_000),
                (T0 + M5 + 1, T0 + 2 * H1 + M5),
                (T0 + 90_000, T0 + 6 * H1 + 1_234),
                (i64::MIN / 2, i64::MAX / 2),
            ];
            for (min, max) in windows {
                for name in ["cpu", "heap"] {
                    let m = [Matcher::new(MatchOp::Equal, "__name__", name).expect("valid")];
                    let merge = |q: crate::Querier<'_>| {
                        let mut g = q.merge_grouped(&m, |_| ()).expect("merge");
                        assert_eq!(g.len(), 1);
                        let g = g.remove(0);
                        (
                            g.n_profiles,
                            g.profile.meta.duration_nanos,
                            g.profile.meta.period,
                            canonical(&g.profile),
                        )
                    };
                    let every = merge(db.querier(min, max));
                    let summarized = merge(db.querier(min, max).with_summaries(i64::MAX));
                    assert!(every.0 > 100, "{name} {min}..{max}: {} profiles", every.0);
                    assert_eq!(every, summarized, "{name} {min}..={max}");
                }
            }
            // The summaries are read: a week's worth of profiles of a window reads as few.
            let n = |q: crate::Querier<'_>| q.n_samples(&job()).expect("n_samples");
            let window = (T0 + 1, T0 + 4 * H1);
            assert!(
                n(db.querier(window.0, window.1).with_summaries(i64::MAX))
                    < n(db.querier(window.0, window.1)) / 10
            );
            // A selection by span reads every profile.
            let spans = vec![Matcher::new(MatchOp::Equal, "span_id", "").expect("valid")];
            assert_eq!(
                n(db.querier(window.0, window.1)
                    .with_summaries(i64::MAX)
                    .with_span_matchers(spans)),
                n(db.querier(window.0, window.1))
            );
        }

        #[test]
        fn totals_from_summaries_give_the_same_steps_as_every_profile() {
            let (_dir, db) = store();
            for r in [M5, H1] {
                let (min, max) = (T0 - r + 1, T0 + 6 * H1);
                let every = db.querier(min, max).totals(&job()).expect("totals");
                let summarized = db
                    .querier(min, max)
                    .with_summaries(r)
                    .totals(&job())
                    .expect("totals");
                assert_eq!(every.len(), 2);
                assert_eq!(summarized.len(), 2);
                for (e, s) in every.iter().zip(&summarized) {
                    assert_eq!(e.labels, s.labels);
                    assert!(
                        s.points.len() * 10 < e.points.len(),
                        "{} of {}",
                        s.points.len(),
                        e.points.len()
                    );
                    // Per step `(end - r, end]`: the sum, the count and the latest total.
                    let steps = |points: &[crate::TotalPoint]| {
                        let mut out: Vec<(i64, i64, i64, i64)> = Vec::new();
                        for p in points {
                            let end = super::super::window_end(p.timestamp_ms, r);
                            match out.last_mut() {
                                Some(last) if last.0 == end => {
                                    last.1 += p.total;
                                    last.2 += p.duration_nanos;
                                    last.3 = p.latest_total;
                                }
                                _ => out.push((end, p.total, p.duration_nanos, p.latest_total)),
                            }
                        }
                        out
                    };
                    assert_eq!(steps(&e.points), steps(&s.points), "{} at {r}", e.labels);
                }
            }
        }
    }
}
