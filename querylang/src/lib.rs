//! The profile query language: text in, a checked syntax tree with spans out.
//!
//! The language is PromQL's shape applied to profiles (see `querylang.md` of the design
//! documents): a selector such as
//! `process_cpu:samples:count:cpu:nanoseconds:delta{job="api"}[1h]` picks a **profile set**;
//! `merge` and `diff` make a **profile**; `sum`/`avg`/`min`/`max`/`count` and `topk` make a
//! **series set** of totals. `offset` shifts a window back and stack filters (`|=`, `!=`, `|~`,
//! `!~`) keep or drop samples by the functions on their stacks (`leaf`: by the function that was
//! running). Binary operators (`+ - * /`, comparisons with or without `bool`, vector matching
//! with `on`/`ignoring` and `group_left`/`group_right`) combine series sets and numbers as
//! PromQL's do: `sum by (job) (x |= "f") / sum by (job) (x)` is a function's share per job.
//!
//! [`parse`] returns an [`Expr`] that has passed the type and semantic checks, or the first
//! [`ParseError`]; [`parse_lenient`] returns what it could make of a half-typed query and all the
//! errors, for an editor's autocomplete. `Display` on an [`Expr`] prints canonical query text.
//!
//! Pieces: `grammar.pest` (the syntax), `parser.rs` (pest's result and errors turned into our
//! AST and words), `fast.rs` (a scan that builds plain selectors without pest), `literal.rs`
//! (strings, durations), `check.rs` (types, regexes), `print.rs`, `lenient.rs` (the pre-scan and
//! the repairs of the lenient parse).
//!
//! # Design constraints
//!
//! - Text in, AST out: no I/O, no storage types. Evaluation, where the AST meets the tsdb, lives
//!   outside this crate and relies on the checks here: an AST from [`parse`] type-checks.
//! - pest stays inside: no pest type appears in the public API, and no grammar rule name
//!   appears in a message. Errors say what was expected in words, with line, column and a caret.
//! - Hostile queries cost linear time and bounded stack: nesting is limited to 128 levels before
//!   the grammar runs, and regexes are checked with the `regex` crate (linear-time matching).
//! - Profile type names are Parca's, `name:sample_type:sample_unit:period_type:period_unit`
//!   with an optional sixth part `delta`. A bare name such as `process_cpu` is an error that
//!   shows the form: one name has several sample types, and guessing one would show wrong
//!   numbers. Whether a well-formed name exists is for evaluation to say.
//! - Types: `merge`, `diff` and stack filters take profiles (a profile set is merged
//!   implicitly); `sum`/`avg`/`min`/`max`/`count` and `topk` take a series set or a profile set,
//!   read as one series of totals per matched series; binary operators take those or numbers.
//!   Anything else is a type error that points at the argument. `offset` applies to any
//!   expression but a number.
//! - `!=` and `!~` are both stack filters and (`!=`) a comparison: a string on the right makes a
//!   filter, anything else an operand; no operand starts with a string, so this is never
//!   ambiguous. Binary chains nest as deep as they are long, so their operators count towards
//!   the depth limit.
//! - Regexes (in `=~`, `!~`, `|~`, `!~`) are anchored at both ends, `^(?:…)$`, as in PromQL.
//!   They are only validated here; the AST keeps the pattern text and the evaluator compiles it.
//! - Parsing is fast enough for a UI's every keystroke and an API's every request: over a
//!   million typical selectors a second on one core (`benches/parse.rs`). pest alone takes about
//!   4 µs for a typical selector, so selectors (with `offset` and stack filters) take a fast
//!   path (`fast.rs`) that must give the grammar's AST exactly, which the fuzz target checks;
//!   anything else, and every error, goes through the grammar.
//!
//! # Example
//!
//! ```
//! use parca_querylang::{ExprKind, ValueType, parse};
//!
//! let q = r#"sum by (instance) (process_cpu:samples:count:cpu:nanoseconds:delta{job="api"})"#;
//! let expr = parse(q).unwrap();
//! assert_eq!(expr.value_type(), ValueType::SeriesSet);
//! let ExprKind::Aggregate { grouping, .. } = &expr.kind else { panic!() };
//! assert_eq!(grouping.as_ref().unwrap().labels, ["instance"]);
//! assert_eq!(expr.to_string(), q);
//!
//! let q = "diff(sum(memory:inuse_space:bytes:space:bytes), memory:inuse_space:bytes:space:bytes)";
//! let err = parse(q).unwrap_err();
//! assert_eq!(err.to_string(), "line 1, column 6: `diff` takes profiles, got a series set");
//! // Then the query line, and a caret line under `sum(…)`.
//! assert!(err.render(q).ends_with(&format!("\n  |      {}", "^".repeat(41))));
//! ```

