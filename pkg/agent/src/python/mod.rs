//! Python frames: for each process running a CPython the agent knows (3.10 to 3.13), the BPF
//! program reads the sampled thread's Python frame chain at sample time (where to look is this
//! module's [`PyConfig`] for it); here each (code object, instruction) becomes a named frame
//! (function, file, line) read from the process's memory, and the Python frames take the
//! place of the native `_PyEval_EvalFrameDefault` frames that run them, so that a C
//! extension's native frames sit under the Python function that called it (as py-spy and the
//! OpenTelemetry profiler show them). The facts used are in `ebpf/python.md`.
//!
//! What the runtimes share (the frame table, the process's memory, the placing of frames
//! among native ones) is in [`crate::interp`].

mod code;
mod layout;

use std::path::Path;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::bpf::{
    INSTR_IN_CODE, INSTR_INDEX, PY_NO_CFRAME, PY_WINDOW_BYTES, PyConfig, PyFrameSample, VM_CPYTHON,
};
use crate::interp::{
    FrameTable, InterpreterStats, Memory, Runtime, Stacks, frame_address, locate_state,
};
use crate::process::ProcessInfo;
use code::Code;
use layout::{EntryRule, IS_ENTRY, Layout, OWNED_BY_CSTACK};

/// Where glibc (x86_64, 2.26 and later) keeps the value of pthread key 0 from the thread
/// pointer: `struct pthread.specific_1stblock[0].data`; key K is 16 × K further. Used until a
/// process's own threads confirm or correct it (see [`find_tsd_offset`]).
const GLIBC_TSD_OFFSET: u32 = 0x318;

/// Bytes of a thread descriptor searched for a thread's own `PyThreadState`: glibc's inline
/// thread-specific slots end before 0x600 (0x318 + 32 × 16), and a thread's descriptor sits
/// near the end of its stack's mapping (0x1000 would read past it).
const THREAD_DESCRIPTOR_BYTES: usize = 0x600;

/// Threads of an interpreter looked at to find where their thread states are kept.
const MAX_THREADS_CHECKED: usize = 64;

/// The name of a frame whose code object could not be read (the process exited, or the
/// memory was not a code object).
const UNREADABLE_CODE: &str = "[python: unreadable code object]";

/// Code objects remembered per process, and (code, instruction) lines; past either, the
/// process's memo starts over.
const MAX_CODES_PER_PROCESS: usize = 16_384;
const MAX_LINES_PER_PROCESS: usize = 65_536;

/// A CPython process whose frames are read.
#[derive(Debug)]
pub(crate) struct Process {
    layout: &'static Layout,
    memory: Memory,
    /// Code objects by address (checked against the sample's fingerprint: addresses are
    /// reused once a code object is freed); `None` when unreadable.
    codes: FxHashMap<u64, Option<Arc<Code>>>,
    /// (code, fingerprint, instruction) → frame id.
    lines: FxHashMap<(u64, u64, i32), u32>,
}

/// CPython's way of reading its processes' frames, for [`Stacks`].
#[derive(Debug)]
pub(crate) struct CPython;

/// The CPython side of the sampling thread.
pub(crate) type PythonStacks = Stacks<CPython>;

impl Runtime for CPython {
    type Process = Process;

    fn prepare(proc_root: &Path, info: &ProcessInfo) -> Option<(Process, PyConfig)> {
        let (mapping, python) = info.python()?;
        let Some(layout) = python
            .major_minor
            .and_then(|(major, minor)| Layout::of(major, minor))
        else {
            tracing::debug!(
                pid = info.pid,
                version = %python.version,
                "no Python frames: this CPython version's layout is not known (3.10 to 3.13 are)"
            );
            return None;
        };
        let (runtime, memory) = locate_state(
            proc_root,
            info,
            mapping.start,
            python.vaddr_of_file_offset(mapping.offset),
            python.runtime,
            "python",
        )?;
        let tsd_offset = match find_tsd_offset(&memory, layout, runtime) {
            Ok(offset) => offset.unwrap_or(GLIBC_TSD_OFFSET),
            Err(()) => {
                tracing::warn!(
                    pid = info.pid,
                    version = %python.version,
                    "no Python frames: none of the interpreter's threads keeps its thread \
                     state where glibc keeps thread-specific data (another C library?)"
                );
                return None;
            }
        };
        let config = bpf_config(layout, runtime + layout.runtime_tss, tsd_offset);
        let process = Process {
            layout,
            memory,
            codes: FxHashMap::default(),
            lines: FxHashMap::default(),
        };
        Some((process, config))
    }

