//! Type and semantic checks over a built AST: what each operator accepts, regexes that compile,
//! selectors that select something.

use regex::Regex;

use crate::ast::{
    BinaryOp, Expr, ExprKind, LabelMatcher, MatchOp, Selector, StackFilterOp, ValueType,
    VectorMatching,
};
use crate::error::{ParseError, Span};

/// The label that holds the profile type.
const NAME_LABEL: &str = "__name__";

/// Appends every problem of `expr` to `errors`, innermost first.
pub(crate) fn check(query: &str, expr: &Expr, errors: &mut Vec<ParseError>) {
    let mut checker = Checker {
        query,
        errors,
        series_selector: false,
    };
    checker.expr(expr);
}

/// Checks a series selector of the metadata endpoints (`match[]`), which may select by any
/// label: at least one matcher must reject the empty value, as Prometheus requires.
pub(crate) fn check_series_selector(query: &str, expr: &Expr, errors: &mut Vec<ParseError>) {
    let mut checker = Checker {
        query,
        errors,
        series_selector: true,
    };
    checker.expr(expr);
}

struct Checker<'a> {
    query: &'a str,
    errors: &'a mut Vec<ParseError>,
    series_selector: bool,
}

impl Checker<'_> {
    fn error(&mut self, span: Span, message: String) {
        self.errors.push(ParseError::new(self.query, span, message));
    }

    /// Reports `arg` unless its type is one of `accepted`; `what` names the operator.
    fn takes(&mut self, what: &str, accepted: &[ValueType], wanted: &str, arg: &Expr) {
        let got = arg.value_type();
        if !accepted.contains(&got) {
            self.error(
                arg.span,
                format!("`{what}` takes {wanted}, got {}", got.describe()),
            );
        }
    }

    fn expr(&mut self, expr: &Expr) {
        const PROFILES: &[ValueType] = &[ValueType::ProfileSet, ValueType::Profile];
        const SERIES: &[ValueType] = &[ValueType::ProfileSet, ValueType::SeriesSet];
        match &expr.kind {
            ExprKind::Selector(selector) => self.selector(selector, expr.span),
            ExprKind::Offset { expr: inner, .. } => {
                self.expr(inner);
                if inner.value_type() == ValueType::Scalar {
                    self.error(
                        expr.span,
                        "`offset` shifts the time of series and profiles; a number has none".into(),
                    );
                }
            }
            ExprKind::Number(_) => {}
            ExprKind::Binary {
                op,
                lhs,
                rhs,
                return_bool,
                matching,
                op_span,
            } => self.binary(*op, lhs, rhs, *return_bool, matching.as_ref(), *op_span),
            ExprKind::StackFilter {
                expr: inner,
                filter,
            } => {
                self.expr(inner);
                self.takes(filter.op.as_str(), PROFILES, "profiles", inner);
                if matches!(
                    filter.op,
                    StackFilterOp::Matches | StackFilterOp::NotMatches
                ) && let Err(why) = check_regex(&filter.pattern)
                {
                    let op = filter.op.as_str();
                    self.error(filter.span, format!("invalid regex after `{op}`: {why}"));
                }
            }
            ExprKind::Merge { expr: inner, .. } => {
                self.expr(inner);
                self.takes("merge", PROFILES, "profiles", inner);
            }
            ExprKind::Diff { base, comparison } => {
                self.expr(base);
                self.takes("diff", PROFILES, "profiles", base);
                self.expr(comparison);
                self.takes("diff", PROFILES, "profiles", comparison);
            }
            ExprKind::Aggregate {
                op, expr: inner, ..
            } => {
                self.expr(inner);
                self.takes(op.as_str(), SERIES, "a profile set or a series set", inner);
            }
            ExprKind::TopK { expr: inner, .. } => {
                self.expr(inner);
                self.takes("topk", SERIES, "a profile set or a series set", inner);
            }
            ExprKind::Paren(inner) => self.expr(inner),
        }
    }

    /// PromQL's rules for binary operators: operands are series (profile sets read as series of
    /// totals) or numbers; `bool` only after comparisons, and between two numbers a comparison
    /// needs it; `on`/`ignoring` only between two series sets.
    fn binary(
        &mut self,
        op: BinaryOp,
        lhs: &Expr,
        rhs: &Expr,
        return_bool: bool,
        matching: Option<&VectorMatching>,
        op_span: Span,
    ) {
        const OPERANDS: &[ValueType] = &[
            ValueType::ProfileSet,
            ValueType::SeriesSet,
            ValueType::Scalar,
        ];
        let what = op.as_str();
        self.expr(lhs);
        self.takes(what, OPERANDS, "series sets or numbers", lhs);
        self.expr(rhs);
        self.takes(what, OPERANDS, "series sets or numbers", rhs);
        let scalars = [lhs, rhs]
            .iter()
            .filter(|e| e.value_type() == ValueType::Scalar)
            .count();
        if return_bool && !op.is_comparison() {
            self.error(
                op_span,
                format!("`bool` only follows a comparison (==, !=, >, <, >=, <=), not `{what}`"),
            );
        } else if op.is_comparison() && !return_bool && scalars == 2 {
            self.error(
                op_span,
                format!(
                    "a comparison between two numbers must say `bool`, as in `1 {what} bool 2`: \
                     there are no series to filter"
                ),
            );
        }
        let Some(matching) = matching else {
            return;
        };
        if scalars > 0 {
            let keyword = if matching.on { "on" } else { "ignoring" };
            self.error(
                op_span,
                format!("`{keyword}` matches series with series; one side of `{what}` is a number"),
            );
            return;
        }
        if matching.on
            && let Some(group) = &matching.group
            && let Some(label) = group.labels.iter().find(|l| matching.labels.contains(l))
        {
            self.error(
                op_span,
                format!(
                    "label `{label}` is in both `on` and the group modifier: a label the series \
                     match on is the same on both sides already"
                ),
            );
        }
    }

    fn selector(&mut self, selector: &Selector, span: Span) {
        for m in &selector.matchers {
            if matches!(m.op, MatchOp::Re | MatchOp::NotRe)
                && let Err(why) = check_regex(&m.value)
            {
                self.error(
                    m.span,
                    format!("invalid regex in `{}{}`: {why}", m.name, m.op.as_str()),
                );
            }
        }
        let name_matchers = || selector.matchers.iter().filter(|m| m.name == NAME_LABEL);
        if selector.profile_type.is_some() {
            if let Some(m) = name_matchers().next() {
                self.error(
                    m.span,
                    format!("the profile type is given twice: before `{{` and by `{NAME_LABEL}`"),
                );
            }
        } else if self.series_selector {
            if !selector.matchers.iter().any(selects_something) {
                self.error(
                    span,
                    "a series selector needs at least one matcher that does not match the \
                     empty value, such as {job=\"api\"}"
                        .into(),
                );
            }
        } else if !name_matchers().any(selects_something) {
            self.error(
                span,
                format!(
                    "a selector without a profile type must match `{NAME_LABEL}` to a non-empty \
                     value, as in {{{NAME_LABEL}=~\"memory:.*\"}}"
                ),
            );
        }
    }
}

