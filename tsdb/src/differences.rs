//! Stored profiles written relative to the profile before them in their chunk (block format 6).
//!
//! Many profiles are cumulative or change little between scrapes: Go's `alloc_*`, block and
//! mutex profiles count from the program's start, heap profiles in use move by a few stacks.
//! Their values, written whole, are large numbers that differ in every profile; written as the
//! difference from the same row (stack and label set) of the series' previous profile they
//! are mostly zero or small. The block writer writes a profile's values so when that makes its
//! value column at least a tenth shorter (CPU profiles, whose values are new each time, stay
//! whole), never for profiles with spans. And every profile's header (rows, scale, column
//! lengths) is written as differences from the header before, mostly zeros. The first profile
//! of a chunk is written whole: a chunk is read from its start (a chunk narrowed to later
//! profiles reads the ones it leaves out again, as their bases: `block::split_chunk`).
//!
//! Readers of blocks get every profile back whole through [`Undo`], so the samples' encoding
//! that the head, the WAL and every decoder know ([`crate::encoding::encode_samples`]) is the
//! only one they read; its decoders refuse these flags, so a profile written relative to
//! another is never read as a whole one.
//!
//! The layout is that of [`crate::encoding::encode_samples`] with two more flags:
//! [`SAMPLES_HEADER_DIFFERS`]: the row count, scale and the two column lengths are zigzag
//! differences from the previous profile's (as stored); [`SAMPLES_VALUES_DIFFER`]: the same
//! rows in the same order, the stack and label set columns unchanged, the value column holding
//! `(value − base) / scale`, where `base` is the value of the previous profile's row with the
//! same stack and label set (its n-th such row for a row repeated n times), 0 when it has none,
//! and `scale` the greatest common divisor of the differences.

use crate::encoding::{
    DecodeError, Reader, Result, SAMPLES_HAVE_LABELS as HAVE_LABELS,
    SAMPLES_HAVE_SPANS as HAVE_SPANS, gcd, put_ivarint, put_uvarint, skip_body,
};

/// Flag of a profile's samples whose values are differences (in a block's `profiles` only).
pub(crate) const SAMPLES_VALUES_DIFFER: u8 = 4;

/// Flag of a profile's samples whose header is written as differences (in a block's
/// `profiles` only).
pub(crate) const SAMPLES_HEADER_DIFFERS: u8 = 8;

/// The numbers of a profile's header, as stored.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Header {
    n: u64,
    flags: u8,
    scale: u64,
    stacks_len: u64,
    values_len: u64,
}

impl Header {
    /// Reads a stored header, resolving one written as differences against `prev`. Returns it
    /// with [`SAMPLES_HEADER_DIFFERS`] cleared.
    fn read(r: &mut Reader<'_>, prev: Option<&Header>) -> Result<Header> {
        let first = r.uvarint()?;
        let flags = r.u8()?;
        if flags & SAMPLES_HEADER_DIFFERS == 0 {
            return Ok(Header {
                n: first,
                flags,
                scale: r.uvarint()?,
                stacks_len: r.uvarint()?,
                values_len: r.uvarint()?,
            });
        }
        let Some(prev) = prev else {
            return r.fail("a header written as differences starts its chunk");
        };
        let add =
            |base: u64, z: u64| base.wrapping_add(((z >> 1) as i64 ^ -((z & 1) as i64)) as u64);
        Ok(Header {
            n: add(prev.n, first),
            flags: flags & !SAMPLES_HEADER_DIFFERS,
            scale: add(prev.scale, r.uvarint()?),
            stacks_len: add(prev.stacks_len, r.uvarint()?),
            values_len: add(prev.values_len, r.uvarint()?),
        })
    }

    /// Writes the header whole.
    fn put(&self, out: &mut Vec<u8>) {
        put_uvarint(out, self.n);
        out.push(self.flags);
        put_uvarint(out, self.scale);
        put_uvarint(out, self.stacks_len);
        put_uvarint(out, self.values_len);
    }

    /// Writes the header as differences from `prev`.
    fn put_relative(&self, prev: &Header, out: &mut Vec<u8>) {
        let zigzag = |a: u64, b: u64| {
            let d = a.wrapping_sub(b) as i64;
            ((d << 1) ^ (d >> 63)) as u64
        };
        put_uvarint(out, zigzag(self.n, prev.n));
        out.push(self.flags | SAMPLES_HEADER_DIFFERS);
        put_uvarint(out, zigzag(self.scale, prev.scale));
        put_uvarint(out, zigzag(self.stacks_len, prev.stacks_len));
        put_uvarint(out, zigzag(self.values_len, prev.values_len));
    }

