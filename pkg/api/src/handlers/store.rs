//! The store API: what a querier reads of this server when it is one of its shards.
//!
//! `GET /api/v1/status/store` says what of this store the bucket holds; `POST
//! /api/v1/store/read` answers a [`PeerRequest`] from this store's own profiles (head and blocks
//! on disk, never the bucket, which the querier reads itself). The request and the answer are
//! the store's wire format (`parca_tsdb::peer`): symbols once, samples per series as stored.

use std::sync::Arc;

use hyper::Response;
use parca_tsdb::PeerRequest;

use crate::Api;
use crate::call::Call;
use crate::handlers::query::with_engine;
use crate::response::{ApiError, Body, success, with_type};

/// `GET /api/v1/status/store`.
pub(crate) async fn status(api: &Arc<Api>) -> Result<Response<Body>, ApiError> {
    let db = api.store()?;
    let labels = api.options.external_labels.clone();
    let (shipping, until, shipped, only_in_bucket) = tokio::task::spawn_blocking(move || {
        (
            db.ships_blocks(),
            db.shipped_until(),
            db.shipped_blocks(),
            db.shipped_only_in_bucket(),
        )
    })
    .await
    .map_err(|e| ApiError::internal(format!("status task failed: {e}")))?;
    Ok(success(&serde_json::json!({
        "externalLabels": labels,
        "shipping": shipping,
        "shippedUntil": until,
        "shippedBlocks": shipped
            .iter()
            .map(|(ulid, min_time)| serde_json::json!({ "ulid": ulid, "minTime": min_time }))
            .collect::<Vec<_>>(),
        "onlyInBucket": only_in_bucket,
    })))
}

/// `POST /api/v1/store/read`.
pub(crate) async fn read(api: &Arc<Api>, call: Call) -> Result<Response<Body>, ApiError> {
    let request = PeerRequest::decode(&call.body).map_err(|e| ApiError::bad_data(e.to_string()))?;
    let answer = with_engine(api, move |engine| {
        engine
            .db()
            .local_querier(request.min_ms, request.max_ms)
            .peer_answer(request.read, &request.matchers)
            .map_err(|e| ApiError::from_store("cannot read the store", &e))
    })
    .await?;
    let bytes = tokio::task::spawn_blocking(move || answer.encode())
        .await
        .map_err(|e| ApiError::internal(format!("encoding task failed: {e}")))?;
    Ok(with_type(bytes, parca_tsdb::PEER_CONTENT_TYPE))
}
