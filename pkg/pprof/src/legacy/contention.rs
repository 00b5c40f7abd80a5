//! Contention profiles of gperftools (`contentionz`) and of Go before 1.9 (`mutex`,
//! `contention`), google/pprof's `parseContention`:
//!
//! ```text
//! --- contentionz 1 ---
//! cycles/second = 3201000000
//! sampling period = 100
//! ms since reset = 16502830
//!   19490304       27 @ 0xbccc97 0xc61202 …
//! --- Memory map: ---
//! ```
//!
//! Each sample is `delay_cycles count @ addresses`; with a sampling period, both are scaled up
//! by it, and the delay is converted from cycles to nanoseconds with `cycles/second`.

use std::sync::LazyLock;

use regex::Regex;

use super::mappings;
use super::model::{Format, LegacyProfile, ValueType, malformed};
use super::text::{Lines, go_regex, hex_addresses, is_space_or_comment, parse_int_base0, quote};
use crate::Error;

const FORMAT: Format = "contention";

// google/pprof's pattern, verbatim.
static CONTENTION_SAMPLE: LazyLock<Regex> =
    LazyLock::new(|| go_regex(r"(\d+) *(\d+) @([ x0-9a-f]*)"));

/// `Ok(None)` unless the first line is a contention header. Java's contention profiles have the
/// same header: their `format = java` attribute is an error here, and the caller tries Java's
/// parser next.
#[expect(
    clippy::too_many_lines,
    reason = "google/pprof's contention profile parser, kept in its shape for comparison"
)]
pub(super) fn parse(bytes: &[u8], limit_bytes: usize) -> Result<Option<LegacyProfile>, Error> {
    let mut lines = Lines::new(bytes);
    if !lines.scan() {
        return Ok(None);
    }
    let header = lines.text();
    if !["--- contentionz ", "--- mutex:", "--- contention:"]
        .iter()
        .any(|h| header.starts_with(h))
    {
        return Ok(None);
    }
    let mut profile = LegacyProfile::new(
        vec![
            ValueType::new("contentions", "count"),
            ValueType::new("delay", "nanoseconds"),
        ],
        ValueType::new("contentions", "count"),
        1,
        limit_bytes,
    );

    // `name = value` attributes, up to the first sample.
    let mut cycles_per_second = 0i64;
    while lines.scan() {
        let line = lines.text().trim();
        if is_space_or_comment(line) {
            continue;
        }
        if line.starts_with("---") {
            break;
        }
        let Some((name, value)) = line.split_once('=') else {
            break;
        };
        let (name, value) = (name.trim(), value.trim());
        let fault = |what: String| malformed(FORMAT, format!("{}: {what}", lines.place()));
        let number = || {
            parse_int_base0(value)
                .ok_or_else(|| fault(format!("`{name}` is {}, not a number", quote(value))))
        };
        match name {
            "cycles/second" => cycles_per_second = number()?,
            "sampling period" => profile.period = number()?,
            "ms since reset" => profile.duration_nanos = number()?.wrapping_mul(1_000_000),
            "discarded samples" => {}
            "format" | "resolution" => {
                return Err(fault(format!(
                    "attribute `{name}` is not gperftools' (a Java profile says `format = java`)"
                )));
            }
            _ => return Err(fault(format!("unknown attribute `{name}`"))),
        }
    }
    lines.hold();

    while lines.scan() {
        let line = lines.text().trim();
        if line.starts_with("---") {
            break;
        }
        if is_space_or_comment(line) {
            continue;
        }
        let fault = |what: String| malformed(FORMAT, format!("{}: {what}", lines.place()));
        let Some(c) = CONTENTION_SAMPLE.captures(line) else {
            return Err(fault(format!(
                "{} is not a contention sample (`delay count @ addresses`)",
                quote(line)
            )));
        };
        let number = |s: &str| {
            s.parse::<i64>()
                .map_err(|_| fault(format!("value {s} is out of range")))
        };
        let (mut delay, mut count) = (number(&c[1])?, number(&c[2])?);
        let period = profile.period;
        if period > 0 {
            if cycles_per_second > 0 {
                // Cycles to nanoseconds, in google/pprof's floating-point steps.
                let cycles_per_ns = cycles_per_second as f64 / 1e9;
                delay = (delay as f64 * period as f64 / cycles_per_ns) as i64;
            }
            count = count.wrapping_mul(period);
        }
        let start = profile.frames_len();
        for address in hex_addresses(&c[3]) {
            let address = address
                .map_err(|token| fault(format!("address {token} does not fit in 64 bits")))?;
            // Return addresses: step back into the call.
            profile.push_frame(address.wrapping_sub(1))?;
        }
        profile.push_sample(start, &[count, delay], None)?;
    }
    lines.skip_to_memory_map();
    mappings::apply(&mut profile, &mut lines, FORMAT)?;
    Ok(Some(profile))
}
