//! Byte encodings shared by the WAL, the head and the blocks: varints, the samples of one
//! profile as columns, interned tables (whole or as the part added since some counts), and the
//! footer that seals every block file.
//!
//! Every decoder here reads untrusted bytes: it checks every length and id against what is
//! really there and returns a [`DecodeError`] naming the offset, never panics, and never
//! allocates more than the input can justify.

use std::collections::HashMap;

use parca_profile::tables::{
    Function, FunctionId, Label, LabelSetId, LabelValue, Line, LocationId, Mapping, MappingId,
    StackId, StringId,
};
use parca_profile::{SampleSpans, Samples, SpansBuilder, Tables};

/// What is wrong with some bytes, and where (offset from the start of the decoded slice).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DecodeError {
    pub offset: usize,
    pub what: String,
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "at byte {}: {}", self.offset, self.what)
    }
}

pub(crate) type Result<T> = std::result::Result<T, DecodeError>;

/// Appends `v` as an unsigned LEB128 varint (7 bits a byte, low bits first).
#[inline]
pub(crate) fn put_uvarint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends `v` zigzag-encoded (0, -1, 1, -2, … → 0, 1, 2, 3, …) so small magnitudes are short.
#[inline]
pub(crate) fn put_ivarint(out: &mut Vec<u8>, v: i64) {
    put_uvarint(out, ((v << 1) ^ (v >> 63)) as u64);
}

pub(crate) fn put_str(out: &mut Vec<u8>, s: &str) {
    put_uvarint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

/// A cursor over untrusted bytes.
#[derive(Clone)]
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, pos: 0 }
    }

    pub fn pos(&self) -> usize {
        self.pos
    }

    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    pub fn is_empty(&self) -> bool {
        self.pos == self.bytes.len()
    }

    pub fn fail<T>(&self, what: impl Into<String>) -> Result<T> {
        Err(DecodeError {
            offset: self.pos,
            what: what.into(),
        })
    }

    pub fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return self.fail(format!("needs {n} bytes, {} remain", self.remaining()));
        }
        let out = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    pub fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    pub fn u32_le(&mut self) -> Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn u64_le(&mut self) -> Result<u64> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    #[inline(always)]
    pub fn uvarint(&mut self) -> Result<u64> {
        // Most stack deltas and scaled values fit one byte, and most others two (the sums
        // of summaries): both without a call.
        match self.bytes.get(self.pos..) {
            Some(&[b, ..]) if b < 0x80 => {
                self.pos += 1;
                Ok(u64::from(b))
            }
            Some(&[b0, b1, ..]) if b1 < 0x80 => {
                self.pos += 2;
                Ok(u64::from(b0 & 0x7f) | u64::from(b1) << 7)
            }
            _ => self.uvarint_long(),
        }
    }

    #[inline(never)]
    fn uvarint_long(&mut self) -> Result<u64> {
        let mut v = 0u64;
        let mut shift = 0u32;
        loop {
            let Some(&b) = self.bytes.get(self.pos) else {
                return self.fail("varint runs past the end");
            };
            self.pos += 1;
            if shift == 63 && b > 1 {
                return self.fail("varint overflows 64 bits");
            }
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Ok(v);
            }
            shift += 7;
            if shift > 63 {
                return self.fail("varint longer than 10 bytes");
            }
        }
    }

    #[inline(always)]
    pub fn ivarint(&mut self) -> Result<i64> {
        let u = self.uvarint()?;
        Ok(((u >> 1) as i64) ^ -((u & 1) as i64))
    }

    /// A varint that must be below `limit` (an id or a count).
    #[inline]
    pub fn below(&mut self, limit: u64, what: &str) -> Result<u64> {
        let v = self.uvarint()?;
        if v >= limit {
            return self.fail(format!("{what} {v} is out of range (limit {limit})"));
        }
        Ok(v)
    }

    /// A count of items that take at least `min_bytes` each: bounded by what remains, so that
    /// hostile counts cannot make us allocate.
    pub fn count(&mut self, min_bytes: usize, what: &str) -> Result<usize> {
        let n = self.uvarint()?;
        if n > (self.remaining() / min_bytes.max(1)) as u64 {
            return self.fail(format!(
                "{what} count {n} is more than the {} remaining bytes can hold",
                self.remaining()
            ));
        }
        Ok(n as usize)
    }

    pub fn str(&mut self) -> Result<&'a str> {
        let n = self.count(1, "string length")?;
        let bytes = self.take(n)?;
        std::str::from_utf8(bytes).or_else(|_| self.fail("string is not UTF-8"))
    }
}

// ---------------------------------------------------------------------------------------------
// Samples

/// `flags` bit: a label-set column follows the values.
pub(crate) const SAMPLES_HAVE_LABELS: u8 = 1;
/// `flags` bit (format version 3): the rows are grouped by span, and a span section precedes the
/// columns ([`encode_spans`]).
pub(crate) const SAMPLES_HAVE_SPANS: u8 = 2;

/// Encodes the samples of one profile. Rows are sorted by (stack, labels) first, so stack ids
/// are written as deltas; values are divided by their greatest common divisor (CPU profiles'
/// values are multiples of the period), zigzag varints.
///
/// Layout: `n: uvarint, flags: u8, scale: uvarint, stacks_len: uvarint, values_len: uvarint`,
/// then, if `flags & 2`, the span section ([`encode_spans`]), then the columns: `n × stack
/// delta: uvarint` (`stacks_len` bytes), `n × value/scale: ivarint` (`values_len` bytes), and
/// `n × label set id: uvarint` if `flags & 1`. The column lengths let a reader walk the columns
/// side by side in one pass. With spans, rows are sorted by (span, stack, labels) and the stack
/// deltas start again from 0 at each span's first row: which span a row belongs to costs nothing
/// per sample.
/// Returns the sum of the values. A diff's base column is not stored.
pub(crate) fn encode_samples(samples: &Samples, out: &mut Vec<u8>) -> i64 {
    let n = samples.len();
    debug_assert!(
        samples.spans.as_ref().is_none_or(|s| s.rows.len() == n),
        "a span column has a row per sample"
    );
    let spans = samples
        .spans
        .as_ref()
        .filter(|s| s.rows.len() == n && !s.spans.is_empty());
    let group = |i: usize| spans.map_or(0, |s| s.rows[i]);
    let key = |i: usize| (group(i), samples.stacks[i], samples.labels[i]);
    let sorted = (1..n).all(|i| key(i - 1) < key(i));
    let mut order: Vec<u32> = (0..n as u32).collect();
    if !sorted {
        order.sort_unstable_by_key(|&i| key(i as usize));
    }
    let g = samples
        .values
        .iter()
        .fold(0u64, |g, &v| gcd(g, v.unsigned_abs()));
    // 0 (no or only zero values) and 2^63 (only i64::MIN) cannot scale.
    let scale = if g == 0 || g > i64::MAX as u64 { 1 } else { g };
    let has_labels = samples.labels.iter().any(|&l| l != LabelSetId::EMPTY);
    let mut stacks = Vec::with_capacity(2 * n);
    let mut prev = 0u32;
    let mut prev_group = 0u32;
    for &i in &order {
        if group(i as usize) != prev_group {
            prev_group = group(i as usize);
            prev = 0;
        }
        let s = samples.stacks[i as usize].0;
        put_uvarint(&mut stacks, u64::from(s - prev));
        prev = s;
    }
    let mut values = Vec::with_capacity(2 * n);
    let mut total = 0i64;
    for &i in &order {
        let v = samples.values[i as usize];
        total = total.wrapping_add(v);
        put_ivarint(&mut values, v / scale as i64); // exact: `scale` divides every value
    }
    out.reserve(stacks.len() + values.len() + 16);
    put_uvarint(out, n as u64);
    let mut flags = if has_labels { SAMPLES_HAVE_LABELS } else { 0 };
    if spans.is_some() {
        flags |= SAMPLES_HAVE_SPANS;
    }
    out.push(flags);
    put_uvarint(out, scale);
    put_uvarint(out, stacks.len() as u64);
    put_uvarint(out, values.len() as u64);
    if let Some(spans) = spans {
        encode_spans(spans, &order, out);
    }
    out.extend_from_slice(&stacks);
    out.extend_from_slice(&values);
    if has_labels {
        for &i in &order {
            put_uvarint(out, u64::from(samples.labels[i as usize].0));
        }
    }
    total
}

/// A span value's tag: 1…32 for lowercase hex of that many bytes (stored as the bytes), this
/// for any other text (stored as a string); 0 for none.
const SPAN_VALUE_TEXT: u8 = 0xff;

/// Writes the span section: `n_names: uvarint`, the names as strings, `n_groups: uvarint`, then
/// per group of consecutive rows (in `order`) `rows: uvarint` and per name its value: a tag byte
/// (0: none; 1…32: lowercase hex of that many bytes, which follow; 255: a string follows). A
/// group whose values are all none holds the rows without a span. Span and trace ids, hex of 8
/// and 16 bytes, so take 9 and 17 bytes per span, once per profile.
fn encode_spans(spans: &SampleSpans, order: &[u32], out: &mut Vec<u8>) {
    put_uvarint(out, spans.names.len() as u64);
    for name in &spans.names {
        put_str(out, name);
    }
    let mut groups: Vec<(u32, u64)> = Vec::new();
    for &i in order {
        let g = spans.rows[i as usize];
        match groups.last_mut() {
            Some((last, rows)) if *last == g => *rows += 1,
            _ => groups.push((g, 1)),
        }
    }
    put_uvarint(out, groups.len() as u64);
    for (g, rows) in groups {
        put_uvarint(out, rows);
        for k in 0..spans.names.len() {
            let value = match g {
                0 => "",
                g => spans.spans[g as usize - 1]
                    .get(k)
                    .map_or("", String::as_str),
            };
            put_span_value(out, value);
        }
    }
}

