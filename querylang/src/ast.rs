//! The syntax tree: what a query says, with the span of every node, free of pest types.

use std::time::Duration;

use crate::error::Span;

/// An expression and the part of the query it was parsed from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expr {
    /// What the expression is.
    pub kind: ExprKind,
    /// Where it is in the query (for an expression built by hand, any span).
    pub span: Span,
}

/// The kinds of expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExprKind {
    /// `type{matchers}` or `{matchers}`, optionally with a range `[5m]`: a profile set.
    Selector(Selector),
    /// `expr offset 1d`: the same expression over a window shifted back.
    Offset {
        /// The shifted expression.
        expr: Box<Expr>,
        /// How far back (never negative; zero is allowed and means no shift).
        offset: Duration,
    },
    /// `expr |= "pattern"` and friends: keep or drop samples by the functions on their stacks.
    StackFilter {
        /// The filtered expression: a profile set or a profile.
        expr: Box<Expr>,
        /// The filter.
        filter: StackFilter,
    },
    /// `merge(expr)` or `merge by (labels) (expr)`: profiles summed into one per group.
    Merge {
        /// `by`/`without`; `None` merges everything into one profile.
        grouping: Option<Grouping>,
        /// A profile set or a profile.
        expr: Box<Expr>,
    },
    /// `diff(base, comparison)`: the comparison minus the base.
    Diff {
        /// The first argument, a profile set (merged) or a profile.
        base: Box<Expr>,
        /// The second argument, a profile set (merged) or a profile.
        comparison: Box<Expr>,
    },
    /// `sum by (job) (expr)` and the other aggregations: a series set.
    Aggregate {
        /// Which aggregation.
        op: AggregateOp,
        /// `by`/`without`; `None` aggregates all series into one.
        grouping: Option<Grouping>,
        /// A profile set (read as one series of totals per matched series) or a series set.
        expr: Box<Expr>,
    },
    /// `topk(k, expr)`: the `k` largest series at each step.
    TopK {
        /// How many series to keep; at least 1.
        k: u64,
        /// A profile set (read as series of totals) or a series set.
        expr: Box<Expr>,
    },
    /// `(expr)`: kept so that printing gives back the user's parentheses.
    Paren(Box<Expr>),
    /// A number, as an operand of a binary operator: `0.5`, `-2`, `1e3`.
    Number(Number),
    /// `lhs op rhs` between series sets (profile sets read as series of totals) and numbers,
    /// with PromQL's semantics: arithmetic, or a comparison that filters (or gives 0 and 1 with
    /// `bool`); series are matched by their labels as `matching` says.
    Binary {
        /// The operator.
        op: BinaryOp,
        /// The left operand.
        lhs: Box<Expr>,
        /// The right operand.
        rhs: Box<Expr>,
        /// `bool` after a comparison: 1 where it holds and 0 where not, rather than a filter.
        return_bool: bool,
        /// `on`/`ignoring` and `group_left`/`group_right`; `None` matches series one to one on
        /// all their labels but `__name__`.
        matching: Option<VectorMatching>,
        /// Where the operator and its modifiers are in the query.
        op_span: Span,
    },
}

/// A number literal. Equality is on the bits, so that trees compare (and `Eq` holds); a parsed
/// number is always finite.
#[derive(Debug, Clone, Copy)]
pub struct Number(pub f64);

impl PartialEq for Number {
    fn eq(&self, other: &Number) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

impl Eq for Number {}

/// The binary operators, in PromQL's precedence (comparisons bind loosest).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `==`
    Eql,
    /// `!=`
    Neq,
    /// `>`
    Gtr,
    /// `<`
    Lss,
    /// `>=`
    Gte,
    /// `<=`
    Lte,
}

