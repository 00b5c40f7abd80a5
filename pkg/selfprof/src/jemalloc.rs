//! Questions to the allocator, jemalloc, that the heap profile and the symbolizer both ask: is it
//! profiling, and give its free pages back.

/// Returns the allocator's free pages to the system now (jemalloc's `arena.<all>.purge`).
pub(crate) fn return_free_memory() {
    if !jemalloc_profiling() {
        return;
    }
    // MALLCTL_ARENAS_ALL: every arena.
    let name = b"arena.4096.purge\0";
    // SAFETY: a void mallctl: no old value asked for, no new value given.
    unsafe {
        tikv_jemalloc_sys::mallctl(
            name.as_ptr().cast(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        );
    }
}

/// Whether this process runs on jemalloc built with profiling and started with it on
/// (`prof:true`): the server's case. Asked of jemalloc itself, because jemalloc_pprof's own
/// check panics where jemalloc was built without profiling (a library's test binary).
pub(crate) fn jemalloc_profiling() -> bool {
    static PROFILING: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    // SAFETY: `opt.prof` is a bool; the name is NUL-terminated.
    *PROFILING.get_or_init(|| {
        unsafe { tikv_jemalloc_ctl::raw::read::<bool>(b"opt.prof\0") }.unwrap_or(false)
    })
}
