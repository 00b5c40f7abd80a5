//! JavaScript frames of V8 (Node.js), with no flag and no change to the program: V8's frames
//! keep frame pointers, and a JavaScript frame holds its function in a fixed slot below its
//! frame pointer (`v8dbg_off_fp_function`), with its context above it where V8's own frames
//! hold a frame-type marker. The BPF program, told that a process runs V8, reads those slots of
//! each frame in code no object maps (compiled JavaScript) or in V8's embedded builtins (where
//! the interpreter runs) as the native walk passes it; here each function becomes a named frame
//! (`SharedFunctionInfo` name, script name, line) that takes the place of its native frame.
//! Layouts come from V8's own `v8dbg_*` constants, read from the executable
//! ([`parca_symbolize::V8Runtime`]); a process whose V8 lacks one is not read. The facts used
//! are in `ebpf/v8.md`.

use std::path::Path;
use std::sync::Arc;

use parca_symbolize::V8Runtime;
use rustc_hash::FxHashMap;

use crate::bpf::{PY_NO_CFRAME, PyConfig, PyFrameSample, VM_V8};
use crate::interp::{
    FrameTable, InterpreterStats, Memory, NamedFrames, Runtime, Stacks, frame_address,
};
use crate::process::ProcessInfo;

/// The name of a frame whose function could not be read.
const UNREADABLE_FUNCTION: &str = "[v8: unreadable function]";
/// The name V8 gives a function without one.
const ANONYMOUS: &str = "(anonymous)";
/// Functions (by `SharedFunctionInfo`) and scripts remembered per process.
const MAX_FUNCTIONS_PER_PROCESS: usize = 16_384;
const MAX_SCRIPTS_PER_PROCESS: usize = 4_096;
/// Sampled frames whose names are remembered per process.
const MAX_NAMED_PER_PROCESS: usize = 65_536;
/// Longest name read, in characters; a longer one is cut.
const MAX_NAME_CHARS: usize = 1024;
/// Largest script source read to find its lines (8 MiB of two-byte text at most); a longer
/// script's frames have no line.
const MAX_SOURCE_CHARS: usize = 4 << 20;
/// Line starts held per process, over all its scripts (4 bytes each); past it they are read
/// again.
const MAX_LINE_STARTS: usize = 2 << 20;
/// Most strings read for one (the parts of cons strings).
const MAX_STRING_PIECES: u32 = 64;
/// The bytes below a frame pointer the BPF program reads (`V8_WINDOW_BYTES`).
const WINDOW_BYTES: i64 = 64;

/// Where this V8 keeps what the agent reads: offsets of fields in bytes from an object's start
/// (a tagged pointer is the start plus one), instance types, and frame slots, each named after
/// the `v8dbg_` constant it comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Layout {
    /// `class_HeapObject__map__Map`, `class_Map__instance_type__uint16_t`.
    map: u64,
    instance_type: u64,
    /// `class_JSFunction__shared__SharedFunctionInfo`.
    function_shared: u64,
    /// `class_SharedFunctionInfo__name_or_scope_info__Object`,
    /// `…__script_or_debug_info__HeapObject`, `…__function_data__Object`.
    shared_name: u64,
    shared_script: u64,
    shared_data: u64,
    /// `class_Script__name__Object`, `…__source__Object`.
    script_name: u64,
    script_source: u64,
    /// `class_String__length__int32_t`; `class_SeqOneByteString__chars__char` (two-byte too);
    /// `class_ConsString__first__String`, `…__second__String`; `class_ThinString__actual__String`;
    /// `class_SlicedString__parent__String`, `…__offset__SMI`.
    string_length: u64,
    seq_chars: u64,
    cons_first: u64,
    cons_second: u64,
    thin_actual: u64,
    sliced_parent: u64,
    sliced_offset: u64,
    /// `FirstNonstringType`, `StringRepresentationMask`, `StringEncodingMask`,
    /// `OneByteStringTag`, `ConsStringTag`, `ThinStringTag`, `SlicedStringTag`; the
    /// sequential tag is 0.
    first_nonstring: u16,
    representation_mask: u16,
    encoding_mask: u16,
    one_byte: u16,
    cons: u16,
    thin: u16,
    sliced: u16,
    /// `type_…` of `SharedFunctionInfo`, `Script`, `ScopeInfo`, `BytecodeArray`, `ByteArray`,
    /// `FixedArray`, `Code`.
    shared_type: u16,
    script_type: u16,
    scope_info_type: u16,
    bytecode_array_type: u16,
    byte_array_type: u16,
    fixed_array_type: u16,
    code_type: u16,
    /// `class_FixedArrayBase__length__SMI`, `class_FixedArray__data__uintptr_t` (a byte array's
    /// and a weak array's data start there too).
    array_length: u64,
    array_data: u64,
    /// `scopeinfo_idx_ncontextlocals`, `scopeinfo_idx_first_vars`: a `ScopeInfo`'s slots
    /// (after its map) count its context locals, whose names and infos come first.
    scope_ncontext_locals: u64,
    scope_first_vars: u64,
    /// Frame slots, in bytes from the frame pointer: `off_fp_function`,
    /// `off_fp_context_or_frame_type`, `off_fp_bytecode_array`, `off_fp_bytecode_offset`.
    fp_function: i64,
    fp_context: i64,
    fp_bytecode_array: i64,
    fp_bytecode_offset: i64,
    /// `class_BytecodeArray__data__uintptr_t`: where the bytecodes start (an interpreted
    /// frame's bytecode offset counts from the array's tagged pointer).
    bytecode_data: u64,
    /// What this V8 does not export of its compiled code, known for the versions read.
    code: Option<CodeLayout>,
}

