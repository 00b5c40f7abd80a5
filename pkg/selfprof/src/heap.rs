//! The heap profile (jemalloc's sampling profiler) and the memory figures of this process.

use parca_pprof::proto;

use crate::jemalloc::jemalloc_profiling;
use crate::{Error, symbols};

/// The allocator's own frames in the heap profile: jemalloc's sampler and entry points, Rust's
/// allocation shims and raw vectors' growth. Set as the profile's `drop_frames` (google/pprof's
/// regex syntax, anchored), so every reader, our ingest included, shows the code that
/// allocated as the leaf, as Go's and gperftools' heap profiles do for their allocators.
pub const ALLOCATOR_FRAMES: &str = concat!(
    r"prof_.*|_rjem_.*|je_.*|imalloc.*|irallocx.*|ialloc.*|do_rallocx|",
    r"malloc|calloc|realloc|free|posix_memalign|aligned_alloc|mallocx|rallocx|sdallocx|",
    r"(__rustc::)?__rust_(alloc|alloc_zeroed|realloc|dealloc)|__rdl_.*|",
    r"alloc::alloc::.*|<alloc::alloc::Global.*|",
    // Growing a vector or boxing, the way runtime.growslice is the allocator's part in Go.
    r"<?alloc::raw_vec::.*|alloc::boxed::box_new_uninit|",
    r"<tikv_jemallocator::Jemalloc as core::alloc::global::GlobalAlloc>::.*"
);

/// This process's heap in use, sampled by jemalloc (`prof:true` in `malloc_conf`), symbolized,
/// with [`ALLOCATOR_FRAMES`] as its `drop_frames`.
pub fn heap_profile() -> Result<proto::Profile, Error> {
    if !jemalloc_profiling() {
        return Err(Error::HeapProfilerOff);
    }
    let ctl = jemalloc_pprof::PROF_CTL
        .as_ref()
        .ok_or(Error::HeapProfilerOff)?;
    let dump = ctl
        .blocking_lock()
        .dump_pprof()
        .map_err(|e| Error::HeapDump(format!("{e:#}")))?;
    let profile = parca_pprof::decode(&dump, &parca_pprof::DecodeOptions::default())?.to_proto();
    let mut profile = symbols::symbolize(profile);
    profile.string_table.push(ALLOCATOR_FRAMES.to_owned());
    profile.drop_frames = profile.string_table.len() as i64 - 1;
    Ok(profile)
}

/// Memory of this process, for `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryStats {
    /// Bytes the program holds from the allocator.
    pub heap_allocated_bytes: u64,
    /// Bytes of physical memory the allocator holds (its heap, metadata and free pages not yet
    /// returned).
    pub heap_resident_bytes: u64,
    /// The process's resident set (`VmRSS`).
    pub resident_bytes: u64,
}

/// The figures of [`MemoryStats`]; `None` when the process does not run on jemalloc with
/// profiling on (whose figures would not be this process's heap).
pub fn memory_stats() -> Option<MemoryStats> {
    if !jemalloc_profiling() {
        return None;
    }
    tikv_jemalloc_ctl::epoch::advance().ok()?;
    Some(MemoryStats {
        heap_allocated_bytes: tikv_jemalloc_ctl::stats::allocated::read().ok()? as u64,
        heap_resident_bytes: tikv_jemalloc_ctl::stats::resident::read().ok()? as u64,
        resident_bytes: resident_bytes().unwrap_or(0),
    })
}

/// `VmRSS` of this process, in bytes.
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse::<u64>()
        .ok()?;
    Some(kib * 1024)
}
