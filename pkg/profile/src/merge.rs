//! Merging profiles into one and diffing two.
//!
//! Profiles that share tables merge by adding values per (stack, labels): an array add. Profiles
//! from elsewhere are first remapped into the result's tables; the remap is lazy (only what the
//! samples use) and memoized per source table, so merging many profiles that share tables remaps
//! each stack once.

use std::ops::Deref;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::Error;
use crate::profile::{Meta, Profile, Samples};
use crate::tables::{
    Function, FunctionId, Label, LabelSetId, LabelValue, Line, LocationId, Mapping, MappingId,
    StackId, StringId, Tables, TablesIdentity,
};

/// Not yet remapped.
const UNSET: u32 = u32::MAX;

/// What a remap has learnt: for each id of the source tables, its id in the destination, or
/// `UNSET`. Kept apart from the source so that it can outlive one borrow of it
/// ([`Importer`] keeps it between imports of tables that only grew meanwhile).
#[derive(Debug, Default)]
struct Memo {
    strings: Vec<u32>,
    mappings: Vec<u32>,
    functions: Vec<u32>,
    locations: Vec<u32>,
    stacks: Vec<u32>,
    label_sets: Vec<u32>,
    /// A location's remapped lines, kept between locations for its allocation.
    lines: Vec<Line>,
}

impl Memo {
    /// Grows every column to the size of `source`'s table: ids new in `source` start unset.
    fn cover(&mut self, source: &Tables) {
        let grow = |v: &mut Vec<u32>, n: usize| {
            if v.len() < n {
                v.resize(n, UNSET);
            }
        };
        grow(&mut self.strings, source.n_strings());
        grow(&mut self.mappings, source.n_mappings());
        grow(&mut self.functions, source.n_functions());
        grow(&mut self.locations, source.n_locations());
        grow(&mut self.stacks, source.n_stacks());
        grow(&mut self.label_sets, source.n_label_sets());
    }
}

/// Memoized translation of ids from one source table into the destination tables. The source is
/// owned (`Arc`, for profiles) or borrowed (`&Tables`, for a store's head behind a lock).
struct Remap<S: Deref<Target = Tables> + Clone> {
    source: S,
    memo: Memo,
}

impl<S: Deref<Target = Tables> + Clone> Remap<S> {
    fn new(source: S) -> Self {
        Remap::with_memo(source, Memo::default())
    }

    /// A remap of `source` that starts from `memo`, learnt over the same tables (or over these
    /// tables before they grew by appends: ids seen before mean the same).
    fn with_memo(source: S, mut memo: Memo) -> Self {
        memo.cover(&source);
        Remap { source, memo }
    }

    /// The same memo over `source`, which must be the tables this memo was made for, grown
    /// since only by appends (ids already seen mean the same).
    fn rebind<T: Deref<Target = Tables> + Clone>(self, source: T) -> Remap<T> {
        Remap::with_memo(source, self.memo)
    }

    fn string(&mut self, dst: &mut Tables, id: StringId) -> StringId {
        let slot = &mut self.memo.strings[id.idx()];
        if *slot == UNSET {
            *slot = dst.intern_string(self.source.string(id)).0;
        }
        StringId(*slot)
    }

    fn mapping(&mut self, dst: &mut Tables, id: MappingId) -> MappingId {
        if self.memo.mappings[id.idx()] == UNSET {
            let m = self.source.mapping(id).clone();
            let file = self.string(dst, m.file);
            let build_id = self.string(dst, m.build_id);
            self.memo.mappings[id.idx()] = dst
                .intern_mapping(Mapping {
                    file,
                    build_id,
                    ..m
                })
                .0;
        }
        MappingId(self.memo.mappings[id.idx()])
    }

    fn function(&mut self, dst: &mut Tables, id: FunctionId) -> FunctionId {
        if self.memo.functions[id.idx()] == UNSET {
            let f = *self.source.function(id);
            let function = Function {
                name: self.string(dst, f.name),
                system_name: self.string(dst, f.system_name),
                filename: self.string(dst, f.filename),
                start_line: f.start_line,
            };
            self.memo.functions[id.idx()] = dst.intern_function(function).0;
        }
        FunctionId(self.memo.functions[id.idx()])
    }