    /// Bytes of the body (span section and columns) at `r`, which follows this header.
    fn body_len(&self, r: &Reader<'_>) -> Result<usize> {
        let mut body = r.clone();
        let start = body.pos();
        let (Ok(n), Ok(stacks_len), Ok(values_len)) = (
            usize::try_from(self.n),
            usize::try_from(self.stacks_len),
            usize::try_from(self.values_len),
        ) else {
            return r.fail("a header's numbers are out of range");
        };
        skip_body(&mut body, n, self.flags, stacks_len, values_len)?;
        Ok(body.pos() - start)
    }
}

/// A profile's rows as keys (stack id, label set id), in their stored order, and values.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Rows {
    keys: Vec<(u64, u64)>,
    values: Vec<i64>,
}

impl Rows {
    /// Each row's base: the previous profile's value of the same key (matched in order, as
    /// both are sorted by key), 0 for a key it lacks.
    fn bases<'a>(&'a self, keys: &'a [(u64, u64)]) -> impl Iterator<Item = i64> + 'a {
        let mut j = 0usize;
        keys.iter().map(move |k| {
            while j < self.keys.len() && self.keys[j] < *k {
                j += 1;
            }
            if j < self.keys.len() && self.keys[j] == *k {
                j += 1;
                self.values[j - 1]
            } else {
                0
            }
        })
    }
}

/// One profile's encoded samples taken apart (profiles without spans only).
struct Parts<'a> {
    n: usize,
    flags: u8,
    scale: i64,
    stacks: &'a [u8],
    values: &'a [u8],
    labels: &'a [u8],
}

impl<'a> Parts<'a> {
    /// The parts of `bytes`; `None` for a profile with a span section.
    fn of(bytes: &'a [u8]) -> Result<Option<Parts<'a>>> {
        let mut r = Reader::new(bytes);
        let n = r.count(2, "sample")?;
        let flags = r.u8()?;
        if flags & HAVE_SPANS != 0 {
            return Ok(None);
        }
        let scale = r.uvarint()?;
        if scale == 0 || scale > i64::MAX as u64 {
            return r.fail(format!("bad value scale {scale}"));
        }
        let stacks_len = r.count(1, "stack column byte")?;
        let values_len = r.count(1, "value column byte")?;
        let stacks = r.take(stacks_len)?;
        let values = r.take(values_len)?;
        let labels = r.take(r.remaining())?;
        Ok(Some(Parts {
            n,
            flags,
            scale: scale as i64,
            stacks,
            values,
            labels,
        }))
    }

    /// The rows' keys, read from the stack and label set columns.
    fn keys(&self, out: &mut Vec<(u64, u64)>) -> Result<()> {
        out.clear();
        let mut stacks = Reader::new(self.stacks);
        let mut labels = Reader::new(self.labels);
        let mut stack = 0u64;
        for _ in 0..self.n {
            stack = stack
                .checked_add(stacks.uvarint()?)
                .ok_or_else(|| error(&stacks, "stack id overflows"))?;
            let label = if self.flags & HAVE_LABELS != 0 {
                labels.uvarint()?
            } else {
                0
            };
            out.push((stack, label));
        }
        Ok(())
    }

    /// The value column's numbers, each times `scale`.
    fn values(&self, out: &mut Vec<i64>) -> Result<()> {
        out.clear();
        let mut r = Reader::new(self.values);
        for _ in 0..self.n {
            let v = r.ivarint()?;
            out.push(
                v.checked_mul(self.scale)
                    .ok_or_else(|| error(&r, format!("value {v} × {} overflows", self.scale)))?,
            );
        }
        if !r.is_empty() {
            return r.fail("the value column is longer than its rows");
        }
        Ok(())
    }

    /// `bytes` with the header's flags, scale and value column replaced.
    fn with_values(&self, flags: u8, scale: u64, values: &[u8], out: &mut Vec<u8>) {
        out.clear();
        put_uvarint(out, self.n as u64);
        out.push(flags);
        put_uvarint(out, scale);
        put_uvarint(out, self.stacks.len() as u64);
        put_uvarint(out, values.len() as u64);
        out.extend_from_slice(self.stacks);
        out.extend_from_slice(values);
        out.extend_from_slice(self.labels);
    }
}

/// A decoding error at `r`'s position.
fn error(r: &Reader<'_>, what: impl Into<String>) -> DecodeError {
    DecodeError {
        offset: r.pos(),
        what: what.into(),
    }
}

/// A value column of `values`, each divided by their greatest common divisor (1 when all are
/// 0), as `encoding::encode_samples` writes it; and that divisor.
fn value_column(values: &[i64], out: &mut Vec<u8>) -> u64 {
    out.clear();
    let g = values.iter().fold(0u64, |g, &v| gcd(g, v.unsigned_abs()));
    let scale = if g == 0 || g > i64::MAX as u64 { 1 } else { g };
    for &v in values {
        put_ivarint(out, v / scale as i64);
    }
    scale
}

/// How a profile's values are written by [`Differ::next`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ValuesAs {
    /// As differences from the profile before where that is shorter: stored profiles.
    DifferencesWhereShorter,
    /// Whole: summaries' windows. They are what long reads read, a day's window each, and
    /// rebuilding values from differences ([`Undo`]) made the week bench's merge take 2.21 s
    /// where it takes 1.27 s with them whole, to save a tenth of the summaries' bytes.
    Whole,
}

