//! The normalized profile: one sample type, columnar samples pointing into shared [`Tables`].

use std::fmt;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::spans::SampleSpans;
use crate::tables::{LabelSetId, LocationId, StackId, Tables};

/// A kind of value and its unit, e.g. `cpu` in `nanoseconds`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct ValueType {
    /// The kind, e.g. `cpu`, `alloc_space`, `samples`.
    pub kind: String,
    /// The unit, e.g. `nanoseconds`, `bytes`, `count`.
    pub unit: String,
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.kind, self.unit)
    }
}

/// What a profile measures and when: everything but the samples.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Meta {
    /// What each sample value measures.
    pub sample_type: ValueType,
    /// What one sampling period measures.
    pub period_type: ValueType,
    /// Sampling period in units of `period_type`.
    pub period: i64,
    /// Start of the profile, nanoseconds since the Unix epoch (0 when unknown).
    pub time_nanos: i64,
    /// Length of the window the profile covers; 0 for a snapshot.
    pub duration_nanos: i64,
    /// The producer's comments.
    pub comments: Vec<String>,
    /// The capture this profile came from: profiles split from one pprof by their labels (into
    /// several series) share it, so that a merge counts that pprof's duration once
    /// ([`CaptureDurations`]). 0: unknown (every profile counts).
    pub capture_id: u64,
    /// The producer's `drop_frames` regular expression (empty: none). Already applied when
    /// the profile was normalized; kept so that what is served says what was pruned.
    pub drop_frames: String,
    /// The producer's `keep_frames` regular expression (empty: none), as `drop_frames`.
    pub keep_frames: String,
}

/// The duration of a merge: the sum of the durations of the distinct captures merged, as
/// google/pprof gives when it merges the original files, however many series each capture was
/// split into.
#[derive(Debug, Clone, Default)]
pub struct CaptureDurations {
    seen: rustc_hash::FxHashSet<u64>,
}

impl CaptureDurations {
    /// What a profile of capture `capture_id` lasting `duration_nanos` adds to the merge: its
    /// duration the first time the capture is seen (always, for capture 0), 0 after.
    pub fn add(&mut self, capture_id: u64, duration_nanos: i64) -> i64 {
        if capture_id == 0 || self.seen.insert(capture_id) {
            duration_nanos
        } else {
            0
        }
    }

    /// The capture id a merge keeps: the one all its profiles share, else 0.
    pub fn merged_id(&self, first: u64) -> u64 {
        if self.seen.len() <= 1 { first } else { 0 }
    }
}

impl Meta {
    /// Whether profiles with these metas may be merged: same sample type and period type
    /// (google/pprof's rule).
    pub fn compatible(&self, other: &Meta) -> bool {
        self.sample_type == other.sample_type && self.period_type == other.period_type
    }

    pub(crate) fn describe(&self) -> String {
        format!("{} (period {})", self.sample_type, self.period_type)
    }
}

/// The samples of a profile, column by column. Row `i` is the sample
/// `(stacks[i], labels[i], values[i])`; in a normalized profile no two rows share both stack and
/// labels, and no value is 0.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Samples {
    /// Leaf node of each sample's stack.
    pub stacks: Vec<StackId>,
    /// Labels of each sample.
    pub labels: Vec<LabelSetId>,
    /// Value of each sample (for a diff: the comparison side).
    pub values: Vec<i64>,
    /// For a diff only: the base side's value of each sample.
    pub diff_base: Option<Vec<i64>>,
    /// The span (trace) each sample was taken in, when the producer said
    /// ([`SampleSpans`]); rows then are distinct by (stack, labels, span). Operations that
    /// combine samples leave it out.
    pub spans: Option<SampleSpans>,
}

