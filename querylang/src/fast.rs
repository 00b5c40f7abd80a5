//! A fast path for the most common query, a plain selector such as
//! `process_cpu:samples:count:cpu:nanoseconds:delta{job="api", instance=~"10\\.0\\..*"}[1h]`,
//! possibly with `offset` and stack filters after it.
//!
//! pest spends about 4 µs on that query, mostly in its per-rule bookkeeping (attempt tracking,
//! call counting, stack snapshots); this scan builds the same AST in a tenth of the time. It
//! accepts only a subset of the grammar, and only well-formed input: on anything else (another
//! expression kind, a comment, a single-quoted or raw string, a malformed literal) it answers
//! `None` and the query goes through the grammar, which also produces every error message.
//!
//! **Invariant:** where it answers, the AST equals the grammar's, spans included. Unit tests
//! below compare both on a corpus, and the fuzz target compares [`crate::parse`] (which uses this
//! path) with [`crate::parse_lenient`] (which does not).

use crate::ast::{
    Expr, ExprKind, LabelMatcher, MatchOp, ProfileTypeName, Selector, StackFilter, StackFilterOp,
};
use crate::error::Span;
use crate::literal;

/// The tree of `query`, if it is a well-formed plain selector with postfix operators.
#[expect(
    clippy::too_many_lines,
    reason = "a hand-written scanner of the selector grammar, one state per token, checked against pest by tests"
)]
pub(crate) fn plain_selector(query: &str) -> Option<Expr> {
    let b = query.as_bytes();
    let mut i = skip_space(b, 0);
    let start = i;
    let mut end;
    let mut selector = Selector::default();
    if b.get(i)
        .is_some_and(|&c| c.is_ascii_alphabetic() || c == b'_')
    {
        let type_start = i;
        while b
            .get(i)
            .is_some_and(|&c| c.is_ascii_alphanumeric() || c == b'_' || c == b':')
        {
            i += 1;
        }
        let text = &query[type_start..i];
        // Also excludes the keywords, which are one-part names.
        if ProfileTypeName::problem(text).is_some() {
            return None;
        }
        selector.profile_type = Some(ProfileTypeName::unchecked(text));
        end = i;
        i = skip_space(b, i);
    } else {
        end = start;
    }
    if b.get(i) == Some(&b'{') {
        i = skip_space(b, i + 1);
        loop {
            if b.get(i) == Some(&b'}') {
                break;
            }
            let (matcher, next) = matcher(query, i)?;
            selector.matchers.push(matcher);
            i = skip_space(b, next);
            match b.get(i) {
                Some(b',') => i = skip_space(b, i + 1),
                Some(b'}') => {}
                _ => return None,
            }
        }
        i += 1;
        end = i;
        i = skip_space(b, i);
    } else if selector.profile_type.is_none() {
        return None;
    }
    if b.get(i) == Some(&b'[') {
        i = skip_space(b, i + 1);
        let duration_start = i;
        if b.get(i) == Some(&b'-') {
            return None;
        }
        while b
            .get(i)
            .is_some_and(|&c| c.is_ascii_alphanumeric() || c == b'.')
        {
            i += 1;
        }
        if !b.get(duration_start).is_some_and(u8::is_ascii_digit) {
            return None;
        }
        let (range, _) = literal::parse_duration(&query[duration_start..i]).ok()?;
        if range.is_zero() {
            return None;
        }
        selector.range = Some(range);
        i = skip_space(b, i);
        if b.get(i) != Some(&b']') {
            return None;
        }
        i += 1;
        end = i;
        i = skip_space(b, i);
    }
    let mut expr = Expr {
        kind: ExprKind::Selector(selector),
        span: Span::new(start, end),
    };
    // Postfix operators: `offset 1d` and stack filters with double-quoted strings.
    for _ in 0..MAX_POSTFIX {
        if i == b.len() {
            return Some(expr);
        }
        let postfix_start = i;
        let kind = if query[i..].starts_with("offset") {
            i += "offset".len();
            if b.get(i)
                .is_some_and(|&c| c.is_ascii_alphanumeric() || c == b'_' || c == b':')
            {
                return None;
            }
            i = skip_space(b, i);
            let duration_start = i;
            if !b.get(i).is_some_and(u8::is_ascii_digit) {
                return None;
            }
            while b
                .get(i)
                .is_some_and(|&c| c.is_ascii_alphanumeric() || c == b'.')
            {
                i += 1;
            }
            let (offset, _) = literal::parse_duration(&query[duration_start..i]).ok()?;
            ExprKind::Offset {
                expr: Box::new(expr),
                offset,
            }
        } else {
            let op = match (b[i], b.get(i + 1)) {
                (b'|', Some(b'=')) => StackFilterOp::Contains,
                (b'!', Some(b'=')) => StackFilterOp::NotContains,
                (b'|', Some(b'~')) => StackFilterOp::Matches,
                (b'!', Some(b'~')) => StackFilterOp::NotMatches,
                _ => return None,
            };
            let (pattern, next) = double_quoted(query, skip_space(b, i + 2))?;
            i = next;
            let span = Span::new(postfix_start, i);
            ExprKind::StackFilter {
                expr: Box::new(expr),
                filter: StackFilter {
                    op,
                    pattern,
                    leaf: false,
                    span,
                },
            }
        };
        expr = Expr {
            kind,
            span: Span::new(start, i),
        };
        i = skip_space(b, i);
    }
    None
}

