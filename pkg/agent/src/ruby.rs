//! Ruby frames: for each process running a Ruby whose layout the agent knows (3.1, Debian 12's),
//! the BPF program reads the sampled thread's control frames at sample time: the thread's
//! execution context is `ruby_current_ec`, a thread-local in libruby's static TLS block (found
//! here once per process, [`find_tls_offset`]), and its control frames are an array from the
//! current one to the end of the thread's VM stack, each naming its instruction sequence, the
//! instruction it runs, its environment's flags and its method entry. Here each (iseq, pc)
//! becomes a named frame (the iseq's label qualified by its method's class as Ruby 3.4's
//! backtraces name it: `Worker#inner_hot`, `Worker.build`, `block in Worker#run`, `<main>`; its
//! file; the line of the pc), and the Ruby frames take the place of the native `rb_vm_exec`
//! frames that run them, split where Ruby entered the VM from C again (`VM_FRAME_FLAG_FINISH`).
//! The facts used are in `ebpf/ruby.md`.

use std::path::Path;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::bpf::{INSTR_IN_BODY, PY_NO_CFRAME, PY_WINDOW_BYTES, PyConfig, PyFrameSample, VM_RUBY};
use crate::interp::{
    FrameTable, InterpreterStats, Memory, Runtime, Stacks, frame_address, locate_state,
};
use crate::process::ProcessInfo;

mod layout;
mod methods;

use layout::{IMEMO_ISEQ, Layout, METHOD_TYPE_CFUNC, T_IMEMO, T_MASK, read_path, read_string};
use methods::{ClassIvars, MethodEntry, SymbolNames};

/// The name of a frame whose instruction sequence could not be read.
const UNREADABLE_ISEQ: &str = "[ruby: unreadable iseq]";
/// Instruction sequences remembered per process, (iseq, pc, method entry) lines, and methods'
/// classes.
const MAX_ISEQS_PER_PROCESS: usize = 16_384;
const MAX_LINES_PER_PROCESS: usize = 65_536;
const MAX_METHODS_PER_PROCESS: usize = 16_384;
/// Bytes below the main thread's thread pointer searched for its execution context (libruby's
/// static TLS block lies there, among the other initially loaded objects' blocks).
const TLS_SEARCH_BYTES: u64 = 64 * 1024;

/// `VM_FRAME_FLAG_FINISH`: the frame was entered by a new native call of the VM.
const FRAME_FINISH: u32 = 0x0020;
/// `VM_FRAME_FLAG_CFRAME`: a C method's frame (no instruction sequence).
const FRAME_CFRAME: u32 = 0x0080;
/// `VM_FRAME_MAGIC_MASK` and `VM_FRAME_MAGIC_DUMMY`: the VM's own placeholder frames.
const FRAME_MAGIC_MASK: u32 = 0x7fff_0001;
const FRAME_MAGIC_DUMMY: u32 = 0x7999_0001;

/// What tells one instruction sequence from another that later took its address: its body
/// pointer and its flags, combined as the BPF program does (`py_fingerprint`).
fn fingerprint(body: u64, flags: u64) -> u64 {
    body ^ flags.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// `IMMEDIATE_TABLE_SIZE` of iseq.c's succinct index table, and the bytes of its
/// `succ_dict_block` (rank, small block ranks, 512 bits).
const IMMEDIATE_TABLE_SIZE: u64 = 54;
const SUCC_BLOCK_BYTES: u64 = 80;

/// An instruction sequence (a method, block, class body or file) as read from the process.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Iseq {
    /// Its label, as Ruby's backtraces name it.
    label: String,
    /// Its file.
    path: String,
    first_line: u32,
    fingerprint: u64,
    /// The iseq of the method (or top level, class body) it is in: its own address, unless a
    /// block.
    local_iseq: u64,
    iseq_size: u32,
    insns_info: u64,
    insns_info_size: u32,
    succ_index_table: u64,
}

