//! PHP frames: for each process running a PHP interpreter built without thread safety (the
//! CLI, php-fpm's workers, Apache's prefork `mod_php`) of a version whose layout the agent knows
//! (8.0 to 8.4; 8.2 tested), the BPF program reads the main thread's frame chain at sample time, from
//! `executor_globals.current_execute_data`: each `zend_execute_data` names its function, the
//! opline it runs and its caller. Here each (function, opline) becomes a named frame
//! (`Class::method`, file, line) read from the process's memory, and the PHP frames take the
//! place of the native `execute_ex` frames that run them, as [`crate::python`] does for CPython.
//! The facts used are in `ebpf/php.md`.

use std::path::Path;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::bpf::{INSTR_IN_ARRAY, PY_NO_CFRAME, PyConfig, PyFrameSample, VM_PHP};
use crate::interp::{
    FrameTable, InterpreterStats, Memory, Runtime, Stacks, frame_address, locate_state,
};
use crate::process::ProcessInfo;

/// The name of a frame whose function could not be read (the process exited, or the memory
/// was not a function).
const UNREADABLE_FUNCTION: &str = "[php: unreadable function]";
/// The name of a script's top-level code (a file run or included), as PHP's own stack traces
/// and Xdebug name it.
const MAIN: &str = "{main}";

/// Functions remembered per process, and (function, opline) lines; past either, the process's
/// memo starts over.
const MAX_FUNCTIONS_PER_PROCESS: usize = 16_384;
const MAX_LINES_PER_PROCESS: usize = 65_536;
/// Longest name or file name read, in bytes; a longer one is cut.
const MAX_STRING_BYTES: u64 = 1024;

/// `zend_function.type` of a built-in (C) function.
const INTERNAL_FUNCTION: u8 = 1;
/// `zend_function.type` of a PHP function or method, and of a file's top-level code.
const USER_FUNCTION: u8 = 2;
/// `zend_function.type` of code run by `eval()`.
const EVAL_CODE: u8 = 4;
/// `ZEND_CALL_TOP` (bit 17 of the call info in `This.u1.type_info`) in the byte the BPF program
/// reads (bits 16 to 23): the frame was entered by a new native `execute_ex` call.
const CALL_TOP: u32 = 1 << 1;

/// Where a PHP version keeps what the agent reads, in bytes from the start of each structure;
/// from the version's headers (`Zend/zend_globals.h`, `zend_compile.h`, `zend_types.h`), as
/// `ebpf/php.md` shows.
#[derive(Debug, PartialEq, Eq)]
struct Layout {
    /// `zend_executor_globals.current_execute_data`: the innermost frame.
    globals_current_frame: u32,
    /// `zend_execute_data.opline`, `.func`, `.prev_execute_data`.
    frame_opline: u32,
    frame_function: u32,
    frame_previous: u32,
    /// The byte of `zend_execute_data.This.u1.type_info` holding call-info bits 16 to 23.
    frame_call_info: u32,
    /// `zend_function.type`, `.common.function_name`, `.common.scope`, `.common.num_args`.
    function_type: u64,
    function_name: u64,
    function_scope: u64,
    function_num_args: u32,
    /// `zend_op_array.last`, `.opcodes`, `.filename`, `.line_start`, `.line_end`.
    op_array_last: u64,
    op_array_opcodes: u32,
    op_array_filename: u64,
    op_array_line_start: u64,
    op_array_line_end: u32,
    /// `sizeof(zend_op)` as a power of two, and `zend_op.lineno`.
    op_shift: u32,
    op_lineno: u64,
    /// `zend_class_entry.name`.
    class_name: u64,
    /// `zend_string.len` and `.val`.
    string_len: u64,
    string_val: u64,
}

/// PHP 8.2 on x86_64 (Debian 12's `php8.2`): `offsetof` against its headers
/// (`ebpf/php-probe/`), run in CI.
const PHP_8_2: Layout = Layout {
    globals_current_frame: 488,
    frame_opline: 0,
    frame_function: 24,
    frame_previous: 48,
    frame_call_info: 42,
    function_type: 0,
    function_name: 8,
    function_scope: 16,
    function_num_args: 32,
    op_array_last: 80,
    op_array_opcodes: 88,
    op_array_filename: 152,
    op_array_line_start: 160,
    op_array_line_end: 164,
    op_shift: 5,
    op_lineno: 24,
    class_name: 8,
    string_len: 16,
    string_val: 24,
};

