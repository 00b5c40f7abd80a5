//! Push endpoints: our `/api/v1/write`, and Pyroscope's `/ingest` and Connect `Push`.

use std::borrow::Cow;
use std::convert::Infallible;
use std::sync::Arc;

use hyper::header::{CONTENT_ENCODING, CONTENT_TYPE};
use hyper::{Response, StatusCode};
use parca_ingest::{Durability, IngestBody, LegacyIngest, Series, Sink};
use parca_tsdb::{Labels, NAME_LABEL};

use crate::Api;
use crate::call::Call;
use crate::clock::now_ms;
use crate::response::{ApiError, Body, success, with_type};

/// The body with its `Content-Encoding: gzip` removed (bounded like a pprof).
pub(crate) fn content_decoded<'a>(api: &Api, call: &'a Call) -> Result<Cow<'a, [u8]>, ApiError> {
    let encoding = call
        .headers
        .get(CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("identity");
    match encoding {
        "identity" => Ok(Cow::Borrowed(&call.body)),
        "gzip" => parca_pprof::decompress(&call.body, &api.options.decode)
            .map_err(|e| ApiError::bad_data(format!("cannot decompress the gzip body: {e}"))),
        other => Err(ApiError::bad_data(format!(
            "content encoding `{other}` is not supported; send gzip or no encoding"
        ))),
    }
}

/// Stores a batch ([`write_batch`]); refusals become a 400 when nothing was stored, and
/// warnings otherwise.
async fn store(
    api: &Arc<Api>,
    protocol: &'static str,
    batch: Vec<Series>,
) -> Result<Response<Body>, ApiError> {
    let outcome = write_batch(api, protocol, batch).await?;
    let refused: Vec<String> = outcome.refused.iter().map(ToString::to_string).collect();
    if outcome.n_written == 0 && !refused.is_empty() {
        return Err(ApiError::bad_data(format!(
            "profile refused: {}",
            refused.join("; ")
        )));
    }
    let mut response = success(&serde_json::json!({
        "profiles": outcome.n_written,
        "refused": refused.len(),
    }));
    if !refused.is_empty() {
        let body = serde_json::json!({
            "status": "success",
            "data": {"profiles": outcome.n_written, "refused": refused.len()},
            "warnings": refused,
        });
        response = crate::response::json_response(&body);
    }
    Ok(response)
}

/// Writes a batch within the push limits, counted in the metrics: appended on the async
/// worker when the head is free, on the blocking pool when it is not. Its tables then go back
/// to the decoders ([`parca_ingest::TablesPool`]) for the next pushes.
pub(crate) async fn write_batch(
    api: &Arc<Api>,
    protocol: &'static str,
    batch: Vec<Series>,
) -> Result<parca_ingest::WriteOutcome, ApiError> {
    check_push_limits(&api.options.push_limits, &batch)?;
    let db = api.store()?;
    let n_samples: usize = batch.iter().map(|s| s.profile.samples.len()).sum();
    let n_profiles = batch.len();
    let stored = |e: parca_tsdb::Error| ApiError::from_store("cannot store the profile", &e);
    // On the async worker when the head is free and takes the whole batch: no thread switch,
    // and the wait for the fsync holds no thread (the store's sync thread syncs every waiting
    // commit at once and wakes this task). Meanwhile the WAL's lock is waited for only while
    // the sync thread hands the log's buffer to the operating system (a write of a few
    // kilobytes under this load) and, once per 128 MiB segment, while the segment it closes
    // is synced. One push at a time appends here: the others wait as tasks, so a worker whose
    // push finds the head busy with its neighbour's goes on with other connections' work
    // rather than handing the push to the blocking pool (a thread wake-up and switch each).
    // Otherwise on the blocking pool, where a wait for the head's lock (a query or a cut may
    // hold it for seconds), or a write of profiles into blocks of their own, stalls no
    // connection.
    let on_worker = {
        let _one_at_a_time = api.appending.lock().await;
        db.try_write_synced(&batch)
    };
    // The batch's tables go back to the decoders once the batch is appended: the next push
    // is decoded into them while this one waits for the disk.
    let mut tables: Vec<Arc<parca_profile::Tables>> = Vec::new();
    for s in &batch {
        if !tables.iter().any(|t| Arc::ptr_eq(t, &s.profile.tables)) {
            tables.push(Arc::clone(&s.profile.tables));
        }
    }
    let written = match on_worker {
        Some(deferred) => {
            drop(batch);
            Ok(deferred)
        }
        None => tokio::task::spawn_blocking(move || match db.try_write_synced(&batch) {
            Some(deferred) => Ok(deferred),
            None => Err(db.write(&batch, Durability::Synced)),
        })
        .await
        .map_err(|e| ApiError::internal(format!("write task failed: {e}")))?,
    };
    for t in tables {
        api.decoders.recycle(t);
    }
    let outcome = match written {
        Ok(deferred) => {
            let (outcome, commit) = deferred.map_err(stored)?;
            commit.await.map_err(stored)?;
            outcome
        }
        Err(done) => done.map_err(stored)?,
    };
    api.metrics.observe_ingest(
        protocol,
        outcome.n_written,
        n_samples,
        outcome.refused.len(),
    );
    tracing::debug!(protocol, n_profiles, n_samples, "stored pushed profiles");
    Ok(outcome)
}

