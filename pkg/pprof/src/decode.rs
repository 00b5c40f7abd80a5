//! Decoding: sniff gzip, inflate with a hard size limit, decode protobuf, validate references.

use std::io::Read;

use prost::Message;
use rustc_hash::FxHashMap;

use crate::{Error, legacy, proto, wire};

/// The two bytes every gzip stream starts with. File names and Content-Type headers lie (several
/// real `.pb.gz` files are not gzipped), so the bytes decide.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Limits applied while decoding untrusted input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeOptions {
    /// Largest accepted size of the protobuf message after decompression. Inflation stops as soon
    /// as it is passed, so a gzip bomb costs at most this much memory.
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
    // Real profiles compress 3-6x; start there and let the vector grow.
    let mut out = Vec::with_capacity(bytes.len().saturating_mul(4).min(limit));
    let reader = flate2::read::MultiGzDecoder::new(bytes);
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
/// Also accepts Go's legacy (pre-protobuf, Go < 1.9) binary CPU profile format, which
/// google/pprof still reads, converting it to the protobuf model.
pub fn decode(bytes: &[u8], options: &DecodeOptions) -> Result<Pprof, Error> {
    if bytes.is_empty() {
        return Err(Error::Empty);
    }
    let raw = decompress(bytes, options)?;
    if raw.is_empty() {
        return Err(Error::Empty);
    }
    let profile = match proto::Profile::decode(&*raw) {
        Ok(profile) => profile,
        Err(prost_error) => {
            if let Some(profile) = legacy::parse_cpu(&raw)? {
                profile
            } else {
                let fault = wire::locate_fault(&raw).unwrap_or_else(|| prost_error.to_string());
                return Err(Error::Protobuf { fault });
            }
        }
    };
    Pprof::new(profile)
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
    fn build(kind: &'static str, ids: impl ExactSizeIterator<Item = u64>) -> Result<Self, Error> {
        let len = ids.len();
        let ids: Vec<u64> = ids.collect();
        for (idx, &id) in ids.iter().enumerate() {
            if id == 0 {
                return Err(Error::BadId {
                    kind,
                    idx,
                    id,
                    why: "zero",
                });
            }
        }
        if ids
            .iter()
            .enumerate()
            .all(|(idx, &id)| id == idx as u64 + 1)
        {
            return Ok(IdIndex { sparse: None, len });
        }
        let mut map = FxHashMap::with_capacity_and_hasher(len, Default::default());
        for (idx, &id) in ids.iter().enumerate() {
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
    fn get(&self, id: u64) -> Option<usize> {
        match &self.sparse {
            None => {
                let idx = id.wrapping_sub(1);
                (idx < self.len as u64).then_some(idx as usize)
            }
            Some(map) => map.get(&id).map(|&idx| idx as usize),
        }
    }
}

/// A decoded pprof whose every string index and id reference has been checked, so that readers
/// can index without further checks.
#[derive(Debug, Clone)]
pub struct Pprof {
    profile: proto::Profile,
    locations: IdIndex,
    functions: IdIndex,
    mappings: IdIndex,
}

impl Pprof {
    /// Validates an in-memory message (e.g. one built by a producer in this process).
    pub fn new(mut profile: proto::Profile) -> Result<Self, Error> {
        if profile.string_table.is_empty() {
            profile.string_table.push(String::new());
        }
        if !profile.string_table[0].is_empty() {
            return Err(Error::StringTableStart {
                found: profile.string_table[0].clone(),
            });
        }
        let locations = IdIndex::build("location", profile.location.iter().map(|l| l.id))?;
        let functions = IdIndex::build("function", profile.function.iter().map(|f| f.id))?;
        let mappings = IdIndex::build("mapping", profile.mapping.iter().map(|m| m.id))?;
        let pprof = Pprof {
            profile,
            locations,
            functions,
            mappings,
        };
        pprof.check_references()?;
        Ok(pprof)
    }

    fn check_references(&self) -> Result<(), Error> {
        let p = &self.profile;
        let n_strings = p.string_table.len();
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
        for (i, vt) in p.sample_type.iter().enumerate() {
            string(vt.r#type, &|| format!("sample type {i} type"))?;
            string(vt.unit, &|| format!("sample type {i} unit"))?;
        }
        if let Some(vt) = &p.period_type {
            string(vt.r#type, &|| "period type".to_owned())?;
            string(vt.unit, &|| "period type unit".to_owned())?;
        }
        string(p.drop_frames, &|| "drop_frames".to_owned())?;
        string(p.keep_frames, &|| "keep_frames".to_owned())?;
        string(p.default_sample_type, &|| "default_sample_type".to_owned())?;
        for (i, &c) in p.comment.iter().enumerate() {
            string(c, &|| format!("comment {i}"))?;
        }
        for (i, m) in p.mapping.iter().enumerate() {
            string(m.filename, &|| {
                format!("mapping {i} (id {}) filename", m.id)
            })?;
            string(m.build_id, &|| {
                format!("mapping {i} (id {}) build id", m.id)
            })?;
        }
        for (i, f) in p.function.iter().enumerate() {
            string(f.name, &|| format!("function {i} (id {}) name", f.id))?;
            string(f.system_name, &|| {
                format!("function {i} (id {}) system name", f.id)
            })?;
            string(f.filename, &|| {
                format!("function {i} (id {}) filename", f.id)
            })?;
        }
        for (i, loc) in p.location.iter().enumerate() {
            if loc.mapping_id != 0 && self.mappings.get(loc.mapping_id).is_none() {
                return Err(Error::UnknownId {
                    place: format!("location {i} (id {})", loc.id),
                    kind: "mapping",
                    id: loc.mapping_id,
                });
            }
            for (j, line) in loc.line.iter().enumerate() {
                if self.functions.get(line.function_id).is_none() {
                    return Err(Error::UnknownId {
                        place: format!("location {i} (id {}) line {j}", loc.id),
                        kind: "function",
                        id: line.function_id,
                    });
                }
            }
        }
        let n_types = p.sample_type.len();
        for (i, s) in p.sample.iter().enumerate() {
            if s.value.len() != n_types {
                return Err(Error::ValueCount {
                    sample: i,
                    found: s.value.len(),
                    expected: n_types,
                });
            }
            for &id in &s.location_id {
                if self.locations.get(id).is_none() {
                    return Err(Error::UnknownId {
                        place: format!("sample {i}"),
                        kind: "location",
                        id,
                    });
                }
            }
            for (j, label) in s.label.iter().enumerate() {
                string(label.key, &|| format!("sample {i} label {j} key"))?;
                string(label.str, &|| format!("sample {i} label {j} value"))?;
                string(label.num_unit, &|| format!("sample {i} label {j} unit"))?;
            }
        }
        Ok(())
    }

    /// The validated message.
    pub fn profile(&self) -> &proto::Profile {
        &self.profile
    }

    /// Gives the message back, e.g. to re-encode it.
    pub fn into_profile(self) -> proto::Profile {
        self.profile
    }

    /// The string at a (validated) index.
    #[inline]
    pub fn string(&self, index: i64) -> &str {
        &self.profile.string_table[index as usize]
    }

    /// The location with a given id. Every id held by a sample of a validated profile resolves.
    #[inline]
    pub fn location(&self, id: u64) -> Option<&proto::Location> {
        self.locations
            .get(id)
            .map(|idx| &self.profile.location[idx])
    }

    /// The position of the location with a given id in `profile().location`.
    #[inline]
    pub fn location_index(&self, id: u64) -> Option<usize> {
        self.locations.get(id)
    }

    /// The function with a given id.
    #[inline]
    pub fn function(&self, id: u64) -> Option<&proto::Function> {
        self.functions
            .get(id)
            .map(|idx| &self.profile.function[idx])
    }

    /// The position of the function with a given id in `profile().function`.
    #[inline]
    pub fn function_index(&self, id: u64) -> Option<usize> {
        self.functions.get(id)
    }

    /// The mapping with a given id (`None` for id 0, "no mapping").
    #[inline]
    pub fn mapping(&self, id: u64) -> Option<&proto::Mapping> {
        self.mappings.get(id).map(|idx| &self.profile.mapping[idx])
    }

    /// The position of the mapping with a given id in `profile().mapping`.
    #[inline]
    pub fn mapping_index(&self, id: u64) -> Option<usize> {
        self.mappings.get(id)
    }
}

#[cfg(test)]
mod tests {
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
    fn raw_and_gzip_decode_alike() {
        let raw = minimal().encode_to_vec();
        let a = decode(&raw, &DecodeOptions::default()).expect("raw");
        let b = decode(&gzip(&raw), &DecodeOptions::default()).expect("gzip");
        assert_eq!(a.profile(), b.profile());
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
        let err = Pprof::new(p).expect_err("must refuse");
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
        let err = Pprof::new(p).expect_err("must refuse");
        assert_eq!(
            err.to_string(),
            "sample 1 refers to location id 9, which the profile does not define"
        );
    }

    #[test]
    fn unknown_function_names_the_location() {
        let mut p = minimal();
        p.location[0].line[0].function_id = 5;
        let err = Pprof::new(p).expect_err("must refuse");
        assert_eq!(
            err.to_string(),
            "location 0 (id 1) line 0 refers to function id 5, which the profile does not define"
        );
    }

    #[test]
    fn truncated_protobuf_says_where() {
        let raw = minimal().encode_to_vec();
        let err =
            decode(&raw[..raw.len() - 3], &DecodeOptions::default()).expect_err("must refuse");
        let message = err.to_string();
        assert!(
            message.starts_with(
                "profile is not a valid pprof protobuf: field `string_table` (6) at byte"
            ),
            "{message}"
        );
        assert!(message.contains("truncated?"), "{message}");
    }

    #[test]
    fn sparse_ids_resolve() {
        let mut p = minimal();
        p.location[0].id = 40;
        p.sample[0].location_id = vec![40];
        let pprof = Pprof::new(p).expect("valid");
        assert_eq!(pprof.location(40).map(|l| l.id), Some(40));
        assert!(pprof.location(1).is_none());
    }

    #[test]
    fn duplicate_ids_are_refused() {
        let mut p = minimal();
        p.function.push(proto::Function {
            id: 1,
            ..Default::default()
        });
        let err = Pprof::new(p).expect_err("must refuse");
        assert_eq!(err.to_string(), "function 1 has id 1, which is used twice");
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
