//! From text to [`Expr`]: the pest grammar (`grammar.pest`), its errors turned into words, and the
//! walk from pest's pairs to our AST. Pest types stay in this file.

use std::time::Duration;

use pest::Parser as _;
use pest::error::{ErrorVariant, InputLocation};
use pest::iterators::Pair;

use crate::ast::{
    AggregateOp, BinaryOp, Expr, ExprKind, GroupModifier, GroupSide, Grouping, LabelMatcher,
    MatchOp, Number, ProfileTypeName, Selector, StackFilter, StackFilterOp, VectorMatching,
};
use crate::error::{Expected, ParseError, Span};
use crate::literal;
use parca_vocab::sanitize_label_name;

/// Whether `name` may name a recorded series in a rule's query: a Prometheus metric name
/// (`[a-zA-Z_:][a-zA-Z0-9_:]*`) that is not shaped like a profile type (5 or 6 parts).
pub fn is_recorded_series_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_' || b == b':')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':')
        && !(5..=6).contains(&name.split(':').count())
}

#[derive(pest_derive::Parser)]
#[grammar = "grammar.pest"]
struct Grammar;

/// How deep brackets and postfix operators may nest. The AST's consumers recurse over it (checks,
/// printing, evaluation, even `Drop`), so a hostile query must not nest without bound; real
/// queries nest a handful of levels.
pub(crate) const MAX_DEPTH: usize = 128;

/// The result of the syntax step: the tree (if the grammar matched) and the errors found in
/// literals while building it.
pub(crate) struct Built {
    pub(crate) expr: Expr,
    pub(crate) errors: Vec<ParseError>,
}

/// Parses `query` with the grammar and builds the AST. A grammar failure is one error (pest stops
/// at the first); literal errors (bad escapes, durations, profile type names) are collected, and
/// the tree is still built with a stand-in value.
pub(crate) fn build(query: &str) -> Result<Built, ParseError> {
    build_with(query, false)
}

/// [`build`], where `metric_names` lets a selector name a recorded series
/// ([`crate::is_recorded_series_name`]) instead of a profile type.
pub(crate) fn build_with(query: &str, metric_names: bool) -> Result<Built, ParseError> {
    let mut pairs = Grammar::parse(Rule::query, query).map_err(|e| syntax_error(query, &e))?;
    let expr = pairs.next().expect("grammar: a query is one expr");
    let mut builder = Builder {
        query,
        errors: Vec::new(),
        metric_names,
    };
    let expr = builder.expr(expr, 0)?;
    Ok(Built {
        expr,
        errors: builder.errors,
    })
}

/// Turns pest's report (the furthest position and the rules it tried there) into words.
fn syntax_error(query: &str, error: &pest::error::Error<Rule>) -> ParseError {
    let pos = match error.location {
        InputLocation::Pos(p) | InputLocation::Span((p, _)) => p,
    };
    let positives = match &error.variant {
        ErrorVariant::ParsingError { positives, .. } => positives.as_slice(),
        // Pest's own limits (its stack guard); the depth pre-check should catch nesting first.
        ErrorVariant::CustomError { .. } => {
            return ParseError::new(query, Span::new(pos, pos), "the query nests too deeply");
        }
    };
    let mut expected: Vec<Expected> = positives.iter().filter_map(|r| expected_for(*r)).collect();
    expected.sort();
    expected.dedup();
    let found = found_at(query, pos);
    if let Some(message) =
        unknown_function(query, pos).or_else(|| string_after_operator(query, pos))
    {
        let mut e = ParseError::new(query, Span::new(pos, pos + 1), message);
        e.expected = expected;
        return e;
    }
    let message = if expected.is_empty() {
        format!("unexpected {found}")
    } else {
        format!("expected {}, found {found}", join_words(&expected))
    };
    let span_end = pos + found_len(query, pos);
    let mut e = ParseError::new(query, Span::new(pos, span_end), message);
    e.expected = expected;
    e
}

