//! Literals: strings with Go/PromQL escapes, PromQL durations, and their canonical printing.

use std::fmt::{self, Write};
use std::time::Duration;

/// A problem inside a literal: the byte range within the token and the message.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct LiteralError {
    pub(crate) start: usize,
    pub(crate) end: usize,
    pub(crate) message: String,
}

impl LiteralError {
    fn new(start: usize, end: usize, message: impl Into<String>) -> LiteralError {
        LiteralError {
            start,
            end,
            message: message.into(),
        }
    }
}

/// The value of a string token: `"…"` or `'…'` with Go's escapes, exactly as PromQL takes them
/// (`\a \b \f \n \r \t \v \\`, the string's own quote, `\xHH`, `\OOO`, `\uHHHH`,
/// `\UHHHHHHHH`; the other quote needs no escape and refuses one), or a raw `` `…` `` taken as it
/// is. The token is complete (the grammar checked the quotes).
#[expect(
    clippy::too_many_lines,
    reason = "one match over PromQL's escape sequences, as Go's strconv.Unquote has them"
)]
pub(crate) fn unquote(token: &str) -> Result<String, LiteralError> {
    let inner = &token[1..token.len() - 1];
    if token.starts_with('`') || !inner.contains('\\') {
        return Ok(inner.to_owned());
    }
    // Byte escapes (`\xHH`, `\OOO`) may build a UTF-8 sequence, so collect bytes.
    let mut out = Vec::with_capacity(inner.len());
    let mut chars = inner.char_indices();
    while let Some((i, c)) = chars.next() {
        if c != '\\' {
            let mut buf = [0; 4];
            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            continue;
        }
        // Offsets in errors are relative to the token, which starts with the quote.
        let start = i + 1;
        let Some((_, e)) = chars.next() else {
            return Err(LiteralError::new(
                start,
                start + 1,
                "a string cannot end in `\\`",
            ));
        };
        let simple = match e {
            'a' => Some(0x07),
            'b' => Some(0x08),
            'f' => Some(0x0c),
            'n' => Some(b'\n'),
            'r' => Some(b'\r'),
            't' => Some(b'\t'),
            'v' => Some(0x0b),
            '\\' => Some(b'\\'),
            // Go allows only the string's own quote to be escaped: `\'` in "…" is an error.
            '\'' if token.starts_with('\'') => Some(b'\''),
            '"' if token.starts_with('"') => Some(b'"'),
            _ => None,
        };
        if let Some(b) = simple {
            out.push(b);
            continue;
        }
        let (n_digits, radix) = match e {
            'x' => (2, 16),
            'u' => (4, 16),
            'U' => (8, 16),
            '0'..='7' => (3, 8),
            '\n' | '\r' => {
                return Err(LiteralError::new(
                    start,
                    start + 1,
                    "a line break cannot be inside a string, even after `\\`: write `\\n` for one",
                ));
            }
            '\'' | '"' => {
                return Err(LiteralError::new(
                    start,
                    start + 2,
                    format!(
                        "`\\{e}` is not an escape in a string quoted with {}: write {e} alone, as Go and PromQL do",
                        &token[..1]
                    ),
                ));
            }
            _ => {
                let end = start + 1 + e.len_utf8();
                let escape = &token[start..end];
                return Err(LiteralError::new(
                    start,
                    end,
                    format!(
                        "unknown escape `{escape}`; write `\\\\` for a backslash, or use a `raw` string"
                    ),
                ));
            }
        };
        // An octal escape's first digit is `e` itself; hex digits follow the letter.
        let digits_start = if radix == 8 { start + 1 } else { start + 2 };
        let escape_end = digits_start + n_digits;
        let digits = token.get(digits_start..escape_end).unwrap_or("");
        let value = (digits.len() == n_digits && digits.chars().all(|d| d.is_digit(radix)))
            .then(|| u32::from_str_radix(digits, radix).ok())
            .flatten();
        let Some(value) = value else {
            let message = if radix == 8 {
                "an octal escape needs 3 digits, as in `\\101`".to_owned()
            } else {
                format!("`\\{e}` needs {n_digits} hex digits")
            };
            let end = escape_end.min(token.len() - 1).max(start + 2);
            return Err(LiteralError::new(start, end, message));
        };
        // The escape is ASCII, so bytes are chars; `e` was consumed already.
        for _ in start + 2..escape_end {
            chars.next();
        }
        match e {
            'u' | 'U' => match char::from_u32(value) {
                Some(c) => {
                    let mut buf = [0; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
                None => {
                    return Err(LiteralError::new(
                        start,
                        escape_end,
                        format!("`{}` is not a Unicode character", &token[start..escape_end]),
                    ));
                }
            },
            _ => match u8::try_from(value) {
                Ok(b) => out.push(b),
                Err(_) => {
                    return Err(LiteralError::new(
                        start,
                        escape_end,
                        format!(
                            "`{}` is larger than a byte (255)",
                            &token[start..escape_end]
                        ),
                    ));
                }
            },
        }
    }
    String::from_utf8(out).map_err(|_| {
        LiteralError::new(
            0,
            token.len(),
            "the byte escapes in this string do not make valid UTF-8",
        )
    })
}

/// Writes `s` as a double-quoted string that [`unquote`] reads back as `s`.
pub(crate) fn write_quoted(f: &mut impl Write, s: &str) -> fmt::Result {
    f.write_char('"')?;
    let mut plain = 0;
    for (i, c) in s.char_indices() {
        let escape = match c {
            '"' => "\\\"",
            '\\' => "\\\\",
            '\n' => "\\n",
            '\r' => "\\r",
            '\t' => "\\t",
            '\x07' => "\\a",
            '\x08' => "\\b",
            '\x0b' => "\\v",
            '\x0c' => "\\f",
            c if c.is_control() => "",
            _ => continue,
        };
        f.write_str(&s[plain..i])?;
        if escape.is_empty() {
            let c = c as u32;
            if c < 0x80 {
                write!(f, "\\x{c:02x}")?;
            } else {
                write!(f, "\\u{c:04x}")?;
            }
        } else {
            f.write_str(escape)?;
        }
        plain = i + c.len_utf8();
    }
    f.write_str(&s[plain..])?;
    f.write_char('"')
}

/// A PromQL duration such as `1h30m` ([`parca_vocab::duration::parse`]), with a leading `-` returned
/// as `true` in the pair, for the caller to judge.
pub(crate) fn parse_duration(token: &str) -> Result<(Duration, bool), LiteralError> {
    let (negative, text) = match token.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, token),
    };
    let offset = token.len() - text.len();
    parca_vocab::duration::parse(text)
        .map(|d| (d, negative))
        .map_err(|e| LiteralError::new(offset + e.start, offset + e.end, e.message))
}

