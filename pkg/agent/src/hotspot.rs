//! Java frames of HotSpot JVMs (OpenJDK and its builds: Debian's, Temurin's …), read with no
//! agent and no flag. HotSpot describes its own structures for debuggers (`VMStructs`: every
//! field a tool needs with its offset, every type's size, its constants), exported from
//! `libjvm.so`; this module reads those tables from the process ([`VmStructs`]) and takes
//! from them what the BPF program and the naming need ([`Layout`]).
//!
//! Unwinding (in the BPF program, `hotspot_step`): compiled code keeps no frame pointer, but
//! each code blob in the code cache knows its frame's size; the program finds a pc's blob
//! through its code heap's segment map. Interpreted frames keep frame pointers, with the
//! frame's `Method*` and bytecode pointer in fixed slots below it, which the program sends.
//!
//! Naming (here): an interpreted frame by its `Method*` (class, method, source file) and the
//! line of its bytecode index; a compiled frame by its blob (`nmethod`), the `PcDesc` of its
//! pc and the scopes it leads to: the method and bytecode index of the pc, then each method it
//! was inlined into, so inlined methods show as frames of their own. Stubs and adapters are
//! named `[jvm] NAME` after their blob.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustc_hash::FxHashMap;

use crate::bpf::{
    BLOB_CODE_OFFSET, BLOB_COMPLETE_SHORT, HOTSPOT_HEAPS, PY_NO_CFRAME, PyConfig, PyFrameSample,
    VM_HOTSPOT,
};
use crate::interp::{
    FrameTable, InterpreterStats, Memory, NamedFrames, Runtime, Stacks, frame_address,
};
use crate::process::ProcessInfo;

/// The JVMs' side of the sampling thread.
pub(crate) type HotSpotStacks = Stacks<HotSpot>;

/// Bytes below an interpreted frame's frame pointer the BPF program reads (its window).
const WINDOW_BYTES: i64 = 64;
/// x86-64 interpreted frame slots, in words from the frame pointer (`frame_x86.hpp`, the same
/// from JDK 8 to 25; not in `VMStructs`): the `Method*` and the bytecode pointer.
const FRAME_METHOD_SLOT: i64 = -3;
const FRAME_BCP_SLOT: i64 = -8;
/// Entries read of a `VMStructs` table at most (JDK 17 has about 2,900 fields), and how many
/// are read at a time.
const MAX_TABLE_ENTRIES: usize = 20_000;
const TABLE_CHUNK: u64 = 64;
/// Bytes of a name read at most (class, method, source file names; C strings of blob names).
const MAX_NAME_BYTES: usize = 1024;
/// Hops back through a segment map at most (as the BPF program's `HOTSPOT_SEGMAP_HOPS`, with room).
const MAX_SEGMAP_HOPS: usize = 256;
/// Most code blobs kept read per process (each holds its `PcDesc`s and scopes: a few KiB).
const MAX_BLOBS: usize = 1024;
/// A blob's size believed at most (HotSpot's largest nmethods are a few hundred KiB): a larger
/// `_size` is not trusted to place other pcs in it.
const MAX_BLOB_BYTES: u64 = 16 << 20;
/// `PcDesc`s of an nmethod read at most, and bytes of its scopes.
const MAX_PC_DESCS: usize = 1 << 16;
const MAX_SCOPE_BYTES: usize = 1 << 20;
/// Inlining depth followed at most (HotSpot's own limit is 15 by default).
const MAX_INLINE_DEPTH: usize = 64;
/// Bytes of a line number table read at most.
const MAX_LINE_TABLE_BYTES: usize = 1 << 16;
/// Methods and named (blob, pc) kept per process before they are dropped and read again.
const MAX_METHODS_PER_PROCESS: usize = 65_536;
const MAX_NAMED_PER_PROCESS: usize = 65_536;
/// How long a compiled pc's names are trusted before they are read again.
const RENAME_INTERVAL: Duration = Duration::from_secs(10);
/// A frame whose method could not be read.
const UNREADABLE_METHOD: &str = "[jvm: unreadable method]";
/// An interpreted frame whose method the BPF program did not read.
const INTERPRETER_FRAME: &str = "[jvm] Interpreter";

/// HotSpot's `VMStructs` tables as one process holds them: fields (`Type::_field` → offset, or
/// address for a static, and the field's C type) and type sizes (its constants are not needed).
#[derive(Debug, Default)]
pub(crate) struct VmStructs {
    fields: FxHashMap<String, (u64, String)>,
    sizes: FxHashMap<String, u64>,
}

/// The layout of one of the `VMStructs` tables' entries: where each column is, and the stride.
struct EntryLayout {
    stride: u64,
    columns: Vec<u64>,
}

impl VmStructs {
    /// Reads the tables of the process in `memory`; `export(name)` is the process address of
    /// `libjvm.so`'s exported symbol `name`.
    pub fn read(memory: &Memory, export: impl Fn(&str) -> Option<u64>) -> Option<VmStructs> {
        let value = |name: &str| memory.u64(export(name)?);
        let layout = |table: &str, entry: &str, columns: &[&str]| -> Option<(u64, EntryLayout)> {
            let columns = columns
                .iter()
                .map(|c| value(&format!("gHotSpotVM{entry}{c}Offset")))
                .collect::<Option<Vec<u64>>>()?;
            let stride = value(&format!("gHotSpotVM{entry}ArrayStride"))?;
            Some((value(table)?, EntryLayout { stride, columns }))
        };
        let mut vm = VmStructs::default();
        let mut strings = Strings::default();
        let (at, entry) = layout(
            "gHotSpotVMStructs",
            "StructEntry",
            &[
                "TypeName",
                "FieldName",
                "TypeString",
                "IsStatic",
                "Offset",
                "Address",
            ],
        )?;
        for row in rows(memory, at, &entry)? {
            let [type_name, field, type_string, is_static, offset, address] = row[..] else {
                continue;
            };
            let (Some(type_name), Some(field)) =
                (strings.get(memory, type_name), strings.get(memory, field))
            else {
                continue;
            };
            let type_string = strings.get(memory, type_string).unwrap_or_default();
            let value = if is_static as u32 != 0 {
                address
            } else {
                offset
            };
            vm.fields
                .entry(format!("{type_name}::{field}"))
                .or_insert((value, type_string));
        }
        let (at, entry) = layout("gHotSpotVMTypes", "TypeEntry", &["TypeName", "Size"])?;
        for row in rows(memory, at, &entry)? {
            if let [name, size] = row[..]
                && let Some(name) = strings.get(memory, name)
            {
                vm.sizes.insert(name, size);
            }
        }
        Some(vm)
    }

    /// The offset of field `name` (`Type::_field`), or a static field's address: the first of
    /// `names` that this HotSpot has (fields move and are renamed between versions).
    fn field(&self, names: &[&str]) -> Result<u64, String> {
        names
            .iter()
            .find_map(|n| self.fields.get(*n).map(|(v, _)| *v))
            .ok_or_else(|| names.join(" or "))
    }

    /// The C type of field `name`, when it is there.
    fn field_type(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(|(_, t)| t.as_str())
    }

    fn has(&self, name: &str) -> bool {
        self.fields.contains_key(name)
    }