impl Iseq {
    /// Reads the instruction sequence at `addr`; `None` when it cannot be read.
    fn read(memory: &Memory, layout: &Layout, addr: u64) -> Option<Iseq> {
        let flags = memory.u64(addr)?;
        // An iseq is an imemo (T_IMEMO), of type imemo_iseq (bits 12 to 15).
        if flags & T_MASK != T_IMEMO || (flags >> 12) & 0xf != IMEMO_ISEQ {
            return None;
        }
        let body = memory.u64(addr + u64::from(layout.iseq_body))?;
        let len = layout.body_succ_index_table.max(layout.body_local_iseq) + 8;
        let bytes = memory.bytes(body, len as usize)?;
        let at = |off: u64| -> Option<u64> {
            Some(u64::from_ne_bytes(
                bytes.get(off as usize..off as usize + 8)?.try_into().ok()?,
            ))
        };
        let label = read_string(memory, layout, at(layout.body_label)?)?;
        let path = read_path(memory, layout, at(layout.body_pathobj)?)?;
        // A Fixnum: the value shifted left by one, tagged with 1.
        let first_line = (at(layout.body_first_lineno)? >> 1) as u32;
        Some(Iseq {
            label,
            path,
            first_line,
            fingerprint: fingerprint(body, flags),
            local_iseq: at(layout.body_local_iseq)?,
            iseq_size: at(layout.body_iseq_size)? as u32,
            insns_info: at(layout.body_insns_info)?,
            insns_info_size: at(layout.body_insns_info_size)? as u32,
            succ_index_table: at(layout.body_succ_index_table)?,
        })
    }

    /// The line of the instruction before `index` (a pc points past the instruction it runs,
    /// as Ruby's `calc_lineno` reads it); the first line when it cannot be read.
    fn line(&self, memory: &Memory, layout: &Layout, index: i32) -> u32 {
        let Ok(n) = u32::try_from(index) else {
            return self.first_line;
        };
        if n > self.iseq_size {
            return self.first_line;
        }
        let pos = u64::from(n.saturating_sub(1));
        let entry = match self.insns_info_size {
            0 => None,
            1 => Some(0),
            size => succ_index_lookup(memory, self.succ_index_table, pos)
                .and_then(|i| i.checked_sub(1))
                .filter(|&i| i < u64::from(size)),
        };
        entry
            .and_then(|i| memory.u32(self.insns_info + i * layout.insn_info_size))
            .filter(|&line| line > 0)
            .unwrap_or(self.first_line)
    }
}

/// iseq.c's `succ_index_lookup`: how many positions of the table are at most `x`.
fn succ_index_lookup(memory: &Memory, table: u64, x: u64) -> Option<u64> {
    if x < IMMEDIATE_TABLE_SIZE {
        let word = memory.u64(table + (x / 9) * 8)?;
        return Some((word >> ((x % 9) * 7)) & 0x7f);
    }
    let x = x - IMMEDIATE_TABLE_SIZE;
    let block = table + (IMMEDIATE_TABLE_SIZE / 9) * 8 + (x / 512) * SUCC_BLOCK_BYTES;
    let bytes = memory.bytes(block, SUCC_BLOCK_BYTES as usize)?;
    let u64_at = |off: usize| u64::from_ne_bytes(bytes[off..off + 8].try_into().expect("8 bytes"));
    let rank = u64::from(u32::from_ne_bytes(bytes[0..4].try_into().ok()?));
    let bit = x % 512;
    let small = bit / 64;
    let small_rank = if small == 0 {
        0
    } else {
        (u64_at(8) >> ((small - 1) * 9)) & 0x1ff
    };
    let bits = u64_at(16 + small as usize * 8) << (63 - bit % 64);
    Some(rank + small_rank + u64::from(bits.count_ones()))
}

/// A sampled frame, named: its frame id, or `None` for a frame of no Ruby code (a C method's,
/// the VM's placeholders), and whether it began a native call of the VM.
type Named = (Option<u32>, bool);

/// A Ruby process whose frames are read.
#[derive(Debug)]
pub(crate) struct Process {
    layout: &'static Layout,
    memory: Memory,
    /// How its classes keep their names; `None` when that could not be learnt (frames are then
    /// named by their labels alone).
    class_ivars: Option<ClassIvars>,
    /// Its table of symbol names; `None` when not found (C methods' frames are then left out).
    symbol_names: Option<SymbolNames>,
    iseqs: FxHashMap<u64, Option<Arc<Iseq>>>,
    /// Frame ids by (iseq, fingerprint, instruction, method entry).
    lines: FxHashMap<(u64, u64, i32, u64), u32>,
    /// Qualifiers (`Worker#`) by (method entry, the method's iseq).
    methods: FxHashMap<(u64, u64), Option<Arc<str>>>,
    /// C methods' frame ids by method entry.
    c_methods: FxHashMap<u64, Option<u32>>,
}