/// Writes a duration as Prometheus does ([`parca_vocab::duration::write`]).
pub(crate) fn write_duration(f: &mut impl Write, duration: Duration) -> fmt::Result {
    parca_vocab::duration::write(f, duration)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unq(s: &str) -> Result<String, String> {
        unquote(s).map_err(|e| format!("{}..{}: {}", e.start, e.end, e.message))
    }

    #[test]
    fn strings() {
        assert_eq!(unq(r#""a\"b\\c""#).unwrap(), "a\"b\\c");
        assert_eq!(unq(r"'it\'s'").unwrap(), "it's");
        assert_eq!(unq(r"`raw\n`").unwrap(), "raw\\n");
        assert_eq!(unq(r#""\x41\101\u00e9\U0001F600\t""#).unwrap(), "AAé😀\t");
        assert_eq!(unq(r#""\xc3\xa9""#).unwrap(), "é");
        assert_eq!(
            unq(r#""\q""#).unwrap_err(),
            "1..3: unknown escape `\\q`; write `\\\\` for a backslash, or use a `raw` string"
        );
        assert_eq!(
            unq(r#""\x4""#).unwrap_err(),
            "1..4: `\\x` needs 2 hex digits"
        );
        assert_eq!(
            unq(r#""\ud800""#).unwrap_err(),
            "1..7: `\\ud800` is not a Unicode character"
        );
        assert_eq!(
            unq(r#""\777""#).unwrap_err(),
            "1..5: `\\777` is larger than a byte (255)"
        );
        assert_eq!(
            unq(r#""\xff""#).unwrap_err(),
            "0..6: the byte escapes in this string do not make valid UTF-8"
        );
        assert_eq!(
            unq(r#""é\""#).unwrap_err(),
            "3..4: a string cannot end in `\\`"
        );
    }

    #[test]
    fn quoting_round_trips() {
        for s in [
            "",
            "plain",
            "a\"b",
            "back\\slash",
            "\n\t\r\x07\x08\x0b\x0c",
            "\x00\x1f\x7f\u{85}",
            "é😀",
        ] {
            let mut q = String::new();
            write_quoted(&mut q, s).unwrap();
            assert_eq!(unquote(&q).unwrap(), s, "{q}");
        }
    }

    fn dur(s: &str) -> Result<String, String> {
        match parse_duration(s) {
            Ok((d, negative)) => {
                let mut out = String::from(if negative { "-" } else { "" });
                write_duration(&mut out, d).unwrap();
                Ok(out)
            }
            Err(e) => Err(format!("{}..{}: {}", e.start, e.end, e.message)),
        }
    }

    #[test]
    fn durations() {
        assert_eq!(dur("30s").unwrap(), "30s");
        assert_eq!(dur("90m").unwrap(), "1h30m");
        assert_eq!(dur("1h30m").unwrap(), "1h30m");
        assert_eq!(dur("2d").unwrap(), "2d");
        assert_eq!(dur("14d").unwrap(), "2w");
        // Years and weeks only when they divide the duration, as Prometheus writes it.
        assert_eq!(dur("1y2w3d4h5m6s7ms").unwrap(), "382d4h5m6s7ms");
        assert_eq!(dur("500ms").unwrap(), "500ms");
        assert_eq!(dur("-5m").unwrap(), "-5m");
        assert_eq!(dur("0s").unwrap(), "0s");
        assert_eq!(
            dur("5").unwrap_err(),
            "0..1: `5` needs a unit (ms, s, m, h, d, w or y), such as 5m"
        );
        assert_eq!(
            dur("5x").unwrap_err(),
            "1..2: unknown duration unit `x`: use ms, s, m, h, d, w or y"
        );
        assert_eq!(
            dur("30m1h").unwrap_err(),
            "0..5: `30m1h`: units must go from largest to smallest, each once, as in 1h30m"
        );
        assert_eq!(
            dur("1m1m").unwrap_err(),
            "0..4: `1m1m`: units must go from largest to smallest, each once, as in 1h30m"
        );
        assert_eq!(
            dur("1.5h").unwrap_err(),
            "0..4: `1.5h`: a duration counts whole units, as in 1h30m or 1500ms"
        );
        assert_eq!(
            dur("99999999999999999999y").unwrap_err(),
            "0..21: `99999999999999999999y` is too long a duration (at most about 292 years)"
        );
    }
}
