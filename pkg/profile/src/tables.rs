//! Interned symbols and stacks: each distinct string, mapping, function, location, stack and
//! label set is stored once and named by a dense `u32` id.
//!
//! Stacks are interned whole: the location ids of all distinct stacks lie end to end in one
//! arena, and a stack id names a slice of it. Interning costs one hash of the ids and one lookup
//! per sample. (A prefix tree was tried first: real CPU profiles share so few prefixes — 0.85
//! nodes per frame in a large Go profile — that its per-frame lookups cost three times more.)

use std::hash::{Hash, Hasher};

use hashbrown::HashTable;

use indexmap::{IndexMap, IndexSet};
use rustc_hash::{FxBuildHasher, FxHasher};

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub u32);

        impl $name {
            /// The id as an index into its table.
            #[inline]
            pub fn idx(self) -> usize {
                self.0 as usize
            }
        }
    };
}

id_type!(
    /// A string in [`Tables`]; id 0 is the empty string.
    StringId
);
id_type!(
    /// A mapping (object file) in [`Tables`].
    MappingId
);
id_type!(
    /// A function in [`Tables`].
    FunctionId
);
id_type!(
    /// A location (frame) in [`Tables`].
    LocationId
);
id_type!(
    /// A stack in [`Tables`]; [`StackId::EMPTY`] is the stack with no frames.
    StackId
);
id_type!(
    /// A set of sample labels in [`Tables`]; [`LabelSetId::EMPTY`] is the empty set.
    LabelSetId
);

impl StringId {
    /// The empty string, always present.
    pub const EMPTY: StringId = StringId(0);
}

impl StackId {
    /// The stack with no frames (a sample pprof recorded without locations).
    pub const EMPTY: StackId = StackId(0);
}

impl LabelSetId {
    /// No labels.
    pub const EMPTY: LabelSetId = LabelSetId(0);
}

/// An object file mapped into the profiled process.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Mapping {
    /// First address of the mapping (of the first process it was seen in).
    pub memory_start: u64,
    /// One past its last address.
    pub memory_limit: u64,
    /// File offset that `memory_start` maps to.
    pub file_offset: u64,
    /// Path of the object file.
    pub file: StringId,
    /// Build id of the object file, or empty.
    pub build_id: StringId,
    /// Whether the producer symbolized functions / files / lines / inlined frames.
    pub has_functions: bool,
    /// See `has_functions`.
    pub has_filenames: bool,
    /// See `has_functions`.
    pub has_line_numbers: bool,
    /// See `has_functions`.
    pub has_inline_frames: bool,
}

/// What makes two mappings the same object: the build id, or the file when there is none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct MappingKey {
    build_id: StringId,
    file: StringId,
}

/// A function. Two functions are the same when name, system name, file and start line agree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Function {
    /// Human-readable name, e.g. `runtime.mallocgc`.
    pub name: StringId,
    /// Name as the system knows it (mangled), often equal to `name`.
    pub system_name: StringId,
    /// Source file.
    pub filename: StringId,
    /// First line of the function, 0 when unknown.
    pub start_line: i64,
}

/// A source line of a location.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Line {
    /// The function.
    pub function: FunctionId,
    /// Line number, 0 when unknown.
    pub line: i64,
}

/// What makes two locations the same frame: their (function, line) list when symbolized, else
/// their object file and file-relative address (so that ASLR does not split frames).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LocationKey {
    /// Symbolized: source lines, innermost inlined callee first, caller last.
    Lines(Box<[Line]>),
    /// Unsymbolized: mapping (if any) and address relative to the object file.
    Address {
        /// The object file, `None` when the producer gave no mapping.
        mapping: Option<MappingId>,
        /// Address relative to the file (`address - memory_start + file_offset`), or the raw
        /// address without a mapping.
        address: u64,
    },
}

impl LocationKey {
    fn borrowed(&self) -> LocationKeyRef<'_> {
        match self {
            LocationKey::Lines(lines) => LocationKeyRef::Lines(lines),
            &LocationKey::Address { mapping, address } => {
                LocationKeyRef::Address { mapping, address }
            }
        }
    }
}

// Hashed as its borrowed form, so that a lookup needs no owned key (no allocation of lines
// for a location the tables hold already, the common case at ingest).
impl Hash for LocationKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.borrowed().hash(state);
    }
}

