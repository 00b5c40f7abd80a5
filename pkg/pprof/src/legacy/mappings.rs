//! Memory maps: google/pprof's reading of the mappings legacy profiles end with
//! (`ParseMemoryMapFromScanner`: `/proc/self/maps` lines or the brief
//! `start-end file (@offset) build-id` form, glog prefixes, `name=value` lines whose `$name` later
//! lines use) and its repairs of what it finds (`massageMappings`, `remapMappingIDs`).

use std::borrow::Cow;
use std::sync::LazyLock;

use regex::Regex;

use super::model::{Format, LegacyProfile, Mapping, cost, malformed};
use super::text::{Lines, go_regex};
use crate::Error;

// The pieces of google/pprof's mapping patterns, verbatim.
const SPACE_DIGITS: &str = r"\s+[[:digit:]]+";
const HEX_PAIR: &str = r"\s+[[:xdigit:]]+:[[:xdigit:]]+";
const O_SPACE: &str = r"\s*";
const C_HEX: &str = r"(?:0x)?([[:xdigit:]]+)";
const C_SPACE_STRING: &str = r"(?:\s+(\S+))?";
const C_SPACE_HEX: &str = r"(?:\s+([[:xdigit:]]+))?";
const C_SPACE_AT_OFFSET: &str = r"(?:\s+\(@([[:xdigit:]]+)\))?";
const C_PERM: &str = r"(?:\s+([-rwxp]+))?";

fn hex_range() -> String {
    format!(r"\s*{C_HEX}[\s-]?{O_SPACE}{C_HEX}:?")
}

/// `/proc/self/maps`: `start-end perms offset dev inode [path]`.
static PROC_MAPS: LazyLock<Regex> = LazyLock::new(|| {
    go_regex(&format!(
        "^{}{C_PERM}{C_SPACE_HEX}{HEX_PAIR}{SPACE_DIGITS}{C_SPACE_STRING}",
        hex_range()
    ))
});

/// The brief form: `start-end [perms] [file] [(@offset)] [build id]`.
static BRIEF_MAPS: LazyLock<Regex> = LazyLock::new(|| {
    go_regex(&format!(
        "^{}{C_PERM}{C_SPACE_STRING}{C_SPACE_AT_OFFSET}{C_SPACE_HEX}",
        hex_range()
    ))
});

/// A glog prefix, `… file:line] `.
static LOG_INFO: LazyLock<Regex> = LazyLock::new(|| go_regex(r"^[^\[\]]+:[0-9]+\]\s"));

/// Most steps spent substituting `$name`s and matching locations to mappings. Real profiles
/// take far fewer (addresses are matched by binary search while mappings do not overlap);
/// google/pprof's loops are quadratic, and past this hostile input stops costing time.
const MAX_STEPS: u64 = 1 << 28;

/// Steps spent so far, against [`MAX_STEPS`].
#[derive(Debug, Default)]
pub(super) struct Steps(u64);

impl Steps {
    fn spend(&mut self, n: usize, format: Format) -> Result<(), Error> {
        self.0 = self.0.saturating_add(n as u64);
        if self.0 > MAX_STEPS {
            return Err(malformed(
                format,
                format!(
                    "memory map: more than {MAX_STEPS} steps to apply it (too many mappings, \
                     locations or `$name` substitutions)"
                ),
            ));
        }
        Ok(())
    }
}

/// Reads the memory map from the rest of `lines`, repairs it as google/pprof does, and gives
/// locations their order, functions theirs and addresses their mappings.
pub(super) fn apply(
    profile: &mut LegacyProfile,
    lines: &mut Lines<'_>,
    format: Format,
) -> Result<(), Error> {
    let mut steps = Steps::default();
    let mut substitutions = Substitutions::new(lines.input_len());
    while lines.scan() {
        let at = lines.place();
        let line =
            substitutions.apply(remove_logging_info(lines.text()), &mut steps, format, &at)?;
        match parse_entry(&line) {
            Entry::Mapping(m) => {
                profile
                    .budget
                    .charge(cost::MAPPING + m.file.len() + m.build_id.len())?;
                profile.mappings.push(m);
            }
            Entry::NotExecutable => {}
            Entry::Unrecognized => {
                if let Some((name, value)) = line.split_once('=') {
                    substitutions.define(name.trim(), value.trim());
                }
            }
        }
    }
    massage(&mut profile.mappings);
    profile.remap_locations();
    profile.remap_functions();
    remap_mapping_ids(profile, format, &mut steps)
}

