//! google/pprof's legacy (pre-protobuf) profile formats, converted to the protobuf model.
//!
//! google/pprof still reads these, so we do too, with its numbers: Go's and Java's binary CPU
//! format (`cpu.rs`), gperftools' and Go's text heap profiles and gperftools' growth and
//! fragmentation profiles (`heap.rs`), Go's goroutine and threadcreate counts (`count.rs`),
//! gperftools' thread profiles (`thread.rs`), gperftools' and Go's contention profiles
//! (`contention.rs`) and Java's heap and contention profiles (`java.rs`). The parsers are tried in
//! google/pprof's order (`parseLegacy` in `profile/profile.go`); each first checks its header
//! and answers `Ok(None)` when the bytes are not its format, and an error naming the line (or
//! byte) once they are and something is wrong. Text formats are tried only on bytes that look
//! like text (`text::looks_like_text`), so that binary input is never read line by line.
//!
//! Every parser fills a [`LegacyProfile`], google/pprof's `Profile` cut down to what legacy
//! formats have, and ends with the steps google/pprof takes after parsing: the memory map
//! (`mappings.rs`: parsing, `massageMappings`, `remapMappingIDs`), `remapLocationIDs` and
//! `remapFunctionIDs` (locations and functions in order of first use), and `addLegacyFrameInfo`
//! (the `drop_frames`/`keep_frames` of allocator, lock and profiler frames).
//!
//! Memory: everything kept is charged to a [`Budget`] at what it will cost as prost messages,
//! and conversion stops with [`Error::LegacyTooLarge`] past `DecodeOptions::max_decompressed_bytes`;
//! text is read a line at a time, so garbage costs nothing but the time to look at it.

mod contention;
mod count;
mod cpu;
mod heap;
mod java;
mod mappings;
mod text;
mod thread;

use rustc_hash::FxHashMap;

use crate::{Error, proto};

/// Converts `bytes` (decompressed) from one of google/pprof's legacy formats; `Ok(None)` when
/// they are in none of them. `limit_bytes` bounds the memory the conversion may take.
pub(crate) fn parse(bytes: &[u8], limit_bytes: usize) -> Result<Option<proto::Profile>, Error> {
    let profile = match cpu::parse(bytes, limit_bytes)? {
        Some(profile) => profile,
        None if !text::looks_like_text(bytes) => return Ok(None),
        None => match parse_text(bytes, limit_bytes)? {
            Some(profile) => profile,
            None => return Ok(None),
        },
    };
    Ok(Some(profile.into_proto()))
}

/// The text formats, in google/pprof's order.
fn parse_text(bytes: &[u8], limit_bytes: usize) -> Result<Option<LegacyProfile>, Error> {
    if let Some(profile) = heap::parse(bytes, limit_bytes)? {
        return Ok(Some(profile));
    }
    if let Some(profile) = count::parse(bytes, limit_bytes)? {
        return Ok(Some(profile));
    }
    if let Some(profile) = thread::parse(bytes, limit_bytes)? {
        return Ok(Some(profile));
    }
    // Java's contention profiles start with gperftools' header (`--- contentionz 1 ---`), and
    // google/pprof tells them apart by trying gperftools' reading first: what it cannot read
    // (Java's `format = java` attribute, to begin with) goes to Java's. When neither reads it,
    // Java's parser says `None` if the attributes were not Java's, and gperftools' error stands.
    match contention::parse(bytes, limit_bytes) {
        Ok(Some(profile)) => Ok(Some(profile)),
        Ok(None) => java::parse(bytes, limit_bytes),
        Err(err) => match java::parse(bytes, limit_bytes)? {
            Some(profile) => Ok(Some(profile)),
            None => Err(err),
        },
    }
}

/// A legacy format's name in errors, e.g. `Go CPU`, `heap`, `Java contention`.
type Format = &'static str;

fn malformed(format: Format, fault: impl Into<String>) -> Error {
    Error::Legacy {
        format,
        fault: fault.into(),
    }
}