/// A message for `rate(…)` and other PromQL functions we do not have: the grammar took the name
/// for a selector and stopped at the `(`.
fn unknown_function(query: &str, pos: usize) -> Option<String> {
    if !query[pos..].starts_with('(') {
        return None;
    }
    let before = query[..pos].trim_end_matches([' ', '\t', '\r', '\n']);
    // After the last character that cannot be in a name (which may take several bytes).
    let name_start = before
        .char_indices()
        .rfind(|&(_, c)| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .map_or(0, |(i, c)| i + c.len_utf8());
    let name = &before[name_start..];
    let is_name =
        name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') && !name.contains(':');
    is_name.then(|| {
        format!(
            "unknown function `{name}`: the functions are merge, diff, sum, avg, min, max, count and topk"
        )
    })
}

/// A message for `x == "f"` and the like: a string after a binary operator, where a stack filter
/// was probably meant (only `|=`, `!=`, `|~` and `!~` take a string).
fn string_after_operator(query: &str, pos: usize) -> Option<String> {
    if !query[pos..].starts_with(['"', '\'', '`']) {
        return None;
    }
    let before = query[..pos].trim_end_matches([' ', '\t', '\r', '\n']);
    let before = before.strip_suffix("bool").map_or(before, str::trim_end);
    let op = ["==", ">=", "<=", ">", "<", "+", "-", "*", "/"]
        .into_iter()
        .find(|op| before.ends_with(op) && !before.ends_with(&format!("|{op}")))?;
    Some(format!(
        "`{op}` compares or computes numbers, not a string: to keep samples with a function \
         whose name contains the string, write `|=`; to drop them, `!=` (`|~` and `!~` for \
         regular expressions)"
    ))
}

/// What a grammar rule means to a person, where pest reports it as expected.
fn expected_for(rule: Rule) -> Option<Expected> {
    Some(match rule {
        Rule::expr
        | Rule::term
        | Rule::scalar
        | Rule::merge
        | Rule::diff
        | Rule::aggregate
        | Rule::topk
        | Rule::paren
        | Rule::selector
        | Rule::profile_type
        | Rule::kw_merge
        | Rule::kw_diff
        | Rule::kw_topk
        | Rule::aggregate_op => Expected::Expression,
        Rule::grouping | Rule::kw_by | Rule::kw_without => Expected::Grouping,
        Rule::matchers | Rule::lbrace => Expected::Symbol('{'),
        Rule::matcher | Rule::matcher_name => Expected::LabelMatcher,
        Rule::label_name => Expected::LabelName,
        Rule::match_op => Expected::MatchOp,
        Rule::string => Expected::String,
        Rule::number => Expected::Number,
        Rule::duration => Expected::Duration,
        Rule::range | Rule::lbracket => Expected::Range,
        Rule::offset | Rule::kw_offset => Expected::Offset,
        Rule::stack_filter | Rule::stack_op => Expected::StackFilter,
        Rule::binary_op => Expected::BinaryOperator,
        Rule::kw_bool | Rule::vector_matching | Rule::kw_on | Rule::kw_ignoring => {
            Expected::VectorMatching
        }
        Rule::group_modifier | Rule::kw_group_left | Rule::kw_group_right => {
            Expected::GroupModifier
        }
        Rule::label_list => Expected::Symbol('('),
        Rule::kw_leaf => Expected::Leaf,
        Rule::lparen => Expected::Symbol('('),
        Rule::rparen => Expected::Symbol(')'),
        Rule::rbrace => Expected::Symbol('}'),
        Rule::rbracket => Expected::Symbol(']'),
        Rule::comma => Expected::Symbol(','),
        Rule::EOI => Expected::EndOfQuery,
        _ => return None,
    })
}

/// "A", "A or B", "A, B or C".
fn join_words(expected: &[Expected]) -> String {
    let words: Vec<String> = expected.iter().map(ToString::to_string).collect();
    match words.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// Bytes of the token at `pos` worth underlining: a word, a string, or one character.
fn found_len(query: &str, pos: usize) -> usize {
    let rest = &query[pos..];
    let Some(c) = rest.chars().next() else {
        return 0;
    };
    if c.is_ascii_alphanumeric() || c == '_' {
        rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':' || c == '.'))
            .unwrap_or(rest.len())
    } else {
        c.len_utf8()
    }
}

