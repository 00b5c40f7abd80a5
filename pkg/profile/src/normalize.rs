//! From the pprof wire model to normalized profiles: one per sample type, sharing one set of tables.

use std::sync::Arc;

use parca_pprof::{Pprof, proto};
use rustc_hash::FxHashMap;

use crate::profile::{Meta, Profile, Samples, ValueType};
use crate::prune::{PrunePlan, Pruner, kept_frames};
use crate::tables::{
    Function, FunctionId, Label, LabelSetId, LabelValue, Line, LocationId, Mapping, MappingId,
    StackId, StringId, Tables, relative_address,
};

/// Decodes pprof bytes (gzipped or raw) into one profile per sample type.
pub fn decode(
    bytes: &[u8],
    options: &parca_pprof::DecodeOptions,
) -> Result<Vec<Profile>, crate::Error> {
    let pprof = parca_pprof::decode(bytes, options)?;
    from_pprof(&pprof)
}

/// Normalizes a validated pprof into one profile per sample type.
///
/// Strings, mappings, functions, locations and stacks are interned once and shared by all the
/// returned profiles. Samples that agree on stack and labels are summed, and zero values dropped.
/// The profile's `drop_frames`/`keep_frames` are applied as google/pprof applies them when it
/// reads a profile (`prune.rs`); a pattern that is not a regular expression is an error.
pub fn from_pprof(pprof: &Pprof) -> Result<Vec<Profile>, crate::Error> {
    let mut tables = Tables::new();
    let parts = normalize_into(pprof, &mut tables)?;
    let tables = Arc::new(tables);
    Ok(parts
        .into_iter()
        .map(|(meta, samples)| Profile {
            tables: Arc::clone(&tables),
            meta,
            samples,
        })
        .collect())
}

/// [`from_pprof`] into `tables`, kept by the caller from one pprof to the next (a decoder of
/// pushes): symbols and stacks seen before are looked up, not built again, and an
/// [`crate::Importer`] that has imported from these tables before translates them from its
/// memo, without hashing them again. Tables shared with other holders (profiles of an earlier
/// pprof still alive) are not touched: fresh ones take their place in `tables`. The returned
/// profiles share `tables`; the caller bounds their growth by replacing them when they are large.
pub fn from_pprof_into(
    pprof: &Pprof,
    tables: &mut Arc<Tables>,
) -> Result<Vec<Profile>, crate::Error> {
    if Arc::get_mut(tables).is_none() {
        *tables = Arc::new(Tables::new());
    }
    let owned = Arc::get_mut(tables).expect("unshared: just checked or made");
    let parts = normalize_into(pprof, owned)?;
    Ok(parts
        .into_iter()
        .map(|(meta, samples)| Profile {
            tables: Arc::clone(tables),
            meta,
            samples,
        })
        .collect())
}

/// Normalizes a validated pprof into `tables`, which it shares with whatever they already hold:
/// one (meta, samples) per sample type, ids in `tables`.
///
/// Normalizing many pprofs into one set of tables interns each symbol and stack once, and the
/// resulting profiles merge by array add, with no remapping: what a store does at ingest, and
/// what `parca profile` does with several files.
pub fn normalize_into(
    pprof: &Pprof,
    tables: &mut Tables,
) -> Result<Vec<(Meta, Samples)>, crate::Error> {
    let h = pprof.header();
    let pruner = Pruner::new(pprof.string(h.drop_frames), pprof.string(h.keep_frames))
        .map_err(crate::Error::FrameFilter)?;
    let plan = pruner.as_ref().map(|p| PrunePlan::of(pprof, p));
    let symbols = intern_symbols(pprof, plan.as_ref(), tables);
    let rows = intern_rows(pprof, plan.as_ref(), &symbols, tables);
    Ok(split_by_sample_type(pprof, rows))
}

/// A pprof's strings and locations as ids of the tables they were interned into, by their
/// index in the pprof.
struct Symbols {
    strings: Vec<StringId>,
    locations: Vec<LocationId>,
}

