//! Decoding: sniff gzip, inflate with a hard size limit, decode protobuf, validate references.

use std::io::Read;

use rustc_hash::FxHashMap;

use crate::wire::{Fault, LEN, Reader};
use crate::{Error, legacy, proto};

/// The two bytes every gzip stream starts with. File names and Content-Type headers lie (several
/// real `.pb.gz` files are not gzipped), so the bytes decide.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Limits applied while decoding untrusted input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeOptions {
    /// Largest accepted size of the protobuf message after decompression. Inflation stops as soon
    /// as it is passed, so a gzip bomb costs at most this much memory. Converting a legacy
    /// format stops once what it builds would cost more.
    pub max_decompressed_bytes: usize,
}

impl Default for DecodeOptions {
    /// 256 MiB: far above real profiles (the largest Go CPU profiles are a few MiB), far below
    /// what would hurt a server.
    fn default() -> Self {
        DecodeOptions {
            max_decompressed_bytes: 256 << 20,
        }
    }
}

/// Turns `bytes` into the raw protobuf message: inflates gzip (bounded), passes raw bytes through.
pub fn decompress<'a>(
    bytes: &'a [u8],
    options: &DecodeOptions,
) -> Result<std::borrow::Cow<'a, [u8]>, Error> {
    let limit = options.max_decompressed_bytes;
    if !bytes.starts_with(&GZIP_MAGIC) {
        if bytes.len() > limit {
            return Err(Error::TooLarge { limit_bytes: limit });
        }
        return Ok(std::borrow::Cow::Borrowed(bytes));
    }
    // A gzip member ends with the size of its input mod 2^32 (ISIZE): trust it when it is
    // plausible, so the output is allocated once; else guess (profiles compress 3-6x) and grow.
    let trailer_size = bytes
        .len()
        .checked_sub(4)
        .map(|at| u32::from_le_bytes(bytes[at..].try_into().expect("4 bytes")) as usize)
        .filter(|&n| n <= limit && n >= bytes.len() / 2);
    let capacity = trailer_size.map_or(bytes.len().saturating_mul(4).min(limit), |n| n + 1);
    let mut out = Vec::with_capacity(capacity);
    // The buffered reader over the slice itself: `read::MultiGzDecoder` would copy the input
    // through a 32 KiB buffer of its own, allocated for each body.
    let reader = flate2::bufread::MultiGzDecoder::new(bytes);
    // Read one byte past the limit: getting it proves the input is too large, without ever
    // holding more than `limit + 1` bytes.
    let mut bounded = reader.take(limit as u64 + 1);
    if let Err(source) = bounded.read_to_end(&mut out) {
        return Err(Error::Gzip {
            decompressed_bytes: out.len(),
            source,
        });
    }
    if out.len() > limit {
        return Err(Error::TooLarge { limit_bytes: limit });
    }
    Ok(std::borrow::Cow::Owned(out))
}

/// Decodes a pprof profile, gzipped or not, and checks every reference in it.
///
/// Bytes that are not a protobuf profile are tried as google/pprof's legacy formats (Go's and
/// Java's binary CPU profiles; gperftools' and Go's heap, growth, contention and thread text
/// profiles; Java's heap and contention profiles), converted to the protobuf model as
/// google/pprof converts them, and validated alike. Protobuf comes first, so no valid protobuf
/// is read as anything else, and the text formats are tried only on bytes that look like text.
pub fn decode(bytes: &[u8], options: &DecodeOptions) -> Result<Pprof, Error> {
    if bytes.is_empty() {
        return Err(Error::Empty);
    }
    let raw = decompress(bytes, options)?;
    if raw.is_empty() {
        return Err(Error::Empty);
    }
    let err = match Pprof::parse(&raw) {
        Ok(pprof) => return Ok(pprof),
        Err(err) => err,
    };
    // As google/pprof's `ParseData`: whatever does not parse as protobuf may be legacy.
    match (legacy::parse(&raw, options.max_decompressed_bytes), err) {
        (Ok(Some(profile)), _) => Pprof::from_proto(&profile),
        (Ok(None), Error::Protobuf { fault }) => Err(Error::NotPprof {
            fault,
            gzipped: bytes.starts_with(&GZIP_MAGIC),
        }),
        // Not protobuf, but a legacy format gone wrong: that is the fault to report.
        (Err(legacy), Error::Protobuf { .. }) => Err(legacy),
        // Protobuf whose references do not resolve: its fault stands.
        (_, err) => Err(err),
    }
}

/// Maps the ids of one table (locations, functions or mappings) to positions in it.
///
/// Producers almost always number entries 1, 2, 3, …; then no map is built and a lookup is a
/// subtraction.
#[derive(Debug, Clone, Default)]
struct IdIndex {
    /// `None` when `id == position + 1` for every entry.
    sparse: Option<FxHashMap<u64, u32>>,
    len: usize,
}

