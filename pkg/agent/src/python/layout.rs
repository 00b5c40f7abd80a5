//! Where CPython keeps what the agent reads, per minor version: x86_64, the default (GIL)
//! build, release or debug (`python3.11d`). The offsets come from each version's own headers
//! and were verified at run time on Debian's 3.11.2 and on 3.10.13, 3.11.7, 3.12.1 and 3.13.0
//! (`ebpf/python.md` §1.3, where each number's source is given).

/// How the frames that one native `_PyEval_EvalFrameDefault` call runs are told apart from the
/// next call's (ebpf/python.md §1.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EntryRule {
    /// 3.10: every Python frame has its own native evaluation frame.
    EveryFrame,
    /// 3.11: the outermost frame of a call has `is_entry == 1`.
    IsEntry,
    /// 3.12+: a call begins with a shim frame (`owner == FRAME_OWNED_BY_CSTACK`, 3), which is
    /// no Python code.
    Shim,
}

/// The marker value of an entry frame (3.11) and of a shim frame (3.12+).
pub(crate) const IS_ENTRY: u32 = 1;
pub(crate) const OWNED_BY_CSTACK: u32 = 3;

/// Offsets (bytes) of the fields read, in one CPython minor version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layout {
    pub minor: u8,
    /// `_PyRuntimeState.interpreters.head`.
    pub runtime_interpreters_head: u64,
    /// `_PyRuntimeState.(gilstate.)autoTSSkey`: the `Py_tss_t` whose pthread key holds each
    /// thread's `PyThreadState`.
    pub runtime_tss: u64,
    /// `PyInterpreterState.threads.head` (`tstate_head` in 3.10).
    pub interp_threads_head: u64,
    /// `PyThreadState.next`.
    pub tstate_next: u64,
    /// `PyThreadState.thread_id`: `pthread_self()`, which is the thread pointer on glibc.
    pub tstate_thread_id: u64,
    /// `PyThreadState.frame` (3.10), `.cframe` (3.11, 3.12) or `.current_frame` (3.13).
    pub tstate_frame: u32,
    /// `_PyCFrame.current_frame`, where there is a `_PyCFrame`.
    pub cframe_frame: Option<u32>,
    /// In a frame (`PyFrameObject` in 3.10, `_PyInterpreterFrame` after): its code object,
    pub frame_code: u32,
    /// its caller,
    pub frame_previous: u32,
    /// its instruction (3.10: the int `f_lasti`, in code units; after: a pointer into the
    /// code object's bytecode),
    pub frame_instr: u32,
    /// and its entry marker byte (`is_entry`, `owner`), where there is one.
    pub frame_marker: Option<u32>,
    pub entry_rule: EntryRule,
    /// In a code object: `co_argcount`, `co_firstlineno`, `co_filename`, the name shown
    /// (`co_qualname`, `co_name` in 3.10), `co_linetable`, and the bytecode
    /// (`co_code_adaptive`; 3.10's bytecode is a separate object, and its frames hold an
    /// index, not a pointer).
    pub code_argcount: u32,
    pub code_firstlineno: u32,
    pub code_filename: u64,
    pub code_name: u64,
    pub code_linetable: u64,
    pub code_bytecode: u32,
    /// Where a compact ASCII string's characters start (`sizeof(PyASCIIObject)`), and a
    /// compact non-ASCII one's (`sizeof(PyCompactUnicodeObject)`).
    pub ascii_data: u64,
    pub compact_data: u64,
}

const V3_10: Layout = Layout {
    minor: 10,
    runtime_interpreters_head: 32,
    runtime_tss: 584,
    interp_threads_head: 8,
    tstate_next: 8,
    tstate_thread_id: 176,
    tstate_frame: 24,
    cframe_frame: None,
    frame_code: 32,
    frame_previous: 24,
    frame_instr: 96,
    frame_marker: None,
    entry_rule: EntryRule::EveryFrame,
    code_argcount: 16,
    code_firstlineno: 40,
    code_filename: 104,
    code_name: 112,
    code_linetable: 120,
    code_bytecode: 0,
    ascii_data: 48,
    compact_data: 72,
};

const V3_11: Layout = Layout {
    minor: 11,
    runtime_interpreters_head: 40,
    runtime_tss: 592,
    interp_threads_head: 16,
    tstate_next: 8,
    tstate_thread_id: 152,
    tstate_frame: 56,
    cframe_frame: Some(8),
    frame_code: 32,
    frame_previous: 48,
    frame_instr: 56,
    frame_marker: Some(68),
    entry_rule: EntryRule::IsEntry,
    code_argcount: 56,
    code_firstlineno: 72,
    code_filename: 112,
    code_name: 128,
    code_linetable: 136,
    code_bytecode: 184,
    ascii_data: 48,
    compact_data: 72,
};

const V3_12: Layout = Layout {
    minor: 12,
    runtime_interpreters_head: 40,
    runtime_tss: 1544,
    interp_threads_head: 72,
    tstate_next: 8,
    tstate_thread_id: 136,
    tstate_frame: 56,
    cframe_frame: Some(0),
    frame_code: 0,
    frame_previous: 8,
    frame_instr: 56,
    frame_marker: Some(70),
    entry_rule: EntryRule::Shim,
    code_argcount: 52,
    code_firstlineno: 68,
    code_filename: 112,
    code_name: 128,
    code_linetable: 136,
    code_bytecode: 192,
    ascii_data: 40,
    compact_data: 56,
};

const V3_13: Layout = Layout {
    minor: 13,
    runtime_interpreters_head: 632,
    runtime_tss: 2160,
    interp_threads_head: 7344,
    tstate_next: 8,
    tstate_thread_id: 152,
    tstate_frame: 72,
    cframe_frame: None,
    frame_code: 0,
    frame_previous: 8,
    frame_instr: 56,
    frame_marker: Some(70),
    entry_rule: EntryRule::Shim,
    code_argcount: 52,
    code_firstlineno: 68,
    code_filename: 112,
    code_name: 128,
    code_linetable: 136,
    code_bytecode: 200,
    ascii_data: 40,
    compact_data: 56,
};

impl Layout {
    /// The layout of CPython `major.minor`, when the agent knows it (3.10 to 3.13).
    pub fn of(major: u8, minor: u8) -> Option<&'static Layout> {
        match (major, minor) {
            (3, 10) => Some(&V3_10),
            (3, 11) => Some(&V3_11),
            (3, 12) => Some(&V3_12),
            (3, 13) => Some(&V3_13),
            _ => None,
        }
    }

    /// Whether the line table is 3.10's (`co_linetable` of byte-offset pairs) rather than the
    /// location table of 3.11+.
    pub fn pairs_line_table(&self) -> bool {
        self.minor <= 10
    }

    /// Bytes of a code object read to name it: up to its last field read.
    pub fn code_header_len(&self) -> usize {
        (self.code_linetable as usize + 8).max(self.code_firstlineno as usize + 4)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_outside_3_10_to_3_13_have_no_layout() {
        assert!(Layout::of(3, 9).is_none());
        assert!(Layout::of(3, 14).is_none());
        assert!(Layout::of(2, 7).is_none());
        for minor in 10..=13 {
            let layout = Layout::of(3, minor).unwrap();
            assert_eq!(layout.minor, minor);
        }
    }
}
