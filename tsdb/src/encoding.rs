//! Byte encodings shared by the WAL, the head and the blocks: varints, the samples of one
//! profile as columns, interned tables (whole or as the part added since some counts), and the
//! footer that seals every block file.
//!
//! Every decoder here reads untrusted bytes: it checks every length and id against what is
//! really there and returns a [`DecodeError`] naming the offset, never panics, and never
//! allocates more than the input can justify.

use parca_profile::tables::{
    Function, Label, LabelSetId, LabelValue, Line, LocationId, Mapping, MappingId, StackId,
    StringId,
};
use parca_profile::{Samples, Tables};

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

    pub fn u64_le(&mut self) -> Result<u64> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    #[inline(always)]
    pub fn uvarint(&mut self) -> Result<u64> {
        // Most stack deltas and scaled values fit one byte.
        if let Some(&b) = self.bytes.get(self.pos)
            && b < 0x80
        {
            self.pos += 1;
            return Ok(u64::from(b));
        }
        self.uvarint_long()
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
const SAMPLES_HAVE_LABELS: u8 = 1;

/// Encodes the samples of one profile. Rows are sorted by (stack, labels) first, so stack ids
/// are written as deltas; values are divided by their greatest common divisor (CPU profiles'
/// values are multiples of the period), zigzag varints.
///
/// Layout: `n: uvarint, flags: u8, scale: uvarint, stacks_len: uvarint, values_len: uvarint`,
/// then the columns: `n × stack delta: uvarint` (`stacks_len` bytes), `n × value/scale:
/// ivarint` (`values_len` bytes), and `n × label set id: uvarint` if `flags & 1`. The column
/// lengths let a reader walk the columns side by side in one pass.
/// Returns the sum of the values. A diff's base column is not stored.
pub(crate) fn encode_samples(samples: &Samples, out: &mut Vec<u8>) -> i64 {
    let n = samples.len();
    let sorted = samples
        .stacks
        .windows(2)
        .zip(samples.labels.windows(2))
        .all(|(s, l)| (s[0], l[0]) < (s[1], l[1]));
    let mut order: Vec<u32> = (0..n as u32).collect();
    if !sorted {
        order.sort_unstable_by_key(|&i| (samples.stacks[i as usize], samples.labels[i as usize]));
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
    for &i in &order {
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
    out.push(if has_labels { SAMPLES_HAVE_LABELS } else { 0 });
    put_uvarint(out, scale);
    put_uvarint(out, stacks.len() as u64);
    put_uvarint(out, values.len() as u64);
    out.extend_from_slice(&stacks);
    out.extend_from_slice(&values);
    if has_labels {
        for &i in &order {
            put_uvarint(out, u64::from(samples.labels[i as usize].0));
        }
    }
    total
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
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

/// Calls `each(stack, labels, value)` for every sample of one profile encoded by
/// [`encode_samples`] at the reader's position, in stored order, without allocating. Always
/// inlined: the per-sample loop of every merge, whose `each` must be inlined into it (measured:
/// left to the compiler, a merge ran 1.6 times slower).
#[inline(always)]
pub(crate) fn for_each_sample(
    r: &mut Reader<'_>,
    limits: IdLimits,
    mut each: impl FnMut(StackId, LabelSetId, i64),
) -> Result<()> {
    let n = r.count(2, "sample")?;
    let flags = r.u8()?;
    if flags & !SAMPLES_HAVE_LABELS != 0 {
        return r.fail(format!("unknown sample flags {flags:#x}"));
    }
    let scale = r.uvarint()?;
    if scale == 0 || scale > i64::MAX as u64 {
        return r.fail(format!("bad value scale {scale}"));
    }
    let scale = scale as i64;
    let stacks_len = r.count(1, "stack column byte")?;
    let values_len = r.uvarint()?;
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
    if flags & SAMPLES_HAVE_LABELS == 0 {
        for _ in 0..n {
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
            each(StackId(stack as u32), LabelSetId::EMPTY, value);
        }
        if !stack_reader.is_empty() || !value_reader.is_empty() {
            return r.fail("sample columns are longer than their samples");
        }
        return Ok(());
    }
    for _ in 0..n {
        stack = stack.saturating_add(stack_reader.uvarint()?);
        if stack >= u64::from(limits.n_stacks) {
            return stack_reader.fail(format!(
                "stack id {stack} is out of range ({} stacks)",
                limits.n_stacks
            ));
        }
        let v = value_reader.ivarint()?;
        let Some(value) = v.checked_mul(scale) else {
            return value_reader.fail("value overflows after scaling");
        };
        let labels = if flags & SAMPLES_HAVE_LABELS != 0 {
            LabelSetId(r.below(u64::from(limits.n_label_sets), "label set id")? as u32)
        } else {
            LabelSetId::EMPTY
        };
        each(StackId(stack as u32), labels, value);
    }
    if !stack_reader.is_empty() || !value_reader.is_empty() {
        return r.fail("sample columns are longer than their samples");
    }
    Ok(())
}

/// Decodes one profile's samples (see [`encode_samples`]).
pub(crate) fn decode_samples(r: &mut Reader<'_>, limits: IdLimits) -> Result<Samples> {
    let mut out = Samples::default();
    for_each_sample(r, limits, |s, l, v| {
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
        put_uvarint(out, m.memory_start);
        put_uvarint(out, m.memory_limit);
        put_uvarint(out, m.file_offset);
        put_uvarint(out, u64::from(m.file.0));
        put_uvarint(out, u64::from(m.build_id.0));
        out.push(
            u8::from(m.has_functions)
                | u8::from(m.has_filenames) << 1
                | u8::from(m.has_line_numbers) << 2
                | u8::from(m.has_inline_frames) << 3,
        );
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
        let labels = t.label_set(LabelSetId(i));
        put_uvarint(out, labels.len() as u64);
        for l in labels {
            put_uvarint(out, u64::from(l.key.0));
            match l.value {
                LabelValue::Str(s) => {
                    out.push(0);
                    put_uvarint(out, u64::from(s.0));
                }
                LabelValue::Num { value, unit } => {
                    out.push(1);
                    put_ivarint(out, value);
                    put_uvarint(out, u64::from(unit.0));
                }
            }
        }
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
    if from.iter().zip(&to).any(|(f, t)| f > t) {
        return r.fail(format!("table counts go backwards: {from:?} → {to:?}"));
    }
    // Every entry takes at least one byte: bound the counts by the input before reserving.
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
    let check = |r: &Reader<'_>, got: u32, want: u32, kind: &str| {
        if got == want {
            Ok(())
        } else {
            r.fail(format!(
                "{kind} {want} repeats {kind} {got} (tables must hold distinct entries)"
            ))
        }
    };
    for want in from[0]..to[0] {
        let s = r.str()?;
        let got = t.intern_string(s).0;
        check(r, got, want, "string")?;
    }
    let n_strings = u64::from(to[0]);
    for want in from[1]..to[1] {
        let memory_start = r.uvarint()?;
        let memory_limit = r.uvarint()?;
        let file_offset = r.uvarint()?;
        let file = StringId(r.below(n_strings, "string id")? as u32);
        let build_id = StringId(r.below(n_strings, "string id")? as u32);
        let flags = r.u8()?;
        let got = t
            .intern_mapping(Mapping {
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
            .0;
        check(r, got, want, "mapping")?;
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
        check(r, got, want, "function")?;
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
        check(r, got, want, "location")?;
    }
    let mut frames = Vec::new();
    for want in from[4]..to[4] {
        let n = r.count(1, "frame")?;
        frames.clear();
        for _ in 0..n {
            frames.push(LocationId(r.below(u64::from(to[3]), "location id")? as u32));
        }
        let got = t.intern_stack(&frames).0;
        check(r, got, want, "stack")?;
    }
    for want in from[5]..to[5] {
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
        let got = t.intern_label_set(labels).0;
        check(r, got, want, "label set")?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// File footer

/// Bytes of the footer that ends every block file: `magic: [u8; 4]`, `version: u32 LE`,
/// `crc32: u32 LE` (IEEE, over every byte of the file before it, magic and version included).
pub(crate) const FOOTER_BYTES: usize = 12;

/// The block format's version, written by this build. Version 2 adds each series'
/// `drop_frames` and `keep_frames` to the index.
pub(crate) const FORMAT_VERSION: u32 = 2;

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