/// PHP 8.0 and 8.1: as 8.2 but for the op array, whose common part lacks `T` and
/// `run_time_cache` (moved into it in 8.2). From those versions' headers (`ebpf/php.md`); not
/// run here (Debian 12 ships 8.2 only).
const PHP_8_0: Layout = Layout {
    op_array_last: 68,
    op_array_opcodes: 72,
    op_array_filename: 144,
    op_array_line_start: 152,
    op_array_line_end: 156,
    ..PHP_8_2
};

/// PHP 8.3: 8.2's common part without its padding. From its headers; not run here.
const PHP_8_3: Layout = Layout {
    op_array_last: 76,
    op_array_opcodes: 80,
    op_array_filename: 144,
    op_array_line_start: 152,
    op_array_line_end: 156,
    ..PHP_8_2
};

/// PHP 8.4: `doc_comment` and `prop_info` joined the common part. From its headers; not run
/// here.
const PHP_8_4: Layout = Layout {
    op_array_last: 96,
    op_array_opcodes: 104,
    op_array_filename: 168,
    op_array_line_start: 176,
    op_array_line_end: 180,
    ..PHP_8_2
};

impl Layout {
    /// The layout of PHP `major.minor`, when known.
    fn of((major, minor): (u8, u8)) -> Option<&'static Layout> {
        match (major, minor) {
            (8, 0 | 1) => Some(&PHP_8_0),
            (8, 2) => Some(&PHP_8_2),
            (8, 3) => Some(&PHP_8_3),
            (8, 4) => Some(&PHP_8_4),
            _ => None,
        }
    }

    /// Bytes of a user function read: up to its `line_end`.
    fn op_array_len(&self) -> usize {
        self.op_array_line_end as usize + 4
    }
}

/// What tells one function from another that later took its address: 8 bytes from
/// `num_args` and the 8 ending with `line_end` (`line_start`, `line_end`), combined as the BPF
/// program does (`py_fingerprint` in `ebpf/profiler.bpf.c`).
fn fingerprint(args: u64, lines: u64) -> u64 {
    args ^ lines.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// A PHP function as read from the process.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Function {
    /// `Class::method`, `function`, `{closure}`, or [`MAIN`] for top-level code.
    name: String,
    /// The script's path; empty for a built-in function.
    file: String,
    /// PHP code (its frames end a native call when entered by one); `false`: a built-in.
    user: bool,
    fingerprint: u64,
    opcodes: u64,
    last: u32,
    first_line: u32,
}

impl Function {
    /// Reads the function at `addr`; `None` when it cannot be read or is no function.
    fn read(memory: &Memory, layout: &Layout, addr: u64) -> Option<Function> {
        let common = memory.bytes(addr, layout.function_num_args as usize + 8)?;
        let u64_in = |bytes: &[u8], at: u64| -> Option<u64> {
            Some(u64::from_ne_bytes(
                bytes.get(at as usize..at as usize + 8)?.try_into().ok()?,
            ))
        };
        let kind = *common.get(layout.function_type as usize)?;
        let user = match kind {
            USER_FUNCTION | EVAL_CODE => true,
            INTERNAL_FUNCTION => false,
            _ => return None,
        };
        let name = match u64_in(&common, layout.function_name)? {
            0 if user => MAIN.to_owned(),
            0 => return None,
            at => read_string(memory, layout, at)?,
        };
        let name = match u64_in(&common, layout.function_scope)? {
            0 => name,
            class => format!(
                "{}::{name}",
                read_string(memory, layout, class_name(memory, layout, class)?)?
            ),
        };
        let args = u64_in(&common, u64::from(layout.function_num_args))?;
        if !user {
            return Some(Function {
                name,
                file: String::new(),
                user,
                fingerprint: 0,
                opcodes: 0,
                last: 0,
                first_line: 0,
            });
        }
        let op_array = memory.bytes(addr, layout.op_array_len())?;
        let lines = u64_in(&op_array, layout.op_array_line_start)?;
        let file = read_string(memory, layout, u64_in(&op_array, layout.op_array_filename)?)?;
        Some(Function {
            name,
            file,
            user,
            fingerprint: fingerprint(args, lines),
            opcodes: u64_in(&op_array, u64::from(layout.op_array_opcodes))?,
            last: u64_in(&op_array, layout.op_array_last)? as u32,
            first_line: lines as u32,
        })
    }

