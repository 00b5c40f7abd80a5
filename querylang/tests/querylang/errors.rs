//! Malformed queries and exactly what a person is told: message, line, caret.

use expect_test::expect;

use crate::check;

#[test]
fn syntax_errors() {
    check(
        "",
        expect![[r#"
        line 1, column 1: expected an expression such as memory:inuse_space:bytes:space:bytes{job="api"} or merge(…), found the end of the query
        1 | 
          | ^"#]],
    );
    check(
        "   # only a comment",
        expect![[r#"
        line 1, column 20: expected an expression such as memory:inuse_space:bytes:space:bytes{job="api"} or merge(…), found the end of the query
        1 |    # only a comment
          |                    ^"#]],
    );
    check(
        r#"memory:inuse_space:bytes:space:bytes{job="api" instance="x"}"#,
        expect![[r#"
        line 1, column 48: expected `,` or `}`, found `instance`
        1 | memory:inuse_space:bytes:space:bytes{job="api" instance="x"}
          |                                                ^^^^^^^^"#]],
    );
    check(
        r#"memory:inuse_space:bytes:space:bytes{job=}"#,
        expect![[r#"
        line 1, column 42: expected a string such as "api", found `}`
        1 | memory:inuse_space:bytes:space:bytes{job=}
          |                                          ^"#]],
    );
    check(
        r#"memory:inuse_space:bytes:space:bytes{job "api"}"#,
        expect![[r#"
        line 1, column 42: expected a match operator (=, !=, =~ or !~), found a string
        1 | memory:inuse_space:bytes:space:bytes{job "api"}
          |                                          ^"#]],
    );
    check(
        r#"memory:inuse_space:bytes:space:bytes{,}"#,
        expect![[r#"
        line 1, column 38: expected a label matcher such as job="api" or `}`, found `,`
        1 | memory:inuse_space:bytes:space:bytes{,}
          |                                      ^"#]],
    );
    check(
        r#"memory:inuse_space:bytes:space:bytes{job="api""#,
        expect![[r#"
        line 1, column 47: expected `,` or `}`, found the end of the query
        1 | memory:inuse_space:bytes:space:bytes{job="api"
          |                                               ^"#]],
    );
    check(
        r#"memory:inuse_space:bytes:space:bytes{service.version="1.2"}"#,
        expect![[r#"
            line 1, column 38: label name `service.version` has a `.`: quote it, `"service.version"`, or write the stored name `service_version`
            1 | memory:inuse_space:bytes:space:bytes{service.version="1.2"}
              |                                      ^^^^^^^^^^^^^^^"#]],
    );
    check(
        r#"sum by (service.version) (memory:inuse_space:bytes:space:bytes)"#,
        expect![[r#"
            line 1, column 9: label name `service.version` has a `.`: quote it, `"service.version"`, or write the stored name `service_version`
            1 | sum by (service.version) (memory:inuse_space:bytes:space:bytes)
              |         ^^^^^^^^^^^^^^^"#]],
    );
    check(
        r#"memory:inuse_space:bytes:space:bytes{job=api}"#,
        expect![[r#"
        line 1, column 42: expected a string such as "api", found `api`
        1 | memory:inuse_space:bytes:space:bytes{job=api}
          |                                          ^^^"#]],
    );
    check(
        r#"memory:inuse_space:bytes:space:bytes{job=="api"}"#,
        expect![[r#"
        line 1, column 42: expected a string such as "api", found `=`
        1 | memory:inuse_space:bytes:space:bytes{job=="api"}
          |                                          ^"#]],
    );
    check(
        "memory:inuse_space:bytes:space:bytes[]",
        expect![[r#"
        line 1, column 38: expected a duration such as 5m, found `]`
        1 | memory:inuse_space:bytes:space:bytes[]
          |                                      ^"#]],
    );
    check(
        "memory:inuse_space:bytes:space:bytes[5m",
        expect![[r#"
        line 1, column 40: expected `]`, found the end of the query
        1 | memory:inuse_space:bytes:space:bytes[5m
          |                                        ^"#]],
    );
    check(
        "memory:inuse_space:bytes:space:bytes offset",
        expect![[r#"
        line 1, column 44: expected a duration such as 5m, found the end of the query
        1 | memory:inuse_space:bytes:space:bytes offset
          |                                            ^"#]],
    );
    check(
        "memory:inuse_space:bytes:space:bytes offset 1h [5m]",
        expect![[r#"
            line 1, column 48: expected `offset`, a stack filter such as |= "main", a binary operator such as / or > or the end of the query, found `[`
            1 | memory:inuse_space:bytes:space:bytes offset 1h [5m]
              |                                                ^"#]],
    );
    check(
        "memory:inuse_space:bytes:space:bytes foo",
        expect![[r#"
            line 1, column 38: expected `{`, a range such as [5m], `offset`, a stack filter such as |= "main", a binary operator such as / or > or the end of the query, found `foo`
            1 | memory:inuse_space:bytes:space:bytes foo
              |                                      ^^^"#]],
    );
    check(
        "memory:inuse_space:bytes:space:bytes |=",
        expect![[r#"
            line 1, column 40: expected a string such as "api" or `leaf`, found the end of the query
            1 | memory:inuse_space:bytes:space:bytes |=
              |                                        ^"#]],
    );
    check(
        "memory:inuse_space:bytes:space:bytes |= main",
        expect![[r#"
            line 1, column 41: expected a string such as "api" or `leaf`, found `main`
            1 | memory:inuse_space:bytes:space:bytes |= main
              |                                         ^^^^"#]],
    );
    check(
        "sum",
        expect![[r#"
        line 1, column 4: expected a grouping such as by (job) or `(`, found the end of the query
        1 | sum
          |    ^"#]],
    );
    check(
        "sum(",
        expect![[r#"
        line 1, column 5: expected an expression such as memory:inuse_space:bytes:space:bytes{job="api"} or merge(…), found the end of the query
        1 | sum(
          |     ^"#]],
    );
    check(
        "sum()",
        expect![[r#"
        line 1, column 5: expected an expression such as memory:inuse_space:bytes:space:bytes{job="api"} or merge(…), found `)`
        1 | sum()
          |     ^"#]],
    );
    check(
        "sum by job (memory:inuse_space:bytes:space:bytes)",
        expect![[r#"
        line 1, column 8: expected `(`, found `job`
        1 | sum by job (memory:inuse_space:bytes:space:bytes)
          |        ^^^"#]],
    );
    check(
        "sum by (job memory:inuse_space:bytes:space:bytes)",
        expect![[r#"
        line 1, column 13: expected `)` or `,`, found `memory:inuse_space:bytes:space…`
        1 | sum by (job memory:inuse_space:bytes:space:bytes)
          |             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^"#]],
    );
    check(
        "sum by (job) memory:inuse_space:bytes:space:bytes",
        expect![[r#"
        line 1, column 14: expected `(`, found `memory:inuse_space:bytes:space…`
        1 | sum by (job) memory:inuse_space:bytes:space:bytes
          |              ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^"#]],
    );
    check(
        "sum(memory:inuse_space:bytes:space:bytes",
        expect![[r#"
            line 1, column 41: expected `)`, `{`, a range such as [5m], `offset`, a stack filter such as |= "main" or a binary operator such as / or >, found the end of the query
            1 | sum(memory:inuse_space:bytes:space:bytes
              |                                         ^"#]],
    );
    check(
        "merge(memory:inuse_space:bytes:space:bytes))",
        expect![[r#"
            line 1, column 44: expected a grouping such as by (job), `offset`, a stack filter such as |= "main", a binary operator such as / or > or the end of the query, found `)`
            1 | merge(memory:inuse_space:bytes:space:bytes))
              |                                            ^"#]],
    );
    check(
        "diff(memory:inuse_space:bytes:space:bytes)",
        expect![[r#"
            line 1, column 42: expected `,`, `{`, a range such as [5m], `offset`, a stack filter such as |= "main" or a binary operator such as / or >, found `)`
            1 | diff(memory:inuse_space:bytes:space:bytes)
              |                                          ^"#]],
    );
    check(
        "diff(memory:inuse_space:bytes:space:bytes, memory:inuse_space:bytes:space:bytes, memory:inuse_space:bytes:space:bytes)",
        expect![[r#"
            line 1, column 80: expected `)`, `{`, a range such as [5m], `offset`, a stack filter such as |= "main" or a binary operator such as / or >, found `,`
            1 | …es, memory:inuse_space:bytes:space:bytes, memory:inuse_space:bytes:space:bytes)
              |                                          ^"#]],
    );
    check(
        "topk(memory:inuse_space:bytes:space:bytes)",
        expect![[r#"
        line 1, column 6: expected a number such as 5, found `memory:inuse_space:bytes:space…`
        1 | topk(memory:inuse_space:bytes:space:bytes)
          |      ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^"#]],
    );
    check(
        "topk(5 memory:inuse_space:bytes:space:bytes)",
        expect![[r#"
        line 1, column 8: expected `,`, found `memory:inuse_space:bytes:space…`
        1 | topk(5 memory:inuse_space:bytes:space:bytes)
          |        ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^"#]],
    );
    check(
        "rate(memory:inuse_space:bytes:space:bytes[5m])",
        expect![[r#"
        line 1, column 5: unknown function `rate`: the functions are merge, diff, sum, avg, min, max, count and topk
        1 | rate(memory:inuse_space:bytes:space:bytes[5m])
          |     ^"#]],
    );
    check(
        "memory:inuse_space:bytes:space:bytes / 2",
        expect![[r#"
            SeriesSet: memory:inuse_space:bytes:space:bytes / 2
            binary Div op@37..38 @0..40
              selector memory:inuse_space:bytes:space:bytes @0..36
              number 2.0 @39..40
        "#]],
    );
    check(
        "sum(\n  memory:inuse_space:bytes:space:bytes{job=\"api\"\n)",
        expect![[r#"
        line 3, column 1: expected `,` or `}`, found `)`
        3 | )
          | ^"#]],
    );
    check(
        "(memory:inuse_space:bytes:space:bytes",
        expect![[r#"
            line 1, column 38: expected `)`, `{`, a range such as [5m], `offset`, a stack filter such as |= "main" or a binary operator such as / or >, found the end of the query
            1 | (memory:inuse_space:bytes:space:bytes
              |                                      ^"#]],
    );
    check(
        "memory:inuse_space:bytes:space:bytes{job=\"api\n\"}",
        expect![[r#"
        line 1, column 42: this string is not closed: add a " (a line break cannot be inside one)
        1 | memory:inuse_space:bytes:space:bytes{job="api
          |                                          ^"#]],
    );
    check(
        "memory:inuse_space:bytes:space:bytes{job='api}",
        expect![[r#"
        line 1, column 42: this string is not closed: add a ' (a line break cannot be inside one)
        1 | memory:inuse_space:bytes:space:bytes{job='api}
          |                                          ^"#]],
    );
    check(
        "memory:inuse_space:bytes:space:bytes{job=`api}",
        expect![[r#"
        line 1, column 42: this string is not closed: add a `
        1 | memory:inuse_space:bytes:space:bytes{job=`api}
          |                                          ^"#]],
    );
    check(
        "memory:inuse_space:bytes:space:bytes{job=\"api\"} 😀",
        expect![[r#"
            line 1, column 49: expected a range such as [5m], `offset`, a stack filter such as |= "main", a binary operator such as / or > or the end of the query, found `😀`
            1 | memory:inuse_space:bytes:space:bytes{job="api"} 😀
              |                                                 ^"#]],
    );
}

#[test]
fn literal_errors() {
    check(
        r#"memory:inuse_space:bytes:space:bytes{job="a\qb"}"#,
        expect![[r#"
        line 1, column 44: unknown escape `\q`; write `\\` for a backslash, or use a `raw` string
        1 | memory:inuse_space:bytes:space:bytes{job="a\qb"}
          |                                            ^^"#]],
    );
    check(
        r#"memory:inuse_space:bytes:space:bytes{job="\x4"}"#,
        expect![[r#"
        line 1, column 43: `\x` needs 2 hex digits
        1 | memory:inuse_space:bytes:space:bytes{job="\x4"}
          |                                           ^^^"#]],
    );
    check(
        r#"memory:inuse_space:bytes:space:bytes{job="\xff"}"#,
        expect![[r#"
        line 1, column 42: the byte escapes in this string do not make valid UTF-8
        1 | memory:inuse_space:bytes:space:bytes{job="\xff"}
          |                                          ^^^^^^"#]],
    );
    check(
        r#"memory:inuse_space:bytes:space:bytes{job="\ud800"}"#,
        expect![[r#"
        line 1, column 43: `\ud800` is not a Unicode character
        1 | memory:inuse_space:bytes:space:bytes{job="\ud800"}
          |                                           ^^^^^^"#]],
    );
    check(
        "memory:inuse_space:bytes:space:bytes[5]",
        expect![[r#"
        line 1, column 38: `5` needs a unit (ms, s, m, h, d, w or y), such as 5m
        1 | memory:inuse_space:bytes:space:bytes[5]
          |                                      ^"#]],
    );
    check(
        "memory:inuse_space:bytes:space:bytes[5x]",
        expect![[r#"
        line 1, column 39: unknown duration unit `x`: use ms, s, m, h, d, w or y
        1 | memory:inuse_space:bytes:space:bytes[5x]
          |                                       ^"#]],
    );
    check(
        "memory:inuse_space:bytes:space:bytes[30m1h]",
        expect![[r#"
        line 1, column 38: `30m1h`: units must go from largest to smallest, each once, as in 1h30m
        1 | memory:inuse_space:bytes:space:bytes[30m1h]
          |                                      ^^^^^"#]],
    );
    check(
        "memory:inuse_space:bytes:space:bytes[1.5h]",
        expect![[r#"
        line 1, column 38: `1.5h`: a duration counts whole units, as in 1h30m or 1500ms
        1 | memory:inuse_space:bytes:space:bytes[1.5h]
          |                                      ^^^^"#]],
    );
    check(
        "memory:inuse_space:bytes:space:bytes[0s]",
        expect![[r#"
        line 1, column 38: a range must be longer than zero, such as [5m]
        1 | memory:inuse_space:bytes:space:bytes[0s]
          |                                      ^^"#]],
    );
    check(
        "memory:inuse_space:bytes:space:bytes[-5m]",
        expect![[r#"
        line 1, column 38: a range must be longer than zero, such as [5m]
        1 | memory:inuse_space:bytes:space:bytes[-5m]
          |                                      ^^^"#]],
    );
    check(
        "memory:inuse_space:bytes:space:bytes offset -5m",
        expect![[r#"
        line 1, column 45: a negative offset would look into the future: write a positive duration such as 5m
        1 | memory:inuse_space:bytes:space:bytes offset -5m
          |                                             ^^^"#]],
    );
    check(
        "memory:inuse_space:bytes:space:bytes offset 99999999999999999999y",
        expect![[r#"
            line 1, column 45: `99999999999999999999y` is too long a duration (at most about 292 years)
            1 | memory:inuse_space:bytes:space:bytes offset 99999999999999999999y
              |                                             ^^^^^^^^^^^^^^^^^^^^^"#]],
    );
    check(
        "topk(0, memory:inuse_space:bytes:space:bytes)",
        expect![[r#"
        line 1, column 6: `topk` needs k of at least 1
        1 | topk(0, memory:inuse_space:bytes:space:bytes)
          |      ^"#]],
    );
    check(
        "topk(2.5, memory:inuse_space:bytes:space:bytes)",
        expect![[r#"
        line 1, column 6: `topk` needs a whole number k of at least 1, not `2.5`
        1 | topk(2.5, memory:inuse_space:bytes:space:bytes)
          |      ^^^"#]],
    );
    check(
        "topk(-1, memory:inuse_space:bytes:space:bytes)",
        expect![[r#"
        line 1, column 6: `topk` needs a whole number k of at least 1, not `-1`
        1 | topk(-1, memory:inuse_space:bytes:space:bytes)
          |      ^^"#]],
    );
    check(
        "topk(99999999999999999999, memory:inuse_space:bytes:space:bytes)",
        expect![[r#"
        line 1, column 6: `99999999999999999999` is too large for `topk`
        1 | topk(99999999999999999999, memory:inuse_space:bytes:space:bytes)
          |      ^^^^^^^^^^^^^^^^^^^^"#]],
    );
}

#[test]
fn profile_type_errors() {
    check(
        "process_cpu",
        expect![[r#"
        line 1, column 1: `process_cpu` is not a profile type: write name:sample_type:sample_unit:period_type:period_unit[:delta], such as process_cpu:samples:count:cpu:nanoseconds:delta
        1 | process_cpu
          | ^^^^^^^^^^^"#]],
    );
    check(
        r#"process_cpu{job="api"}"#,
        expect![[r#"
        line 1, column 1: `process_cpu` is not a profile type: write name:sample_type:sample_unit:period_type:period_unit[:delta], such as process_cpu:samples:count:cpu:nanoseconds:delta
        1 | process_cpu{job="api"}
          | ^^^^^^^^^^^"#]],
    );
    check(
        "process_cpu:samples:count",
        expect![[r#"
        line 1, column 1: `process_cpu:samples:count` has 3 parts, a profile type has 5 or 6: name:sample_type:sample_unit:period_type:period_unit[:delta], such as process_cpu:samples:count:cpu:nanoseconds:delta
        1 | process_cpu:samples:count
          | ^^^^^^^^^^^^^^^^^^^^^^^^^"#]],
    );
    check(
        "process_cpu:samples:count:cpu:nanoseconds:",
        expect![[r#"
            line 1, column 1: `process_cpu:samples:count:cpu:nanoseconds:` ends with `:`; the sixth part, when there is one, is `delta`: name:sample_type:sample_unit:period_type:period_unit[:delta], such as process_cpu:samples:count:cpu:nanoseconds:delta
            1 | process_cpu:samples:count:cpu:nanoseconds:
              | ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^"#]],
    );
    check(
        "process_cpu:samples:count:cpu:nanoseconds:cumulative",
        expect![[r#"
        line 1, column 1: the sixth part of a profile type can only be `delta`, not `cumulative`
        1 | process_cpu:samples:count:cpu:nanoseconds:cumulative
          | ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^"#]],
    );
    check(
        "a:b:c:d:e:delta:x",
        expect![[r#"
        line 1, column 1: `a:b:c:d:e:delta:x` has 7 parts, a profile type has 5 or 6: name:sample_type:sample_unit:period_type:period_unit[:delta], such as process_cpu:samples:count:cpu:nanoseconds:delta
        1 | a:b:c:d:e:delta:x
          | ^^^^^^^^^^^^^^^^^"#]],
    );
    check(
        "1a:b:c:d:e",
        expect![[r#"
            line 1, column 1: `1a:b:c:d:e` is not a profile type: its name must start with a letter or `_`
            1 | 1a:b:c:d:e
              | ^^^^^^^^^^"#]],
    );
    check(
        "bar::count::milliseconds:delta",
        expect![[r#"
            line 1, column 1: `bar::count::milliseconds:delta` has an empty sample type: write name:sample_type:sample_unit:period_type:period_unit[:delta], such as process_cpu:samples:count:cpu:nanoseconds:delta
            1 | bar::count::milliseconds:delta
              | ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^"#]],
    );
}

#[test]
fn type_errors() {
    check(
        "diff(sum(memory:inuse_space:bytes:space:bytes), memory:inuse_space:bytes:space:bytes)",
        expect![[r#"
        line 1, column 6: `diff` takes profiles, got a series set
        1 | diff(sum(memory:inuse_space:bytes:space:bytes), memory:inuse_space:bytes:space:bytes)
          |      ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^"#]],
    );
    check(
        "sum(diff(memory:inuse_space:bytes:space:bytes, memory:inuse_space:bytes:space:bytes))",
        expect![[r#"
        line 1, column 5: `sum` takes a profile set or a series set, got a profile
        1 | sum(diff(memory:inuse_space:bytes:space:bytes, memory:inuse_space:bytes:space:bytes))
          |     ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^"#]],
    );
    check(
        "sum(merge(memory:inuse_space:bytes:space:bytes))",
        expect![[r#"
        line 1, column 5: `sum` takes a profile set or a series set, got a profile
        1 | sum(merge(memory:inuse_space:bytes:space:bytes))
          |     ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^"#]],
    );
    check(
        "merge(topk(5, memory:inuse_space:bytes:space:bytes))",
        expect![[r#"
        line 1, column 7: `merge` takes profiles, got a series set
        1 | merge(topk(5, memory:inuse_space:bytes:space:bytes))
          |       ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^"#]],
    );
    check(
        "topk(5, merge(memory:inuse_space:bytes:space:bytes))",
        expect![[r#"
        line 1, column 9: `topk` takes a profile set or a series set, got a profile
        1 | topk(5, merge(memory:inuse_space:bytes:space:bytes))
          |         ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^"#]],
    );
    check(
        r#"sum(memory:inuse_space:bytes:space:bytes) |= "main""#,
        expect![[r#"
        line 1, column 1: `|=` takes profiles, got a series set
        1 | sum(memory:inuse_space:bytes:space:bytes) |= "main"
          | ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^"#]],
    );
    check(
        "diff(memory:inuse_space:bytes:space:bytes,\n     (count(memory:inuse_space:bytes:space:bytes)))",
        expect![[r#"
        line 2, column 6: `diff` takes profiles, got a series set
        2 |      (count(memory:inuse_space:bytes:space:bytes)))
          |      ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^"#]],
    );
}

#[test]
fn semantic_errors() {
    check(
        r#"memory:inuse_space:bytes:space:bytes{instance=~"10.0.(0"}"#,
        expect![[r#"
        line 1, column 38: invalid regex in `instance=~`: unclosed group
        1 | memory:inuse_space:bytes:space:bytes{instance=~"10.0.(0"}
          |                                      ^^^^^^^^^^^^^^^^^^^"#]],
    );
    check(
        r#"memory:inuse_space:bytes:space:bytes{instance!~"*"}"#,
        expect![[r#"
        line 1, column 38: invalid regex in `instance!~`: repetition operator missing expression
        1 | memory:inuse_space:bytes:space:bytes{instance!~"*"}
          |                                      ^^^^^^^^^^^^^"#]],
    );
    check(
        r#"memory:inuse_space:bytes:space:bytes |~ "net/http.(*Server""#,
        expect![[r#"
        line 1, column 38: invalid regex after `|~`: repetition operator missing expression
        1 | memory:inuse_space:bytes:space:bytes |~ "net/http.(*Server"
          |                                      ^^^^^^^^^^^^^^^^^^^^^^"#]],
    );
    check(
        r#"memory:inuse_space:bytes:space:bytes !~ "\\pX""#,
        expect![[r#"
        line 1, column 38: invalid regex after `!~`: Unicode property not found
        1 | memory:inuse_space:bytes:space:bytes !~ "\\pX"
          |                                      ^^^^^^^^^"#]],
    );
    check(
        r#"{job="api"}"#,
        expect![[r#"
        line 1, column 1: a selector without a profile type must match `__name__` to a non-empty value, as in {__name__=~"memory:.*"}
        1 | {job="api"}
          | ^^^^^^^^^^^"#]],
    );
    check(
        "{}",
        expect![[r#"
        line 1, column 1: a selector without a profile type must match `__name__` to a non-empty value, as in {__name__=~"memory:.*"}
        1 | {}
          | ^^"#]],
    );
    check(
        r#"{__name__=~".*"}"#,
        expect![[r#"
        line 1, column 1: a selector without a profile type must match `__name__` to a non-empty value, as in {__name__=~"memory:.*"}
        1 | {__name__=~".*"}
          | ^^^^^^^^^^^^^^^^"#]],
    );
    check(
        r#"{__name__!="memory:inuse_space:bytes:space:bytes"}"#,
        expect![[r#"
        line 1, column 1: a selector without a profile type must match `__name__` to a non-empty value, as in {__name__=~"memory:.*"}
        1 | {__name__!="memory:inuse_space:bytes:space:bytes"}
          | ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^"#]],
    );
    check(
        r#"memory:inuse_space:bytes:space:bytes{__name__="x"}"#,
        expect![[r#"
        line 1, column 38: the profile type is given twice: before `{` and by `__name__`
        1 | memory:inuse_space:bytes:space:bytes{__name__="x"}
          |                                      ^^^^^^^^^^^^"#]],
    );
    check(
        "sum by (job, job) (memory:inuse_space:bytes:space:bytes)",
        expect![[r#"
        line 1, column 14: label `job` is listed twice
        1 | sum by (job, job) (memory:inuse_space:bytes:space:bytes)
          |              ^^^"#]],
    );
    check(
        "sum by (job) (memory:inuse_space:bytes:space:bytes) by (pod)",
        expect![[r#"
        line 1, column 53: `sum` has two groupings: keep one
        1 | sum by (job) (memory:inuse_space:bytes:space:bytes) by (pod)
          |                                                     ^^^^^^^^"#]],
    );
    check(
        &format!(
            "{}memory:inuse_space:bytes:space:bytes{}",
            "(".repeat(200),
            ")".repeat(200)
        ),
        expect![[r#"
        line 1, column 129: the query nests deeper than 128 levels
        1 | …((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((…
          |                                          ^"#]],
    );
    check(
        &format!(
            "memory:inuse_space:bytes:space:bytes{}",
            " offset 1s".repeat(200)
        ),
        expect![[r#"
        line 1, column 1308: the query nests deeper than 128 levels
        1 | …offset 1s offset 1s offset 1s offset 1s offset 1s offset 1s offset 1s offset 1s offset 1s offset 1s …
          |                                          ^^^^^^^^^"#]],
    );
}

#[test]
fn the_first_error_is_reported() {
    check(
        "diff(sum(memory:inuse_space:bytes:space:bytes[0s]), memory:inuse_space:bytes:space:bytes{a=~\"(\"})",
        expect![[r#"
        line 1, column 6: `diff` takes profiles, got a series set
        1 | diff(sum(memory:inuse_space:bytes:space:bytes[0s]), memory:inuse_space:bytes:space:bytes{a=~"("})
          |      ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^"#]],
    );
}

/// Regression: escapes follow Go's and PromQL's exactly (only the string's own quote may be
/// escaped), and a line break in a string says so, in `match[]` selectors too (they said
/// "expected a string … found a string").
#[test]
fn string_escapes_and_line_breaks() {
    check(
        r#"memory:inuse_space:bytes:space:bytes{job="a\'b"}"#,
        expect![[r#"
            line 1, column 44: `\'` is not an escape in a string quoted with ": write ' alone, as Go and PromQL do
            1 | memory:inuse_space:bytes:space:bytes{job="a\'b"}
              |                                            ^^"#]],
    );
    check(
        "memory:inuse_space:bytes:space:bytes{job='a\\\"b'}",
        expect![[r#"
            line 1, column 44: `\"` is not an escape in a string quoted with ': write " alone, as Go and PromQL do
            1 | memory:inuse_space:bytes:space:bytes{job='a\"b'}
              |                                            ^^"#]],
    );
    check(
        "memory:inuse_space:bytes:space:bytes{job=\"a\\\nb\"}",
        expect![[r#"
            line 1, column 44: a line break cannot be inside a string, even after `\`: write `\n` for one
            1 | memory:inuse_space:bytes:space:bytes{job="a\
              |                                            ^"#]],
    );
    let text = "{job=\"a\nb\"}";
    let error = parca_querylang::parse_series_selector(text).expect_err("a line break");
    expect![[r#"
        line 1, column 6: this string is not closed: add a " (a line break cannot be inside one)
        1 | {job="a
          |      ^"#]]
    .assert_eq(&error.render(text));
}