fn remove_logging_info(line: &str) -> &str {
    match LOG_INFO.find(line) {
        Some(m) => &line[m.end()..],
        None => line,
    }
}

/// `name=value` lines of a memory map, whose `$name` later lines use (Go's `strings.Replacer`:
/// left to right, the first definition of a name winning).
struct Substitutions {
    /// (`$name`, value), in the order of definition.
    pairs: Vec<(String, String)>,
    /// How much longer substitution has made lines, in all.
    grown_bytes: usize,
    /// The most `grown_bytes` may be: the size of the input.
    max_grown_bytes: usize,
}

impl Substitutions {
    fn new(max_grown_bytes: usize) -> Substitutions {
        Substitutions {
            pairs: Vec::new(),
            grown_bytes: 0,
            max_grown_bytes,
        }
    }

    fn define(&mut self, name: &str, value: &str) {
        self.pairs.push((format!("${name}"), value.to_owned()));
    }

    fn apply<'l>(
        &mut self,
        line: &'l str,
        steps: &mut Steps,
        format: Format,
        at: &str,
    ) -> Result<Cow<'l, str>, Error> {
        if self.pairs.is_empty() {
            return Ok(Cow::Borrowed(line));
        }
        let mut out = String::new();
        let mut copied = 0;
        for (at, _) in line.match_indices('$') {
            if at < copied {
                continue;
            }
            steps.spend(self.pairs.len(), format)?;
            if let Some((name, value)) = self
                .pairs
                .iter()
                .find(|(name, _)| line[at..].starts_with(name.as_str()))
            {
                out.push_str(&line[copied..at]);
                out.push_str(value);
                copied = at + name.len();
            }
        }
        if copied == 0 {
            return Ok(Cow::Borrowed(line));
        }
        out.push_str(&line[copied..]);
        self.grown_bytes += out.len().saturating_sub(line.len());
        if self.grown_bytes > self.max_grown_bytes {
            return Err(malformed(
                format,
                format!("{at}: `$name` substitutions make the memory map larger than the profile"),
            ));
        }
        Ok(Cow::Owned(out))
    }
}

enum Entry {
    Mapping(Mapping),
    /// A mapping without `x` in its permissions: code is never there.
    NotExecutable,
    Unrecognized,
}

/// google/pprof's `parseMappingEntry`.
fn parse_entry(line: &str) -> Entry {
    fn field<'l>(c: &regex::Captures<'l>, i: usize) -> &'l str {
        c.get(i).map_or("", |m| m.as_str())
    }
    let (start, end, perm, offset, file, build_id);
    if let Some(c) = PROC_MAPS.captures(line) {
        (start, end, perm, offset, file) = (
            field(&c, 1),
            field(&c, 2),
            field(&c, 3),
            field(&c, 4),
            field(&c, 5),
        );
        build_id = "";
    } else if let Some(c) = BRIEF_MAPS.captures(line) {
        (start, end, perm, file, offset, build_id) = (
            field(&c, 1),
            field(&c, 2),
            field(&c, 3),
            field(&c, 4),
            field(&c, 5),
            field(&c, 6),
        );
    } else {
        return Entry::Unrecognized;
    }
    if !perm.is_empty() && !perm.contains('x') {
        return Entry::NotExecutable;
    }
    let hex = |s: &str| u64::from_str_radix(s, 16).ok();
    let (Some(start), Some(limit)) = (hex(start), hex(end)) else {
        return Entry::Unrecognized;
    };
    let offset = if offset.is_empty() {
        0
    } else {
        match hex(offset) {
            Some(offset) => offset,
            None => return Entry::Unrecognized,
        }
    };
    Entry::Mapping(Mapping {
        start,
        limit,
        offset,
        file: file.to_owned(),
        build_id: build_id.to_owned(),
    })
}