fn put_span_value(out: &mut Vec<u8>, value: &str) {
    if value.is_empty() {
        out.push(0);
        return;
    }
    let b = value.as_bytes();
    let is_hex = b.len().is_multiple_of(2)
        && b.len() <= 64
        && b.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'));
    if is_hex {
        out.push((b.len() / 2) as u8);
        let nibble = |c: u8| if c <= b'9' { c - b'0' } else { c - b'a' + 10 };
        out.extend(b.chunks(2).map(|p| nibble(p[0]) << 4 | nibble(p[1])));
    } else {
        out.push(SPAN_VALUE_TEXT);
        put_str(out, value);
    }
}

/// Reads one span value written by [`put_span_value`] into `out` (cleared first).
fn read_span_value(r: &mut Reader<'_>, out: &mut String) -> Result<()> {
    out.clear();
    match r.u8()? {
        0 => {}
        SPAN_VALUE_TEXT => out.push_str(r.str()?),
        n @ 1..=32 => {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            for &byte in r.take(usize::from(n))? {
                out.push(char::from(HEX[usize::from(byte >> 4)]));
                out.push(char::from(HEX[usize::from(byte & 15)]));
            }
        }
        tag => return r.fail(format!("unknown span value tag {tag}")),
    }
    Ok(())
}

/// The span section of one profile, read whole (what a span selection needs).
#[derive(Debug, Default)]
pub(crate) struct SpanSection {
    pub names: Vec<String>,
    /// Per group of consecutive rows: how many rows, and its value of each name.
    pub groups: Vec<(usize, Vec<String>)>,
}

impl SpanSection {
    fn read(r: &mut Reader<'_>, n: usize) -> Result<Self> {
        let n_names = r.count(1, "span name")?;
        let mut names = Vec::with_capacity(n_names);
        for _ in 0..n_names {
            names.push(r.str()?.to_owned());
        }
        let n_groups = r.count(1 + n_names, "span group")?;
        let mut groups = Vec::with_capacity(n_groups);
        let mut rows_total = 0usize;
        for _ in 0..n_groups {
            let rows = usize::try_from(r.uvarint()?).unwrap_or(usize::MAX);
            rows_total = rows_total.saturating_add(rows);
            if rows_total > n {
                return r.fail(format!("span groups hold more than the {n} rows"));
            }
            let mut values = Vec::with_capacity(n_names);
            for _ in 0..n_names {
                let mut v = String::new();
                read_span_value(r, &mut v)?;
                values.push(v);
            }
            groups.push((rows, values));
        }
        if rows_total != n {
            return r.fail(format!("span groups hold {rows_total} rows, not {n}"));
        }
        Ok(SpanSection { names, groups })
    }

    /// The value of `name` in group `g` (empty: none).
    pub fn value(&self, g: usize, name: &str) -> &str {
        self.names
            .iter()
            .position(|n| n == name)
            .map_or("", |i| self.groups[g].1[i].as_str())
    }
}

/// Walks the span section's groups without allocating: the row counts, in row order.
#[derive(Clone)]
struct GroupCursor<'a> {
    r: Reader<'a>,
    n_names: usize,
    n_groups: usize,
    groups_left: usize,
    rows_left: usize,
    /// Rows not yet given to a group.
    rows_unassigned: u64,
}

impl<'a> GroupCursor<'a> {
    /// Reads the names and the group count at `r`, and moves `r` past the whole section, whose
    /// groups must hold `n` rows in all.
    fn new(r: &mut Reader<'a>, n: usize) -> Result<Self> {
        let n_names = r.count(1, "span name")?;
        for _ in 0..n_names {
            r.str()?;
        }
        let n_groups = r.count(1 + n_names, "span group")?;
        let cursor = GroupCursor {
            r: r.clone(),
            n_names,
            n_groups,
            groups_left: n_groups,
            rows_left: 0,
            rows_unassigned: n as u64,
        };
        let mut skip = cursor.clone();
        while skip.next_group()? {}
        if skip.rows_unassigned != 0 {
            return skip
                .r
                .fail(format!("span groups hold fewer than the {n} rows"));
        }
        r.pos = skip.r.pos;
        Ok(cursor)
    }

    /// Moves to the next group; false when there is none.
    fn next_group(&mut self) -> Result<bool> {
        if self.groups_left == 0 {
            return Ok(false);
        }
        self.groups_left -= 1;
        let rows = self.r.uvarint()?;
        if rows > self.rows_unassigned {
            return self.r.fail("span groups hold more rows than the profile");
        }
        self.rows_unassigned -= rows;
        self.rows_left = rows as usize;
        for _ in 0..self.n_names {
            match self.r.u8()? {
                0 => {}
                SPAN_VALUE_TEXT => {
                    self.r.str()?;
                }
                n @ 1..=32 => {
                    self.r.take(usize::from(n))?;
                }
                tag => return self.r.fail(format!("unknown span value tag {tag}")),
            }
        }
        Ok(true)
    }

    /// The index of the group the cursor is in.
    fn group(&self) -> usize {
        self.n_groups - self.groups_left - 1
    }
}

pub(crate) fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// How many stacks and label sets the tables that samples point into hold: every id read is
/// checked against these.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IdLimits {
    pub n_stacks: u32,
    pub n_label_sets: u32,
}

impl IdLimits {
    pub fn of(tables: &Tables) -> Self {
        IdLimits {
            n_stacks: tables.n_stacks() as u32,
            n_label_sets: tables.n_label_sets() as u32,
        }
    }
}

/// Which spans' samples a read keeps: per group of a profile's span section, whether its rows
/// count. Rows without a span never match a selection by span.
pub(crate) trait SpanSelect {
    /// Whether the rows of group `g` of `section` are kept.
    fn keeps(&self, section: &SpanSection, g: usize) -> bool;

    /// Whether the rows of a profile without spans are kept (each value the empty one).
    fn keeps_unspanned(&self) -> bool;
}

/// Calls `each(stack, labels, value)` for every sample of one profile encoded by
/// [`encode_samples`] at the reader's position, in stored order, without allocating. Always
/// inlined: the per-sample loop of every merge, whose `each` must be inlined into it (measured:
/// left to the compiler, a merge ran 1.6 times slower).
#[inline(always)]
pub(crate) fn for_each_sample(
    r: &mut Reader<'_>,
    limits: IdLimits,
    each: impl FnMut(StackId, LabelSetId, i64),
) -> Result<()> {
    for_each_sample_in(r, limits, None::<&NoSelect>, each)
}

/// A [`SpanSelect`] that is never asked (the type of "no selection").
pub(crate) struct NoSelect;

impl SpanSelect for NoSelect {
    fn keeps(&self, _: &SpanSection, _: usize) -> bool {
        true
    }

    fn keeps_unspanned(&self) -> bool {
        true
    }
}

/// [`for_each_sample`] over only the samples of the spans `select` keeps (all, with `None`).
/// Only a read with a selection reads the span section whole (and allocates for it).
#[inline(always)]
pub(crate) fn for_each_sample_in(
    r: &mut Reader<'_>,
    limits: IdLimits,
    select: Option<&impl SpanSelect>,
    mut each: impl FnMut(StackId, LabelSetId, i64),
) -> Result<()> {
    let header = Header::read(r)?;
    let n = header.n;
    if header.flags & SAMPLES_HAVE_SPANS != 0 {
        let section_start = r.pos;
        let mut cursor = GroupCursor::new(r, n)?;
        let keep: Option<Vec<bool>> = match select {
            None => None,
            Some(select) => {
                let mut section_reader = Reader {
                    bytes: &r.bytes[..r.pos],
                    pos: section_start,
                };
                let section = SpanSection::read(&mut section_reader, n)?;
                Some(
                    (0..section.groups.len())
                        .map(|g| select.keeps(&section, g))
                        .collect(),
                )
            }
        };
        return columns(r, &header, limits, &mut each, || {
            // A new group starts the stack deltas again.
            let mut started = false;
            while cursor.rows_left == 0 {
                if !cursor.next_group()? {
                    return Err(DecodeError {
                        offset: cursor.r.pos,
                        what: format!("span groups hold fewer than {n} rows"),
                    });
                }
                started = true;
            }
            cursor.rows_left -= 1;
            let kept = keep.as_ref().is_none_or(|k| k[cursor.group()]);
            Ok((started, kept))
        });
    }
    let kept = select.is_none_or(SpanSelect::keeps_unspanned);
    columns(r, &header, limits, &mut each, || Ok((false, kept)))
}

/// Reads past the body of one profile's encoded samples ([`encode_samples`]): the span
/// section and the columns, given what its header says (rows, flags, column lengths).
pub(crate) fn skip_body(
    r: &mut Reader<'_>,
    n: usize,
    flags: u8,
    stacks_len: usize,
    values_len: usize,
) -> Result<()> {
    if flags & SAMPLES_HAVE_SPANS != 0 {
        SpanSection::read(r, n)?;
    }
    r.take(stacks_len)?;
    r.take(values_len)?;
    if flags & SAMPLES_HAVE_LABELS != 0 {
        for _ in 0..n {
            r.uvarint()?;
        }
    }
    Ok(())
}

/// The header of one profile's encoded samples ([`encode_samples`]), up to the span section.
struct Header {
    n: usize,
    flags: u8,
    scale: i64,
    stacks_len: usize,
    values_len: u64,
}

impl Header {
    #[inline(always)]
    fn read(r: &mut Reader<'_>) -> Result<Header> {
        let n = r.count(2, "sample")?;
        let flags = r.u8()?;
        if flags & !(SAMPLES_HAVE_LABELS | SAMPLES_HAVE_SPANS) != 0 {
            return r.fail(format!("unknown sample flags {flags:#x}"));
        }
        let scale = r.uvarint()?;
        if scale == 0 || scale > i64::MAX as u64 {
            return r.fail(format!("bad value scale {scale}"));
        }
        Ok(Header {
            n,
            flags,
            scale: scale as i64,
            stacks_len: r.count(1, "stack column byte")?,
            values_len: r.uvarint()?,
        })
    }
}