/// `POST /v1development/profiles`: OTLP/HTTP's profiles export (protobuf, gzip or not). The
/// answer is OTLP's: an `ExportProfilesServiceResponse` (with a partial success when some
/// profiles were refused, e.g. as duplicates), or a `google.rpc.Status` with the error.
pub(crate) async fn otlp_export(api: &Arc<Api>, call: Call) -> Response<Body> {
    const PROTOBUF: &str = "application/x-protobuf";
    let content_type = call
        .headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let result = if content_type.starts_with(PROTOBUF) {
        match content_decoded(api, &call).and_then(|body| {
            parca_ingest::decode_export_request(&body, now_ms())
                .map_err(|e| ApiError::bad_data(e.to_string()))
        }) {
            Ok(batch) => write_batch(api, "otlp", batch).await,
            Err(e) => Err(e),
        }
    } else {
        Err(ApiError::new(
            crate::ErrorType::UnsupportedMediaType,
            format!(
                "content type `{content_type}` is not supported; send {PROTOBUF} (OTLP/JSON is \
                 not served)"
            ),
        ))
    };
    let (status, body) = match result {
        Ok(outcome) => {
            let refused: Vec<String> = outcome.refused.iter().map(ToString::to_string).collect();
            (
                StatusCode::OK,
                parca_ingest::export_response(refused.len() as i64, &refused.join("; ")),
            )
        }
        Err(e) => {
            let status = e.status();
            (
                status,
                parca_ingest::rpc_status(e.kind.grpc_code() as i32, &e.message),
            )
        }
    };
    let mut response = with_type(body, PROTOBUF);
    *response.status_mut() = status;
    if status == StatusCode::SERVICE_UNAVAILABLE {
        response.headers_mut().insert(
            hyper::header::RETRY_AFTER,
            crate::response::RETRY_AFTER_SECONDS.into(),
        );
    }
    response
}

/// Refuses a push over [`crate::PushLimits`], naming the first series at fault and the flag.
fn check_push_limits(limits: &crate::PushLimits, batch: &[Series]) -> Result<(), ApiError> {
    use crate::ErrorType::BadData;
    let distinct: std::collections::HashSet<&Labels> = batch.iter().map(|s| &s.labels).collect();
    if distinct.len() > limits.max_series {
        return Err(ApiError::limit(
            BadData,
            format_args!(
                "the push holds {} series, more than {} (its samples' labels split it into series)",
                distinct.len(),
                limits.max_series
            ),
            "--ingest-max-series-per-push",
        ));
    }
    for labels in distinct {
        let n = labels.iter().count();
        if n > limits.max_labels {
            return Err(ApiError::limit(
                BadData,
                format_args!(
                    "series {labels} has {n} labels, more than {}",
                    limits.max_labels
                ),
                "--ingest-max-labels-per-series",
            ));
        }
        for label in labels.iter() {
            if label.name.len() > limits.max_name_bytes {
                return Err(ApiError::limit(
                    BadData,
                    format_args!(
                        "label name `{}…` is {} bytes long, more than {}",
                        prefix(&label.name),
                        label.name.len(),
                        limits.max_name_bytes
                    ),
                    "--ingest-max-label-name-length",
                ));
            }
            // `__name__` is the profile type, written by ingest from the profile's own types.
            if label.value.len() > limits.max_value_bytes && label.name != NAME_LABEL {
                return Err(ApiError::limit(
                    BadData,
                    format_args!(
                        "the value of label `{}` is {} bytes long, more than {}",
                        prefix(&label.name),
                        label.value.len(),
                        limits.max_value_bytes
                    ),
                    "--ingest-max-label-value-length",
                ));
            }
        }
    }
    Ok(())
}