/// The token at `pos` in words: "`foo`", "the end of the query".
fn found_at(query: &str, pos: usize) -> String {
    let len = found_len(query, pos);
    if len == 0 {
        return "the end of the query".to_owned();
    }
    let token = &query[pos..pos + len];
    match token {
        "\"" | "'" | "`" => "a string".to_owned(),
        t if t.chars().count() > 30 => format!("`{}…`", t.chars().take(30).collect::<String>()),
        t => format!("`{t}`"),
    }
}

struct Builder<'q> {
    query: &'q str,
    errors: Vec<ParseError>,
    /// Whether a selector may name a recorded series (a rule's query).
    metric_names: bool,
}

/// The pair's span without trailing whitespace and comments: pest skips whitespace before an
/// optional part even when the part is then absent, and that belongs to no node.
fn span_of(pair: &Pair<'_, Rule>) -> Span {
    let start = pair.as_span().start();
    Span::new(start, start + trim_end(pair.as_str()).len())
}

/// `text` without trailing whitespace and `#` comments.
pub(crate) fn trim_end(text: &str) -> &str {
    let mut text = text.trim_end_matches([' ', '\t', '\n', '\r']);
    while text.contains('#') {
        // A comment runs to the end of its line: look for a `#` outside strings on the last line.
        let line_start = text.rfind('\n').map_or(0, |i| i + 1);
        let Some(hash) = comment_start(&text[line_start..]) else {
            break;
        };
        text = text[..line_start + hash].trim_end_matches([' ', '\t', '\n', '\r']);
    }
    text
}

/// The offset of the first `#` outside strings in one line.
fn comment_start(line: &str) -> Option<usize> {
    let mut quote = None;
    let mut escaped = false;
    for (i, b) in line.bytes().enumerate() {
        match quote {
            Some(q) => {
                if escaped {
                    escaped = false;
                } else if b == b'\\' && q != b'`' {
                    escaped = true;
                } else if b == q {
                    quote = None;
                }
            }
            None if b == b'#' => return Some(i),
            None if matches!(b, b'"' | b'\'' | b'`') => quote = Some(b),
            None => {}
        }
    }
    None
}