impl BinaryOp {
    /// The operator as written in a query.
    pub fn as_str(self) -> &'static str {
        match self {
            BinaryOp::Add => "+",
            BinaryOp::Sub => "-",
            BinaryOp::Mul => "*",
            BinaryOp::Div => "/",
            BinaryOp::Eql => "==",
            BinaryOp::Neq => "!=",
            BinaryOp::Gtr => ">",
            BinaryOp::Lss => "<",
            BinaryOp::Gte => ">=",
            BinaryOp::Lte => "<=",
        }
    }

    /// The operator written as `text`, if it is one.
    pub fn from_text(text: &str) -> Option<BinaryOp> {
        Some(match text {
            "+" => BinaryOp::Add,
            "-" => BinaryOp::Sub,
            "*" => BinaryOp::Mul,
            "/" => BinaryOp::Div,
            "==" => BinaryOp::Eql,
            "!=" => BinaryOp::Neq,
            ">" => BinaryOp::Gtr,
            "<" => BinaryOp::Lss,
            ">=" => BinaryOp::Gte,
            "<=" => BinaryOp::Lte,
            _ => return None,
        })
    }

    /// Whether it compares (`==`, `!=`, `>`, `<`, `>=`, `<=`) rather than computes.
    pub fn is_comparison(self) -> bool {
        self.precedence() == 1
    }

    /// How tightly it binds: 1 for comparisons, 2 for `+ -`, 3 for `* /`.
    pub fn precedence(self) -> u8 {
        match self {
            BinaryOp::Add | BinaryOp::Sub => 2,
            BinaryOp::Mul | BinaryOp::Div => 3,
            _ => 1,
        }
    }

    /// `lhs op rhs`: the arithmetic result, or for a comparison 1 where it holds and 0 where not.
    pub fn apply(self, lhs: f64, rhs: f64) -> f64 {
        let holds = |b: bool| if b { 1.0 } else { 0.0 };
        match self {
            BinaryOp::Add => lhs + rhs,
            BinaryOp::Sub => lhs - rhs,
            BinaryOp::Mul => lhs * rhs,
            BinaryOp::Div => lhs / rhs,
            BinaryOp::Eql => holds(lhs == rhs),
            BinaryOp::Neq => holds(lhs != rhs),
            BinaryOp::Gtr => holds(lhs > rhs),
            BinaryOp::Lss => holds(lhs < rhs),
            BinaryOp::Gte => holds(lhs >= rhs),
            BinaryOp::Lte => holds(lhs <= rhs),
        }
    }
}

/// How the series of two series sets are paired: PromQL's `on (…)`/`ignoring (…)` and
/// `group_left (…)`/`group_right (…)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VectorMatching {
    /// `on`: series match when these labels agree; `ignoring`: when all labels but these (and
    /// `__name__`) agree.
    pub on: bool,
    /// The labels of `on`/`ignoring`, in query order.
    pub labels: Vec<String>,
    /// `group_left`/`group_right`: many-to-one or one-to-many; `None`: one to one.
    pub group: Option<GroupModifier>,
}

/// `group_left (labels)` or `group_right (labels)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupModifier {
    /// Which side has many series per match: the left for `group_left`.
    pub side: GroupSide,
    /// Labels copied from the "one" side into the result.
    pub labels: Vec<String>,
}

/// The "many" side of a many-to-one match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupSide {
    /// `group_left`: many series on the left per series on the right.
    Left,
    /// `group_right`: many series on the right per series on the left.
    Right,
}

/// A selection of series and the window of their profiles.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selector {
    /// The profile type before `{`; `None` for a selector of only `{…}`, which then matches
    /// `__name__` (the profile type label).
    pub profile_type: Option<ProfileTypeName>,
    /// The label matchers, in query order.
    pub matchers: Vec<LabelMatcher>,
    /// `[5m]`: the window `(t - range, t]`; `None` leaves the window to the evaluation.
    pub range: Option<Duration>,
}

/// `name op "value"` inside a selector's braces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelMatcher {
    /// The label name.
    pub name: String,
    /// How the value is compared.
    pub op: MatchOp,
    /// The value, unescaped; for `=~`/`!~` a regex, anchored at both ends when matched.
    pub value: String,
    /// Where the matcher is in the query.
    pub span: Span,
}

pub use parca_vocab::{InvalidProfileTypeName, MatchOp, ProfileTypeName};

