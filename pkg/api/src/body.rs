//! Request bodies: read within a size limit, and what a refused request left unread drained,
//! so that every client reads its refusal as an answer.
//!
//! Why drain: an HTTP/2 client still sending its body when the answer ends sees its stream
//! reset. RFC 9113 §8.1 lets a server do that (`RST_STREAM` with `NO_ERROR` after a complete
//! response), but clients take it badly: curl reports "Stream error in the HTTP/2 framing layer"
//! instead of the 401 it was sent, Go's transport an error, now and then, depending on how far
//! the upload got. A body read to its end leaves nothing to reset. Beyond a bound (a client
//! uploading gigabytes to a server that refuses it) the answer is sent and the stream reset,
//! as the RFC allows.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::{Body, Incoming};

/// At most this much of a refused request's body is read and dropped before the answer.
pub(crate) const DRAIN_MAX_BYTES: usize = 4 << 20;

/// A refused request's body is read and dropped for at most this long (a client that sends
/// slowly does not hold its answer, nor a connection's task, longer).
pub(crate) const DRAIN_MAX_TIME: Duration = Duration::from_secs(2);

/// Why a body could not be read.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// It is longer than the limit; what came was read (up to [`DRAIN_MAX_BYTES`] more).
    TooLarge,
    /// The connection failed or the client broke off.
    Failed(hyper::Error),
}

/// Reads the whole body if it is at most `limit` bytes. A body of one frame (most bodies) is
/// returned without a copy.
pub(crate) async fn read_limited(body: &mut Incoming, limit: usize) -> Result<Bytes, ReadError> {
    let mut first: Option<Bytes> = None;
    let mut more: Option<BytesMut> = None;
    let mut len = 0usize;
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(ReadError::Failed)?.into_data() else {
            continue; // trailers
        };
        len += data.len();
        if len > limit {
            drain(body).await;
            return Err(ReadError::TooLarge);
        }
        match (&mut first, &mut more) {
            (None, _) => first = Some(data),
            (Some(head), None) => {
                let mut joined = BytesMut::with_capacity(len.max(2 * head.len()));
                joined.extend_from_slice(head);
                joined.extend_from_slice(&data);
                more = Some(joined);
            }
            (Some(_), Some(joined)) => joined.extend_from_slice(&data),
        }
    }
    Ok(match (first, more) {
        (_, Some(joined)) => joined.freeze(),
        (Some(head), None) => head,
        (None, None) => Bytes::new(),
    })
}

/// Reads and drops what is left of `body`, up to [`DRAIN_MAX_BYTES`] and [`DRAIN_MAX_TIME`]:
/// called before a refusal (or any answer that did not need the body) is sent.
pub(crate) async fn drain(body: &mut Incoming) {
    if body.is_end_stream() {
        return;
    }
    let discard = async {
        let mut n = 0usize;
        while let Some(Ok(frame)) = body.frame().await {
            if let Some(data) = frame.data_ref() {
                n += data.len();
                if n > DRAIN_MAX_BYTES {
                    break;
                }
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_MAX_TIME, discard).await;
}
