//! Export to the pprof wire model, so that `go tool pprof` and every pprof consumer can open
//! what we store and compute.

use parca_pprof::{StringTable, proto};
use rustc_hash::FxHashMap;

use crate::profile::Profile;
use crate::tables::{FunctionId, LabelValue, LocationId, MappingId, StackId};

/// Builds the string table and id spaces of the exported message.
struct Exporter<'a> {
    profile: &'a Profile,
    strings: StringTable<'a>,
    mappings: FxHashMap<MappingId, u64>,
    functions: FxHashMap<FunctionId, u64>,
    locations: FxHashMap<LocationId, u64>,
    out: proto::Profile,
}

impl<'a> Exporter<'a> {
    fn string(&mut self, s: &'a str) -> i64 {
        self.strings.id_borrowed(s)
    }

    fn mapping(&mut self, id: MappingId) -> u64 {
        if let Some(&pid) = self.mappings.get(&id) {
            return pid;
        }
        let tables = &*self.profile.tables;
        let m = tables.mapping(id);
        let pid = self.out.mapping.len() as u64 + 1;
        let mapping = proto::Mapping {
            id: pid,
            memory_start: m.memory_start,
            memory_limit: m.memory_limit,
            file_offset: m.file_offset,
            filename: self.string(tables.string(m.file)),
            build_id: self.string(tables.string(m.build_id)),
            has_functions: m.has_functions,
            has_filenames: m.has_filenames,
            has_line_numbers: m.has_line_numbers,
            has_inline_frames: m.has_inline_frames,
        };
        self.out.mapping.push(mapping);
        self.mappings.insert(id, pid);
        pid
    }

    fn function(&mut self, id: FunctionId) -> u64 {
        if let Some(&pid) = self.functions.get(&id) {
            return pid;
        }
        let tables = &*self.profile.tables;
        let f = tables.function(id);
        let pid = self.out.function.len() as u64 + 1;
        let function = proto::Function {
            id: pid,
            name: self.string(tables.string(f.name)),
            system_name: self.string(tables.string(f.system_name)),
            filename: self.string(tables.string(f.filename)),
            start_line: f.start_line,
        };
        self.out.function.push(function);
        self.functions.insert(id, pid);
        pid
    }

    fn location(&mut self, id: LocationId) -> u64 {
        if let Some(&pid) = self.locations.get(&id) {
            return pid;
        }
        let tables = &*self.profile.tables;
        let address = tables.location_address(id);
        let (mapping_id, absolute) = match address.mapping {
            Some(m) => {
                let mapping = tables.mapping(m);
                // Back from file-relative to an address inside the exported mapping's range.
                let absolute = address
                    .address
                    .wrapping_sub(mapping.file_offset)
                    .wrapping_add(mapping.memory_start);
                (self.mapping(m), absolute)
            }
            None => (0, address.address),
        };
        let line = tables
            .lines(id)
            .iter()
            .map(|l| proto::Line {
                function_id: self.function(l.function),
                line: l.line,
                column: 0,
            })
            .collect();
        let pid = self.out.location.len() as u64 + 1;
        self.out.location.push(proto::Location {
            id: pid,
            mapping_id,
            address: absolute,
            line,
            is_folded: false,
        });
        self.locations.insert(id, pid);
        pid
    }
}

/// Exports a profile as a pprof message with one sample type. A diff exports comparison minus
/// base, which is what `pprof -diff_base` shows.
pub fn to_pprof(profile: &Profile) -> proto::Profile {
    let meta = &profile.meta;
    let mut e = Exporter {
        profile,
        strings: StringTable::new(),
        mappings: FxHashMap::default(),
        functions: FxHashMap::default(),
        locations: FxHashMap::default(),
        out: proto::Profile::default(),
    };
    let sample_type = proto::ValueType {
        r#type: e.string(&meta.sample_type.kind),
        unit: e.string(&meta.sample_type.unit),
    };
    let period_type = proto::ValueType {
        r#type: e.string(&meta.period_type.kind),
        unit: e.string(&meta.period_type.unit),
    };
    e.out.sample_type = vec![sample_type];
    e.out.period_type = Some(period_type);
    e.out.period = meta.period;
    e.out.time_nanos = meta.time_nanos;
    e.out.duration_nanos = meta.duration_nanos;
    e.out.comment = meta.comments.iter().map(|c| e.string(c)).collect();
    if !meta.drop_frames.is_empty() {
        e.out.drop_frames = e.string(&meta.drop_frames);
    }
    if !meta.keep_frames.is_empty() {
        e.out.keep_frames = e.string(&meta.keep_frames);
    }

    let tables = &*profile.tables;
    let samples = &profile.samples;
    let mut location_ids: FxHashMap<StackId, Vec<u64>> = FxHashMap::default();
    e.out.sample.reserve(samples.len());
    for i in 0..samples.len() {
        let stack = samples.stacks[i];
        let location_id = match location_ids.get(&stack) {
            Some(ids) => ids.clone(),
            None => {
                let ids: Vec<u64> = tables.stack(stack).iter().map(|&l| e.location(l)).collect();
                location_ids.insert(stack, ids.clone());
                ids
            }
        };
        let label = tables
            .label_set(samples.labels[i])
            .iter()
            .map(|l| match l.value {
                LabelValue::Str(s) => proto::Label {
                    key: e.string(tables.string(l.key)),
                    str: e.string(tables.string(s)),
                    num: 0,
                    num_unit: 0,
                },
                LabelValue::Num { value, unit } => proto::Label {
                    key: e.string(tables.string(l.key)),
                    str: 0,
                    num: value,
                    num_unit: e.string(tables.string(unit)),
                },
            })
            .collect();
        let base = samples.diff_base.as_ref().map_or(0, |b| b[i]);
        e.out.sample.push(proto::Sample {
            location_id,
            value: vec![samples.values[i].wrapping_sub(base)],
            label,
        });
    }
    e.out.string_table = e.strings.into_strings();
    e.out
}
