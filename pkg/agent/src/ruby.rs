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

/// The name of a frame whose instruction sequence could not be read.
const UNREADABLE_ISEQ: &str = "[ruby: unreadable iseq]";
/// Instruction sequences remembered per process, (iseq, pc, method entry) lines, and methods'
/// classes.
const MAX_ISEQS_PER_PROCESS: usize = 16_384;
const MAX_LINES_PER_PROCESS: usize = 65_536;
const MAX_METHODS_PER_PROCESS: usize = 16_384;
/// Most instance variables of a class looked through for its name.
const MAX_CLASS_IVARS: u64 = 256;
/// Longest label or path read, in bytes; a longer one is cut.
const MAX_STRING_BYTES: u64 = 1024;
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

/// `RUBY_T_MASK`, `T_STRING`, `T_ARRAY`.
const T_MASK: u64 = 0x1f;
const T_STRING: u64 = 0x05;
const T_ARRAY: u64 = 0x07;
/// `T_IMEMO`, and `imemo_ment` and `imemo_iseq` of `enum imemo_type`.
const T_IMEMO: u64 = 0x1a;
const IMEMO_MENT: u64 = 6;
const IMEMO_ISEQ: u64 = 7;
/// `T_CLASS`, `T_MODULE`, and `FL_SINGLETON` (`FL_USER0`): a class's flags.
const T_CLASS: u64 = 0x02;
const T_MODULE: u64 = 0x03;
const FL_SINGLETON: u64 = 0x1000;
/// A method definition's type (its first 4 bits) and `VM_METHOD_TYPE_ISEQ`: defined in Ruby.
const METHOD_TYPE_MASK: u32 = 0xf;
const METHOD_TYPE_ISEQ: u32 = 0;
/// An `st_table` entry (hash, key, record), and the hash of a deleted one.
const ST_ENTRY_BYTES: u64 = 24;
const ST_DELETED_HASH: u64 = u64::MAX;

/// Where a Ruby version keeps what the agent reads, in bytes from the start of each structure;
/// from the version's headers (`vm_core.h`, `iseq.h`, `include/ruby/internal/core/*.h`), as
/// `ebpf/ruby.md` shows.
#[derive(Debug, PartialEq, Eq)]
struct Layout {
    /// `rb_vm_t.ractor.main_thread`; `rb_thread_t.ec` and `.thread_id` (its pthread_t: the
    /// thread pointer).
    vm_main_thread: u64,
    thread_ec: u64,
    thread_id: u64,
    /// `rb_execution_context_t.vm_stack`, `.vm_stack_size` (words), `.cfp`.
    ec_stack: u32,
    ec_stack_size: u32,
    ec_cfp: u32,
    /// `sizeof(rb_control_frame_t)`, and its `pc`, `iseq` and `ep`.
    cfp_size: u32,
    cfp_pc: u32,
    cfp_iseq: u32,
    cfp_ep: u32,
    /// `rb_iseq_t.body`.
    iseq_body: u32,
    /// `rb_iseq_constant_body`: `iseq_size`, `iseq_encoded`, `location.pathobj`,
    /// `location.label`, `location.first_lineno`, `insns_info.body`, `.size`,
    /// `.succ_index_table`.
    body_iseq_size: u64,
    body_iseq_encoded: u32,
    body_pathobj: u64,
    body_label: u64,
    body_first_lineno: u64,
    body_insns_info: u64,
    body_insns_info_size: u64,
    body_succ_index_table: u64,
    /// `rb_iseq_constant_body.local_iseq`: the method (or top level) a block is in.
    body_local_iseq: u64,
    /// `sizeof(struct iseq_insn_info_entry)`, whose `line_no` comes first.
    insn_info_size: u64,
    /// `RBasic.klass`: an object's class (a class's: its singleton class).
    basic_klass: u64,
    /// `rb_method_entry_t.def` and `.owner`; `rb_method_definition_t.body.iseq.iseqptr`.
    me_def: u64,
    me_owner: u64,
    def_iseq: u64,
    /// `RClass.ptr` (its `rb_classext_t`) and `rb_classext_t.iv_tbl` (an `st_table` from ivar id
    /// to value).
    class_ext: u64,
    ext_iv_tbl: u64,
    /// `st_table.entries_start`, `.entries_bound` and `.entries`, three words in a row.
    st_entries_start: u64,
    /// `RString`: the no-embed flag, the embedded length's bits, where embedded text starts,
    /// and a heap string's `len` and `ptr`.
    string_noembed: u64,
    string_embed_len_mask: u64,
    string_embed_len_shift: u32,
    string_embed: u64,
    string_heap_len: u64,
    string_heap_ptr: u64,
    /// `RArray`: the embed flag, the embedded length's bits, where embedded elements start,
    /// and a heap array's `ptr`.
    array_embed: u64,
    array_embed_len_mask: u64,
    array_embed_len_shift: u32,
    array_embedded: u64,
    array_heap_ptr: u64,
}