impl Process {
    /// The instruction sequence of a sampled frame of Ruby code, read (or remembered) when its
    /// fingerprint matches; `None` for a frame of no Ruby code or an unreadable one.
    fn iseq(&mut self, f: &PyFrameSample) -> Option<Arc<Iseq>> {
        if !runs_ruby_code(f) {
            return None;
        }
        let fresh = |iseq: &Option<Arc<Iseq>>| {
            iseq.as_ref()
                .is_some_and(|i| i.fingerprint == f.fingerprint)
        };
        if !self.iseqs.get(&f.code).is_some_and(fresh) {
            if self.iseqs.len() >= MAX_ISEQS_PER_PROCESS {
                self.iseqs.clear();
            }
            let iseq = Iseq::read(&self.memory, self.layout, f.code).map(Arc::new);
            self.iseqs.insert(f.code, iseq);
        }
        self.iseqs[&f.code]
            .clone()
            .filter(|iseq| iseq.fingerprint == f.fingerprint)
    }

    /// The qualifier of the method whose entry is `me` and whose iseq is `method_iseq`: `None`
    /// unless the entry is that method's (not a cref, nor an entry freed and reused).
    fn qualifier(&mut self, me: u64, method_iseq: u64) -> Option<Arc<str>> {
        let ids = self.class_ivars?;
        if me == 0 {
            return None;
        }
        if let Some(q) = self.methods.get(&(me, method_iseq)) {
            return q.clone();
        }
        if self.methods.len() >= MAX_METHODS_PER_PROCESS {
            self.methods.clear();
        }
        let q = MethodEntry::read(&self.memory, self.layout, me)
            .filter(|e| e.defines(method_iseq))
            .and_then(|e| ids.qualifier(&self.memory, self.layout, e.owner))
            .map(Arc::from);
        self.methods.insert((me, method_iseq), q.clone());
        q
    }

    /// The frame id of a C method's frame (`Array#each`, `Integer#times`) from its method
    /// entry `me`; `None` when the entry or its name cannot be read. An entry is remembered
    /// by its address: a C method's lives as long as the method.
    fn c_method(&mut self, frames: &mut FrameTable, me: u64) -> Option<u32> {
        let (ids, names) = (self.class_ivars?, self.symbol_names?);
        if let Some(&id) = self.c_methods.get(&me) {
            return id;
        }
        if self.c_methods.len() >= MAX_METHODS_PER_PROCESS {
            self.c_methods.clear();
        }
        let (memory, layout) = (&self.memory, self.layout);
        let id = MethodEntry::read(memory, layout, me)
            .filter(|e| e.kind == METHOD_TYPE_CFUNC)
            .and_then(|e| {
                let name = names.name(memory, layout, e.original_id)?;
                let q = ids.qualifier(memory, layout, e.owner).unwrap_or_default();
                Some(frames.intern(&format!("{q}{name}"), "", 0))
            });
        self.c_methods.insert(me, id);
        id
    }

    /// Names the sampled Ruby frames, innermost first. A method's frame carries its own method
    /// entry; a block's is that of the frame further out running the method the block is in.
    fn name_all(
        &mut self,
        frames: &mut FrameTable,
        sampled: &[PyFrameSample],
        stats: &mut InterpreterStats,
    ) -> Vec<Named> {
        let iseqs: Vec<Option<Arc<Iseq>>> = sampled.iter().map(|f| self.iseq(f)).collect();
        let mut named = Vec::with_capacity(sampled.len());
        for (i, f) in sampled.iter().enumerate() {
            let finish = f.marker & FRAME_FINISH != 0;
            if f.marker & FRAME_CFRAME != 0 {
                named.push((self.c_method(frames, f.aux), finish));
                continue;
            }
            if !runs_ruby_code(f) {
                named.push((None, finish));
                continue;
            }
            stats.frames += 1;
            let Some(iseq) = &iseqs[i] else {
                stats.unreadable_frames += 1;
                named.push((Some(frames.intern(UNREADABLE_ISEQ, "", 0)), finish));
                continue;
            };
            // The frame running the method this frame's code is in: itself, or for a block
            // the nearest caller running the block's method.
            let home = if iseq.local_iseq == f.code {
                Some(i)
            } else {
                (i + 1..sampled.len()).find(|&j| sampled[j].code == iseq.local_iseq)
            };
            let me = home.map_or(0, |h| sampled[h].aux);
            let key = (f.code, f.fingerprint, f.index, me);
            if let Some(&id) = self.lines.get(&key) {
                named.push((Some(id), finish));
                continue;
            }
            let method = home.and_then(|h| Some((sampled[h].code, iseqs[h].as_ref()?)));
            let label = match method {
                Some((method_iseq, method)) => match self.qualifier(me, method_iseq) {
                    Some(q) => qualified_label(&iseq.label, &method.label, &q),
                    None => iseq.label.clone(),
                },
                None => iseq.label.clone(),
            };
            let line = iseq.line(&self.memory, self.layout, f.index);
            let id = frames.intern(&label, &iseq.path, line);
            if self.lines.len() >= MAX_LINES_PER_PROCESS {
                self.lines.clear();
            }
            self.lines.insert(key, id);
            named.push((Some(id), finish));
        }
        named
    }
}

