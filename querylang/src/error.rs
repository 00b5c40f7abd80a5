//! Errors for people: where (line, column, a caret under the spot) and what, in words.

use std::fmt;

/// A byte range `start..end` in the query text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Span {
    /// Offset of the first byte.
    pub start: usize,
    /// Offset one past the last byte; equal to `start` for a point (such as the end of input).
    pub end: usize,
}

impl Span {
    /// The span `start..end`.
    pub fn new(start: usize, end: usize) -> Span {
        Span { start, end }
    }

    /// The smallest span covering both.
    pub fn to(self, other: Span) -> Span {
        Span::new(self.start.min(other.start), self.end.max(other.end))
    }
}

/// Something the parser was ready to accept where it stopped; [`ParseError::expected`] lists them
/// so that an editor can offer completions (label names where a [`Expected::LabelMatcher`] fits,
/// durations where a [`Expected::Duration`] fits, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Expected {
    /// Any expression: a selector, `merge(…)`, `diff(…)`, an aggregation, `topk(…)`, `(…)` or
    /// a number.
    Expression,
    /// `by (…)` or `without (…)`.
    Grouping,
    /// A label matcher such as `job="api"`.
    LabelMatcher,
    /// A label name, as in a grouping.
    LabelName,
    /// One of `=`, `!=`, `=~`, `!~` in a label matcher.
    MatchOp,
    /// A quoted string.
    String,
    /// A number, as `topk`'s k.
    Number,
    /// A duration such as `5m`.
    Duration,
    /// A punctuation character.
    Symbol(char),
    /// A range such as `[5m]` after a selector.
    Range,
    /// The `offset` modifier.
    Offset,
    /// A stack filter such as `|= "main"`.
    StackFilter,
    /// A binary operator such as `/` or `>`.
    BinaryOperator,
    /// `bool`, `on (…)` or `ignoring (…)` after a binary operator.
    VectorMatching,
    /// `group_left` or `group_right` after `on (…)` or `ignoring (…)`.
    GroupModifier,
    /// `leaf` in a stack filter, as in `|= leaf "main"`.
    Leaf,
    /// The end of the query.
    EndOfQuery,
}

impl fmt::Display for Expected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expected::Expression => f.write_str(
                "an expression such as memory:inuse_space:bytes:space:bytes{job=\"api\"} or merge(…)",
            ),
            Expected::Grouping => f.write_str("a grouping such as by (job)"),
            Expected::LabelMatcher => f.write_str("a label matcher such as job=\"api\""),
            Expected::LabelName => f.write_str("a label name such as instance"),
            Expected::MatchOp => f.write_str("a match operator (=, !=, =~ or !~)"),
            Expected::String => f.write_str("a string such as \"api\""),
            Expected::Number => f.write_str("a number such as 5"),
            Expected::Duration => f.write_str("a duration such as 5m"),
            Expected::Symbol(c) => write!(f, "`{c}`"),
            Expected::Range => f.write_str("a range such as [5m]"),
            Expected::Offset => f.write_str("`offset`"),
            Expected::StackFilter => f.write_str("a stack filter such as |= \"main\""),
            Expected::BinaryOperator => f.write_str("a binary operator such as / or >"),
            Expected::VectorMatching => f.write_str("`bool`, `on (…)` or `ignoring (…)`"),
            Expected::GroupModifier => f.write_str("`group_left` or `group_right`"),
            Expected::Leaf => f.write_str("`leaf`"),
            Expected::EndOfQuery => f.write_str("the end of the query"),
        }
    }
}

/// A syntax, type or semantic error in a query, with the place it concerns.
///
/// `Display` gives one line, `line L, column C: message`; [`ParseError::render`] adds the query
/// line with a caret under the spot.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {column}: {message}")]
pub struct ParseError {
    /// Where in the query; a point (`start == end`) for "expected … here".
    pub span: Span,
    /// What is wrong, in words: lowercase, no trailing period.
    pub message: String,
    /// 1-based line of `span.start`.
    pub line: usize,
    /// 1-based column of `span.start`, counted in characters.
    pub column: usize,
    /// For a syntax error, what would have been accepted at `span.start`; empty otherwise.
    pub expected: Vec<Expected>,
}

impl ParseError {
    /// An error about `span` of `query`; computes line and column.
    pub fn new(query: &str, span: Span, message: impl Into<String>) -> ParseError {
        let start = floor_char_boundary(query, span.start);
        let before = &query[..start];
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        ParseError {
            span: Span::new(start, span.end.max(start)),
            message: message.into(),
            line: 1 + before.bytes().filter(|&b| b == b'\n').count(),
            column: 1 + before[line_start..].chars().count(),
            expected: Vec::new(),
        }
    }

