//! Go's text count profiles before 1.9, `goroutine` and `threadcreate` (google/pprof's
//! `parseGoCount`):
//!
//! ```text
//! threadcreate profile: total 7
//! 1 @ 0x44cb3 0x45045 0x45323
//! ```

use std::sync::LazyLock;

use regex::Regex;

use super::mappings;
use super::model::{Format, LegacyProfile, ValueType, malformed};
use super::text::{Lines, go_regex, hex_addresses, is_space_or_comment, parse_int_base0, quote};
use crate::Error;

const FORMAT: Format = "Go count";

// google/pprof's patterns, verbatim.
static COUNT_START: LazyLock<Regex> = LazyLock::new(|| go_regex(r"\A(\S+) profile: total \d+\z"));
static COUNT: LazyLock<Regex> = LazyLock::new(|| go_regex(r"\A(\d+) @(( 0x[0-9a-f]+)+)\z"));

/// `Ok(None)` unless the first line that is not blank or a comment is a count header.
pub(super) fn parse(bytes: &[u8], limit_bytes: usize) -> Result<Option<LegacyProfile>, Error> {
    let mut lines = Lines::new(bytes);
    while lines.scan() && is_space_or_comment(lines.text()) {}
    let Some(c) = COUNT_START.captures(lines.text()) else {
        return Ok(None);
    };
    let kind = ValueType::new(&c[1], "count");
    let mut profile = LegacyProfile::new(vec![kind.clone()], kind, 1, limit_bytes);
    while lines.scan() {
        let line = lines.text();
        if is_space_or_comment(line) {
            continue;
        }
        if line.starts_with("---") {
            break;
        }
        let fault = |what: String| malformed(FORMAT, format!("{}: {what}", lines.place()));
        let Some(c) = COUNT.captures(line) else {
            return Err(fault(format!(
                "{} is not a count sample (`count @ addresses`)",
                quote(line)
            )));
        };
        let count = parse_int_base0(&c[1])
            .ok_or_else(|| fault(format!("count {} is not a number", &c[1])))?;
        let start = profile.frames_len();
        for address in hex_addresses(&c[2]) {
            let address = address
                .map_err(|token| fault(format!("address {token} does not fit in 64 bits")))?;
            // Return addresses: step back into the call.
            profile.push_frame(address.wrapping_sub(1))?;
        }
        profile.push_sample(start, &[count], None)?;
    }
    lines.skip_to_memory_map();
    mappings::apply(&mut profile, &mut lines, FORMAT)?;
    Ok(Some(profile))
}
