//! The sampling thread's interpreters: each process goes to the runtime that recognizes it
//! (CPython, PHP, Ruby, V8, HotSpot), above the runtimes' modules and what they share (`interp.rs`).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::bpf::{PyConfig, PyFrameSample};
use crate::hotspot::HotSpotStacks;
use crate::interp::{FrameTable, InterpreterStats};
use crate::php::PhpStacks;
use crate::process::ProcessInfo;
use crate::python::PythonStacks;
use crate::ruby::RubyStacks;
use crate::v8::V8Stacks;

/// The counters of each runtime.
#[derive(Debug, Clone, Copy, Default)]
pub struct RuntimeStats {
    /// CPython's.
    pub python: InterpreterStats,
    /// PHP's.
    pub php: InterpreterStats,
    /// Ruby's.
    pub ruby: InterpreterStats,
    /// V8's (Node.js).
    pub v8: InterpreterStats,
    /// HotSpot's (the JVM).
    pub jvm: InterpreterStats,
}

/// The sampling thread's interpreters: per process, the runtime that recognized it.
#[derive(Debug)]
pub(crate) struct Interpreters {
    python: PythonStacks,
    php: PhpStacks,
    ruby: RubyStacks,
    v8: V8Stacks,
    jvm: HotSpotStacks,
}

impl Interpreters {
    /// Reads processes under `proc_root` (normally `/proc`) and names frames into `frames`.
    pub fn new(proc_root: impl Into<PathBuf>, frames: Arc<Mutex<FrameTable>>) -> Interpreters {
        let proc_root = proc_root.into();
        Interpreters {
            python: PythonStacks::new(proc_root.clone(), frames.clone()),
            php: PhpStacks::new(proc_root.clone(), frames.clone()),
            ruby: RubyStacks::new(proc_root.clone(), frames.clone()),
            v8: V8Stacks::new(proc_root.clone(), frames.clone()),
            jvm: HotSpotStacks::new(proc_root, frames),
        }
    }

    /// What the BPF program must be told of `info`'s interpreted frames, when that changed
    /// since it was last told (a new read of the process): `Some(Some(config))` to read them,
    /// `Some(None)` to stop; `None` when nothing changed.
    pub fn config_update(&mut self, info: &ProcessInfo) -> Option<Option<PyConfig>> {
        let updates = [
            self.python.config_update(info),
            self.php.config_update(info),
            self.ruby.config_update(info),
            self.v8.config_update(info),
            self.jvm.config_update(info),
        ];
        // A runtime that reads the process wins over one that stops (the process ran
        // another before an exec).
        updates
            .iter()
            .find(|u| matches!(u, Some(Some(_))))
            .or_else(|| updates.iter().find(|u| u.is_some()))
            .copied()
            .flatten()
    }

    /// The user stack of a sample of `info` (native frames, leaf first) with its interpreted
    /// frames (innermost first) in the place of the native evaluation frames that run them.
    pub fn interleave(
        &mut self,
        info: &ProcessInfo,
        native: Vec<u64>,
        frames: &[PyFrameSample],
    ) -> Vec<u64> {
        if self.python.reads(info.pid) {
            self.python.interleave(info, native, frames)
        } else if self.ruby.reads(info.pid) {
            self.ruby.interleave(info, native, frames)
        } else if self.v8.reads(info.pid) {
            self.v8.interleave(info, native, frames)
        } else if self.jvm.reads(info.pid) {
            self.jvm.interleave(info, native, frames)
        } else {
            self.php.interleave(info, native, frames)
        }
    }

    /// Whether every sample of `pid` goes through [`Interpreters::interleave`], frames of its
    /// runtime read or not: a JVM's compiled frames are named from their addresses alone.
    pub fn names_native_frames(&self, pid: u32) -> bool {
        self.jvm.reads(pid)
    }

    /// Forgets processes `alive` says are gone.
    pub fn trim(&mut self, alive: impl Fn(u32) -> bool) {
        self.python.trim(&alive);
        self.php.trim(&alive);
        self.ruby.trim(&alive);
        self.v8.trim(&alive);
        self.jvm.trim(&alive);
    }

    /// The counters so far.
    pub fn stats(&self) -> RuntimeStats {
        RuntimeStats {
            python: self.python.stats(),
            php: self.php.stats(),
            ruby: self.ruby.stats(),
            v8: self.v8.stats(),
            jvm: self.jvm.stats(),
        }
    }
}