/// Writes a chunk's profiles, one after another, each relative to the one before where that
/// is shorter.
#[derive(Default)]
pub(crate) struct Differ {
    prev: Option<Rows>,
    prev_header: Option<Header>,
    cur: Rows,
    diffs: Vec<i64>,
    column: Vec<u8>,
    values: Vec<u8>,
}

impl Differ {
    /// Starts a chunk: its next profile is written whole.
    pub fn start_chunk(&mut self) {
        self.prev = None;
        self.prev_header = None;
    }

    /// The bytes to store for a profile's `bytes` (`encoding::encode_samples`'), written into
    /// `out`: its values as differences from the chunk's previous profile when `values` allows
    /// it and that makes its value column a tenth shorter, its header as differences from the
    /// one before.
    pub fn next<'a>(
        &mut self,
        bytes: &[u8],
        values: ValuesAs,
        out: &'a mut Vec<u8>,
    ) -> Result<&'a [u8]> {
        let differ = match values {
            ValuesAs::DifferencesWhereShorter => self.values_as_differences(bytes)?,
            ValuesAs::Whole => {
                self.prev = None;
                false
            }
        };
        let stage = if differ { &self.values } else { bytes };
        let mut r = Reader::new(stage);
        let header = Header::read(&mut r, None)?;
        out.clear();
        match &self.prev_header {
            Some(prev) => header.put_relative(prev, out),
            None => header.put(out),
        }
        out.extend_from_slice(&stage[r.pos()..]);
        self.prev_header = Some(header);
        Ok(out)
    }

    /// Writes `bytes` with its values as differences into `self.values` if that is shorter;
    /// keeps its rows as the next profile's base.
    fn values_as_differences(&mut self, bytes: &[u8]) -> Result<bool> {
        let Some(parts) = Parts::of(bytes)? else {
            // A profile with spans keeps its values whole and is no base for the next.
            self.prev = None;
            return Ok(false);
        };
        parts.keys(&mut self.cur.keys)?;
        parts.values(&mut self.cur.values)?;
        let mut differs = false;
        if let Some(prev) = &self.prev {
            self.diffs.clear();
            let mut fits = true;
            for (v, base) in self.cur.values.iter().zip(prev.bases(&self.cur.keys)) {
                match v.checked_sub(base) {
                    Some(d) => self.diffs.push(d),
                    None => fits = false,
                }
            }
            if fits {
                let scale = value_column(&self.diffs, &mut self.column);
                if self.column.len() * 10 < parts.values.len() * 9 {
                    parts.with_values(
                        parts.flags | SAMPLES_VALUES_DIFFER,
                        scale,
                        &self.column,
                        &mut self.values,
                    );
                    differs = true;
                }
            }
        }
        let prev = self.prev.get_or_insert_with(Rows::default);
        std::mem::swap(prev, &mut self.cur);
        Ok(differs)
    }
}

/// Reads a chunk's profiles back whole: each written relative to the profile before it is
/// rebuilt from that one.
#[derive(Default)]
pub(crate) struct Undo {
    prev: Option<Rows>,
    prev_header: Option<Header>,
    cur: Rows,
    column: Vec<u8>,
    whole_header: Vec<u8>,
    out: Vec<u8>,
}

impl Undo {
    /// Bytes of the stored profile at the start of `bytes`, the chunk's next.
    pub fn stored_len(&self, bytes: &[u8]) -> Result<usize> {
        let mut r = Reader::new(bytes);
        let header = Header::read(&mut r, self.prev_header.as_ref())?;
        Ok(r.pos() + header.body_len(&r)?)
    }

