//! Text heap profiles of gperftools (`heapz`) and of Go before 1.9, and gperftools' growth and
//! fragmentation profiles, which share their layout (google/pprof's `parseHeap`):
//!
//! ```text
//! heap profile: 144: 8498176 [ 144: 8498176] @ heapz_v2/524288
//!      1:     9216 [     1:     9216] @ 0xc635c8 0x42ecc3 …
//! --- Memory map: ---
//! ```
//!
//! Each sample is `inuse_count: inuse_bytes [alloc_count: alloc_bytes] @ addresses`. Sampled
//! profiles (`heapz_v2`, `heap_v2`, Go's `heap`) are scaled up by the chance that each sample
//! was seen at all (`scale_heap_sample`).

use std::sync::LazyLock;

use regex::Regex;

use super::mappings;
use super::model::{Format, LegacyProfile, ValueType, malformed, scale_heap_sample};
use super::text::{
    Lines, go_regex, hex_addresses, is_memory_map_sentinel, is_space_or_comment, quote,
};
use crate::Error;

// google/pprof's patterns, verbatim.
static HEAP_HEADER: LazyLock<Regex> = LazyLock::new(|| {
    go_regex(r"heap profile: *(\d+): *(\d+) *\[ *(\d+): *(\d+) *\] *@ *(heap[_a-z0-9]*)/?(\d*)")
});
static GROWTH_HEADER: LazyLock<Regex> =
    LazyLock::new(|| go_regex(r"heap profile: *(\d+): *(\d+) *\[ *(\d+): *(\d+) *\] @ growthz?"));
static FRAGMENTATION_HEADER: LazyLock<Regex> = LazyLock::new(|| {
    go_regex(r"heap profile: *(\d+): *(\d+) *\[ *(\d+): *(\d+) *\] @ fragmentationz?")
});
static HEAP_SAMPLE: LazyLock<Regex> =
    LazyLock::new(|| go_regex(r"(-?\d+): *(-?\d+) *\[ *(\d+): *(\d+) *\] @([ x0-9a-f]*)"));

/// How a profile was sampled.
struct Header {
    format: Format,
    /// Mean bytes between samples; also the profile's period.
    rate: i64,
    /// Poisson sampling (heapz v2): samples are scaled up.
    scaled: bool,
    /// The profile has allocation totals besides what is in use.
    has_alloc: bool,
}

/// `Ok(None)` unless the first line is a heap, growth or fragmentation header.
pub(super) fn parse(bytes: &[u8], limit_bytes: usize) -> Result<Option<LegacyProfile>, Error> {
    let mut lines = Lines::new(bytes);
    if !lines.scan() {
        return Ok(None);
    }
    let Some(header) = parse_header(lines.text())? else {
        return Ok(None);
    };
    let format = header.format;
    let sample_types = if header.has_alloc {
        // Alloc before inuse, so that viewers' default (the last) is inuse_space.
        vec![
            ValueType::new("alloc_objects", "count"),
            ValueType::new("alloc_space", "bytes"),
            ValueType::new("inuse_objects", "count"),
            ValueType::new("inuse_space", "bytes"),
        ]
    } else {
        vec![
            ValueType::new("objects", "count"),
            ValueType::new("space", "bytes"),
        ]
    };
    let mut profile = LegacyProfile::new(
        sample_types,
        ValueType::new("space", "bytes"),
        header.rate,
        limit_bytes,
    );
    while lines.scan() {
        let line = lines.text().trim();
        if is_space_or_comment(line) {
            continue;
        }
        if is_memory_map_sentinel(line) {
            break;
        }
        parse_sample(&mut profile, line, &header, &lines.place())?;
    }
    lines.skip_to_memory_map();
    mappings::apply(&mut profile, &mut lines, format)?;
    Ok(Some(profile))
}

fn parse_header(line: &str) -> Result<Option<Header>, Error> {
    if let Some(c) = HEAP_HEADER.captures(line) {
        const FORMAT: Format = "heap";
        let mut rate = 0;
        if !c[6].is_empty() {
            rate = c[6].parse().map_err(|_| {
                malformed(
                    FORMAT,
                    format!("line 1: sampling rate {} is out of range", &c[6]),
                )
            })?;
        }
        let has_alloc = (c[3] != c[1] && &c[3] != "0") || (c[4] != c[2] && &c[4] != "0");
        let (rate, scaled) = match &c[5] {
            "heapz_v2" | "heap_v2" => (rate, true),
            "heapprofile" => (1, false),
            // Go wrote twice its sampling rate.
            "heap" => (rate / 2, true),
            kind => {
                return Err(malformed(
                    FORMAT,
                    format!(
                        "line 1: unknown kind `{kind}` (google/pprof reads heap, heap_v2, \
                         heapz_v2 and heapprofile)"
                    ),
                ));
            }
        };
        return Ok(Some(Header {
            format: FORMAT,
            rate,
            scaled,
            has_alloc,
        }));
    }
    let unsampled = |format| {
        Some(Header {
            format,
            rate: 1,
            scaled: false,
            has_alloc: false,
        })
    };
    if GROWTH_HEADER.is_match(line) {
        return Ok(unsampled("growth"));
    }
    if FRAGMENTATION_HEADER.is_match(line) {
        return Ok(unsampled("fragmentation"));
    }
    Ok(None)
}

/// google/pprof's `parseHeapSample`; `at` is the line's place, for errors.
fn parse_sample(
    profile: &mut LegacyProfile,
    line: &str,
    header: &Header,
    at: &str,
) -> Result<(), Error> {
    let fault = |what: String| malformed(header.format, format!("{at}: {what}"));
    let Some(c) = HEAP_SAMPLE.captures(line) else {
        return Err(fault(format!(
            "{} is not a heap sample (`count: bytes [count: bytes] @ addresses`)",
            quote(line)
        )));
    };
    let mut values = [0i64; 4];
    let mut n_values = 0;
    let mut block_size = 0;
    let mut add = |count: &str, size: &str, what: &str| -> Result<(), Error> {
        let number = |s: &str| {
            s.parse::<i64>()
                .map_err(|_| fault(format!("{what} value {s} is out of range")))
        };
        let (mut count, mut size) = (number(count)?, number(size)?);
        if count == 0 && size != 0 {
            return Err(fault(format!(
                "{what} count is 0 but {what} bytes are {size}"
            )));
        }
        if count != 0 {
            block_size = size.wrapping_div(count);
            if header.scaled {
                (count, size) = scale_heap_sample(count, size, header.rate);
            }
        }
        values[n_values] = count;
        values[n_values + 1] = size;
        n_values += 2;
        Ok(())
    };
    if header.has_alloc {
        add(&c[3], &c[4], "allocation")?;
    }
    add(&c[1], &c[2], "inuse")?;
    let start = profile.frames_len();
    for address in hex_addresses(&c[5]) {
        let address =
            address.map_err(|token| fault(format!("address {token} does not fit in 64 bits")))?;
        // Return addresses: step back into the call.
        profile.push_frame(address.wrapping_sub(1))?;
    }
    profile.push_sample(start, &values[..n_values], Some(block_size))
}