/// google/pprof's `massageMappings`: a mapping split in two adjacent parts becomes one, and what
/// looks like the main binary (not a library, not `[vdso]`) goes first.
fn massage(mappings: &mut Vec<Mapping>) {
    if mappings.len() > 1 {
        let mut merged: Vec<Mapping> = Vec::with_capacity(mappings.len());
        for m in mappings.drain(..) {
            if let Some(last) = merged.last_mut()
                && adjacent(last, &m)
            {
                last.limit = m.limit;
                if !m.file.is_empty() {
                    last.file = m.file;
                }
                if !m.build_id.is_empty() {
                    last.build_id = m.build_id;
                }
                continue;
            }
            merged.push(m);
        }
        *mappings = merged;
    }
    if let Some(main) = mappings.iter().position(|m| {
        let file = m.file.replace("(deleted)", "");
        let file = file.trim();
        !file.is_empty() && !is_library(file) && !file.starts_with('[')
    }) {
        mappings.swap(0, main);
    }
}

/// google/pprof's `adjacent`: `b` continues `a` (same file and build id where both have one,
/// contiguous addresses, and offsets where both have one).
fn adjacent(a: &Mapping, b: &Mapping) -> bool {
    if !a.file.is_empty() && !b.file.is_empty() && a.file != b.file {
        return false;
    }
    if !a.build_id.is_empty() && !b.build_id.is_empty() && a.build_id != b.build_id {
        return false;
    }
    if a.limit != b.start {
        return false;
    }
    if a.offset != 0 && b.offset != 0 {
        let offset = a.offset.wrapping_add(a.limit.wrapping_sub(a.start));
        if offset != b.offset {
            return false;
        }
    }
    true
}

/// google/pprof's `libRx`, `([.]so$|[.]so[._][0-9]+)`.
fn is_library(file: &str) -> bool {
    file.ends_with(".so")
        || file.match_indices(".so").any(|(at, _)| {
            let rest = &file.as_bytes()[at + 3..];
            rest.len() >= 2 && matches!(rest[0], b'.' | b'_') && rest[1].is_ascii_digit()
        })
}

/// The main executable's usual start address on x86-64 Linux (non-PIE).
const EXPECTED_MAIN_START: u64 = 0x400000;

/// google/pprof's `remapMappingIDs`: drops a leading `/anon_hugepage` mapping that the main
/// binary continues, moves the main binary's start back to `0x400000` when its offset says it
/// was remapped from there, and gives every location with an address its mapping: the first
/// that contains it, else one whose unencoded first part (`start - offset`) would, else a fake
/// mapping of the whole address space (Go's legacy profiles have no mappings at all).
pub(super) fn remap_mapping_ids(
    profile: &mut LegacyProfile,
    format: Format,
    steps: &mut Steps,
) -> Result<(), Error> {
    let mappings = &mut profile.mappings;
    if mappings.len() > 1
        && mappings[0].file.starts_with("/anon_hugepage")
        && mappings[0].limit == mappings[1].start
    {
        mappings.remove(0);
    }
    if let Some(main) = mappings.first_mut()
        && main.start.wrapping_sub(main.offset) == EXPECTED_MAIN_START
    {
        main.start = EXPECTED_MAIN_START;
        main.offset = 0;
    }
    let n_real = mappings.len();
    let mut finder = Finder::new(mappings, format, steps)?;
    let mut fake: Option<u32> = None;
    for location in &mut profile.locations {
        let address = location.address;
        if location.mapping.is_some() || address == 0 {
            continue;
        }
        if let Some(i) = finder.containing(address, &mappings[..n_real], format, steps)? {
            location.mapping = Some(i as u32);
            continue;
        }
        // Once it exists, the fake mapping is in google/pprof's list and contains every address
        // but the last.
        if let Some(fake) = fake
            && address != u64::MAX
        {
            location.mapping = Some(fake);
            continue;
        }
        // Legacy handlers could fail to encode the first part of a mapping split in two.
        steps.spend(n_real, format)?;
        if let Some(i) = mappings[..n_real].iter().position(|m| {
            m.offset != 0 && m.start.wrapping_sub(m.offset) <= address && address < m.start
        }) {
            let m = &mut mappings[i];
            m.start = m.start.wrapping_sub(m.offset);
            m.offset = 0;
            location.mapping = Some(i as u32);
            finder = Finder::new(&mappings[..n_real], format, steps)?;
            continue;
        }
        let fake = *fake.get_or_insert_with(|| {
            mappings.push(Mapping {
                limit: u64::MAX,
                ..Mapping::default()
            });
            n_real as u32
        });
        location.mapping = Some(fake);
    }
    Ok(())
}