    /// The whole encoded samples of a chunk's next profile, `bytes` as stored;
    /// `next_differs` says whether the values of the profile after it are written as
    /// differences (whose base this one is).
    pub fn next<'a>(&'a mut self, bytes: &'a [u8], next_differs: bool) -> Result<&'a [u8]> {
        let mut r = Reader::new(bytes);
        let header = Header::read(&mut r, self.prev_header.as_ref())?;
        self.prev_header = Some(header);
        let bytes: &[u8] = if flags(bytes) & SAMPLES_HEADER_DIFFERS != 0 {
            self.whole_header.clear();
            header.put(&mut self.whole_header);
            self.whole_header.extend_from_slice(&bytes[r.pos()..]);
            &self.whole_header
        } else {
            bytes
        };
        if header.flags & SAMPLES_VALUES_DIFFER == 0 {
            if next_differs {
                let parts = Parts::of(bytes)?.ok_or_else(|| DecodeError {
                    offset: 0,
                    what: "a profile with spans is followed by one of differences".into(),
                })?;
                let prev = self.prev.get_or_insert_with(Rows::default);
                parts.keys(&mut prev.keys)?;
                parts.values(&mut prev.values)?;
            } else {
                self.prev = None;
            }
            return Ok(bytes);
        }
        let parts = Parts::of(bytes)?.ok_or_else(|| DecodeError {
            offset: 0,
            what: "a profile of differences has spans".into(),
        })?;
        let Some(prev) = &self.prev else {
            return Err(DecodeError {
                offset: 0,
                what: "a profile of differences starts its chunk".into(),
            });
        };
        parts.keys(&mut self.cur.keys)?;
        parts.values(&mut self.cur.values)?;
        for (v, base) in self.cur.values.iter_mut().zip(prev.bases(&self.cur.keys)) {
            *v = v.checked_add(base).ok_or_else(|| DecodeError {
                offset: 0,
                what: format!("value {v} plus its base {base} overflows"),
            })?;
        }
        let scale = value_column(&self.cur.values, &mut self.column);
        parts.with_values(
            parts.flags & !SAMPLES_VALUES_DIFFER,
            scale,
            &self.column,
            &mut self.out,
        );
        if next_differs {
            std::mem::swap(self.prev.as_mut().expect("checked above"), &mut self.cur);
        } else {
            self.prev = None;
        }
        Ok(&self.out)
    }
}

/// Where a stored profile's flags byte is: after its first varint.
fn header_flags_at(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .position(|b| b & 0x80 == 0)
        .map_or(bytes.len(), |i| i + 1)
}

/// The flags of a stored profile (a look at its header), 0 if it has none.
fn flags(bytes: &[u8]) -> u8 {
    bytes.get(header_flags_at(bytes)).copied().unwrap_or(0)
}

/// Whether a stored profile's values are written as differences.
pub(crate) fn differs(bytes: &[u8]) -> bool {
    flags(bytes) & SAMPLES_VALUES_DIFFER != 0
}

/// Whether a stored profile is written relative to the one before it (its header or values).
pub(crate) fn depends(bytes: &[u8]) -> bool {
    flags(bytes) & (SAMPLES_VALUES_DIFFER | SAMPLES_HEADER_DIFFERS) != 0
}

#[cfg(test)]
mod tests {
    use parca_profile::Samples;
    use parca_profile::tables::{LabelSetId, StackId};

    use super::*;
    use crate::encoding::encode_samples;

    fn encoded(rows: &[(u32, u32, i64)]) -> Vec<u8> {
        let mut s = Samples::default();
        for &(stack, labels, value) in rows {
            s.stacks.push(StackId(stack));
            s.labels.push(LabelSetId(labels));
            s.values.push(value);
        }
        let mut out = Vec::new();
        encode_samples(&s, &mut out);
        out
    }

    /// Writes `profiles` as one chunk, reads it back, and returns what was stored.
    fn round_trip(profiles: &[Vec<u8>]) -> Vec<Vec<u8>> {
        let mut differ = Differ::default();
        differ.start_chunk();
        let stored: Vec<Vec<u8>> = profiles
            .iter()
            .map(|p| {
                let mut out = Vec::new();
                differ
                    .next(p, ValuesAs::DifferencesWhereShorter, &mut out)
                    .expect("encodes")
                    .to_vec()
            })
            .collect();
        let mut undo = Undo::default();
        for (i, s) in stored.iter().enumerate() {
            let next_differs = stored.get(i + 1).is_some_and(|n| differs(n));
            let back = undo.next(s, next_differs).expect("decodes");
            assert_eq!(back, profiles[i].as_slice(), "profile {i}");
        }
        stored
    }

