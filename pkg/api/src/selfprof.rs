//! The server profiles itself: `/debug/pprof/profile?seconds=N` answers a CPU profile of this
//! process in pprof, as Go's net/http/pprof does, so the server can scrape itself.

use std::sync::Arc;
use std::time::Duration;

use hyper::Response;
use parca_pprof::proto;

use crate::Api;
use crate::response::{ApiError, Body, ErrorType, text, with_type};
use crate::router::Call;

/// Samples per second while profiling; a prime, so that sampling does not beat with periodic work.
const FREQUENCY_HZ: i32 = 97;

/// Longest profile a request may ask for.
const MAX_SECONDS: u64 = 300;

pub(crate) async fn handle(api: &Arc<Api>, call: Call) -> Result<Response<Body>, ApiError> {
    match call.path.trim_end_matches('/') {
        "/debug/pprof" => Ok(text(
            "Profiles of this server:\n\n/debug/pprof/profile?seconds=N  CPU profile over N seconds (default 30)\n/debug/pprof/heap               heap in use (sampled by jemalloc)\n",
        )),
        "/debug/pprof/heap" => {
            let dump = api.options.heap_profile.ok_or_else(|| {
                ApiError::new(ErrorType::NotFound, "this build has no heap profiler")
            })?;
            let bytes = tokio::task::spawn_blocking(dump)
                .await
                .map_err(|e| ApiError::internal(format!("heap profile task failed: {e}")))?
                .map_err(ApiError::internal)?;
            Ok(with_type(bytes, "application/octet-stream"))
        }
        "/debug/pprof/profile" => {
            let seconds = match call.params.get("seconds") {
                None => 30,
                Some(s) => s
                    .parse::<u64>()
                    .ok()
                    .filter(|s| (1..=MAX_SECONDS).contains(s))
                    .ok_or_else(|| {
                        ApiError::bad_data(format!(
                            "parameter `seconds` must be a whole number from 1 to {MAX_SECONDS}, got `{s}`"
                        ))
                    })?,
            };
            let bytes =
                tokio::task::spawn_blocking(move || cpu_profile(Duration::from_secs(seconds)))
                    .await
                    .map_err(|e| ApiError::internal(format!("profiling task failed: {e}")))??;
            Ok(with_type(bytes, "application/octet-stream"))
        }
        other => Err(ApiError::new(
            ErrorType::NotFound,
            format!(
                "no profile at {other}; this server offers /debug/pprof/profile (CPU) and /debug/pprof/heap"
            ),
        )),
    }
}

/// Loads this binary's symbols now, so that the first self-profile is not late: resolving a
/// backtrace fills the symbol cache that the profiler's symbolization uses later (in a debug
/// build that is seconds of work).
pub fn warm_up() {
    let _ = backtrace::Backtrace::new();
}

/// Samples this process for `window` and returns the gzipped pprof.
fn cpu_profile(window: Duration) -> Result<Vec<u8>, ApiError> {
    let guard = pprof::ProfilerGuardBuilder::default()
        .frequency(FREQUENCY_HZ)
        .build()
        .map_err(|e| {
            ApiError::new(
                ErrorType::Conflict,
                format!("cannot start the CPU profiler (is another profile running?): {e}"),
            )
        })?;
    std::thread::sleep(window);
    let report = guard
        .report()
        .build()
        .map_err(|e| ApiError::internal(format!("cannot build the CPU profile: {e}")))?;
    drop(guard);
    Ok(parca_pprof::encode(&to_pprof(&report, window), true))
}

/// Frames at the leaf of a sample that may be the profiler's own (its handler, the unwinder).
const MAX_PROFILER_FRAMES: usize = 8;

/// Whether `name` is a function of the CPU profiler's sampling path: pprof-rs's signal handler
/// and the unwinder it calls, or the kernel's signal trampoline.
fn is_profiler_frame(name: &str) -> bool {
    let name = name.strip_prefix('<').unwrap_or(name);
    name.starts_with("backtrace::")
        || name.starts_with("pprof::")
        || name == "perf_signal_handler"
        || name == "__restore_rt"
}

/// Our pprof of a pprof-rs report: one location per address, with inlined frames as its lines.
fn to_pprof(report: &pprof::Report, window: Duration) -> proto::Profile {
    let period_ns = 1_000_000_000 / i64::from(FREQUENCY_HZ);
    let mut b = parca_pprof::ProfileBuilder::new();
    let samples = b.value_type("samples", "count");
    let cpu = b.value_type("cpu", "nanoseconds");
    let thread = b.string("thread");
    let mut lines = Vec::new();
    for (frames, &count) in &report.data {
        let mut location_id = Vec::with_capacity(frames.frames.len());
        // The profiler's own frames (its signal handler walking the stack) sit at the leaf of
        // every sample: what ran is their caller.
        let own = frames
            .frames
            .iter()
            .take(MAX_PROFILER_FRAMES)
            .rposition(|symbols| symbols.iter().any(|s| is_profiler_frame(&s.name())))
            .map_or(0, |i| i + 1);
        for symbols in &frames.frames[own..] {
            lines.clear();
            for symbol in symbols {
                let name = symbol.name();
                let file = symbol
                    .filename
                    .as_ref()
                    .map(|f| f.display().to_string())
                    .unwrap_or_default();
                let function = b.function(&name, &name, &file, 0);
                lines.push((function, i64::from(symbol.lineno.unwrap_or(0))));
            }
            location_id.push(b.location(0, 0, &lines));
        }
        let count = count as i64;
        let thread_name = b.string(&frames.thread_name);
        b.sample(
            location_id,
            vec![count, count * period_ns],
            vec![proto::Label {
                key: thread,
                str: thread_name,
                ..Default::default()
            }],
        );
    }
    let start = report
        .timing
        .start_time
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64);
    proto::Profile {
        sample_type: vec![samples, cpu],
        time_nanos: start,
        duration_nanos: window.as_nanos() as i64,
        period_type: Some(cpu),
        period: period_ns,
        ..b.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::is_profiler_frame;

    #[test]
    fn the_profilers_own_frames_are_known_by_name() {
        for own in [
            "backtrace::backtrace::libunwind::trace",
            "backtrace::backtrace::trace_unsynchronized",
            "<pprof::backtrace::backtrace_rs::Trace as pprof::backtrace::Trace>::trace",
            "pprof::profiler::perf_signal_handler",
            "perf_signal_handler",
            "__restore_rt",
        ] {
            assert!(is_profiler_frame(own), "{own}");
        }
        for code in [
            "gimli::read::unit::skip_attributes",
            "tokio::runtime::task::raw::poll",
            "<alloc::vec::Vec<T> as core::clone::Clone>::clone",
        ] {
            assert!(!is_profiler_frame(code), "{code}");
        }
    }
}