/// A value type as strings, e.g. `alloc_space`/`bytes`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct ValueType {
    r#type: String,
    unit: String,
}

impl ValueType {
    fn new(r#type: &str, unit: &str) -> ValueType {
        ValueType {
            r#type: r#type.to_owned(),
            unit: unit.to_owned(),
        }
    }
}

/// The most sample types a legacy format has (the heap profile's alloc and inuse pairs).
const MAX_VALUES: usize = 4;

/// One sample: its frames are `frames[start..start + len]` of the profile, leaf first.
#[derive(Debug, Clone, Copy)]
struct Sample {
    start: usize,
    len: usize,
    values: [i64; MAX_VALUES],
    /// The `bytes` numeric label of heap samples (the average allocation size).
    bytes: Option<i64>,
}

/// A location: an address, and once known its mapping and (Java only) its function and line.
#[derive(Debug, Clone, Copy)]
struct Location {
    address: u64,
    /// Position in [`LegacyProfile::mappings`].
    mapping: Option<u32>,
    /// Position in [`LegacyProfile::functions`] and line number.
    line: Option<(u32, i64)>,
}

#[derive(Debug, Clone)]
struct Function {
    name: String,
    filename: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Mapping {
    start: u64,
    limit: u64,
    offset: u64,
    file: String,
    build_id: String,
}

/// What the converted profile will cost in memory, charged as it grows (see [`cost`]).
#[derive(Debug, Clone, Copy)]
struct Budget {
    used: usize,
    limit_bytes: usize,
}

/// The charges of [`Budget`]: roughly what each thing costs once it is a prost message (with its
/// vectors' heap blocks) plus what the conversion holds for it meanwhile.
mod cost {
    pub(super) const SAMPLE: usize = 192;
    pub(super) const FRAME: usize = 12;
    pub(super) const LOCATION: usize = 112;
    pub(super) const FUNCTION: usize = 128;
    pub(super) const MAPPING: usize = 160;
}

impl Budget {
    fn charge(&mut self, bytes: usize) -> Result<(), Error> {
        self.used = self.used.saturating_add(bytes);
        if self.used > self.limit_bytes {
            return Err(Error::LegacyTooLarge {
                limit_bytes: self.limit_bytes,
            });
        }
        Ok(())
    }
}

/// google/pprof's `Profile` as legacy parsers fill it: samples point at locations, locations at
/// functions and mappings, all by position; ids are given when it becomes a [`proto::Profile`].
#[derive(Debug)]
struct LegacyProfile {
    sample_types: Vec<ValueType>,
    period_type: ValueType,
    period: i64,
    duration_nanos: i64,
    samples: Vec<Sample>,
    /// All samples' location positions, end to end.
    frames: Vec<u32>,
    locations: Vec<Location>,
    /// The location of each address, while samples are read.
    location_of_address: FxHashMap<u64, u32>,
    functions: Vec<Function>,
    mappings: Vec<Mapping>,
    budget: Budget,
}

impl LegacyProfile {
    fn new(
        sample_types: Vec<ValueType>,
        period_type: ValueType,
        period: i64,
        limit_bytes: usize,
    ) -> LegacyProfile {
        LegacyProfile {
            sample_types,
            period_type,
            period,
            duration_nanos: 0,
            samples: Vec::new(),
            frames: Vec::new(),
            locations: Vec::new(),
            location_of_address: FxHashMap::default(),
            functions: Vec::new(),
            mappings: Vec::new(),
            budget: Budget {
                used: 0,
                limit_bytes,
            },
        }
    }

    /// Adds a frame to the sample being read (see [`LegacyProfile::push_sample`]): the location
    /// of `address`, made at its first use.
    fn push_frame(&mut self, address: u64) -> Result<(), Error> {
        self.budget.charge(cost::FRAME)?;
        let next = self.locations.len() as u32;
        let location = *self.location_of_address.entry(address).or_insert(next);
        if location == next {
            self.budget.charge(cost::LOCATION)?;
            self.locations.push(Location {
                address,
                mapping: None,
                line: None,
            });
        }
        self.frames.push(location);
        Ok(())
    }