    /// The size of type `name`.
    fn size(&self, name: &str) -> Result<u64, String> {
        self.sizes
            .get(name)
            .copied()
            .ok_or_else(|| format!("sizeof({name})"))
    }
}

/// Each entry of a `VMStructs` table at `at` (its columns, each read as a u64; an int column's
/// upper half is the next field's), up to the entry whose first column is null. Read
/// [`TABLE_CHUNK`] entries at a time (one entry at a time where a chunk would cross the end of
/// the table's memory).
fn rows(memory: &Memory, at: u64, entry: &EntryLayout) -> Option<Vec<Vec<u64>>> {
    let stride = entry.stride;
    if stride == 0 || stride > 1024 || entry.columns.iter().any(|&c| c + 8 > stride) {
        return None;
    }
    let mut out = Vec::new();
    let mut i = 0u64;
    while i < MAX_TABLE_ENTRIES as u64 {
        let start = at.wrapping_add(i * stride);
        let (bytes, count) = match memory.bytes(start, (stride * TABLE_CHUNK) as usize) {
            Some(bytes) => (bytes, TABLE_CHUNK),
            None => (memory.bytes(start, stride as usize)?, 1),
        };
        for row in bytes.chunks_exact(stride as usize).take(count as usize) {
            let column = |c: u64| {
                let c = c as usize;
                u64::from_ne_bytes(row[c..c + 8].try_into().expect("8 bytes"))
            };
            if column(entry.columns[0]) == 0 {
                return Some(out);
            }
            out.push(entry.columns.iter().map(|&c| column(c)).collect());
        }
        i += count;
    }
    None
}

/// C strings read once each (the tables name each type once per field).
#[derive(Default)]
struct Strings(FxHashMap<u64, Option<String>>);

impl Strings {
    fn get(&mut self, memory: &Memory, addr: u64) -> Option<String> {
        self.0
            .entry(addr)
            .or_insert_with(|| c_string(memory, addr))
            .clone()
    }
}

/// The C string at `addr`, up to [`MAX_NAME_BYTES`].
fn c_string(memory: &Memory, addr: u64) -> Option<String> {
    if addr == 0 {
        return None;
    }
    let mut out = Vec::new();
    while out.len() < MAX_NAME_BYTES {
        let chunk = memory.bytes(addr.wrapping_add(out.len() as u64), 64)?;
        match chunk.iter().position(|&b| b == 0) {
            Some(end) => {
                out.extend_from_slice(&chunk[..end]);
                return Some(String::from_utf8_lossy(&out).into_owned());
            }
            None => out.extend_from_slice(&chunk),
        }
    }
    Some(String::from_utf8_lossy(&out).into_owned())
}

/// What the agent reads of a HotSpot's structures: offsets and sizes from its `VMStructs`,
/// the places its code lives in one process, and how its versions differ.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    // CodeBlob
    blob_name: u64,
    blob_frame_size: u64,
    blob_frame_complete: u64,
    blob_complete_short: bool,
    /// `_code_offset`/`_data_offset` ints from the blob (JDK 23+), else `_code_begin` pointer.
    blob_code: u64,
    blob_code_is_offset: bool,
    blob_data: u64,
    /// `CodeBlob::_size` (bytes from the blob's start, header included), when exported.
    blob_size: Option<u64>,
    heap_block: u64,
    // nmethod
    nmethod_method: u64,
    nmethod_scopes: NmethodScopes,
    pc_desc_size: u64,
    pc_desc_pc_offset: u64,
    pc_desc_scope_offset: u64,
    // Method, ConstMethod, ConstantPool, Klass, Symbol
    method_const: u64,
    const_constants: u64,
    const_flags: u64,
    const_flags_wide: bool,
    const_code_size: u64,
    const_name_index: u64,
    const_size: u64,
    pool_holder: u64,
    pool_source_file: Option<u64>,
    klass_source_file: Option<u64>,
    pool_size: u64,
    klass_name: u64,
    symbol_length: u64,
    symbol_body: u64,
    /// UNSIGNED5's excluded byte values (1 from JDK 20+15 on, 0 before).
    unsigned5_excluded: u8,
}

/// Where an nmethod's scopes are: offsets from the blob (JDK 9–22), or from its immutable
/// data (JDK 23+), with its metadata after the relocations of its mutable data (JDK 25) or at
/// an offset from its code's end (JDK 23–24).
#[derive(Debug, Clone)]
enum NmethodScopes {
    InBlob {
        metadata: u64,
        scopes_data: u64,
        scopes_pcs: u64,
        dependencies: u64,
    },
    Immutable {
        data: u64,
        data_size: u64,
        scopes_pcs: u64,
        scopes_data: u64,
        metadata: Metadata,
    },
}

/// Where a JDK 23+ nmethod's metadata (its `Method*`s, indexed by its scopes) is.
#[derive(Debug, Clone)]
enum Metadata {
    /// After the relocations in its mutable data (JDK 25).
    Mutable { data: u64, relocation_size: u64 },
    /// At a u16 offset from its code's end (JDK 23–24).
    AfterCode { offset: u64 },
}

impl Layout {
    /// The layout of this HotSpot, or the first name it lacks.
    pub fn of(vm: &VmStructs, version: (u32, u32, u32, u32)) -> Result<Layout, String> {
        let f = |names: &[&str]| vm.field(names);
        let blob_code_is_offset = vm.has("CodeBlob::_code_offset");
        let nmethod_scopes = if vm.has("nmethod::_immutable_data") {
            let metadata = if vm.has("CodeBlob::_mutable_data") {
                Metadata::Mutable {
                    data: f(&["CodeBlob::_mutable_data"])?,
                    relocation_size: f(&["CodeBlob::_relocation_size"])?,
                }
            } else {
                Metadata::AfterCode {
                    offset: f(&["nmethod::_metadata_offset"])?,
                }
            };
            NmethodScopes::Immutable {
                data: f(&["nmethod::_immutable_data"])?,
                data_size: f(&["nmethod::_immutable_data_size"])?,
                scopes_pcs: f(&["nmethod::_scopes_pcs_offset"])?,
                scopes_data: f(&["nmethod::_scopes_data_offset"])?,
                metadata,
            }
        } else {
            NmethodScopes::InBlob {
                metadata: f(&["nmethod::_metadata_offset"])?,
                scopes_data: f(&[
                    "CompiledMethod::_scopes_data_begin",
                    "nmethod::_scopes_data_begin",
                ])?,
                scopes_pcs: f(&["nmethod::_scopes_pcs_offset"])?,
                dependencies: f(&["nmethod::_dependencies_offset"])?,
            }
        };
        let const_flags = f(&["ConstMethod::_flags._flags", "ConstMethod::_flags"])?;
        let (major, minor, security, build) = version;
        Ok(Layout {
            blob_name: f(&["CodeBlob::_name"])?,
            blob_frame_size: f(&["CodeBlob::_frame_size"])?,
            blob_frame_complete: f(&["CodeBlob::_frame_complete_offset"])?,
            blob_complete_short: vm.field_type("CodeBlob::_frame_complete_offset")
                == Some("int16_t"),
            blob_code: f(&["CodeBlob::_code_offset", "CodeBlob::_code_begin"])?,
            blob_code_is_offset,
            blob_data: f(&["CodeBlob::_data_offset"])?,
            blob_size: f(&["CodeBlob::_size"]).ok(),
            heap_block: vm.size("HeapBlock")?,
            nmethod_method: f(&["nmethod::_method", "CompiledMethod::_method"])?,
            nmethod_scopes,
            pc_desc_size: vm.size("PcDesc")?,
            pc_desc_pc_offset: f(&["PcDesc::_pc_offset"])?,
            pc_desc_scope_offset: f(&["PcDesc::_scope_decode_offset"])?,
            method_const: f(&["Method::_constMethod"])?,
            const_constants: f(&["ConstMethod::_constants"])?,
            const_flags,
            const_flags_wide: vm.field_type("ConstMethod::_flags._flags") == Some("u4")
                || major >= 21,
            const_code_size: f(&["ConstMethod::_code_size"])?,
            const_name_index: f(&["ConstMethod::_name_index"])?,
            const_size: vm.size("ConstMethod")?,
            pool_holder: f(&["ConstantPool::_pool_holder"])?,
            pool_source_file: f(&["ConstantPool::_source_file_name_index"]).ok(),
            klass_source_file: f(&["InstanceKlass::_source_file_name_index"]).ok(),
            pool_size: vm.size("ConstantPool")?,
            klass_name: f(&["Klass::_name"])?,
            symbol_length: f(&["Symbol::_length", "Symbol::_length_and_refcount"])?
                + if vm.has("Symbol::_length") { 0 } else { 2 },
            symbol_body: f(&["Symbol::_body"])?,
            unsigned5_excluded: u8::from(
                (major, minor, security, build) >= (20, 0, 0, 15) || major > 20,
            ),
        })
    }
}