impl IdIndex {
    fn build(
        kind: &'static str,
        ids: impl ExactSizeIterator<Item = u64> + Clone,
    ) -> Result<Self, Error> {
        let len = ids.len();
        let mut dense = true;
        for (idx, id) in ids.clone().enumerate() {
            if id == 0 {
                return Err(Error::BadId {
                    kind,
                    idx,
                    id,
                    why: "zero",
                });
            }
            dense &= id == idx as u64 + 1;
        }
        if dense {
            return Ok(IdIndex { sparse: None, len });
        }
        let mut map = FxHashMap::with_capacity_and_hasher(len, Default::default());
        for (idx, id) in ids.enumerate() {
            if map.insert(id, idx as u32).is_some() {
                return Err(Error::BadId {
                    kind,
                    idx,
                    id,
                    why: "used twice",
                });
            }
        }
        Ok(IdIndex {
            sparse: Some(map),
            len,
        })
    }

    #[inline]
    fn get(&self, id: u64) -> Option<u32> {
        match &self.sparse {
            None => {
                let idx = id.wrapping_sub(1);
                (idx < self.len as u64).then_some(idx as u32)
            }
            Some(map) => map.get(&id).copied(),
        }
    }
}

/// Everything of a pprof but its tables and samples.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Header {
    /// What each sample value measures (string indices).
    pub sample_type: Vec<proto::ValueType>,
    /// What one sampling period measures.
    pub period_type: Option<proto::ValueType>,
    /// Sampling period in units of `period_type`.
    pub period: i64,
    /// Start of the profile, nanoseconds since the Unix epoch (0 when unknown).
    pub time_nanos: i64,
    /// Length of the window the profile covers (0 for a snapshot).
    pub duration_nanos: i64,
    /// Comments (string indices).
    pub comment: Vec<i64>,
    /// Type of the sample type to show first (string index, 0 when unset).
    pub default_sample_type: i64,
    /// Frames to drop when presenting (regex, string index).
    pub drop_frames: i64,
    /// Frames to keep when presenting (regex, string index).
    pub keep_frames: i64,
}

/// A location of a validated pprof, its references resolved to positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location {
    /// The producer's id.
    pub id: u64,
    /// Position of its mapping in [`Pprof::mappings`], `None` for "no mapping".
    pub mapping: Option<u32>,
    /// Instruction address.
    pub address: u64,
    /// Frames were folded into this one by the producer.
    pub is_folded: bool,
    lines: (u32, u32),
}

/// A source line of a location, its function resolved to a position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Line {
    /// Position of the function in [`Pprof::functions`].
    pub function: u32,
    /// Line number (0 when unknown).
    pub line: i64,
    /// Column number (0 when unknown).
    pub column: i64,
}

/// A decoded pprof whose every string index and id reference has been checked and resolved to a
/// position, so that readers index without checks.
///
/// Samples are stored column-wise (all location indices in one array, all values in another),
/// which is what makes decoding cheap: no allocation per sample, location or string.
#[derive(Debug, Clone, Default)]
pub struct Pprof {
    header: Header,
    /// All strings end to end; string `i` is `strings[string_ends[i - 1]..string_ends[i]]`.
    strings: String,
    string_ends: Vec<u32>,
    mappings: Vec<proto::Mapping>,
    functions: Vec<proto::Function>,
    locations: Vec<Location>,
    lines: Vec<Line>,
    /// Per sample: end of its locations in `sample_locations`, of its values, of its labels.
    sample_location_ends: Vec<u32>,
    sample_locations: Vec<u32>,
    sample_values: Vec<i64>,
    sample_label_ends: Vec<u32>,
    sample_labels: Vec<proto::Label>,
}

