//! Operations endpoints: targets, configuration, store status, build info, readiness, reload
//! and the server's own metrics.

use std::sync::Arc;

use hyper::Response;

use crate::Api;
use crate::call::Call;
use crate::response::{ApiError, Body, success, text, with_type};

pub(crate) fn targets(api: &Api, call: &Call) -> Result<Response<Body>, ApiError> {
    let mut report = api.control.targets();
    match call.params.get("state") {
        None | Some("any") => {}
        Some("active") => report.dropped_targets.clear(),
        Some("dropped") => report.active_targets.clear(),
        Some(other) => {
            return Err(ApiError::bad_data(format!(
                "parameter `state` must be active, dropped or any, got `{other}`"
            )));
        }
    }
    Ok(success(&report))
}

pub(crate) fn config(api: &Api) -> Response<Body> {
    let mut data = serde_json::json!({ "yaml": api.control.config_yaml() });
    if let Some(error) = api.control.last_reload_error() {
        data["lastReloadError"] = error.into();
    }
    success(&data)
}

pub(crate) fn buildinfo(api: &Api) -> Response<Body> {
    success(&api.options.build)
}

/// The server's flags, as Prometheus' `/api/v1/status/flags`: name to value, as text.
pub(crate) fn flags(api: &Api) -> Response<Body> {
    success(&api.options.flags)
}

pub(crate) fn ready(api: &Api) -> Result<Response<Body>, ApiError> {
    api.store()?;
    Ok(text("Parca is Ready.\n"))
}

pub(crate) async fn reload(api: &Arc<Api>) -> Result<Response<Body>, ApiError> {
    let api2 = Arc::clone(api);
    tokio::task::spawn_blocking(move || api2.control.reload())
        .await
        .map_err(|e| ApiError::internal(format!("reload task failed: {e}")))?
        .map_err(|why| ApiError::bad_data(format!("configuration not reloaded: {why}")))?;
    Ok(text("configuration reloaded\n"))
}

pub(crate) fn quit(api: &Api) -> Response<Body> {
    tracing::info!("shutdown requested through /-/quit");
    api.control.quit();
    text("Requesting termination... Goodbye!\n")
}

pub(crate) async fn tsdb_status(api: &Arc<Api>) -> Result<Response<Body>, ApiError> {
    let db = api.store()?;
    let (stats, write_failure, wal_damage, shards) = tokio::task::spawn_blocking(move || {
        let damage: Vec<serde_json::Value> = db
            .wal_damage()
            .iter()
            .map(|d| {
                serde_json::json!({
                    "segment": d.segment.display().to_string(),
                    "offset": d.offset,
                    "skippedBytes": d.skipped_bytes,
                    "what": d.what,
                })
            })
            .collect();
        let shards: Vec<serde_json::Value> = db
            .peers()
            .map(|p| p.stores())
            .unwrap_or_default()
            .into_iter()
            .map(|store| match store {
                Ok(s) => serde_json::json!({
                    "store": s.name,
                    "up": true,
                    "externalLabels": s.external_labels,
                    "shippedUntil": s.shipped_until_ms,
                }),
                Err(why) => serde_json::json!({ "up": false, "error": why }),
            })
            .collect();
        (db.stats(), db.write_failure(), damage, shards)
    })
    .await
    .map_err(|e| ApiError::internal(format!("status task failed: {e}")))?;
    Ok(success(&serde_json::json!({
        "readOnly": stats.read_only,
        "writeFailure": write_failure,
        "walWriteErrors": stats.n_wal_write_errors,
        "walDamage": wal_damage,
        "headSeries": stats.n_series,
        "headProfiles": stats.n_head_profiles,
        "headSamples": stats.n_head_samples,
        "headStacks": stats.n_head_stacks,
        "headSampleBytes": stats.head_sample_bytes,
        "profiles": stats.n_profiles,
        "samples": stats.n_samples,
        "blocks": stats.n_blocks,
        "bucketBlocks": stats.n_remote_blocks,
        "blockBytes": stats.block_bytes,
        "walBytes": stats.wal_bytes,
        "quarantinedBlocks": stats.n_quarantined,
        "shards": shards,
    })))
}

pub(crate) fn metrics(api: &Api) -> Response<Body> {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &api.registry)
        .expect("writing to a String cannot fail");
    with_type(
        out,
        "application/openmetrics-text; version=1.0.0; charset=utf-8",
    )
}
