//! Building pprof messages: the interner of functions, mappings and locations (of strings
//! through [`StringTable`]) that writers of pprof use (the server's own profiles, Pyroscope's
//! folded pushes, the agent).

use rustc_hash::FxHashMap;

use crate::proto;
use crate::strings::StringTable;

/// A `proto::Profile` under construction: strings and functions are interned, mappings,
/// locations and samples appended, ids assigned as pprof wants them (from 1, in order).
///
/// ```
/// use parca_pprof::ProfileBuilder;
///
/// let mut b = ProfileBuilder::new();
/// let main = b.function("main", "main", "main.c", 0);
/// let here = b.location(0, 0x1000, &[(main, 3)]);
/// b.sample(vec![here], vec![42], Vec::new());
/// let samples = b.value_type("samples", "count");
/// let mut profile = b.finish();
/// profile.sample_type = vec![samples];
/// assert_eq!(profile.string_table[profile.function[0].name as usize], "main");
/// assert_eq!(profile.sample[0].location_id, [1]);
/// ```
#[derive(Debug, Default)]
pub struct ProfileBuilder {
    profile: proto::Profile,
    strings: StringTable<'static>,
    function_ids: FxHashMap<(i64, i64, i64, i64), u64>,
    location_ids: FxHashMap<LocationKey, u64>,
}

/// A location's identity: mapping id, address, and its lines (function id, line number).
type LocationKey = (u64, u64, Vec<(u64, i64)>);

impl ProfileBuilder {
    /// An empty profile: its string table holds only `""`, as pprof requires.
    pub fn new() -> ProfileBuilder {
        ProfileBuilder::default()
    }

    /// Resumes building `profile`: its strings, functions and locations are found by later
    /// calls as if this builder had added them (to add what a decoded profile lacks, such as
    /// the lines of its unsymbolized locations: [`ProfileBuilder::location_mut`]).
    pub fn from_profile(mut profile: proto::Profile) -> ProfileBuilder {
        let mut b = ProfileBuilder {
            strings: StringTable::from_strings(std::mem::take(&mut profile.string_table)),
            ..ProfileBuilder::default()
        };
        for f in &profile.function {
            let key = (f.name, f.system_name, f.filename, f.start_line);
            b.function_ids.entry(key).or_insert(f.id);
        }
        for l in &profile.location {
            let lines = l.line.iter().map(|l| (l.function_id, l.line)).collect();
            b.location_ids
                .entry((l.mapping_id, l.address, lines))
                .or_insert(l.id);
        }
        b.profile = profile;
        b
    }

    /// The index of `s` in the string table, added on first use.
    pub fn string(&mut self, s: &str) -> i64 {
        self.strings.id(s)
    }

    /// A value type (`samples`/`count`, `cpu`/`nanoseconds`) with its strings interned.
    pub fn value_type(&mut self, kind: &str, unit: &str) -> proto::ValueType {
        proto::ValueType {
            r#type: self.string(kind),
            unit: self.string(unit),
        }
    }

    /// The id of the function with these fields, added on first use.
    pub fn function(
        &mut self,
        name: &str,
        system_name: &str,
        filename: &str,
        start_line: i64,
    ) -> u64 {
        let key = (
            self.string(name),
            self.string(system_name),
            self.string(filename),
            start_line,
        );
        if let Some(&id) = self.function_ids.get(&key) {
            return id;
        }
        let id = self.profile.function.len() as u64 + 1;
        self.profile.function.push(proto::Function {
            id,
            name: key.0,
            system_name: key.1,
            filename: key.2,
            start_line,
        });
        self.function_ids.insert(key, id);
        id
    }

    /// Appends `mapping` (its `id` is assigned) and returns its id.
    pub fn add_mapping(&mut self, mapping: proto::Mapping) -> u64 {
        let id = self.profile.mapping.len() as u64 + 1;
        self.profile.mapping.push(proto::Mapping { id, ..mapping });
        id
    }

    /// The mapping `id` (from [`ProfileBuilder::add_mapping`]), to update its flags.
    ///
    /// # Panics
    ///
    /// When `id` was not returned by this builder.
    pub fn mapping_mut(&mut self, id: u64) -> &mut proto::Mapping {
        &mut self.profile.mapping[id as usize - 1]
    }

    /// The id of the location at `address` in mapping `mapping_id` (0: none) whose lines are
    /// `lines` (function id, line number; innermost first), added on first use.
    pub fn location(&mut self, mapping_id: u64, address: u64, lines: &[(u64, i64)]) -> u64 {
        let key = (mapping_id, address, lines.to_vec());
        if let Some(&id) = self.location_ids.get(&key) {
            return id;
        }
        let id = self.add_location(mapping_id, address, lines);
        self.location_ids.insert(key, id);
        id
    }

    /// Appends a location without looking for an equal one (for callers that key locations
    /// their own way) and returns its id.
    pub fn add_location(&mut self, mapping_id: u64, address: u64, lines: &[(u64, i64)]) -> u64 {
        let id = self.profile.location.len() as u64 + 1;
        self.profile.location.push(proto::Location {
            id,
            mapping_id,
            address,
            line: lines
                .iter()
                .map(|&(function_id, line)| proto::Line {
                    function_id,
                    line,
                    column: 0,
                })
                .collect(),
            is_folded: false,
        });
        id
    }

    /// The location at `index` in the location table (not its id: decoded profiles may number
    /// them their own way), to set its lines. The builder does not find it again by its new
    /// lines.
    ///
    /// # Panics
    ///
    /// When there are not that many locations.
    pub fn location_mut(&mut self, index: usize) -> &mut proto::Location {
        &mut self.profile.location[index]
    }

    /// Appends a sample.
    pub fn sample(&mut self, location_id: Vec<u64>, value: Vec<i64>, label: Vec<proto::Label>) {
        self.profile.sample.push(proto::Sample {
            location_id,
            value,
            label,
        });
    }

    /// The profile: tables and samples; the caller sets the header (sample types, period, times).
    pub fn finish(mut self) -> proto::Profile {
        self.profile.string_table = self.strings.into_strings();
        self.profile
    }
}