impl Pprof {
    /// Parses and validates a (decompressed) protobuf message.
    #[expect(
        clippy::too_many_lines,
        reason = "the hot one-pass wire reader: one match over profile.proto's fields, kept in one loop for speed"
    )]
    pub fn parse(raw: &[u8]) -> Result<Pprof, Error> {
        let mut p = Pprof::default();
        let mut sample_location_ids: Vec<u64> = Vec::new();
        let mut value_ends: Vec<u32> = Vec::new();
        let mut line_function_ids: Vec<u64> = Vec::new();
        let mut location_mapping_ids: Vec<u64> = Vec::new();
        // Every column sized once: growing them as they fill cost more than this first pass.
        let sizes = Sizes::scan(raw);
        let mut string_bytes: Vec<u8> = Vec::with_capacity(sizes.string_bytes);
        p.string_ends.reserve(sizes.strings);
        p.mappings.reserve(sizes.mappings);
        p.functions.reserve(sizes.functions);
        p.locations.reserve(sizes.locations);
        location_mapping_ids.reserve(sizes.locations);
        // Most locations have one line.
        p.lines.reserve(sizes.locations);
        line_function_ids.reserve(sizes.locations);
        p.sample_location_ends.reserve(sizes.samples);
        p.sample_label_ends.reserve(sizes.samples);
        value_ends.reserve(sizes.samples);
        let mut r = Reader::new(raw, 0);
        let mut counts = [0usize; 16];
        while !r.at_end() {
            let field_at = r.offset();
            let (number, wire) = r.key().map_err(|f| protobuf("top level", f))?;
            let n = counts.get(number as usize).copied().unwrap_or(0);
            if let Some(c) = counts.get_mut(number as usize) {
                *c += 1;
            }
            let place = |what: &str| format!("{what} {n} (field {number} at byte {field_at})");
            match number {
                1 => {
                    let m = r
                        .message(wire, "sample_type")
                        .map_err(|f| protobuf("top level", f))?;
                    p.header
                        .sample_type
                        .push(value_type(m).map_err(|f| protobuf(&place("sample type"), f))?);
                }
                2 => {
                    let m = r
                        .message(wire, "sample")
                        .map_err(|f| protobuf("top level", f))?;
                    parse_sample(
                        m,
                        &mut sample_location_ids,
                        &mut p.sample_values,
                        &mut p.sample_labels,
                    )
                    .map_err(|f| protobuf(&place("sample"), f))?;
                    p.sample_location_ends
                        .push(sample_location_ids.len() as u32);
                    value_ends.push(p.sample_values.len() as u32);
                    p.sample_label_ends.push(p.sample_labels.len() as u32);
                }
                3 => {
                    let m = r
                        .message(wire, "mapping")
                        .map_err(|f| protobuf("top level", f))?;
                    p.mappings
                        .push(parse_mapping(m).map_err(|f| protobuf(&place("mapping"), f))?);
                }
                4 => {
                    let m = r
                        .message(wire, "location")
                        .map_err(|f| protobuf("top level", f))?;
                    let start = line_function_ids.len() as u32;
                    let (mut location, mapping_id) =
                        parse_location(m, &mut line_function_ids, &mut p.lines)
                            .map_err(|f| protobuf(&place("location"), f))?;
                    location_mapping_ids.push(mapping_id);
                    location.lines = (start, line_function_ids.len() as u32);
                    p.locations.push(location);
                }
                5 => {
                    let m = r
                        .message(wire, "function")
                        .map_err(|f| protobuf("top level", f))?;
                    p.functions
                        .push(parse_function(m).map_err(|f| protobuf(&place("function"), f))?);
                }
                6 => {
                    if wire != LEN {
                        return Err(protobuf(
                            "top level",
                            Fault {
                                offset: field_at,
                                what: format!(
                                    "field `string_table` has wire type {wire}, expected a string"
                                ),
                            },
                        ));
                    }
                    let (bytes, _) = r.bytes().map_err(|f| protobuf(&place("string"), f))?;
                    string_bytes.extend_from_slice(bytes);
                    p.string_ends.push(string_bytes.len() as u32);
                }
                7..=10 | 12 | 14 => {
                    let name = match number {
                        7 => "drop_frames",
                        8 => "keep_frames",
                        9 => "time_nanos",
                        10 => "duration_nanos",
                        12 => "period",
                        _ => "default_sample_type",
                    };
                    let v = r.scalar(wire, name).map_err(|f| protobuf("top level", f))? as i64;
                    let h = &mut p.header;
                    match number {
                        7 => h.drop_frames = v,
                        8 => h.keep_frames = v,
                        9 => h.time_nanos = v,
                        10 => h.duration_nanos = v,
                        12 => h.period = v,
                        _ => h.default_sample_type = v,
                    }
                }
                11 => {
                    let m = r
                        .message(wire, "period_type")
                        .map_err(|f| protobuf("top level", f))?;
                    p.header.period_type =
                        Some(value_type(m).map_err(|f| protobuf("period type", f))?);
                }
                13 => {
                    let comment = &mut p.header.comment;
                    r.repeated(wire, "comment", |v| comment.push(v as i64))
                        .map_err(|f| protobuf("top level", f))?;
                }
                _ => r.skip(wire).map_err(|f| protobuf("top level", f))?,
            }
        }
        p.strings = string_table_text(string_bytes, &mut p.string_ends);
        if p.string_ends.is_empty() {
            p.string_ends.push(0);
        }
        if p.string_ends[0] != 0 {
            return Err(Error::StringTableStart {
                found: p.string(0).to_owned(),
            });
        }
        p.resolve(
            &sample_location_ids,
            &value_ends,
            &line_function_ids,
            &location_mapping_ids,
        )?;
        Ok(p)
    }

    /// Validates an in-memory message (e.g. one a producer in this process built).
    pub fn from_proto(profile: &proto::Profile) -> Result<Pprof, Error> {
        Pprof::parse(&prost::Message::encode_to_vec(profile))
    }

    /// Checks every reference and turns ids into positions.
    #[expect(
        clippy::too_many_lines,
        reason = "checks every reference of the decoded profile in one pass, naming the field of each fault"
    )]
    fn resolve(
        &mut self,
        sample_location_ids: &[u64],
        value_ends: &[u32],
        line_function_ids: &[u64],
        location_mapping_ids: &[u64],
    ) -> Result<(), Error> {
        let locations = IdIndex::build("location", self.locations.iter().map(|l| l.id))?;
        let functions = IdIndex::build("function", self.functions.iter().map(|f| f.id))?;
        let mappings = IdIndex::build("mapping", self.mappings.iter().map(|m| m.id))?;
        let n_strings = self.string_ends.len();
        let string = |index: i64, place: &dyn Fn() -> String| {
            if index < 0 || index as u64 >= n_strings as u64 {
                Err(Error::StringIndex {
                    place: place(),
                    index,
                    len: n_strings,
                })
            } else {
                Ok(())
            }
        };
        let h = &self.header;
        for (i, vt) in h.sample_type.iter().enumerate() {
            string(vt.r#type, &|| format!("sample type {i} type"))?;
            string(vt.unit, &|| format!("sample type {i} unit"))?;
        }
        if let Some(vt) = &h.period_type {
            string(vt.r#type, &|| "period type".to_owned())?;
            string(vt.unit, &|| "period type unit".to_owned())?;
        }
        string(h.drop_frames, &|| "drop_frames".to_owned())?;
        string(h.keep_frames, &|| "keep_frames".to_owned())?;
        string(h.default_sample_type, &|| "default_sample_type".to_owned())?;
        for (i, &c) in h.comment.iter().enumerate() {
            string(c, &|| format!("comment {i}"))?;
        }
        for (i, m) in self.mappings.iter().enumerate() {
            string(m.filename, &|| {
                format!("mapping {i} (id {}) filename", m.id)
            })?;
            string(m.build_id, &|| {
                format!("mapping {i} (id {}) build id", m.id)
            })?;
        }
        for (i, f) in self.functions.iter().enumerate() {
            string(f.name, &|| format!("function {i} (id {}) name", f.id))?;
            string(f.system_name, &|| {
                format!("function {i} (id {}) system name", f.id)
            })?;
            string(f.filename, &|| {
                format!("function {i} (id {}) filename", f.id)
            })?;
        }
        for (i, loc) in self.locations.iter_mut().enumerate() {
            let mapping_id = location_mapping_ids[i];
            if mapping_id != 0 {
                loc.mapping = Some(mappings.get(mapping_id).ok_or_else(|| Error::UnknownId {
                    place: format!("location {i} (id {})", loc.id),
                    kind: "mapping",
                    id: mapping_id,
                })?);
            }
            let (start, end) = loc.lines;
            for j in start..end {
                let id = line_function_ids[j as usize];
                self.lines[j as usize].function =
                    functions.get(id).ok_or_else(|| Error::UnknownId {
                        place: format!("location {i} (id {}) line {}", loc.id, j - start),
                        kind: "function",
                        id,
                    })?;
            }
        }
        let n_types = h.sample_type.len();
        let mut locations_start = 0usize;
        let mut values_start = 0u32;
        let mut labels_start = 0usize;
        self.sample_locations
            .reserve_exact(sample_location_ids.len());
        for (i, ((&locations_end, &values_end), &labels_end)) in self
            .sample_location_ends
            .iter()
            .zip(value_ends)
            .zip(&self.sample_label_ends)
            .enumerate()
        {
            let n_values = (values_end - values_start) as usize;
            if n_values != n_types {
                return Err(Error::ValueCount {
                    sample: i,
                    found: n_values,
                    expected: n_types,
                });
            }
            values_start = values_end;
            for &id in &sample_location_ids[locations_start..locations_end as usize] {
                let idx = locations.get(id).ok_or_else(|| Error::UnknownId {
                    place: format!("sample {i}"),
                    kind: "location",
                    id,
                })?;
                self.sample_locations.push(idx);
            }
            locations_start = locations_end as usize;
            for (j, label) in self.sample_labels[labels_start..labels_end as usize]
                .iter()
                .enumerate()
            {
                string(label.key, &|| format!("sample {i} label {j} key"))?;
                string(label.str, &|| format!("sample {i} label {j} value"))?;
                string(label.num_unit, &|| format!("sample {i} label {j} unit"))?;
            }
            labels_start = labels_end as usize;
        }
        Ok(())
    }

    /// Sample types, period, time and comments.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The string at a (validated) index.
    #[inline]
    pub fn string(&self, index: i64) -> &str {
        let i = index as usize;
        let start = if i == 0 {
            0
        } else {
            self.string_ends[i - 1] as usize
        };
        &self.strings[start..self.string_ends[i] as usize]
    }

    /// Number of strings in the string table.
    pub fn n_strings(&self) -> usize {
        self.string_ends.len()
    }

    /// Bytes of text in the string table, all strings together.
    pub fn n_string_bytes(&self) -> usize {
        self.strings.len()
    }

    /// The mappings, in the producer's order.
    pub fn mappings(&self) -> &[proto::Mapping] {
        &self.mappings
    }

    /// The functions, in the producer's order.
    pub fn functions(&self) -> &[proto::Function] {
        &self.functions
    }

    /// The locations, in the producer's order.
    pub fn locations(&self) -> &[Location] {
        &self.locations
    }

    /// The source lines of a location, innermost (inlined) first.
    #[inline]
    pub fn lines(&self, location: &Location) -> &[Line] {
        &self.lines[location.lines.0 as usize..location.lines.1 as usize]
    }

    /// Number of samples.
    pub fn n_samples(&self) -> usize {
        self.sample_location_ends.len()
    }

    /// Positions in [`Pprof::locations`] of sample `i`'s stack, leaf first.
    #[inline]
    pub fn sample_locations(&self, i: usize) -> &[u32] {
        let start = if i == 0 {
            0
        } else {
            self.sample_location_ends[i - 1] as usize
        };
        &self.sample_locations[start..self.sample_location_ends[i] as usize]
    }

    /// Sample `i`'s values, one per sample type.
    #[inline]
    pub fn sample_values(&self, i: usize) -> &[i64] {
        let n = self.header.sample_type.len();
        &self.sample_values[i * n..(i + 1) * n]
    }

    /// Sample `i`'s labels.
    #[inline]
    pub fn sample_labels(&self, i: usize) -> &[proto::Label] {
        let start = if i == 0 {
            0
        } else {
            self.sample_label_ends[i - 1] as usize
        };
        &self.sample_labels[start..self.sample_label_ends[i] as usize]
    }

    /// The profile as prost messages (ids renumbered 1, 2, 3, …), e.g. to re-encode it.
    pub fn to_proto(&self) -> proto::Profile {
        let h = &self.header;
        proto::Profile {
            sample_type: h.sample_type.clone(),
            sample: (0..self.n_samples())
                .map(|i| proto::Sample {
                    location_id: self
                        .sample_locations(i)
                        .iter()
                        .map(|&l| u64::from(l) + 1)
                        .collect(),
                    value: self.sample_values(i).to_vec(),
                    label: self.sample_labels(i).to_vec(),
                })
                .collect(),
            mapping: self
                .mappings
                .iter()
                .enumerate()
                .map(|(i, m)| proto::Mapping {
                    id: i as u64 + 1,
                    ..m.clone()
                })
                .collect(),
            location: self
                .locations
                .iter()
                .enumerate()
                .map(|(i, l)| proto::Location {
                    id: i as u64 + 1,
                    mapping_id: l.mapping.map_or(0, |m| u64::from(m) + 1),
                    address: l.address,
                    line: self
                        .lines(l)
                        .iter()
                        .map(|line| proto::Line {
                            function_id: u64::from(line.function) + 1,
                            line: line.line,
                            column: line.column,
                        })
                        .collect(),
                    is_folded: l.is_folded,
                })
                .collect(),
            function: self
                .functions
                .iter()
                .enumerate()
                .map(|(i, f)| proto::Function {
                    id: i as u64 + 1,
                    ..*f
                })
                .collect(),
            string_table: (0..self.n_strings())
                .map(|i| self.string(i as i64).to_owned())
                .collect(),
            drop_frames: h.drop_frames,
            keep_frames: h.keep_frames,
            time_nanos: h.time_nanos,
            duration_nanos: h.duration_nanos,
            period_type: h.period_type,
            period: h.period,
            comment: h.comment.clone(),
            default_sample_type: h.default_sample_type,
        }
    }
}

/// The string table's bytes, end to end, as text; `ends[i]` is where string `i` ends.
///
/// Producers are not all careful with symbol names: one bad byte should not cost the whole
/// profile, so invalid UTF-8 is replaced, not refused (moving the ends that follow). All
/// strings are checked at once, which is several times faster than one check each for short
/// names: valid strings end to end are valid, and when every end falls on a character
/// boundary of valid text, each string between two ends is valid too.
fn string_table_text(bytes: Vec<u8>, ends: &mut [u32]) -> String {
    let bytes = match String::from_utf8(bytes) {
        Ok(text) if ends.iter().all(|&end| text.is_char_boundary(end as usize)) => return text,
        Ok(text) => text.into_bytes(),
        Err(e) => e.into_bytes(),
    };
    let mut text = String::with_capacity(bytes.len());
    let mut start = 0usize;
    for end in ends.iter_mut() {
        text.push_str(&String::from_utf8_lossy(&bytes[start..*end as usize]));
        start = *end as usize;
        *end = text.len() as u32;
    }
    text
}

/// How many entries of each table a message holds, counted by a first pass over its top-level
/// fields (which skips over their contents), so that `Pprof::parse` allocates each column once.
#[derive(Debug, Default)]
struct Sizes {
    strings: usize,
    string_bytes: usize,
    mappings: usize,
    functions: usize,
    locations: usize,
    samples: usize,
}

impl Sizes {
    /// The counts of `raw`'s top-level fields; on a fault, those up to it (the parse that
    /// follows reports the fault).
    fn scan(raw: &[u8]) -> Sizes {
        let mut sizes = Sizes::default();
        let mut r = Reader::new(raw, 0);
        while !r.at_end() {
            let Ok((number, wire)) = r.key() else { break };
            if wire != LEN {
                if r.skip(wire).is_err() {
                    break;
                }
                continue;
            }
            let Ok((bytes, _)) = r.bytes() else { break };
            match number {
                2 => sizes.samples += 1,
                3 => sizes.mappings += 1,
                4 => sizes.locations += 1,
                5 => sizes.functions += 1,
                6 => {
                    sizes.strings += 1;
                    sizes.string_bytes += bytes.len();
                }
                _ => {}
            }
        }
        sizes
    }
}

fn protobuf(place: &str, fault: Fault) -> Error {
    Error::Protobuf {
        fault: format!("{place}: {} at byte {}", fault.what, fault.offset),
    }
}

fn value_type(mut r: Reader<'_>) -> Result<proto::ValueType, Fault> {
    let mut vt = proto::ValueType::default();
    while !r.at_end() {
        match r.key()? {
            (1, wire) => vt.r#type = r.scalar(wire, "type")? as i64,
            (2, wire) => vt.unit = r.scalar(wire, "unit")? as i64,
            (_, wire) => r.skip(wire)?,
        }
    }
    Ok(vt)
}

fn parse_sample(
    mut r: Reader<'_>,
    location_ids: &mut Vec<u64>,
    values: &mut Vec<i64>,
    labels: &mut Vec<proto::Label>,
) -> Result<(), Fault> {
    while !r.at_end() {
        match r.key()? {
            (1, wire) => r.repeated(wire, "location_id", |v| location_ids.push(v))?,
            (2, wire) => r.repeated(wire, "value", |v| values.push(v as i64))?,
            (3, wire) => {
                let mut m = r.message(wire, "label")?;
                let mut label = proto::Label::default();
                while !m.at_end() {
                    match m.key()? {
                        (1, w) => label.key = m.scalar(w, "key")? as i64,
                        (2, w) => label.str = m.scalar(w, "str")? as i64,
                        (3, w) => label.num = m.scalar(w, "num")? as i64,
                        (4, w) => label.num_unit = m.scalar(w, "num_unit")? as i64,
                        (_, w) => m.skip(w)?,
                    }
                }
                labels.push(label);
            }
            (_, wire) => r.skip(wire)?,
        }
    }
    Ok(())
}

fn parse_mapping(mut r: Reader<'_>) -> Result<proto::Mapping, Fault> {
    let mut m = proto::Mapping::default();
    while !r.at_end() {
        match r.key()? {
            (1, w) => m.id = r.scalar(w, "id")?,
            (2, w) => m.memory_start = r.scalar(w, "memory_start")?,
            (3, w) => m.memory_limit = r.scalar(w, "memory_limit")?,
            (4, w) => m.file_offset = r.scalar(w, "file_offset")?,
            (5, w) => m.filename = r.scalar(w, "filename")? as i64,
            (6, w) => m.build_id = r.scalar(w, "build_id")? as i64,
            (7, w) => m.has_functions = r.scalar(w, "has_functions")? != 0,
            (8, w) => m.has_filenames = r.scalar(w, "has_filenames")? != 0,
            (9, w) => m.has_line_numbers = r.scalar(w, "has_line_numbers")? != 0,
            (10, w) => m.has_inline_frames = r.scalar(w, "has_inline_frames")? != 0,
            (_, w) => r.skip(w)?,
        }
    }
    Ok(m)
}

/// Parses a location; returns it with its mapping *id*, which `Pprof::resolve` turns into a
/// position once all mappings are known.
fn parse_location(
    mut r: Reader<'_>,
    function_ids: &mut Vec<u64>,
    lines: &mut Vec<Line>,
) -> Result<(Location, u64), Fault> {
    let mut l = Location {
        id: 0,
        mapping: None,
        address: 0,
        is_folded: false,
        lines: (0, 0),
    };
    let mut mapping_id = 0u64;
    while !r.at_end() {
        match r.key()? {
            (1, w) => l.id = r.scalar(w, "id")?,
            (2, w) => mapping_id = r.scalar(w, "mapping_id")?,
            (3, w) => l.address = r.scalar(w, "address")?,
            (4, w) => {
                let mut m = r.message(w, "line")?;
                let mut line = Line {
                    function: 0,
                    line: 0,
                    column: 0,
                };
                let mut function_id = 0;
                while !m.at_end() {
                    match m.key()? {
                        (1, w) => function_id = m.scalar(w, "function_id")?,
                        (2, w) => line.line = m.scalar(w, "line")? as i64,
                        (3, w) => line.column = m.scalar(w, "column")? as i64,
                        (_, w) => m.skip(w)?,
                    }
                }
                function_ids.push(function_id);
                lines.push(line);
            }
            (5, w) => l.is_folded = r.scalar(w, "is_folded")? != 0,
            (_, w) => r.skip(w)?,
        }
    }
    Ok((l, mapping_id))
}

fn parse_function(mut r: Reader<'_>) -> Result<proto::Function, Fault> {
    let mut f = proto::Function::default();
    while !r.at_end() {
        match r.key()? {
            (1, w) => f.id = r.scalar(w, "id")?,
            (2, w) => f.name = r.scalar(w, "name")? as i64,
            (3, w) => f.system_name = r.scalar(w, "system_name")? as i64,
            (4, w) => f.filename = r.scalar(w, "filename")? as i64,
            (5, w) => f.start_line = r.scalar(w, "start_line")? as i64,
            (_, w) => r.skip(w)?,
        }
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(bytes).expect("write to vec");
        enc.finish().expect("finish gzip")
    }

    fn minimal() -> proto::Profile {
        proto::Profile {
            sample_type: vec![proto::ValueType { r#type: 1, unit: 2 }],
            sample: vec![proto::Sample {
                location_id: vec![1],
                value: vec![7],
                label: vec![],
            }],
            location: vec![proto::Location {
                id: 1,
                line: vec![proto::Line {
                    function_id: 1,
                    line: 3,
                    column: 0,
                }],
                ..Default::default()
            }],
            function: vec![proto::Function {
                id: 1,
                name: 3,
                ..Default::default()
            }],
            string_table: ["", "cpu", "nanoseconds", "main"]
                .map(String::from)
                .to_vec(),
            ..Default::default()
        }
    }

    fn check(p: &proto::Profile) -> Result<Pprof, Error> {
        Pprof::from_proto(p)
    }

    #[test]
    fn gzip_bomb_stops_at_the_limit() {
        let bomb = gzip(&vec![0u8; 10 << 20]);
        let options = DecodeOptions {
            max_decompressed_bytes: 1 << 20,
        };
        let err = decode(&bomb, &options).expect_err("must refuse");
        assert_eq!(
            err.to_string(),
            "profile is larger than the limit of 1048576 bytes once decompressed"
        );
    }

    #[test]
    fn raw_and_gzip_decode_alike_and_round_trip() {
        let raw = minimal().encode_to_vec();
        let a = decode(&raw, &DecodeOptions::default()).expect("raw");
        let b = decode(&gzip(&raw), &DecodeOptions::default()).expect("gzip");
        assert_eq!(a.to_proto(), b.to_proto());
        assert_eq!(a.to_proto(), minimal());
    }

    #[test]
    fn string_index_out_of_range_names_the_sample_label() {
        let mut p = minimal();
        p.sample[0].label.push(proto::Label {
            key: 3,
            str: 40,
            num: 0,
            num_unit: 0,
        });
        let err = check(&p).expect_err("must refuse");
        assert_eq!(
            err.to_string(),
            "sample 0 label 0 value refers to string index 40, but the string table has 4 entries"
        );
    }

    #[test]
    fn unknown_location_names_the_sample() {
        let mut p = minimal();
        p.sample.push(proto::Sample {
            location_id: vec![1, 9],
            value: vec![1],
            label: vec![],
        });
        let err = check(&p).expect_err("must refuse");
        assert_eq!(
            err.to_string(),
            "sample 1 refers to location id 9, which the profile does not define"
        );
    }

    #[test]
    fn unknown_function_names_the_location() {
        let mut p = minimal();
        p.location[0].line[0].function_id = 5;
        let err = check(&p).expect_err("must refuse");
        assert_eq!(
            err.to_string(),
            "location 0 (id 1) line 0 refers to function id 5, which the profile does not define"
        );
    }

    #[test]
    fn wrong_value_count_names_the_sample() {
        let mut p = minimal();
        p.sample[0].value.push(1);
        let err = check(&p).expect_err("must refuse");
        assert_eq!(
            err.to_string(),
            "sample 0 has 2 values, but the profile declares 1 sample types"
        );
    }

    #[test]
    fn truncated_protobuf_says_where() {
        let raw = minimal().encode_to_vec();
        let err =
            decode(&raw[..raw.len() - 3], &DecodeOptions::default()).expect_err("must refuse");
        let message = err.to_string();
        assert!(
            message.starts_with("profile is not protobuf (string 3 (field 6 at byte"),
            "{message}"
        );
        assert!(
            message.ends_with(
                "not gzip, and not one of google/pprof's legacy formats (Go or Java CPU, \
                 gperftools or Go heap, growth, contention or thread text)"
            ),
            "{message}"
        );
        assert!(message.contains("runs past the end"), "{message}");
    }

    #[test]
    fn truncation_inside_a_sample_names_the_sample_and_offset() {
        let mut p = minimal();
        p.sample.clear();
        let mut raw = p.encode_to_vec();
        let at = raw.len();
        // A sample (field 2) of 4 bytes whose packed location ids claim 5.
        raw.extend_from_slice(&[0x12, 4, 0x0a, 5, 1, 1]);
        let err = decode(&raw, &DecodeOptions::default()).expect_err("must refuse");
        assert_eq!(
            err.to_string(),
            format!(
                "profile is not protobuf (sample 0 (field 2 at byte {at}): length 5 runs past the end \
                 (3 bytes missing, truncated?) at byte {}), not gzip, and not one of google/pprof's \
                 legacy formats (Go or Java CPU, gperftools or Go heap, growth, contention or \
                 thread text)",
                at + 4
            )
        );
    }

    #[test]
    fn sparse_ids_resolve() {
        let mut p = minimal();
        p.location[0].id = 40;
        p.sample[0].location_id = vec![40];
        let pprof = check(&p).expect("valid");
        assert_eq!(
            pprof.locations()[pprof.sample_locations(0)[0] as usize].id,
            40
        );
    }

    #[test]
    fn duplicate_ids_are_refused() {
        let mut p = minimal();
        p.function.push(proto::Function {
            id: 1,
            ..Default::default()
        });
        let err = check(&p).expect_err("must refuse");
        assert_eq!(err.to_string(), "function 1 has id 1, which is used twice");
    }

    #[test]
    fn invalid_utf8_is_replaced_not_refused() {
        let mut raw = minimal().encode_to_vec();
        let at = raw.windows(4).position(|w| w == b"main").expect("string");
        raw[at] = 0xff;
        let pprof = decode(&raw, &DecodeOptions::default()).expect("lenient");
        assert_eq!(pprof.string(3), "\u{fffd}ain");
    }

    #[test]
    fn a_character_split_across_two_strings_is_invalid_in_both() {
        // "é" is C3 A9: each string holds half of it, so the table end to end is valid
        // ("xéy") while neither string is.
        let mut p = minimal();
        p.string_table
            .extend(["x\u{e9}y".to_owned(), "after".to_owned()]);
        let mut raw = p.encode_to_vec();
        let at = raw
            .windows(4)
            .position(|w| w == "x\u{e9}y".as_bytes())
            .expect("string");
        // The string's length byte is right before it: split it into "x\xC3" and "\xA9y" by
        // turning the 4-byte string into a 2-byte one followed by another 2-byte string.
        assert_eq!(raw[at - 1], 4, "a 4-byte string");
        raw[at - 1] = 2;
        raw.splice(at + 2..at + 2, [0x32, 2]); // field 6, wire type 2: 0x32; length 2
        let pprof = decode(&raw, &DecodeOptions::default()).expect("lenient");
        let n = pprof.n_strings();
        assert_eq!(pprof.string(n as i64 - 3), "x\u{fffd}");
        assert_eq!(pprof.string(n as i64 - 2), "\u{fffd}y");
        assert_eq!(pprof.string(n as i64 - 1), "after");
    }

    #[test]
    fn not_gzip_but_magic_is_a_gzip_error() {
        let err =
            decode(&[0x1f, 0x8b, 0, 1, 2], &DecodeOptions::default()).expect_err("must refuse");
        assert!(
            err.to_string().starts_with("profile is not valid gzip"),
            "{err}"
        );
    }
}