    fn location(&mut self, dst: &mut Tables, id: LocationId) -> LocationId {
        if self.memo.locations[id.idx()] == UNSET {
            // Indexed rather than iterated: the source stays unborrowed (no `Arc` clone, an
            // atomic add and sub per location) while functions are remapped.
            let mut lines = std::mem::take(&mut self.memo.lines);
            lines.clear();
            for i in 0..self.source.lines(id).len() {
                let l = self.source.lines(id)[i];
                lines.push(Line {
                    function: self.function(dst, l.function),
                    line: l.line,
                });
            }
            let address = self.source.location_address(id);
            let mapping = address.mapping.map(|m| self.mapping(dst, m));
            self.memo.locations[id.idx()] = dst
                .intern_location_lines(mapping, address.address, &lines)
                .0;
            self.memo.lines = lines;
        }
        LocationId(self.memo.locations[id.idx()])
    }

    fn stack(&mut self, dst: &mut Tables, id: StackId, frames: &mut Vec<LocationId>) -> StackId {
        let slot = self.memo.stacks[id.idx()];
        if slot != UNSET {
            return StackId(slot);
        }
        frames.clear();
        for i in 0..self.source.stack(id).len() {
            let location = self.source.stack(id)[i];
            let mapped = self.location(dst, location);
            frames.push(mapped);
        }
        let mapped = dst.intern_stack(frames);
        self.memo.stacks[id.idx()] = mapped.0;
        mapped
    }

    fn samples(&mut self, dst: &mut Tables, s: &Samples) -> Samples {
        let mut frames = Vec::new();
        Samples {
            stacks: s
                .stacks
                .iter()
                .map(|&st| self.stack(dst, st, &mut frames))
                .collect(),
            labels: s.labels.iter().map(|&l| self.label_set(dst, l)).collect(),
            values: s.values.clone(),
            diff_base: s.diff_base.clone(),
            spans: s.spans.clone(),
        }
    }

    fn label_set(&mut self, dst: &mut Tables, id: LabelSetId) -> LabelSetId {
        if id == LabelSetId::EMPTY {
            return id;
        }
        if self.memo.label_sets[id.idx()] == UNSET {
            let source = self.source.clone();
            let labels = source
                .label_set(id)
                .iter()
                .map(|l| Label {
                    key: self.string(dst, l.key),
                    value: match l.value {
                        LabelValue::Str(s) => LabelValue::Str(self.string(dst, s)),
                        LabelValue::Num { value, unit } => LabelValue::Num {
                            value,
                            unit: self.string(dst, unit),
                        },
                    },
                })
                .collect();
            self.memo.label_sets[id.idx()] = dst.intern_label_set(labels).0;
        }
        LabelSetId(self.memo.label_sets[id.idx()])
    }
}

/// Copies profiles into a shared set of tables (a store's head, a merge result), so that from
/// then on they combine by id. Remaps are memoized per source tables and destination, by the
/// tables' identity ([`Tables::identity`]), and hold no reference to either: importing many
/// profiles that share tables translates each symbol and stack once, and so does importing
/// profiles of tables that grew between imports (a decoder's tables kept from one push to the
/// next), without keeping those tables alive. Drop the importer to free the memos.
#[derive(Debug, Default)]
pub struct Importer {
    /// (source, destination, memo), the most recently used last; at most [`MEMOS`].
    memos: Vec<(TablesIdentity, TablesIdentity, Memo)>,
}

/// Memos an [`Importer`] keeps: enough for a few decoders pushing into one head by turns.
const MEMOS: usize = 8;

impl Importer {
    /// An importer with no memos.
    pub fn new() -> Self {
        Importer::default()
    }

