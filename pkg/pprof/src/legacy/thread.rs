//! gperftools' thread profiles (`threadz`, google/pprof's `parseThread`): each thread's stack,
//! symbolized or not, possibly followed by the stack of the thread that created it.
//!
//! ```text
//! --- threadz 1 ---
//! --- Thread 7f794ab90940 (name: main/14748) stack: ---
//!   PC:  0x00bc8f1c: helper(arg *)
//!   0x0040be31: main
//! --- Thread 7f7948978700 (name: thread3/14759) stack: ---
//!   [same as previous thread]
//! --- Memory map: ---
//! ```
//!
//! Every `0x…` number of a stack's lines is a frame, leaf first; a thread whose stack is the
//! previous one's (or empty) counts as one more of it.

use std::sync::LazyLock;

use regex::Regex;

use super::mappings;
use super::model::{Format, LegacyProfile, ValueType, cost, malformed};
use super::text::{
    Lines, go_regex, hex_addresses, is_memory_map_sentinel, is_space_or_comment, quote,
};
use crate::Error;

const FORMAT: Format = "thread";

// google/pprof's patterns, verbatim.
static THREADZ_START: LazyLock<Regex> = LazyLock::new(|| go_regex(r"--- threadz \d+ ---"));
static THREAD_START: LazyLock<Regex> =
    LazyLock::new(|| go_regex(r"--- Thread ([[:xdigit:]]+) \(name: (.*)/(\d+)\) stack: ---"));

/// How a thread's stack ended.
enum End {
    /// At a `---` line, which [`Lines::text`] holds.
    Line,
    /// At the end of the input; whether the last line was the memory map's sentinel.
    Input { after_sentinel: bool },
}

/// `Ok(None)` unless the first line that is not blank or a comment is a `threadz` or thread
/// header.
pub(super) fn parse(bytes: &[u8], limit_bytes: usize) -> Result<Option<LegacyProfile>, Error> {
    let mut lines = Lines::new(bytes);
    while lines.scan() && is_space_or_comment(lines.text()) {}
    if THREADZ_START.is_match(lines.text()) {
        // Comments, up to the first thread.
        let mut found = false;
        while lines.scan() {
            let line = lines.text();
            if is_memory_map_sentinel(line) || line.starts_with('-') {
                found = true;
                break;
            }
        }
        if !found {
            return Err(malformed(FORMAT, "no thread after the `threadz` header"));
        }
    } else if !THREAD_START.is_match(lines.text()) {
        return Ok(None);
    }

    let kind = ValueType::new("thread", "count");
    let mut profile = LegacyProfile::new(vec![kind.clone()], kind, 1, limit_bytes);
    let mut stack: Vec<u64> = Vec::new();
    // The first line looked at is as read; the lines that end stacks are trimmed.
    let mut trim = false;
    loop {
        let line = if trim {
            lines.text().trim()
        } else {
            lines.text()
        };
        trim = true;
        if is_memory_map_sentinel(line) || line.starts_with("---- no stack trace for") {
            break;
        }
        if !THREAD_START.is_match(line) {
            return Err(malformed(
                FORMAT,
                format!(
                    "{}: {} is not a thread header (`--- Thread … (name: …/…) stack: ---`)",
                    lines.place(),
                    quote(line)
                ),
            ));
        }
        let (end, same_as_previous) = read_stack(&mut lines, &mut stack, &mut profile)?;
        if same_as_previous || stack.is_empty() {
            if let Some(last) = profile.samples.last_mut() {
                last.values[0] = last.values[0].wrapping_add(1);
            }
        } else {
            let start = profile.frames_len();
            for (i, &address) in stack.iter().enumerate() {
                // Callers' addresses are return addresses: step back into the call.
                profile.push_frame(if i > 0 {
                    address.wrapping_sub(1)
                } else {
                    address
                })?;
            }
            profile.push_sample(start, &[1], None)?;
        }
        match end {
            End::Line => {}
            End::Input {
                after_sentinel: true,
            } => break,
            End::Input {
                after_sentinel: false,
            } => {
                return Err(malformed(
                    FORMAT,
                    format!(
                        "{}: the input ends in a thread's stack, not at `--- Memory map: ---`",
                        lines.place()
                    ),
                ));
            }
        }
    }
    lines.skip_to_memory_map();
    mappings::apply(&mut profile, &mut lines, FORMAT)?;
    profile.remove_duplicate_leaves();
    Ok(Some(profile))
}

/// google/pprof's `parseThreadSample`: the addresses of one thread's stack (and its creator's)
/// into `stack`, up to a `---` line or the end; whether it said it is the previous thread's.
fn read_stack(
    lines: &mut Lines<'_>,
    stack: &mut Vec<u64>,
    profile: &mut LegacyProfile,
) -> Result<(End, bool), Error> {
    stack.clear();
    let mut same_as_previous = false;
    let mut after_sentinel = false;
    while lines.scan() {
        let line = lines.text().trim();
        after_sentinel = is_memory_map_sentinel(line);
        if line.is_empty() {
            continue;
        }
        if line.starts_with("---") {
            return Ok((End::Line, same_as_previous));
        }
        if line.contains("same as previous thread") {
            same_as_previous = true;
            continue;
        }
        for address in hex_addresses(line) {
            let address = address.map_err(|token| {
                malformed(
                    FORMAT,
                    format!("{}: address {token} does not fit in 64 bits", lines.place()),
                )
            })?;
            profile.budget.charge(cost::FRAME)?;
            stack.push(address);
        }
    }
    Ok((End::Input { after_sentinel }, same_as_previous))
}