/// Ruby 3.1 on x86_64 (Debian 12's `libruby-3.1`): `offsetof` against its source built with
/// Debian's `config.h` (`ebpf/ruby-probe/`).
const RUBY_3_1: Layout = Layout {
    vm_main_thread: 40,
    thread_ec: 40,
    thread_id: 80,
    ec_stack: 0,
    ec_stack_size: 8,
    ec_cfp: 16,
    cfp_size: 64,
    cfp_pc: 0,
    cfp_iseq: 16,
    cfp_ep: 32,
    iseq_body: 16,
    body_iseq_size: 4,
    body_iseq_encoded: 8,
    body_pathobj: 64,
    body_label: 80,
    body_first_lineno: 88,
    body_insns_info: 120,
    body_insns_info_size: 136,
    body_succ_index_table: 144,
    body_local_iseq: 176,
    insn_info_size: 12,
    basic_klass: 8,
    me_def: 16,
    me_owner: 32,
    def_iseq: 8,
    class_ext: 24,
    ext_iv_tbl: 8,
    st_entries_start: 32,
    string_noembed: 0x2000,
    string_embed_len_mask: 0x7c000,
    string_embed_len_shift: 14,
    string_embed: 16,
    string_heap_len: 16,
    string_heap_ptr: 24,
    array_embed: 0x2000,
    array_embed_len_mask: 0x18000,
    array_embed_len_shift: 15,
    array_embedded: 16,
    array_heap_ptr: 32,
};

impl Layout {
    /// The layout of Ruby `major.minor`, when known.
    fn of(major_minor: (u8, u8)) -> Option<&'static Layout> {
        match major_minor {
            (3, 1) => Some(&RUBY_3_1),
            _ => None,
        }
    }
}

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

/// A `String`'s text, cut at [`MAX_STRING_BYTES`].
fn read_string(memory: &Memory, layout: &Layout, addr: u64) -> Option<String> {
    let flags = memory.u64(addr)?;
    if flags & T_MASK != T_STRING {
        return None;
    }
    let (ptr, len) = if flags & layout.string_noembed != 0 {
        (
            memory.u64(addr + layout.string_heap_ptr)?,
            memory.u64(addr + layout.string_heap_len)?,
        )
    } else {
        (
            addr + layout.string_embed,
            (flags & layout.string_embed_len_mask) >> layout.string_embed_len_shift,
        )
    };
    let bytes = memory.bytes(ptr, len.min(MAX_STRING_BYTES) as usize)?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// An iseq's path: its `pathobj`, a `String`, or an `Array` `[path, realpath]`.
fn read_path(memory: &Memory, layout: &Layout, addr: u64) -> Option<String> {
    let flags = memory.u64(addr)?;
    if flags & T_MASK != T_ARRAY {
        return read_string(memory, layout, addr);
    }
    let first = if flags & layout.array_embed != 0 {
        if (flags & layout.array_embed_len_mask) >> layout.array_embed_len_shift == 0 {
            return None;
        }
        memory.u64(addr + layout.array_embedded)?
    } else {
        memory.u64(memory.u64(addr + layout.array_heap_ptr)?)?
    };
    read_string(memory, layout, first)
}

/// How this process's classes keep their names: the ids of the `__classpath__` and
/// `__attached__` instance variables. They are dynamic ids (their values differ between builds
/// and with what the VM interned first), learnt from class `Object`, whose name is known, and
/// its singleton class, which is attached to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ClassIvars {
    classpath: u64,
    attached: u64,
}