/// Fields of V8's compiled code that its `v8dbg_` constants leave out, for the V8 versions
/// whose layout is known (11.1.204 up to 11.4.59: Node 20), as the OTel profiler's fallbacks
/// (`interpreter/nodev8/v8.go`) give them and as checked on Node 20 here.
#[derive(Debug, Clone, PartialEq, Eq)]
struct CodeLayout {
    /// `JSFunction::code`.
    function_code: u64,
    /// `Code`: its instructions' start (a pointer), its flags (the kind in the low bits of
    /// `CodeKindFieldMask`), its instructions' size; `class_Code__source_position_table…`,
    /// `class_Code__deoptimization_data…`.
    instruction_start: u64,
    flags: u64,
    instruction_size: u64,
    source_positions: u64,
    deoptimization_data: u64,
    /// `BytecodeArray::source_position_table`.
    bytecode_source_positions: u64,
    /// `CodeKindFieldMask`, `CodeKindBaseline`.
    kind_mask: u32,
    kind_baseline: u32,
    /// `DeoptimizationData…Index`: inlined function count, literals, the code's own
    /// function, inlining positions.
    deopt_inlined_count: u64,
    deopt_literals: u64,
    deopt_shared: u64,
    deopt_inlining_positions: u64,
}

impl Layout {
    /// The layout of `v8`, or what it lacks. Only builds without pointer compression
    /// (Node's) are read: their tagged values are whole words.
    fn of(v8: &V8Runtime) -> Result<Layout, String> {
        let get = |name: &str| v8.constant(name).ok_or_else(|| name.to_owned());
        let off =
            |name: &str| get(name).and_then(|v| u64::try_from(v).map_err(|_| name.to_owned()));
        let ty = |name: &str| get(name).and_then(|v| u16::try_from(v).map_err(|_| name.to_owned()));
        if get("SmiShiftSize")? != 31 || get("HeapObjectTag")? != 1 {
            return Err("SmiShiftSize 31 (a build with pointer compression)".to_owned());
        }
        let array_length = off("class_FixedArrayBase__length__SMI")?;
        let function_shared = off("class_JSFunction__shared__SharedFunctionInfo")?;
        let code = match v8.v8_version {
            Some(version) if ((11, 1, 204)..(11, 4, 59)).contains(&version) => Some(CodeLayout {
                function_code: function_shared + 24,
                instruction_start: 40,
                flags: 48,
                instruction_size: 56,
                source_positions: off("class_Code__source_position_table__ByteArray")?,
                deoptimization_data: off("class_Code__deoptimization_data__FixedArray")?,
                bytecode_source_positions: array_length + 24,
                kind_mask: off("CodeKindFieldMask")? as u32,
                kind_baseline: off("CodeKindBaseline")? as u32,
                deopt_inlined_count: off("DeoptimizationDataInlinedFunctionCountIndex")?,
                deopt_literals: off("DeoptimizationDataLiteralArrayIndex")?,
                deopt_shared: off("DeoptimizationDataSharedFunctionInfoIndex")?,
                deopt_inlining_positions: off("DeoptimizationDataInliningPositionsIndex")?,
            }),
            _ => None,
        };
        Ok(Layout {
            map: v8.constant("class_HeapObject__map__Map").unwrap_or(0) as u64,
            instance_type: off("class_Map__instance_type__uint16_t")?,
            function_shared,
            shared_name: off("class_SharedFunctionInfo__name_or_scope_info__Object")?,
            shared_script: off("class_SharedFunctionInfo__script_or_debug_info__HeapObject")?,
            shared_data: off("class_SharedFunctionInfo__function_data__Object")?,
            script_name: off("class_Script__name__Object")?,
            script_source: off("class_Script__source__Object")?,
            string_length: off("class_String__length__int32_t")?,
            seq_chars: off("class_SeqOneByteString__chars__char")?,
            cons_first: off("class_ConsString__first__String")?,
            cons_second: off("class_ConsString__second__String")?,
            thin_actual: off("class_ThinString__actual__String")?,
            sliced_parent: off("class_SlicedString__parent__String")?,
            sliced_offset: off("class_SlicedString__offset__SMI")?,
            first_nonstring: ty("FirstNonstringType")?,
            representation_mask: ty("StringRepresentationMask")?,
            encoding_mask: ty("StringEncodingMask")?,
            one_byte: ty("OneByteStringTag")?,
            cons: ty("ConsStringTag")?,
            thin: ty("ThinStringTag")?,
            sliced: ty("SlicedStringTag")?,
            shared_type: ty("type_SharedFunctionInfo__SHARED_FUNCTION_INFO_TYPE")?,
            script_type: ty("type_Script__SCRIPT_TYPE")?,
            scope_info_type: ty("type_ScopeInfo__SCOPE_INFO_TYPE")?,
            bytecode_array_type: ty("type_BytecodeArray__BYTECODE_ARRAY_TYPE")?,
            byte_array_type: ty("type_ByteArray__BYTE_ARRAY_TYPE")?,
            fixed_array_type: ty("type_FixedArray__FIXED_ARRAY_TYPE")?,
            code_type: ty("type_Code__CODE_TYPE")?,
            array_length,
            array_data: off("class_FixedArray__data__uintptr_t")?,
            scope_ncontext_locals: off("scopeinfo_idx_ncontextlocals")?,
            scope_first_vars: off("scopeinfo_idx_first_vars")?,
            fp_function: get("off_fp_function")?,
            fp_context: get("off_fp_context_or_frame_type")?,
            fp_bytecode_array: get("off_fp_bytecode_array")?,
            fp_bytecode_offset: get("off_fp_bytecode_offset")?,
            bytecode_data: off("class_BytecodeArray__data__uintptr_t")?,
            code,
        })
    }