/// Where one process's HotSpot keeps its code: the interpreter's, and each code heap's memory
/// and segment map.
#[derive(Debug, Clone, Default)]
struct CodeCache {
    interpreter: (u64, u64),
    heaps: Vec<CodeHeap>,
    segment_shift: u32,
}

#[derive(Debug, Clone, Copy)]
struct CodeHeap {
    low: u64,
    high: u64,
    segmap: u64,
}

impl CodeCache {
    /// Reads it through `CodeCache::_heaps` and `AbstractInterpreter::_code`; `None` until
    /// the VM has set them up (the first moments of a JVM), or when memory says nonsense.
    fn read(memory: &Memory, vm: &VmStructs) -> Result<CodeCache, String> {
        let f = |names: &[&str]| vm.field(names);
        let unreadable = |what: &str| format!("{what} unreadable");
        let heaps_array = memory
            .u64(f(&["CodeCache::_heaps"])?)
            .filter(|&a| a != 0)
            .ok_or_else(|| unreadable("CodeCache::_heaps"))?;
        let len = memory
            .u32(heaps_array.wrapping_add(f(&[
                "GrowableArrayBase::_len",
                "GenericGrowableArray::_len",
            ])?))
            .ok_or_else(|| unreadable("the code heaps' count"))?;
        let data = memory
            .u64(heaps_array.wrapping_add(f(&["GrowableArray<int>::_data"])?))
            .ok_or_else(|| unreadable("the code heaps"))?;
        if len == 0 || len as usize > HOTSPOT_HEAPS {
            return Err(format!("{len} code heaps"));
        }
        let (memory_at, segmap_at) = (f(&["CodeHeap::_memory"])?, f(&["CodeHeap::_segmap"])?);
        let (low, high_boundary) = (
            f(&["VirtualSpace::_low"])?,
            f(&["VirtualSpace::_high_boundary"])?,
        );
        let shift_at = f(&["CodeHeap::_log2_segment_size"])?;
        let mut cache = CodeCache::default();
        for i in 0..u64::from(len) {
            let heap = memory
                .u64(data.wrapping_add(8 * i))
                .ok_or_else(|| unreadable("a code heap"))?;
            let read = |at: u64| {
                memory
                    .u64(heap.wrapping_add(at))
                    .ok_or_else(|| unreadable("a code heap"))
            };
            let shift = memory
                .u32(heap.wrapping_add(shift_at))
                .ok_or_else(|| unreadable("a code heap"))?;
            if !(4..=16).contains(&shift)
                || (cache.segment_shift != 0 && shift != cache.segment_shift)
            {
                return Err(format!("segment size 2^{shift}"));
            }
            cache.segment_shift = shift;
            cache.heaps.push(CodeHeap {
                low: read(memory_at + low)?,
                high: read(memory_at + high_boundary)?,
                segmap: read(segmap_at + low)?,
            });
        }
        let queue = memory
            .u64(f(&["AbstractInterpreter::_code"])?)
            .filter(|&q| q != 0)
            .ok_or_else(|| unreadable("the interpreter"))?;
        let buffer = memory
            .u64(queue.wrapping_add(f(&["StubQueue::_stub_buffer"])?))
            .ok_or_else(|| unreadable("the interpreter"))?;
        let limit = memory
            .u32(queue.wrapping_add(f(&["StubQueue::_buffer_limit"])?))
            .ok_or_else(|| unreadable("the interpreter"))?;
        cache.interpreter = (buffer, buffer.wrapping_add(u64::from(limit)));
        Ok(cache)
    }

    /// The code heap holding `pc`.
    fn heap_of(&self, pc: u64) -> Option<&CodeHeap> {
        self.heaps.iter().find(|h| h.low <= pc && pc < h.high)
    }

    fn in_interpreter(&self, pc: u64) -> bool {
        self.interpreter.0 <= pc && pc < self.interpreter.1
    }
}

/// One Java method as named: class and method (`java.util.HashMap.get`), source file with the
/// package's path (`java/util/HashMap.java`), and its bytecode index → line table.
#[derive(Debug)]
struct Method {
    name: String,
    file: String,
    bytecode: u64,
    code_size: u64,
    lines: Vec<(u32, u32)>,
}

impl Method {
    /// The line of bytecode index `bci` (HotSpot's `Method::line_number_from_bci`: an exact
    /// entry, else the last entry before it); 0 when the table says nothing.
    fn line(&self, bci: i64) -> u32 {
        let mut best: Option<(u32, u32)> = None;
        for &(at, line) in &self.lines {
            if i64::from(at) == bci {
                return line;
            }
            if i64::from(at) < bci && best.is_none_or(|(b, _)| at >= b) {
                best = Some((at, line));
            }
        }
        best.map_or(0, |(_, line)| line)
    }
}

/// A code blob as read for naming: its name (`nmethod`, `Interpreter`, `StubRoutines (1)` …)
/// and, for an nmethod, its method and scopes.
#[derive(Debug)]
struct Blob {
    name: String,
    code: u64,
    nmethod: Option<Nmethod>,
}

#[derive(Debug)]
struct Nmethod {
    method: u64,
    /// `(pc offset, scope decode offset)` of each `PcDesc`, in pc order.
    pc_descs: Vec<(i32, i32)>,
    scopes: Vec<u8>,
    metadata: u64,
}