/// Whether a sampled frame runs Ruby code: it has an iseq, and is neither a C method's frame
/// nor one of the VM's placeholders.
fn runs_ruby_code(f: &PyFrameSample) -> bool {
    f.code != 0 && f.marker & FRAME_CFRAME == 0 && f.marker & FRAME_MAGIC_MASK != FRAME_MAGIC_DUMMY
}

/// `label` (a method's, or a block's in it: `block in run`, `block (2 levels) in run`) with
/// the method's name `method` qualified by its class (`qualifier`: `Worker#`), as Ruby 3.4
/// labels them: `Worker#run`, `block in Worker#run`. A label of another form is kept.
fn qualified_label(label: &str, method: &str, qualifier: &str) -> String {
    if label == method {
        return format!("{qualifier}{method}");
    }
    match label.strip_suffix(method) {
        Some(head) if head.ends_with(" in ") => format!("{head}{qualifier}{method}"),
        _ => label.to_owned(),
    }
}

/// Ruby's way of reading its processes' frames, for [`Stacks`].
#[derive(Debug)]
pub(crate) struct Ruby;

/// The Ruby side of the sampling thread.
pub(crate) type RubyStacks = Stacks<Ruby>;

impl Runtime for Ruby {
    type Process = Process;

    fn prepare(proc_root: &Path, info: &ProcessInfo) -> Option<(Process, PyConfig)> {
        let (mapping, ruby) = info.ruby()?;
        let Some(layout) = Layout::of(ruby.major_minor) else {
            tracing::debug!(
                pid = info.pid,
                version = %ruby.version,
                "no Ruby frames: this Ruby version's layout is not known (3.1 is)"
            );
            return None;
        };
        let (vm_ptr, memory) = locate_state(
            proc_root,
            info,
            mapping.start,
            ruby.vaddr_of_file_offset(mapping.offset),
            ruby.state,
            "ruby",
        )?;
        let Some(tls_offset) = find_tls_offset(&memory, layout, vm_ptr) else {
            tracing::debug!(
                pid = info.pid,
                version = %ruby.version,
                "no Ruby frames: the main thread's execution context was not found below its \
                 thread pointer (the VM not started yet, or another C library)"
            );
            return None;
        };
        // Where the object's addresses are in the process.
        let bias = vm_ptr.wrapping_sub(ruby.state);
        let class_ivars = ruby
            .root_class
            .and_then(|root| ClassIvars::learn(&memory, layout, root.wrapping_add(bias)));
        let symbol_names = class_ivars
            .zip(ruby.data_section.clone())
            .and_then(|(ids, data)| {
                let data = data.start.wrapping_add(bias)..data.end.wrapping_add(bias);
                SymbolNames::find(&memory, layout, data, ids)
            });
        if symbol_names.is_none() {
            tracing::debug!(
                pid = info.pid,
                version = %ruby.version,
                classes = class_ivars.is_some(),
                "Ruby frames without C methods (or classes): class Object's name or the table \
                 of symbol names was not found"
            );
        }
        let process = Process {
            layout,
            memory,
            class_ivars,
            symbol_names,
            iseqs: FxHashMap::default(),
            lines: FxHashMap::default(),
            methods: FxHashMap::default(),
            c_methods: FxHashMap::default(),
        };
        Some((process, bpf_config(layout, tls_offset)))
    }