    /// The samples of `profile` with their stacks and labels interned in `dst`.
    pub fn import(&mut self, dst: &mut Tables, profile: &Profile) -> Samples {
        let key = (profile.tables.identity(), dst.identity());
        let memo = match self
            .memos
            .iter()
            .position(|(source, into, _)| (*source, *into) == key)
        {
            Some(i) => self.memos.remove(i).2,
            None => {
                if self.memos.len() >= MEMOS {
                    self.memos.remove(0);
                }
                Memo::default()
            }
        };
        let mut remap = Remap::with_memo(&*profile.tables, memo);
        let samples = remap.samples(dst, &profile.samples);
        self.memos.push((key.0, key.1, remap.memo));
        samples
    }
}

/// Copies samples out of borrowed tables (e.g. a store's head, behind a lock) into other tables,
/// so that the result carries only the symbols it uses. Memoized: samples of many profiles that
/// point into the same source translate each stack once.
pub struct Extractor<'a> {
    remap: Remap<&'a Tables>,
}

impl<'a> Extractor<'a> {
    /// An extractor reading from `source`.
    pub fn new(source: &'a Tables) -> Self {
        Extractor {
            remap: Remap::new(source),
        }
    }

    /// The same extractor, its memo kept, reading from `source`: the tables it read before, or
    /// those tables grown by appends since (a store's head between two holds of its lock). Ids
    /// seen before must mean the same in `source`; new ids are translated on first use.
    pub fn rebind<'b>(self, source: &'b Tables) -> Extractor<'b> {
        Extractor {
            remap: self.remap.rebind(source),
        }
    }

    /// `samples` (ids of the source) with their stacks and labels interned in `dst`.
    pub fn samples(&mut self, dst: &mut Tables, samples: &Samples) -> Samples {
        self.remap.samples(dst, samples)
    }

    /// Translates one stack id of the source into `dst`.
    pub fn stack(&mut self, dst: &mut Tables, stack: StackId) -> StackId {
        self.remap.stack(dst, stack, &mut Vec::new())
    }
}

/// Accumulates values per (stack, labels) as columns. Unlabelled samples, the common case, go
/// through a dense array indexed by stack id; labelled ones through a hash map.
#[derive(Default)]
struct Accumulator {
    row_of_stack: Vec<u32>,
    row_of_labelled: FxHashMap<(StackId, LabelSetId), u32>,
    samples: Samples,
}

impl Accumulator {
    #[inline]
    fn row(&mut self, stack: StackId, labels: LabelSetId) -> usize {
        let samples = &mut self.samples;
        let mut new_row = || {
            samples.stacks.push(stack);
            samples.labels.push(labels);
            samples.values.push(0);
            if let Some(base) = &mut samples.diff_base {
                base.push(0);
            }
            (samples.values.len() - 1) as u32
        };
        if labels == LabelSetId::EMPTY {
            if self.row_of_stack.len() <= stack.idx() {
                self.row_of_stack.resize(stack.idx() + 1, UNSET);
            }
            let slot = &mut self.row_of_stack[stack.idx()];
            if *slot == UNSET {
                *slot = new_row();
            }
            *slot as usize
        } else {
            *self
                .row_of_labelled
                .entry((stack, labels))
                .or_insert_with(new_row) as usize
        }
    }

    /// Adds `values` (and `base` values, for a diff) of samples already in the result's ids.
    fn add(&mut self, stacks: &[StackId], labels: &[LabelSetId], values: &[i64], base: bool) {
        for ((&stack, &label_set), &v) in stacks.iter().zip(labels).zip(values) {
            let row = self.row(stack, label_set);
            let column = if base {
                self.samples
                    .diff_base
                    .as_mut()
                    .expect("base column exists in a diff")
            } else {
                &mut self.samples.values
            };
            column[row] = column[row].wrapping_add(v);
        }
    }