/// A [`LocationKey`] borrowed: what lookups hash and compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum LocationKeyRef<'a> {
    Lines(&'a [Line]),
    Address {
        mapping: Option<MappingId>,
        address: u64,
    },
}

impl indexmap::Equivalent<LocationKey> for LocationKeyRef<'_> {
    fn equivalent(&self, key: &LocationKey) -> bool {
        *self == key.borrowed()
    }
}

/// Where a location lies in memory, kept for export and later symbolization.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocationAddress {
    /// The object file, if known.
    pub mapping: Option<MappingId>,
    /// Address relative to the object file when `mapping` is known, else the raw address.
    pub address: u64,
}

/// A value of a sample label: a string, or a number with a unit (pprof's numeric labels).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LabelValue {
    /// A string value.
    Str(StringId),
    /// A numeric value and its unit (possibly empty).
    Num {
        /// The number.
        value: i64,
        /// Its unit, e.g. `bytes`.
        unit: StringId,
    },
}

/// One sample label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Label {
    /// Label name.
    pub key: StringId,
    /// Its value.
    pub value: LabelValue,
}

type Set<T> = IndexSet<T, FxBuildHasher>;

/// Interned strings end to end in one buffer, so that interning a string costs no allocation
/// of its own (a profile has thousands, and they dominated decoding when each was boxed).
#[derive(Debug, Clone)]
struct Strings {
    text: String,
    /// Where string `i` starts in `text`; it ends where string `i + 1` starts.
    starts: Vec<u32>,
    /// String ids, hashed by their text.
    index: HashTable<u32>,
}

impl Strings {
    fn new() -> Self {
        let mut strings = Strings {
            text: String::new(),
            starts: vec![0],
            index: HashTable::new(),
        };
        strings.intern("");
        strings
    }

    #[inline]
    fn get(&self, id: usize) -> &str {
        &self.text[self.starts[id] as usize..self.starts[id + 1] as usize]
    }

    fn len(&self) -> usize {
        self.starts.len() - 1
    }

    fn iter(&self) -> impl Iterator<Item = &str> {
        (0..self.len()).map(|i| self.get(i))
    }

    fn intern(&mut self, s: &str) -> u32 {
        let hash = hash_str(s);
        if let Some(&id) = self.index.find(hash, |&id| self.get(id as usize) == s) {
            return id;
        }
        let id = self.len() as u32;
        self.text.push_str(s);
        let end = u32::try_from(self.text.len())
            .expect("under 4 GiB of distinct symbol text in one set of tables");
        self.starts.push(end);
        let (text, starts) = (&self.text, &self.starts);
        self.index.insert_unique(hash, id, |&id| {
            hash_str(&text[starts[id as usize] as usize..starts[id as usize + 1] as usize])
        });
        id
    }

    fn reserve(&mut self, n: usize) {
        self.starts.reserve(n);
        let (text, starts) = (&self.text, &self.starts);
        self.index.reserve(n, |&id| {
            hash_str(&text[starts[id as usize] as usize..starts[id as usize + 1] as usize])
        });
    }
}

fn hash_str(s: &str) -> u64 {
    let mut hasher = FxHasher::default();
    hasher.write(s.as_bytes());
    hasher.finish()
}
type Map<K, V> = IndexMap<K, V, FxBuildHasher>;

/// Which tables ids belong to: new for every [`Tables`] made or cloned, kept while it grows.
/// Tables only grow, so an id read from tables of one identity means the same thing later:
/// what lets an [`crate::Importer`] keep its memo of a source between imports without holding
/// the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TablesIdentity(u64);

/// The identity field of [`Tables`]: a clone gets a new one, as it grows apart from the original.
#[derive(Debug)]
struct Identity(TablesIdentity);

impl Identity {
    fn fresh() -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Identity(TablesIdentity(
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        ))
    }
}

impl Clone for Identity {
    fn clone(&self) -> Self {
        Identity::fresh()
    }
}

/// The interned symbols and stacks that profiles point into.
///
/// Tables only grow; ids stay valid for the tables' life. Many profiles can share one `Tables`
/// (behind an `Arc`), which is what makes merging them an array add.
#[derive(Debug, Clone)]
pub struct Tables {
    strings: Strings,
    mappings: Map<MappingKey, Mapping>,
    functions: Set<Function>,
    locations: Map<LocationKey, LocationAddress>,
    /// Location ids of every stack, leaf first, end to end.
    stack_frames: Vec<LocationId>,
    /// Where stack `i` starts in `stack_frames`; it ends where stack `i + 1` starts.
    stack_starts: Vec<u32>,
    /// Stack ids, hashed by their frames (the hash is recomputed from the arena on growth).
    stack_index: HashTable<u32>,
    label_sets: Set<Box<[Label]>>,
    identity: Identity,
}