    /// Ends a sample whose frames were pushed since `frames_len()` was `start`.
    fn push_sample(
        &mut self,
        start: usize,
        values: &[i64],
        bytes: Option<i64>,
    ) -> Result<(), Error> {
        debug_assert_eq!(values.len(), self.sample_types.len());
        self.budget.charge(cost::SAMPLE)?;
        let mut sample = Sample {
            start,
            len: self.frames.len() - start,
            values: [0; MAX_VALUES],
            bytes,
        };
        sample.values[..values.len()].copy_from_slice(values);
        self.samples.push(sample);
        Ok(())
    }

    fn frames_len(&self) -> usize {
        self.frames.len()
    }

    fn stack(&self, sample: &Sample) -> &[u32] {
        &self.frames[sample.start..sample.start + sample.len]
    }

    fn address(&self, location: u32) -> u64 {
        self.locations[location as usize].address
    }

    /// Takes the second frame out of sample `i`'s stack.
    fn remove_second_frame(&mut self, i: usize) {
        let s = &mut self.samples[i];
        let end = s.start + s.len;
        self.frames.copy_within(s.start + 2..end, s.start + 1);
        s.len -= 1;
    }

    /// google/pprof's `cleanupDuplicateLocations`: the profiler may record the leaf twice, from
    /// the signal context and (moved back by one, as callers are) from the unwinder.
    fn remove_duplicate_leaves(&mut self) {
        for i in 0..self.samples.len() {
            let stack = self.stack(&self.samples[i]);
            if stack.len() > 1 && self.address(stack[0]) == self.address(stack[1]).wrapping_add(1) {
                self.remove_second_frame(i);
            }
        }
    }

    /// google/pprof's `remapLocationIDs`: locations in the order samples first use them; the ones
    /// no sample uses are gone.
    fn remap_locations(&mut self) {
        self.location_of_address = FxHashMap::default();
        let mut new_position = vec![u32::MAX; self.locations.len()];
        let mut locations = Vec::with_capacity(self.locations.len());
        for sample in &self.samples {
            for frame in &mut self.frames[sample.start..sample.start + sample.len] {
                let old = *frame as usize;
                if new_position[old] == u32::MAX {
                    new_position[old] = locations.len() as u32;
                    locations.push(self.locations[old]);
                }
                *frame = new_position[old];
            }
        }
        self.locations = locations;
    }

    /// google/pprof's `remapFunctionIDs`: functions in the order locations first use them.
    fn remap_functions(&mut self) {
        let mut new_position = vec![u32::MAX; self.functions.len()];
        let mut order = Vec::new();
        for location in &mut self.locations {
            if let Some((function, _)) = &mut location.line {
                let old = *function as usize;
                if new_position[old] == u32::MAX {
                    new_position[old] = order.len() as u32;
                    order.push(old);
                }
                *function = new_position[old];
            }
        }
        let mut functions: Vec<Option<Function>> = std::mem::take(&mut self.functions)
            .into_iter()
            .map(Some)
            .collect();
        self.functions = order
            .into_iter()
            .map(|old| functions[old].take().expect("each function is taken once"))
            .collect();
    }