/// Step 1: interns the pprof's strings, mappings, functions and locations (each location's lines
/// past what pruning drops), so that samples can be written as ids.
fn intern_symbols(pprof: &Pprof, plan: Option<&PrunePlan>, tables: &mut Tables) -> Symbols {
    tables.reserve_symbols(
        pprof.n_strings(),
        pprof.functions().len(),
        pprof.locations().len(),
    );
    tables.reserve_string_bytes(pprof.n_string_bytes());
    let strings: Vec<StringId> = (0..pprof.n_strings())
        .map(|i| tables.intern_string(pprof.string(i as i64)))
        .collect();
    let string = |index: i64| strings[index as usize];

    let mappings: Vec<MappingId> = pprof
        .mappings()
        .iter()
        .map(|m| {
            tables.intern_mapping(Mapping {
                memory_start: m.memory_start,
                memory_limit: m.memory_limit,
                file_offset: m.file_offset,
                file: string(m.filename),
                build_id: string(m.build_id),
                has_functions: m.has_functions,
                has_filenames: m.has_filenames,
                has_line_numbers: m.has_line_numbers,
                has_inline_frames: m.has_inline_frames,
            })
        })
        .collect();
    let functions: Vec<FunctionId> = pprof
        .functions()
        .iter()
        .map(|f| {
            tables.intern_function(Function {
                name: string(f.name),
                system_name: string(f.system_name),
                filename: string(f.filename),
                start_line: f.start_line,
            })
        })
        .collect();
    // One buffer for every location's lines: the tables copy them only for a new location.
    let mut lines: Vec<Line> = Vec::new();
    let locations: Vec<LocationId> = pprof
        .locations()
        .iter()
        .enumerate()
        .map(|(i, loc)| {
            let dropped = plan.map_or(0, |p| p.lines_dropped[i]);
            lines.clear();
            lines.extend(pprof.lines(loc)[dropped..].iter().map(|line| Line {
                function: functions[line.function as usize],
                line: line.line,
            }));
            let (mapping, address) = match loc.mapping {
                Some(idx) => {
                    let m = &pprof.mappings()[idx as usize];
                    (
                        Some(mappings[idx as usize]),
                        relative_address(loc.address, m.memory_start, m.file_offset),
                    )
                }
                None => (None, loc.address),
            };
            tables.intern_location_lines(mapping, address, &lines)
        })
        .collect();
    Symbols { strings, locations }
}

/// The samples of a pprof as rows: one per distinct (stack, label set), with the values of every
/// sample type side by side (`values[type][row]`).
struct Rows {
    stacks: Vec<StackId>,
    labels: Vec<LabelSetId>,
    values: Vec<Vec<i64>>,
}

/// Step 2: interns each sample's stack (pruned) and label set, summing the samples that agree on
/// both into one row.
fn intern_rows(
    pprof: &Pprof,
    plan: Option<&PrunePlan>,
    symbols: &Symbols,
    tables: &mut Tables,
) -> Rows {
    let string = |index: i64| symbols.strings[index as usize];
    let n_types = pprof.header().sample_type.len();
    let n_samples = pprof.n_samples();
    let mut row_of: FxHashMap<(StackId, LabelSetId), usize> = FxHashMap::default();
    let mut rows = Rows {
        stacks: Vec::with_capacity(n_samples),
        labels: Vec::with_capacity(n_samples),
        values: vec![Vec::with_capacity(n_samples); n_types],
    };
    let mut label_buf = Vec::new();
    // Nearly every sample of a real profile has a stack of its own: reserve for all of them.
    // (The message was size-checked, so this is bounded by the input.)
    let n_frames: usize = (0..n_samples)
        .map(|i| pprof.sample_locations(i).len())
        .sum();
    tables.reserve_stacks(n_samples, n_frames);
    let mut frames = Vec::new();
    for i in 0..n_samples {
        frames.clear();
        let sample_locations = pprof.sample_locations(i);
        let kept = match plan {
            Some(plan) => kept_frames(sample_locations, |&l| plan.location[l as usize]),
            None => sample_locations,
        };
        frames.extend(kept.iter().map(|&l| symbols.locations[l as usize]));
        let stack = tables.intern_stack(&frames);
        let sample_labels = pprof.sample_labels(i);
        let label_set = if sample_labels.is_empty() {
            LabelSetId::EMPTY
        } else {
            label_buf.clear();
            label_buf.extend(sample_labels.iter().map(|l| Label {
                key: string(l.key),
                value: if l.str != 0 {
                    LabelValue::Str(string(l.str))
                } else {
                    LabelValue::Num {
                        value: l.num,
                        unit: string(l.num_unit),
                    }
                },
            }));
            tables.intern_labels(&mut label_buf)
        };
        let row = *row_of.entry((stack, label_set)).or_insert_with(|| {
            rows.stacks.push(stack);
            rows.labels.push(label_set);
            for column in &mut rows.values {
                column.push(0);
            }
            rows.stacks.len() - 1
        });
        for (column, &v) in rows.values.iter_mut().zip(pprof.sample_values(i)) {
            column[row] = column[row].wrapping_add(v);
        }
    }
    rows
}

