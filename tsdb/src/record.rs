//! The payloads of WAL records: a new series, symbols newly interned in the head, a profile as
//! stack-id/value columns, and the markers around a checkpoint.
//!
//! Layout (little-endian; varints as in [`crate::encoding`]), after a kind byte:
//!
//! - `1` series: `ref: u32, n: u16, n × (name_len: u16, name, value_len: u32, value)`, then its
//!   meta as strings (`len: u32, bytes`): sample type, sample unit, period type, period unit,
//!   and `n_comments: u32` comments; then, when the producer set them, its `drop_frames` and
//!   `keep_frames` as two more such strings (records written before they were kept end at the
//!   comments, and read as having none).
//! - `2` was a profile as raw pprof, written before the first release; it is no longer read.
//! - `3` symbols: the head's tables past the counts they were at ([`encoding::encode_tables`]).
//! - `4` profile: `ref: u32, timestamp_ms: i64, duration_nanos: i64, period: i64`, then its
//!   samples in the head's ids ([`encoding::encode_samples`]), the same bytes the head keeps and
//!   a block stores.
//! - `7` profile of a capture: as `4` with `capture_id: u64` after `period` (profiles split from
//!   one pprof share it; `4` is read with capture 0 and written no more).
//! - `5` checkpoint begin: `min_valid_ms: i64`. The records up to the matching `6` checkpoint
//!   end describe the whole head after a cut; replay starts a new head at `5` and adopts it at
//!   `6` (a checkpoint torn before its end is ignored).

use parca_profile::{Meta, ValueType};

use crate::encoding;
use crate::labels::Labels;

const SERIES: u8 = 1;
/// Profiles as raw pprof, written before the first release and no longer read.
const PRE_RELEASE_PROFILE: u8 = 2;
const SYMBOLS: u8 = 3;
const PROFILE: u8 = 4;
const CHECKPOINT_BEGIN: u8 = 5;
const CHECKPOINT_END: u8 = 6;
/// A profile with its capture id; kind 4 (no capture id, read as 0) is written no more.
const PROFILE_OF_CAPTURE: u8 = 7;

/// Whether `kind` (a payload's first byte) is a record kind this store writes or reads.
pub(crate) fn is_known_kind(kind: u8) -> bool {
    kind != PRE_RELEASE_PROFILE && (SERIES..=PROFILE_OF_CAPTURE).contains(&kind)
}

/// A decoded WAL record.
pub(crate) enum Record<'a> {
    Series {
        series: u32,
        labels: Labels,
        meta: Meta,
    },
    Symbols(&'a [u8]),
    Profile {
        series: u32,
        timestamp_ms: i64,
        duration_nanos: i64,
        period: i64,
        capture_id: u64,
        samples: &'a [u8],
    },
    CheckpointBegin {
        min_valid_ms: i64,
    },
    CheckpointEnd,
}

pub(crate) fn encode_series(series: u32, labels: &Labels, meta: &Meta) -> Vec<u8> {
    let mut out = vec![SERIES];
    out.extend_from_slice(&series.to_le_bytes());
    out.extend_from_slice(&(labels.len() as u16).to_le_bytes());
    for l in labels.iter() {
        out.extend_from_slice(&(l.name.len() as u16).to_le_bytes());
        out.extend_from_slice(l.name.as_bytes());
        out.extend_from_slice(&(l.value.len() as u32).to_le_bytes());
        out.extend_from_slice(l.value.as_bytes());
    }
    let mut put = |s: &str| {
        out.extend_from_slice(&(s.len() as u32).to_le_bytes());
        out.extend_from_slice(s.as_bytes());
    };
    put(&meta.sample_type.kind);
    put(&meta.sample_type.unit);
    put(&meta.period_type.kind);
    put(&meta.period_type.unit);
    out.extend_from_slice(&(meta.comments.len() as u32).to_le_bytes());
    for c in &meta.comments {
        out.extend_from_slice(&(c.len() as u32).to_le_bytes());
        out.extend_from_slice(c.as_bytes());
    }
    if !meta.drop_frames.is_empty() || !meta.keep_frames.is_empty() {
        for s in [&meta.drop_frames, &meta.keep_frames] {
            out.extend_from_slice(&(s.len() as u32).to_le_bytes());
            out.extend_from_slice(s.as_bytes());
        }
    }
    out
}

/// A symbols record: `tables` past `from`.
pub(crate) fn encode_symbols(
    tables: &parca_profile::Tables,
    from: encoding::TableCounts,
) -> Vec<u8> {
    let mut out = vec![SYMBOLS];
    encoding::encode_tables(tables, from, &mut out);
    out
}

