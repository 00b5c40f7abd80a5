//! Printing gives canonical text that parses back to the same tree.

use std::time::Duration;

use parca_querylang::{
    AggregateOp, BinaryOp, Expr, ExprKind, GroupModifier, GroupSide, Grouping, LabelMatcher,
    MatchOp, Number, Selector, Span, StackFilter, StackFilterOp, VectorMatching, parse,
    parse_lenient,
};

/// The tree with every span zeroed, to compare trees parsed from different text.
fn without_spans(mut expr: Expr) -> Expr {
    fn clear(expr: &mut Expr) {
        expr.span = Span::default();
        match &mut expr.kind {
            ExprKind::Selector(s) => s.matchers.iter_mut().for_each(|m| m.span = Span::default()),
            ExprKind::StackFilter { expr, filter } => {
                filter.span = Span::default();
                clear(expr);
            }
            ExprKind::Offset { expr, .. }
            | ExprKind::Merge { expr, .. }
            | ExprKind::Aggregate { expr, .. }
            | ExprKind::TopK { expr, .. }
            | ExprKind::Paren(expr) => clear(expr),
            ExprKind::Diff { base, comparison } => {
                clear(base);
                clear(comparison);
            }
            ExprKind::Binary {
                lhs, rhs, op_span, ..
            } => {
                *op_span = Span::default();
                clear(lhs);
                clear(rhs);
            }
            ExprKind::Number(_) => {}
        }
    }
    clear(&mut expr);
    expr
}

const QUERIES: &[&str] = &[
    r#"process_cpu:samples:count:cpu:nanoseconds:delta{job="api"}"#,
    r#"process_cpu:samples:count:cpu:nanoseconds:delta{job="api", instance=~"10\\.0\\..*"}[1h]"#,
    r#"merge(memory:inuse_space:bytes:space:bytes{job="api"}[30m])"#,
    r#"merge by (instance) (process_cpu:samples:count:cpu:nanoseconds:delta{job="api"}[5m])"#,
    "diff(merge(process_cpu:samples:count:cpu:nanoseconds:delta{job=\"api\"}[1h] offset 1d),\n     merge(process_cpu:samples:count:cpu:nanoseconds:delta{job=\"api\"}[1h]))",
    "sum by (job) (process_cpu:samples:count:cpu:nanoseconds:delta)",
    "topk(5, sum by (instance) (memory:inuse_space:bytes:space:bytes))",
    r#"merge(process_cpu:samples:count:cpu:nanoseconds:delta{job="api"}[1h] |= "runtime.mallocgc" !~ "^net/http\\..*")"#,
    r#"{__name__=~"memory:.*", instance="localhost:7070"}"#,
    "# comment\nsum(memory:inuse_space:bytes:space:bytes) without (pod) # trailing",
    r#"memory:inuse_space:bytes:space:bytes{a='it\'s', b=`raw\`, c="\a\b\f\v\x00\u00e9\U0001F600"}[90m] offset 14d"#,
    "((memory:inuse_space:bytes:space:bytes)) offset 0s",
    "count(topk(3, memory:inuse_space:bytes:space:bytes[1y2w3d4h5m6s7ms]))",
    r#"sum by (job) (process_cpu:samples:count:cpu:nanoseconds:delta |= "hot_func") / sum by (job) (process_cpu:samples:count:cpu:nanoseconds:delta)"#,
    "1 + 2 * 3 - 4 / -5 > bool 0.5e1",
    "a:b:c:d:e - (a:b:c:d:e - a:b:c:d:e) * 1e-3",
    r#"a:b:c:d:e{job="x"} != a:b:c:d:e != "f" != leaf "g""#,
    "sum by (job, instance) (a:b:c:d:e) / on (job) group_left (team) sum by (job, team) (a:b:c:d:e)",
    "a:b:c:d:e * ignoring (pod) group_right () (a:b:c:d:e)",
    "a:b:c:d:e <= ignoring () a:b:c:d:e offset 1h |~ leaf `x.*`",
];

#[test]
fn printing_round_trips() {
    for q in QUERIES {
        let expr = parse(q).unwrap_or_else(|e| panic!("{}", e.render(q)));
        let printed = expr.to_string();
        let again = parse(&printed).unwrap_or_else(|e| panic!("{}", e.render(&printed)));
        assert_eq!(
            again.to_string(),
            printed,
            "printing is not stable for {q:?}"
        );
        assert_eq!(
            without_spans(again),
            without_spans(expr),
            "{q:?} printed as {printed:?}"
        );
    }
}

/// A deterministic generator (xorshift) of arbitrary trees, to print and read back.
struct Gen(u64);

