//! From the pprof wire model to normalized profiles: one per sample type, sharing one set of tables.

use std::sync::Arc;

use parca_pprof::{Pprof, proto};
use rustc_hash::FxHashMap;

use crate::profile::{Meta, Profile, Samples, ValueType};
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
    Ok(from_pprof(&pprof))
}

/// Normalizes a validated pprof into one profile per sample type.
///
/// Strings, mappings, functions, locations and stacks are interned once and shared by all the
/// returned profiles. Samples that agree on stack and labels are summed, and zero values dropped.
pub fn from_pprof(pprof: &Pprof) -> Vec<Profile> {
    let p = pprof.profile();
    let mut tables = Tables::new();
    let strings: Vec<StringId> = p
        .string_table
        .iter()
        .map(|s| tables.intern_string(s))
        .collect();
    let string = |index: i64| strings[index as usize];

    let mappings: Vec<MappingId> = p
        .mapping
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
    let functions: Vec<FunctionId> = p
        .function
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
    let locations: Vec<LocationId> = p
        .location
        .iter()
        .map(|loc| {
            let lines: Box<[Line]> = loc
                .line
                .iter()
                .map(|line| Line {
                    function: functions[pprof
                        .function_index(line.function_id)
                        .expect("validated function id")],
                    line: line.line,
                })
                .collect();
            let (mapping, address) = match pprof.mapping_index(loc.mapping_id) {
                Some(idx) => {
                    let m = &p.mapping[idx];
                    (
                        Some(mappings[idx]),
                        relative_address(loc.address, m.memory_start, m.file_offset),
                    )
                }
                None => (None, loc.address),
            };
            tables.intern_location(mapping, address, lines)
        })
        .collect();

    // One row per distinct (stack, labels); values for every sample type side by side.
    let n_types = p.sample_type.len();
    let mut row_of: FxHashMap<(StackId, LabelSetId), usize> = FxHashMap::default();
    let mut stacks = Vec::with_capacity(p.sample.len());
    let mut labels = Vec::with_capacity(p.sample.len());
    let mut values: Vec<Vec<i64>> = vec![Vec::with_capacity(p.sample.len()); n_types];
    let mut label_buf = Vec::new();
    // Nearly every sample of a real profile has a stack of its own: reserve for all of them.
    // (The message was size-checked, so this is bounded by the input.)
    let n_frames: usize = p.sample.iter().map(|s| s.location_id.len()).sum();
    tables.reserve_stacks(p.sample.len(), n_frames);
    let mut frames = Vec::new();
    for sample in &p.sample {
        frames.clear();
        frames.extend(
            sample
                .location_id
                .iter()
                .map(|&id| locations[pprof.location_index(id).expect("validated location id")]),
        );
        let stack = tables.intern_stack(&frames);
        let label_set = if sample.label.is_empty() {
            LabelSetId::EMPTY
        } else {
            label_buf.clear();
            label_buf.extend(sample.label.iter().map(|l| Label {
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
            tables.intern_label_set(std::mem::take(&mut label_buf))
        };
        let row = *row_of.entry((stack, label_set)).or_insert_with(|| {
            stacks.push(stack);
            labels.push(label_set);
            for column in &mut values {
                column.push(0);
            }
            stacks.len() - 1
        });
        for (column, &v) in values.iter_mut().zip(&sample.value) {
            column[row] = column[row].wrapping_add(v);
        }
    }

    let tables = Arc::new(tables);
    let value_type = |vt: &proto::ValueType| ValueType {
        kind: pprof.string(vt.r#type).to_owned(),
        unit: pprof.string(vt.unit).to_owned(),
    };
    let base_meta = Meta {
        sample_type: ValueType::default(),
        period_type: p.period_type.as_ref().map(value_type).unwrap_or_default(),
        period: p.period,
        time_nanos: p.time_nanos,
        duration_nanos: p.duration_nanos,
        comments: p
            .comment
            .iter()
            .map(|&c| pprof.string(c).to_owned())
            .collect(),
    };
    p.sample_type
        .iter()
        .zip(values)
        .map(|(sample_type, column)| {
            let mut samples = Samples::default();
            for (row, v) in column.into_iter().enumerate() {
                if v != 0 {
                    samples.stacks.push(stacks[row]);
                    samples.labels.push(labels[row]);
                    samples.values.push(v);
                }
            }
            Profile {
                tables: Arc::clone(&tables),
                meta: Meta {
                    sample_type: value_type(sample_type),
                    ..base_meta.clone()
                },
                samples,
            }
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
    let available = || {
        profiles
            .iter()
            .map(|p| p.meta.sample_type.kind.clone())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let pick = wanted.or(default_sample_type);
    let idx = match pick {
        Some(kind) => profiles
            .iter()
            .position(|p| p.meta.sample_type.kind == kind)
            .ok_or_else(|| crate::Error::NoSuchSampleType {
                wanted: kind.to_owned(),
                available: available(),
            })?,
        None => profiles
            .len()
            .checked_sub(1)
            .ok_or_else(|| crate::Error::NoSuchSampleType {
                wanted: "any".into(),
                available: "none".into(),
            })?,
    };
    Ok(profiles.swap_remove(idx))
}