/// Finds the first mapping, in list order, that contains an address: by binary search while
/// the (non-empty) mappings do not overlap, when at most one can; by scanning once they do.
struct Finder {
    /// Positions of the non-empty mappings by start, `None` when two overlap.
    by_start: Option<Vec<u32>>,
}

impl Finder {
    fn new(mappings: &[Mapping], format: Format, steps: &mut Steps) -> Result<Finder, Error> {
        steps.spend(mappings.len(), format)?;
        let mut by_start: Vec<u32> = (0..mappings.len() as u32)
            .filter(|&i| mappings[i as usize].start < mappings[i as usize].limit)
            .collect();
        by_start.sort_unstable_by_key(|&i| mappings[i as usize].start);
        let disjoint = by_start
            .windows(2)
            .all(|w| mappings[w[0] as usize].limit <= mappings[w[1] as usize].start);
        Ok(Finder {
            by_start: disjoint.then_some(by_start),
        })
    }

    fn containing(
        &self,
        address: u64,
        mappings: &[Mapping],
        format: Format,
        steps: &mut Steps,
    ) -> Result<Option<usize>, Error> {
        let contains = |m: &Mapping| m.start <= address && address < m.limit;
        match &self.by_start {
            Some(by_start) => {
                steps.spend(1, format)?;
                let after = by_start.partition_point(|&i| mappings[i as usize].start <= address);
                Ok(after
                    .checked_sub(1)
                    .map(|i| by_start[i] as usize)
                    .filter(|&i| contains(&mappings[i])))
            }
            None => {
                steps.spend(mappings.len(), format)?;
                Ok(mappings.iter().position(contains))
            }
        }
    }
}