    /// google/pprof's `addLegacyFrameInfo`: the frames a viewer drops (allocators for heap
    /// profiles, lock internals for contention, the profiler's signal handler for the rest) and,
    /// for heap profiles, the Go runtime frames it keeps.
    fn frame_info(&self) -> (String, String) {
        let types: Vec<&str> = self
            .sample_types
            .iter()
            .map(|t| t.r#type.as_str())
            .collect();
        if frames::HEAPZ_SAMPLE_TYPES.contains(&types.as_slice()) {
            (frames::ALLOC.join("|"), frames::ALLOC_SKIP.join("|"))
        } else if types == ["contentions", "delay"] {
            (frames::LOCK.join("|"), String::new())
        } else {
            (frames::CPU_PROFILER.join("|"), String::new())
        }
    }

    fn into_proto(self) -> proto::Profile {
        let (drop_frames, keep_frames) = self.frame_info();
        let mut strings = StringTable::default();
        let value_type = |t: &ValueType, strings: &mut StringTable| proto::ValueType {
            r#type: strings.intern(&t.r#type),
            unit: strings.intern(&t.unit),
        };
        let sample_type = self
            .sample_types
            .iter()
            .map(|t| value_type(t, &mut strings))
            .collect();
        let period_type = Some(value_type(&self.period_type, &mut strings));
        let bytes = strings.intern("bytes");
        let n_values = self.sample_types.len();
        let sample = self
            .samples
            .iter()
            .map(|s| proto::Sample {
                location_id: self.stack(s).iter().map(|&l| u64::from(l) + 1).collect(),
                value: s.values[..n_values].to_vec(),
                label: s
                    .bytes
                    .map(|num| proto::Label {
                        key: bytes,
                        num,
                        ..Default::default()
                    })
                    .into_iter()
                    .collect(),
            })
            .collect();
        let mapping = self
            .mappings
            .iter()
            .enumerate()
            .map(|(i, m)| proto::Mapping {
                id: i as u64 + 1,
                memory_start: m.start,
                memory_limit: m.limit,
                file_offset: m.offset,
                filename: strings.intern(&m.file),
                build_id: strings.intern(&m.build_id),
                ..Default::default()
            })
            .collect();
        let location = self
            .locations
            .iter()
            .enumerate()
            .map(|(i, l)| proto::Location {
                id: i as u64 + 1,
                mapping_id: l.mapping.map_or(0, |m| u64::from(m) + 1),
                address: l.address,
                line: l
                    .line
                    .map(|(function, line)| proto::Line {
                        function_id: u64::from(function) + 1,
                        line,
                        column: 0,
                    })
                    .into_iter()
                    .collect(),
                is_folded: false,
            })
            .collect();
        let function = self
            .functions
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let name = strings.intern(&f.name);
                proto::Function {
                    id: i as u64 + 1,
                    name,
                    system_name: name,
                    filename: strings.intern(&f.filename),
                    start_line: 0,
                }
            })
            .collect();
        proto::Profile {
            sample_type,
            sample,
            mapping,
            location,
            function,
            drop_frames: strings.intern(&drop_frames),
            keep_frames: strings.intern(&keep_frames),
            duration_nanos: self.duration_nanos,
            period_type,
            period: self.period,
            string_table: strings.strings,
            ..Default::default()
        }
    }
}

/// Strings interned into a pprof string table (entry 0 is `""`).
struct StringTable {
    strings: Vec<String>,
    index: FxHashMap<String, i64>,
}

impl Default for StringTable {
    fn default() -> Self {
        StringTable {
            strings: vec![String::new()],
            index: FxHashMap::from_iter([(String::new(), 0)]),
        }
    }
}

impl StringTable {
    fn intern(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.strings.len() as i64;
        self.strings.push(s.to_owned());
        self.index.insert(s.to_owned(), i);
        i
    }
}

/// google/pprof's frame patterns for legacy profiles (`legacy_profile.go`), verbatim.
mod frames {
    /// The sample types of heap profiles.
    pub(super) const HEAPZ_SAMPLE_TYPES: [&[&str]; 5] = [
        &["allocations", "size"], // early Go pprof profiles
        &["objects", "space"],
        &["inuse_objects", "inuse_space"],
        &["alloc_objects", "alloc_space"],
        &[
            "alloc_objects",
            "alloc_space",
            "inuse_objects",
            "inuse_space",
        ],
    ];

