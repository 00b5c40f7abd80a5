//! Printing an AST as canonical query text: one spelling per meaning, so that
//! `parse(&expr.to_string())` gives `expr` back (spans aside).

use std::fmt::{self, Write};

use crate::ast::{Expr, ExprKind, Grouping, LabelMatcher, Selector, StackFilter};
use crate::literal::{write_duration, write_quoted};

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ExprKind::Selector(selector) => selector.fmt(f),
            ExprKind::Offset { expr, offset } => {
                write!(f, "{expr} offset ")?;
                write_duration(f, *offset)
            }
            ExprKind::StackFilter { expr, filter } => write!(f, "{expr} {filter}"),
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

/// ` by (a, b) (expr)` or `(expr)`.
fn write_call(f: &mut fmt::Formatter<'_>, grouping: Option<&Grouping>, expr: &Expr) -> fmt::Result {
    if let Some(grouping) = grouping {
        write!(f, " {grouping} ")?;
    }
    write!(f, "({expr})")
}

impl fmt::Display for Grouping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.without { "without (" } else { "by (" })?;
        for (i, label) in self.labels.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(label)?;
        }
        f.write_char(')')
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
        write_quoted(f, &self.pattern)
    }
}