    /// The offset in the BPF program's window below the frame pointer of frame slot `slot`.
    fn window_offset(slot: i64) -> Option<u32> {
        u32::try_from(WINDOW_BYTES + slot)
            .ok()
            .filter(|&o| o % 8 == 0 && i64::from(o) < WINDOW_BYTES)
    }
}

/// A Smi's value: its upper 32 bits (no pointer compression).
fn smi(word: u64) -> Option<i64> {
    (word & 1 == 0).then_some((word as i64) >> 32)
}

/// The process's heap, read through tagged pointers.
#[derive(Debug)]
struct Heap {
    memory: Memory,
    layout: Layout,
}

impl Heap {
    /// The address of field `offset` of the object tagged `object`; `None` for what is no
    /// heap object.
    fn at(object: u64, offset: u64) -> Option<u64> {
        (object & 1 == 1).then(|| (object - 1).checked_add(offset))?
    }

    /// The word at field `offset` of the object tagged `object`.
    fn field(&self, object: u64, offset: u64) -> Option<u64> {
        self.memory.u64(Heap::at(object, offset)?)
    }

    /// The u32 at field `offset` of the object tagged `object`.
    fn u32_field(&self, object: u64, offset: u64) -> Option<u32> {
        self.memory.u32(Heap::at(object, offset)?)
    }

    /// The instance type of the object tagged `object`.
    fn instance_type(&self, object: u64) -> Option<u16> {
        let map = self.field(object, self.layout.map)?;
        let instance_type = self
            .memory
            .u16((map & !1).checked_add(self.layout.instance_type)?)?;
        (map & 1 == 1).then_some(instance_type)
    }

    /// The text of the string tagged `object` (at most `max` characters), or `None` when it
    /// is no string V8 keeps in its heap.
    fn string(&self, object: u64, max: usize) -> Option<Vec<u16>> {
        let mut out = Vec::new();
        let mut pieces = MAX_STRING_PIECES;
        self.append_string(object, max, 0, &mut pieces, &mut out)?;
        Some(out)
    }

    /// Appends characters `skip..` of the string `object` until `out` holds `max`, reading at
    /// most `pieces` more strings (a cons string is two, a cycle of them forged or torn
    /// ends there).
    fn append_string(
        &self,
        object: u64,
        max: usize,
        skip: usize,
        pieces: &mut u32,
        out: &mut Vec<u16>,
    ) -> Option<()> {
        let l = &self.layout;
        if *pieces == 0 || out.len() >= max {
            return Some(());
        }
        *pieces -= 1;
        let ty = self.instance_type(object)?;
        if ty >= l.first_nonstring {
            return None;
        }
        let len = self.u32_field(object, l.string_length)? as usize;
        let representation = ty & l.representation_mask;
        if representation == 0 {
            let n = len.saturating_sub(skip).min(max - out.len());
            let at = Heap::at(object, l.seq_chars)?;
            if ty & l.encoding_mask == l.one_byte {
                let bytes = self.memory.bytes(at + skip as u64, n)?;
                out.extend(bytes.iter().map(|&b| u16::from(b)));
            } else {
                let bytes = self.memory.bytes(at + 2 * skip as u64, 2 * n)?;
                out.extend(
                    bytes
                        .chunks_exact(2)
                        .map(|c| u16::from_ne_bytes([c[0], c[1]])),
                );
            }
            Some(())
        } else if representation == l.cons {
            let first = self.field(object, l.cons_first)?;
            let first_len = self.u32_field(first, l.string_length)? as usize;
            if skip < first_len {
                self.append_string(first, max, skip, pieces, out)?;
            }
            let second = self.field(object, l.cons_second)?;
            self.append_string(second, max, skip.saturating_sub(first_len), pieces, out)
        } else if representation == l.thin {
            self.append_string(self.field(object, l.thin_actual)?, max, skip, pieces, out)
        } else if representation == l.sliced {
            let offset = usize::try_from(smi(self.field(object, l.sliced_offset)?)?).ok()?;
            let parent = self.field(object, l.sliced_parent)?;
            let want = max.min(out.len() + len.saturating_sub(skip));
            self.append_string(parent, want, offset.saturating_add(skip), pieces, out)
        } else {
            // External strings (a script's source from a snapshot) live outside the heap.
            None
        }
    }
}

/// Largest position table or inlining table read, in bytes.
const MAX_TABLE_BYTES: u64 = 1 << 20;

impl Heap {
    /// The bytes of the byte array tagged `object` (at most [`MAX_TABLE_BYTES`]).
    fn byte_array(&self, object: u64) -> Option<Vec<u8>> {
        let l = &self.layout;
        if self.instance_type(object)? != l.byte_array_type {
            return None;
        }
        let len = u64::try_from(smi(self.field(object, l.array_length)?)?).ok()?;
        self.memory.bytes(
            Heap::at(object, l.array_data)?,
            len.min(MAX_TABLE_BYTES) as usize,
        )
    }

    /// Element `index` of the fixed (or weak) array tagged `array`.
    fn element(&self, array: u64, index: u64) -> Option<u64> {
        self.field(
            array,
            self.layout.array_data.checked_add(index.checked_mul(8)?)?,
        )
    }
}

/// The source position a position table gives code offset `offset`: the last entry at or
/// before it. Entries are pairs of zigzag variable-length deltas (code offset, its sign
/// telling statements from expressions; source position) from offset −1 and position 0.
fn position_at(table: &[u8], offset: i64) -> u64 {
    let mut i = 0;
    let (mut code, mut source) = (-1i64, 0i64);
    while i < table.len() {
        let Some(delta) = zigzag(table, &mut i) else {
            break;
        };
        code = if delta >= 0 {
            code + delta
        } else {
            code - (delta + 1)
        };
        if code > offset {
            break;
        }
        let Some(delta) = zigzag(table, &mut i) else {
            break;
        };
        source += delta;
    }
    source as u64
}

