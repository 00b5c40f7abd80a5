//! Java's heap and contention profiles (google/pprof's `parseJavaProfile`), and the names of
//! "addresses" that end them and Java's binary CPU profiles (`parseJavaLocations`):
//!
//! ```text
//! --- heapz 1 ---
//! format = java
//! resolution = bytes
//!           7048     1 @ 0x00000003 0x00000004
//!
//!  0x00000003 com.example.function003 (Source003.java:103)
//! ```
//!
//! A sample is `value count @ keys` (the other way round from gperftools'); a key names a
//! function, with its file and line, a shared library, or a state of the VM (`GC`, `VM`).
//! Keys are not addresses: they are cleared once the locations are known.

use std::sync::LazyLock;

use regex::Regex;
use rustc_hash::FxHashMap;

use super::mappings::{self, Steps};
use super::model::{
    Format, Function, LegacyProfile, ValueType, cost, malformed, scale_heap_sample,
};
use super::text::{Lines, go_base, go_regex, hex_addresses, parse_int_base0, quote};
use crate::Error;

// google/pprof's patterns, verbatim.
static ATTRIBUTE: LazyLock<Regex> = LazyLock::new(|| go_regex(r"([\w ]+)=([\w ]+)"));
static JAVA_SAMPLE: LazyLock<Regex> =
    LazyLock::new(|| go_regex(r" *(\d+) +(\d+) +@ +([ x0-9a-f]*)"));
static JAVA_LOCATION: LazyLock<Regex> =
    LazyLock::new(|| go_regex(r"^\s*0x([[:xdigit:]]+)\s+(.*)\s*$"));
static JAVA_LOCATION_FILE_LINE: LazyLock<Regex> =
    LazyLock::new(|| go_regex(r"^(.*)\s+\((.+):(-?[[:digit:]]+)\)$"));
static JAVA_LOCATION_PATH: LazyLock<Regex> = LazyLock::new(|| go_regex(r"^(.*)\s+\((.*)\)$"));

/// Java's heap profiles are sampled every 512 KiB on average.
const HEAP_SAMPLING_RATE: i64 = 524288;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Heap,
    Contention,
}

/// `Ok(None)` unless the first line is `--- heapz 1 ---` or `--- contentionz 1 ---` and, for
/// the latter, the attributes are Java's (gperftools' profiles have the same header).
#[expect(
    clippy::too_many_lines,
    reason = "google/pprof's Java profile parser, line by line, kept in its shape for comparison"
)]
pub(super) fn parse(bytes: &[u8], limit_bytes: usize) -> Result<Option<LegacyProfile>, Error> {
    let mut lines = Lines::new(bytes);
    // The header and the samples are read only from lines that end with `\n`: a last line
    // without one is left to the locations (google/pprof splits at `\n`).
    if !lines.scan() || !lines.terminated() {
        return Ok(None);
    }
    let (kind, format): (Kind, Format) = match lines.text().trim() {
        "--- heapz 1 ---" => (Kind::Heap, "Java heap"),
        "--- contentionz 1 ---" => (Kind::Contention, "Java contention"),
        _ => return Ok(None),
    };
    let mut profile = LegacyProfile::new(Vec::new(), ValueType::default(), 0, limit_bytes);

    // `name = value` attributes, up to the first line that is not one.
    while lines.scan() {
        let line = lines.text().trim();
        if !lines.terminated() {
            lines.hold();
            break;
        }
        if line.is_empty() {
            continue;
        }
        let Some(c) = ATTRIBUTE.captures(line) else {
            lines.hold();
            break;
        };
        let (name, value) = (c[1].trim(), c[2].trim());
        let fault = |what: String| malformed(format, format!("{}: {what}", lines.place()));
        let number = || {
            parse_int_base0(value)
                .ok_or_else(|| fault(format!("`{name}` is {}, not a number", quote(value))))
        };
        match (kind, name) {
            (_, "format") if value == "java" => {}
            (Kind::Heap, "format") => {
                return Err(fault(format!("format {}, not `java`", quote(value))));
            }
            (Kind::Heap, "resolution") => {
                profile.sample_types = vec![
                    ValueType::new("inuse_objects", "count"),
                    ValueType::new("inuse_space", value),
                ];
            }
            (Kind::Contention, "resolution") => {
                profile.sample_types = vec![
                    ValueType::new("contentions", "count"),
                    ValueType::new("delay", value),
                ];
            }
            (Kind::Contention, "sampling period") => {
                profile.period_type = ValueType::new("contentions", "count");
                profile.period = number()?;
            }
            (Kind::Contention, "ms since reset") => {
                profile.duration_nanos = number()?.wrapping_mul(1_000_000);
            }
            // Not Java's: for a contention profile, gperftools' (whose error stands).
            (Kind::Contention, _) => return Ok(None),
            (Kind::Heap, _) => {
                return Err(fault(format!(
                    "unknown attribute {}",
                    quote(&format!("{name} = {value}"))
                )));
            }
        }
    }

    // Samples, up to the first line that is not one.
    while lines.scan() {
        let line = lines.text().trim();
        if !lines.terminated() {
            lines.hold();
            break;
        }
        if line.is_empty() {
            continue;
        }
        let Some(c) = JAVA_SAMPLE.captures(line) else {
            lines.hold();
            break;
        };
        let fault = |what: String| malformed(format, format!("{}: {what}", lines.place()));
        if profile.sample_types.len() != 2 {
            if kind == Kind::Contention {
                // Without Java's `resolution`: gperftools' profile, whose error stands.
                return Ok(None);
            }
            return Err(fault(
                "a sample before the `resolution` attribute, which gives the sample types".into(),
            ));
        }
        let number =
            |s: &str| parse_int_base0(s).ok_or_else(|| fault(format!("value {s} is out of range")));
        let (mut count, mut value) = (number(&c[2])?, number(&c[1])?);
        let start = profile.frames_len();
        for key in hex_addresses(&c[3]) {
            let key = key.map_err(|token| fault(format!("key {token} does not fit in 64 bits")))?;
            profile.push_frame(key)?;
        }
        let mut bytes = None;
        match kind {
            Kind::Heap => {
                if count == 0 {
                    return Err(fault("a heap sample with a count of 0".into()));
                }
                bytes = Some(value.wrapping_div(count));
                (count, value) = scale_heap_sample(count, value, HEAP_SAMPLING_RATE);
            }
            Kind::Contention => {
                let period = profile.period;
                if period != 0 {
                    count = count.wrapping_mul(period);
                    value = value.wrapping_mul(period);
                }
            }
        }
        profile.push_sample(start, &[count, value], bytes)?;
    }

    apply_locations(&mut profile, &mut lines, format)?;
    Ok(Some(profile))
}