/// The start of a long name, cut at a character boundary, for messages.
fn prefix(text: &str) -> &str {
    let mut end = text.len().min(64);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// `POST /api/v1/write?__name__=memory&job=batch`: one pprof, gzipped or raw.
pub(crate) async fn write(api: &Arc<Api>, call: Call) -> Result<Response<Body>, ApiError> {
    let name = call.params.get(NAME_LABEL).ok_or_else(|| {
        ApiError::bad_data(
            "parameter `__name__` (the profile name, such as `memory` or `process_cpu`) is required",
        )
    })?;
    let labels = Labels::new(call.params.pairs().filter(|(k, _)| *k != NAME_LABEL))
        .map_err(|e| ApiError::bad_data(format!("invalid labels in the query parameters: {e}")))?;
    let body = content_decoded(api, &call)?;
    if body.is_empty() {
        return Err(ApiError::bad_data(
            "the request body is empty; send a pprof profile",
        ));
    }
    let profiles = api
        .decoders
        .decode(&body, &api.options.decode)
        .map_err(|e| ApiError::bad_data(format!("invalid pprof body: {e}")))?;
    let batch = parca_ingest::to_series(name, &labels, profiles, now_ms())
        .map_err(|e| ApiError::bad_data(e.to_string()))?;
    store(api, "write", batch).await
}

/// `POST /ingest?name=app.cpu{k=v}&from=…&until=…&format=pprof|folded`: Pyroscope's legacy push.
pub(crate) async fn pyroscope_ingest(
    api: &Arc<Api>,
    call: Call,
) -> Result<Response<Body>, ApiError> {
    let p = &call.params;
    let int = |name: &str| -> Result<Option<i64>, ApiError> {
        p.get(name)
            .map(|v| {
                v.parse().map_err(|_| {
                    ApiError::bad_data(format!("parameter `{name}` must be an integer, got `{v}`"))
                })
            })
            .transpose()
    };
    let content_type = call
        .headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let request = LegacyIngest {
        name: p.required("name")?.to_owned(),
        from: int("from")?,
        until: int("until")?,
        format: p.get("format").map(str::to_owned),
        sample_rate: int("sampleRate")?,
        spy_name: p.get("spyName").map(str::to_owned),
    };
    let body = content_decoded(api, &call)?;
    let batch = if content_type.starts_with("multipart/") {
        let form = FormParts::read(content_type, body.into_owned()).await?;
        parca_ingest::legacy_ingest(&request, form.body()?, &api.options.decode, now_ms())
    } else {
        parca_ingest::legacy_ingest(
            &request,
            IngestBody::Raw(&body),
            &api.options.decode,
            now_ms(),
        )
    }
    .map_err(|e| ApiError::bad_data(e.to_string()))?;
    store(api, "pyroscope_ingest", batch).await
}

/// The parts of a multipart `/ingest` body that Pyroscope's SDKs send.
#[derive(Default)]
struct FormParts {
    profile: Option<bytes::Bytes>,
    prev_profile: Option<bytes::Bytes>,
    sample_type_config: Option<bytes::Bytes>,
}

impl FormParts {
    /// Splits a `multipart/form-data` body; parts of other names are skipped.
    async fn read(content_type: &str, body: Vec<u8>) -> Result<FormParts, ApiError> {
        let bad = |e: multer::Error| ApiError::bad_data(format!("invalid multipart body: {e}"));
        let boundary = multer::parse_boundary(content_type).map_err(bad)?;
        let chunk = bytes::Bytes::from(body);
        let stream = futures_util::stream::once(async move { Ok::<_, Infallible>(chunk) });
        let mut form = multer::Multipart::new(stream, boundary);
        let mut parts = FormParts::default();
        while let Some(field) = form.next_field().await.map_err(bad)? {
            let slot = match field.name() {
                Some("profile") => &mut parts.profile,
                Some("prev_profile") => &mut parts.prev_profile,
                Some("sample_type_config") => &mut parts.sample_type_config,
                _ => continue,
            };
            *slot = Some(field.bytes().await.map_err(bad)?);
        }
        Ok(parts)
    }

    fn body(&self) -> Result<IngestBody<'_>, ApiError> {
        let profile = self.profile.as_deref().ok_or_else(|| {
            ApiError::bad_data("the multipart body has no `profile` part holding the pprof")
        })?;
        Ok(IngestBody::Form {
            profile,
            prev_profile: self.prev_profile.as_deref(),
            sample_type_config: self.sample_type_config.as_deref(),
        })
    }
}