/// One zigzag-coded variable-length integer of `bytes` at `*i` (7 bits a byte, low first).
fn zigzag(bytes: &[u8], i: &mut usize) -> Option<i64> {
    let mut value = 0u64;
    let mut shift = 0;
    loop {
        let b = *bytes.get(*i)?;
        *i += 1;
        value |= u64::from(b & 0x7f).checked_shl(shift)?;
        shift += 7;
        if b & 0x80 == 0 {
            break;
        }
    }
    Some((value >> 1) as i64 ^ -((value & 1) as i64))
}

/// A raw `SourcePosition`'s offset in its script (`None`: no position), and the id of the
/// inlined function it is in (0: none).
fn script_offset(raw: u64) -> (Option<u32>, u64) {
    let offset = ((raw >> 1) & 0x3fff_ffff) as u32;
    (offset.checked_sub(1), (raw >> 31) & 0xffff)
}

/// A function as read from the process: its name, its script's name, and where it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Function {
    name: String,
    /// The script object (0: none), and its name.
    script: u64,
    file: String,
    /// Its start in the script's source, in characters; `None` when V8 does not say.
    start: Option<u32>,
}

/// A script's line starts (positions of each line's first character), from its source.
#[derive(Debug)]
struct Lines(Vec<u32>);

impl Lines {
    /// The lines of `source`.
    fn of(source: &[u16]) -> Lines {
        let mut starts = vec![0];
        starts.extend(
            source
                .iter()
                .enumerate()
                .filter(|&(_, &c)| c == u16::from(b'\n'))
                .map(|(i, _)| i as u32 + 1),
        );
        Lines(starts)
    }

    /// The 1-based line of position `position`.
    fn line(&self, position: u32) -> u32 {
        self.0.partition_point(|&start| start <= position) as u32
    }
}

/// A process running V8 whose frames are read.
#[derive(Debug)]
pub(crate) struct Process {
    heap: Heap,
    /// Functions by `SharedFunctionInfo` (`None`: unreadable).
    functions: FxHashMap<u64, Option<Arc<Function>>>,
    /// Line starts by script (`None`: its source could not be read, as for Node's own modules,
    /// whose sources live outside V8's heap), and how many they hold.
    scripts: FxHashMap<u64, Option<Arc<Lines>>>,
    line_starts: usize,
    /// The frames named for a sampled frame, by what was sampled and the function's
    /// `SharedFunctionInfo` as read for this sample (a function whose address another took
    /// since has another): a hot frame is sampled at the same pc again and again, and naming
    /// it reads the code and its tables.
    named: NamedFrames<SampledFrame>,
}

/// What identifies a sampled JavaScript frame's frames: function, its `SharedFunctionInfo`,
/// bytecode array and offset, native address, and whether it was the leaf.
type SampledFrame = (u64, u64, u64, u32, u64, bool);

impl Process {
    /// The function whose `SharedFunctionInfo` is `shared`, remembered.
    fn function(&mut self, shared: u64) -> Option<Arc<Function>> {
        if let Some(known) = self.functions.get(&shared) {
            return known.clone();
        }
        if self.functions.len() >= MAX_FUNCTIONS_PER_PROCESS {
            self.functions.clear();
        }
        let read = self.read_function(shared).map(Arc::new);
        self.functions.insert(shared, read.clone());
        read
    }

    fn read_function(&self, shared: u64) -> Option<Function> {
        let heap = &self.heap;
        let l = &heap.layout;
        if heap.instance_type(shared)? != l.shared_type {
            return None;
        }
        let name_or_scope = heap.field(shared, l.shared_name)?;
        let (name, start) = match heap.instance_type(name_or_scope) {
            Some(t) if t < l.first_nonstring => (heap.string(name_or_scope, MAX_NAME_CHARS)?, None),
            Some(t) if t == l.scope_info_type => self.scope_info(name_or_scope),
            _ => (Vec::new(), None),
        };
        let name = if name.is_empty() {
            ANONYMOUS.to_owned()
        } else {
            String::from_utf16_lossy(&name)
        };
        let script = heap
            .field(shared, l.shared_script)
            .filter(|&s| heap.instance_type(s) == Some(l.script_type))
            .unwrap_or(0);
        let file = (script != 0)
            .then(|| heap.field(script, l.script_name))
            .flatten()
            .and_then(|n| heap.string(n, MAX_NAME_CHARS))
            .map(|n| String::from_utf16_lossy(&n))
            .unwrap_or_default();
        Some(Function {
            name,
            script,
            file,
            start,
        })
    }