/// The column walk of [`for_each_sample_in`], after the `header` (and span section): `row()`,
/// called once per row in order, says whether the row starts a span group (its stack delta
/// counts from 0) and whether it is kept.
#[inline(always)]
fn columns(
    r: &mut Reader<'_>,
    &Header {
        n,
        flags,
        scale,
        stacks_len,
        values_len,
    }: &Header,
    limits: IdLimits,
    each: &mut impl FnMut(StackId, LabelSetId, i64),
    mut row: impl FnMut() -> Result<(bool, bool)>,
) -> Result<()> {
    let stacks_start = r.pos;
    r.take(stacks_len)?;
    let mut stack_reader = Reader {
        bytes: &r.bytes[..r.pos],
        pos: stacks_start,
    };
    let values_start = r.pos;
    match usize::try_from(values_len) {
        Ok(len) if len <= r.remaining() => r.pos += len,
        _ => return r.fail("value column runs past the end"),
    }
    let mut value_reader = Reader {
        bytes: &r.bytes[..r.pos],
        pos: values_start,
    };
    let mut stack = 0u64;
    for _ in 0..n {
        let (restart, keep) = row()?;
        if restart {
            stack = 0;
        }
        stack = stack.saturating_add(stack_reader.uvarint()?);
        if stack >= u64::from(limits.n_stacks) {
            return stack_reader.fail(format!(
                "stack id {stack} is out of range ({} stacks)",
                limits.n_stacks
            ));
        }
        let Some(value) = value_reader.ivarint()?.checked_mul(scale) else {
            return value_reader.fail("value overflows after scaling");
        };
        let labels = if flags & SAMPLES_HAVE_LABELS != 0 {
            LabelSetId(r.below(u64::from(limits.n_label_sets), "label set id")? as u32)
        } else {
            LabelSetId::EMPTY
        };
        if keep {
            each(StackId(stack as u32), labels, value);
        }
    }
    if !stack_reader.is_empty() || !value_reader.is_empty() {
        return r.fail("sample columns are longer than their samples");
    }
    Ok(())
}

/// Calls `each(section, group, total)` for each span of one profile's encoded samples (see
/// [`encode_samples`]) that `select` keeps (every one, with `None`), with the sum of its
/// samples' values; rows without a span are skipped. Reads the span section and the value
/// column only.
pub(crate) fn for_each_span_total(
    r: &mut Reader<'_>,
    select: Option<&impl SpanSelect>,
    mut each: impl FnMut(&SpanSection, usize, i64),
) -> Result<()> {
    let Header {
        n,
        flags,
        scale,
        stacks_len,
        values_len,
    } = Header::read(r)?;
    if flags & SAMPLES_HAVE_SPANS == 0 {
        return Ok(());
    }
    let section = SpanSection::read(r, n)?;
    r.take(stacks_len)?;
    let values = match usize::try_from(values_len) {
        Ok(len) if len <= r.remaining() => r.take(len)?,
        _ => return r.fail("value column runs past the end"),
    };
    let mut values = Reader::new(values);
    for (g, (rows, span)) in section.groups.iter().enumerate() {
        let mut total = 0i64;
        for _ in 0..*rows {
            let Some(v) = values.ivarint()?.checked_mul(scale) else {
                return values.fail("value overflows after scaling");
            };
            total = total.wrapping_add(v);
        }
        if span.iter().any(|v| !v.is_empty()) && select.is_none_or(|s| s.keeps(&section, g)) {
            each(&section, g, total);
        }
    }
    Ok(())
}

/// Decodes one profile's samples (see [`encode_samples`]), its spans included.
pub(crate) fn decode_samples(r: &mut Reader<'_>, limits: IdLimits) -> Result<Samples> {
    let start = r.pos;
    let mut out = Samples::default();
    for_each_sample(r, limits, |s, l, v| {
        out.stacks.push(s);
        out.labels.push(l);
        out.values.push(v);
    })?;
    out.spans = read_spans_of(&r.bytes[start..r.pos], out.len())?;
    Ok(out)
}

/// The span column of one profile's encoded samples (already checked by a walk of them).
fn read_spans_of(bytes: &[u8], n: usize) -> Result<Option<SampleSpans>> {
    let mut r = Reader::new(bytes);
    if Header::read(&mut r)?.flags & SAMPLES_HAVE_SPANS == 0 {
        return Ok(None);
    }
    let section = SpanSection::read(&mut r, n)?;
    let mut builder = SpansBuilder::new(section.names);
    for (rows, values) in &section.groups {
        builder.push_n(values, *rows);
    }
    Ok(builder.finish())
}

/// Decodes only the samples of the spans `select` keeps, without their span column.
pub(crate) fn decode_selected(
    r: &mut Reader<'_>,
    limits: IdLimits,
    select: &impl SpanSelect,
) -> Result<Samples> {
    let mut out = Samples::default();
    for_each_sample_in(r, limits, Some(select), |s, l, v| {
        out.stacks.push(s);
        out.labels.push(l);
        out.values.push(v);
    })?;
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Tables

/// How many entries of each kind a [`Tables`] holds; the WAL logs what was interned past such
/// counts, and replay checks that the head is at exactly those counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TableCounts {
    pub strings: u32,
    pub mappings: u32,
    pub functions: u32,
    pub locations: u32,
    pub stacks: u32,
    pub label_sets: u32,
}

impl TableCounts {
    pub fn of(t: &Tables) -> Self {
        TableCounts {
            strings: t.n_strings() as u32,
            mappings: t.n_mappings() as u32,
            functions: t.n_functions() as u32,
            locations: t.n_locations() as u32,
            stacks: t.n_stacks() as u32,
            label_sets: t.n_label_sets() as u32,
        }
    }

    /// The counts of new, empty tables (the empty string, stack and label set).
    pub fn empty() -> Self {
        Self::of(&Tables::new())
    }

    fn as_array(self) -> [u32; 6] {
        [
            self.strings,
            self.mappings,
            self.functions,
            self.locations,
            self.stacks,
            self.label_sets,
        ]
    }
}

/// Writes the entries of `t` past `from`, in id order.
///
/// Layout: `from: 6 × uvarint` (strings, mappings, functions, locations, stacks, label sets),
/// `to: 6 × uvarint`, then the new strings (`len, bytes`), mappings (`memory_start,
/// memory_limit, file_offset, file, build_id: uvarint, flags: u8`), functions (`name,
/// system_name, filename: uvarint, start_line: ivarint`), locations (`mapping + 1 or 0,
/// address: uvarint, n_lines, n × (function: uvarint, line: ivarint)`), stacks (`n_frames,
/// n × location: uvarint`) and label sets (`n, n × (key: uvarint, kind: u8, 0 → str: uvarint,
/// 1 → value: ivarint, unit: uvarint)`).
pub(crate) fn encode_tables(t: &Tables, from: TableCounts, out: &mut Vec<u8>) {
    let to = TableCounts::of(t);
    for c in from.as_array() {
        put_uvarint(out, u64::from(c));
    }
    for c in to.as_array() {
        put_uvarint(out, u64::from(c));
    }
    for i in from.strings..to.strings {
        put_str(out, t.string(StringId(i)));
    }
    for i in from.mappings..to.mappings {
        let m = t.mapping(MappingId(i));
        put_mapping(out, m, m.file.0, m.build_id.0);
    }
    for i in from.functions..to.functions {
        let f = t.function(parca_profile::tables::FunctionId(i));
        put_uvarint(out, u64::from(f.name.0));
        put_uvarint(out, u64::from(f.system_name.0));
        put_uvarint(out, u64::from(f.filename.0));
        put_ivarint(out, f.start_line);
    }
    for i in from.locations..to.locations {
        let id = LocationId(i);
        let address = t.location_address(id);
        put_uvarint(out, address.mapping.map_or(0, |m| u64::from(m.0) + 1));
        put_uvarint(out, address.address);
        let lines = t.lines(id);
        put_uvarint(out, lines.len() as u64);
        for l in lines {
            put_uvarint(out, u64::from(l.function.0));
            put_ivarint(out, l.line);
        }
    }
    for i in from.stacks..to.stacks {
        let frames = t.stack(StackId(i));
        put_uvarint(out, frames.len() as u64);
        for f in frames {
            put_uvarint(out, u64::from(f.0));
        }
    }
    for i in from.label_sets..to.label_sets {
        put_label_set(out, t.label_set(LabelSetId(i)), &|s| s.0);
    }
}

/// Checks counts read from `r` (tables going from `from` to `to` entries) against what `r`
/// still holds, every entry taking at least a byte, and reserves room for them in `t`: hostile
/// counts cannot make us allocate.
fn reserve_entries(r: &Reader<'_>, t: &mut Tables, from: [u32; 6], to: [u32; 6]) -> Result<()> {
    if from.iter().zip(&to).any(|(f, t)| f > t) {
        return r.fail(format!("table counts go backwards: {from:?} → {to:?}"));
    }
    let total: u64 = from.iter().zip(&to).map(|(f, t)| u64::from(t - f)).sum();
    if total > r.remaining() as u64 {
        return r.fail(format!(
            "{total} table entries cannot fit in {} bytes",
            r.remaining()
        ));
    }
    t.reserve_symbols(
        (to[0] - from[0]) as usize,
        (to[2] - from[2]) as usize,
        (to[3] - from[3]) as usize,
    );
    Ok(())
}

/// That an entry just interned got the id of its place: a repeated entry means damage.
fn check_interned(r: &Reader<'_>, got: u32, want: u32, kind: &str) -> Result<()> {
    if got == want {
        Ok(())
    } else {
        r.fail(format!(
            "{kind} {want} repeats {kind} {got} (tables must hold distinct entries)"
        ))
    }
}