impl Default for Tables {
    fn default() -> Self {
        let mut tables = Tables {
            strings: Strings::new(),
            mappings: Map::default(),
            functions: Set::default(),
            locations: Map::default(),
            stack_frames: Vec::new(),
            stack_starts: vec![0, 0],
            stack_index: HashTable::new(),
            label_sets: Set::default(),
            identity: Identity::fresh(),
        };
        let empty = hash_frames(&[]);
        tables.stack_index.insert_unique(empty, 0, |_| empty);
        tables.label_sets.insert(Box::default());
        tables
    }
}

fn intern<T: Hash + Eq>(set: &mut Set<T>, value: T) -> u32 {
    set.insert_full(value).0 as u32
}

impl Tables {
    /// Empty tables (holding only the empty string, the empty stack and the empty label set).
    pub fn new() -> Self {
        Self::default()
    }

    /// These tables' identity: the same for as long as they live and grow, another for a clone.
    pub fn identity(&self) -> TablesIdentity {
        self.identity.0
    }

    /// Interns a string.
    pub fn intern_string(&mut self, s: &str) -> StringId {
        StringId(self.strings.intern(s))
    }

    /// Interns a mapping; one with the same build id (or, without one, the same file) is the same.
    pub fn intern_mapping(&mut self, mapping: Mapping) -> MappingId {
        let key = MappingKey {
            build_id: mapping.build_id,
            file: if mapping.build_id == StringId::EMPTY {
                mapping.file
            } else {
                StringId::EMPTY
            },
        };
        match self.mappings.get_index_of(&key) {
            Some(idx) => MappingId(idx as u32),
            None => MappingId(self.mappings.insert_full(key, mapping).0 as u32),
        }
    }

    /// Interns a function.
    pub fn intern_function(&mut self, function: Function) -> FunctionId {
        FunctionId(intern(&mut self.functions, function))
    }

    /// Interns a location. `address` is relative to the mapping's object file
    /// ([`relative_address`] of the producer's own mapping), or raw without a mapping.
    pub fn intern_location(
        &mut self,
        mapping: Option<MappingId>,
        address: u64,
        lines: Box<[Line]>,
    ) -> LocationId {
        self.intern_location_with(mapping, address, &lines, || lines.clone())
    }

    /// [`Tables::intern_location`] with borrowed `lines`, copied only for a location the tables
    /// do not hold yet (at ingest, most locations of a profile are held already).
    pub fn intern_location_lines(
        &mut self,
        mapping: Option<MappingId>,
        address: u64,
        lines: &[Line],
    ) -> LocationId {
        self.intern_location_with(mapping, address, lines, || lines.into())
    }

    fn intern_location_with(
        &mut self,
        mapping: Option<MappingId>,
        address: u64,
        lines: &[Line],
        owned: impl FnOnce() -> Box<[Line]>,
    ) -> LocationId {
        let borrowed = if lines.is_empty() {
            LocationKeyRef::Address { mapping, address }
        } else {
            LocationKeyRef::Lines(lines)
        };
        if let Some(idx) = self.locations.get_index_of(&borrowed) {
            return LocationId(idx as u32);
        }
        let key = match borrowed {
            LocationKeyRef::Address { mapping, address } => {
                LocationKey::Address { mapping, address }
            }
            LocationKeyRef::Lines(_) => LocationKey::Lines(owned()),
        };
        let location = LocationAddress { mapping, address };
        LocationId(self.locations.insert_full(key, location).0 as u32)
    }

    /// Interns a stack given as location ids, leaf first.
    pub fn intern_stack(&mut self, frames: &[LocationId]) -> StackId {
        let hash = hash_frames(frames);
        let (arena, starts) = (&self.stack_frames, &self.stack_starts);
        let slice =
            |id: u32| &arena[starts[id as usize] as usize..starts[id as usize + 1] as usize];
        if let Some(&id) = self.stack_index.find(hash, |&id| slice(id) == frames) {
            return StackId(id);
        }
        let id = (self.stack_starts.len() - 1) as u32;
        self.stack_frames.extend_from_slice(frames);
        self.stack_starts.push(self.stack_frames.len() as u32);
        let (arena, starts) = (&self.stack_frames, &self.stack_starts);
        self.stack_index.insert_unique(hash, id, |&id| {
            hash_frames(&arena[starts[id as usize] as usize..starts[id as usize + 1] as usize])
        });
        StackId(id)
    }