    /// The line of opline `index`; the first line when it cannot be read (a frame just
    /// entered, an opline out of the function).
    fn line(&self, memory: &Memory, layout: &Layout, index: i32) -> u32 {
        u32::try_from(index)
            .ok()
            .filter(|&i| i < self.last)
            .and_then(|i| {
                memory.u32(self.opcodes + (u64::from(i) << layout.op_shift) + layout.op_lineno)
            })
            .filter(|&line| line > 0)
            .unwrap_or(self.first_line)
    }
}

/// The address of the name of the class at `class`.
fn class_name(memory: &Memory, layout: &Layout, class: u64) -> Option<u64> {
    memory.u64(class + layout.class_name)
}

/// A `zend_string`'s text, cut at [`MAX_STRING_BYTES`].
fn read_string(memory: &Memory, layout: &Layout, addr: u64) -> Option<String> {
    let len = memory.u64(addr + layout.string_len)?.min(MAX_STRING_BYTES);
    let bytes = memory.bytes(addr + layout.string_val, len as usize)?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// A PHP process whose frames are read.
#[derive(Debug)]
pub(crate) struct Process {
    layout: &'static Layout,
    memory: Memory,
    /// Functions by address (a user function checked against the sample's fingerprint:
    /// addresses are reused once a request's functions are freed); `None` when unreadable.
    functions: FxHashMap<u64, Option<Arc<Function>>>,
    /// (function, fingerprint, opline) → (frame id, whether it is PHP code).
    lines: FxHashMap<(u64, u64, i32), (u32, bool)>,
}

impl Process {
    /// The frame id of a sampled PHP frame, and whether it runs PHP code (not a built-in).
    fn name(
        &mut self,
        frames: &mut FrameTable,
        f: &PyFrameSample,
        stats: &mut InterpreterStats,
    ) -> (u32, bool) {
        stats.frames += 1;
        let key = (f.code, f.fingerprint, f.index);
        if let Some(&named) = self.lines.get(&key) {
            return named;
        }
        // Built-in functions live as long as the process: their fingerprint is no field of
        // theirs and is not checked.
        let fresh = |function: &Option<Arc<Function>>| {
            function
                .as_ref()
                .is_some_and(|g| !g.user || g.fingerprint == f.fingerprint)
        };
        if !self.functions.get(&f.code).is_some_and(fresh) {
            if self.functions.len() >= MAX_FUNCTIONS_PER_PROCESS {
                self.functions.clear();
            }
            let function = Function::read(&self.memory, self.layout, f.code).map(Arc::new);
            self.functions.insert(f.code, function);
        }
        let named = match &self.functions[&f.code] {
            Some(function) if fresh(&Some(function.clone())) => {
                let line = if function.user {
                    function.line(&self.memory, self.layout, f.index)
                } else {
                    0
                };
                (
                    frames.intern(&function.name, &function.file, line),
                    function.user,
                )
            }
            _ => {
                stats.unreadable_frames += 1;
                return (frames.intern(UNREADABLE_FUNCTION, "", 0), false);
            }
        };
        if self.lines.len() >= MAX_LINES_PER_PROCESS {
            self.lines.clear();
        }
        self.lines.insert(key, named);
        named
    }
}

/// PHP's way of reading its processes' frames, for [`Stacks`].
#[derive(Debug)]
pub(crate) struct Php;

/// The PHP side of the sampling thread.
pub(crate) type PhpStacks = Stacks<Php>;

impl Runtime for Php {
    type Process = Process;

    fn prepare(proc_root: &Path, info: &ProcessInfo) -> Option<(Process, PyConfig)> {
        let (mapping, php) = info.php()?;
        let Some(layout) = Layout::of(php.major_minor) else {
            tracing::debug!(
                pid = info.pid,
                version = %php.version,
                "no PHP frames: this PHP version's layout is not known (8.0 to 8.4 are)"
            );
            return None;
        };
        let (globals, memory) = locate_state(
            proc_root,
            info,
            mapping.start,
            php.vaddr_of_file_offset(mapping.offset),
            php.state,
            "php",
        )?;
        if !layout_fits(&memory, layout, globals) {
            tracing::warn!(
                pid = info.pid,
                version = %php.version,
                "no PHP frames: the running frame is not where this version keeps it \
                 (a build with other structures?)"
            );
            return None;
        }
        let process = Process {
            layout,
            memory,
            functions: FxHashMap::default(),
            lines: FxHashMap::default(),
        };
        Some((process, bpf_config(layout, globals)))
    }

    fn calls(
        process: &mut Process,
        frames: &mut FrameTable,
        sampled: &[PyFrameSample],
        stats: &mut InterpreterStats,
    ) -> Vec<Vec<u64>> {
        let named: Vec<(u64, bool, u32)> = sampled
            .iter()
            .map(|f| {
                let (id, user) = process.name(frames, f, stats);
                (frame_address(id), user, f.marker)
            })
            .collect();
        split_into_calls(&named)
    }
}

/// Whether the process's executor state reads as `layout` says: no frame running, or one
/// whose function has a known type.
fn layout_fits(memory: &Memory, layout: &Layout, globals: u64) -> bool {
    let Some(frame) = memory.u64(globals + u64::from(layout.globals_current_frame)) else {
        return false;
    };
    if frame == 0 {
        return true;
    }
    memory
        .u64(frame + u64::from(layout.frame_function))
        .and_then(|function| memory.bytes(function + layout.function_type, 1))
        .is_some_and(|kind| matches!(kind[0], INTERNAL_FUNCTION | USER_FUNCTION | EVAL_CODE))
}

/// The sampled PHP frames (innermost first: address, whether PHP code, call-info byte) as the
/// frames of each native `execute_ex` call, innermost call first: a call ends with a PHP
/// function entered from native code (`ZEND_CALL_TOP`). A built-in function runs in its
/// caller's `execute_ex`, even when native code called it.
fn split_into_calls(frames: &[(u64, bool, u32)]) -> Vec<Vec<u64>> {
    let mut calls: Vec<Vec<u64>> = Vec::new();
    let mut call: Vec<u64> = Vec::new();
    for &(address, user, marker) in frames {
        call.push(address);
        if user && marker & CALL_TOP != 0 {
            calls.push(std::mem::take(&mut call));
        }
    }
    if !call.is_empty() {
        calls.push(call);
    }
    calls
}

/// What the BPF program needs to read frames of `layout`'s version, its executor's globals at
/// `globals`.
fn bpf_config(layout: &Layout, globals: u64) -> PyConfig {
    let window = layout
        .frame_opline
        .min(layout.frame_function)
        .min(layout.frame_previous);
    let end = (layout
        .frame_opline
        .max(layout.frame_function)
        .max(layout.frame_previous)
        + 8)
    .max(layout.frame_call_info + 1);
    PyConfig {
        tss: globals,
        tsd_offset: 0,
        tstate_frame: layout.globals_current_frame,
        cframe_frame: PY_NO_CFRAME,
        frame_window: window,
        window_len: (end - window).next_multiple_of(8),
        window_code: layout.frame_function - window,
        window_previous: layout.frame_previous - window,
        window_instr: layout.frame_opline - window,
        window_marker: layout.frame_call_info - window,
        instr_mode: INSTR_IN_ARRAY,
        instr_shift: layout.op_shift,
        code_bytecode: layout.op_array_opcodes,
        code_argcount: layout.function_num_args,
        code_firstlineno: layout.op_array_line_end,
        kind: VM_PHP,
        ..PyConfig::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bpf::PY_WINDOW_BYTES;

    #[test]
    fn calls_end_with_php_code_entered_from_native_code() {
        // bar (entered by a native call) ← call_user_func (built-in) ← foo ← {main} (top).
        let frames = [
            (1, true, CALL_TOP),
            (2, false, 0),
            (3, true, 0),
            (4, true, CALL_TOP | 1),
        ];
        assert_eq!(split_into_calls(&frames), [vec![1], vec![2, 3, 4]]);
        // A built-in called from native code runs in no `execute_ex` of its own.
        let frames = [(5, false, CALL_TOP), (6, true, CALL_TOP)];
        assert_eq!(split_into_calls(&frames), [vec![5, 6]]);
        // A chain cut before its top: the rest is one call.
        assert_eq!(split_into_calls(&[(7, true, 0)]), [vec![7]]);
    }

    #[test]
    fn each_versions_op_array_fields_are_in_order_and_its_frames_fit_the_window() {
        for minor in 0..=4 {
            let layout = Layout::of((8, minor)).unwrap();
            assert!(
                layout.op_array_last < u64::from(layout.op_array_opcodes),
                "8.{minor}"
            );
            assert!(
                layout.op_array_opcodes < layout.op_array_filename as u32,
                "8.{minor}"
            );
            assert_eq!(
                layout.op_array_line_start + 4,
                u64::from(layout.op_array_line_end)
            );
            assert!(bpf_config(layout, 0).window_len <= PY_WINDOW_BYTES);
        }
        assert_eq!(Layout::of((8, 5)), None);
        assert_eq!(Layout::of((7, 4)), None);
    }

    #[test]
    fn the_config_reads_the_fields_of_8_2() {
        let c = bpf_config(&PHP_8_2, 0x1000);
        assert_eq!((c.frame_window, c.window_len), (0, 56));
        assert!(c.window_len <= PY_WINDOW_BYTES);
        assert_eq!(
            (
                c.window_code,
                c.window_previous,
                c.window_instr,
                c.window_marker
            ),
            (24, 48, 0, 42)
        );
        assert_eq!((c.tss, c.tstate_frame, c.kind), (0x1000, 488, VM_PHP));
        assert_eq!((c.code_bytecode, c.instr_shift), (88, 5));
    }

    /// Structures forged in this process's own memory, read through `/proc/self/mem` as a PHP
    /// process's are: names cut at their bound, bad types and pointers refused.
    #[test]
    fn forged_functions_are_read_within_bounds_or_refused() {
        let memory = Memory::open(std::path::Path::new("/proc"), std::process::id()).unwrap();
        let layout = &PHP_8_2;
        // A zend_string claiming 2^40 bytes, with 2 KiB of text behind it.
        let mut huge = vec![0u8; 24 + 2048];
        huge[16..24].copy_from_slice(&(1u64 << 40).to_ne_bytes());
        huge[24..].fill(b'a');
        let mut class = [0u8; 16];
        let mut file = [0u8; 24 + 8];
        file[16..24].copy_from_slice(&8u64.to_ne_bytes());
        file[24..].copy_from_slice(b"/x/a.php");
        class[8..16].copy_from_slice(&(file.as_ptr() as u64).to_ne_bytes());
        // Opcodes: line 42 at opline 1.
        let mut opcodes = [0u8; 64];
        opcodes[32 + 24..32 + 28].copy_from_slice(&42u32.to_ne_bytes());
        let mut function = vec![0u8; layout.op_array_len()];
        let put = |f: &mut Vec<u8>, at: u64, v: u64| {
            f[at as usize..at as usize + 8].copy_from_slice(&v.to_ne_bytes())
        };
        function[0] = USER_FUNCTION;
        put(&mut function, layout.function_name, huge.as_ptr() as u64);
        put(&mut function, layout.function_scope, class.as_ptr() as u64);
        put(&mut function, layout.op_array_last, 2);
        put(
            &mut function,
            u64::from(layout.op_array_opcodes),
            opcodes.as_ptr() as u64,
        );
        put(
            &mut function,
            layout.op_array_filename,
            file.as_ptr() as u64,
        );
        put(&mut function, layout.op_array_line_start, 40 | (50 << 32));
        let read = Function::read(&memory, layout, function.as_ptr() as u64).unwrap();
        assert_eq!(
            read.name.len(),
            "/x/a.php::".len() + MAX_STRING_BYTES as usize
        );
        assert!(read.name.starts_with("/x/a.php::aaa"));
        assert_eq!(read.file, "/x/a.php");
        assert_eq!(read.first_line, 40);
        assert_eq!(read.line(&memory, layout, 1), 42);
        // Out of the function, or before its first opline: its first line.
        assert_eq!(read.line(&memory, layout, 2), 40);
        assert_eq!(read.line(&memory, layout, -1), 40);
        // A forged opcodes pointer: the first line, not a crash.
        let mut forged = read.clone();
        forged.opcodes = 8;
        assert_eq!(forged.line(&memory, layout, 1), 40);
        // No function type: refused.
        function[0] = 9;
        assert_eq!(
            Function::read(&memory, layout, function.as_ptr() as u64),
            None
        );
        // A name pointing nowhere: refused.
        function[0] = USER_FUNCTION;
        put(&mut function, layout.function_name, 16);
        assert_eq!(
            Function::read(&memory, layout, function.as_ptr() as u64),
            None
        );
        // Unmapped function: refused.
        assert_eq!(Function::read(&memory, layout, 24), None);
    }
}