/// Interns into `t` the entries written by [`encode_tables`], checking that `t` is at the
/// counts they were written from, that every reference points to an earlier entry, and that
/// each entry gets the id it had (a repeated entry means damage).
pub(crate) fn decode_tables(r: &mut Reader<'_>, t: &mut Tables) -> Result<()> {
    let mut from = [0u32; 6];
    let mut to = [0u32; 6];
    for c in from.iter_mut().chain(to.iter_mut()) {
        *c = r.below(u64::from(u32::MAX), "table count")? as u32;
    }
    let have = TableCounts::of(t).as_array();
    if from != have {
        return r.fail(format!(
            "symbols continue tables of sizes {from:?}, but the tables have {have:?}"
        ));
    }
    reserve_entries(r, t, from, to)?;
    for want in from[0]..to[0] {
        let s = r.str()?;
        let got = t.intern_string(s).0;
        check_interned(r, got, want, "string")?;
    }
    let n_strings = u64::from(to[0]);
    for want in from[1]..to[1] {
        let mapping = decode_mapping(r, n_strings)?;
        let got = t.intern_mapping(mapping).0;
        check_interned(r, got, want, "mapping")?;
    }
    for want in from[2]..to[2] {
        let name = StringId(r.below(n_strings, "string id")? as u32);
        let system_name = StringId(r.below(n_strings, "string id")? as u32);
        let filename = StringId(r.below(n_strings, "string id")? as u32);
        let start_line = r.ivarint()?;
        let got = t
            .intern_function(Function {
                name,
                system_name,
                filename,
                start_line,
            })
            .0;
        check_interned(r, got, want, "function")?;
    }
    for want in from[3]..to[3] {
        let mapping = match r.below(u64::from(to[1]) + 1, "mapping id")? {
            0 => None,
            m => Some(MappingId(m as u32 - 1)),
        };
        let address = r.uvarint()?;
        let n = r.count(2, "line")?;
        let mut lines = Vec::with_capacity(n);
        for _ in 0..n {
            let function =
                parca_profile::tables::FunctionId(r.below(u64::from(to[2]), "function id")? as u32);
            let line = r.ivarint()?;
            lines.push(Line { function, line });
        }
        let got = t.intern_location(mapping, address, lines.into()).0;
        check_interned(r, got, want, "location")?;
    }
    let mut frames = Vec::new();
    for want in from[4]..to[4] {
        let n = r.count(1, "frame")?;
        frames.clear();
        for _ in 0..n {
            frames.push(LocationId(r.below(u64::from(to[3]), "location id")? as u32));
        }
        let got = t.intern_stack(&frames).0;
        check_interned(r, got, want, "stack")?;
    }
    for want in from[5]..to[5] {
        let labels = decode_label_set(r, n_strings)?;
        let got = t.intern_label_set(labels).0;
        check_interned(r, got, want, "label set")?;
    }
    Ok(())
}

/// Writes the whole of `t` for a block's `symbols` (format 4): the counts, then each table as
/// columns, each column `len: uvarint` then its bytes, and references as differences from the
/// entry before where neighbours are alike: what zstd compresses best. Entries keep their ids.
/// (Writing strings, functions and locations sorted saved 4% of a block's bytes on real
/// profiles but scattered a stack's frames in memory: a day's merge of one series ran 40%
/// slower.)
///
/// Layout: `to: 6 × uvarint` (strings, mappings, functions, locations, stacks, label sets, the
/// empty string, stack and label set included, as in [`encode_tables`]); strings: a column of
/// lengths and a column of bytes; mappings: one column, rows as [`encode_tables`] writes them;
/// functions: columns of name (ivarint difference from the name before), system name (ivarint
/// difference from its own name), filename (ivarint difference from the filename before) and
/// start line (ivarint difference from the one before); locations: columns of mapping (`+ 1`,
/// 0 none: uvarint), address (ivarint difference from the address before), line counts
/// (uvarint), line functions (ivarint difference from the line function before) and line
/// numbers (ivarint); stacks: a column of frame counts and one of frames (uvarint location
/// ids); label sets: one column, rows as [`encode_tables`] writes them.
pub(crate) fn encode_block_tables(t: &Tables, out: &mut Vec<u8>) {
    encode_block_tables_in(t, out, None);
}

/// [`encode_block_tables`] with the strings' and the stacks' layouts given (tests), or chosen.
#[expect(
    clippy::too_many_lines,
    reason = "writes the symbols file's columns in the order the format lists them"
)]
fn encode_block_tables_in(t: &Tables, out: &mut Vec<u8>, layouts: Option<(u8, u8)>) {
    let from = TableCounts::empty();
    let to = TableCounts::of(t);
    for c in to.as_array() {
        put_uvarint(out, u64::from(c));
    }
    let mut col = Vec::new();
    let flush = |col: &mut Vec<u8>, out: &mut Vec<u8>| {
        put_uvarint(out, col.len() as u64);
        out.extend_from_slice(col);
        col.clear();
    };
    // Strings sorted or in id order, whichever packs smaller with the functions' columns
    // that refer to them, sorted only while they fit in a core's cache (`SORTED_STRINGS_MAX_BYTES`).
    let identity: Vec<u32> = (0..to.strings).collect();
    let plain = plain_strings(t, from.strings..to.strings);
    let plain_functions = function_columns(t, from.functions..to.functions, &identity);
    // Sorted only where it may be chosen: strings that fit, and tests that ask for it.
    let sorted = match layouts {
        Some((strings, _)) => strings == STRINGS_SORTED,
        None => plain[1].len() <= SORTED_STRINGS_MAX_BYTES,
    }
    .then(|| {
        let sorted = SortedStrings::of(t, from.strings..to.strings, from.label_sets..to.label_sets);
        let functions = function_columns(t, from.functions..to.functions, &sorted.rank);
        (sorted, functions)
    })
    .filter(|(sorted, functions)| {
        layouts.is_some()
            || packed_size(&sorted.columns()) + packed_size(functions)
                < packed_size(&plain) + packed_size(&plain_functions)
    });
    let (layout, string_columns, function_columns, rank) = match sorted {
        Some((sorted, functions)) => (
            STRINGS_SORTED,
            sorted.columns().map(<[u8]>::to_vec).to_vec(),
            functions,
            sorted.rank,
        ),
        None => (
            STRINGS_IN_ID_ORDER,
            plain.to_vec(),
            plain_functions,
            identity,
        ),
    };
    out.push(layout);
    for column in &string_columns {
        col.extend_from_slice(column);
        flush(&mut col, out);
    }
    let rank = |id: StringId| rank[id.0 as usize];
    // Mappings are few: rows.
    for i in from.mappings..to.mappings {
        let m = t.mapping(MappingId(i));
        put_mapping(&mut col, m, rank(m.file), rank(m.build_id));
    }
    flush(&mut col, out);
    for column in &function_columns {
        col.extend_from_slice(column);
        flush(&mut col, out);
    }
    let locations = || (from.locations..to.locations).map(LocationId);
    for id in locations() {
        let m = t.location_address(id).mapping;
        put_uvarint(&mut col, m.map_or(0, |m| u64::from(m.0) + 1));
    }
    flush(&mut col, out);
    let mut near = NearbyLocations::default();
    for id in locations() {
        let address = t.location_address(id).address;
        let base = near.address_base(t, t.lines(id));
        put_ivarint(&mut col, address.wrapping_sub(base) as i64);
        near.saw_address(t, t.lines(id), address);
    }
    flush(&mut col, out);
    for id in locations() {
        put_uvarint(&mut col, t.lines(id).len() as u64);
    }
    flush(&mut col, out);
    let mut ids = InOrder::default();
    for id in locations() {
        for l in t.lines(id) {
            ids.put(&mut col, i64::from(l.function.0));
        }
    }
    flush(&mut col, out);
    let mut near = NearbyLocations::default();
    for id in locations() {
        for l in t.lines(id) {
            let base = near.line_base(l.function, t.function(l.function));
            put_ivarint(&mut col, l.line.wrapping_sub(base));
            near.saw_line(l.function, t.function(l.function), l.line);
        }
    }
    flush(&mut col, out);
    // Stacks as whole frame lists or as references, whichever packs smaller.
    let stacks = from.stacks..to.stacks;
    let candidates = [
        (STACKS_WHOLE, whole_stacks(t, stacks.clone()).to_vec()),
        (
            STACKS_BY_REFERENCE,
            StackReferences::of(t, stacks.clone(), false)
                .columns()
                .to_vec(),
        ),
        (
            STACKS_BY_REFERENCE_IN_ORDER,
            StackReferences::of(t, stacks, true).columns().to_vec(),
        ),
    ];
    let (layout, columns) = candidates
        .into_iter()
        .filter(|(layout, _)| layouts.is_none_or(|(_, l)| l == *layout))
        .min_by_key(|(_, columns)| packed_size(columns))
        .expect("a candidate of each layout");
    out.push(layout);
    for column in &columns {
        col.extend_from_slice(column);
        flush(&mut col, out);
    }
    for i in from.label_sets..to.label_sets {
        put_label_set(&mut col, t.label_set(LabelSetId(i)), &rank);
    }
    flush(&mut col, out);
}

/// Layouts of the strings table (block format 6; a byte before it): whole, in id order, or
/// sorted ([`SortedStrings`]), whichever packs smaller with the columns that refer to strings.
const STRINGS_IN_ID_ORDER: u8 = 0;
const STRINGS_SORTED: u8 = 1;

/// Bytes of strings up to which they may be sorted. A merge names the frames it read through
/// the functions, in their order; sorted strings are then read in no order, which costs
/// nothing while they fit in a core's cache and cost the storage bench's day of `large.cpu`
/// (600 KB of names) a tenth of its merge time.
const SORTED_STRINGS_MAX_BYTES: usize = 256 << 10;

/// Layouts of the stacks table (block format 6; a byte before it): whole frame lists, or
/// references to the stacks they share callers with ([`StackReferences`]) with their own
/// frames as location ids or [`InOrder`], whichever packs smaller. Programs whose stacks share
/// little (or whose leaves repeat more than their callers) keep whole lists.
const STACKS_WHOLE: u8 = 0;
const STACKS_BY_REFERENCE: u8 = 1;
const STACKS_BY_REFERENCE_IN_ORDER: u8 = 2;