/// `|= "pattern"` and friends after an expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackFilter {
    /// How the pattern is tested against the function names on a stack.
    pub op: StackFilterOp,
    /// A substring for `|=`/`!=`, a regex (anchored at both ends) for `|~`/`!~`; unescaped.
    pub pattern: String,
    /// `leaf`, as in `|= leaf "json.Marshal"`: test only the frame that was running (the
    /// innermost function of the stack), so that what is kept is the function's self value;
    /// otherwise any frame of the stack, giving its inclusive value.
    pub leaf: bool,
    /// Where the filter (operator and string) is in the query.
    pub span: Span,
}

/// The four stack filters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StackFilterOp {
    /// `|=`: keep samples with a function whose name contains the pattern.
    Contains,
    /// `!=`: keep samples with no function whose name contains the pattern.
    NotContains,
    /// `|~`: keep samples with a function whose whole name matches the regex.
    Matches,
    /// `!~`: keep samples with no function whose whole name matches the regex.
    NotMatches,
}

impl StackFilterOp {
    /// The operator as written in a query.
    pub fn as_str(self) -> &'static str {
        match self {
            StackFilterOp::Contains => "|=",
            StackFilterOp::NotContains => "!=",
            StackFilterOp::Matches => "|~",
            StackFilterOp::NotMatches => "!~",
        }
    }
}

/// `by (labels)` or `without (labels)`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Grouping {
    /// `without`: group by all labels but these; otherwise by exactly these.
    pub without: bool,
    /// The labels, in query order, without duplicates.
    pub labels: Vec<String>,
}

/// The aggregations over a series set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AggregateOp {
    /// `sum`
    Sum,
    /// `avg`
    Avg,
    /// `min`
    Min,
    /// `max`
    Max,
    /// `count`
    Count,
}

impl AggregateOp {
    /// The keyword.
    pub fn as_str(self) -> &'static str {
        match self {
            AggregateOp::Sum => "sum",
            AggregateOp::Avg => "avg",
            AggregateOp::Min => "min",
            AggregateOp::Max => "max",
            AggregateOp::Count => "count",
        }
    }
}

/// What an expression evaluates to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ValueType {
    /// The profiles of every series a selector matches, over a window.
    ProfileSet,
    /// Stacks with values: the result of `merge` or `diff`.
    Profile,
    /// Numbers over time: the result of an aggregation, `topk` or a binary operator.
    SeriesSet,
    /// One number: a literal, or arithmetic between numbers.
    Scalar,
}

impl ValueType {
    /// In words, for messages: "a profile set", "a profile", "a series set", "a number".
    pub fn describe(self) -> &'static str {
        match self {
            ValueType::ProfileSet => "a profile set",
            ValueType::Profile => "a profile",
            ValueType::SeriesSet => "a series set",
            ValueType::Scalar => "a number",
        }
    }
}

impl Expr {
    /// What the expression evaluates to, assuming it type-checks (every AST from
    /// [`crate::parse`] does): the result type of its outermost operator.
    pub fn value_type(&self) -> ValueType {
        let mut expr = self;
        loop {
            match &expr.kind {
                ExprKind::Selector(_) => return ValueType::ProfileSet,
                ExprKind::Merge { .. } | ExprKind::Diff { .. } => return ValueType::Profile,
                ExprKind::Aggregate { .. } | ExprKind::TopK { .. } => {
                    return ValueType::SeriesSet;
                }
                ExprKind::Number(_) => return ValueType::Scalar,
                ExprKind::Binary { lhs, rhs, .. } => {
                    let scalar = lhs.value_type() == ValueType::Scalar
                        && rhs.value_type() == ValueType::Scalar;
                    return if scalar {
                        ValueType::Scalar
                    } else {
                        ValueType::SeriesSet
                    };
                }
                ExprKind::Offset { expr: inner, .. }
                | ExprKind::StackFilter { expr: inner, .. }
                | ExprKind::Paren(inner) => expr = inner,
            }
        }
    }
}