/// The state kept per JVM process: its memory, layout, code cache, and what was named.
#[derive(Debug)]
pub(crate) struct Process {
    memory: Memory,
    layout: Layout,
    code: CodeCache,
    methods: FxHashMap<u64, Option<Arc<Method>>>,
    /// Frames named per (pc or method, 0 or bytecode pointer, leaf). Compiled code is freed
    /// and its memory reused for other methods, so what a pc was named is read again every
    /// [`RENAME_INTERVAL`].
    named: NamedFrames<(u64, u64, bool)>,
    /// The code blobs read, by start, while `named`'s names stand (its generation
    /// `blobs_generation`): a hot method's samples land on many pcs of one blob.
    blobs: FxHashMap<u64, Arc<Blob>>,
    /// The same blobs' extents, start → end: a pc inside one is found without reading the
    /// code heap's segment map again.
    blob_extents: BTreeMap<u64, u64>,
    blobs_generation: u64,
}

impl Process {
    /// The block start of `pc`'s code blob in `heap` (HotSpot's `CodeHeap::find_start`).
    fn blob_at(&self, heap: &CodeHeap, pc: u64) -> Option<u64> {
        // The map is read a window at a time, ending at the segment looked up: a hop is at
        // most 254 segments, so a blob of up to 256 segments is found with one read.
        const WINDOW: u64 = 256;
        let shift = self.code.segment_shift;
        let mut segment = (pc - heap.low) >> shift;
        let mut window = [0u8; WINDOW as usize];
        // The segments `window` holds: `first..=last` (none yet).
        let (mut first, mut last) = (1, 0);
        for _ in 0..MAX_SEGMAP_HOPS {
            if !(first..=last).contains(&segment) {
                (first, last) = (segment.saturating_sub(WINDOW - 1), segment);
                let len = (last - first + 1) as usize;
                self.memory
                    .read_into(heap.segmap.wrapping_add(first), &mut window[..len])?;
            }
            let tag = window[(segment - first) as usize];
            match tag {
                0xff => return None,
                0 => return Some(heap.low + (segment << shift) + self.layout.heap_block),
                hop => segment = segment.checked_sub(u64::from(hop))?,
            }
        }
        None
    }

    fn i32_at(&self, addr: u64) -> Option<i32> {
        self.memory.u32(addr).map(|v| v as i32)
    }

    fn u16_at(&self, addr: u64) -> Option<u16> {
        self.memory.u16(addr)
    }

    /// Forgets the blobs read when the names read from them are dropped (or too many are held).
    fn refresh_blobs(&mut self) {
        if self.blobs_generation != self.named.generation() || self.blobs.len() >= MAX_BLOBS {
            self.blobs.clear();
            self.blob_extents.clear();
            self.blobs_generation = self.named.generation();
        }
    }

    /// The start of a blob read while the names stand that holds `pc`, if one does.
    fn known_blob_at(&self, pc: u64) -> Option<u64> {
        let (&start, &end) = self.blob_extents.range(..=pc).next_back()?;
        (pc < end).then_some(start)
    }

    /// The code blob at `start`, read once while the names read from it stand (its caller
    /// calls [`Process::refresh_blobs`] first).
    fn cached_blob(&mut self, start: u64) -> Option<Arc<Blob>> {
        if let Some(blob) = self.blobs.get(&start) {
            return Some(blob.clone());
        }
        let blob = Arc::new(self.blob(start)?);
        if let Some(size) = self.layout.blob_size
            && let Some(size) = self.i32_at(start.wrapping_add(size))
            && let Ok(size @ 1..=MAX_BLOB_BYTES) = u64::try_from(size)
        {
            self.blob_extents.insert(start, start + size);
        }
        self.blobs.insert(start, blob.clone());
        Some(blob)
    }

    /// The code blob at `blob`.
    fn blob(&self, blob: u64) -> Option<Blob> {
        let l = &self.layout;
        let name = c_string(
            &self.memory,
            self.memory.u64(blob.wrapping_add(l.blob_name))?,
        )?;
        let code = if l.blob_code_is_offset {
            blob.checked_add_signed(i64::from(self.i32_at(blob.wrapping_add(l.blob_code))?))?
        } else {
            self.memory.u64(blob.wrapping_add(l.blob_code))?
        };
        let nmethod = if name == "nmethod" || name == "native nmethod" {
            Some(self.nmethod(blob)?)
        } else {
            None
        };
        Some(Blob {
            name,
            code,
            nmethod,
        })
    }

    /// The method, `PcDesc`s, scopes and metadata of the nmethod at `blob`.
    fn nmethod(&self, blob: u64) -> Option<Nmethod> {
        let l = &self.layout;
        let m = &self.memory;
        let offset =
            |at: u64| -> Option<u64> { u64::try_from(self.i32_at(blob.wrapping_add(at))?).ok() };
        let (pcs, scopes, metadata) = match &l.nmethod_scopes {
            NmethodScopes::InBlob {
                metadata,
                scopes_data,
                scopes_pcs,
                dependencies,
            } => {
                let scopes_begin = m.u64(blob.wrapping_add(*scopes_data))?;
                let pcs = blob.wrapping_add(offset(*scopes_pcs)?);
                (
                    (pcs, blob.wrapping_add(offset(*dependencies)?)),
                    (scopes_begin, pcs),
                    blob.wrapping_add(offset(*metadata)?),
                )
            }
            NmethodScopes::Immutable {
                data,
                data_size,
                scopes_pcs,
                scopes_data,
                metadata,
            } => {
                let data = m.u64(blob.wrapping_add(*data))?;
                let end = data.wrapping_add(offset(*data_size)?);
                let (pcs, scopes) = (
                    data.wrapping_add(offset(*scopes_pcs)?),
                    data.wrapping_add(offset(*scopes_data)?),
                );
                let metadata = match metadata {
                    Metadata::Mutable {
                        data,
                        relocation_size,
                    } => m
                        .u64(blob.wrapping_add(*data))?
                        .wrapping_add(offset(*relocation_size)?),
                    Metadata::AfterCode { offset } => {
                        let code_end = blob.wrapping_add(
                            u64::try_from(self.i32_at(blob.wrapping_add(l.blob_data))?).ok()?,
                        );
                        code_end.wrapping_add(u64::from(self.u16_at(blob.wrapping_add(*offset))?))
                    }
                };
                ((pcs, scopes), (scopes, end), metadata)
            }
        };
        let pcs_len = pcs.1.checked_sub(pcs.0)?;
        let scopes_len = scopes.1.checked_sub(scopes.0)?;
        if pcs_len / l.pc_desc_size > MAX_PC_DESCS as u64 || scopes_len > MAX_SCOPE_BYTES as u64 {
            return None;
        }
        let raw = m.bytes(pcs.0, pcs_len as usize)?;
        let pc_descs = raw
            .chunks_exact(l.pc_desc_size as usize)
            .map(|d| {
                let int = |at: u64| {
                    let at = at as usize;
                    i32::from_ne_bytes(d[at..at + 4].try_into().expect("4 bytes"))
                };
                (int(l.pc_desc_pc_offset), int(l.pc_desc_scope_offset))
            })
            .filter(|&(pc, _)| pc != -1)
            .collect();
        Some(Nmethod {
            method: m.u64(blob.wrapping_add(l.nmethod_method))?,
            pc_descs,
            scopes: m.bytes(scopes.0, scopes_len as usize)?,
            metadata,
        })
    }

