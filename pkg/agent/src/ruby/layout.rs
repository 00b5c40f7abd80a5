//! Where Ruby keeps what the agent reads (per version: [`Layout`]), and reading its strings and
//! arrays out of a process's memory.

use crate::interp::Memory;

/// Longest label or path read, in bytes; a longer one is cut.
pub(super) const MAX_STRING_BYTES: u64 = 1024;
/// `RUBY_T_MASK`, `T_STRING`, `T_ARRAY`.
pub(super) const T_MASK: u64 = 0x1f;
pub(super) const T_STRING: u64 = 0x05;
pub(super) const T_ARRAY: u64 = 0x07;
/// `T_IMEMO`, and `imemo_ment` and `imemo_iseq` of `enum imemo_type`.
pub(super) const T_IMEMO: u64 = 0x1a;
pub(super) const IMEMO_MENT: u64 = 6;
pub(super) const IMEMO_ISEQ: u64 = 7;
/// `T_CLASS`, `T_MODULE`, and `FL_SINGLETON` (`FL_USER0`): a class's flags.
pub(super) const T_CLASS: u64 = 0x02;
pub(super) const T_MODULE: u64 = 0x03;
pub(super) const FL_SINGLETON: u64 = 0x1000;
/// A method definition's type (its first 4 bits): `VM_METHOD_TYPE_ISEQ` (defined in Ruby),
/// `VM_METHOD_TYPE_CFUNC` (in C).
pub(super) const METHOD_TYPE_MASK: u32 = 0xf;
pub(super) const METHOD_TYPE_ISEQ: u32 = 0;
pub(super) const METHOD_TYPE_CFUNC: u32 = 1;
/// `tLAST_OP_ID`: ids up to it are operators', their own serials; a later id is its serial
/// shifted left by `ID_SCOPE_SHIFT`.
pub(super) const LAST_OP_ID: u64 = 0xa9;
pub(super) const ID_SCOPE_SHIFT: u32 = 4;
/// `ID_ENTRY_UNIT`: symbols per page of the symbol table, each a (string, symbol) pair.
pub(super) const SYMBOLS_PER_PAGE: u64 = 512;
/// An `st_table` entry (hash, key, record), and the hash of a deleted one.
pub(super) const ST_ENTRY_BYTES: u64 = 24;
pub(super) const ST_DELETED_HASH: u64 = u64::MAX;

/// Where a Ruby version keeps what the agent reads, in bytes from the start of each structure;
/// from the version's headers (`vm_core.h`, `iseq.h`, `include/ruby/internal/core/*.h`), as
/// `ebpf/ruby.md` shows.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Layout {
    /// `rb_vm_t.ractor.main_thread`; `rb_thread_t.ec` and `.thread_id` (its pthread_t: the
    /// thread pointer).
    pub(super) vm_main_thread: u64,
    pub(super) thread_ec: u64,
    pub(super) thread_id: u64,
    /// `rb_execution_context_t.vm_stack`, `.vm_stack_size` (words), `.cfp`.
    pub(super) ec_stack: u32,
    pub(super) ec_stack_size: u32,
    pub(super) ec_cfp: u32,
    /// `sizeof(rb_control_frame_t)`, and its `pc`, `iseq` and `ep`.
    pub(super) cfp_size: u32,
    pub(super) cfp_pc: u32,
    pub(super) cfp_iseq: u32,
    pub(super) cfp_ep: u32,
    /// `rb_iseq_t.body`.
    pub(super) iseq_body: u32,
    /// `rb_iseq_constant_body`: `iseq_size`, `iseq_encoded`, `location.pathobj`,
    /// `location.label`, `location.first_lineno`, `insns_info.body`, `.size`,
    /// `.succ_index_table`.
    pub(super) body_iseq_size: u64,
    pub(super) body_iseq_encoded: u32,
    pub(super) body_pathobj: u64,
    pub(super) body_label: u64,
    pub(super) body_first_lineno: u64,
    pub(super) body_insns_info: u64,
    pub(super) body_insns_info_size: u64,
    pub(super) body_succ_index_table: u64,
    /// `rb_iseq_constant_body.local_iseq`: the method (or top level) a block is in.
    pub(super) body_local_iseq: u64,
    /// `sizeof(struct iseq_insn_info_entry)`, whose `line_no` comes first.
    pub(super) insn_info_size: u64,
    /// `RBasic.klass`: an object's class (a class's: its singleton class).
    pub(super) basic_klass: u64,
    /// `rb_method_entry_t.def` and `.owner`; `rb_method_definition_t.body` (for an iseq method
    /// its iseq) and `.original_id` (the name it was defined with).
    pub(super) me_def: u64,
    pub(super) me_owner: u64,
    pub(super) def_body: u64,
    pub(super) def_original_id: u64,
    /// `rb_symbols_t.ids` (of `ruby_global_symbols`): an array of arrays, each holding
    /// [`SYMBOLS_PER_PAGE`] (string, symbol) pairs by serial.
    pub(super) symbols_ids: u64,
    /// `RClass.ptr` (its `rb_classext_t`) and `rb_classext_t.iv_tbl` (an `st_table` from ivar id
    /// to value).
    pub(super) class_ext: u64,
    pub(super) ext_iv_tbl: u64,
    /// `st_table.entries_start`, `.entries_bound` and `.entries`, three words in a row.
    pub(super) st_entries_start: u64,
    /// `RString`: the no-embed flag, the embedded length's bits, where embedded text starts,
    /// and a heap string's `len` and `ptr`.
    pub(super) string_noembed: u64,
    pub(super) string_embed_len_mask: u64,
    pub(super) string_embed_len_shift: u32,
    pub(super) string_embed: u64,
    pub(super) string_heap_len: u64,
    pub(super) string_heap_ptr: u64,
    /// `RArray`: the embed flag, the embedded length's bits, where embedded elements start,
    /// and a heap array's `len` and `ptr`.
    pub(super) array_embed: u64,
    pub(super) array_embed_len_mask: u64,
    pub(super) array_embed_len_shift: u32,
    pub(super) array_embedded: u64,
    pub(super) array_heap_len: u64,
    pub(super) array_heap_ptr: u64,
}