/// How many postfix operators the fast path takes; more are left to the grammar, which checks
/// the nesting limit.
const MAX_POSTFIX: usize = 16;

/// The value of the `"…"` string at `i` and the offset after it.
fn double_quoted(query: &str, mut i: usize) -> Option<(String, usize)> {
    let b = query.as_bytes();
    if b.get(i) != Some(&b'"') {
        return None;
    }
    let start = i;
    i += 1;
    loop {
        match b.get(i)? {
            b'"' => break,
            b'\\' => i += 2,
            b'\n' => return None,
            _ => i += 1,
        }
    }
    i += 1;
    Some((literal::unquote(query.get(start..i)?).ok()?, i))
}

/// `name op "value"` at `i`, and the offset after it.
fn matcher(query: &str, mut i: usize) -> Option<(LabelMatcher, usize)> {
    let b = query.as_bytes();
    let start = i;
    if !b
        .get(i)
        .is_some_and(|&c| c.is_ascii_alphabetic() || c == b'_')
    {
        return None;
    }
    while b
        .get(i)
        .is_some_and(|&c| c.is_ascii_alphanumeric() || c == b'_')
    {
        i += 1;
    }
    let name = &query[start..i];
    i = skip_space(b, i);
    let (op, len) = match (b.get(i), b.get(i + 1)) {
        (Some(b'='), Some(b'~')) => (MatchOp::Re, 2),
        (Some(b'!'), Some(b'~')) => (MatchOp::NotRe, 2),
        (Some(b'!'), Some(b'=')) => (MatchOp::NotEqual, 2),
        (Some(b'='), _) => (MatchOp::Equal, 1),
        _ => return None,
    };
    let (value, next) = double_quoted(query, skip_space(b, i + len))?;
    i = next;
    let span = Span::new(start, i);
    Some((
        LabelMatcher {
            name: name.to_owned(),
            op,
            value,
            span,
        },
        i,
    ))
}

/// The offset of the first non-whitespace byte at or after `i` (the grammar's `WHITESPACE`).
fn skip_space(b: &[u8], mut i: usize) -> usize {
    while b
        .get(i)
        .is_some_and(|c| matches!(c, b' ' | b'\t' | b'\n' | b'\r'))
    {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parser;

    /// The grammar's AST for `query`, when the grammar accepts it without literal errors.
    fn grammar(query: &str) -> Option<Expr> {
        let built = parser::build(query).ok()?;
        built.errors.is_empty().then_some(built.expr)
    }

    #[test]
    fn same_tree_as_the_grammar() {
        let accepted = [
            r#"process_cpu:samples:count:cpu:nanoseconds:delta{job="api", instance=~"10\\.0\\..*"}[1h]"#,
            "memory:inuse_space:bytes:space:bytes",
            "  memory:inuse_space:bytes:space:bytes{}  ",
            "memory:inuse_space:bytes:space:bytes { a = \"b\" , c !~ \"d\" , } [ 5m ]\n",
            r#"{__name__=~"memory:.*", instance="localhost:7070"}"#,
            r#"{a!="é\"\x41\u00e9"}"#,
            "{}",
            "a:b:c:d:e[1h30m]",
            "a:b:c:d:e:delta{x=\"\"}[500ms]",
            "a:b:c:d:e offset 1d",
            "a:b:c:d:e[5m] offset 0s |= \"x\" != \"y\" |~ \"a.*\" !~\"\\\\d\" offset 1h  ",
            "{__name__=\"a:b:c:d:e\"}|=\"x\"",
        ];
        for q in accepted {
            let fast = plain_selector(q);
            assert!(fast.is_some(), "fast path refused {q:?}");
            assert_eq!(fast, grammar(q), "{q:?}");
        }
        let refused = [
            "",
            "sum",
            "x",
            "a:b:c:d:e offset -1d",
            "a:b:c:d:e offset1d",
            "a:b:c:d:e offset",
            "a:b:c:d:e # comment",
            "{a='b'}",
            "{a=`b`}",
            "a:b:c:d:e[0s]",
            "a:b:c:d:e[-5m]",
            "a:b:c:d:e[5]",
            "{a=\"\\q\"}",
            "a:b:c:d:e{a=\"b\"",
            "a:b:c:d:e{a=\"b\" c=\"d\"}",
            "a:b:c:d:e |= 'x'",
            "a:b:c:d:e |= \"x",
            "a:b:c:d:e |= \"x\" |",
            "(a:b:c:d:e)",
            "a:b:c:d:e:f",
            "{a=\"b\n\"}",
            "a:b:c:d:e[1h",
            "a:b:c:d:e[1h]]",
            "{,}",
            "a:b:c:d:e{a=\"b\",,}",
            "a:b:c:d:e / 2",
            "a:b:c:d:e != 1",
            "a:b:c:d:e != leaf \"x\"",
            "a:b:c:d:e |= \"x\" * a:b:c:d:e",
        ];
        for q in refused {
            assert_eq!(plain_selector(q), None, "{q:?}");
        }
    }
}
