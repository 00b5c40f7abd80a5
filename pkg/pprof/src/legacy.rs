//! google/pprof's legacy (pre-protobuf) profile formats, converted to the protobuf model.
//!
//! google/pprof still reads these, so we do too, with its numbers: Go's and Java's binary CPU
//! format (`cpu.rs`), gperftools' and Go's text heap profiles and gperftools' growth and
//! fragmentation profiles (`heap.rs`), Go's goroutine and threadcreate counts (`count.rs`),
//! gperftools' thread profiles (`thread.rs`), gperftools' and Go's contention profiles
//! (`contention.rs`) and Java's heap and contention profiles (`java.rs`). The parsers are tried in
//! google/pprof's order (`parseLegacy` in `profile/profile.go`); each first checks its header
//! and answers `Ok(None)` when the bytes are not its format, and an error naming the line (or
//! byte) once they are and something is wrong. Text formats are tried only on bytes that look
//! like text (`text::looks_like_text`), so that binary input is never read line by line.
//!
//! Every parser fills a [`LegacyProfile`], google/pprof's `Profile` cut down to what legacy
//! formats have, and ends with the steps google/pprof takes after parsing: the memory map
//! (`mappings.rs`: parsing, `massageMappings`, `remapMappingIDs`), `remapLocationIDs` and
//! `remapFunctionIDs` (locations and functions in order of first use), and `addLegacyFrameInfo`
//! (the `drop_frames`/`keep_frames` of allocator, lock and profiler frames).
//!
//! Memory: everything kept is charged to a [`Budget`] at what it will cost as prost messages,
//! and conversion stops with [`Error::LegacyTooLarge`] past `DecodeOptions::max_decompressed_bytes`;
//! text is read a line at a time, so garbage costs nothing but the time to look at it.

mod contention;
mod count;
mod cpu;
mod heap;
mod java;
mod mappings;
mod model;
mod text;
mod thread;

use crate::{Error, proto};
use model::LegacyProfile;

/// Converts `bytes` (decompressed) from one of google/pprof's legacy formats; `Ok(None)` when
/// they are in none of them. `limit_bytes` bounds the memory the conversion may take.
pub(crate) fn parse(bytes: &[u8], limit_bytes: usize) -> Result<Option<proto::Profile>, Error> {
    let profile = match cpu::parse(bytes, limit_bytes)? {
        Some(profile) => profile,
        None if !text::looks_like_text(bytes) => return Ok(None),
        None => match parse_text(bytes, limit_bytes)? {
            Some(profile) => profile,
            None => return Ok(None),
        },
    };
    Ok(Some(profile.into_proto()))
}

/// The text formats, in google/pprof's order.
fn parse_text(bytes: &[u8], limit_bytes: usize) -> Result<Option<LegacyProfile>, Error> {
    if let Some(profile) = heap::parse(bytes, limit_bytes)? {
        return Ok(Some(profile));
    }
    if let Some(profile) = count::parse(bytes, limit_bytes)? {
        return Ok(Some(profile));
    }
    if let Some(profile) = thread::parse(bytes, limit_bytes)? {
        return Ok(Some(profile));
    }
    // Java's contention profiles start with gperftools' header (`--- contentionz 1 ---`), and
    // google/pprof tells them apart by trying gperftools' reading first: what it cannot read
    // (Java's `format = java` attribute, to begin with) goes to Java's. When neither reads it,
    // Java's parser says `None` if the attributes were not Java's, and gperftools' error stands.
    match contention::parse(bytes, limit_bytes) {
        Ok(Some(profile)) => Ok(Some(profile)),
        Ok(None) => java::parse(bytes, limit_bytes),
        Err(err) => match java::parse(bytes, limit_bytes)? {
            Some(profile) => Ok(Some(profile)),
            None => Err(err),
        },
    }
}

#[cfg(test)]
mod tests;