    /// The function name a `ScopeInfo` holds (empty: none) and the function's start: after
    /// the names and infos of its context locals, the first string is the function's name
    /// (its own or the one V8 inferred), and the first pair of ascending Smis after it its
    /// start and end, as the OTel profiler reads them.
    fn scope_info(&self, scope_info: u64) -> (Vec<u16>, Option<u32>) {
        const SLOTS: u64 = 16;
        let heap = &self.heap;
        let l = &heap.layout;
        let Some(bytes) =
            Heap::at(scope_info, 8).and_then(|at| heap.memory.bytes(at, (SLOTS * 8) as usize))
        else {
            return (Vec::new(), None);
        };
        let slots: Vec<u64> = bytes
            .chunks_exact(8)
            .map(|c| u64::from_ne_bytes(c.try_into().expect("8 bytes")))
            .collect();
        let locals = slots
            .get(l.scope_ncontext_locals as usize)
            .and_then(|&s| smi(s))
            .and_then(|n| u64::try_from(n).ok())
            .unwrap_or(SLOTS);
        let first = l.scope_first_vars.saturating_add(2 * locals);
        let mut name = Vec::new();
        let mut after_name = SLOTS;
        for i in first..SLOTS {
            let slot = slots[i as usize];
            if slot & 3 == 1
                && let Some(s) = heap.string(slot, MAX_NAME_CHARS)
            {
                name = s;
                after_name = i + 1;
                break;
            }
        }
        let start = (after_name..SLOTS.saturating_sub(1)).find_map(|i| {
            let (a, b) = (smi(slots[i as usize])?, smi(slots[i as usize + 1])?);
            (0 <= a && a < b).then_some(a as u32)
        });
        (name, start)
    }

    /// The line of script offset `offset` in `script`.
    fn line(&mut self, script: u64, offset: u32) -> u32 {
        if script == 0 {
            return 0;
        }
        if !self.scripts.contains_key(&script) {
            let heap = &self.heap;
            let lines = heap
                .field(script, heap.layout.script_source)
                .and_then(|source| heap.string(source, MAX_SOURCE_CHARS))
                .map(|source| Arc::new(Lines::of(&source)));
            let starts = lines.as_ref().map_or(0, |l| l.0.len());
            if self.scripts.len() >= MAX_SCRIPTS_PER_PROCESS
                || self.line_starts + starts > MAX_LINE_STARTS
            {
                self.scripts.clear();
                self.line_starts = 0;
            }
            self.line_starts += starts;
            self.scripts.insert(script, lines);
        }
        self.scripts[&script]
            .as_ref()
            .map_or(0, |lines| lines.line(offset))
    }

    /// The frame of function `shared` at script offset `offset` (its start when `None`),
    /// named into `frames`.
    fn frame(
        &mut self,
        frames: &mut FrameTable,
        shared: u64,
        offset: Option<u32>,
        stats: &mut InterpreterStats,
    ) -> u64 {
        stats.frames += 1;
        let Some(function) = self.function(shared) else {
            stats.unreadable_frames += 1;
            return frame_address(frames.intern(UNREADABLE_FUNCTION, "", 0));
        };
        let line = offset
            .or(function.start)
            .map_or(0, |offset| self.line(function.script, offset));
        frame_address(frames.intern(&function.name, &function.file, line))
    }

    /// The `SharedFunctionInfo` field of a sampled frame's function, as the program read it
    /// (`PyConfig::function_aux`): `None` when it could not.
    fn shared_of(f: &PyFrameSample) -> Option<u64> {
        (f.aux != 0).then_some(f.aux)
    }

    /// The frames (innermost first) of sampled JavaScript frame `f`, whose function's
    /// `SharedFunctionInfo` field holds `shared` (`shared_of`) and whose native address is
    /// `pc` (`leaf`: the sampled instruction, else a return address); `None` when its function
    /// slot holds no JavaScript function.
    fn frames_of(
        &mut self,
        frames: &mut FrameTable,
        f: &PyFrameSample,
        shared: Option<u64>,
        pc: u64,
        leaf: bool,
        stats: &mut InterpreterStats,
    ) -> Option<Arc<[u64]>> {
        // A frame named before (a hot frame, nearly every sample) costs no read: its
        // function's `SharedFunctionInfo` came with the sample (`shared_of`), and its type is
        // checked before a frame is named by it.
        let heap = &self.heap;
        let shared = shared?;
        let key = (f.code, shared, f.fingerprint, f.marker, pc, leaf);
        if let Some(known) = self.named.known(&key, stats) {
            return Some(known);
        }
        if heap.instance_type(shared)? != heap.layout.shared_type {
            return None;
        }
        Some(NamedFrames::in_owner(
            self,
            |p| &mut p.named,
            key,
            stats,
            |p, stats| p.name_frames(frames, f, shared, pc, leaf, stats),
        ))
    }

    /// [`Process::frames_of`], read.
    fn name_frames(
        &mut self,
        frames: &mut FrameTable,
        f: &PyFrameSample,
        shared: u64,
        pc: u64,
        leaf: bool,
        stats: &mut InterpreterStats,
    ) -> Vec<u64> {
        // An interpreted frame: the offset of its bytecode (a return address's, or the one
        // saved at its last call or check for the leaf).
        if f.marker != 0
            && self.heap.instance_type(f.fingerprint) == Some(self.heap.layout.bytecode_array_type)
        {
            let offset = i64::from(f.marker) - (self.heap.layout.bytecode_data as i64 - 1);
            let position = self.bytecode_position(f.fingerprint, offset.max(0));
            return vec![self.frame(frames, shared, position, stats)];
        }
        match self.compiled_frames(frames, f.code, shared, pc, leaf, stats) {
            Some(compiled) => compiled,
            None => vec![self.frame(frames, shared, None, stats)],
        }
    }

    /// The script offset of bytecode offset `offset` of the bytecode array `bytecode`.
    fn bytecode_position(&self, bytecode: u64, offset: i64) -> Option<u32> {
        let heap = &self.heap;
        let code = heap.layout.code.as_ref()?;
        let table = heap.byte_array(heap.field(bytecode, code.bytecode_source_positions)?)?;
        script_offset(position_at(&table, offset)).0
    }