    /// Makes room for `n_bytes` more bytes of string text.
    pub fn reserve_string_bytes(&mut self, n_bytes: usize) {
        self.strings.text.reserve(n_bytes);
    }

    /// Makes room for this many more strings, functions and locations, so that interning a
    /// profile's tables does not rehash them as they grow.
    pub fn reserve_symbols(&mut self, n_strings: usize, n_functions: usize, n_locations: usize) {
        self.strings.reserve(n_strings);
        self.functions.reserve(n_functions);
        self.locations.reserve(n_locations);
    }

    /// Makes room for `n_stacks` more stacks of `n_frames` frames in all, so that a large profile
    /// does not grow the arena and rehash the index again and again while it is interned.
    pub fn reserve_stacks(&mut self, n_stacks: usize, n_frames: usize) {
        self.stack_frames.reserve(n_frames);
        self.stack_starts.reserve(n_stacks);
        let (arena, starts) = (&self.stack_frames, &self.stack_starts);
        self.stack_index.reserve(n_stacks, |&id| {
            hash_frames(&arena[starts[id as usize] as usize..starts[id as usize + 1] as usize])
        });
    }

    /// Interns a label set; the labels are sorted first so that order does not matter.
    pub fn intern_label_set(&mut self, mut labels: Vec<Label>) -> LabelSetId {
        self.intern_labels(&mut labels)
    }

    /// Interns the label set of `labels`, sorting them in place; allocates only for a set not
    /// seen before (most samples of a profile repeat a few sets).
    pub fn intern_labels(&mut self, labels: &mut [Label]) -> LabelSetId {
        if labels.is_empty() {
            return LabelSetId::EMPTY;
        }
        labels.sort_unstable();
        if let Some(idx) = self.label_sets.get_index_of(&*labels) {
            return LabelSetId(idx as u32);
        }
        LabelSetId(intern(&mut self.label_sets, labels.into()))
    }

    /// The string with id `id`.
    #[inline]
    pub fn string(&self, id: StringId) -> &str {
        self.strings.get(id.idx())
    }

    /// The mapping with id `id`.
    #[inline]
    pub fn mapping(&self, id: MappingId) -> &Mapping {
        &self.mappings[id.idx()]
    }

    /// The function with id `id`.
    #[inline]
    pub fn function(&self, id: FunctionId) -> &Function {
        &self.functions[id.idx()]
    }

    /// The source lines of a location (empty when unsymbolized), innermost first.
    #[inline]
    pub fn lines(&self, id: LocationId) -> &[Line] {
        match self.locations.get_index(id.idx()).map(|(key, _)| key) {
            Some(LocationKey::Lines(lines)) => lines,
            _ => &[],
        }
    }

    /// Where a location lies: its mapping and file-relative address.
    #[inline]
    pub fn location_address(&self, id: LocationId) -> LocationAddress {
        self.locations[id.idx()]
    }

    /// The location ids of a stack, leaf first.
    #[inline]
    pub fn stack(&self, id: StackId) -> &[LocationId] {
        let (start, end) = (self.stack_starts[id.idx()], self.stack_starts[id.idx() + 1]);
        &self.stack_frames[start as usize..end as usize]
    }

    /// The labels of a label set, sorted.
    #[inline]
    pub fn label_set(&self, id: LabelSetId) -> &[Label] {
        &self.label_sets[id.idx()]
    }

    /// Whether `other` holds the same entries under the same ids, so that an id means the same
    /// in both: true for two decodes of pprofs whose symbols and stacks came in the same order,
    /// such as consecutive scrapes of a program that ran no new code in between. Much cheaper
    /// than importing one into the other.
    pub fn same_ids_as(&self, other: &Tables) -> bool {
        self.strings.len() == other.strings.len()
            && self.mappings.len() == other.mappings.len()
            && self.functions.len() == other.functions.len()
            && self.locations.len() == other.locations.len()
            && self.label_sets.len() == other.label_sets.len()
            && self.stack_starts == other.stack_starts
            && self.stack_frames == other.stack_frames
            && self.locations.iter().eq(other.locations.iter())
            && self.functions.iter().eq(other.functions.iter())
            && self.mappings.iter().eq(other.mappings.iter())
            && self.label_sets.iter().eq(other.label_sets.iter())
            && self.strings.iter().eq(other.strings.iter())
    }