impl ClassIvars {
    /// Learns the ids from class `Object`, kept at `root_class` (`rb_cObject`); `None` when its
    /// name or singleton class cannot be read.
    fn learn(memory: &Memory, layout: &Layout, root_class: u64) -> Option<ClassIvars> {
        let object = memory.u64(root_class).filter(|&o| o != 0)?;
        let (classpath, _) = class_ivars(memory, layout, object)?
            .into_iter()
            .find(|&(_, value)| read_string(memory, layout, value).as_deref() == Some("Object"))?;
        let singleton = memory.u64(object + layout.basic_klass)?;
        let (attached, _) = class_ivars(memory, layout, singleton)?
            .into_iter()
            .find(|&(_, value)| value == object)?;
        Some(ClassIvars {
            classpath,
            attached,
        })
    }

    /// What a method of method entry `me` is named after, as Ruby 3.4's backtraces qualify it:
    /// `Worker#` for an instance method of `Worker` (or of a module), `Worker.` for a singleton
    /// method of the class. `None` when `me` is not the entry of a method defined in Ruby by
    /// `iseq` (a cref, a freed entry, a forged pointer), or its class has no name (anonymous).
    fn qualifier(self, memory: &Memory, layout: &Layout, me: u64, iseq: u64) -> Option<String> {
        if me == 0 || !me.is_multiple_of(8) {
            return None;
        }
        let flags = memory.u64(me)?;
        if flags & T_MASK != T_IMEMO || (flags >> 12) & 0xf != IMEMO_MENT {
            return None;
        }
        let def = memory.u64(me + layout.me_def)?;
        if memory.u32(def)? & METHOD_TYPE_MASK != METHOD_TYPE_ISEQ
            || memory.u64(def + layout.def_iseq)? != iseq
        {
            return None;
        }
        let owner = memory.u64(me + layout.me_owner)?;
        let owner_flags = memory.u64(owner)?;
        if owner_flags & T_MASK == T_CLASS && owner_flags & FL_SINGLETON != 0 {
            let attached = class_ivar(memory, layout, owner, self.attached)?;
            Some(format!("{}.", self.class_path(memory, layout, attached)?))
        } else {
            Some(format!("{}#", self.class_path(memory, layout, owner)?))
        }
    }

    /// A named class's or module's path (`Worker`, `Jobs::Worker`).
    fn class_path(self, memory: &Memory, layout: &Layout, class: u64) -> Option<String> {
        let flags = memory.u64(class)?;
        if !matches!(flags & T_MASK, T_CLASS | T_MODULE) {
            return None;
        }
        let path = class_ivar(memory, layout, class, self.classpath)?;
        read_string(memory, layout, path)
    }
}

/// A class's instance variables, as (id, value): the live entries of its `iv_tbl`, at most
/// [`MAX_CLASS_IVARS`].
fn class_ivars(memory: &Memory, layout: &Layout, class: u64) -> Option<Vec<(u64, u64)>> {
    let ext = memory.u64(class + layout.class_ext).filter(|&e| e != 0)?;
    let table = memory.u64(ext + layout.ext_iv_tbl).filter(|&t| t != 0)?;
    let header = memory.array::<24>(table + layout.st_entries_start)?;
    let (start, bound, entries) = (word(&header, 0), word(&header, 1), word(&header, 2));
    let n = bound.checked_sub(start)?.min(MAX_CLASS_IVARS);
    let bytes = memory.bytes(
        entries.checked_add(start.checked_mul(ST_ENTRY_BYTES)?)?,
        (n * ST_ENTRY_BYTES) as usize,
    )?;
    Some(
        bytes
            .chunks_exact(ST_ENTRY_BYTES as usize)
            .filter(|e| word(e, 0) != ST_DELETED_HASH)
            .map(|e| (word(e, 1), word(e, 2)))
            .collect(),
    )
}