    /// Drops rows whose values are all zero (a diff keeps a row if either side is non-zero).
    fn finish(self) -> Samples {
        let s = self.samples;
        let keep = |i: usize| s.values[i] != 0 || s.diff_base.as_ref().is_some_and(|b| b[i] != 0);
        if (0..s.len()).all(keep) {
            return s;
        }
        let rows: Vec<usize> = (0..s.len()).filter(|&i| keep(i)).collect();
        Samples {
            stacks: rows.iter().map(|&i| s.stacks[i]).collect(),
            labels: rows.iter().map(|&i| s.labels[i]).collect(),
            values: rows.iter().map(|&i| s.values[i]).collect(),
            diff_base: s
                .diff_base
                .as_ref()
                .map(|b| rows.iter().map(|&i| b[i]).collect()),
            spans: None,
        }
    }
}

/// Builds one profile out of many: feed profiles with [`Merger::add`], take the result with
/// [`Merger::finish`].
///
/// Meta follows google/pprof's merge: the earliest start time, the sum of durations, the largest
/// period.
pub struct Merger {
    /// Set when every profile so far shares these tables: no remapping needed.
    shared: Option<Arc<Tables>>,
    /// Set once profiles with different tables arrive.
    own: Option<Tables>,
    importer: Importer,
    meta: Option<Meta>,
    /// Captures merged so far: each one's duration counts once.
    captures: crate::CaptureDurations,
    acc: Accumulator,
    /// Whether this merger builds a diff (keeps the base column).
    diff: bool,
}

impl Default for Merger {
    fn default() -> Self {
        Merger::new()
    }
}

impl Merger {
    /// An empty merger.
    pub fn new() -> Self {
        Merger {
            shared: None,
            own: None,
            importer: Importer::new(),
            meta: None,
            captures: crate::CaptureDurations::default(),
            acc: Accumulator::default(),
            diff: false,
        }
    }

    fn new_diff() -> Self {
        let mut merger = Merger::new();
        merger.diff = true;
        merger.acc.samples.diff_base = Some(Vec::new());
        merger
    }

    fn check_meta(&mut self, meta: &Meta) -> Result<(), Error> {
        let duration = self.captures.add(meta.capture_id, meta.duration_nanos);
        match &mut self.meta {
            None => self.meta = Some(meta.clone()),
            Some(held) => {
                if !held.compatible(meta) {
                    return Err(Error::IncompatibleTypes {
                        left: held.describe(),
                        right: meta.describe(),
                    });
                }
                if meta.time_nanos != 0
                    && (held.time_nanos == 0 || meta.time_nanos < held.time_nanos)
                {
                    held.time_nanos = meta.time_nanos;
                }
                held.duration_nanos = held.duration_nanos.saturating_add(duration);
                held.capture_id = self.captures.merged_id(held.capture_id);
                held.period = held.period.max(meta.period);
                for c in &meta.comments {
                    if !held.comments.contains(c) {
                        held.comments.push(c.clone());
                    }
                }
            }
        }
        Ok(())
    }

    /// Adds a profile's samples. Fails if its sample or period type differs from the first's.
    pub fn add(&mut self, profile: &Profile) -> Result<(), Error> {
        self.add_side(profile, false)
    }

    fn add_side(&mut self, profile: &Profile, base: bool) -> Result<(), Error> {
        self.check_meta(&profile.meta)?;
        let s = &profile.samples;
        if self.own.is_none() {
            match &self.shared {
                None => self.shared = Some(Arc::clone(&profile.tables)),
                Some(shared) if Arc::ptr_eq(shared, &profile.tables) => {}
                Some(_) => self.switch_to_own_tables(),
            }
        }
        match &mut self.own {
            None => self.acc.add(&s.stacks, &s.labels, &s.values, base),
            Some(dst) => {
                let imported = self.importer.import(dst, profile);
                self.acc
                    .add(&imported.stacks, &imported.labels, &imported.values, base);
            }
        }
        Ok(())
    }

