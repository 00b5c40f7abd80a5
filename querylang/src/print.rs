//! Printing an AST as canonical query text: one spelling per meaning, so that
//! `parse(&expr.to_string())` gives `expr` back (spans aside).

use std::fmt::{self, Write};

use crate::ast::{
    Expr, ExprKind, GroupSide, Grouping, LabelMatcher, Selector, StackFilter, VectorMatching,
};
use crate::literal::{write_duration, write_quoted};

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ExprKind::Selector(selector) => selector.fmt(f),
            ExprKind::Offset { expr, offset } => {
                write_operand(f, expr, 4)?;
                f.write_str(" offset ")?;
                write_duration(f, *offset)
            }
            ExprKind::StackFilter { expr, filter } => {
                write_operand(f, expr, 4)?;
                write!(f, " {filter}")
            }
            ExprKind::Number(n) => write!(f, "{}", n.0),
            ExprKind::Binary {
                op,
                lhs,
                rhs,
                return_bool,
                matching,
                ..
            } => {
                // Left operands of the same precedence need no parentheses (operators fold to
                // the left), right ones do.
                write_operand(f, lhs, op.precedence())?;
                write!(f, " {}", op.as_str())?;
                if *return_bool {
                    f.write_str(" bool")?;
                }
                let rhs_text = match &rhs.kind {
                    ExprKind::Binary { op: inner, .. } if inner.precedence() <= op.precedence() => {
                        format!("({rhs})")
                    }
                    _ => rhs.to_string(),
                };
                if let Some(matching) = matching {
                    write_matching(f, matching, rhs_text.starts_with('('))?;
                }
                write!(f, " {rhs_text}")
            }
            ExprKind::Merge { grouping, expr } => {
                f.write_str("merge")?;
                write_call(f, grouping.as_ref(), expr)
            }
            ExprKind::Diff { base, comparison } => write!(f, "diff({base}, {comparison})"),
            ExprKind::Aggregate { op, grouping, expr } => {
                f.write_str(op.as_str())?;
                write_call(f, grouping.as_ref(), expr)
            }
            ExprKind::TopK { k, expr } => write!(f, "topk({k}, {expr})"),
            ExprKind::Paren(expr) => write!(f, "({expr})"),
        }
    }
}

/// `expr`, in parentheses if it is a binary operation that binds looser than `precedence` (4:
/// a postfix operator, which binds tighter than any). A parsed tree keeps the user's
/// parentheses as [`ExprKind::Paren`], so this only adds them to trees built by hand.
fn write_operand(f: &mut fmt::Formatter<'_>, expr: &Expr, precedence: u8) -> fmt::Result {
    match &expr.kind {
        ExprKind::Binary { op, .. } if op.precedence() < precedence => write!(f, "({expr})"),
        _ => write!(f, "{expr}"),
    }
}

/// ` on (a) group_left (b)`; an empty `group_left` list is written `()` only when the right-hand
/// side starts with `(`, which would otherwise be read as the list.
fn write_matching(
    f: &mut fmt::Formatter<'_>,
    matching: &VectorMatching,
    rhs_starts_with_paren: bool,
) -> fmt::Result {
    f.write_str(if matching.on { " on " } else { " ignoring " })?;
    write_labels(f, &matching.labels)?;
    if let Some(group) = &matching.group {
        f.write_str(match group.side {
            GroupSide::Left => " group_left",
            GroupSide::Right => " group_right",
        })?;
        if !group.labels.is_empty() || rhs_starts_with_paren {
            f.write_char(' ')?;
            write_labels(f, &group.labels)?;
        }
    }
    Ok(())
}

/// `(a, b)`.
fn write_labels(f: &mut fmt::Formatter<'_>, labels: &[String]) -> fmt::Result {
    f.write_char('(')?;
    for (i, label) in labels.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        f.write_str(label)?;
    }
    f.write_char(')')
}

/// ` by (a, b) (expr)` or `(expr)`.
fn write_call(f: &mut fmt::Formatter<'_>, grouping: Option<&Grouping>, expr: &Expr) -> fmt::Result {
    if let Some(grouping) = grouping {
        write!(f, " {grouping} ")?;
    }
    write!(f, "({expr})")
}

impl fmt::Display for Grouping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.without { "without " } else { "by " })?;
        write_labels(f, &self.labels)
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(profile_type) = &self.profile_type {
            f.write_str(profile_type.as_str())?;
        }
        if !self.matchers.is_empty() || self.profile_type.is_none() {
            f.write_char('{')?;
            for (i, matcher) in self.matchers.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                matcher.fmt(f)?;
            }
            f.write_char('}')?;
        }
        if let Some(range) = self.range {
            f.write_char('[')?;
            write_duration(f, range)?;
            f.write_char(']')?;
        }
        Ok(())
    }
}

impl fmt::Display for LabelMatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.name, self.op.as_str())?;
        write_quoted(f, &self.value)
    }
}

impl fmt::Display for StackFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ", self.op.as_str())?;
        if self.leaf {
            f.write_str("leaf ")?;
        }
        write_quoted(f, &self.pattern)
    }
}
