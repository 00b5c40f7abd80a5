//! The crate's integration tests, one binary with a module per area: the design document's
//! examples, malformed queries and their messages, printing round trips, the lenient parse.
#![allow(
    clippy::too_many_lines,
    reason = "tests are scenarios read top to bottom; the line budget is for product code"
)]

#[path = "querylang/binary.rs"]
mod binary;
#[path = "querylang/errors.rs"]
mod errors;
#[path = "querylang/examples.rs"]
mod examples;
#[path = "querylang/lenient.rs"]
mod lenient;
#[path = "querylang/round_trip.rs"]
mod round_trip;

use std::fmt::Write;

use expect_test::Expect;
use parca_querylang::{Expr, ExprKind, parse};

/// Parses `query` and compares the tree (with spans) and canonical text, or the rendered error.
fn check(query: &str, expect: Expect) {
    let actual = match parse(query) {
        Ok(expr) => {
            let mut out = String::new();
            tree(&mut out, query, &expr, 0);
            format!("{:?}: {expr}\n{out}", expr.value_type())
        }
        Err(e) => e.render(query),
    };
    expect.assert_eq(&actual);
}

/// One line per node: its kind, its fields, and the query text it spans.
fn tree(out: &mut String, query: &str, expr: &Expr, depth: usize) {
    let indent = "  ".repeat(depth);
    let head = match &expr.kind {
        ExprKind::Selector(s) => {
            let mut head = String::from("selector");
            if let Some(t) = &s.profile_type {
                write!(head, " {t}").unwrap();
            }
            for m in &s.matchers {
                write!(head, " {}{}{:?}", m.name, m.op.as_str(), m.value).unwrap();
                let text = &query[m.span.start..m.span.end];
                assert!(
                    (text.starts_with(&m.name) || text.starts_with(['"', '\'', '`']))
                        && text.ends_with(['"', '\'', '`']),
                    "{text}"
                );
            }
            if let Some(r) = s.range {
                write!(head, " range={r:?}").unwrap();
            }
            head
        }
        ExprKind::Offset { offset, .. } => format!("offset {offset:?}"),
        ExprKind::StackFilter { filter, .. } => {
            let text = &query[filter.span.start..filter.span.end];
            assert!(text.starts_with(filter.op.as_str()), "{text}");
            let leaf = if filter.leaf { " leaf" } else { "" };
            format!("stack_filter {:?}{leaf} {:?}", filter.op, filter.pattern)
        }
        ExprKind::Merge { grouping, .. } => format!("merge{}", grouping_text(grouping.as_ref())),
        ExprKind::Diff { .. } => "diff".to_owned(),
        ExprKind::Aggregate { op, grouping, .. } => {
            format!("{}{}", op.as_str(), grouping_text(grouping.as_ref()))
        }
        ExprKind::TopK { k, .. } => format!("topk {k}"),
        ExprKind::Paren(_) => "paren".to_owned(),
        ExprKind::Number(n) => format!("number {:?}", n.0),
        ExprKind::Binary {
            op,
            return_bool,
            matching,
            op_span,
            ..
        } => {
            let mut head = format!("binary {op:?}");
            if *return_bool {
                head.push_str(" bool");
            }
            if let Some(m) = matching {
                let on = if m.on { "on" } else { "ignoring" };
                write!(head, " {on}{:?}", m.labels).unwrap();
                if let Some(g) = &m.group {
                    write!(head, " group_{:?}{:?}", g.side, g.labels).unwrap();
                }
            }
            let text = &query[op_span.start..op_span.end];
            assert!(text.starts_with(op.as_str()), "{text}");
            write!(head, " op@{}..{}", op_span.start, op_span.end).unwrap();
            head
        }
    };
    writeln!(
        out,
        "{indent}{head} @{}..{}",
        expr.span.start, expr.span.end
    )
    .unwrap();
    match &expr.kind {
        ExprKind::Selector(_) | ExprKind::Number(_) => {}
        ExprKind::Binary { lhs, rhs, .. } => {
            tree(out, query, lhs, depth + 1);
            tree(out, query, rhs, depth + 1);
        }
        ExprKind::Offset { expr, .. }
        | ExprKind::StackFilter { expr, .. }
        | ExprKind::Merge { expr, .. }
        | ExprKind::Aggregate { expr, .. }
        | ExprKind::TopK { expr, .. }
        | ExprKind::Paren(expr) => tree(out, query, expr, depth + 1),
        ExprKind::Diff { base, comparison } => {
            tree(out, query, base, depth + 1);
            tree(out, query, comparison, depth + 1);
        }
    }
}

fn grouping_text(grouping: Option<&parca_querylang::Grouping>) -> String {
    grouping.map(|g| format!(" {g}")).unwrap_or_default()
}