    fn calls(
        process: &mut Process,
        frames: &mut FrameTable,
        sampled: &[PyFrameSample],
        stats: &mut InterpreterStats,
    ) -> Vec<Vec<u64>> {
        split_into_calls(process.layout.entry_rule, sampled, |f| {
            frame_address(process.name(frames, f, stats))
        })
    }
}

impl Process {
    /// The frame id of a sampled Python frame: its code object's name and file, and the line
    /// of its instruction.
    fn name(
        &mut self,
        frames: &mut FrameTable,
        f: &PyFrameSample,
        stats: &mut InterpreterStats,
    ) -> u32 {
        stats.frames += 1;
        let key = (f.code, f.fingerprint, f.index);
        if let Some(&id) = self.lines.get(&key) {
            return id;
        }
        let fresh = |code: &Option<Arc<Code>>| {
            code.as_ref()
                .is_some_and(|c| c.fingerprint == f.fingerprint)
        };
        if !self.codes.get(&f.code).is_some_and(fresh) {
            if self.codes.len() >= MAX_CODES_PER_PROCESS {
                self.codes.clear();
            }
            let code = Code::read(&self.memory, self.layout, f.code).map(Arc::new);
            self.codes.insert(f.code, code);
        }
        let id = match &self.codes[&f.code] {
            // A code object read after it was freed and its address reused says so by its
            // fingerprint: its name would be another function's.
            Some(code) if code.fingerprint == f.fingerprint => {
                frames.intern(&code.name, &code.file, code.line(f.index))
            }
            _ => {
                stats.unreadable_frames += 1;
                return frames.intern(UNREADABLE_CODE, "", 0);
            }
        };
        if self.lines.len() >= MAX_LINES_PER_PROCESS {
            self.lines.clear();
        }
        self.lines.insert(key, id);
        id
    }
}

/// The sampled Python frames (innermost first) as the frames of each native evaluation call,
/// innermost call first, by the version's `rule`; shim frames are left out. `address` names a
/// frame.
fn split_into_calls(
    rule: EntryRule,
    python: &[PyFrameSample],
    mut address: impl FnMut(&PyFrameSample) -> u64,
) -> Vec<Vec<u64>> {
    let mut calls: Vec<Vec<u64>> = Vec::new();
    let mut call: Vec<u64> = Vec::new();
    for f in python {
        if rule == EntryRule::Shim && f.marker == OWNED_BY_CSTACK {
            if !call.is_empty() {
                calls.push(std::mem::take(&mut call));
            }
            continue;
        }
        call.push(address(f));
        let ends_call = match rule {
            EntryRule::EveryFrame => true,
            EntryRule::IsEntry => f.marker == IS_ENTRY,
            EntryRule::Shim => false,
        };
        if ends_call {
            calls.push(std::mem::take(&mut call));
        }
    }
    if !call.is_empty() {
        calls.push(call);
    }
    calls
}

/// What the BPF program needs to read frames of `layout`'s version: its `Py_tss_t` at `tss`,
/// and glibc's thread-specific data at `tsd_offset` from the thread pointer.
fn bpf_config(layout: &Layout, tss: u64, tsd_offset: u32) -> PyConfig {
    let instr_len = if layout.code_bytecode == 0 { 4 } else { 8 };
    let marker = layout.frame_marker;
    let window = [
        Some(layout.frame_code),
        Some(layout.frame_previous),
        Some(layout.frame_instr),
        marker,
    ]
    .into_iter()
    .flatten()
    .min()
    .unwrap_or(0);
    let end = [
        layout.frame_code + 8,
        layout.frame_previous + 8,
        layout.frame_instr + instr_len,
        marker.map_or(0, |m| m + 1),
    ]
    .into_iter()
    .max()
    .unwrap_or(0);
    PyConfig {
        tss,
        tsd_offset,
        tstate_frame: layout.tstate_frame,
        cframe_frame: layout.cframe_frame.unwrap_or(PY_NO_CFRAME),
        frame_window: window,
        // Whole u64s: the program reads the instruction as one.
        window_len: (end - window).next_multiple_of(8),
        window_code: layout.frame_code - window,
        window_previous: layout.frame_previous - window,
        window_instr: layout.frame_instr - window,
        window_marker: marker.map_or(PY_WINDOW_BYTES, |m| m - window),
        instr_mode: if layout.code_bytecode == 0 {
            INSTR_INDEX
        } else {
            INSTR_IN_CODE
        },
        // Code units of 2 bytes.
        instr_shift: 1,
        code_bytecode: layout.code_bytecode,
        code_argcount: layout.code_argcount,
        code_firstlineno: layout.code_firstlineno,
        kind: VM_CPYTHON,
        ..PyConfig::default()
    }
}