impl Gen {
    fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.next(items.len() as u64) as usize]
    }

    fn string(&mut self) -> String {
        let pieces = [
            "a", "api", "\"", "'", "`", "\\", "\n", "\t", "\x00", "\x7f", "é", "😀", "{", "}", "#",
            " ", ".*", "\u{85}",
        ];
        (0..self.next(5)).map(|_| self.pick(&pieces)).collect()
    }

    fn duration(&mut self) -> Duration {
        let units = [
            1,
            1000,
            60_000,
            3_600_000,
            86_400_000,
            604_800_000,
            31_536_000_000,
        ];
        Duration::from_millis(
            self.next(100) * units[self.next(units.len() as u64) as usize] + self.next(3),
        )
    }

    fn grouping(&mut self) -> Option<Grouping> {
        match self.next(3) {
            0 => None,
            n => {
                let mut labels: Vec<String> = ["job", "instance", "by", "offset", "_x1"]
                    [..self.next(4) as usize]
                    .iter()
                    .map(|s| s.to_string())
                    .collect();
                labels.dedup();
                Some(Grouping {
                    without: n == 2,
                    labels,
                })
            }
        }
    }

    fn expr(&mut self, depth: usize) -> Expr {
        let e = |kind| Expr {
            kind,
            span: Span::default(),
        };
        let choice = if depth > 4 { 0 } else { self.next(12) };
        let sub = |g: &mut Gen| Box::new(g.expr(depth + 1));
        e(match choice {
            0 | 1 => {
                let types = [
                    "memory:inuse_space:bytes:space:bytes",
                    "process_cpu:samples:count:cpu:nanoseconds:delta",
                    "sum:a:b:c:d",
                    "_:_:_:_:_",
                ];
                let profile_type = (self.next(4) > 0).then(|| self.pick(&types).parse().unwrap());
                let ops = [
                    MatchOp::Equal,
                    MatchOp::NotEqual,
                    MatchOp::Re,
                    MatchOp::NotRe,
                ];
                let matchers = (0..self.next(4))
                    .map(|_| LabelMatcher {
                        name: self
                            .pick(&["job", "__name__", "by", "offset", "a_1"])
                            .to_owned(),
                        op: ops[self.next(4) as usize],
                        value: self.string(),
                        span: Span::default(),
                    })
                    .collect();
                let range = (self.next(2) == 0).then(|| self.duration());
                ExprKind::Selector(Selector {
                    profile_type,
                    matchers,
                    range,
                })
            }
            2 => ExprKind::Offset {
                expr: paren_if(sub(self), |_| true),
                offset: self.duration(),
            },
            3 => {
                let ops = [
                    StackFilterOp::Contains,
                    StackFilterOp::NotContains,
                    StackFilterOp::Matches,
                    StackFilterOp::NotMatches,
                ];
                let filter = StackFilter {
                    op: ops[self.next(4) as usize],
                    pattern: self.string(),
                    leaf: self.next(2) == 0,
                    span: Span::default(),
                };
                ExprKind::StackFilter {
                    expr: paren_if(sub(self), |_| true),
                    filter,
                }
            }
            4 => ExprKind::Merge {
                grouping: self.grouping(),
                expr: sub(self),
            },
            5 => ExprKind::Diff {
                base: sub(self),
                comparison: sub(self),
            },
            6 => {
                let ops = [
                    AggregateOp::Sum,
                    AggregateOp::Avg,
                    AggregateOp::Min,
                    AggregateOp::Max,
                    AggregateOp::Count,
                ];
                ExprKind::Aggregate {
                    op: ops[self.next(5) as usize],
                    grouping: self.grouping(),
                    expr: sub(self),
                }
            }
            7 => ExprKind::TopK {
                k: 1 + self.next(1000),
                expr: sub(self),
            },
            9 => ExprKind::Number(Number(
                [0.5, -2.0, 1e21, 1e-7, 3.0, -0.0][self.next(6) as usize],
            )),
            10 | 11 => {
                let ops = [
                    BinaryOp::Add,
                    BinaryOp::Sub,
                    BinaryOp::Mul,
                    BinaryOp::Div,
                    BinaryOp::Eql,
                    BinaryOp::Neq,
                    BinaryOp::Gtr,
                    BinaryOp::Lss,
                    BinaryOp::Gte,
                    BinaryOp::Lte,
                ];
                let op = ops[self.next(10) as usize];
                // Operands that would bind differently without them get the parentheses a
                // person would write.
                let lhs = paren_if(sub(self), |p| p < op.precedence());
                let rhs = paren_if(sub(self), |p| p <= op.precedence());
                let labels = |g: &mut Gen| -> Vec<String> {
                    ["job", "instance", "on", "bool", "group_left"][..g.next(4) as usize]
                        .iter()
                        .map(|s| s.to_string())
                        .collect()
                };
                let matching = (self.next(2) == 0).then(|| VectorMatching {
                    on: self.next(2) == 0,
                    labels: labels(self),
                    group: (self.next(2) == 0).then(|| GroupModifier {
                        side: if self.next(2) == 0 {
                            GroupSide::Left
                        } else {
                            GroupSide::Right
                        },
                        labels: labels(self),
                    }),
                });
                ExprKind::Binary {
                    op,
                    lhs,
                    rhs,
                    return_bool: op.is_comparison() && self.next(2) == 0,
                    matching,
                    op_span: Span::default(),
                }
            }
            _ => ExprKind::Paren(sub(self)),
        })
    }
}

/// `expr` in parentheses if it is a binary operation whose precedence `needs` them.
fn paren_if(expr: Box<Expr>, needs: impl Fn(u8) -> bool) -> Box<Expr> {
    match &expr.kind {
        ExprKind::Binary { op, .. } if needs(op.precedence()) => Box::new(Expr {
            kind: ExprKind::Paren(expr),
            span: Span::default(),
        }),
        _ => expr,
    }
}

/// Any tree the grammar can express prints to text that reads back as that tree (type errors
/// aside, so the lenient parse reads it back).
#[test]
fn generated_trees_round_trip() {
    let mut generator = Gen(0x9e37_79b9_7f4a_7c15);
    for _ in 0..3000 {
        let expr = generator.expr(0);
        let printed = expr.to_string();
        let parsed = parse_lenient(&printed);
        let syntax_ok = parsed.errors.iter().all(|e| e.expected.is_empty());
        assert!(
            syntax_ok && parsed.expr.is_some(),
            "{printed:?}: {:?}",
            parsed.errors
        );
        assert_eq!(without_spans(parsed.expr.unwrap()), expr, "{printed:?}");
    }
}
