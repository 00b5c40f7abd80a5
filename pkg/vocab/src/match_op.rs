//! [`MatchOp`]: Prometheus' four label matchers, as queries write them and the store applies them.

use std::fmt;

/// How a label matcher compares a label value: Prometheus' four matchers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MatchOp {
    /// `=`
    Equal,
    /// `!=`
    NotEqual,
    /// `=~`: the whole value matches the regex (anchored at both ends).
    Re,
    /// `!~`: the whole value does not match the regex.
    NotRe,
}

impl MatchOp {
    /// The operator as written in a query.
    pub fn as_str(self) -> &'static str {
        match self {
            MatchOp::Equal => "=",
            MatchOp::NotEqual => "!=",
            MatchOp::Re => "=~",
            MatchOp::NotRe => "!~",
        }
    }
}

impl fmt::Display for MatchOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