#[cfg(test)]
#[allow(
    clippy::too_many_lines,
    reason = "tests are scenarios read top to bottom; the line budget is for product code"
)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Option<Mapping> {
        match parse_entry(remove_logging_info(line)) {
            Entry::Mapping(m) => Some(m),
            _ => None,
        }
    }

    fn mapping(start: u64, limit: u64, offset: u64, file: &str, build_id: &str) -> Mapping {
        Mapping {
            start,
            limit,
            offset,
            file: file.into(),
            build_id: build_id.into(),
        }
    }

    /// google/pprof's `TestParseMappingEntry`, case by case.
    #[test]
    fn entries_parse_as_google_pprof_parses_them() {
        for (line, want) in [
            (
                "00400000-02e00000 r-xp 00000000 00:00 0",
                Some(mapping(0x400000, 0x2e00000, 0, "", "")),
            ),
            (
                "02e00000-02e8a000 r-xp 02a00000 00:00 15953927    /foo/bin",
                Some(mapping(0x2e00000, 0x2e8a000, 0x2a00000, "/foo/bin", "")),
            ),
            (
                "02e00000-02e8a000 r-xp 000000 00:00 15953927    [vdso]",
                Some(mapping(0x2e00000, 0x2e8a000, 0, "[vdso]", "")),
            ),
            (
                "  02e00000-02e8a000: /foo/bin (@2a00000)",
                Some(mapping(0x2e00000, 0x2e8a000, 0x2a00000, "/foo/bin", "")),
            ),
            (
                "  02e00000-02e8a000: /foo/bin (deleted)",
                Some(mapping(0x2e00000, 0x2e8a000, 0, "/foo/bin", "")),
            ),
            (
                "  02e00000-02e8a000: /foo/bin",
                Some(mapping(0x2e00000, 0x2e8a000, 0, "/foo/bin", "")),
            ),
            (
                "  02e00000-02e8a000: [vdso]",
                Some(mapping(0x2e00000, 0x2e8a000, 0, "[vdso]", "")),
            ),
            (
                "0xff6810563000 0xff6810565000 r-xp abc_exe 87c4d547f895cfd6a370e08dc5c5ee7bd4199d5b",
                Some(mapping(
                    0xff6810563000,
                    0xff6810565000,
                    0,
                    "abc_exe",
                    "87c4d547f895cfd6a370e08dc5c5ee7bd4199d5b",
                )),
            ),
            (
                "7f5e5435e000-7f5e5455e000 --xp 00002000 00:00 1531        myprogram",
                Some(mapping(
                    0x7f5e5435e000,
                    0x7f5e5455e000,
                    0x2000,
                    "myprogram",
                    "",
                )),
            ),
            (
                "7f7472710000-7f7472722000 r-xp 00000000 fc:00 790190      /usr/lib/libfantastic-1.2.so",
                Some(mapping(
                    0x7f7472710000,
                    0x7f7472722000,
                    0,
                    "/usr/lib/libfantastic-1.2.so",
                    "",
                )),
            ),
            (
                "7f47a542f000-7f47a5447000: /lib/libpthread-2.15.so",
                Some(mapping(
                    0x7f47a542f000,
                    0x7f47a5447000,
                    0,
                    "/lib/libpthread-2.15.so",
                    "",
                )),
            ),
            (
                "0x40000-0x80000 /path/to/binary      (@FF00)            abc123456",
                Some(mapping(
                    0x40000,
                    0x80000,
                    0xff00,
                    "/path/to/binary",
                    "abc123456",
                )),
            ),
            (
                "W1220 15:07:15.202776    8272 logger.cc:12036]   0x40000-0x80000 /path/to/binary      (@FF00)            abc123456",
                Some(mapping(
                    0x40000,
                    0x80000,
                    0xff00,
                    "/path/to/binary",
                    "abc123456",
                )),
            ),
            (
                "7f5e5435e000-7f5e5455e000 ---p 00002000 00:00 1531        myprogram",
                None,
            ),
        ] {
            assert_eq!(parse(line), want, "{line}");
        }
    }

    #[test]
    fn substitutions_use_the_first_definition() {
        let mut s = Substitutions::new(1000);
        let mut steps = Steps::default();
        s.define("source", "/home");
        s.define("source", "/other");
        s.define("s", "X");
        let line = s
            .apply("$source/bin $s $$", &mut steps, "heap", "line 1")
            .expect("small");
        assert_eq!(line, "/home/bin X $$");
    }

    #[test]
    fn substitutions_cannot_grow_without_bound() {
        let mut s = Substitutions::new(100);
        let mut steps = Steps::default();
        s.define("a", &"x".repeat(50));
        let err = s
            .apply("$a$a$a", &mut steps, "heap", "line 1")
            .expect_err("grows past the input");
        assert!(err.to_string().contains("substitutions"), "{err}");
    }

    #[test]
    fn split_mappings_merge_and_the_main_binary_goes_first() {
        let mut mappings = vec![
            mapping(0x1000, 0x2000, 0, "/lib/libc.so.6", ""),
            mapping(0x2000, 0x3000, 0x1000, "/lib/libc.so.6", ""),
            mapping(0x5000, 0x6000, 0, "[vdso]", ""),
            mapping(0x7000, 0x8000, 0, "/bin/app (deleted)", ""),
        ];
        massage(&mut mappings);
        assert_eq!(
            mappings,
            [
                mapping(0x7000, 0x8000, 0, "/bin/app (deleted)", ""),
                mapping(0x5000, 0x6000, 0, "[vdso]", ""),
                mapping(0x1000, 0x3000, 0, "/lib/libc.so.6", ""),
            ]
        );
        assert!(is_library("/lib/libc-2.15.so"));
        assert!(is_library("/lib/libc.so.6"));
        assert!(!is_library("/bin/some.sorted"));
    }
}