    /// Allocators: dropped from heap profiles.
    pub(super) const ALLOC: &[&str] = &[
        // POSIX entry points.
        "calloc",
        "cfree",
        "malloc",
        "free",
        "memalign",
        "do_memalign",
        "(__)?posix_memalign",
        "pvalloc",
        "valloc",
        "realloc",
        // TC malloc.
        "tcmalloc::.*",
        "tc_calloc",
        "tc_cfree",
        "tc_malloc",
        "tc_free",
        "tc_memalign",
        "tc_posix_memalign",
        "tc_pvalloc",
        "tc_valloc",
        "tc_realloc",
        "tc_new",
        "tc_delete",
        "tc_newarray",
        "tc_deletearray",
        "tc_new_nothrow",
        "tc_newarray_nothrow",
        // Memory-allocation routines on OS X.
        "malloc_zone_malloc",
        "malloc_zone_calloc",
        "malloc_zone_valloc",
        "malloc_zone_realloc",
        "malloc_zone_memalign",
        "malloc_zone_free",
        // Go runtime
        r"runtime\..*",
        // Other misc. memory allocation routines
        "BaseArena::.*",
        "(::)?do_malloc_no_errno",
        "(::)?do_malloc_pages",
        "(::)?do_malloc",
        "DoSampledAllocation",
        "MallocedMemBlock::MallocedMemBlock",
        "_M_allocate",
        "__builtin_(vec_)?delete",
        "__builtin_(vec_)?new",
        "__gnu_cxx::new_allocator::allocate",
        "__libc_malloc",
        "__malloc_alloc_template::allocate",
        "allocate",
        "cpp_alloc",
        r"operator new(\[\])?",
        "simple_alloc::allocate",
    ];

    /// Go runtime frames kept in heap profiles although [`ALLOC`] matches them.
    pub(super) const ALLOC_SKIP: &[&str] = &[
        // Preserve Go runtime frames that appear in the middle/bottom of the stack.
        r"runtime\.panic",
        r"runtime\.reflectcall",
        r"runtime\.call[0-9]*",
    ];

    /// The CPU profiler's signal handling: dropped from every other legacy profile.
    pub(super) const CPU_PROFILER: &[&str] = &[
        "ProfileData::Add",
        "ProfileData::prof_handler",
        "CpuProfiler::prof_handler",
        "__pthread_sighandler",
        "__restore",
    ];

    /// Lock internals: dropped from contention profiles.
    pub(super) const LOCK: &[&str] = &[
        "RecordLockProfileData",
        "(base::)?RecordLockProfileData.*",
        "(base::)?SubmitMutexProfileData.*",
        "(base::)?SubmitSpinLockProfileData.*",
        "(base::Mutex::)?AwaitCommon.*",
        "(base::Mutex::)?Unlock.*",
        "(base::Mutex::)?UnlockSlow.*",
        "(base::Mutex::)?ReaderUnlock.*",
        "(base::MutexLock::)?~MutexLock.*",
        "(Mutex::)?AwaitCommon.*",
        "(Mutex::)?Unlock.*",
        "(Mutex::)?UnlockSlow.*",
        "(Mutex::)?ReaderUnlock.*",
        "(MutexLock::)?~MutexLock.*",
        "(SpinLock::)?Unlock.*",
        "(SpinLock::)?SlowUnlock.*",
        "(SpinLockHolder::)?~SpinLockHolder.*",
    ];
}

/// google/pprof's `scaleHeapSample`: heap profiles sample allocations as a Poisson process of
/// mean `rate` bytes, so a sample of average size S was seen with probability 1 - e^(-S/rate);
/// dividing by it estimates what was allocated.
fn scale_heap_sample(count: i64, size: i64, rate: i64) -> (i64, i64) {
    if count == 0 || size == 0 {
        return (0, 0);
    }
    if rate <= 1 {
        // 1: every allocation was recorded; below: unknown, left alone.
        return (count, size);
    }
    let average = size as f64 / count as f64;
    let scale = 1.0 / (1.0 - (-average / rate as f64).exp());
    ((count as f64 * scale) as i64, (size as f64 * scale) as i64)
}

#[cfg(test)]
mod tests;