/// `POST /push.v1.PusherService/Push`: Pyroscope's Connect push (protobuf, unary). Answers in
/// Connect's manner: an empty `PushResponse`, or a JSON error with a Connect code.
pub(crate) async fn pyroscope_push(api: &Arc<Api>, call: Call) -> Response<Body> {
    let connect_error = |status: StatusCode, code: &str, message: String| {
        let mut response = crate::response::json_response(&serde_json::json!({
            "code": code,
            "message": message,
        }));
        *response.status_mut() = status;
        response
    };
    let content_type = call
        .headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !content_type.starts_with("application/proto") {
        return connect_error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unknown",
            format!("content type `{content_type}` is not supported; send application/proto"),
        );
    }
    let batch = content_decoded(api, &call).and_then(|body| {
        parca_ingest::decode_push_request(&body, &api.options.decode, now_ms())
            .map_err(|e| ApiError::bad_data(e.to_string()))
    });
    let result = match batch {
        Ok(batch) => store(api, "pyroscope_push", batch).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(_) => with_type(Vec::new(), "application/proto"),
        Err(e) => {
            let (status, code) = match e.kind {
                crate::ErrorType::BadData => (StatusCode::BAD_REQUEST, "invalid_argument"),
                crate::ErrorType::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
                _ => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
            };
            let mut response = connect_error(status, code, e.message);
            if status == StatusCode::SERVICE_UNAVAILABLE {
                response.headers_mut().insert(
                    hyper::header::RETRY_AFTER,
                    crate::response::RETRY_AFTER_SECONDS.into(),
                );
            }
            response
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(pairs: &[(&str, &str)]) -> Series {
        Series {
            labels: Labels::new(pairs.iter().copied()).expect("valid labels"),
            timestamp_ms: 0,
            profile: parca_profile::Profile {
                tables: std::sync::Arc::new(parca_profile::Tables::new()),
                meta: parca_profile::Meta::default(),
                samples: parca_profile::Samples::default(),
            },
        }
    }

    #[test]
    fn push_limits_name_their_flags() {
        let limits = crate::PushLimits {
            max_series: 2,
            max_labels: 3,
            max_name_bytes: 8,
            max_value_bytes: 4,
        };
        let refusal = |batch: &[Series]| {
            check_push_limits(&limits, batch)
                .expect_err("over a limit")
                .message
        };
        let ok = [series(&[("__name__", "x"), ("job", "a")])];
        assert!(check_push_limits(&limits, &ok).is_ok());
        // The same series twice is one series.
        let same = [ok[0].clone(), ok[0].clone()];
        assert!(check_push_limits(&limits, &same).is_ok());
        let many: Vec<Series> = ["a", "b", "c"]
            .iter()
            .map(|v| series(&[("__name__", "x"), ("job", v)]))
            .collect();
        assert!(refusal(&many).contains("--ingest-max-series-per-push"));
        let wide = [series(&[
            ("__name__", "x"),
            ("a", "1"),
            ("b", "2"),
            ("c", "3"),
        ])];
        assert!(refusal(&wide).contains("--ingest-max-labels-per-series"));
        let long_name = [series(&[("__name__", "x"), ("very_long_name", "1")])];
        assert!(refusal(&long_name).contains("--ingest-max-label-name-length"));
        let long_value = [series(&[("__name__", "x"), ("job", "abcdef")])];
        assert!(refusal(&long_value).contains("--ingest-max-label-value-length"));
    }
}