/// About how many bytes `columns` take compressed: the measure by which a layout is chosen
/// (zstd's fast level 3 on each; the block's symbols are compressed harder, as a whole).
fn packed_size<C: AsRef<[u8]>>(columns: &[C]) -> usize {
    columns
        .iter()
        .map(|c| {
            let c = c.as_ref();
            zstd::bulk::compress(c, 3).map_or(c.len(), |z| z.len())
        })
        .sum()
}

/// The strings `ids` whole, in id order: a column of lengths and one of their bytes.
fn plain_strings(t: &Tables, ids: std::ops::Range<u32>) -> [Vec<u8>; 2] {
    let (mut lens, mut bytes) = (Vec::new(), Vec::new());
    for i in ids {
        let s = t.string(StringId(i));
        put_uvarint(&mut lens, s.len() as u64);
        bytes.extend_from_slice(s.as_bytes());
    }
    [lens, bytes]
}

/// The functions' columns with strings numbered by `rank`: name (difference from the name
/// before), system name (difference from its own name), filename (difference from the
/// filename before), start line (difference from the one before).
fn function_columns(t: &Tables, ids: std::ops::Range<u32>, rank: &[u32]) -> [Vec<u8>; 4] {
    let mut columns: [Vec<u8>; 4] = Default::default();
    let string = |id: StringId| i64::from(rank[id.0 as usize]);
    let (mut name, mut filename, mut start_line) = (0i64, 0i64, 0i64);
    for i in ids {
        let f = t.function(FunctionId(i));
        put_ivarint(&mut columns[0], string(f.name) - name);
        name = string(f.name);
        put_ivarint(&mut columns[1], string(f.system_name) - name);
        put_ivarint(&mut columns[2], string(f.filename) - filename);
        filename = string(f.filename);
        put_ivarint(&mut columns[3], f.start_line.wrapping_sub(start_line));
        start_line = f.start_line;
    }
    columns
}

/// The stacks `ids` as whole frame lists: a column of frame counts and one of location ids,
/// leaf first.
fn whole_stacks(t: &Tables, ids: std::ops::Range<u32>) -> [Vec<u8>; 2] {
    let (mut counts, mut frames) = (Vec::new(), Vec::new());
    for i in ids {
        let stack = t.stack(StackId(i));
        put_uvarint(&mut counts, stack.len() as u64);
        for f in stack {
            put_uvarint(&mut frames, u64::from(f.0));
        }
    }
    [counts, frames]
}

/// The strings table sorted (block format 6), so that neighbours share their beginnings
/// (`net/http.(*conn).serve`, `net/http.(*conn).readRequest`): each string as how many bytes it
/// shares with the one before and the rest. Only the symbols refer to strings, so the new order
/// costs nothing elsewhere; the strings of labels come first in the order they had, which
/// keeps each label set's order.
struct SortedStrings {
    /// Each string's id in the sorted table, by its id in the tables written.
    rank: Vec<u32>,
    shared: Vec<u8>,
    lens: Vec<u8>,
    bytes: Vec<u8>,
}

impl SortedStrings {
    fn of(t: &Tables, ids: std::ops::Range<u32>, label_sets: std::ops::Range<u32>) -> Self {
        // The strings of labels keep their order, first: a label set's labels are kept in the
        // order of their strings' ids (`Tables::intern_labels`), which readers show.
        let mut in_labels = vec![false; ids.end as usize];
        for i in label_sets {
            for l in t.label_set(LabelSetId(i)) {
                in_labels[l.key.0 as usize] = true;
                match l.value {
                    LabelValue::Str(s) => in_labels[s.0 as usize] = true,
                    LabelValue::Num { unit, .. } => in_labels[unit.0 as usize] = true,
                }
            }
        }
        let mut sorted: Vec<u32> = ids.clone().collect();
        sorted.sort_unstable_by(|&a, &b| {
            let key = |id: u32| {
                (
                    !in_labels[id as usize],
                    (!in_labels[id as usize]).then(|| t.string(StringId(id))),
                    id,
                )
            };
            key(a).cmp(&key(b))
        });
        let mut out = SortedStrings {
            rank: (0..ids.end).collect(),
            shared: Vec::new(),
            lens: Vec::new(),
            bytes: Vec::new(),
        };
        let mut prev: &[u8] = b"";
        for (k, &id) in sorted.iter().enumerate() {
            out.rank[id as usize] = ids.start + k as u32;
            let s = t.string(StringId(id)).as_bytes();
            let keep = s.iter().zip(prev).take_while(|(a, b)| a == b).count();
            put_uvarint(&mut out.shared, keep as u64);
            put_uvarint(&mut out.lens, (s.len() - keep) as u64);
            out.bytes.extend_from_slice(&s[keep..]);
            prev = s;
        }
        out
    }

    /// The three columns in the order they are written.
    fn columns(&self) -> [&[u8]; 3] {
        [&self.shared, &self.lens, &self.bytes]
    }
}

/// Ids that mostly come in the order their entries were added (block format 6: the functions
/// of locations' lines, the frames of stacks): 0 for the next id not yet written, else the
/// zigzag difference from the id before, plus one.
#[derive(Default)]
struct InOrder {
    prev: i64,
    next_new: i64,
}

impl InOrder {
    fn put(&mut self, out: &mut Vec<u8>, id: i64) {
        if id == self.next_new {
            put_uvarint(out, 0);
        } else {
            let d = id.wrapping_sub(self.prev);
            put_uvarint(out, ((d << 1) ^ (d >> 63)) as u64 + 1);
        }
        self.saw(id);
    }

    fn read(&mut self, r: &mut Reader<'_>) -> Result<i64> {
        let v = r.uvarint()?;
        let id = if v == 0 {
            self.next_new
        } else {
            let z = v - 1;
            self.prev.wrapping_add((z >> 1) as i64 ^ -((z & 1) as i64))
        };
        self.saw(id);
        Ok(id)
    }

    fn saw(&mut self, id: i64) {
        if id >= self.next_new {
            self.next_new = id.saturating_add(1);
        }
        self.prev = id;
    }
}

/// What a location's address and line numbers are written relative to (block format 6): the
/// last location in the same function, whose code lies near, else the location before; the
/// function's last line written, else its start line.
#[derive(Default)]
struct NearbyLocations {
    /// The last address seen per outermost function of a location.
    address_in: HashMap<FunctionId, u64>,
    /// The last address seen per file of a location's outermost function.
    address_in_file: HashMap<StringId, u64>,
    /// The last address seen.
    address: u64,
    /// The last line number seen per function.
    line_in: HashMap<FunctionId, i64>,
    /// The last line number seen per file.
    line_in_file: HashMap<StringId, i64>,
}

impl NearbyLocations {
    /// The function whose code holds a location's address: its outermost line's (lines are
    /// innermost first).
    fn outermost(lines: &[Line]) -> Option<FunctionId> {
        lines.last().map(|l| l.function)
    }

    fn address_base(&self, t: &Tables, lines: &[Line]) -> u64 {
        let Some(f) = Self::outermost(lines) else {
            return self.address;
        };
        self.address_in
            .get(&f)
            .or_else(|| self.address_in_file.get(&t.function(f).filename))
            .copied()
            .unwrap_or(self.address)
    }

    fn saw_address(&mut self, t: &Tables, lines: &[Line], address: u64) {
        if let Some(f) = Self::outermost(lines) {
            self.address_in.insert(f, address);
            self.address_in_file.insert(t.function(f).filename, address);
        }
        self.address = address;
    }

    fn line_base(&self, id: FunctionId, function: &Function) -> i64 {
        match (self.line_in.get(&id), function.start_line) {
            (Some(&line), _) => line,
            (None, 0) => self
                .line_in_file
                .get(&function.filename)
                .copied()
                .unwrap_or(0),
            (None, start) => start,
        }
    }

    fn saw_line(&mut self, id: FunctionId, function: &Function, line: i64) {
        self.line_in.insert(id, line);
        self.line_in_file.insert(function.filename, line);
    }
}

/// The stacks table written as references (block format 6): each stack as the root-side frames
/// it shares with an earlier stack (which one, as how many stacks back, and how many frames)
/// and its own frames, leaf first. Stacks of one program share their callers, so most of a
/// stack is a reference: on real profiles the table takes a third of the bytes it took as whole
/// frame lists.
struct StackReferences {
    /// Per stack: how many stacks back the one it shares frames with is (0: none).
    refs: Vec<u8>,
    /// Per stack with a reference: how many root-side frames it shares.
    commons: Vec<u8>,
    /// Per stack: how many frames of its own.
    n_frames: Vec<u8>,
    /// The frames of their own, leaf first, as location ids.
    frames: Vec<u8>,
}

impl StackReferences {
    /// Each stack of `stacks` referring to the earlier stack that shares most of its root-side
    /// frames (the latest of those, to keep references short), found in a tree of the
    /// stacks' frames from the root.
    fn of(t: &Tables, stacks: std::ops::Range<u32>, in_order: bool) -> Self {
        let mut out = StackReferences {
            refs: Vec::new(),
            commons: Vec::new(),
            n_frames: Vec::new(),
            frames: Vec::new(),
        };
        // Tree nodes by (parent, location), and the latest stack through each node.
        let mut children: HashMap<(u32, LocationId), u32> = HashMap::new();
        let mut latest: Vec<u32> = vec![0];
        let mut frame_ids = InOrder::default();
        for i in stacks {
            let frames = t.stack(StackId(i));
            let mut node = 0u32;
            let mut common = 0usize;
            for f in frames.iter().rev() {
                match children.get(&(node, *f)) {
                    Some(&child) => {
                        node = child;
                        common += 1;
                    }
                    None => break,
                }
            }
            let back = if common == 0 {
                0
            } else {
                i - latest[node as usize]
            };
            put_uvarint(&mut out.refs, u64::from(back));
            if back > 0 {
                // The frames of the stack referred to that are not shared: mostly a few leaves.
                let shared = t.stack(StackId(i - back)).len();
                put_uvarint(&mut out.commons, (shared - common) as u64);
            }
            let own = &frames[..frames.len() - common];
            put_uvarint(&mut out.n_frames, own.len() as u64);
            for f in own {
                if in_order {
                    frame_ids.put(&mut out.frames, i64::from(f.0));
                } else {
                    put_uvarint(&mut out.frames, u64::from(f.0));
                }
            }
            // Record the stack on its path, adding the nodes of its own frames.
            let mut node = 0u32;
            latest[0] = i;
            for f in frames.iter().rev() {
                let next = latest.len() as u32;
                node = *children.entry((node, *f)).or_insert(next);
                if node == next {
                    latest.push(i);
                } else {
                    latest[node as usize] = i;
                }
            }
        }
        out
    }

