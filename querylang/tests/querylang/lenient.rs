//! The lenient parse: partial trees for autocomplete, and every error of a well-formed query.

use expect_test::{Expect, expect};
use parca_querylang::{parse, parse_lenient};

fn check(query: &str, expect: Expect) {
    let parsed = parse_lenient(query);
    let mut out = match &parsed.expr {
        Some(expr) => format!("{expr} @{}..{}\n", expr.span.start, expr.span.end),
        None => "no tree\n".to_owned(),
    };
    for e in &parsed.errors {
        out += &format!("{e} {:?}\n", e.expected);
        assert!(e.span.end <= query.len());
    }
    // The strict parse reports the first of these errors, or none.
    match parse(query) {
        Ok(expr) => assert_eq!((Some(expr), 0), (parsed.expr, parsed.errors.len())),
        Err(e) => assert_eq!(Some(&e), parsed.errors.first()),
    }
    expect.assert_eq(&out);
}

#[test]
fn half_typed_queries() {
    check(
        r#"memory:inuse_space:bytes:space:bytes{job="api", "#,
        expect![[r#"
        memory:inuse_space:bytes:space:bytes{job="api"} @0..48
        line 1, column 49: expected a label matcher such as job="api" or `}`, found the end of the query [LabelMatcher, Symbol('}')]
    "#]],
    );
    check(
        r#"memory:inuse_space:bytes:space:bytes{job="api", instance="#,
        expect![[r#"
        memory:inuse_space:bytes:space:bytes{job="api"} @0..47
        line 1, column 58: expected a string such as "api", found the end of the query [String]
    "#]],
    );
    check(
        r#"memory:inuse_space:bytes:space:bytes{job="ap"#,
        expect![[r#"
        memory:inuse_space:bytes:space:bytes{job="ap"} @0..44
        line 1, column 42: this string is not closed: add a " (a line break cannot be inside one) []
    "#]],
    );
    check(
        r#"sum by (job) (memory:inuse_space:bytes:space:bytes{job="api"}"#,
        expect![[r#"
            sum by (job) (memory:inuse_space:bytes:space:bytes{job="api"}) @0..61
            line 1, column 62: expected `)`, a range such as [5m], `offset`, a stack filter such as |= "main" or a binary operator such as / or >, found the end of the query [Symbol(')'), Range, Offset, StackFilter, BinaryOperator]
        "#]],
    );
    check(
        "sum by (",
        expect![[r#"
            no tree
            line 1, column 9: expected a label name such as instance, a string such as "api" or `)`, found the end of the query [LabelName, String, Symbol(')')]
        "#]],
    );
    check(
        "merge(memory:inuse_space:bytes:space:bytes[",
        expect![[r#"
        merge(memory:inuse_space:bytes:space:bytes) @0..42
        line 1, column 44: expected a duration such as 5m, found the end of the query [Duration]
    "#]],
    );
    check(
        "diff(memory:inuse_space:bytes:space:bytes, ",
        expect![[r#"
        no tree
        line 1, column 44: expected an expression such as memory:inuse_space:bytes:space:bytes{job="api"} or merge(…), found the end of the query [Expression]
    "#]],
    );
    check(
        "memory:inuse_space:bytes:space:",
        expect![[r#"
            memory:inuse_space:bytes:space: @0..31
        "#]],
    );
    check(
        "topk(",
        expect![[r#"
        no tree
        line 1, column 6: expected a number such as 5, found the end of the query [Number]
    "#]],
    );
    check(
        "",
        expect![[r#"
        no tree
        line 1, column 1: expected an expression such as memory:inuse_space:bytes:space:bytes{job="api"} or merge(…), found the end of the query [Expression]
    "#]],
    );
}

#[test]
fn every_error_of_a_well_formed_query() {
    check(
        r#"diff(sum(memory:inuse_space:bytes:space:bytes[0s]), memory:inuse_space:bytes:space:bytes{a=~"("})"#,
        expect![[r#"
        diff(sum(memory:inuse_space:bytes:space:bytes[0s]), memory:inuse_space:bytes:space:bytes{a=~"("}) @0..97
        line 1, column 6: `diff` takes profiles, got a series set []
        line 1, column 47: a range must be longer than zero, such as [5m] []
        line 1, column 90: invalid regex in `a=~`: unclosed group []
    "#]],
    );
    check(
        r#"process_cpu{a="\q"} offset 5x"#,
        expect![[r#"
        process_cpu{a=""} offset 0s @0..29
        line 1, column 1: `process_cpu` is not a profile type: write name:sample_type:sample_unit:period_type:period_unit[:delta], such as process_cpu:samples:count:cpu:nanoseconds:delta []
        line 1, column 16: unknown escape `\q`; write `\\` for a backslash, or use a `raw` string []
        line 1, column 29: unknown duration unit `x`: use ms, s, m, h, d, w or y []
    "#]],
    );
}