/// Whether the matcher fails on the empty value, so that it cannot select every series.
fn selects_something(m: &LabelMatcher) -> bool {
    let matches_empty = match m.op {
        MatchOp::Equal => m.value.is_empty(),
        MatchOp::NotEqual => !m.value.is_empty(),
        // A regex that does not compile has its own error.
        MatchOp::Re => regex_matches_empty(&m.value).unwrap_or(false),
        MatchOp::NotRe => !regex_matches_empty(&m.value).unwrap_or(true),
    };
    !matches_empty
}

/// Whether `pattern` compiles with the `regex` crate both alone and anchored, `^(?:pattern)$`,
/// as evaluation uses it; the reason in words when not.
///
/// Compiling costs tens of microseconds, more than parsing a whole query, so the common shapes
/// (literals, escaped metacharacters, `.`, `*`/`+`/`?`, `|`, `^`, `$`) are recognised as valid by
/// a scan and only other patterns are compiled.
pub(crate) fn check_regex(pattern: &str) -> Result<(), String> {
    if plain_regex(pattern).is_some() {
        return Ok(());
    }
    let describe = |e: regex::Error| match e {
        // The message repeats the pattern with a caret; its last line says what is wrong.
        regex::Error::Syntax(s) => {
            let last = s.lines().last().unwrap_or(&s);
            last.strip_prefix("error: ").unwrap_or(last).to_owned()
        }
        regex::Error::CompiledTooBig(limit) => {
            format!("it compiles to more than {limit} bytes; simplify it")
        }
        other => other.to_string(),
    };
    Regex::new(pattern).map_err(describe)?;
    Regex::new(&format!("^(?:{pattern})$")).map_err(describe)?;
    Ok(())
}