impl Builder<'_> {
    fn error(&mut self, span: Span, message: impl Into<String>) {
        self.errors.push(ParseError::new(self.query, span, message));
    }

    /// A chain of terms and binary operators, built into a tree by precedence (all operators
    /// fold to the left). `depth` counts enclosing expressions, binary and postfix operators
    /// (see [`MAX_DEPTH`]); a chain of `n` operators may nest `n` deep.
    fn expr(&mut self, pair: Pair<'_, Rule>, depth: usize) -> Result<Expr, ParseError> {
        let parts: Vec<Pair<'_, Rule>> = pair.into_inner().collect();
        let n_ops = parts
            .iter()
            .filter(|p| p.as_rule() == Rule::binary_op)
            .count();
        if n_ops == 0 {
            let term = parts.into_iter().next().expect("grammar: expr has a term");
            return self.term(term, depth);
        }
        let depth = depth + n_ops;
        if depth > MAX_DEPTH {
            let op = parts
                .iter()
                .find(|p| p.as_rule() == Rule::binary_op)
                .expect("counted");
            return Err(too_deep(self.query, span_of(op)));
        }
        let mut operands: Vec<Expr> = Vec::new();
        let mut pending: Vec<Operator> = Vec::new();
        let mut current: Option<Operator> = None;
        for part in parts {
            match part.as_rule() {
                Rule::term => {
                    let operand = self.term(part, depth)?;
                    if let Some(op) = current.take() {
                        while pending
                            .last()
                            .is_some_and(|top| top.op.precedence() >= op.op.precedence())
                        {
                            let top = pending.pop().expect("checked");
                            reduce(&mut operands, top);
                        }
                        pending.push(op);
                    }
                    operands.push(operand);
                }
                Rule::binary_op => {
                    let span = span_of(&part);
                    current = Some(Operator {
                        op: BinaryOp::from_text(part.as_str()).expect("grammar: binary_op"),
                        return_bool: false,
                        matching: None,
                        span,
                    });
                }
                Rule::kw_bool => {
                    let op = current.as_mut().expect("grammar: bool after an operator");
                    op.return_bool = true;
                    op.span = op.span.to(span_of(&part));
                }
                Rule::vector_matching => {
                    let span = span_of(&part);
                    let matching = self.vector_matching(part);
                    let op = current.as_mut().expect("grammar: on after an operator");
                    op.matching = Some(matching);
                    op.span = op.span.to(span);
                }
                r => unreachable!("grammar: expr part {r:?}"),
            }
        }
        while let Some(top) = pending.pop() {
            reduce(&mut operands, top);
        }
        Ok(operands.pop().expect("one operand left"))
    }

    /// `on (…) group_left (…)` and the like.
    fn vector_matching(&mut self, pair: Pair<'_, Rule>) -> VectorMatching {
        let mut matching = VectorMatching {
            on: false,
            labels: Vec::new(),
            group: None,
        };
        for p in pair.into_inner() {
            match p.as_rule() {
                Rule::kw_on => matching.on = true,
                Rule::kw_ignoring => matching.on = false,
                Rule::label_list => matching.labels = self.label_list(p),
                Rule::group_modifier => {
                    let mut group = GroupModifier {
                        side: GroupSide::Left,
                        labels: Vec::new(),
                    };
                    for g in p.into_inner() {
                        match g.as_rule() {
                            Rule::kw_group_left => group.side = GroupSide::Left,
                            Rule::kw_group_right => group.side = GroupSide::Right,
                            Rule::label_list => group.labels = self.label_list(g),
                            r => unreachable!("grammar: group modifier part {r:?}"),
                        }
                    }
                    matching.group = Some(group);
                }
                r => unreachable!("grammar: vector matching part {r:?}"),
            }
        }
        matching
    }

    /// The names of `(a, "b.c", …)`, each once.
    fn label_list(&mut self, pair: Pair<'_, Rule>) -> Vec<String> {
        let mut labels: Vec<String> = Vec::new();
        for p in pair.into_inner() {
            if matches!(p.as_rule(), Rule::label_name | Rule::string) {
                let label = self.label_name(&p);
                if labels.contains(&label) {
                    self.error(span_of(&p), format!("label `{label}` is listed twice"));
                } else {
                    labels.push(label);
                }
            }
        }
        labels
    }

    /// A primary with its postfix operators. `depth` as for [`Builder::expr`].
    fn term(&mut self, pair: Pair<'_, Rule>, depth: usize) -> Result<Expr, ParseError> {
        let mut inner = pair.into_inner();
        let primary = inner.next().expect("grammar: term starts with a primary");
        let mut depth = depth + 1;
        let mut expr = self.primary(primary, depth)?;
        for postfix in inner {
            depth += 1;
            let postfix_span = span_of(&postfix);
            if depth > MAX_DEPTH {
                return Err(too_deep(self.query, postfix_span));
            }
            let span = expr.span.to(postfix_span);
            let kind = match postfix.as_rule() {
                Rule::offset => {
                    let duration = postfix
                        .into_inner()
                        .nth(1)
                        .expect("grammar: offset duration");
                    let (offset, negative) = self.duration(&duration).unwrap_or_default();
                    if negative {
                        self.error(
                            span_of(&duration),
                            "a negative offset would look into the future: write a positive duration such as 5m",
                        );
                    }
                    ExprKind::Offset {
                        expr: Box::new(expr),
                        offset,
                    }
                }
                Rule::stack_filter => {
                    let filter = self.stack_filter(postfix);
                    ExprKind::StackFilter {
                        expr: Box::new(expr),
                        filter,
                    }
                }
                r => unreachable!("grammar: postfix {r:?}"),
            };
            expr = Expr { kind, span };
        }
        Ok(expr)
    }

    fn primary(&mut self, pair: Pair<'_, Rule>, depth: usize) -> Result<Expr, ParseError> {
        let span = span_of(&pair);
        if depth > MAX_DEPTH {
            return Err(too_deep(self.query, span));
        }
        let rule = pair.as_rule();
        let text = pair.as_str();
        let mut inner = pair.into_inner();
        let kind = match rule {
            Rule::selector => ExprKind::Selector(self.selector(inner)),
            Rule::paren => {
                let expr = inner
                    .find(|p| p.as_rule() == Rule::expr)
                    .expect("grammar: (expr)");
                ExprKind::Paren(Box::new(self.expr(expr, depth)?))
            }
            Rule::merge | Rule::aggregate => {
                let keyword = inner.next().expect("grammar: keyword first");
                let mut grouping: Option<Grouping> = None;
                let mut arg = None;
                for p in inner {
                    match p.as_rule() {
                        Rule::grouping => {
                            let g_span = span_of(&p);
                            let g = self.grouping(p);
                            if grouping.is_some() {
                                self.error(
                                    g_span,
                                    format!("`{}` has two groupings: keep one", keyword.as_str()),
                                );
                            } else {
                                grouping = Some(g);
                            }
                        }
                        Rule::expr => arg = Some(Box::new(self.expr(p, depth)?)),
                        _ => {}
                    }
                }
                let expr = arg.expect("grammar: one argument");
                if rule == Rule::merge {
                    ExprKind::Merge { grouping, expr }
                } else {
                    let op = match keyword.as_str() {
                        "sum" => AggregateOp::Sum,
                        "avg" => AggregateOp::Avg,
                        "min" => AggregateOp::Min,
                        "max" => AggregateOp::Max,
                        "count" => AggregateOp::Count,
                        k => unreachable!("grammar: aggregate_op {k}"),
                    };
                    ExprKind::Aggregate { op, grouping, expr }
                }
            }
            Rule::diff => {
                let mut args = inner.filter(|p| p.as_rule() == Rule::expr);
                let base = args.next().expect("grammar: diff base");
                let comparison = args.next().expect("grammar: diff comparison");
                ExprKind::Diff {
                    base: Box::new(self.expr(base, depth)?),
                    comparison: Box::new(self.expr(comparison, depth)?),
                }
            }
            Rule::scalar => ExprKind::Number(Number(self.scalar(text, span))),
            Rule::topk => {
                let number = inner
                    .find(|p| p.as_rule() == Rule::number)
                    .expect("grammar: topk k");
                let k = self.topk_k(&number);
                let expr = inner
                    .find(|p| p.as_rule() == Rule::expr)
                    .expect("grammar: topk expr");
                ExprKind::TopK {
                    k,
                    expr: Box::new(self.expr(expr, depth)?),
                }
            }
            r => unreachable!("grammar: primary {r:?}"),
        };
        Ok(Expr { kind, span })
    }

    fn selector(&mut self, pairs: pest::iterators::Pairs<'_, Rule>) -> Selector {
        let mut selector = Selector::default();
        for p in pairs {
            match p.as_rule() {
                Rule::profile_type => {
                    let text = p.as_str();
                    let recorded = self.metric_names && is_recorded_series_name(text);
                    if let Some(problem) = ProfileTypeName::problem(text).filter(|_| !recorded) {
                        self.error(span_of(&p), problem);
                    }
                    selector.profile_type = Some(ProfileTypeName::unchecked(text));
                }
                Rule::matchers => {
                    for m in p.into_inner().filter(|m| m.as_rule() == Rule::matcher) {
                        let mut parts = m.clone().into_inner();
                        let first = parts.next().expect("grammar: matcher part");
                        if parts.next().is_some() {
                            let matcher = self.matcher(m);
                            selector.matchers.push(matcher);
                            continue;
                        }
                        // A lone quoted string: the profile type.
                        let span = span_of(&first);
                        if selector.profile_type.is_some() {
                            self.error(
                                span,
                                "the profile type is given twice: before `{` and quoted inside it",
                            );
                            continue;
                        }
                        let text = self.string(&first);
                        let text = match text.split_once(':') {
                            Some((name, rest)) => format!("{}:{rest}", sanitize_label_name(name)),
                            None => text,
                        };
                        if let Some(problem) = ProfileTypeName::problem(&text) {
                            self.error(span, problem);
                        }
                        selector.profile_type = Some(ProfileTypeName::unchecked(&text));
                    }
                }
                Rule::range => {
                    let duration = p.into_inner().nth(1).expect("grammar: [duration]");
                    let range = match self.duration(&duration) {
                        Some((range, false)) if !range.is_zero() => range,
                        Some(_) => {
                            let message = "a range must be longer than zero, such as [5m]";
                            self.error(span_of(&duration), message);
                            Duration::ZERO
                        }
                        None => Duration::ZERO,
                    };
                    selector.range = Some(range);
                }
                r => unreachable!("grammar: selector part {r:?}"),
            }
        }
        selector
    }

    fn matcher(&mut self, pair: Pair<'_, Rule>) -> LabelMatcher {
        let span = span_of(&pair);
        let mut inner = pair.into_inner();
        let name = inner.next().expect("grammar: matcher name");
        let name = self.label_name(&name);
        let op = match inner.next().expect("grammar: match op").as_str() {
            "=" => MatchOp::Equal,
            "!=" => MatchOp::NotEqual,
            "=~" => MatchOp::Re,
            "!~" => MatchOp::NotRe,
            op => unreachable!("grammar: match_op {op}"),
        };
        let value = self.string(&inner.next().expect("grammar: matcher value"));
        LabelMatcher {
            name,
            op,
            value,
            span,
        }
    }

    fn stack_filter(&mut self, pair: Pair<'_, Rule>) -> StackFilter {
        let span = span_of(&pair);
        let mut inner = pair.into_inner();
        let op = match inner.next().expect("grammar: stack op").as_str() {
            "|=" => StackFilterOp::Contains,
            "!=" => StackFilterOp::NotContains,
            "|~" => StackFilterOp::Matches,
            "!~" => StackFilterOp::NotMatches,
            op => unreachable!("grammar: stack_op {op}"),
        };
        let mut next = inner.next().expect("grammar: stack filter pattern");
        let leaf = next.as_rule() == Rule::kw_leaf;
        if leaf {
            next = inner
                .next()
                .expect("grammar: stack filter pattern after leaf");
        }
        let pattern = self.string(&next);
        StackFilter {
            op,
            pattern,
            leaf,
            span,
        }
    }

    /// A number operand; 0 (after an error) when it is not a finite decimal number.
    fn scalar(&mut self, text: &str, span: Span) -> f64 {
        let decimal = text
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'));
        match text.parse::<f64>() {
            Ok(x) if decimal && x.is_finite() => x,
            Ok(_) if decimal => {
                self.error(span, format!("`{text}` is too large for a number"));
                0.0
            }
            _ if text.contains(':') => {
                self.error(
                    span,
                    format!(
                        "`{text}` is not a profile type: its name must start with a letter or `_`"
                    ),
                );
                0.0
            }
            _ => {
                let hint = if text.bytes().any(|b| b.is_ascii_alphabetic()) && !decimal {
                    " (a duration such as 5m belongs in a range [5m] or after `offset`)"
                } else {
                    ""
                };
                self.error(
                    span,
                    format!("`{text}` is not a number: write a decimal number such as 0.5, 2 or 1e3{hint}"),
                );
                0.0
            }
        }
    }

    fn grouping(&mut self, pair: Pair<'_, Rule>) -> Grouping {
        let mut grouping = Grouping::default();
        for p in pair.into_inner() {
            match p.as_rule() {
                Rule::kw_without => grouping.without = true,
                Rule::label_name | Rule::string => {
                    let label = self.label_name(&p);
                    if grouping.labels.contains(&label) {
                        self.error(span_of(&p), format!("label `{label}` is listed twice"));
                    } else {
                        grouping.labels.push(label);
                    }
                }
                _ => {}
            }
        }
        grouping
    }

    /// The stored name a label name token or quoted name stands for: a quoted name is
    /// sanitized as ingest sanitizes names from elsewhere (`"service.version"` selects
    /// `service_version`); an unquoted name with a dot is an error naming both spellings that
    /// work.
    fn label_name(&mut self, pair: &Pair<'_, Rule>) -> String {
        if pair.as_rule() == Rule::string {
            return sanitize_label_name(&self.string(pair));
        }
        let name = pair.as_str();
        if name.contains('.') {
            self.error(
                span_of(pair),
                format!(
                    "label name `{name}` has a `.`: quote it, `\"{name}\"`, or write the stored \
                     name `{}`",
                    sanitize_label_name(name)
                ),
            );
        }
        name.to_owned()
    }

    /// The string's value; an empty string (after an error) when its escapes are bad.
    fn string(&mut self, pair: &Pair<'_, Rule>) -> String {
        match literal::unquote(pair.as_str()) {
            Ok(s) => s,
            Err(e) => {
                let start = pair.as_span().start();
                self.error(Span::new(start + e.start, start + e.end), e.message);
                String::new()
            }
        }
    }

    /// The duration and whether it was negative; `None` (after an error) when it is malformed.
    fn duration(&mut self, pair: &Pair<'_, Rule>) -> Option<(Duration, bool)> {
        match literal::parse_duration(pair.as_str()) {
            Ok(d) => Some(d),
            Err(e) => {
                let start = pair.as_span().start();
                self.error(Span::new(start + e.start, start + e.end), e.message);
                None
            }
        }
    }

    fn topk_k(&mut self, pair: &Pair<'_, Rule>) -> u64 {
        let text = pair.as_str();
        match text.parse::<u64>() {
            Ok(0) => {
                self.error(span_of(pair), "`topk` needs k of at least 1");
                1
            }
            Ok(k) => k,
            Err(_) => {
                let message = if text.bytes().all(|b| b.is_ascii_digit()) {
                    format!("`{text}` is too large for `topk`")
                } else {
                    format!("`topk` needs a whole number k of at least 1, not `{text}`")
                };
                self.error(span_of(pair), message);
                1
            }
        }
    }
}

