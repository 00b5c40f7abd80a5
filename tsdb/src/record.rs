//! The payloads of WAL records: a new series, or a profile of a series.
//!
//! Layout (little-endian): a kind byte, then for a series `ref: u32, n: u16, n × (name_len: u16,
//! name, value_len: u32, value)`; for a profile `ref: u32, timestamp_ms: i64, duration_nanos: i64`
//! followed by the profile as raw (uncompressed) pprof with one sample type.

use crate::labels::Labels;

const SERIES: u8 = 1;
const PROFILE: u8 = 2;

/// A decoded WAL record.
pub(crate) enum Record<'a> {
    Series {
        series: u32,
        labels: Labels,
    },
    Profile {
        series: u32,
        timestamp_ms: i64,
        duration_nanos: i64,
        pprof: &'a [u8],
    },
}

pub(crate) fn encode_series(series: u32, labels: &Labels) -> Vec<u8> {
    let mut out = vec![SERIES];
    out.extend_from_slice(&series.to_le_bytes());
    out.extend_from_slice(&(labels.len() as u16).to_le_bytes());
    for l in labels.iter() {
        out.extend_from_slice(&(l.name.len() as u16).to_le_bytes());
        out.extend_from_slice(l.name.as_bytes());
        out.extend_from_slice(&(l.value.len() as u32).to_le_bytes());
        out.extend_from_slice(l.value.as_bytes());
    }
    out
}

pub(crate) fn encode_profile(
    series: u32,
    timestamp_ms: i64,
    duration_nanos: i64,
    pprof: &[u8],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(21 + pprof.len());
    out.push(PROFILE);
    out.extend_from_slice(&series.to_le_bytes());
    out.extend_from_slice(&timestamp_ms.to_le_bytes());
    out.extend_from_slice(&duration_nanos.to_le_bytes());
    out.extend_from_slice(pprof);
    out
}

/// Decodes a record; `Err` says what is malformed (the checksum matched, so this is a bug or a
/// format change, reported with the record's place by the caller).
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
            Ok(Record::Series { series, labels })
        }
        PROFILE => {
            let series = r.u32()?;
            let timestamp_ms = r.i64()?;
            let duration_nanos = r.i64()?;
            Ok(Record::Profile {
                series,
                timestamp_ms,
                duration_nanos,
                pprof: &bytes[r.pos..],
            })
        }
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
            .get(self.pos..self.pos + n)
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