    /// The four columns in the order they are written.
    fn columns(self) -> [Vec<u8>; 4] {
        [self.refs, self.commons, self.n_frames, self.frames]
    }
}

/// Appends a mapping as [`encode_tables`] writes it, with its strings' ids given.
fn put_mapping(out: &mut Vec<u8>, m: &Mapping, file: u32, build_id: u32) {
    put_uvarint(out, m.memory_start);
    put_uvarint(out, m.memory_limit);
    put_uvarint(out, m.file_offset);
    put_uvarint(out, u64::from(file));
    put_uvarint(out, u64::from(build_id));
    out.push(
        u8::from(m.has_functions)
            | u8::from(m.has_filenames) << 1
            | u8::from(m.has_line_numbers) << 2
            | u8::from(m.has_inline_frames) << 3,
    );
}

/// Appends a label set as [`encode_tables`] writes it, its strings' ids through `string`.
fn put_label_set(out: &mut Vec<u8>, labels: &[Label], string: &dyn Fn(StringId) -> u32) {
    put_uvarint(out, labels.len() as u64);
    for l in labels {
        put_uvarint(out, u64::from(string(l.key)));
        match l.value {
            LabelValue::Str(s) => {
                out.push(0);
                put_uvarint(out, u64::from(string(s)));
            }
            LabelValue::Num { value, unit } => {
                out.push(1);
                put_ivarint(out, value);
                put_uvarint(out, u64::from(string(unit)));
            }
        }
    }
}

/// Interns into the empty `t` the tables written by [`encode_block_tables`], with the checks
/// of [`decode_tables`]: every reference to an earlier entry, each entry new.
#[expect(
    clippy::too_many_lines,
    reason = "reads the symbols file's columns in the order the format writes them; split, each part would need the whole reader state"
)]
pub(crate) fn decode_block_tables<'a>(
    r: &mut Reader<'a>,
    t: &mut Tables,
    version: u32,
) -> Result<()> {
    let from = TableCounts::empty().as_array();
    if TableCounts::of(t).as_array() != from {
        return r.fail("block symbols are read into empty tables only");
    }
    let mut to = [0u32; 6];
    for c in to.iter_mut() {
        *c = r.below(u64::from(u32::MAX), "table count")? as u32;
    }
    reserve_entries(r, t, from, to)?;
    let column = |r: &mut Reader<'a>| -> Result<Reader<'a>> {
        let len = r.count(1, "column length")?;
        Ok(Reader::new(r.take(len)?))
    };
    let n_strings = u64::from(to[0]);
    // Version 6 writes a layout byte, then the strings in id order or sorted, each as the
    // bytes it shares with the one before and the rest (`SortedStrings`); 4 and 5 in id order.
    let strings_layout = if version >= 6 {
        r.u8()?
    } else {
        STRINGS_IN_ID_ORDER
    };
    let sorted = match strings_layout {
        STRINGS_IN_ID_ORDER => false,
        STRINGS_SORTED => true,
        other => return r.fail(format!("unknown strings layout {other}")),
    };
    let mut shared = if sorted { column(r)? } else { Reader::new(&[]) };
    let (mut lens, mut bytes) = (column(r)?, column(r)?);
    let mut string = Vec::new();
    for want in from[0]..to[0] {
        if sorted {
            let keep = shared.uvarint()?;
            if keep > string.len() as u64 {
                return shared.fail(format!(
                    "a string shares {keep} bytes with one of {}",
                    string.len()
                ));
            }
            string.truncate(keep as usize);
        } else {
            string.clear();
        }
        let n = lens.uvarint()?;
        if n > bytes.remaining() as u64 {
            return lens.fail(format!("a string of {n} bytes cannot fit in what remains"));
        }
        string.extend_from_slice(bytes.take(n as usize)?);
        let s = std::str::from_utf8(&string).or_else(|_| bytes.fail("string is not UTF-8"))?;
        let got = t.intern_string(s).0;
        check_interned(&bytes, got, want, "string")?;
    }
    let mut mappings = column(r)?;
    for want in from[1]..to[1] {
        let m = decode_mapping(&mut mappings, n_strings)?;
        let got = t.intern_mapping(m).0;
        check_interned(&mappings, got, want, "mapping")?;
    }
    let (mut names, mut system_names, mut filenames, mut start_lines) =
        (column(r)?, column(r)?, column(r)?, column(r)?);
    let string_at = |r: &Reader<'_>, id: i64| -> Result<StringId> {
        if (0..n_strings as i64).contains(&id) {
            Ok(StringId(id as u32))
        } else {
            r.fail(format!(
                "string id {id} is out of range (limit {n_strings})"
            ))
        }
    };
    let (mut name, mut filename, mut start_line) = (0i64, 0i64, 0i64);
    for want in from[2]..to[2] {
        name = name.wrapping_add(names.ivarint()?);
        let system_name = name.wrapping_add(system_names.ivarint()?);
        filename = filename.wrapping_add(filenames.ivarint()?);
        start_line = start_line.wrapping_add(start_lines.ivarint()?);
        let got = t
            .intern_function(Function {
                name: string_at(&names, name)?,
                system_name: string_at(&system_names, system_name)?,
                filename: string_at(&filenames, filename)?,
                start_line,
            })
            .0;
        check_interned(&names, got, want, "function")?;
    }
    let (mut maps, mut addresses, mut n_lines, mut functions, mut line_numbers) =
        (column(r)?, column(r)?, column(r)?, column(r)?, column(r)?);
    // Version 6 writes addresses and lines relative to nearby locations (`NearbyLocations`);
    // 4 and 5 addresses relative to the address before, lines as they are.
    let nearby = version >= 6;
    let mut near = NearbyLocations::default();
    let mut function_ids = InOrder::default();
    let (mut address, mut function) = (0u64, 0i64);
    let mut lines = Vec::new();
    for want in from[3]..to[3] {
        let mapping = match maps.below(u64::from(to[1]) + 1, "mapping id")? {
            0 => None,
            m => Some(MappingId(m as u32 - 1)),
        };
        let address_delta = addresses.ivarint()? as u64;
        let n = n_lines.uvarint()?;
        if n > functions.remaining() as u64 {
            return functions.fail(format!("{n} lines cannot fit in what remains"));
        }
        lines.clear();
        for _ in 0..n {
            function = if nearby {
                function_ids.read(&mut functions)?
            } else {
                function.wrapping_add(functions.ivarint()?)
            };
            if !(0..i64::from(to[2])).contains(&function) {
                return functions.fail(format!(
                    "function id {function} is out of range (limit {})",
                    to[2]
                ));
            }
            let function = FunctionId(function as u32);
            let mut line = line_numbers.ivarint()?;
            if nearby {
                line = line.wrapping_add(near.line_base(function, t.function(function)));
                near.saw_line(function, t.function(function), line);
            }
            lines.push(Line { function, line });
        }
        if nearby {
            address = near.address_base(t, &lines).wrapping_add(address_delta);
            near.saw_address(t, &lines, address);
        } else {
            address = address.wrapping_add(address_delta);
        }
        let got = t
            .intern_location(mapping, address, lines.as_slice().into())
            .0;
        check_interned(&maps, got, want, "location")?;
    }
    // Version 6 writes a layout byte, then the stacks as whole frame lists or as references
    // (`StackReferences`); 4 and 5 as whole frame lists.
    let stacks_layout = if version >= 6 { r.u8()? } else { STACKS_WHOLE };
    let (by_reference, in_order) = match stacks_layout {
        STACKS_WHOLE => (false, false),
        STACKS_BY_REFERENCE => (true, false),
        STACKS_BY_REFERENCE_IN_ORDER => (true, true),
        other => return r.fail(format!("unknown stacks layout {other}")),
    };
    let none = || Reader::new(&[]);
    let (mut refs, mut commons) = if by_reference {
        (column(r)?, column(r)?)
    } else {
        (none(), none())
    };
    let (mut n_frames, mut frames_col) = (column(r)?, column(r)?);
    let mut frames = Vec::new();
    let mut frame_ids = InOrder::default();
    for want in from[4]..to[4] {
        frames.clear();
        // The frames of its own, leaf first, then the root-side frames it shares.
        let back = if by_reference {
            refs.below(u64::from(want), "stack reference")? as u32
        } else {
            0
        };
        let n = n_frames.uvarint()?;
        if n > frames_col.remaining() as u64 {
            return frames_col.fail(format!("{n} frames cannot fit in what remains"));
        }
        for _ in 0..n {
            let id = if in_order {
                frame_ids.read(&mut frames_col)?
            } else {
                frames_col.uvarint()? as i64
            };
            if !(0..i64::from(to[3])).contains(&id) {
                return frames_col.fail(format!(
                    "location id {id} is out of range (limit {})",
                    to[3]
                ));
            }
            frames.push(LocationId(id as u32));
        }
        if back > 0 {
            let shared = t.stack(StackId(want - back));
            let common = shared.len()
                - commons.below(shared.len() as u64 + 1, "unshared frame count")? as usize;
            frames.extend_from_slice(&shared[shared.len() - common..]);
        }
        let got = t.intern_stack(&frames).0;
        check_interned(&frames_col, got, want, "stack")?;
    }
    let mut label_sets = column(r)?;
    for want in from[5]..to[5] {
        let labels = decode_label_set(&mut label_sets, n_strings)?;
        let got = t.intern_label_set(labels).0;
        check_interned(&label_sets, got, want, "label set")?;
    }
    for (c, name) in [
        (&shared, "shared string prefixes"),
        (&lens, "string lengths"),
        (&bytes, "strings"),
        (&mappings, "mappings"),
        (&names, "function names"),
        (&system_names, "system names"),
        (&filenames, "filenames"),
        (&start_lines, "start lines"),
        (&maps, "location mappings"),
        (&addresses, "addresses"),
        (&n_lines, "line counts"),
        (&functions, "line functions"),
        (&line_numbers, "line numbers"),
        (&refs, "stack references"),
        (&commons, "shared frame counts"),
        (&n_frames, "frame counts"),
        (&frames_col, "frames"),
        (&label_sets, "label sets"),
    ] {
        if !c.is_empty() {
            return c.fail(format!(
                "the {name} column has {} bytes too many",
                c.remaining()
            ));
        }
    }
    Ok(())
}