/// The `i`th word of `bytes`.
fn word(bytes: &[u8], i: usize) -> u64 {
    u64::from_ne_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8 bytes"))
}

/// The value of a class's instance variable `id`.
fn class_ivar(memory: &Memory, layout: &Layout, class: u64, id: u64) -> Option<u64> {
    class_ivars(memory, layout, class)?
        .into_iter()
        .find_map(|(key, value)| (key == id).then_some(value))
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
    iseqs: FxHashMap<u64, Option<Arc<Iseq>>>,
    /// Frame ids by (iseq, fingerprint, instruction, method entry).
    lines: FxHashMap<(u64, u64, i32, u64), u32>,
    /// Qualifiers (`Worker#`) by (method entry, the method's iseq).
    methods: FxHashMap<(u64, u64), Option<Arc<str>>>,
}

impl Process {
    /// The instruction sequence of a sampled frame of Ruby code, read (or remembered) when its
    /// fingerprint matches; `None` for a frame of no Ruby code or an unreadable one.
    fn iseq(&mut self, f: &PyFrameSample) -> Option<Arc<Iseq>> {
        if f.code == 0
            || f.marker & FRAME_CFRAME != 0
            || f.marker & FRAME_MAGIC_MASK == FRAME_MAGIC_DUMMY
        {
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

    /// The qualifier of the method whose entry is `me` and whose iseq is `method_iseq`.
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
        let q = ids
            .qualifier(&self.memory, self.layout, me, method_iseq)
            .map(Arc::from);
        self.methods.insert((me, method_iseq), q.clone());
        q
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
            if f.code == 0
                || f.marker & FRAME_CFRAME != 0
                || f.marker & FRAME_MAGIC_MASK == FRAME_MAGIC_DUMMY
            {
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
        let class_ivars = ruby.root_class.and_then(|root| {
            let root = root.checked_add(vm_ptr.checked_sub(ruby.state)?)?;
            ClassIvars::learn(&memory, layout, root)
        });
        if class_ivars.is_none() {
            tracing::debug!(
                pid = info.pid,
                version = %ruby.version,
                "Ruby frames without their classes: class Object's name was not found"
            );
        }
        let process = Process {
            layout,
            memory,
            class_ivars,
            iseqs: FxHashMap::default(),
            lines: FxHashMap::default(),
            methods: FxHashMap::default(),
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

    /// A Ruby 3.1 `String` of up to 16 bytes, embedded.
    fn forged_string(text: &[u8]) -> Box<[u64; 4]> {
        let layout = &RUBY_3_1;
        let mut s = Box::new([0u64; 4]);
        s[0] = T_STRING | ((text.len() as u64) << layout.string_embed_len_shift);
        let mut bytes = [0u8; 16];
        bytes[..text.len()].copy_from_slice(text);
        s[2] = u64::from_ne_bytes(bytes[..8].try_into().unwrap());
        s[3] = u64::from_ne_bytes(bytes[8..].try_into().unwrap());
        s
    }

    /// A Ruby 3.1 class: RBasic (flags, klass), super, ext → {iv_index_tbl, iv_tbl → an
    /// `st_table` of two entries, the first deleted and the second live}.
    struct ForgedClass {
        object: Box<[u64; 4]>,
        _ext: Box<[u64; 2]>,
        table: Box<[u64; 7]>,
        _entries: Box<[u64; 6]>,
    }

    impl ForgedClass {
        fn addr(&self) -> u64 {
            self.object.as_ptr() as u64
        }
    }

    fn forged_class(flags: u64, ivars: [(u64, u64); 2]) -> ForgedClass {
        let entries = Box::new([
            ST_DELETED_HASH,
            ivars[0].0,
            ivars[0].1,
            1,
            ivars[1].0,
            ivars[1].1,
        ]);
        let table = Box::new([0, 0, 2, 0, 0, 2, entries.as_ptr() as u64]);
        let ext = Box::new([0, table.as_ptr() as u64]);
        let object = Box::new([flags, 0, 0, ext.as_ptr() as u64]);
        ForgedClass {
            object,
            _ext: ext,
            table,
            _entries: entries,
        }
    }

    /// Classes, their ivar tables, a method entry and its definition forged in this process's
    /// own memory as Ruby 3.1 lays them out: the ids are learnt from `Object`, and an entry is
    /// believed only for the iseq its definition names.
    #[test]
    fn methods_are_named_after_their_classes_and_forged_entries_are_not() {
        let memory = Memory::open(Path::new("/proc"), std::process::id()).unwrap();
        let layout = &RUBY_3_1;
        let (classpath, attached) = (3841u64, 3089u64);
        let object_name = forged_string(b"Object");
        let mut object = forged_class(T_CLASS, [(7, 7), (classpath, object_name.as_ptr() as u64)]);
        let object_singleton =
            forged_class(T_CLASS | FL_SINGLETON, [(9, 9), (attached, object.addr())]);
        object.object[1] = object_singleton.addr();
        let root = [object.addr()];
        let ids = ClassIvars::learn(&memory, layout, root.as_ptr() as u64).unwrap();
        assert_eq!(
            ids,
            ClassIvars {
                classpath,
                attached
            }
        );

        let hot_name = forged_string(b"Jobs::Hot");
        // The deleted entry holds the id too, with another value: it is not read.
        let hot = forged_class(
            T_MODULE,
            [
                (classpath, object_name.as_ptr() as u64),
                (classpath, hot_name.as_ptr() as u64),
            ],
        );
        let hot_singleton = forged_class(T_CLASS | FL_SINGLETON, [(1, 1), (attached, hot.addr())]);
        let iseq = 0x1234_5678u64;
        let def = [u64::from(METHOD_TYPE_ISEQ) | (1 << 5), iseq];
        let entry = |owner: &ForgedClass| {
            [
                T_IMEMO | (IMEMO_MENT << 12),
                0,
                def.as_ptr() as u64,
                0,
                owner.addr(),
            ]
        };
        let (on_object, on_hot) = (entry(&object), entry(&hot_singleton));
        let q = |me: &[u64; 5], iseq| ids.qualifier(&memory, layout, me.as_ptr() as u64, iseq);
        assert_eq!(q(&on_object, iseq).as_deref(), Some("Object#"));
        assert_eq!(q(&on_hot, iseq).as_deref(), Some("Jobs::Hot."));
        // An entry of another method (a freed one reused) is not believed.
        assert_eq!(q(&on_object, iseq + 8), None);
        // Nor a cref, a C method's entry, or a pointer to garbage.
        let mut cref = on_object;
        cref[0] = T_IMEMO | (1 << 12);
        assert_eq!(q(&cref, iseq), None);
        let cfunc_def = [1u64, iseq];
        let mut cfunc = on_object;
        cfunc[2] = cfunc_def.as_ptr() as u64;
        assert_eq!(q(&cfunc, iseq), None);
        assert_eq!(ids.qualifier(&memory, layout, 0x10, iseq), None);
        // An iv table whose entries start past the address space: refused, no overflow.
        let mut huge = forged_class(T_CLASS, [(0, 0), (classpath, hot_name.as_ptr() as u64)]);
        (huge.table[4], huge.table[5]) = (1 << 60, (1 << 60) + 2);
        assert_eq!(ids.class_path(&memory, layout, huge.addr()), None);
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