/// Step 3: one (meta, samples) per sample type, leaving out its zero values.
fn split_by_sample_type(pprof: &Pprof, rows: Rows) -> Vec<(Meta, Samples)> {
    let h = pprof.header();
    let value_type = |vt: &proto::ValueType| ValueType {
        kind: pprof.string(vt.r#type).to_owned(),
        unit: pprof.string(vt.unit).to_owned(),
    };
    let base_meta = Meta {
        sample_type: ValueType::default(),
        period_type: h.period_type.as_ref().map(value_type).unwrap_or_default(),
        period: h.period,
        time_nanos: h.time_nanos,
        duration_nanos: h.duration_nanos,
        comments: h
            .comment
            .iter()
            .map(|&c| pprof.string(c).to_owned())
            .collect(),
        capture_id: 0,
        drop_frames: pprof.string(h.drop_frames).to_owned(),
        keep_frames: pprof.string(h.keep_frames).to_owned(),
    };
    h.sample_type
        .iter()
        .zip(rows.values)
        .map(|(sample_type, column)| {
            let mut samples = Samples::default();
            for (row, v) in column.into_iter().enumerate() {
                if v != 0 {
                    samples.stacks.push(rows.stacks[row]);
                    samples.labels.push(rows.labels[row]);
                    samples.values.push(v);
                }
            }
            (
                Meta {
                    sample_type: value_type(sample_type),
                    ..base_meta.clone()
                },
                samples,
            )
        })
        .collect()
}

/// Picks the profile of the given sample type (e.g. `alloc_space`), or, with `None`, the one a
/// viewer shows first: pprof's `default_sample_type` if set, else the last, as google/pprof does.
pub fn select_sample_type(
    mut profiles: Vec<Profile>,
    wanted: Option<&str>,
    default_sample_type: Option<&str>,
) -> Result<Profile, crate::Error> {
    let idx = pick_sample_type(
        profiles.iter().map(|p| &p.meta),
        wanted,
        default_sample_type,
    )?;
    Ok(profiles.swap_remove(idx))
}

/// The position of the sample type [`select_sample_type`] would pick among `metas`.
pub fn pick_sample_type<'a>(
    metas: impl Iterator<Item = &'a Meta> + Clone,
    wanted: Option<&str>,
    default_sample_type: Option<&str>,
) -> Result<usize, crate::Error> {
    let available = || {
        metas
            .clone()
            .map(|m| m.sample_type.kind.clone())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match wanted.or(default_sample_type) {
        Some(kind) => metas
            .clone()
            .position(|m| m.sample_type.kind == kind)
            .ok_or_else(|| crate::Error::NoSuchSampleType {
                wanted: kind.to_owned(),
                available: available(),
            }),
        None => {
            metas
                .clone()
                .count()
                .checked_sub(1)
                .ok_or_else(|| crate::Error::NoSuchSampleType {
                    wanted: "any".into(),
                    available: "none".into(),
                })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{folded, profile};

    /// `stacks` as a pprof with `drop_frames` and `keep_frames` set, normalized again.
    fn pruned(stacks: &[(&str, i64)], drop: &str, keep: &str) -> Result<String, crate::Error> {
        let mut pprof = crate::to_pprof(&profile(stacks));
        pprof.string_table.push(drop.to_owned());
        pprof.drop_frames = pprof.string_table.len() as i64 - 1;
        pprof.string_table.push(keep.to_owned());
        pprof.keep_frames = pprof.string_table.len() as i64 - 1;
        let pprof = Pprof::from_proto(&pprof).expect("valid pprof");
        let profiles = from_pprof(&pprof)?;
        Ok(folded(&profiles[0]))
    }

    #[test]
    fn drop_frames_in_the_middle_of_stacks_give_way_to_their_callers() {
        let stacks = [
            ("main;work;malloc;mmap_inner", 5),
            ("main;other", 3),
            // Nothing above the allocator: google/pprof never cuts before a user frame.
            ("malloc;root_alloc", 2),
            ("main;lock;RecordLockProfileData;spin", 7),
        ];
        let text = pruned(&stacks, "malloc|RecordLockProfileData", "").unwrap();
        assert_eq!(
            text, "main;lock 7\nmain;other 3\nmain;work 5\nmalloc;root_alloc 2\n",
            "{text}"
        );
        // keep_frames wins over drop_frames.
        let text = pruned(&stacks, "malloc|RecordLockProfileData", "malloc").unwrap();
        assert!(text.contains("main;work;malloc;mmap_inner 5"), "{text}");
        assert!(text.contains("main;lock 7"), "{text}");
        let error = pruned(&stacks, "malloc(", "").unwrap_err().to_string();
        assert!(
            error.contains("`drop_frames` is not a regular expression"),
            "{error}"
        );
    }

    #[test]
    fn normalizing_into_shared_tables_interns_each_symbol_once() {
        let source = profile(&[("main;work;leaf", 5), ("main;idle", 2)]);
        let bytes = parca_pprof::encode(&crate::to_pprof(&source), true);
        let pprof = parca_pprof::decode(&bytes, &Default::default()).expect("valid");
        let mut tables = Tables::new();
        let first = normalize_into(&pprof, &mut tables).unwrap();
        let sizes = |t: &Tables| {
            (
                t.n_strings(),
                t.n_functions(),
                t.n_locations(),
                t.n_stacks(),
            )
        };
        let before = sizes(&tables);
        let second = normalize_into(&pprof, &mut tables).unwrap();
        assert_eq!(sizes(&tables), before);
        assert_eq!(first[0].1.stacks, second[0].1.stacks);
        let tables = Arc::new(tables);
        let profiles: Vec<Profile> = first
            .into_iter()
            .chain(second)
            .map(|(meta, samples)| Profile {
                tables: Arc::clone(&tables),
                meta,
                samples,
            })
            .collect();
        assert_eq!(crate::merge(&profiles).expect("merge").total(), 14);
    }
}