    /// Moves what was accumulated over shared tables into tables of our own.
    fn switch_to_own_tables(&mut self) {
        let shared = self.shared.take().expect("only called while sharing");
        let mut dst = Tables::new();
        let old = std::mem::take(&mut self.acc.samples);
        self.acc = Accumulator::default();
        self.acc.samples.diff_base = old.diff_base.as_ref().map(|_| Vec::new());
        let so_far = Profile {
            tables: shared,
            meta: Meta::default(),
            samples: old,
        };
        let imported = self.importer.import(&mut dst, &so_far);
        self.acc
            .add(&imported.stacks, &imported.labels, &imported.values, false);
        if let Some(base) = &imported.diff_base {
            self.acc.add(&imported.stacks, &imported.labels, base, true);
        }
        self.own = Some(dst);
    }

    /// The merged profile, or `None` if nothing was added.
    pub fn finish(self) -> Option<Profile> {
        let meta = self.meta?;
        let tables = match (self.shared, self.own) {
            (_, Some(own)) => Arc::new(own),
            (Some(shared), None) => shared,
            (None, None) => Arc::new(Tables::new()),
        };
        let mut samples = self.acc.finish();
        if !self.diff {
            samples.diff_base = None;
        }
        Some(Profile {
            tables,
            meta,
            samples,
        })
    }
}

/// Merges profiles of one sample type into one: values of equal stacks (and labels) add up.
pub fn merge<'a>(profiles: impl IntoIterator<Item = &'a Profile>) -> Result<Profile, Error> {
    let mut merger = Merger::new();
    for p in profiles {
        merger.add(p)?;
    }
    merger.finish().ok_or(Error::NothingToMerge)
}

/// Compares two profiles of one sample type: the result holds, per stack, the comparison's value
/// in `values` and the base's in `diff_base`, so both sides (and their difference) can be shown.
pub fn diff(base: &Profile, comparison: &Profile) -> Result<Profile, Error> {
    let mut merger = Merger::new_diff();
    merger.add_side(base, true)?;
    merger.add_side(comparison, false)?;
    let mut result = merger.finish().ok_or(Error::NothingToMerge)?;
    result.meta = comparison.meta.clone();
    Ok(result)
}

/// How a diff compares the two sides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DiffMode {
    /// Raw values: a side that ran longer looks bigger everywhere.
    #[default]
    Absolute,
    /// Shares of the total: the side with the smaller total is scaled up by the ratio of totals
    /// (as Parca does), so only changes in *where* time went show.
    Relative,
}

