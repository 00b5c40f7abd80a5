//! Reading text as google/pprof's Go code reads it: lines as `bufio.Scanner` splits them,
//! Go's regular expression classes, `strconv` number syntax, hex addresses.

use std::borrow::Cow;

use regex::Regex;

/// Whether `bytes` may be one of the text formats: their first 4 KiB are UTF-8 (a character cut
/// at the end allowed) without control characters other than whitespace. Protobuf messages fail
/// this within their first bytes (tags and lengths are small numbers), so a protobuf, even a
/// broken one, is never read as text.
pub(super) fn looks_like_text(bytes: &[u8]) -> bool {
    let head = &bytes[..bytes.len().min(4096)];
    let utf8 = match std::str::from_utf8(head) {
        Ok(_) => true,
        Err(e) => e.error_len().is_none() && head.len() < bytes.len(),
    };
    utf8 && head
        .iter()
        .all(|&b| b >= 0x20 || matches!(b, b'\t' | b'\n' | 0x0b | 0x0c | b'\r'))
}

/// Lines of text as Go's `bufio.Scanner` gives them: split at `\n`, one trailing `\r` dropped,
/// no empty line after a final `\n`. Invalid UTF-8 is replaced (U+FFFD) a line at a time.
pub(super) struct Lines<'a> {
    input_len: usize,
    rest: &'a [u8],
    text: Cow<'a, str>,
    number: usize,
    terminated: bool,
    held: bool,
}

