//! The pre-scan that guards the parser (nesting depth, unclosed strings) and the lenient parse
//! for autocomplete, which repairs a half-typed query by cutting and closing it.

use crate::ast::{Expr, ExprKind};
use crate::check;
use crate::error::{ParseError, Span};
use crate::parser::{self, MAX_DEPTH};

/// What [`crate::parse_lenient`] made of a query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LenientParse {
    /// The AST, when there is one: the whole query's if its syntax is right (even with type
    /// errors), else the AST of a repaired version (cut back and closed), whose spans stay
    /// within the query. `None` when no repair parsed.
    pub expr: Option<Expr>,
    /// Every error found, in query order: at most one syntax error (the first), or every
    /// literal, type and semantic error of a syntactically correct query.
    pub errors: Vec<ParseError>,
}

/// What a cheap left-to-right scan of the text knows: brackets and strings, ignoring grammar.
#[derive(Debug, Default)]
pub(crate) struct Scan {
    /// Brackets still open at the end, innermost last: the closing character and the offset.
    open: Vec<(char, usize)>,
    /// A string still open at the end (or at a line break, for `"` and `'`): quote and offset.
    pub(crate) open_string: Option<(char, usize)>,
    /// Where the nesting first went deeper than [`MAX_DEPTH`].
    pub(crate) too_deep_at: Option<usize>,
    /// Offsets at which a token ends: where a repair may cut.
    token_ends: Vec<usize>,
}

pub(crate) fn scan(text: &str) -> Scan {
    let bytes = text.as_bytes();
    let mut scan = Scan::default();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b' ' | b'\t' | b'\r' | b'\n' => {
                i += 1;
                continue;
            }
            b'#' => {
                i = text[i..].find('\n').map_or(bytes.len(), |n| i + n);
                continue;
            }
            b'"' | b'\'' | b'`' => {
                let start = i;
                i += 1;
                loop {
                    match bytes.get(i) {
                        None => {
                            scan.open_string.get_or_insert((b as char, start));
                            break;
                        }
                        Some(b'\\') if b != b'`' => i += 2,
                        Some(b'\n') if b != b'`' => {
                            scan.open_string.get_or_insert((b as char, start));
                            break;
                        }
                        Some(&c) if c == b => {
                            i += 1;
                            break;
                        }
                        Some(_) => i += 1,
                    }
                }
                i = i.min(bytes.len());
            }
            b'(' | b'{' | b'[' => {
                let close = match b {
                    b'(' => ')',
                    b'{' => '}',
                    _ => ']',
                };
                scan.open.push((close, i));
                if scan.open.len() > MAX_DEPTH {
                    scan.too_deep_at.get_or_insert(i);
                }
                i += 1;
            }
            b')' | b'}' | b']' => {
                if scan.open.last().is_some_and(|&(c, _)| c as u8 == b) {
                    scan.open.pop();
                }
                i += 1;
            }
            b if b.is_ascii_alphanumeric() || matches!(b, b'_' | b':' | b'.' | b'-') => {
                i += 1;
                while i < bytes.len()
                    && (bytes[i].is_ascii_alphanumeric() || matches!(bytes[i], b'_' | b':' | b'.'))
                {
                    i += 1;
                }
            }
            _ => {
                // Any other character (operators, non-ASCII): one token of one character.
                i += text[i..].chars().next().map_or(1, char::len_utf8);
            }
        }
        scan.token_ends.push(i);
    }
    scan
}

/// The error for an unclosed string.
pub(crate) fn open_string_error(query: &str, quote: char, start: usize) -> ParseError {
    let hint = if quote == '`' {
        ""
    } else {
        " (a line break cannot be inside one)"
    };
    ParseError::new(
        query,
        Span::new(start, start + 1),
        format!("this string is not closed: add a {quote}{hint}"),
    )
}

/// How many repaired versions of a broken query to try before giving up on a partial AST.
const MAX_REPAIRS: usize = 12;

pub(crate) fn parse_lenient(query: &str) -> LenientParse {
    let full = scan(query);
    if let Some(at) = full.too_deep_at {
        let message = format!("the query nests deeper than {MAX_DEPTH} levels");
        return LenientParse {
            expr: None,
            errors: vec![ParseError::new(query, Span::new(at, at + 1), message)],
        };
    }
    let error = match parser::build(query) {
        Ok(built) => {
            let mut errors = built.errors;
            check::check(query, &built.expr, &mut errors);
            errors.sort_by_key(|e| e.span.start);
            return LenientParse {
                expr: Some(built.expr),
                errors,
            };
        }
        Err(e) => match full.open_string {
            Some((quote, start)) if start <= e.span.start => open_string_error(query, quote, start),
            _ => e,
        },
    };
    let stop = error.span.start;
    // First the whole text closed (a half-typed string or matcher list), then cuts at token
    // ends going back from the error.
    let cuts = std::iter::once(query.len())
        .chain(full.token_ends.iter().rev().copied().filter(|&c| c <= stop))
        .take(MAX_REPAIRS);
    let mut expr = None;
    for cut in cuts {
        let prefix = &query[..cut];
        let owned;
        let s = if cut == query.len() {
            &full
        } else {
            owned = scan(prefix);
            &owned
        };
        let mut text = prefix.to_owned();
        if let Some((quote, _)) = s.open_string {
            text.push(quote);
        }
        text.extend(s.open.iter().rev().map(|&(close, _)| close));
        if let Ok(built) = parser::build(&text) {
            let mut repaired = built.expr;
            clamp_spans(&mut repaired, cut);
            expr = Some(repaired);
            break;
        }
    }
    LenientParse {
        expr,
        errors: vec![error],
    }
}

/// Keeps every span inside the original text after a repair appended to it.
fn clamp_spans(expr: &mut Expr, limit: usize) {
    let clamp = |s: &mut Span| {
        s.start = s.start.min(limit);
        s.end = s.end.min(limit);
    };
    clamp(&mut expr.span);
    match &mut expr.kind {
        ExprKind::Selector(selector) => {
            for m in &mut selector.matchers {
                clamp(&mut m.span);
            }
        }
        ExprKind::StackFilter { expr, filter } => {
            clamp(&mut filter.span);
            clamp_spans(expr, limit);
        }
        ExprKind::Offset { expr, .. }
        | ExprKind::Merge { expr, .. }
        | ExprKind::Aggregate { expr, .. }
        | ExprKind::TopK { expr, .. }
        | ExprKind::Paren(expr) => clamp_spans(expr, limit),
        ExprKind::Diff { base, comparison } => {
            clamp_spans(base, limit);
            clamp_spans(comparison, limit);
        }
        ExprKind::Binary {
            lhs, rhs, op_span, ..
        } => {
            clamp(op_span);
            clamp_spans(lhs, limit);
            clamp_spans(rhs, limit);
        }
        ExprKind::Number(_) => {}
    }
}