/// A binary operator read but not yet applied, with its modifiers.
struct Operator {
    op: BinaryOp,
    return_bool: bool,
    matching: Option<VectorMatching>,
    /// The operator and its modifiers.
    span: Span,
}

/// Replaces the last two operands with `lhs op rhs`.
fn reduce(operands: &mut Vec<Expr>, op: Operator) {
    let rhs = operands.pop().expect("an operator has two operands");
    let lhs = operands.pop().expect("an operator has two operands");
    let span = lhs.span.to(rhs.span);
    operands.push(Expr {
        kind: ExprKind::Binary {
            op: op.op,
            lhs: Box::new(lhs),
            rhs: Box::new(rhs),
            return_bool: op.return_bool,
            matching: op.matching,
            op_span: op.span,
        },
        span,
    });
}

fn too_deep(query: &str, span: Span) -> ParseError {
    ParseError::new(
        query,
        span,
        format!("the query nests deeper than {MAX_DEPTH} levels"),
    )
}

#[cfg(test)]
mod tests {
    use super::unknown_function;

    /// A character of several bytes right before a name must not be cut in two (the query
    /// fuzzer found `…ƙr_se_space:t:u\n\n(…`).
    #[test]
    fn names_after_multibyte_characters() {
        assert_eq!(unknown_function("ƙ(", 2), None);
        assert_eq!(
            unknown_function("aƙrate(", 7).as_deref(),
            Some(
                "unknown function `rate`: the functions are merge, diff, sum, avg, min, max, count and topk"
            )
        );
        let fuzzed = "ory\u{199}r_se_space:t:u\n\n(";
        assert_eq!(unknown_function(fuzzed, fuzzed.len() - 1), None);
    }
}
