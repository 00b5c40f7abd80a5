//! The pprof protobuf messages (`profile.proto` of google/pprof), derived by hand with prost.
//!
//! There is no `protoc` on our machines, and the schema is small and frozen, so the messages are
//! written out here with their field numbers. Field numbers and types follow
//! <https://github.com/google/pprof/blob/main/proto/profile.proto> exactly; comments say what each
//! field means where the name does not.

/// A whole pprof profile: sample types, samples, and the tables they point into.
///
/// Every `i64` that names a string is an index into `string_table`, whose entry 0 must be `""`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Profile {
    /// One entry per value in each sample, e.g. `samples/count` and `cpu/nanoseconds`.
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    /// The measurements: a stack (location ids, leaf first), values and labels.
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    /// Memory mappings (binaries and libraries) the locations' addresses fall into.
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    /// Program counters with their (possibly inlined) source lines.
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    /// Functions named by the locations' lines.
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    /// All strings of the profile; entry 0 is always the empty string.
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    /// Regex (string index) of frames to drop when presenting, as written by the producer.
    #[prost(int64, tag = "7")]
    pub drop_frames: i64,
    /// Regex (string index) of frames to keep when presenting, as written by the producer.
    #[prost(int64, tag = "8")]
    pub keep_frames: i64,
    /// When the profile was taken, in nanoseconds since the Unix epoch (0 when unknown).
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    /// The window the profile covers, in nanoseconds (0 for a snapshot).
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    /// What one period measures, e.g. `cpu/nanoseconds`.
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    /// Sampling period in units of `period_type`.
    #[prost(int64, tag = "12")]
    pub period: i64,
    /// Free-form comments (string indices).
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    /// Type (string index) of the sample type a viewer should show first.
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

/// A kind of value and its unit, both as string indices, e.g. `cpu` in `nanoseconds`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, prost::Message)]
pub struct ValueType {
    /// The kind of value (string index), e.g. `cpu`, `alloc_space`.
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    /// Its unit (string index), e.g. `nanoseconds`, `bytes`, `count`.
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

/// One measurement: a stack and one value per sample type.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    /// Location ids, leaf (innermost call) first.
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    /// One value per entry of `Profile::sample_type`.
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    /// Labels attached by the program, e.g. Go's `pprof.Do` labels or `bytes` of a heap sample.
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

/// A key with either a string or a numeric value (with an optional unit).
#[derive(Clone, Copy, PartialEq, Eq, Hash, prost::Message)]
pub struct Label {
    /// Label name (string index).
    #[prost(int64, tag = "1")]
    pub key: i64,
    /// String value (string index); 0 when the label is numeric.
    #[prost(int64, tag = "2")]
    pub str: i64,
    /// Numeric value, used when `str` is 0.
    #[prost(int64, tag = "3")]
    pub num: i64,
    /// Unit of `num` (string index), e.g. `bytes`.
    #[prost(int64, tag = "4")]
    pub num_unit: i64,
}

/// A mapped object file: address range, file offset, file name and build id.
#[derive(Clone, PartialEq, Eq, Hash, prost::Message)]
pub struct Mapping {
    /// Unique non-zero id, referenced by `Location::mapping_id`.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// First address of the mapping in the process.
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    /// One past the last address of the mapping.
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    /// Offset in the file that `memory_start` maps to.
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    /// Object file path (string index).
    #[prost(int64, tag = "5")]
    pub filename: i64,
    /// Build id of the object file (string index), e.g. a GNU build-id in hex.
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    /// The producer symbolized function names for this mapping.
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
    /// The producer symbolized file names for this mapping.
    #[prost(bool, tag = "8")]
    pub has_filenames: bool,
    /// The producer symbolized line numbers for this mapping.
    #[prost(bool, tag = "9")]
    pub has_line_numbers: bool,
    /// The producer expanded inlined frames for this mapping.
    #[prost(bool, tag = "10")]
    pub has_inline_frames: bool,
}

/// A program counter, with the source lines it stands for (inlined callees first).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Location {
    /// Unique non-zero id, referenced by `Sample::location_id`.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// The mapping the address falls in (0 when unknown).
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    /// Instruction address (0 when the producer gave only symbols).
    #[prost(uint64, tag = "3")]
    pub address: u64,
    /// Source lines; the last is the caller, earlier ones are inlined into it.
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
    /// Several frames were folded into this one by the producer.
    #[prost(bool, tag = "5")]
    pub is_folded: bool,
}

/// A function and line within a location.
#[derive(Clone, Copy, PartialEq, Eq, Hash, prost::Message)]
pub struct Line {
    /// The function (non-zero id of a `Function`).
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    /// Line number in the function's file (0 when unknown).
    #[prost(int64, tag = "2")]
    pub line: i64,
    /// Column number (0 when unknown).
    #[prost(int64, tag = "3")]
    pub column: i64,
}

/// A function: display name, system (mangled) name, file and first line.
#[derive(Clone, Copy, PartialEq, Eq, Hash, prost::Message)]
pub struct Function {
    /// Unique non-zero id, referenced by `Line::function_id`.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Human-readable name (string index), e.g. `runtime.mallocgc`.
    #[prost(int64, tag = "2")]
    pub name: i64,
    /// Name as the system knows it, e.g. mangled (string index).
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    /// Source file (string index).
    #[prost(int64, tag = "4")]
    pub filename: i64,
    /// Line where the function begins.
    #[prost(int64, tag = "5")]
    pub start_line: i64,
}