/// Ruby 3.1 on x86_64 (Debian 12's `libruby-3.1`): `offsetof` against its source built with
/// Debian's `config.h` (`ebpf/ruby-probe/build.sh`); the method entry's, class's, `st_table`'s
/// and symbol table's offsets read off a live Debian `ruby3.1` (`ebpf/ruby-probe/classes.rb`).
pub(super) const RUBY_3_1: Layout = Layout {
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
    def_body: 8,
    def_original_id: 32,
    symbols_ids: 16,
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
    array_heap_len: 16,
    array_heap_ptr: 32,
};

impl Layout {
    /// The layout of Ruby `major.minor`, when known.
    pub(super) fn of(major_minor: (u8, u8)) -> Option<&'static Layout> {
        match major_minor {
            (3, 1) => Some(&RUBY_3_1),
            _ => None,
        }
    }
}

/// A `String`'s text, cut at [`MAX_STRING_BYTES`].
pub(super) fn read_string(memory: &Memory, layout: &Layout, addr: u64) -> Option<String> {
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

/// Element `i` of an `Array`; `None` past its end or when `addr` holds no array.
pub(super) fn array_element(memory: &Memory, layout: &Layout, addr: u64, i: u64) -> Option<u64> {
    let flags = memory.u64(addr)?;
    if flags & T_MASK != T_ARRAY {
        return None;
    }
    if flags & layout.array_embed != 0 {
        let len = (flags & layout.array_embed_len_mask) >> layout.array_embed_len_shift;
        (i < len).then_some(())?;
        memory.u64(addr + layout.array_embedded + i * 8)
    } else {
        (i < memory.u64(addr + layout.array_heap_len)?).then_some(())?;
        memory.u64(
            memory
                .u64(addr + layout.array_heap_ptr)?
                .checked_add(i.checked_mul(8)?)?,
        )
    }
}

/// An iseq's path: its `pathobj`, a `String`, or an `Array` `[path, realpath]`.
pub(super) fn read_path(memory: &Memory, layout: &Layout, addr: u64) -> Option<String> {
    let flags = memory.u64(addr)?;
    if flags & T_MASK != T_ARRAY {
        return read_string(memory, layout, addr);
    }
    read_string(memory, layout, array_element(memory, layout, addr, 0)?)
}

/// The `i`th word of `bytes`.
pub(super) fn word(bytes: &[u8], i: usize) -> u64 {
    u64::from_ne_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8 bytes"))
}