    fn calls(
        process: &mut Process,
        frames: &mut FrameTable,
        sampled: &[PyFrameSample],
        stats: &mut InterpreterStats,
    ) -> Vec<Vec<u64>> {
        split_into_calls(&process.name_all(frames, sampled, stats))
    }
}

/// Where a thread's `ruby_current_ec` is, as bytes below its thread pointer: found by looking
/// below the main thread's thread pointer (its `pthread_t`) for the main thread's execution
/// context, whose address the VM also keeps (`ruby_current_vm_ptr` → main thread → `ec`). The
/// offset is the same for every thread (static TLS). `None` when the VM has no main thread yet
/// or the context is not there.
fn find_tls_offset(memory: &Memory, layout: &Layout, vm_ptr: u64) -> Option<u32> {
    let vm = memory.u64(vm_ptr).filter(|&v| v != 0)?;
    let main_thread = memory.u64(vm + layout.vm_main_thread).filter(|&t| t != 0)?;
    let ec = memory
        .u64(main_thread + layout.thread_ec)
        .filter(|&e| e != 0)?;
    let tp = memory
        .u64(main_thread + layout.thread_id)
        .filter(|&t| t != 0)?;
    // A page at a time, downwards: the first word that holds `ec` is the nearest block's.
    let page = 4096u64;
    let mut end = tp;
    while tp - end < TLS_SEARCH_BYTES {
        let start = (end - 1) & !(page - 1);
        let bytes = memory.bytes(start, (end - start) as usize)?;
        if let Some(i) = bytes
            .chunks_exact(8)
            .rposition(|w| u64::from_ne_bytes(w.try_into().expect("8 bytes")) == ec)
        {
            return u32::try_from(tp - (start + i as u64 * 8)).ok();
        }
        end = start;
    }
    None
}

/// The sampled Ruby frames (innermost first: frame id or none, whether it began a native call
/// of the VM) as the frames of each native `rb_vm_exec` call, innermost call first.
fn split_into_calls(frames: &[Named]) -> Vec<Vec<u64>> {
    let mut calls: Vec<Vec<u64>> = Vec::new();
    let mut call: Vec<u64> = Vec::new();
    for &(id, finish) in frames {
        if let Some(id) = id {
            call.push(frame_address(id));
        }
        if finish && !call.is_empty() {
            calls.push(std::mem::take(&mut call));
        }
    }
    if !call.is_empty() {
        calls.push(call);
    }
    calls
}

/// What the BPF program needs to read frames of `layout`'s version, each thread's execution
/// context `tls_offset` bytes below its thread pointer.
fn bpf_config(layout: &Layout, tls_offset: u32) -> PyConfig {
    let window = layout.cfp_pc.min(layout.cfp_iseq).min(layout.cfp_ep);
    let end = layout.cfp_pc.max(layout.cfp_iseq).max(layout.cfp_ep) + 8;
    PyConfig {
        tss: 0,
        tsd_offset: tls_offset,
        tstate_frame: layout.ec_cfp,
        cframe_frame: PY_NO_CFRAME,
        frame_window: window,
        window_len: (end - window).next_multiple_of(8),
        window_code: layout.cfp_iseq - window,
        window_previous: PY_WINDOW_BYTES,
        window_instr: layout.cfp_pc - window,
        window_marker: layout.cfp_ep - window,
        instr_mode: INSTR_IN_BODY,
        // VALUE-sized instructions.
        instr_shift: 3,
        code_bytecode: layout.body_iseq_encoded,
        // The fingerprint: the body pointer, and the 8 bytes of flags ending at 8.
        code_argcount: layout.iseq_body,
        code_firstlineno: 4,
        kind: VM_RUBY,
        frame_stride: layout.cfp_size,
        code_body: layout.iseq_body,
        ec_stack: layout.ec_stack,
        ec_stack_size: layout.ec_stack_size,
        marker_indirect: 1,
        ..PyConfig::default()
    }
}

#[cfg(test)]
mod tests {
    use super::layout::{MAX_STRING_BYTES, RUBY_3_1, T_ARRAY, T_STRING};
    use super::*;