impl Samples {
    /// Number of samples.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether there are no samples.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

/// A profile of one sample type: meta, and samples over interned tables.
///
/// The tables sit behind an `Arc` so that the profiles of one pprof (one per sample type), the
/// result of a stack filter, or many profiles of one store share them; operations on profiles
/// that share tables never touch symbols.
#[derive(Debug, Clone)]
pub struct Profile {
    /// Symbols and stacks the samples point into.
    pub tables: Arc<Tables>,
    /// Sample type, period, time.
    pub meta: Meta,
    /// The samples.
    pub samples: Samples,
}

impl Profile {
    /// The sum of all sample values (for a diff, of the comparison side).
    pub fn total(&self) -> i64 {
        self.samples
            .values
            .iter()
            .fold(0i64, |a, &v| a.wrapping_add(v))
    }

    /// For a diff, the sum of the base side's values.
    pub fn base_total(&self) -> Option<i64> {
        self.samples
            .diff_base
            .as_ref()
            .map(|b| b.iter().fold(0i64, |a, &v| a.wrapping_add(v)))
    }

    /// Whether this profile is the result of [`crate::diff`].
    pub fn is_diff(&self) -> bool {
        self.samples.diff_base.is_some()
    }

    /// The profile over `tables` (a copy of this profile's, grown) with every stack replaced:
    /// `map(tables, stack, frames)` fills `frames` (leaf first) with the new stack's locations
    /// in `tables`, or returns false to drop the stack's samples. Samples whose new stacks and
    /// labels are equal are added up; label sets keep their ids, so `tables` must hold this
    /// profile's. Each distinct stack is mapped once. The frame hider, granularity and the
    /// sandwich view are this with different maps.
    pub(crate) fn with_stacks(
        &self,
        mut tables: Tables,
        mut map: impl FnMut(&mut Tables, StackId, &mut Vec<LocationId>) -> bool,
    ) -> Profile {
        let samples = &self.samples;
        let mut out = Samples {
            diff_base: samples.diff_base.as_ref().map(|_| Vec::new()),
            ..Samples::default()
        };
        let mut stack_of: FxHashMap<StackId, Option<StackId>> = FxHashMap::default();
        let mut row_of: FxHashMap<(StackId, LabelSetId), usize> = FxHashMap::default();
        let mut frames = Vec::new();
        for i in 0..samples.len() {
            let old = samples.stacks[i];
            let stack = *stack_of.entry(old).or_insert_with(|| {
                frames.clear();
                map(&mut tables, old, &mut frames).then(|| tables.intern_stack(&frames))
            });
            let Some(stack) = stack else { continue };
            let base = samples.diff_base.as_ref().map_or(0, |b| b[i]);
            match row_of.entry((stack, samples.labels[i])) {
                std::collections::hash_map::Entry::Occupied(row) => {
                    let row = *row.get();
                    out.values[row] = out.values[row].wrapping_add(samples.values[i]);
                    if let Some(b) = &mut out.diff_base {
                        b[row] = b[row].wrapping_add(base);
                    }
                }
                std::collections::hash_map::Entry::Vacant(slot) => {
                    slot.insert(out.values.len());
                    out.stacks.push(stack);
                    out.labels.push(samples.labels[i]);
                    out.values.push(samples.values[i]);
                    if let Some(b) = &mut out.diff_base {
                        b.push(base);
                    }
                }
            }
        }
        Profile {
            tables: Arc::new(tables),
            meta: self.meta.clone(),
            samples: out,
        }
    }

    /// The same profile with only the samples for which `keep(i)` holds; tables stay shared.
    pub fn retain_samples(&self, mut keep: impl FnMut(usize) -> bool) -> Profile {
        let s = &self.samples;
        let mut out = Samples {
            diff_base: s.diff_base.as_ref().map(|_| Vec::new()),
            ..Samples::default()
        };
        for i in 0..s.len() {
            if keep(i) {
                out.stacks.push(s.stacks[i]);
                out.labels.push(s.labels[i]);
                out.values.push(s.values[i]);
                if let (Some(dst), Some(src)) = (&mut out.diff_base, &s.diff_base) {
                    dst.push(src[i]);
                }
            }
        }
        Profile {
            tables: Arc::clone(&self.tables),
            meta: self.meta.clone(),
            samples: out,
        }
    }
}
