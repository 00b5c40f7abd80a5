//! The server profiles itself: `/debug/pprof/profile?seconds=N` answers a CPU profile of this
//! process in pprof, as Go's net/http/pprof does, so the server can scrape itself.

use std::sync::Arc;
use std::time::Duration;

use hyper::Response;

use crate::Api;
use crate::call::Call;
use crate::response::{ApiError, Body, ErrorType, text, with_type};

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
            let profile = tokio::task::spawn_blocking(dump)
                .await
                .map_err(|e| ApiError::internal(format!("heap profile task failed: {e}")))?
                .map_err(profile_error)?;
            Ok(with_type(
                parca_pprof::encode(&profile, true),
                "application/octet-stream",
            ))
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
            let window = Duration::from_secs(seconds);
            let profile = tokio::task::spawn_blocking(move || parca_selfprof::cpu_profile(window))
                .await
                .map_err(|e| ApiError::internal(format!("profiling task failed: {e}")))?
                .map_err(profile_error)?;
            Ok(with_type(
                parca_pprof::encode(&profile, true),
                "application/octet-stream",
            ))
        }
        other => Err(ApiError::new(
            ErrorType::NotFound,
            format!(
                "no profile at {other}; this server offers /debug/pprof/profile (CPU) and /debug/pprof/heap"
            ),
        )),
    }
}

/// The refusal of a profile that cannot be taken.
fn profile_error(error: parca_selfprof::Error) -> ApiError {
    match error {
        parca_selfprof::Error::Busy => ApiError::new(ErrorType::Conflict, error.to_string()),
        parca_selfprof::Error::HeapProfilerOff => {
            ApiError::new(ErrorType::NotFound, error.to_string())
        }
        _ => ApiError::internal(error.to_string()),
    }
}