/// A sufficient, cheap test of validity (see [`check_regex`]): `None` means "compile to know";
/// for a plainly valid pattern, whether it matches the empty string (anchored).
fn plain_regex(pattern: &str) -> Option<bool> {
    // Long patterns may exceed the compiled size limit; let the regex crate judge those.
    if pattern.len() > 256 {
        return None;
    }
    let mut after_atom = false;
    // Atoms of the current alternative that must match at least one character.
    let mut n_required = 0;
    let mut matches_empty = false;
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        after_atom = match c {
            '\\' => match chars.next() {
                // regex-syntax's metacharacters, which may always be escaped.
                Some(
                    '\\' | '.' | '+' | '*' | '?' | '(' | ')' | '|' | '[' | ']' | '{' | '}' | '^'
                    | '$' | '#' | '&' | '-' | '~',
                ) => true,
                _ => return None,
            },
            '*' | '?' if after_atom => {
                n_required -= 1;
                false
            }
            '+' if after_atom => false,
            '|' => {
                matches_empty |= n_required == 0;
                n_required = 0;
                false
            }
            '^' | '$' => false,
            '.' => true,
            c if c.is_ascii_alphanumeric() => true,
            '_' | '-' | '/' | ':' | '@' | ',' | ' ' | '=' | '!' | '%' | '<' | '>' | ';' | '\''
            | '"' => true,
            c if !c.is_ascii() && !c.is_whitespace() => true,
            _ => return None,
        };
        if after_atom {
            n_required += 1;
        }
    }
    Some(matches_empty || n_required == 0)
}

/// Whether the anchored regex matches the empty string; `None` if it does not compile.
fn regex_matches_empty(pattern: &str) -> Option<bool> {
    if let Some(matches_empty) = plain_regex(pattern) {
        return Some(matches_empty);
    }
    Regex::new(&format!("^(?:{pattern})$"))
        .ok()
        .map(|re| re.is_match(""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scan_agrees_with_the_regex_crate() {
        let patterns = [
            "10\\.0\\..*",
            "api|web",
            "memory:.*",
            "^net/http\\..*",
            "a*+",
            "a**",
            "^*",
            "|a|",
            "*a",
            "a|*",
            "é+",
            "\\d+",
            "(a",
            "a)",
            "[a-",
            "a{2}",
            "x\\",
            "\\q",
            "a??",
            ".*?",
            "",
            "a|",
            "a*b?",
            "a*|b",
            "^$",
            "a?",
            ".+",
            "a+|b*",
            "\\.*",
            "x|y|z*",
        ];
        let mut n_plain = 0;
        for p in patterns {
            if let Some(matches_empty) = plain_regex(p) {
                n_plain += 1;
                let re = Regex::new(&format!("^(?:{p})$")).unwrap_or_else(|e| panic!("{p}: {e}"));
                assert_eq!(re.is_match(""), matches_empty, "{p}");
            }
        }
        assert_eq!(n_plain, 16);
        assert!(plain_regex("*a").is_none());
    }

    #[test]
    fn regex_errors_in_words() {
        assert_eq!(check_regex("(a").unwrap_err(), "unclosed group");
        assert_eq!(check_regex("a)").unwrap_err(), "unopened group");
        assert_eq!(
            check_regex("\\pX").unwrap_err(),
            "Unicode property not found"
        );
        assert!(check_regex("a{2}").is_ok());
    }
}