// pest is built without its `std` feature, which would probe the native stack on every rule call
// (a tenth of the parse time); our own depth limit bounds the recursion instead. Its generated
// parser then names `alloc` from the crate root.
extern crate alloc;

mod ast;
mod check;
mod error;
mod fast;
mod lenient;
mod literal;
mod parser;
mod print;

pub use ast::{
    AggregateOp, BinaryOp, Expr, ExprKind, GroupModifier, GroupSide, Grouping,
    InvalidProfileTypeName, LabelMatcher, Number, ProfileTypeName, Selector, StackFilter,
    StackFilterOp, ValueType, VectorMatching,
};
pub use error::{Expected, ParseError, Span};
pub use lenient::LenientParse;
pub use parca_vocab::{MatchOp, duration, is_valid_label_name, sanitize_label_name};
pub use parser::is_recorded_series_name;

/// Parses and checks a query: the AST, or the first error (by position in the query).
///
/// Syntax errors, malformed literals (escapes, durations, profile type names), type errors
/// (`diff` of a series set, `sum` of a profile) and semantic errors (a regex that does not
/// compile, a zero range, a selector that selects everything) are all errors.
pub fn parse(query: &str) -> Result<Expr, ParseError> {
    parse_with(query, false)
}

/// Parses and checks a rule's query, as [`parse`] does, where a selector may also name a series
/// recorded by a recording rule (`job:cpu:sum`, `ALERTS`; see [`is_recorded_series_name`])
/// instead of a profile type: such a selector reads the rules' latest samples, as a Prometheus
/// rule reads another rule's output. Names shaped like profile types (5 or 6 `:`-separated
/// parts) are checked as profile types, so a mistyped one is still an error.
pub fn parse_rule_query(query: &str) -> Result<Expr, ParseError> {
    parse_with(query, true)
}

fn parse_with(query: &str, metric_names: bool) -> Result<Expr, ParseError> {
    if let Some(expr) = fast::plain_selector(query) {
        let mut errors = Vec::new();
        check::check(query, &expr, &mut errors);
        return match errors.into_iter().min_by_key(|e| e.span.start) {
            Some(e) => Err(e),
            None => Ok(expr),
        };
    }
    let scan = lenient::scan(query);
    if let Some(at) = scan.too_deep_at {
        let message = format!("the query nests deeper than {} levels", parser::MAX_DEPTH);
        return Err(ParseError::new(query, Span::new(at, at + 1), message));
    }
    let built = build_with(query, &scan, metric_names)?;
    let mut errors = built.errors;
    check::check(query, &built.expr, &mut errors);
    match errors.into_iter().min_by_key(|e| e.span.start) {
        Some(e) => Err(e),
        None => Ok(built.expr),
    }
}

