//! The model legacy parsers fill: google/pprof's `Profile` cut down to what legacy formats
//! have, what it may cost, and its conversion to the protobuf model.

use rustc_hash::FxHashMap;

use crate::{Error, StringTable, proto};

/// A legacy format's name in errors, e.g. `Go CPU`, `heap`, `Java contention`.
pub(crate) type Format = &'static str;

pub(crate) fn malformed(format: Format, fault: impl Into<String>) -> Error {
    Error::Legacy {
        format,
        fault: fault.into(),
    }
}

/// A value type as strings, e.g. `alloc_space`/`bytes`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ValueType {
    pub(crate) r#type: String,
    pub(crate) unit: String,
}

impl ValueType {
    pub(crate) fn new(r#type: &str, unit: &str) -> ValueType {
        ValueType {
            r#type: r#type.to_owned(),
            unit: unit.to_owned(),
        }
    }
}

/// The most sample types a legacy format has (the heap profile's alloc and inuse pairs).
pub(crate) const MAX_VALUES: usize = 4;

/// One sample: its frames are `frames[start..start + len]` of the profile, leaf first.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sample {
    pub(crate) start: usize,
    pub(crate) len: usize,
    pub(crate) values: [i64; MAX_VALUES],
    /// The `bytes` numeric label of heap samples (the average allocation size).
    pub(crate) bytes: Option<i64>,
}

/// A location: an address, and once known its mapping and (Java only) its function and line.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Location {
    pub(crate) address: u64,
    /// Position in [`LegacyProfile::mappings`].
    pub(crate) mapping: Option<u32>,
    /// Position in [`LegacyProfile::functions`] and line number.
    pub(crate) line: Option<(u32, i64)>,
}

#[derive(Debug, Clone)]
pub(crate) struct Function {
    pub(crate) name: String,
    pub(crate) filename: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Mapping {
    pub(crate) start: u64,
    pub(crate) limit: u64,
    pub(crate) offset: u64,
    pub(crate) file: String,
    pub(crate) build_id: String,
}

/// What the converted profile will cost in memory, charged as it grows (see [`cost`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Budget {
    pub(crate) used: usize,
    pub(crate) limit_bytes: usize,
}

/// The charges of [`Budget`]: roughly what each thing costs once it is a prost message (with its
/// vectors' heap blocks) plus what the conversion holds for it meanwhile.
pub(crate) mod cost {
    pub(crate) const SAMPLE: usize = 192;
    pub(crate) const FRAME: usize = 12;
    pub(crate) const LOCATION: usize = 112;
    pub(crate) const FUNCTION: usize = 128;
    pub(crate) const MAPPING: usize = 160;
}

impl Budget {
    pub(crate) fn charge(&mut self, bytes: usize) -> Result<(), Error> {
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
pub(crate) struct LegacyProfile {
    pub(crate) sample_types: Vec<ValueType>,
    pub(crate) period_type: ValueType,
    pub(crate) period: i64,
    pub(crate) duration_nanos: i64,
    pub(crate) samples: Vec<Sample>,
    /// All samples' location positions, end to end.
    pub(crate) frames: Vec<u32>,
    pub(crate) locations: Vec<Location>,
    /// The location of each address, while samples are read.
    pub(crate) location_of_address: FxHashMap<u64, u32>,
    pub(crate) functions: Vec<Function>,
    pub(crate) mappings: Vec<Mapping>,
    pub(crate) budget: Budget,
}

impl LegacyProfile {
    pub(crate) fn new(
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
    pub(crate) fn push_frame(&mut self, address: u64) -> Result<(), Error> {
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
    pub(crate) fn push_sample(
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

    pub(crate) fn frames_len(&self) -> usize {
        self.frames.len()
    }

    pub(crate) fn stack(&self, sample: &Sample) -> &[u32] {
        &self.frames[sample.start..sample.start + sample.len]
    }

    pub(crate) fn address(&self, location: u32) -> u64 {
        self.locations[location as usize].address
    }

    /// Takes the second frame out of sample `i`'s stack.
    pub(crate) fn remove_second_frame(&mut self, i: usize) {
        let s = &mut self.samples[i];
        let end = s.start + s.len;
        self.frames.copy_within(s.start + 2..end, s.start + 1);
        s.len -= 1;
    }

    /// google/pprof's `cleanupDuplicateLocations`: the profiler may record the leaf twice, from
    /// the signal context and (moved back by one, as callers are) from the unwinder.
    pub(crate) fn remove_duplicate_leaves(&mut self) {
        for i in 0..self.samples.len() {
            let stack = self.stack(&self.samples[i]);
            if stack.len() > 1 && self.address(stack[0]) == self.address(stack[1]).wrapping_add(1) {
                self.remove_second_frame(i);
            }
        }
    }

    /// google/pprof's `remapLocationIDs`: locations in the order samples first use them; the ones
    /// no sample uses are gone.
    pub(crate) fn remap_locations(&mut self) {
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
    pub(crate) fn remap_functions(&mut self) {
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
    pub(crate) fn frame_info(&self) -> (String, String) {
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

    #[expect(
        clippy::too_many_lines,
        reason = "builds the pprof message field by field from the legacy model"
    )]
    pub(crate) fn into_proto(self) -> proto::Profile {
        let (drop_frames, keep_frames) = self.frame_info();
        let mut strings = StringTable::default();
        let value_type = |t: &ValueType, strings: &mut StringTable<'_>| proto::ValueType {
            r#type: strings.id(&t.r#type),
            unit: strings.id(&t.unit),
        };
        let sample_type = self
            .sample_types
            .iter()
            .map(|t| value_type(t, &mut strings))
            .collect();
        let period_type = Some(value_type(&self.period_type, &mut strings));
        let bytes = strings.id("bytes");
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
                filename: strings.id(&m.file),
                build_id: strings.id(&m.build_id),
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
                let name = strings.id(&f.name);
                proto::Function {
                    id: i as u64 + 1,
                    name,
                    system_name: name,
                    filename: strings.id(&f.filename),
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
            drop_frames: strings.id(&drop_frames),
            keep_frames: strings.id(&keep_frames),
            duration_nanos: self.duration_nanos,
            period_type,
            period: self.period,
            string_table: strings.into_strings(),
            ..Default::default()
        }
    }
}

/// google/pprof's frame patterns for legacy profiles (`legacy_profile.go`), verbatim.
pub(crate) mod frames {
    /// The sample types of heap profiles.
    pub(crate) const HEAPZ_SAMPLE_TYPES: [&[&str]; 5] = [
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
    pub(crate) const ALLOC: &[&str] = &[
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
    pub(crate) const ALLOC_SKIP: &[&str] = &[
        // Preserve Go runtime frames that appear in the middle/bottom of the stack.
        r"runtime\.panic",
        r"runtime\.reflectcall",
        r"runtime\.call[0-9]*",
    ];

    /// The CPU profiler's signal handling: dropped from every other legacy profile.
    pub(crate) const CPU_PROFILER: &[&str] = &[
        "ProfileData::Add",
        "ProfileData::prof_handler",
        "CpuProfiler::prof_handler",
        "__pthread_sighandler",
        "__restore",
    ];

    /// Lock internals: dropped from contention profiles.
    pub(crate) const LOCK: &[&str] = &[
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
pub(crate) fn scale_heap_sample(count: i64, size: i64, rate: i64) -> (i64, i64) {
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
