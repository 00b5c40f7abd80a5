//! The server's profiles of itself, as Go's `net/http/pprof` serves a Go program's, so that the
//! server can scrape itself (the default `parca.yaml`) at a cost that stays small.
//!
//! - [`cpu_profile`]: a sampler of this process's CPU time. A `SIGPROF` timer interrupts the
//!   thread that is running; the handler walks its stack (the unwinder, `.eh_frame`) from the
//!   interrupted instruction and leaves the addresses in a fixed ring of slots that the
//!   profiling thread drains every few milliseconds. Nothing is allocated per sample and the
//!   ring is a few hundred kilobytes, whatever the window.
//! - [`heap_profile`]: jemalloc's sampled heap in use, its allocator frames marked for dropping.
//! - Both carry addresses only until [`symbolize`] names them from the objects mapped into
//!   this process (DWARF mapped, not copied, and unmapped when done; `parca-symbolize`), with
//!   inlined frames under their full paths. Names already found are kept per address, so a
//!   steady state costs no DWARF reading and little memory.
//! - [`memory_stats`]: the allocator's and the process's memory, for `/metrics`.

mod heap;
mod jemalloc;
mod sampler;
mod symbols;

pub use heap::{ALLOCATOR_FRAMES, MemoryStats, heap_profile, memory_stats};
pub use sampler::{FREQUENCY_HZ, cpu_profile};
pub use symbols::symbolize;

/// Why a profile of this process could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// One CPU profile at a time, as Go's runtime allows.
    #[error("a CPU profile of this server is already being taken; try again when it ends")]
    Busy,
    /// The interval timer or the signal handler could not be set up.
    #[error("cannot start the CPU profiler: {0}")]
    Timer(std::io::Error),
    /// The process does not run on jemalloc with profiling on (`prof:true`).
    #[error("jemalloc heap profiling is not enabled in this build")]
    HeapProfilerOff,
    /// jemalloc could not write or read back its profile.
    #[error("cannot dump the heap profile: {0}")]
    HeapDump(String),
    /// jemalloc's profile does not decode as pprof.
    #[error("jemalloc's heap profile does not decode: {0}")]
    HeapDecode(#[from] parca_pprof::Error),
}