/// A profile record; `samples` are already encoded.
pub(crate) fn encode_profile(
    series: u32,
    timestamp_ms: i64,
    duration_nanos: i64,
    period: i64,
    capture_id: u64,
    samples: &[u8],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(37 + samples.len());
    out.push(PROFILE_OF_CAPTURE);
    out.extend_from_slice(&series.to_le_bytes());
    out.extend_from_slice(&timestamp_ms.to_le_bytes());
    out.extend_from_slice(&duration_nanos.to_le_bytes());
    out.extend_from_slice(&period.to_le_bytes());
    out.extend_from_slice(&capture_id.to_le_bytes());
    out.extend_from_slice(samples);
    out
}

pub(crate) fn encode_checkpoint_begin(min_valid_ms: i64) -> Vec<u8> {
    let mut out = vec![CHECKPOINT_BEGIN];
    out.extend_from_slice(&min_valid_ms.to_le_bytes());
    out
}

pub(crate) fn encode_checkpoint_end() -> Vec<u8> {
    vec![CHECKPOINT_END]
}

/// Decodes a record; `Err` says what is malformed (the checksum matched, so this is a bug or a
/// format change, reported with the record's place by the caller).
#[expect(
    clippy::too_many_lines,
    reason = "one match over the WAL's record kinds"
)]
pub(crate) fn decode(bytes: &[u8]) -> Result<Record<'_>, String> {
    let mut r = Cursor { bytes, pos: 0 };
    match r.take(1)?[0] {
        SERIES => {
            let series = r.u32()?;
            let n = r.u16()?;
            let mut pairs = Vec::with_capacity(n as usize);
            for _ in 0..n {
                let name_len = r.u16()? as usize;
                let name = r.str(name_len)?;
                let value_len = r.u32()? as usize;
                let value = r.str(value_len)?;
                pairs.push((name, value));
            }
            let labels = Labels::new(pairs).map_err(|e| e.to_string())?;
            if r.pos == bytes.len() {
                return Err(
                    "series record without its profile type (the pre-release format, no longer read)"
                        .into(),
                );
            }
            let mut s = || -> Result<String, String> {
                let n = r.u32()? as usize;
                r.str(n)
            };
            let sample_type = ValueType {
                kind: s()?,
                unit: s()?,
            };
            let period_type = ValueType {
                kind: s()?,
                unit: s()?,
            };
            let n = r.u32()?;
            let mut comments = Vec::new();
            for _ in 0..n {
                let len = r.u32()? as usize;
                comments.push(r.str(len)?);
            }
            let (mut drop_frames, mut keep_frames) = (String::new(), String::new());
            if r.pos < bytes.len() {
                let n = r.u32()? as usize;
                drop_frames = r.str(n)?;
                let n = r.u32()? as usize;
                keep_frames = r.str(n)?;
            }
            let meta = Meta {
                sample_type,
                period_type,
                comments,
                drop_frames,
                keep_frames,
                ..Meta::default()
            };
            Ok(Record::Series {
                series,
                labels,
                meta,
            })
        }
        PRE_RELEASE_PROFILE => {
            Err("profile record of the pre-release format (raw pprof), no longer read".into())
        }
        SYMBOLS => Ok(Record::Symbols(&bytes[1..])),
        kind @ (PROFILE | PROFILE_OF_CAPTURE) => {
            let series = r.u32()?;
            let timestamp_ms = r.i64()?;
            let duration_nanos = r.i64()?;
            let period = r.i64()?;
            let capture_id = if kind == PROFILE_OF_CAPTURE {
                r.i64()? as u64
            } else {
                0
            };
            Ok(Record::Profile {
                series,
                timestamp_ms,
                duration_nanos,
                period,
                capture_id,
                samples: &bytes[r.pos..],
            })
        }
        CHECKPOINT_BEGIN => Ok(Record::CheckpointBegin {
            min_valid_ms: r.i64()?,
        }),
        CHECKPOINT_END => Ok(Record::CheckpointEnd),
        kind => Err(format!("unknown record kind {kind}")),
    }
}

struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let out = self
            .bytes
            .get(self.pos..self.pos.saturating_add(n))
            .ok_or_else(|| format!("record ends early at byte {}", self.pos))?;
        self.pos += n;
        Ok(out)
    }
    fn u16(&mut self) -> Result<u16, String> {
        Ok(u16::from_le_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn i64(&mut self) -> Result<i64, String> {
        Ok(i64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    fn str(&mut self, n: usize) -> Result<String, String> {
        String::from_utf8(self.take(n)?.to_vec()).map_err(|_| "label is not UTF-8".to_owned())
    }
}