    /// The frames of a frame running the optimized code of `function` at `pc`, the functions
    /// inlined there expanded (innermost first); `None` when `pc` is not in that code (on-stack
    /// replaced or replaced since) or it is not optimized code.
    fn compiled_frames(
        &mut self,
        frames: &mut FrameTable,
        function: u64,
        shared: u64,
        pc: u64,
        leaf: bool,
        stats: &mut InterpreterStats,
    ) -> Option<Vec<u64>> {
        let heap = &self.heap;
        let l = &heap.layout;
        let layout = l.code.as_ref()?;
        let code = heap.field(function, layout.function_code)?;
        if heap.instance_type(code)? != l.code_type {
            return None;
        }
        let start = heap.field(code, layout.instruction_start)?;
        let words = heap.memory.bytes(Heap::at(code, layout.flags)?, 16)?;
        let kind = u32::from_ne_bytes(words[0..4].try_into().ok()?) & layout.kind_mask;
        let size = u64::from(u32::from_ne_bytes(words[8..12].try_into().ok()?));
        if kind <= layout.kind_baseline || pc < start || pc - start >= size {
            return None;
        }
        // A return address is one past its call.
        let delta = (pc - start) as i64 - i64::from(!leaf);
        let table = heap.byte_array(heap.field(code, layout.source_positions)?)?;
        let mut raw = position_at(&table, delta);
        let deopt = heap
            .field(code, layout.deoptimization_data)
            .filter(|&d| heap.instance_type(d) == Some(l.fixed_array_type));
        let own = deopt
            .and_then(|d| heap.element(d, layout.deopt_shared))
            .filter(|&s| heap.instance_type(s) == Some(l.shared_type))
            .unwrap_or(shared);
        let mut out = Vec::new();
        let (mut offset, mut inlined) = script_offset(raw);
        if let Some(deopt) = deopt
            && inlined != 0
        {
            let literals = heap.element(deopt, layout.deopt_literals)?;
            let positions =
                heap.byte_array(heap.element(deopt, layout.deopt_inlining_positions)?)?;
            // Each inlining: its caller's position (u64) and the literal index of the inlined
            // function (i32; −1: the code's own), 16 bytes.
            let mut depth = 0;
            while inlined != 0 && depth < 64 {
                let at = (inlined as usize - 1) * 16;
                let entry = positions.get(at..at + 16)?;
                let index = i32::from_ne_bytes(entry[8..12].try_into().ok()?);
                let inner = match u64::try_from(index) {
                    Ok(index) => self.heap.element(literals, index)?,
                    Err(_) => own,
                };
                out.push(self.frame(frames, inner, offset, stats));
                raw = u64::from_ne_bytes(entry[0..8].try_into().ok()?);
                (offset, inlined) = script_offset(raw);
                depth += 1;
            }
        }
        out.push(self.frame(frames, own, offset, stats));
        Some(out)
    }
}

/// V8, as the agent reads it.
#[derive(Debug)]
pub(crate) struct V8;

/// The sampling thread's V8 processes.
pub(crate) type V8Stacks = Stacks<V8>;

impl Runtime for V8 {
    type Process = Process;

    fn prepare(proc_root: &Path, info: &ProcessInfo) -> Option<(Process, PyConfig)> {
        let (mapping, v8) = info.v8()?;
        let layout = match Layout::of(v8) {
            Ok(layout) => layout,
            Err(missing) => {
                tracing::debug!(pid = info.pid, version = %v8.version, missing, "no JavaScript frames: this V8 does not export what the agent reads");
                return None;
            }
        };
        // The builtins where this process maps the executable, and V8's copy of them (a
        // mapping of the executable from the builtins' file offset); none when the symbol
        // table does not say (compiled frames are still read).
        let load_bias = v8
            .vaddr_of_file_offset(mapping.offset)
            .and_then(|vaddr| mapping.start.checked_sub(vaddr));
        let builtins = v8
            .builtins
            .clone()
            .zip(load_bias)
            .map(|(b, bias)| (b.start + bias, b.end + bias))
            .unwrap_or((0, 0));
        let copy = v8
            .builtins_file_offset
            .and_then(|offset| {
                info.mappings.iter().find(|m| {
                    m.offset == offset
                        && m.start != builtins.0
                        && match (&m.object, &mapping.object) {
                            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                            _ => false,
                        }
                })
            })
            .map(|m| (m.start, m.end))
            .unwrap_or((0, 0));
        let memory = match Memory::open(proc_root, info.pid) {
            Ok(memory) => memory,
            Err(e) => {
                tracing::debug!(pid = info.pid, error = %e, "no JavaScript frames: cannot read the process's memory");
                return None;
            }
        };
        let config = bpf_config(&layout, builtins, copy)?;
        let process = Process {
            heap: Heap { memory, layout },
            functions: FxHashMap::default(),
            scripts: FxHashMap::default(),
            line_starts: 0,
            named: NamedFrames::new(MAX_NAMED_PER_PROCESS, None),
        };
        Some((process, config))
    }

    fn calls(
        process: &mut Process,
        frames: &mut FrameTable,
        sampled: &[PyFrameSample],
        stats: &mut InterpreterStats,
    ) -> Vec<Vec<u64>> {
        sampled
            .iter()
            .filter_map(|f| process.frames_of(frames, f, Process::shared_of(f), 0, false, stats))
            .filter(|call| !call.is_empty())
            .map(|call| call.to_vec())
            .collect()
    }