/// Names the locations from the rest of `lines` (`0x… name (file:line)`), then orders locations
/// and functions, gives the keys nobody named a fake mapping, and clears every key (google/pprof's
/// `parseJavaLocations` and `Aggregate`).
pub(super) fn apply_locations(
    profile: &mut LegacyProfile,
    lines: &mut Lines<'_>,
    format: Format,
) -> Result<(), Error> {
    let mut function_of_name: FxHashMap<String, u32> = FxHashMap::default();
    while lines.scan() {
        let line = lines.text().trim();
        let Some(c) = JAVA_LOCATION.captures(line) else {
            continue;
        };
        let key = u64::from_str_radix(&c[1], 16).map_err(|_| {
            malformed(
                format,
                format!("{}: key 0x{} does not fit in 64 bits", lines.place(), &c[1]),
            )
        })?;
        let Some(&location) = profile.location_of_address.get(&key) else {
            continue; // named but not used
        };
        let description = c.get(2).map_or("", |m| m.as_str());
        let (name, file, line_number) =
            if let Some(f) = JAVA_LOCATION_FILE_LINE.captures(description) {
                let line_number = f[3].parse::<i64>().ok().filter(|&n| n > 0).unwrap_or(0);
                (f.get(1), f.get(2).map(|m| m.as_str()), line_number)
            } else if let Some(p) = JAVA_LOCATION_PATH.captures(description) {
                // A shared library: its name is enough.
                (p.get(1), p.get(2).map(|m| go_base(m.as_str())), 0)
            } else {
                (None, None, 0)
            };
        let name = match name {
            Some(name) => name.as_str(),
            None if description.contains("generated stub/JIT") => "STUB",
            // `GC`, `VM` and the like.
            None => description,
        };
        let file = file.unwrap_or("");
        let function = match function_of_name.get(name) {
            Some(&function) => function,
            None => {
                profile
                    .budget
                    .charge(cost::FUNCTION + 2 * name.len() + file.len())?;
                let function = profile.functions.len() as u32;
                profile.functions.push(Function {
                    name: name.to_owned(),
                    filename: file.to_owned(),
                });
                function_of_name.insert(name.to_owned(), function);
                function
            }
        };
        let location = &mut profile.locations[location as usize];
        location.line = Some((function, line_number));
        location.address = 0;
    }
    profile.remap_locations();
    profile.remap_functions();
    mappings::remap_mapping_ids(profile, format, &mut Steps::default())?;
    for location in &mut profile.locations {
        location.address = 0;
    }
    Ok(())
}