/// Applies `mode` to a diff profile (a no-op for absolute mode or a profile that is not a diff).
pub fn apply_diff_mode(mut profile: Profile, mode: DiffMode) -> Profile {
    let (Some(base_total), DiffMode::Relative) = (profile.base_total(), mode) else {
        return profile;
    };
    let total = profile.total();
    if base_total == 0 || total == 0 || base_total == total {
        return profile;
    }
    let scale = |column: &mut Vec<i64>, ratio: f64| {
        for v in column.iter_mut() {
            *v = (*v as f64 * ratio).round() as i64;
        }
    };
    let samples = &mut profile.samples;
    if base_total.unsigned_abs() < total.unsigned_abs() {
        let ratio = total as f64 / base_total as f64;
        scale(samples.diff_base.as_mut().expect("is a diff"), ratio);
    } else {
        let ratio = base_total as f64 / total as f64;
        scale(&mut samples.values, ratio);
    }
    profile
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{folded, profile};

    #[test]
    fn an_importer_remembers_tables_that_grew_between_imports() {
        let first = profile(&[("main;work;leaf", 3)]);
        let mut head = Tables::new();
        let mut importer = Importer::new();
        let leaf = importer.import(&mut head, &first).stacks[0];
        // The same tables grow (a decoder's, kept from one push to the next) and are imported
        // again: ids seen before come from the memo, new ones are added.
        let Profile {
            mut tables, meta, ..
        } = first;
        let identity = tables.identity();
        let grown = Arc::get_mut(&mut tables).expect("unshared");
        let samples = Samples {
            stacks: vec![
                crate::test_support::intern_folded(grown, "main;work;other"),
                crate::test_support::intern_folded(grown, "main;work;leaf"),
            ],
            labels: vec![LabelSetId::EMPTY; 2],
            values: vec![5, 7],
            ..Samples::default()
        };
        assert_eq!(tables.identity(), identity, "growing keeps the identity");
        let second = Profile {
            tables,
            meta,
            samples,
        };
        let imported = importer.import(&mut head, &second);
        assert_eq!(imported.stacks[1], leaf);
        let head = Arc::new(head);
        let in_head = Profile {
            tables: Arc::clone(&head),
            meta: second.meta.clone(),
            samples: imported,
        };
        assert_eq!(folded(&in_head), folded(&second));
        // A copy grows apart from the original: it is other tables to an importer.
        assert_ne!((*second.tables).clone().identity(), identity);
        assert_ne!((*head).clone().identity(), head.identity());
    }

    #[test]
    fn merge_adds_equal_stacks_across_tables() {
        let a = profile(&[("main;work;leaf", 5), ("main;idle", 1)]);
        let b = profile(&[("main;work;leaf", 2), ("main;other", 3)]);
        let merged = merge([&a, &b]).expect("compatible");
        assert_eq!(merged.total(), 11);
        assert_eq!(
            folded(&merged),
            "main;idle 1\nmain;other 3\nmain;work;leaf 7\n"
        );
    }

    #[test]
    fn rows_that_cancel_out_are_dropped() {
        // Delta heap profiles carry negative values: a stack that nets to zero has no row.
        let a = profile(&[("main;alloc", 5), ("main;keep", 1)]);
        let b = profile(&[("main;alloc", -5)]);
        let merged = merge([&a, &b]).expect("compatible");
        assert_eq!(folded(&merged), "main;keep 1\n");
        assert_eq!(merged.samples.len(), 1);
    }

    #[test]
    fn merge_of_shared_tables_keeps_them() {
        let a = profile(&[("main;work", 5)]);
        let merged = merge([&a, &a, &a]).expect("compatible");
        assert!(Arc::ptr_eq(&merged.tables, &a.tables));
        assert_eq!(merged.total(), 15);
    }

    #[test]
    fn merge_switches_to_own_tables_midway() {
        let a = profile(&[("main;work", 5)]);
        let b = profile(&[("main;work", 1), ("main;x", 1)]);
        let merged = merge([&a, &a, &b]).expect("compatible");
        assert_eq!(folded(&merged), "main;work 11\nmain;x 1\n");
    }

    #[test]
    fn merge_refuses_other_sample_types() {
        let a = profile(&[("main", 1)]);
        let mut b = profile(&[("main", 1)]);
        b.meta.sample_type.kind = "alloc_space".into();
        let err = merge([&a, &b]).expect_err("incompatible");
        assert_eq!(
            err.to_string(),
            "cannot combine `cpu/nanoseconds (period cpu/nanoseconds)` with `alloc_space/nanoseconds (period cpu/nanoseconds)`: sample types differ"
        );
    }

    #[test]
    fn diff_keeps_both_sides() {
        let base = profile(&[("main;work", 4), ("main;gone", 2)]);
        let comparison = profile(&[("main;work", 6), ("main;new", 1)]);
        let d = diff(&base, &comparison).expect("compatible");
        assert_eq!(d.total(), 7);
        assert_eq!(d.base_total(), Some(6));
        assert_eq!(folded(&d), "main;gone 2 0\nmain;new 0 1\nmain;work 4 6\n");
    }

    #[test]
    fn relative_diff_scales_the_smaller_side() {
        let base = profile(&[("main;a", 10), ("main;b", 10)]);
        let comparison = profile(&[("main;a", 30), ("main;b", 10)]);
        let d = apply_diff_mode(
            diff(&base, &comparison).expect("compatible"),
            DiffMode::Relative,
        );
        // Base total 20 is scaled to the comparison's 40.
        assert_eq!(folded(&d), "main;a 20 30\nmain;b 20 10\n");
    }
}