/// A mapping as [`encode_tables`] writes it.
fn decode_mapping(r: &mut Reader<'_>, n_strings: u64) -> Result<Mapping> {
    let memory_start = r.uvarint()?;
    let memory_limit = r.uvarint()?;
    let file_offset = r.uvarint()?;
    let file = StringId(r.below(n_strings, "string id")? as u32);
    let build_id = StringId(r.below(n_strings, "string id")? as u32);
    let flags = r.u8()?;
    Ok(Mapping {
        memory_start,
        memory_limit,
        file_offset,
        file,
        build_id,
        has_functions: flags & 1 != 0,
        has_filenames: flags & 2 != 0,
        has_line_numbers: flags & 4 != 0,
        has_inline_frames: flags & 8 != 0,
    })
}

/// A label set as [`encode_tables`] writes it.
fn decode_label_set(r: &mut Reader<'_>, n_strings: u64) -> Result<Vec<Label>> {
    let n = r.count(3, "label")?;
    let mut labels = Vec::with_capacity(n);
    for _ in 0..n {
        let key = StringId(r.below(n_strings, "string id")? as u32);
        let value = match r.u8()? {
            0 => LabelValue::Str(StringId(r.below(n_strings, "string id")? as u32)),
            1 => {
                let value = r.ivarint()?;
                let unit = StringId(r.below(n_strings, "string id")? as u32);
                LabelValue::Num { value, unit }
            }
            k => return r.fail(format!("unknown label value kind {k}")),
        };
        labels.push(Label { key, value });
    }
    Ok(labels)
}

// ---------------------------------------------------------------------------------------------
// File footer

/// Bytes of the footer that ends every block file: `magic: [u8; 4]`, `version: u32 LE`,
/// `crc32: u32 LE` (IEEE, over every byte of the file before it, magic and version included).
pub(crate) const FOOTER_BYTES: usize = 12;

/// The block format's version, written by this build. Version 2 adds each series'
/// `drop_frames` and `keep_frames` to the index; version 3 the span section of a profile's
/// samples (flag 2 of [`encode_samples`]), which earlier builds cannot read; version 4 frames
/// of `profiles` shared by consecutive series and the index's series entries in compressed
/// pages, their columns as differences; version 5 the summaries of 5-minute and hour windows
/// (`crate::summary`), their profiles in frames of their own and their entries in a section
/// of the index after the postings; version 6 the stacks table as references to the stacks
/// they share callers with ([`encode_block_tables`]).
pub(crate) const FORMAT_VERSION: u32 = 6;

/// The oldest version this build reads.
pub(crate) const OLDEST_FORMAT_VERSION: u32 = 1;

/// Appends the footer to a file's bytes.
pub(crate) fn seal(magic: &[u8; 4], out: &mut Vec<u8>) {
    out.extend_from_slice(magic);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    let crc = crc32fast::hash(out);
    out.extend_from_slice(&crc.to_le_bytes());
}

/// Checks a footer alone (magic and format version), for a file read by ranges whose whole
/// checksum cannot be computed without reading it all.
pub(crate) fn check_footer(magic: &[u8; 4], footer: &[u8]) -> std::result::Result<(), String> {
    if footer.len() != FOOTER_BYTES {
        return Err(format!(
            "file is shorter than its {FOOTER_BYTES}-byte footer"
        ));
    }
    if &footer[..4] != magic {
        return Err(format!(
            "bad magic {:02x?} in its footer (expected {:?})",
            &footer[..4],
            String::from_utf8_lossy(magic)
        ));
    }
    let version = u32::from_le_bytes([footer[4], footer[5], footer[6], footer[7]]);
    if !(OLDEST_FORMAT_VERSION..=FORMAT_VERSION).contains(&version) {
        return Err(format!(
            "format version {version} is not supported (this build reads \
             {OLDEST_FORMAT_VERSION} to {FORMAT_VERSION})"
        ));
    }
    Ok(())
}

/// Checks a sealed file's footer and checksum and returns the bytes before the footer.
pub(crate) fn unseal<'a>(
    magic: &[u8; 4],
    bytes: &'a [u8],
) -> std::result::Result<&'a [u8], String> {
    let Some(body_len) = bytes.len().checked_sub(FOOTER_BYTES) else {
        return Err(format!(
            "file of {} bytes is shorter than its {FOOTER_BYTES}-byte footer",
            bytes.len()
        ));
    };
    let footer = &bytes[body_len..];
    if &footer[..4] != magic {
        return Err(format!(
            "bad magic {:02x?} at byte {body_len} (expected {:?})",
            &footer[..4],
            String::from_utf8_lossy(magic)
        ));
    }
    let stored = u32::from_le_bytes([footer[8], footer[9], footer[10], footer[11]]);
    let actual = crc32fast::hash(&bytes[..body_len + 8]);
    if stored != actual {
        return Err(format!(
            "checksum mismatch (stored {stored:#010x}, computed {actual:#010x})"
        ));
    }
    let version = u32::from_le_bytes([footer[4], footer[5], footer[6], footer[7]]);
    if !(OLDEST_FORMAT_VERSION..=FORMAT_VERSION).contains(&version) {
        return Err(format!(
            "format version {version} is not supported (this build reads \
             {OLDEST_FORMAT_VERSION} to {FORMAT_VERSION})"
        ));
    }
    Ok(&bytes[..body_len])
}

#[cfg(test)]
#[allow(
    clippy::too_many_lines,
    reason = "tests are scenarios read top to bottom; the line budget is for product code"
)]
mod tests {
    use super::*;

    fn tables_with_symbols() -> (Tables, Samples) {
        let mut t = Tables::new();
        let main = t.intern_string("main");
        let file = t.intern_string("/bin/app");
        let m = t.intern_mapping(Mapping {
            memory_start: 0x1000,
            memory_limit: 0x9000,
            file_offset: 0,
            file,
            build_id: StringId::EMPTY,
            has_functions: true,
            has_filenames: false,
            has_line_numbers: true,
            has_inline_frames: false,
        });
        let f = t.intern_function(Function {
            name: main,
            system_name: main,
            filename: file,
            start_line: -3,
        });
        let a = t.intern_location(
            Some(m),
            0x1234,
            vec![Line {
                function: f,
                line: 7,
            }]
            .into(),
        );
        let b = t.intern_location(None, 0xdead, Box::default());
        let s1 = t.intern_stack(&[a, b]);
        let s2 = t.intern_stack(&[b]);
        let key = t.intern_string("bytes");
        let ls = t.intern_label_set(vec![Label {
            key,
            value: LabelValue::Num {
                value: -5,
                unit: key,
            },
        }]);
        let samples = Samples {
            stacks: vec![s2, s1, StackId::EMPTY, s1],
            labels: vec![LabelSetId::EMPTY, LabelSetId::EMPTY, LabelSetId::EMPTY, ls],
            values: vec![30, -20, 10_000_000_000, 50],
            diff_base: None,
            spans: None,
        };
        (t, samples)
    }

    #[test]
    fn varints_round_trip_at_the_edges() {
        let mut out = Vec::new();
        let vals = [0i64, 1, -1, 63, -64, 64, i64::MAX, i64::MIN];
        for v in vals {
            put_ivarint(&mut out, v);
        }
        put_uvarint(&mut out, u64::MAX);
        let mut r = Reader::new(&out);
        for v in vals {
            assert_eq!(r.ivarint().expect("decodes"), v);
        }
        assert_eq!(r.uvarint().expect("decodes"), u64::MAX);
        assert!(r.is_empty());
        assert!(Reader::new(&[0xff; 11]).uvarint().is_err());
        assert!(Reader::new(&[0x80]).uvarint().is_err());
    }

    #[test]
    fn block_tables_round_trip_as_columns_and_refuse_damage_without_panicking() {
        let (t, _) = tables_with_symbols();
        // Each layout of strings and stacks, then the one the writer picks.
        let forced = [
            (STRINGS_IN_ID_ORDER, STACKS_WHOLE),
            (STRINGS_SORTED, STACKS_BY_REFERENCE),
            (STRINGS_SORTED, STACKS_BY_REFERENCE_IN_ORDER),
            (STRINGS_IN_ID_ORDER, STACKS_BY_REFERENCE_IN_ORDER),
        ];
        for layouts in forced.map(Some).into_iter().chain([None]) {
            let mut bytes = Vec::new();
            encode_block_tables_in(&t, &mut bytes, layouts);
            round_trips(&t, &bytes, layouts);
        }
    }