    /// The error as a person reads it: the message, then the query's line with the line number,
    /// then a caret line under the span (clipped to that line):
    ///
    /// ```text
    /// line 1, column 5: expected a label matcher such as job="api", found `}`
    /// 1 | foo{}
    ///   |     ^
    /// ```
    pub fn render(&self, query: &str) -> String {
        let start = floor_char_boundary(query, self.span.start);
        let line_start = query[..start].rfind('\n').map_or(0, |i| i + 1);
        let line_end = query[start..].find('\n').map_or(query.len(), |i| start + i);
        // Without a trailing `\r`, unless the spot is after it (at the end of the query).
        let line_end =
            (line_start + query[line_start..line_end].trim_end_matches('\r').len()).max(start);
        let end = floor_char_boundary(query, self.span.end.clamp(start, line_end));
        // A long line is shown as a window around the spot, marked with `…` where cut.
        let fits = query[line_start..line_end]
            .chars()
            .nth(LINE_WIDTH)
            .is_none();
        let shown_start = query[line_start..start]
            .char_indices()
            .rev()
            .nth(CONTEXT_BEFORE - 1)
            .filter(|_| !fits)
            .map_or(line_start, |(i, _)| line_start + i);
        let shown_end = query[shown_start..line_end]
            .char_indices()
            .nth(LINE_WIDTH)
            .map_or(line_end, |(i, _)| shown_start + i);
        let end = end.min(shown_end);
        let (cut_before, cut_after) = if shown_start > line_start {
            ("…", " ")
        } else {
            ("", "")
        };
        let ellipsis_after = if shown_end < line_end { "…" } else { "" };
        let number = self.line.to_string();
        let gutter = " ".repeat(number.len());
        // Keep tabs as tabs so that the caret lines up under what the terminal shows.
        let pad: String = query[shown_start..start]
            .chars()
            .map(|c| if c == '\t' { '\t' } else { ' ' })
            .collect();
        let carets = "^".repeat(query[start..end].chars().count().max(1));
        let shown = &query[shown_start..shown_end];
        format!(
            "{self}\n{number} | {cut_before}{shown}{ellipsis_after}\n{gutter} | {cut_after}{pad}{carets}"
        )
    }
}

/// How many characters of a long line [`ParseError::render`] shows, and how many before the spot.
const LINE_WIDTH: usize = 100;
const CONTEXT_BEFORE: usize = 40;

/// The largest char boundary at or before `i` (clamped to the text).
fn floor_char_boundary(s: &str, i: usize) -> usize {
    let mut i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_and_column_count_characters() {
        let q = "sum(\n  \"é\" x)";
        let e = ParseError::new(q, Span::new(q.find('x').unwrap(), q.len() - 1), "bad");
        assert_eq!((e.line, e.column), (2, 7));
        assert_eq!(e.to_string(), "line 2, column 7: bad");
        assert_eq!(
            e.render(q),
            "line 2, column 7: bad\n2 |   \"é\" x)\n  |       ^"
        );
    }

    #[test]
    fn caret_at_end_of_input_and_tabs() {
        let q = "\tfoo{";
        let e = ParseError::new(q, Span::new(q.len(), q.len()), "expected");
        assert_eq!(
            e.render(q),
            "line 1, column 6: expected\n1 | \tfoo{\n  | \t    ^"
        );
    }

    #[test]
    fn long_lines_are_cut_around_the_spot() {
        let q = format!("{}X{}", "a".repeat(60), "b".repeat(200));
        let e = ParseError::new(&q, Span::new(60, 261), "here");
        let expected = format!(
            "line 1, column 61: here\n1 | …{}X{}…\n  |  {}{}",
            "a".repeat(40),
            "b".repeat(59),
            " ".repeat(40),
            "^".repeat(60)
        );
        assert_eq!(e.render(&q), expected);
    }

    /// Found by the fuzzer: the end of input after a `\r` lies past the line without it.
    #[test]
    fn caret_after_a_trailing_carriage_return() {
        let q = "{__e\r";
        let e = ParseError::new(q, Span::new(5, 5), "expected");
        assert_eq!(
            e.render(q),
            "line 1, column 6: expected\n1 | {__e\r\n  |      ^"
        );
    }

    #[test]
    fn span_is_clipped_to_its_line() {
        let q = "diff(a,\n b)";
        let e = ParseError::new(q, Span::new(0, q.len()), "whole");
        assert_eq!(
            e.render(q),
            "line 1, column 1: whole\n1 | diff(a,\n  | ^^^^^^^"
        );
    }
}
