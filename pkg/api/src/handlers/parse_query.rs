//! `/api/v1/parse_query`: the structure of a query, for clients that edit queries.
//!
//! The web UI adds matchers for a clicked series, a range and an offset for a window, and
//! decides whether a query gives a profile or numbers. It asks the server's parser where the
//! selector and its parts are rather than re-lexing the text itself, so the grammar has one
//! owner. Offsets are counted in characters (Unicode scalar values), as error columns are.

use parca_querylang::{Expr, ExprKind, ParseError, Selector, Span, ValueType};
use serde::Serialize;

use crate::call::Call;
use crate::response::{ApiError, Body, success};

/// What the answer says of a query.
#[derive(Serialize)]
struct Structure {
    /// `profile_set`, `profile` or `series_set`: what the query evaluates to.
    value_type: Option<&'static str>,
    /// Every selector, in query order.
    selectors: Vec<SelectorParts>,
    /// The errors (a lenient parse only; a strict one answers 400 instead).
    #[serde(skip_serializing_if = "Option::is_none")]
    errors: Option<Vec<ErrorParts>>,
}

/// Where a selector's parts are, in characters from the start of the query.
#[derive(Serialize)]
struct SelectorParts {
    /// The first character of the selector.
    start: usize,
    /// One past its last character, its range included.
    end: usize,
    /// One past the type and matchers: where a range or an offset is added.
    body_end: usize,
    /// `{` and one past `}` when the selector has braces.
    braces: Option<CharSpan>,
    /// The profile type it selects: the name before `{`, the quoted name inside, or an
    /// `__name__="…"` matcher's value.
    profile_type: Option<String>,
    /// The label matchers, in query order.
    matchers: Vec<MatcherParts>,
    /// The selector's own range (`[5m]`) in querylang's units.
    range: Option<String>,
}

#[derive(Serialize, Clone, Copy)]
struct CharSpan {
    start: usize,
    end: usize,
}

#[derive(Serialize)]
struct MatcherParts {
    name: String,
    op: &'static str,
    value: String,
    start: usize,
    end: usize,
}

#[derive(Serialize)]
struct ErrorParts {
    message: String,
    position: Position,
    start: usize,
    end: usize,
}

#[derive(Serialize)]
struct Position {
    line: usize,
    column: usize,
}

/// `GET|POST /api/v1/parse_query?query=…[&lenient=true]`.
///
/// Strict (the default): a query that does not parse is answered 400 with its position, as
/// `/api/v1/query` would answer it. Lenient: a half-typed query is repaired as autocomplete
/// repairs it, and the errors of the text as typed come in `errors`.
pub(crate) fn parse_query(call: &Call) -> Result<hyper::Response<Body>, ApiError> {
    let text = call.params.required("query")?;
    let lenient = match call.params.get("lenient") {
        None | Some("false" | "0") => false,
        Some("true" | "1") => true,
        Some(other) => {
            return Err(ApiError::bad_data(format!(
                "`lenient` is true or false, not `{other}`"
            )));
        }
    };
    let structure = if lenient {
        let parsed = parca_querylang::parse_lenient(text);
        let mut structure = structure_of(text, parsed.expr.as_ref());
        let errors = parsed.errors.iter().map(|e| error_parts(text, e)).collect();
        structure.errors = Some(errors);
        structure
    } else {
        let expr = parca_querylang::parse(text)
            .map_err(|e| ApiError::bad_data(e.render(text)).at(e.line, e.column))?;
        structure_of(text, Some(&expr))
    };
    Ok(success(&structure))
}

fn structure_of(text: &str, expr: Option<&Expr>) -> Structure {
    let mut selectors = Vec::new();
    if let Some(expr) = expr {
        collect_selectors(expr, &mut |selector, span| {
            selectors.push(selector_parts(text, selector, span));
        });
    }
    Structure {
        value_type: expr.map(|e| match e.value_type() {
            ValueType::ProfileSet => "profile_set",
            ValueType::Profile => "profile",
            ValueType::SeriesSet => "series_set",
            ValueType::Scalar => "scalar",
        }),
        selectors,
        errors: None,
    }
}

/// Calls `visit` with every selector of `expr` and its span, in query order.
fn collect_selectors(expr: &Expr, visit: &mut impl FnMut(&Selector, Span)) {
    match &expr.kind {
        ExprKind::Selector(selector) => visit(selector, expr.span),
        ExprKind::Offset { expr, .. }
        | ExprKind::StackFilter { expr, .. }
        | ExprKind::Merge { expr, .. }
        | ExprKind::Aggregate { expr, .. }
        | ExprKind::TopK { expr, .. }
        | ExprKind::Paren(expr) => collect_selectors(expr, visit),
        ExprKind::Diff { base, comparison } => {
            collect_selectors(base, visit);
            collect_selectors(comparison, visit);
        }
        ExprKind::Binary { lhs, rhs, .. } => {
            collect_selectors(lhs, visit);
            collect_selectors(rhs, visit);
        }
        ExprKind::Number(_) => {}
    }
}

fn selector_parts(text: &str, selector: &Selector, span: Span) -> SelectorParts {
    let source = text.get(span.start..span.end).unwrap_or("");
    // The grammar puts a range last, and neither a type name nor a duration holds `[`; a `[`
    // inside a quoted matcher value comes before `}`, so the range is the last `[`.
    let body = match selector.range {
        Some(_) => source.rfind('[').map_or(source, |i| source[..i].trim_end()),
        None => source,
    };
    let body_end = span.start + body.len();
    let braces = match (body.find('{'), body.ends_with('}')) {
        (Some(open), true) => Some(CharSpan {
            start: chars_before(text, span.start + open),
            end: chars_before(text, body_end),
        }),
        _ => None,
    };
    let profile_type = selector
        .profile_type
        .as_ref()
        .map(|t| t.as_str().to_owned())
        .or_else(|| {
            selector
                .matchers
                .iter()
                .find(|m| m.name == "__name__" && m.op == parca_querylang::MatchOp::Equal)
                .map(|m| m.value.clone())
        });
    SelectorParts {
        start: chars_before(text, span.start),
        end: chars_before(text, span.end),
        body_end: chars_before(text, body_end),
        braces,
        profile_type,
        matchers: selector
            .matchers
            .iter()
            .map(|m| MatcherParts {
                name: m.name.clone(),
                op: m.op.as_str(),
                value: m.value.clone(),
                start: chars_before(text, m.span.start),
                end: chars_before(text, m.span.end),
            })
            .collect(),
        range: selector.range.map(parca_querylang::duration::format),
    }
}

fn error_parts(text: &str, error: &ParseError) -> ErrorParts {
    ErrorParts {
        message: error.message.clone(),
        position: Position {
            line: error.line,
            column: error.column,
        },
        start: chars_before(text, error.span.start),
        end: chars_before(text, error.span.end),
    }
}

/// How many characters precede byte `offset` of `text` (clamped to the text).
fn chars_before(text: &str, offset: usize) -> usize {
    let mut end = offset.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].chars().count()
}