    /// Each JavaScript frame (with the functions inlined into it) takes the place of the
    /// native frame it was read at.
    fn place(
        process: &mut Process,
        frames: &mut FrameTable,
        _info: &ProcessInfo,
        native: Vec<u64>,
        sampled: &[PyFrameSample],
        stats: &mut InterpreterStats,
    ) -> (Vec<u64>, usize) {
        let mut at: FxHashMap<usize, Arc<[u64]>> = FxHashMap::default();
        let mut unplaced = 0;
        for f in sampled {
            let shared = Process::shared_of(f);
            let Some((i, &pc)) = usize::try_from(f.index)
                .ok()
                .and_then(|i| Some((i, native.get(i)?)))
            else {
                unplaced += 1;
                continue;
            };
            if let Some(named) = process
                .frames_of(frames, f, shared, pc, i == 0, stats)
                .filter(|named| !named.is_empty())
            {
                at.insert(i, named);
            }
        }
        let mut out =
            Vec::with_capacity(native.len() + at.values().map(|named| named.len()).sum::<usize>());
        for (i, addr) in native.into_iter().enumerate() {
            match at.remove(&i) {
                Some(named) => out.extend(named.iter()),
                None => out.push(addr),
            }
        }
        (out, unplaced)
    }
}

/// What the BPF program is told of a V8 process: the builtins' code (`tss`..`code_end`) and
/// V8's copy of it (`code2_*`), and where in its window below a frame pointer each slot is (the
/// function in `window_code`, the context or frame type in `window_marker`, the bytecode array
/// in `window_previous`, the bytecode offset in `window_instr`).
fn bpf_config(
    layout: &Layout,
    (builtins_start, builtins_end): (u64, u64),
    (copy_start, copy_end): (u64, u64),
) -> Option<PyConfig> {
    Some(PyConfig {
        tss: builtins_start,
        code_end: builtins_end,
        code2_start: copy_start,
        code2_end: copy_end,
        kind: VM_V8,
        // Heap objects are tagged 1; compiled code runs in anonymous memory.
        slot_mask: 1,
        slot_tag: 1,
        anon_frames: 1,
        cframe_frame: PY_NO_CFRAME,
        window_len: WINDOW_BYTES as u32,
        window_code: Layout::window_offset(layout.fp_function)?,
        window_marker: Layout::window_offset(layout.fp_context)?,
        window_previous: Layout::window_offset(layout.fp_bytecode_array)?,
        window_instr: Layout::window_offset(layout.fp_bytecode_offset)?,
        // The function's `SharedFunctionInfo`, read by the program for each frame: from the
        // tagged address, the field's offset less the tag.
        function_aux: u32::try_from(layout.function_shared.checked_sub(1)?)
            .ok()
            .filter(|&aux| aux != 0)?,
        ..PyConfig::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interp::frame_id;

    #[test]
    fn lines_start_after_each_newline() {
        let source: Vec<u16> = "a\nbc\n\nd".encode_utf16().collect();
        let lines = Lines::of(&source);
        assert_eq!(lines.line(0), 1);
        assert_eq!(lines.line(1), 1);
        assert_eq!(lines.line(2), 2);
        assert_eq!(lines.line(5), 3);
        assert_eq!(lines.line(6), 4);
    }

    #[test]
    fn smis_are_upper_halves() {
        assert_eq!(smi(7 << 32), Some(7));
        assert_eq!(smi((-2i64 << 32) as u64), Some(-2));
        assert_eq!(smi(0x1001), None);
    }

    #[test]
    fn position_tables_give_the_last_entry_at_or_before_an_offset() {
        // Zigzag: 2n for n >= 0, 2|n|-1 for n < 0. Entries (code offset, position):
        // (0, 10) as a statement, (5, 30) as an expression (code delta −(5+1) → 11), (9, 34).
        let table = [2, 20, 11, 40, 8, 8];
        assert_eq!(position_at(&table, 0), 10);
        assert_eq!(position_at(&table, 4), 10);
        assert_eq!(position_at(&table, 5), 30);
        assert_eq!(position_at(&table, 100), 34);
        assert_eq!(position_at(&[], 3), 0);
        // A cut table ends where it is cut.
        assert_eq!(position_at(&[2, 0x80], 3), 0);
    }

    #[test]
    fn raw_source_positions_hold_the_offset_plus_one_and_the_inlining() {
        assert_eq!(script_offset(0), (None, 0));
        assert_eq!(script_offset(101 << 1), (Some(100), 0));
        assert_eq!(script_offset((3 << 31) | (8 << 1)), (Some(7), 3));
    }

    /// V8 objects forged in this process's own memory (each a boxed slice of words: its map
    /// first), read through `/proc/self/mem` as a Node process's are; and pages of its own.
    struct Forge(Vec<Box<[u64]>>, Vec<u64>);

    impl Drop for Forge {
        fn drop(&mut self) {
            for &page in &self.1 {
                // SAFETY: a page `at_the_end_of_memory` mapped, no longer read.
                unsafe { libc::munmap(page as *mut libc::c_void, 4096) };
            }
        }
    }

    impl Forge {
        /// An object of two words at the end of a page that no mapped page follows.
        fn at_the_end_of_memory(&mut self, words: [u64; 2]) -> u64 {
            // SAFETY: a fresh anonymous mapping of two pages whose second is unmapped again;
            // the first is written only inside its bounds, and unmapped when `self` drops.
            unsafe {
                let page = libc::mmap(
                    std::ptr::null_mut(),
                    8192,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                ) as *mut u64;
                assert_ne!(page as *mut libc::c_void, libc::MAP_FAILED);
                libc::munmap(page.add(512) as *mut libc::c_void, 4096);
                self.1.push(page as u64);
                let header = page.add(510);
                header.write(words[0]);
                header.add(1).write(words[1]);
                header as u64 + 1
            }
        }

        /// A new object of `words`, its tagged pointer.
        fn object(&mut self, words: Vec<u64>) -> u64 {
            let object = words.into_boxed_slice();
            let tagged = object.as_ptr() as u64 + 1;
            self.0.push(object);
            tagged
        }

        /// A map of instance type `ty` (at byte 12).
        fn map(&mut self, ty: u16) -> u64 {
            self.object(vec![0, u64::from(ty) << 32, 0])
        }

        /// A sequential one-byte string.
        fn string(&mut self, l: &Layout, text: &str) -> u64 {
            let map = self.map(l.one_byte);
            let mut words = vec![map, (text.len() as u64) << 32];
            for chunk in text.as_bytes().chunks(8) {
                let mut word = [0u8; 8];
                word[..chunk.len()].copy_from_slice(chunk);
                words.push(u64::from_ne_bytes(word));
            }
            self.object(words)
        }
    }

    /// A function, its script and their strings forged as Node 20 lays them out are named;
    /// forged pointers (nowhere, a cycle of cons strings, a string longer than its memory)
    /// end in bounded reads, never a hang or a panic.
    /// The V8 of this machine's `/usr/bin/node` and its layout, when there is one.
    fn nodes_v8() -> Option<(V8Runtime, Layout)> {
        let node = Path::new("/usr/bin/node");
        let file = std::fs::File::open(node).ok()?;
        let v8 = parca_symbolize::read_v8_runtime(&file, node)
            .unwrap()
            .unwrap();
        let layout = Layout::of(&v8).unwrap();
        Some((v8, layout))
    }

    #[test]
    fn forged_functions_are_named_and_hostile_ones_bounded() {
        let Some((_, layout)) = nodes_v8() else {
            return;
        };
        let l = layout.clone();
        let mut forge = Forge(Vec::new(), Vec::new());
        let name = forge.string(&l, "forged_function");
        let file_name = forge.string(&l, "/srv/forged.js");
        let source = forge.string(&l, "// one\nfunction forged_function() {}\n");
        let script_map = forge.map(l.script_type);
        let script = forge.object(vec![script_map, source, file_name]);
        let shared_map = forge.map(l.shared_type);
        let shared = forge.object(vec![shared_map, 0, name, 0, script, 0, 0, 0]);
        let function_map = forge.map(2066);
        let function = forge.object(vec![function_map, 0, 0, shared, 0, 0, 0, 0]);
        let mut process = Process {
            heap: Heap {
                memory: Memory::open(Path::new("/proc"), std::process::id()).unwrap(),
                layout,
            },
            functions: FxHashMap::default(),
            scripts: FxHashMap::default(),
            line_starts: 0,
            named: NamedFrames::new(MAX_NAMED_PER_PROCESS, None),
        };
        let mut frames = FrameTable::default();
        let mut stats = InterpreterStats::default();
        // The frames of a leaf frame of `function` at `pc`, read as a sample's are.
        let name = |process: &mut Process,
                    frames: &mut FrameTable,
                    function: u64,
                    pc: u64,
                    stats: &mut InterpreterStats| {
            // The program reads the function's `SharedFunctionInfo` field (0 when it cannot).
            let aux = Heap::at(function, process.heap.layout.function_shared)
                .and_then(|at| process.heap.memory.u64(at))
                .unwrap_or(0);
            let f = PyFrameSample {
                code: function,
                fingerprint: 0,
                index: 0,
                marker: 0,
                aux,
            };
            process.frames_of(frames, &f, Process::shared_of(&f), pc, true, stats)
        };
        let named = name(&mut process, &mut frames, function, 0x1000, &mut stats).unwrap();
        assert_eq!(named.len(), 1);
        let frame = frames.get(frame_id(named[0]).unwrap()).unwrap();
        assert_eq!(frame.function, "forged_function");
        assert_eq!(frame.file.as_deref(), Some("/srv/forged.js"));
        assert_eq!(process.line(script, 8), 2);
        // A pointer to nothing, and an untagged one: no function, the native frame stays.
        assert!(name(&mut process, &mut frames, 0x11, 0, &mut stats).is_none());
        assert!(name(&mut process, &mut frames, 0, 0, &mut stats).is_none());
        // A cons string whose parts are itself: bounded.
        let cons_map = forge.map(l.cons | l.one_byte);
        let cons = forge.object(vec![cons_map, 1 << 40, 0, 0]);
        let cons_words = forge.0.last_mut().unwrap();
        cons_words[2] = cons;
        cons_words[3] = cons;
        assert_eq!(process.heap.string(cons, MAX_NAME_CHARS).unwrap().len(), 0);
        // A string whose characters lie past the end of mapped memory: unreadable.
        let long_map = forge.map(l.one_byte);
        let long = forge.at_the_end_of_memory([long_map, 1000 << 32]);
        assert!(process.heap.string(long, MAX_NAME_CHARS).is_none());
        // The function named by it: unreadable, counted.
        let shared_long = forge.object(vec![shared_map, 0, long, 0, 0, 0, 0, 0]);
        let function_long = forge.object(vec![function_map, 0, 0, shared_long, 0, 0, 0, 0]);
        let before = stats.unreadable_frames;
        let named = name(&mut process, &mut frames, function_long, 0, &mut stats).unwrap();
        assert_eq!(
            frames.get(frame_id(named[0]).unwrap()).unwrap().function,
            UNREADABLE_FUNCTION
        );
        assert_eq!(stats.unreadable_frames, before + 1);
    }

    #[test]
    fn nodes_layout_is_read_from_its_constants() {
        let Some((v8, layout)) = nodes_v8() else {
            return;
        };
        assert_eq!(layout.fp_function, -16);
        let config = bpf_config(&layout, (0x1000, 0x2000), (0, 0)).unwrap();
        assert_eq!(config.window_code, 48);
        assert_eq!(config.window_marker, 56);
        if v8.v8_version.is_some_and(|v| (v.0, v.1) == (11, 3)) {
            assert!(layout.code.is_some(), "{:?}", v8.v8_version);
        }
    }
}