impl<'a> Lines<'a> {
    pub(super) fn new(bytes: &'a [u8]) -> Lines<'a> {
        Lines {
            input_len: bytes.len(),
            rest: bytes,
            text: Cow::Borrowed(""),
            number: 0,
            terminated: false,
            held: false,
        }
    }

    /// Moves to the next line; `false` at the end, where [`Lines::text`] is `""` (as Go's
    /// `Scanner.Text` is after `Scan` said no).
    pub(super) fn scan(&mut self) -> bool {
        if self.held {
            self.held = false;
            return true;
        }
        if self.rest.is_empty() {
            self.text = Cow::Borrowed("");
            self.terminated = false;
            return false;
        }
        let (line, rest, terminated) = match self.rest.iter().position(|&b| b == b'\n') {
            Some(i) => (&self.rest[..i], &self.rest[i + 1..], true),
            None => (self.rest, &self.rest[self.rest.len()..], false),
        };
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        self.text = String::from_utf8_lossy(line);
        self.rest = rest;
        self.terminated = terminated;
        self.number += 1;
        true
    }

    /// Makes the next [`Lines::scan`] stay on the current line: for a loop that stops at a line
    /// the next loop reads.
    pub(super) fn hold(&mut self) {
        self.held = true;
    }

    /// The current line.
    pub(super) fn text(&self) -> &str {
        &self.text
    }

    /// The current line's number, from 1.
    pub(super) fn number(&self) -> usize {
        self.number
    }

    /// Whether the current line ended with `\n` (the last line of a file may not).
    pub(super) fn terminated(&self) -> bool {
        self.terminated
    }

    /// google/pprof's `parseAdditionalSections`: moves on to the line that starts the memory
    /// map, unless this one does.
    pub(super) fn skip_to_memory_map(&mut self) {
        while !is_memory_map_sentinel(self.text()) && self.scan() {}
    }

    /// The size of the whole text.
    pub(super) fn input_len(&self) -> usize {
        self.input_len
    }

    /// Where errors say the current line is: `line 12`.
    pub(super) fn place(&self) -> String {
        format!("line {}", self.number())
    }
}

/// Blank, or a `#` comment.
pub(super) fn is_space_or_comment(line: &str) -> bool {
    let trimmed = line.trim();
    trimmed.is_empty() || trimmed.starts_with('#')
}

/// The line that starts a memory map: `--- Memory map: ---` or `MAPPED_LIBRARIES:`.
pub(super) fn is_memory_map_sentinel(line: &str) -> bool {
    line.contains("--- Memory map: ---") || line.contains("MAPPED_LIBRARIES:")
}

/// A line shortened for an error message, in backticks.
pub(super) fn quote(line: &str) -> String {
    const MAX_CHARS: usize = 80;
    match line.char_indices().nth(MAX_CHARS) {
        Some((at, _)) => format!("`{}…`", &line[..at]),
        None => format!("`{line}`"),
    }
}

/// Compiles one of google/pprof's regular expressions, written as in its Go source: `\s`, `\S`,
/// `\d` and `\w` are given Go's (ASCII) meaning, which Rust's Unicode classes widen (and Rust's
/// ASCII `\s` adds `\v`, which Go's lacks). Nested classes (`[\s-]` → `[[\t\n\f\r ]-]`) are
/// valid in both places they appear.
pub(super) fn go_regex(pattern: &str) -> Regex {
    let mut out = String::with_capacity(pattern.len() * 2);
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('s') => out.push_str(r"[\t\n\f\r ]"),
            Some('S') => out.push_str(r"[^\t\n\f\r ]"),
            Some('d') => out.push_str("[0-9]"),
            Some('w') => out.push_str("[0-9A-Za-z_]"),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    Regex::new(&out).expect("google/pprof's patterns are valid")
}

/// The `0x…` numbers of `text` (lowercase hex digits, as google/pprof's `hexNumberRE` finds
/// them), each `Err` with its text when it does not fit in 64 bits.
pub(super) fn hex_addresses(text: &str) -> impl Iterator<Item = Result<u64, &str>> {
    let bytes = text.as_bytes();
    let lower_hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
    let mut at = 0;
    std::iter::from_fn(move || {
        while at + 2 < bytes.len() {
            if bytes[at] == b'0' && bytes[at + 1] == b'x' && lower_hex(bytes[at + 2]) {
                let start = at;
                at += 2;
                while at < bytes.len() && lower_hex(bytes[at]) {
                    at += 1;
                }
                let token = &text[start..at];
                return Some(u64::from_str_radix(&token[2..], 16).map_err(|_| token));
            }
            at += 1;
        }
        None
    })
}

/// Go's `strconv.ParseInt(s, 0, 64)`: an optional sign, then `0x`, `0o`, `0b` or a leading `0`
/// (octal) before the digits, underscores allowed between digits.
pub(super) fn parse_int_base0(s: &str) -> Option<i64> {
    let (negative, unsigned) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let magnitude = parse_uint_base0(unsigned)?;
    if negative {
        if magnitude <= 1 << 63 {
            Some((magnitude as i64).wrapping_neg())
        } else {
            None
        }
    } else {
        i64::try_from(magnitude).ok()
    }
}

fn parse_uint_base0(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.is_empty() {
        return None;
    }
    let (radix, digits, prefixed) = if b[0] == b'0' && b.len() >= 3 {
        match b[1].to_ascii_lowercase() {
            b'x' => (16, &s[2..], true),
            b'o' => (8, &s[2..], true),
            b'b' => (2, &s[2..], true),
            _ => (8, &s[1..], false),
        }
    } else if b[0] == b'0' {
        (8, &s[1..], false)
    } else {
        (10, s, false)
    };
    // Underscores only between digits, or between the prefix and a digit (Go's `underscoreOK`);
    // with a leading `0`, that `0` is a digit.
    let mut previous_is_digit = prefixed || b[0] == b'0';
    let mut value: u64 = 0;
    let mut n_digits = 0;
    for c in digits.chars() {
        if c == '_' {
            if !previous_is_digit {
                return None;
            }
            previous_is_digit = false;
            continue;
        }
        let digit = c.to_digit(radix)?;
        value = value
            .checked_mul(u64::from(radix))?
            .checked_add(u64::from(digit))?;
        previous_is_digit = true;
        n_digits += 1;
    }
    if !previous_is_digit || (prefixed && n_digits == 0) {
        return None;
    }
    Some(value)
}

/// Go's `path/filepath.Base` on Unix: the last element of `path`, trailing slashes ignored; `.`
/// for an empty path and `/` for slashes only.
pub(super) fn go_base(path: &str) -> &str {
    if path.is_empty() {
        return ".";
    }
    let trimmed = path.trim_end_matches('/');
    if trimmed.is_empty() {
        return "/";
    }
    match trimmed.rfind('/') {
        Some(i) => &trimmed[i + 1..],
        None => trimmed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_split_as_go_scanner() {
        let mut lines = Lines::new(b"a\r\n\nb\xffc\r\nlast");
        let mut seen = Vec::new();
        while lines.scan() {
            seen.push((lines.number(), lines.text().to_owned(), lines.terminated()));
        }
        assert_eq!(
            seen,
            [
                (1, "a".to_owned(), true),
                (2, String::new(), true),
                (3, "b\u{fffd}c".to_owned(), true),
                (4, "last".to_owned(), false)
            ]
        );
        assert_eq!(lines.text(), "");
    }

    #[test]
    fn numbers_parse_as_go_strconv() {
        for (s, want) in [
            ("0", Some(0)),
            ("10", Some(10)),
            ("010", Some(8)),
            ("08", None),
            ("0x1f", Some(31)),
            ("0X1F", Some(31)),
            ("0b101", Some(5)),
            ("0o17", Some(15)),
            ("-12", Some(-12)),
            ("+12", Some(12)),
            ("1_000", Some(1000)),
            ("0x_1", Some(1)),
            ("_1", None),
            ("1_", None),
            ("1__0", None),
            ("0x", None),
            ("", None),
            ("-", None),
            ("9223372036854775807", Some(i64::MAX)),
            ("9223372036854775808", None),
            ("-9223372036854775808", Some(i64::MIN)),
            ("-9223372036854775809", None),
        ] {
            assert_eq!(parse_int_base0(s), want, "{s:?}");
        }
    }

    #[test]
    fn hex_addresses_are_found_as_go_regexp_finds_them() {
        let found: Vec<_> = hex_addresses("PC: 0x00bc8f1c: f(0x1) 0x0x12 0xg 0x").collect();
        assert_eq!(found, [Ok(0xbc8f1c), Ok(1), Ok(0)]);
        let too_big: Vec<_> = hex_addresses("0x473add693e639c6f0").collect();
        assert_eq!(too_big, [Err("0x473add693e639c6f0")]);
    }

    #[test]
    fn go_classes_are_ascii() {
        let re = go_regex(r"^\s\d\w[\s-]\S$");
        assert!(re.is_match(" 1a-é"));
        assert!(!re.is_match("\u{a0}1a-x"));
        assert!(!re.is_match(" ١a-x"));
        assert!(!re.is_match("\u{b}1a-x"));
    }

    #[test]
    fn text_is_told_from_protobuf() {
        assert!(looks_like_text(
            b"heap profile: 1: 2 [3: 4] @ heap/1048576\n"
        ));
        assert!(!looks_like_text(&[0x0a, 0x04, 0x08, 0x01, 0x10, 0x02]));
        assert!(!looks_like_text(b"abc\xff\xfe"));
    }

    #[test]
    fn base_is_go_filepath_base() {
        for (path, want) in [
            ("", "."),
            ("/", "/"),
            ("a/b.so", "b.so"),
            ("a/b/", "b"),
            ("b", "b"),
        ] {
            assert_eq!(go_base(path), want);
        }
    }
}