    #[test]
    fn calls_end_where_ruby_entered_the_vm_from_c() {
        // A block called back from C (`each`) ← the C method ← its caller ← <main>.
        let frames = [
            (Some(1), true),
            (None, false),
            (Some(2), false),
            (Some(3), true),
            (None, true),
        ];
        assert_eq!(
            split_into_calls(&frames),
            [
                vec![frame_address(1)],
                vec![frame_address(2), frame_address(3)]
            ]
        );
    }

    #[test]
    fn the_config_reads_control_frames_as_an_array() {
        let c = bpf_config(&RUBY_3_1, 0x48);
        assert_eq!((c.frame_window, c.window_len), (0, 40));
        assert_eq!(
            (c.window_code, c.window_instr, c.window_marker),
            (16, 0, 32)
        );
        assert_eq!((c.frame_stride, c.kind, c.tsd_offset), (64, VM_RUBY, 0x48));
        assert!(c.window_len <= PY_WINDOW_BYTES);
    }

    #[test]
    fn labels_are_qualified_as_ruby_3_4_names_them() {
        assert_eq!(qualified_label("run", "run", "Worker#"), "Worker#run");
        assert_eq!(
            qualified_label("block in run", "run", "Worker#"),
            "block in Worker#run"
        );
        assert_eq!(
            qualified_label("block (2 levels) in build", "build", "Jobs::Hot."),
            "block (2 levels) in Jobs::Hot.build"
        );
        // Not a label of the method's: kept.
        assert_eq!(qualified_label("<main>", "run", "Worker#"), "<main>");
        assert_eq!(
            qualified_label("block in rerun", "run", "W#"),
            "block in rerun"
        );
    }

    /// A string, an array and a succinct index table forged in this process's own memory,
    /// read through `/proc/self/mem` as a Ruby process's are.
    #[test]
    fn strings_paths_and_line_tables_read_as_ruby_lays_them_out() {
        let memory = Memory::open(Path::new("/proc"), std::process::id()).unwrap();
        let layout = &RUBY_3_1;
        // An embedded string of 5 bytes.
        let mut embedded = [0u64; 4];
        embedded[0] = T_STRING | (5 << layout.string_embed_len_shift);
        let text = b"hello\0\0\0";
        embedded[2] = u64::from_ne_bytes(*text);
        let addr = embedded.as_ptr() as u64;
        assert_eq!(read_string(&memory, layout, addr).as_deref(), Some("hello"));
        // A heap string claiming 2^40 bytes: cut.
        let long = vec![b'x'; 2048];
        let heap = [
            T_STRING | layout.string_noembed,
            0,
            1 << 40,
            long.as_ptr() as u64,
        ];
        let read = read_string(&memory, layout, heap.as_ptr() as u64).unwrap();
        assert_eq!(read.len(), MAX_STRING_BYTES as usize);
        // An array [path, realpath], embedded.
        let array = [
            T_ARRAY | layout.array_embed | (2 << layout.array_embed_len_shift),
            0,
            addr,
            addr,
        ];
        assert_eq!(
            read_path(&memory, layout, array.as_ptr() as u64).as_deref(),
            Some("hello")
        );
        // Not a string: refused.
        let other = [0x1au64, 0, 0, 0];
        assert_eq!(read_string(&memory, layout, other.as_ptr() as u64), None);
        // The succinct table of positions {0, 3, 60}: ranks in the immediate part, and a
        // bit in the first block past it.
        let mut table = vec![0u64; 6 + 10];
        let imm = |x: u64, rank: u64, table: &mut Vec<u64>| {
            table[(x / 9) as usize] |= rank << ((x % 9) * 7);
        };
        for x in 0..54u64 {
            imm(x, 1 + u64::from(x >= 3), &mut table);
        }
        // Block 0: rank 2 before it, bit 6 (60 − 54) set.
        table[6] = 2;
        table[8] = 1 << 6;
        let t = table.as_ptr() as u64;
        assert_eq!(succ_index_lookup(&memory, t, 0), Some(1));
        assert_eq!(succ_index_lookup(&memory, t, 2), Some(1));
        assert_eq!(succ_index_lookup(&memory, t, 3), Some(2));
        assert_eq!(succ_index_lookup(&memory, t, 59), Some(2));
        assert_eq!(succ_index_lookup(&memory, t, 60), Some(3));
        assert_eq!(succ_index_lookup(&memory, t, 100), Some(3));
    }
}