/// Where this process's threads keep their `PyThreadState` in their thread-specific data,
/// from the thread pointer: found by looking, in the thread descriptor of each thread the
/// interpreter lists (`thread_id` is `pthread_self()`, the thread pointer on glibc), for the
/// thread's own state at CPython's key's slot. `Ok(None)` when the interpreter has no
/// thread yet, or none whose descriptor could be read (the default then holds until the
/// process is read again); `Err` when none of those read has its state where glibc keeps it.
fn find_tsd_offset(memory: &Memory, layout: &Layout, runtime: u64) -> Result<Option<u32>, ()> {
    let tss = runtime + layout.runtime_tss;
    let (Some(initialized), Some(key)) = (memory.u32(tss), memory.u32(tss + 4)) else {
        return Ok(None);
    };
    let interp = memory
        .u64(runtime + layout.runtime_interpreters_head)
        .unwrap_or(0);
    if initialized != 1 || interp == 0 {
        return Ok(None);
    }
    let mut tstate = memory.u64(interp + layout.interp_threads_head).unwrap_or(0);
    let (mut seen, mut checked) = (0, 0);
    while tstate != 0 && seen < MAX_THREADS_CHECKED {
        seen += 1;
        if let Some(descriptor) = memory
            .u64(tstate + layout.tstate_thread_id)
            .and_then(|thread| memory.bytes(thread, THREAD_DESCRIPTOR_BYTES))
        {
            checked += 1;
            let slot = descriptor
                .chunks_exact(8)
                .position(|word| u64::from_ne_bytes(word.try_into().expect("8 bytes")) == tstate);
            if let Some(offset) = slot
                .map(|i| i as u64 * 8)
                .and_then(|at| at.checked_sub(16 * u64::from(key)))
            {
                return Ok(Some(offset as u32));
            }
        }
        tstate = memory.u64(tstate + layout.tstate_next).unwrap_or(0);
    }
    if checked == 0 { Ok(None) } else { Err(()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampled(code: u64, marker: u32) -> PyFrameSample {
        PyFrameSample {
            code,
            fingerprint: 0,
            index: 0,
            marker,
            aux: 0,
        }
    }

    #[test]
    fn frames_split_into_calls_by_each_versions_rule() {
        let code = |f: &PyFrameSample| f.code;
        // 3.10: a call per frame.
        let frames = [sampled(1, 0), sampled(2, 0)];
        assert_eq!(
            split_into_calls(EntryRule::EveryFrame, &frames, code),
            [vec![1], vec![2]]
        );
        // 3.11: a call ends with its entry frame.
        let frames = [
            sampled(1, 0),
            sampled(2, IS_ENTRY),
            sampled(3, 0),
            sampled(4, IS_ENTRY),
        ];
        assert_eq!(
            split_into_calls(EntryRule::IsEntry, &frames, code),
            [vec![1, 2], vec![3, 4]]
        );
        // 3.12+: a shim frame begins each call and is no Python code.
        let frames = [
            sampled(1, 0),
            sampled(2, 0),
            sampled(9, OWNED_BY_CSTACK),
            sampled(3, 0),
            sampled(9, OWNED_BY_CSTACK),
        ];
        assert_eq!(
            split_into_calls(EntryRule::Shim, &frames, code),
            [vec![1, 2], vec![3]]
        );
    }

    #[test]
    fn configs_read_the_fields_of_each_version() {
        for minor in 10..=13 {
            let layout = Layout::of(3, minor).unwrap();
            let c = bpf_config(layout, 0x1000, GLIBC_TSD_OFFSET);
            assert!(c.window_len <= PY_WINDOW_BYTES && c.window_len.is_multiple_of(8));
            assert_eq!(c.frame_window + c.window_code, layout.frame_code);
            assert_eq!(c.frame_window + c.window_previous, layout.frame_previous);
            assert_eq!(c.frame_window + c.window_instr, layout.frame_instr);
            assert!(c.window_code + 8 <= c.window_len);
            assert!(c.window_previous + 8 <= c.window_len);
        }
        let v310 = bpf_config(Layout::of(3, 10).unwrap(), 0, 0);
        assert_eq!((v310.frame_window, v310.window_len), (24, 80));
        assert_eq!(v310.window_marker, PY_WINDOW_BYTES);
        assert_eq!(v310.cframe_frame, PY_NO_CFRAME);
        let v311 = bpf_config(Layout::of(3, 11).unwrap(), 0, 0);
        assert_eq!((v311.frame_window, v311.window_len), (32, 40));
        assert_eq!(v311.window_marker, 36);
    }
}