    #[test]
    fn cumulative_profiles_are_stored_as_differences_and_read_back_whole() {
        let base: Vec<(u32, u32, i64)> = (1..200)
            .map(|s| (s, s % 3, 1_000_000_007 * i64::from(s)))
            .collect();
        let mut profiles = vec![encoded(&base)];
        for t in 1..5i64 {
            // A few rows grow, one appears, one goes.
            let mut rows: Vec<(u32, u32, i64)> = base
                .iter()
                .filter(|r| r.0 != 7)
                .map(|&(s, l, v)| (s, l, if s % 17 == 0 { v + 4096 * t } else { v }))
                .collect();
            rows.push((500, 0, 77));
            profiles.push(encoded(&rows));
        }
        let stored = round_trip(&profiles);
        assert!(!differs(&stored[0]), "a chunk starts whole");
        for (s, p) in stored.iter().zip(&profiles).skip(1) {
            assert!(differs(s));
            assert!(s.len() * 2 < p.len(), "{} vs {}", s.len(), p.len());
        }
    }

    #[test]
    fn values_asked_whole_stay_whole_with_their_headers_as_differences() {
        let profiles: Vec<Vec<u8>> = (0..3i64)
            .map(|t| encoded(&[(1, 0, 1_000_000_007 + t), (2, 0, 2_000_000_014)]))
            .collect();
        let mut differ = Differ::default();
        differ.start_chunk();
        let mut undo = Undo::default();
        for (i, p) in profiles.iter().enumerate() {
            let mut out = Vec::new();
            let stored = differ.next(p, ValuesAs::Whole, &mut out).expect("encodes");
            assert!(!differs(stored), "profile {i}");
            assert_eq!(depends(stored), i > 0, "profile {i}");
            assert_eq!(undo.next(stored, false).expect("decodes"), p.as_slice());
        }
    }

    #[test]
    fn profiles_whose_values_are_new_each_time_stay_whole() {
        let profiles: Vec<Vec<u8>> = (0..4u32)
            .map(|t| encoded(&[(1, 0, 3 + i64::from(t) * 7), (2, 0, 11 - i64::from(t))]))
            .collect();
        let stored = round_trip(&profiles);
        assert!(stored.iter().all(|s| !differs(s)));
        // Their headers are written as differences, all but the first.
        assert!(!depends(&stored[0]));
        assert!(stored[1..].iter().all(|s| depends(s)));
    }

    #[test]
    fn repeated_rows_and_extreme_values_round_trip() {
        let a = encoded(&[(1, 0, i64::MAX), (1, 0, 5), (2, 1, i64::MIN + 1)]);
        let b = encoded(&[(1, 0, i64::MAX), (1, 0, 6), (2, 1, i64::MIN + 1), (3, 0, 9)]);
        let c = encoded(&[(1, 0, -5), (2, 1, i64::MAX)]);
        round_trip(&[a.clone(), b.clone(), b.clone(), c, a]);
    }

    #[test]
    fn bad_bytes_are_errors_not_panics() {
        let a = encoded(&[(1, 0, 1_000_000), (2, 0, 2_000_000), (3, 0, 3_000_000)]);
        let b = encoded(&[(1, 0, 1_000_001), (2, 0, 2_000_000), (3, 0, 3_000_000)]);
        let mut differ = Differ::default();
        let mut out = Vec::new();
        differ
            .next(&a, ValuesAs::DifferencesWhereShorter, &mut out)
            .expect("whole");
        let stored = differ
            .next(&b, ValuesAs::DifferencesWhereShorter, &mut out)
            .expect("differences")
            .to_vec();
        assert!(differs(&stored));
        // A profile of differences with nothing before it.
        assert!(Undo::default().next(&stored, false).is_err());
        for cut in 0..stored.len() {
            let mut undo = Undo::default();
            undo.next(&a, true).expect("whole");
            let _ = undo.next(&stored[..cut], false);
        }
        for i in 0..stored.len() {
            let mut bad = stored.clone();
            bad[i] ^= 0xff;
            let mut undo = Undo::default();
            undo.next(&a, true).expect("whole");
            let _ = undo.next(&bad, false);
        }
    }
}