    /// Number of strings.
    pub fn n_strings(&self) -> usize {
        self.strings.len()
    }

    /// Number of mappings.
    pub fn n_mappings(&self) -> usize {
        self.mappings.len()
    }

    /// Number of functions.
    pub fn n_functions(&self) -> usize {
        self.functions.len()
    }

    /// Number of locations.
    pub fn n_locations(&self) -> usize {
        self.locations.len()
    }

    /// Number of stacks, including the empty stack.
    pub fn n_stacks(&self) -> usize {
        self.stack_starts.len() - 1
    }

    /// Number of label sets, including the empty one.
    pub fn n_label_sets(&self) -> usize {
        self.label_sets.len()
    }

    /// The name to show for a frame: the function's name, or for an unsymbolized frame
    /// `binary+0xoffset` (or `0xaddress` without a mapping).
    pub fn location_display_name(&self, id: LocationId) -> String {
        let address = self.location_address(id);
        match address.mapping {
            Some(m) => format!(
                "{}+0x{:x}",
                basename(self.string(self.mapping(m).file)),
                address.address
            ),
            None => format!("0x{:x}", address.address),
        }
    }

    /// The base name of a location's object file, or `""`.
    pub fn location_binary(&self, id: LocationId) -> &str {
        match self.location_address(id).mapping {
            Some(m) => basename(self.string(self.mapping(m).file)),
            None => "",
        }
    }
}

/// Hashes a stack's frames (FxHash over the ids: a multiply and a rotate per frame).
#[inline]
fn hash_frames(frames: &[LocationId]) -> u64 {
    let mut hasher = FxHasher::default();
    hasher.write_usize(frames.len());
    for f in frames {
        hasher.write_u32(f.0);
    }
    hasher.finish()
}

/// The address of `address` relative to the object file of a mapping that starts at
/// `memory_start` and maps file offset `file_offset` there. Relative addresses are the same in
/// every process that loads the file, wherever ASLR puts it.
#[inline]
pub fn relative_address(address: u64, memory_start: u64, file_offset: u64) -> u64 {
    address.wrapping_sub(memory_start).wrapping_add(file_offset)
}

/// The last path component of `path`.
pub fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_stacks_are_stored_once() {
        let mut t = Tables::new();
        let name = t.intern_string("main");
        let f = t.intern_function(Function {
            name,
            system_name: name,
            filename: StringId::EMPTY,
            start_line: 0,
        });
        let a = t.intern_location(
            None,
            0,
            vec![Line {
                function: f,
                line: 1,
            }]
            .into(),
        );
        let b = t.intern_location(
            None,
            0,
            vec![Line {
                function: f,
                line: 2,
            }]
            .into(),
        );
        let s1 = t.intern_stack(&[b, a]);
        let s2 = t.intern_stack(&[b, a]);
        let s3 = t.intern_stack(&[a]);
        assert_eq!(s1, s2);
        assert_ne!(s1, s3);
        assert_eq!(t.intern_stack(&[]), StackId::EMPTY);
        assert_eq!(t.n_stacks(), 3);
        assert_eq!(t.stack(s1), &[b, a]);
    }

    #[test]
    fn unsymbolized_frames_are_one_across_aslr() {
        let mut t = Tables::new();
        let file = t.intern_string("/bin/app");
        let mapping = |start| Mapping {
            memory_start: start,
            memory_limit: start + 0x1000,
            file_offset: 0x400,
            file,
            build_id: StringId::EMPTY,
            has_functions: false,
            has_filenames: false,
            has_line_numbers: false,
            has_inline_frames: false,
        };
        let m1 = t.intern_mapping(mapping(0x1000));
        let m2 = t.intern_mapping(mapping(0x7000));
        assert_eq!(m1, m2);
        // The same instruction in two processes that loaded the binary at different addresses.
        let a = t.intern_location(
            Some(m1),
            relative_address(0x1010, 0x1000, 0x400),
            Box::default(),
        );
        let b = t.intern_location(
            Some(m2),
            relative_address(0x7010, 0x7000, 0x400),
            Box::default(),
        );
        assert_eq!(a, b);
        assert_eq!(t.location_display_name(a), "app+0x410");
    }
}