    /// The Symbol at `symbol`, as text.
    fn symbol(&self, symbol: u64) -> Option<String> {
        let l = &self.layout;
        let len = self.u16_at(symbol.wrapping_add(l.symbol_length))?;
        let bytes = self.memory.bytes(
            symbol.wrapping_add(l.symbol_body),
            usize::from(len).min(MAX_NAME_BYTES),
        )?;
        Some(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Constant pool `pool`'s symbol at `index`.
    fn pool_symbol(&self, pool: u64, index: u16) -> Option<String> {
        if index == 0 {
            return None;
        }
        let entry = self
            .memory
            .u64(pool.wrapping_add(self.layout.pool_size + 8 * u64::from(index)))?;
        self.symbol(entry & !1)
    }

    /// The method at `method` (a `Method*`), read once.
    fn method(&mut self, method: u64) -> Option<Arc<Method>> {
        if let Some(m) = self.methods.get(&method) {
            return m.clone();
        }
        let read = self.read_method(method).map(Arc::new);
        if self.methods.len() >= MAX_METHODS_PER_PROCESS {
            self.methods.clear();
        }
        self.methods.insert(method, read.clone());
        read
    }

    fn read_method(&self, method: u64) -> Option<Method> {
        let l = &self.layout;
        let m = &self.memory;
        if method == 0 || method & 7 != 0 {
            return None;
        }
        let constant_method = m.u64(method.wrapping_add(l.method_const))?;
        let pool = m.u64(constant_method.wrapping_add(l.const_constants))?;
        let holder = m.u64(pool.wrapping_add(l.pool_holder))?;
        let class = self.symbol(m.u64(holder.wrapping_add(l.klass_name))?)?;
        let name_index = self.u16_at(constant_method.wrapping_add(l.const_name_index))?;
        let method_name = self.pool_symbol(pool, name_index)?;
        let source_index = match (l.pool_source_file, l.klass_source_file) {
            (Some(at), _) => self.u16_at(pool.wrapping_add(at)),
            (None, Some(at)) => self.u16_at(holder.wrapping_add(at)),
            (None, None) => None,
        };
        let source = source_index.and_then(|i| self.pool_symbol(pool, i));
        let code_size = u64::from(self.u16_at(constant_method.wrapping_add(l.const_code_size))?);
        let flags = if l.const_flags_wide {
            m.u32(constant_method.wrapping_add(l.const_flags))?
        } else {
            u32::from(self.u16_at(constant_method.wrapping_add(l.const_flags))?)
        };
        let bytecode = constant_method.wrapping_add(l.const_size);
        // ConstMethod::_has_linenumber_table (JDK 8–20), ConstMethodFlags' first bit (21+).
        let lines = if flags & 1 != 0 {
            m.bytes(bytecode.wrapping_add(code_size), MAX_LINE_TABLE_BYTES)
                .or_else(|| m.bytes(bytecode.wrapping_add(code_size), 256))
                .map(|table| line_table(&table, l.unsigned5_excluded))
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        // `java/util/HashMap` → `java.util.HashMap.get`, in `java/util/HashMap.java`.
        let file = source.map_or_else(String::new, |source| match class.rsplit_once('/') {
            Some((package, _)) => format!("{package}/{source}"),
            None => source,
        });
        Some(Method {
            name: format!("{}.{method_name}", class.replace('/', ".")),
            file,
            bytecode,
            code_size,
            lines,
        })
    }

    /// The frame of `method` at bytecode index `bci` (`None`: no line), named into `frames`.
    fn method_frame(
        &mut self,
        frames: &mut FrameTable,
        method: u64,
        bci: Option<i64>,
        stats: &mut InterpreterStats,
    ) -> u64 {
        stats.frames += 1;
        match self.method(method) {
            Some(m) => {
                let line = bci.map_or(0, |bci| m.line(bci));
                frame_address(frames.intern(&m.name, &m.file, line))
            }
            None => {
                stats.unreadable_frames += 1;
                frame_address(frames.intern(UNREADABLE_METHOD, "", 0))
            }
        }
    }

    /// The frames (innermost first) of an interpreted frame running `method` at bytecode
    /// pointer `bcp`.
    fn interpreted(
        &mut self,
        frames: &mut FrameTable,
        method: u64,
        bcp: u64,
        stats: &mut InterpreterStats,
    ) -> Vec<u64> {
        let bci = self.method(method).and_then(|m| {
            let bci = bcp.checked_sub(m.bytecode)?;
            (bci < m.code_size.max(1)).then_some(bci as i64)
        });
        vec![self.method_frame(frames, method, bci, stats)]
    }

    /// The frames (innermost first) of compiled code at `pc` (`leaf`: the sampled
    /// instruction, else a return address): an nmethod's method and the methods inlined at
    /// `pc`, or a stub's name; empty when `pc` is in no blob.
    fn compiled(
        &mut self,
        frames: &mut FrameTable,
        heap: CodeHeap,
        pc: u64,
        leaf: bool,
        stats: &mut InterpreterStats,
    ) -> Vec<u64> {
        let at = if leaf { pc } else { pc - 1 };
        self.refresh_blobs();
        let Some(start) = self.known_blob_at(at).or_else(|| self.blob_at(&heap, at)) else {
            return Vec::new();
        };
        let Some(blob) = self.cached_blob(start) else {
            stats.unreadable_frames += 1;
            return vec![frame_address(frames.intern(UNREADABLE_METHOD, "", 0))];
        };
        let Some(nmethod) = &blob.nmethod else {
            return vec![frame_address(frames.intern(
                &format!("[jvm] {}", blob.name),
                "",
                0,
            ))];
        };
        let offset = i64::try_from(pc.wrapping_sub(blob.code)).unwrap_or(-1);
        let scopes = scope_chain(nmethod, offset, leaf, self.layout.unsigned5_excluded);
        let (method, metadata) = (nmethod.method, nmethod.metadata);
        if scopes.is_empty() {
            return vec![self.method_frame(frames, method, None, stats)];
        }
        scopes
            .into_iter()
            .map(|(index, bci)| {
                let method = match index {
                    0 => 0,
                    i => self
                        .memory
                        .u64(metadata.wrapping_add(8 * (i - 1)))
                        .unwrap_or(0),
                };
                self.method_frame(frames, method, Some(bci), stats)
            })
            .collect()
    }
}

/// The `(metadata index, bci)` of each scope at pc offset `offset` of `nmethod`, innermost
/// first: the `PcDesc` at the offset, then each scope's sender. A return address has its own
/// `PcDesc`; the leaf's pc, anywhere, has none (HotSpot records them only at calls and
/// safepoint polls without `-XX:+DebugNonSafepoints`): the nearest one stands for it, before
/// or after (a loop's poll ends its body; a sample just past it is still in the loop).
fn scope_chain(nmethod: &Nmethod, offset: i64, leaf: bool, excluded: u8) -> Vec<(u64, i64)> {
    let descs = &nmethod.pc_descs;
    let next = descs.iter().position(|&(pc, _)| i64::from(pc) >= offset);
    let after = next.map(|i| &descs[i]);
    let before = match next {
        Some(i) => i.checked_sub(1).map(|i| &descs[i]),
        None => descs.last(),
    };
    let desc = match (before, after) {
        (_, Some(a)) if i64::from(a.0) == offset => Some(a),
        (Some(b), Some(a)) if leaf && offset - i64::from(b.0) < i64::from(a.0) - offset => Some(b),
        (b, a) if leaf => a.or(b),
        (_, a) => a,
    };
    let Some(&(_, mut decode)) = desc else {
        return Vec::new();
    };
    let mut out = Vec::new();
    // Offset 0 is DebugInformationRecorder's serialized null.
    while decode > 0 && out.len() < MAX_INLINE_DEPTH {
        let mut stream = Unsigned5::new(&nmethod.scopes, decode as usize, excluded);
        let (Some(sender), Some(index), Some(bci)) = (stream.next(), stream.next(), stream.next())
        else {
            break;
        };
        // Bytecode indices are written plus one (InvocationEntryBci is -1).
        out.push((u64::from(index), i64::from(bci) - 1));
        if sender as i32 >= decode {
            break;
        }
        decode = sender as i32;
    }
    out
}

/// HotSpot's UNSIGNED5 (`CompressedReadStream`): up to five bytes, six bits each after the
/// first; bytes below `192 - excluded` end a number; each byte is stored plus `excluded`
/// (JDK 20+15 made the encoding keep zero bytes out).
struct Unsigned5<'a> {
    bytes: &'a [u8],
    at: usize,
    excluded: u8,
}

impl<'a> Unsigned5<'a> {
    fn new(bytes: &'a [u8], at: usize, excluded: u8) -> Unsigned5<'a> {
        Unsigned5 {
            bytes,
            at,
            excluded,
        }
    }

    fn next(&mut self) -> Option<u32> {
        let low = 192 - u32::from(self.excluded);
        let mut sum = 0u32;
        for i in 0..5 {
            let b = u32::from(self.bytes.get(self.at)?.checked_sub(self.excluded)?);
            self.at += 1;
            sum = sum.wrapping_add(b << (6 * i));
            if b < low {
                return Some(sum);
            }
        }
        Some(sum)
    }

    /// A signed number, zigzag-coded.
    fn next_signed(&mut self) -> Option<i64> {
        let v = self.next()?;
        Some(i64::from((v >> 1) as i32 ^ -((v & 1) as i32)))
    }
}

/// A method's compressed line number table: `(bci, line)` pairs, each a byte (bci delta in the
/// upper five bits, line delta in the lower three) or 0xff and two signed UNSIGNED5 deltas,
/// ending at a 0 byte.
fn line_table(table: &[u8], excluded: u8) -> Vec<(u32, u32)> {
    let (mut bci, mut line) = (0i64, 0i64);
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(&b) = table.get(at) {
        at += 1;
        match b {
            0 => break,
            0xff => {
                let mut stream = Unsigned5::new(table, at, excluded);
                let (Some(db), Some(dl)) = (stream.next_signed(), stream.next_signed()) else {
                    break;
                };
                at = stream.at;
                bci += db;
                line += dl;
            }
            _ => {
                bci += i64::from(b >> 3);
                line += i64::from(b & 7);
            }
        }
        if let (Ok(bci), Ok(line)) = (u32::try_from(bci), u32::try_from(line)) {
            out.push((bci, line));
        }
    }
    out
}

/// The HotSpot runtime: how JVM processes are recognized and their Java frames named.
#[derive(Debug)]
pub(crate) struct HotSpot;

impl Runtime for HotSpot {
    type Process = Process;

    fn prepare(proc_root: &Path, info: &ProcessInfo) -> Option<(Process, PyConfig)> {
        let (mapping, jvm) = info.jvm()?;
        let bias = jvm
            .vaddr_of_file_offset(mapping.offset)
            .and_then(|vaddr| mapping.start.checked_sub(vaddr))?;
        let memory = match Memory::open(proc_root, info.pid) {
            Ok(memory) => memory,
            Err(e) => {
                tracing::debug!(pid = info.pid, error = %e, "no Java frames: cannot read the process's memory");
                return None;
            }
        };
        let vm = VmStructs::read(&memory, |name| Some(jvm.export(name)? + bias))?;
        let version = vm_version(&memory, &vm);
        let read = Layout::of(&vm, version).and_then(|layout| {
            let code = CodeCache::read(&memory, &vm)?;
            Ok((layout, code))
        });
        let (layout, code) = match read {
            Ok(read) => read,
            Err(missing) => {
                tracing::debug!(pid = info.pid, version = %jvm.version, missing, "no Java frames yet: this JVM lacks what the agent reads, or has not set it up");
                return None;
            }
        };
        let config = bpf_config(&layout, &code);
        let process = Process {
            memory,
            layout,
            code,
            methods: FxHashMap::default(),
            named: NamedFrames::new(MAX_NAMED_PER_PROCESS, Some(RENAME_INTERVAL)),
            blobs: FxHashMap::default(),
            blob_extents: BTreeMap::new(),
            blobs_generation: 0,
        };
        Some((process, config))
    }

    /// A JVM's code cache and interpreter are set up in its first moments, often after its
    /// first samples.
    fn retry(info: &ProcessInfo) -> bool {
        info.jvm().is_some()
    }

    fn calls(
        _process: &mut Process,
        _frames: &mut FrameTable,
        _sampled: &[PyFrameSample],
        _stats: &mut InterpreterStats,
    ) -> Vec<Vec<u64>> {
        // `place` names each frame where it was sampled.
        Vec::new()
    }

    /// Each native frame in the code cache is named: interpreted ones from what the BPF
    /// program read below their frame pointer, compiled ones from their blob.
    fn place(
        process: &mut Process,
        frames: &mut FrameTable,
        _info: &ProcessInfo,
        native: Vec<u64>,
        sampled: &[PyFrameSample],
        stats: &mut InterpreterStats,
    ) -> (Vec<u64>, usize) {
        let interpreted: FxHashMap<usize, &PyFrameSample> = sampled
            .iter()
            .filter_map(|f| Some((usize::try_from(f.index).ok()?, f)))
            .collect();
        let unplaced = sampled.len() - interpreted.len();
        let mut out = Vec::with_capacity(native.len() + 4);
        for (i, pc) in native.into_iter().enumerate() {
            let leaf = i == 0;
            let at = if leaf { pc } else { pc.wrapping_sub(1) };
            let named = if process.code.in_interpreter(at) {
                interpreted.get(&i).map(|f| {
                    let key = (f.code, f.fingerprint, false);
                    NamedFrames::in_owner(
                        process,
                        |p| &mut p.named,
                        key,
                        stats,
                        |p, stats| p.interpreted(frames, f.code, f.fingerprint, stats),
                    )
                })
            } else if let Some(&heap) = process.code.heap_of(at) {
                let key = (pc, 0, leaf);
                Some(NamedFrames::in_owner(
                    process,
                    |p| &mut p.named,
                    key,
                    stats,
                    |p, stats| p.compiled(frames, heap, pc, leaf, stats),
                ))
            } else {
                None
            };
            match named {
                Some(named) if !named.is_empty() => out.extend(named.iter()),
                // An interpreter frame whose slots were not read (or not a method).
                None if process.code.in_interpreter(at) => {
                    out.push(frame_address(frames.intern(INTERPRETER_FRAME, "", 0)));
                }
                _ => out.push(pc),
            }
        }
        (out, unplaced)
    }
}

/// HotSpot's version (major, minor, security, build) from `Abstract_VM_Version`; zeros when
/// unreadable.
fn vm_version(memory: &Memory, vm: &VmStructs) -> (u32, u32, u32, u32) {
    let int = |name: &str| {
        vm.field(&[name])
            .ok()
            .and_then(|at| memory.u32(at))
            .unwrap_or(0)
    };
    (
        int("Abstract_VM_Version::_vm_major_version"),
        int("Abstract_VM_Version::_vm_minor_version"),
        int("Abstract_VM_Version::_vm_security_version"),
        int("Abstract_VM_Version::_vm_build_number"),
    )
}

/// What the BPF program is told of a JVM: the interpreter's code (`tss`..`code_end`) and its
/// frame slots (the `Method*` in `window_code` and `window_marker`, the bytecode pointer in
/// `window_previous`), the code heaps, and where a blob keeps its frame size.
fn bpf_config(layout: &Layout, code: &CodeCache) -> PyConfig {
    let window = |slot: i64| (WINDOW_BYTES + 8 * slot) as u32;
    let mut config = PyConfig {
        tss: code.interpreter.0,
        code_end: code.interpreter.1,
        kind: VM_HOTSPOT,
        cframe_frame: PY_NO_CFRAME,
        window_len: WINDOW_BYTES as u32,
        window_code: window(FRAME_METHOD_SLOT),
        window_marker: window(FRAME_METHOD_SLOT),
        window_previous: window(FRAME_BCP_SLOT),
        window_instr: window(FRAME_BCP_SLOT),
        slot_mask: 7,
        slot_tag: 0,
        anon_frames: 0,
        segment_shift: code.segment_shift,
        blob_header: layout.heap_block as u32,
        blob_frame_size: layout.blob_frame_size as u32,
        blob_frame_complete: layout.blob_frame_complete as u32,
        blob_code: layout.blob_code as u32,
        blob_flags: if layout.blob_code_is_offset {
            BLOB_CODE_OFFSET
        } else {
            0
        } | if layout.blob_complete_short {
            BLOB_COMPLETE_SHORT
        } else {
            0
        },
        ..PyConfig::default()
    };
    for (i, heap) in code.heaps.iter().take(HOTSPOT_HEAPS).enumerate() {
        config.heap_low[i] = heap.low;
        config.heap_high[i] = heap.high;
        config.heap_segmap[i] = heap.segmap;
    }
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsigned5_reads_both_encodings() {
        // One byte below 192 (- excluded) is a number; 192 + 5 then 1: 197 + 64.
        let old = [7u8, 197, 1];
        let mut s = Unsigned5::new(&old, 0, 0);
        assert_eq!((s.next(), s.next()), (Some(7), Some(197 + 64)));
        let new = [8u8, 198, 2];
        let mut s = Unsigned5::new(&new, 0, 1);
        assert_eq!((s.next(), s.next()), (Some(7), Some(197 + 64)));
        // A zero byte is not a number in the new encoding.
        assert_eq!(Unsigned5::new(&[0], 0, 1).next(), None);
    }

    #[test]
    fn line_tables_decode_short_and_long_pairs() {
        // (bci 0, line 3): one byte 0<<3|3; (bci 21, line 5): 21<<3|2; then a long pair
        // (bci +100, line +40) zigzag-coded: 200 (two bytes: 200, 0), 80; then the end.
        let table = [3u8, (21 << 3) | 2, 0xff, 200, 0, 80, 0];
        let lines = line_table(&table, 0);
        assert_eq!(lines, vec![(0, 3), (21, 5), (121, 45)]);
        let method = Method {
            name: "Hot.inner".into(),
            file: "Hot.java".into(),
            bytecode: 0,
            code_size: 200,
            lines,
        };
        assert_eq!(method.line(0), 3);
        assert_eq!(method.line(30), 5);
        assert_eq!(method.line(121), 45);
        assert_eq!(method.line(199), 45);
    }

    #[test]
    fn scopes_follow_their_senders() {
        // The caller's scope first (HotSpot writes it before its callee's): at 1, no sender,
        // metadata 1, bci 3 + 1; at 4, sender 1, metadata 2, bci 7 + 1.
        let nmethod = Nmethod {
            method: 0,
            pc_descs: vec![(0x10, 0), (0x40, 4), (0x80, 1)],
            scopes: vec![0, 0, 1, 4, 1, 2, 8],
            metadata: 0,
        };
        assert_eq!(scope_chain(&nmethod, 0x40, false, 0), vec![(2, 7), (1, 3)]);
        // The leaf takes the nearest PcDesc, after or before it.
        assert_eq!(scope_chain(&nmethod, 0x30, true, 0), vec![(2, 7), (1, 3)]);
        assert_eq!(scope_chain(&nmethod, 0x44, true, 0), vec![(2, 7), (1, 3)]);
        assert_eq!(scope_chain(&nmethod, 0x7c, true, 0), vec![(1, 3)]);
        assert_eq!(scope_chain(&nmethod, 0x90, true, 0), vec![(1, 3)]);
    }

    /// JDK 17's offsets of the fields `Layout::of` reads (from its `VMStructs`).
    fn jdk17_structs() -> VmStructs {
        let mut vm = VmStructs::default();
        let fields: [(&str, u64, &str); 28] = [
            ("CodeBlob::_name", 96, "const char*"),
            ("CodeBlob::_frame_size", 28, "int"),
            ("CodeBlob::_frame_complete_offset", 20, "int"),
            ("CodeBlob::_code_begin", 32, "address"),
            ("CodeBlob::_data_offset", 24, "int"),
            ("CompiledMethod::_method", 112, "Method*"),
            ("nmethod::_metadata_offset", 260, "int"),
            ("CompiledMethod::_scopes_data_begin", 120, "address"),
            ("nmethod::_scopes_pcs_offset", 268, "int"),
            ("nmethod::_dependencies_offset", 272, "int"),
            ("PcDesc::_pc_offset", 0, "int"),
            ("PcDesc::_scope_decode_offset", 4, "int"),
            ("Method::_constMethod", 8, "ConstMethod*"),
            ("ConstMethod::_constants", 8, "ConstantPool*"),
            ("ConstMethod::_flags", 28, "u2"),
            ("ConstMethod::_code_size", 32, "u2"),
            ("ConstMethod::_name_index", 34, "u2"),
            ("ConstantPool::_pool_holder", 24, "InstanceKlass*"),
            ("ConstantPool::_source_file_name_index", 54, "u2"),
            ("Klass::_name", 24, "Symbol*"),
            ("Symbol::_length", 4, "u2"),
            ("Symbol::_body", 6, "u1"),
            ("Abstract_VM_Version::_vm_major_version", 0, "int"),
            ("CodeCache::_heaps", 0, "GrowableArray<CodeHeap*>*"),
            ("CodeHeap::_memory", 8, "VirtualSpace"),
            ("CodeHeap::_segmap", 120, "VirtualSpace"),
            ("VirtualSpace::_low", 16, "char*"),
            ("VirtualSpace::_high_boundary", 8, "char*"),
        ];
        for (name, offset, ty) in fields {
            vm.fields.insert(name.to_owned(), (offset, ty.to_owned()));
        }
        for (ty, size) in [
            ("HeapBlock", 16),
            ("PcDesc", 16),
            ("ConstMethod", 48),
            ("ConstantPool", 72),
        ] {
            vm.sizes.insert(ty.to_owned(), size);
        }
        vm
    }

    /// Bytes forged in this process's memory (8-aligned), read back through `/proc/self/mem` as
    /// a JVM's are.
    #[derive(Default)]
    struct Forge(Vec<Box<[u64]>>);

    impl Forge {
        /// `bytes` (at least `len` long, zero-padded), at an address of their own.
        fn bytes(&mut self, bytes: &[u8], len: usize) -> u64 {
            let mut words = vec![0u64; len.max(bytes.len()).div_ceil(8)];
            for (i, b) in bytes.iter().enumerate() {
                words[i / 8] |= u64::from(*b) << (8 * (i % 8));
            }
            let boxed = words.into_boxed_slice();
            let at = boxed.as_ptr() as u64;
            self.0.push(boxed);
            at
        }

        /// A record of `len` bytes with each `(offset, value, width)` written.
        fn record(&mut self, len: usize, fields: &[(usize, u64, usize)]) -> u64 {
            let mut bytes = vec![0u8; len];
            for &(at, value, width) in fields {
                bytes[at..at + width].copy_from_slice(&value.to_le_bytes()[..width]);
            }
            self.bytes(&bytes, len)
        }

        fn symbol(&mut self, text: &str, length: u16) -> u64 {
            let mut bytes = vec![0, 0, 0, 0];
            bytes.extend_from_slice(&length.to_le_bytes());
            bytes.extend_from_slice(text.as_bytes());
            self.bytes(&bytes, 0)
        }

        /// A `Method*` of class `chain/Chain`, method `innerHot`, source `Chain.java`, four
        /// bytes of bytecode and `line_table` after them (JDK 17's layout).
        fn method(&mut self, class: u64, line_table: &[u8]) -> u64 {
            let name = self.symbol("innerHot", 8);
            let source = self.symbol("Chain.java", 10);
            let klass = self.record(32, &[(24, class, 8)]);
            let pool = self.record(
                72 + 32,
                &[
                    (24, klass, 8),
                    (54, 3, 2),
                    (72 + 8, name, 8),
                    (72 + 24, source, 8),
                ],
            );
            let mut constant = vec![0u8; 48 + 4];
            constant[8..16].copy_from_slice(&pool.to_le_bytes());
            constant[28..30].copy_from_slice(&1u16.to_le_bytes());
            constant[32..34].copy_from_slice(&4u16.to_le_bytes());
            constant[34..36].copy_from_slice(&1u16.to_le_bytes());
            constant.extend_from_slice(line_table);
            let constant = self.bytes(&constant, 0);
            self.record(16, &[(8, constant, 8)])
        }
    }

    fn forged_process() -> Process {
        Process {
            memory: Memory::open(Path::new("/proc"), std::process::id()).unwrap(),
            layout: Layout::of(&jdk17_structs(), (17, 0, 15, 6)).unwrap(),
            code: CodeCache::default(),
            methods: FxHashMap::default(),
            named: NamedFrames::new(MAX_NAMED_PER_PROCESS, Some(RENAME_INTERVAL)),
            blobs: FxHashMap::default(),
            blob_extents: BTreeMap::new(),
            blobs_generation: 0,
        }
    }

    /// A method forged as JDK 17 lays it out is named with its package's path and the line
    /// of a bytecode pointer; forged pointers (nowhere, unaligned, a name longer than any, a
    /// line table without its end) end in bounded reads, an unreadable frame counted, never a
    /// hang or a panic.
    #[test]
    fn forged_methods_are_named_and_hostile_ones_bounded() {
        let mut forge = Forge::default();
        let class = forge.symbol("chain/Chain", 11);
        // (bci 0, line 7), (bci 2, line 9).
        let method = forge.method(class, &[7, (2 << 3) | 2, 0]);
        let mut p = forged_process();
        let mut frames = FrameTable::default();
        let mut stats = InterpreterStats::default();
        let bytecode = p.method(method).unwrap().bytecode;
        let named = p.interpreted(&mut frames, method, bytecode + 3, &mut stats);
        let frame = frames
            .get(crate::interp::frame_id(named[0]).unwrap())
            .unwrap();
        assert_eq!(frame.function, "chain.Chain.innerHot");
        assert_eq!(frame.file.as_deref(), Some("chain/Chain.java"));
        assert_eq!(frame.line, 9);
        // A bytecode pointer outside the method: named, no line.
        let named = p.interpreted(&mut frames, method, bytecode + 400, &mut stats);
        assert_eq!(
            frames
                .get(crate::interp::frame_id(named[0]).unwrap())
                .unwrap()
                .line,
            0
        );
        assert_eq!(stats.unreadable_frames, 0);

        for hostile in [0x10, method + 1, u64::MAX - 7] {
            let named = p.interpreted(&mut frames, hostile, 0, &mut stats);
            let frame = frames
                .get(crate::interp::frame_id(named[0]).unwrap())
                .unwrap();
            assert_eq!(frame.function, UNREADABLE_METHOD);
        }
        assert_eq!(stats.unreadable_frames, 3);
        // A class name claiming 65,535 bytes: read up to MAX_NAME_BYTES.
        let long = forge.symbol("chain/Long", u16::MAX);
        let method = forge.method(long, &[7, 0]);
        if let Some(m) = p.method(method) {
            assert!(m.name.chars().count() <= MAX_NAME_BYTES + ".innerHot".len());
        }
        // A line table that never ends: bounded by what is read of it.
        let method = forge.method(class, &[(1 << 3) | 1; 4096]);
        let m = p.method(method).unwrap();
        assert!(m.lines.len() <= MAX_LINE_TABLE_BYTES);
    }

    /// `v` in UNSIGNED5 (no excluded byte), as HotSpot's `CompressedWriteStream` writes it.
    fn unsigned5(mut v: u32, out: &mut Vec<u8>) {
        for _ in 0..4 {
            if v < 192 {
                out.push(v as u8);
                return;
            }
            out.push((192 + (v - 192) % 64) as u8);
            v = (v - 192) / 64;
        }
        out.push(v as u8);
    }

    #[test]
    fn scope_chains_end_at_cycles_and_torn_streams() {
        // A scope whose sender is itself, and one cut in the middle of a number.
        let cycle = Nmethod {
            method: 0,
            pc_descs: vec![(0x40, 1), (0x80, 5)],
            scopes: vec![0, 1, 2, 8, 0, 0xff],
            metadata: 0,
        };
        assert_eq!(scope_chain(&cycle, 0x40, false, 0), vec![(2, 7)]);
        assert_eq!(scope_chain(&cycle, 0x80, false, 0), vec![]);
        // 200 scopes, each the sender of the next (deeper than any inlining).
        let mut deep = vec![0u8];
        let mut sender = 0;
        for _ in 0..200 {
            let at = deep.len() as u32;
            for v in [sender, 1, 1] {
                unsigned5(v, &mut deep);
            }
            sender = at;
        }
        let deep = Nmethod {
            method: 0,
            pc_descs: vec![(0x10, sender as i32)],
            scopes: deep,
            metadata: 0,
        };
        assert_eq!(scope_chain(&deep, 0x10, false, 0).len(), MAX_INLINE_DEPTH);
    }
}