/// Parses a series selector for the metadata endpoints (`match[]` of `/api/v1/series`,
/// `/api/v1/labels`): a selector without a range, which, unlike in a query, may select by any
/// label (`{job="api"}`) as long as one matcher rejects the empty value.
pub fn parse_series_selector(text: &str) -> Result<Selector, ParseError> {
    let scan = lenient::scan(text);
    if let Some(at) = scan.too_deep_at {
        let message = format!("the query nests deeper than {} levels", parser::MAX_DEPTH);
        return Err(ParseError::new(text, Span::new(at, at + 1), message));
    }
    let built = build(text, &scan)?;
    let mut errors = built.errors;
    check::check_series_selector(text, &built.expr, &mut errors);
    if let Some(e) = errors.into_iter().min_by_key(|e| e.span.start) {
        return Err(e);
    }
    match built.expr.kind {
        ExprKind::Selector(selector) if selector.range.is_none() => Ok(selector),
        _ => Err(ParseError::new(
            text,
            built.expr.span,
            "expected a series selector such as memory:inuse_space:bytes:space:bytes{job=\"api\"} \
             or {job=\"api\"}, without a range or functions",
        )),
    }
}

/// The syntax tree of `text`; a syntax error at or after a string left open (a line break
/// inside it, or no closing quote) is reported as that string's error, which says what to do.
fn build(text: &str, scan: &lenient::Scan) -> Result<parser::Built, ParseError> {
    build_with(text, scan, false)
}

fn build_with(
    text: &str,
    scan: &lenient::Scan,
    metric_names: bool,
) -> Result<parser::Built, ParseError> {
    parser::build_with(text, metric_names).map_err(|e| match scan.open_string {
        Some((quote, start)) if start <= e.span.start => {
            lenient::open_string_error(text, quote, start)
        }
        _ => e,
    })
}

/// Parses as much of a query as it can, for autocomplete while typing.
///
/// A syntax error stops pest at its first problem; the lenient parse then tries the query with
/// an unclosed string and brackets closed, then cut back token by token from the error and
/// closed, and returns the first version that parses (so `sum(foo{job="ap` gives the selector
/// with `job="ap"`). The returned errors are those of the original text only.
pub fn parse_lenient(query: &str) -> LenientParse {
    lenient::parse_lenient(query)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_queries_may_name_recorded_series_and_still_check_profile_types() {
        for query in [
            "job:heap_inuse:sum > 0",
            "sum by (job) (job:heap_inuse:sum{job=\"api\"}) / 2",
            "ALERTS{alertstate=\"firing\"}",
            "job:cpu:ratio > bool 0.5",
        ] {
            assert!(parse_rule_query(query).is_ok(), "{query}");
        }
        // Outside rules, a name must be a profile type.
        let e = parse("job:heap_inuse:sum > 0").unwrap_err();
        assert!(e.message.contains("a profile type has 5 or 6"), "{e:?}");
        // A name shaped like a profile type is checked as one, in rules too.
        let e =
            parse_rule_query("sum(process_cpu:cpu:nanoseconds:cpu:nanoseconds:delat)").unwrap_err();
        assert!(e.message.contains("sixth part"), "{e:?}");
        assert!(is_recorded_series_name("job:cpu:sum"));
        assert!(!is_recorded_series_name("a:b:c:d:e"));
        assert!(!is_recorded_series_name("9lives"));
    }

    #[test]
    fn series_selectors_may_select_by_any_label() {
        let selector = parse_series_selector(r#"{job="api"}"#).expect("valid");
        assert!(selector.profile_type.is_none());
        assert_eq!(selector.matchers.len(), 1);
        assert!(parse_series_selector("memory:inuse_space:bytes:space:bytes").is_ok());
        assert_eq!(
            parse_series_selector(r#"{job=~".*"}"#)
                .unwrap_err()
                .to_string(),
            "line 1, column 1: a series selector needs at least one matcher that does not match the empty value, such as {job=\"api\"}"
        );
        assert!(
            parse_series_selector(r#"merge({job="api"})"#)
                .unwrap_err()
                .to_string()
                .contains("expected a series selector")
        );
    }
}