    /// Decodes `bytes`, block tables encoded from `t`, and checks that every stack and label
    /// set resolves as in `t`; with the chosen layouts, that damage is an error, not a panic.
    fn round_trips(t: &Tables, bytes: &[u8], layouts: Option<(u8, u8)>) {
        let mut back = Tables::new();
        let mut r = Reader::new(bytes);
        decode_block_tables(&mut r, &mut back, FORMAT_VERSION).expect("decodes");
        assert!(r.is_empty(), "{layouts:?}");
        assert_eq!(TableCounts::of(&back), TableCounts::of(t));
        // Every stack and label set resolves to the same frames and labels.
        /// A frame resolved: its object, address, and lines (function, file, start, line).
        type Frame = (Option<String>, u64, Vec<(String, String, i64, i64)>);
        fn frames(t: &Tables, s: StackId) -> Vec<Frame> {
            t.stack(s)
                .iter()
                .map(|&l| {
                    let a = t.location_address(l);
                    let lines = t
                        .lines(l)
                        .iter()
                        .map(|line| {
                            let f = t.function(line.function);
                            (
                                t.string(f.name).to_owned(),
                                t.string(f.filename).to_owned(),
                                f.start_line,
                                line.line,
                            )
                        })
                        .collect();
                    let mapping = a.mapping.map(|m| t.string(t.mapping(m).file).to_owned());
                    (mapping, a.address, lines)
                })
                .collect()
        }
        for i in 0..t.n_stacks() as u32 {
            assert_eq!(
                frames(&back, StackId(i)),
                frames(t, StackId(i)),
                "{layouts:?}"
            );
        }
        let labels = |t: &Tables| {
            t.label_set(LabelSetId(1))
                .iter()
                .map(|l| match l.value {
                    LabelValue::Num { value, unit } => {
                        (t.string(l.key).to_owned(), value, t.string(unit).to_owned())
                    }
                    LabelValue::Str(v) => (t.string(l.key).to_owned(), 0, t.string(v).to_owned()),
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(labels(&back), labels(t), "{layouts:?}");
        if layouts.is_some() {
            return;
        }
        // Every cut and every flipped byte is an error or other tables, never a panic.
        for cut in 0..bytes.len() {
            let mut t = Tables::new();
            assert!(
                decode_block_tables(&mut Reader::new(&bytes[..cut]), &mut t, FORMAT_VERSION)
                    .is_err()
            );
        }
        for i in 0..bytes.len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut damaged = bytes.to_vec();
                damaged[i] ^= flip;
                let _ = decode_block_tables(
                    &mut Reader::new(&damaged),
                    &mut Tables::new(),
                    FORMAT_VERSION,
                );
            }
        }
    }

    #[test]
    fn tables_and_samples_round_trip_in_parts() {
        let (t, samples) = tables_with_symbols();
        // Whole, then in two parts.
        let mut whole = Vec::new();
        encode_tables(&t, TableCounts::empty(), &mut whole);
        let mut back = Tables::new();
        decode_tables(&mut Reader::new(&whole), &mut back).expect("decodes");
        assert_eq!(TableCounts::of(&back), TableCounts::of(&t));
        for i in 0..t.n_stacks() as u32 {
            assert_eq!(back.stack(StackId(i)), t.stack(StackId(i)));
        }
        assert_eq!(back.label_set(LabelSetId(1)), t.label_set(LabelSetId(1)));
        assert_eq!(back.mapping(MappingId(0)), t.mapping(MappingId(0)));

        let mut bytes = Vec::new();
        let total = encode_samples(&samples, &mut bytes);
        assert_eq!(total, samples.values.iter().sum::<i64>());
        let got = decode_samples(&mut Reader::new(&bytes), IdLimits::of(&t)).expect("decodes");
        let mut want: Vec<_> = (0..samples.len())
            .map(|i| (samples.stacks[i], samples.labels[i], samples.values[i]))
            .collect();
        want.sort();
        let got: Vec<_> = (0..got.len())
            .map(|i| (got.stacks[i], got.labels[i], got.values[i]))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn decoders_refuse_every_truncation_and_bad_ids_without_panicking() {
        let (t, samples) = tables_with_symbols();
        let mut tables = Vec::new();
        encode_tables(&t, TableCounts::empty(), &mut tables);
        let mut s = Vec::new();
        encode_samples(&samples, &mut s);
        for cut in 0..tables.len() {
            let mut back = Tables::new();
            assert!(decode_tables(&mut Reader::new(&tables[..cut]), &mut back).is_err());
        }
        for cut in 0..s.len() {
            assert!(decode_samples(&mut Reader::new(&s[..cut]), IdLimits::of(&t)).is_err());
        }
        let tiny = IdLimits {
            n_stacks: 1,
            n_label_sets: 1,
        };
        assert!(decode_samples(&mut Reader::new(&s), tiny).is_err());
        // Every single-byte change decodes to an error or to something, never a panic.
        for i in 0..tables.len() {
            for flip in [1u8, 0x80, 0xff] {
                let mut bad = tables.clone();
                bad[i] ^= flip;
                let _ = decode_tables(&mut Reader::new(&bad), &mut Tables::new());
            }
        }
    }

    /// The samples of `tables_with_symbols` with spans: rows 0 and 3 in one span (hex ids),
    /// row 1 in another (a text id), row 2 in none.
    fn with_spans(mut samples: Samples) -> Samples {
        let names = vec!["span_id".to_owned(), "trace_id".to_owned()];
        let mut b = SpansBuilder::new(names);
        let a = [
            "00f067aa0ba902b7".to_owned(),
            "4bf92f3577b34da6a3ce929d0e0e4736".to_owned(),
        ];
        let text = ["Not-Hex".to_owned(), String::new()];
        b.push(&a);
        b.push(&text);
        b.push(&[String::new(), String::new()]);
        b.push(&a);
        samples.spans = b.finish();
        samples
    }

    struct SpanIs(&'static str);

    impl SpanSelect for SpanIs {
        fn keeps(&self, section: &SpanSection, g: usize) -> bool {
            section.value(g, "span_id") == self.0
        }

        fn keeps_unspanned(&self) -> bool {
            self.0.is_empty()
        }
    }

    fn rows(s: &Samples) -> Vec<(StackId, LabelSetId, i64, Option<Vec<String>>)> {
        let mut rows: Vec<_> = (0..s.len())
            .map(|i| {
                let span = s
                    .spans
                    .as_ref()
                    .and_then(|sp| sp.span_of(i))
                    .map(<[_]>::to_vec);
                (s.stacks[i], s.labels[i], s.values[i], span)
            })
            .collect();
        rows.sort();
        rows
    }

    #[test]
    fn spans_round_trip_and_select_their_samples() {
        let (t, samples) = tables_with_symbols();
        let samples = with_spans(samples);
        let mut bytes = Vec::new();
        let total = encode_samples(&samples, &mut bytes);
        assert_eq!(total, samples.values.iter().sum::<i64>());
        let back = decode_samples(&mut Reader::new(&bytes), IdLimits::of(&t)).expect("decodes");
        assert_eq!(rows(&back), rows(&samples));
        // A hex span id costs its bytes, not its text: names 17 bytes, group count 1, three
        // groups' rows and tags 9, the hex ids 8 + 16, the text id 8; stack deltas restart.
        let mut plain = Vec::new();
        encode_samples(
            &Samples {
                spans: None,
                ..samples.clone()
            },
            &mut plain,
        );
        assert!(
            bytes.len() - plain.len() <= 64,
            "{} vs {}",
            bytes.len(),
            plain.len()
        );

        // The merge's walk sees every sample; a selection only its span's.
        let mut all = 0;
        for_each_sample(&mut Reader::new(&bytes), IdLimits::of(&t), |_, _, v| {
            all += v
        })
        .expect("decodes");
        assert_eq!(all, total);
        let one = decode_selected(
            &mut Reader::new(&bytes),
            IdLimits::of(&t),
            &SpanIs("00f067aa0ba902b7"),
        )
        .expect("decodes");
        let mut got: Vec<_> = one.values.clone();
        got.sort();
        assert_eq!(got, [30, 50]);
        let text = decode_selected(
            &mut Reader::new(&bytes),
            IdLimits::of(&t),
            &SpanIs("Not-Hex"),
        )
        .expect("decodes");
        assert_eq!(text.values, [-20]);
        // Samples without a span match only what the empty value matches.
        let none = decode_selected(&mut Reader::new(&bytes), IdLimits::of(&t), &SpanIs(""))
            .expect("decodes");
        assert_eq!(none.values, [10_000_000_000]);
        let unspanned = decode_selected(&mut Reader::new(&plain), IdLimits::of(&t), &SpanIs("x"))
            .expect("decodes");
        assert!(unspanned.is_empty());

        let mut totals = Vec::new();
        for_each_span_total(&mut Reader::new(&bytes), None::<&NoSelect>, |s, g, v| {
            totals.push((s.value(g, "span_id").to_owned(), v));
        })
        .expect("decodes");
        totals.sort();
        assert_eq!(
            totals,
            [
                ("00f067aa0ba902b7".to_owned(), 80),
                ("Not-Hex".to_owned(), -20)
            ]
        );
        let mut kept = 0;
        for_each_span_total(
            &mut Reader::new(&bytes),
            Some(&SpanIs("Not-Hex")),
            |_, _, _| kept += 1,
        )
        .expect("decodes");
        assert_eq!(kept, 1);

        for cut in 0..bytes.len() {
            assert!(decode_samples(&mut Reader::new(&bytes[..cut]), IdLimits::of(&t)).is_err());
        }
        for i in 0..bytes.len() {
            for flip in [1u8, 0x80, 0xff] {
                let mut bad = bytes.clone();
                bad[i] ^= flip;
                let _ = decode_samples(&mut Reader::new(&bad), IdLimits::of(&t));
                let _ = decode_selected(&mut Reader::new(&bad), IdLimits::of(&t), &SpanIs("a"));
            }
        }
    }

    #[test]
    fn footer_catches_flips_and_other_versions() {
        let mut file = b"payload".to_vec();
        seal(b"TEST", &mut file);
        assert_eq!(unseal(b"TEST", &file).expect("valid"), b"payload");
        for i in 0..file.len() {
            let mut bad = file.clone();
            bad[i] ^= 0x10;
            assert!(unseal(b"TEST", &bad).is_err(), "flip at {i} undetected");
        }
        assert!(unseal(b"TEST", &file[..5]).is_err());
    }
}
