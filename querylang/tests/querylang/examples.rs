//! Every example of querylang.md, and the other well-formed shapes of the language.

use expect_test::expect;

use crate::check;

#[test]
fn design_document_examples() {
    check(
        r#"process_cpu:samples:count:cpu:nanoseconds:delta{job="api"}"#,
        expect![[r#"
        ProfileSet: process_cpu:samples:count:cpu:nanoseconds:delta{job="api"}
        selector process_cpu:samples:count:cpu:nanoseconds:delta job="api" @0..58
    "#]],
    );
    check(
        r#"process_cpu:samples:count:cpu:nanoseconds:delta{job="api", instance=~"10\\.0\\..*"}[1h]"#,
        expect![[r#"
        ProfileSet: process_cpu:samples:count:cpu:nanoseconds:delta{job="api", instance=~"10\\.0\\..*"}[1h]
        selector process_cpu:samples:count:cpu:nanoseconds:delta job="api" instance=~"10\\.0\\..*" range=3600s @0..87
    "#]],
    );
    check(
        r#"merge(memory:inuse_space:bytes:space:bytes{job="api"}[30m])"#,
        expect![[r#"
        Profile: merge(memory:inuse_space:bytes:space:bytes{job="api"}[30m])
        merge @0..59
          selector memory:inuse_space:bytes:space:bytes job="api" range=1800s @6..58
    "#]],
    );
    check(
        r#"merge by (instance) (process_cpu:samples:count:cpu:nanoseconds:delta{job="api"}[5m])"#,
        expect![[r#"
        Profile: merge by (instance) (process_cpu:samples:count:cpu:nanoseconds:delta{job="api"}[5m])
        merge by (instance) @0..84
          selector process_cpu:samples:count:cpu:nanoseconds:delta job="api" range=300s @21..83
    "#]],
    );
    check(
        "diff(merge(process_cpu:samples:count:cpu:nanoseconds:delta{job=\"api\"}[1h] offset 1d),\n     merge(process_cpu:samples:count:cpu:nanoseconds:delta{job=\"api\"}[1h]))",
        expect![[r#"
        Profile: diff(merge(process_cpu:samples:count:cpu:nanoseconds:delta{job="api"}[1h] offset 1d), merge(process_cpu:samples:count:cpu:nanoseconds:delta{job="api"}[1h]))
        diff @0..161
          merge @5..84
            offset 86400s @11..83
              selector process_cpu:samples:count:cpu:nanoseconds:delta job="api" range=3600s @11..73
          merge @91..160
            selector process_cpu:samples:count:cpu:nanoseconds:delta job="api" range=3600s @97..159
    "#]],
    );
    check(
        "sum by (job) (process_cpu:samples:count:cpu:nanoseconds:delta)",
        expect![[r#"
        SeriesSet: sum by (job) (process_cpu:samples:count:cpu:nanoseconds:delta)
        sum by (job) @0..62
          selector process_cpu:samples:count:cpu:nanoseconds:delta @14..61
    "#]],
    );
    check(
        "topk(5, sum by (instance) (memory:inuse_space:bytes:space:bytes))",
        expect![[r#"
        SeriesSet: topk(5, sum by (instance) (memory:inuse_space:bytes:space:bytes))
        topk 5 @0..65
          sum by (instance) @8..64
            selector memory:inuse_space:bytes:space:bytes @27..63
    "#]],
    );
    check(
        r#"merge(process_cpu:samples:count:cpu:nanoseconds:delta{job="api"}[1h] |= "runtime.mallocgc" !~ "^net/http\\..*")"#,
        expect![[r#"
        Profile: merge(process_cpu:samples:count:cpu:nanoseconds:delta{job="api"}[1h] |= "runtime.mallocgc" !~ "^net/http\\..*")
        merge @0..111
          stack_filter NotMatches "^net/http\\..*" @6..110
            stack_filter Contains "runtime.mallocgc" @6..90
              selector process_cpu:samples:count:cpu:nanoseconds:delta job="api" range=3600s @6..68
    "#]],
    );
    check(
        r#"{__name__=~"memory:.*", instance="localhost:7070"}"#,
        expect![[r#"
        ProfileSet: {__name__=~"memory:.*", instance="localhost:7070"}
        selector __name__=~"memory:.*" instance="localhost:7070" @0..50
    "#]],
    );
}

/// Regression (issue: every stored profile type is queryable as it is listed): py-spy's
/// profiles have no period type, and the units of some writers start with a digit; such types
/// are stored and listed as they are, and their bare names select them.
#[test]
fn types_with_empty_or_numeric_parts_are_selectable() {
    check(
        "bar:samples:count::milliseconds:delta",
        expect![[r#"
            ProfileSet: bar:samples:count::milliseconds:delta
            selector bar:samples:count::milliseconds:delta @0..37
        "#]],
    );
    check(
        r#"merge(a:b:1c:d:e{job="x"})"#,
        expect![[r#"
            Profile: merge(a:b:1c:d:e{job="x"})
            merge @0..26
              selector a:b:1c:d:e job="x" @6..25
        "#]],
    );
}

#[test]
fn selectors() {
    check(
        "memory:inuse_space:bytes:space:bytes",
        expect![[r#"
        ProfileSet: memory:inuse_space:bytes:space:bytes
        selector memory:inuse_space:bytes:space:bytes @0..36
    "#]],
    );
    check(
        "memory:inuse_space:bytes:space:bytes{}",
        expect![[r#"
        ProfileSet: memory:inuse_space:bytes:space:bytes
        selector memory:inuse_space:bytes:space:bytes @0..38
    "#]],
    );
    check(
        r#"memory:inuse_space:bytes:space:bytes{job!="api", pod!~"batch-.*", a=~"x|y",}"#,
        expect![[r#"
        ProfileSet: memory:inuse_space:bytes:space:bytes{job!="api", pod!~"batch-.*", a=~"x|y"}
        selector memory:inuse_space:bytes:space:bytes job!="api" pod!~"batch-.*" a=~"x|y" @0..76
    "#]],
    );
    check(
        "  memory:inuse_space:bytes:space:bytes\n  { job = \"api\" }\n  [ 1h30m ]  ",
        expect![[r#"
        ProfileSet: memory:inuse_space:bytes:space:bytes{job="api"}[1h30m]
        selector memory:inuse_space:bytes:space:bytes job="api" range=5400s @2..68
    "#]],
    );
    check(
        r#"{__name__="memory:inuse_space:bytes:space:bytes"}"#,
        expect![[r#"
        ProfileSet: {__name__="memory:inuse_space:bytes:space:bytes"}
        selector __name__="memory:inuse_space:bytes:space:bytes" @0..49
    "#]],
    );
    check(
        r#"{__name__!=""}"#,
        expect![[r#"
        ProfileSet: {__name__!=""}
        selector __name__!="" @0..14
    "#]],
    );
    check(
        "goroutine:goroutine:count:goroutine:count[2d]",
        expect![[r#"
        ProfileSet: goroutine:goroutine:count:goroutine:count[2d]
        selector goroutine:goroutine:count:goroutine:count range=172800s @0..45
    "#]],
    );
}

#[test]
fn keywords_are_not_reserved_as_label_names() {
    check(
        r#"memory:inuse_space:bytes:space:bytes{by="a", without="b", offset="c", sum="d", instance="e"}"#,
        expect![[r#"
        ProfileSet: memory:inuse_space:bytes:space:bytes{by="a", without="b", offset="c", sum="d", instance="e"}
        selector memory:inuse_space:bytes:space:bytes by="a" without="b" offset="c" sum="d" instance="e" @0..92
    "#]],
    );
    check(
        "sum by (by, offset, instance, merge) (memory:inuse_space:bytes:space:bytes)",
        expect![[r#"
        SeriesSet: sum by (by, offset, instance, merge) (memory:inuse_space:bytes:space:bytes)
        sum by (by, offset, instance, merge) @0..75
          selector memory:inuse_space:bytes:space:bytes @38..74
    "#]],
    );
    check(
        "sum:samples:count:cpu:nanoseconds:delta",
        expect![[r#"
        ProfileSet: sum:samples:count:cpu:nanoseconds:delta
        selector sum:samples:count:cpu:nanoseconds:delta @0..39
    "#]],
    );
}

#[test]
fn strings() {
    check(
        r#"memory:inuse_space:bytes:space:bytes{a='single "quoted"', b=`raw \d+`, c="tab\t\"q\" \u00e9 \x41 \101"}"#,
        expect![[r#"
        ProfileSet: memory:inuse_space:bytes:space:bytes{a="single \"quoted\"", b="raw \\d+", c="tab\t\"q\" é A A"}
        selector memory:inuse_space:bytes:space:bytes a="single \"quoted\"" b="raw \\d+" c="tab\t\"q\" é A A" @0..103
    "#]],
    );
    check(
        "memory:inuse_space:bytes:space:bytes{a=`multi\nline`}",
        expect![[r#"
        ProfileSet: memory:inuse_space:bytes:space:bytes{a="multi\nline"}
        selector memory:inuse_space:bytes:space:bytes a="multi\nline" @0..52
    "#]],
    );
}

#[test]
fn durations() {
    check(
        "memory:inuse_space:bytes:space:bytes[500ms]",
        expect![[r#"
        ProfileSet: memory:inuse_space:bytes:space:bytes[500ms]
        selector memory:inuse_space:bytes:space:bytes range=500ms @0..43
    "#]],
    );
    check(
        "memory:inuse_space:bytes:space:bytes[90m] offset 1y2w",
        expect![[r#"
            ProfileSet: memory:inuse_space:bytes:space:bytes[1h30m] offset 379d
            offset 32745600s @0..53
              selector memory:inuse_space:bytes:space:bytes range=5400s @0..41
        "#]],
    );
    check(
        "memory:inuse_space:bytes:space:bytes offset 0s",
        expect![[r#"
        ProfileSet: memory:inuse_space:bytes:space:bytes offset 0s
        offset 0ns @0..46
          selector memory:inuse_space:bytes:space:bytes @0..36
    "#]],
    );
}

#[test]
fn postfix_operators_fold_left() {
    check(
        r#"memory:inuse_space:bytes:space:bytes offset 1h |= "a" != "b" |~ "c.*" !~ 'd' offset 5m"#,
        expect![[r#"
        ProfileSet: memory:inuse_space:bytes:space:bytes offset 1h |= "a" != "b" |~ "c.*" !~ "d" offset 5m
        offset 300s @0..86
          stack_filter NotMatches "d" @0..76
            stack_filter Matches "c.*" @0..69
              stack_filter NotContains "b" @0..60
                stack_filter Contains "a" @0..53
                  offset 3600s @0..46
                    selector memory:inuse_space:bytes:space:bytes @0..36
    "#]],
    );
    check(
        r#"merge(memory:inuse_space:bytes:space:bytes) |= "main""#,
        expect![[r#"
        Profile: merge(memory:inuse_space:bytes:space:bytes) |= "main"
        stack_filter Contains "main" @0..53
          merge @0..43
            selector memory:inuse_space:bytes:space:bytes @6..42
    "#]],
    );
    check(
        "sum(memory:inuse_space:bytes:space:bytes) offset 1d",
        expect![[r#"
        SeriesSet: sum(memory:inuse_space:bytes:space:bytes) offset 1d
        offset 86400s @0..51
          sum @0..41
            selector memory:inuse_space:bytes:space:bytes @4..40
    "#]],
    );
}

#[test]
fn functions() {
    check(
        "merge without (instance, pod) (memory:inuse_space:bytes:space:bytes)",
        expect![[r#"
        Profile: merge without (instance, pod) (memory:inuse_space:bytes:space:bytes)
        merge without (instance, pod) @0..68
          selector memory:inuse_space:bytes:space:bytes @31..67
    "#]],
    );
    check(
        "merge(memory:inuse_space:bytes:space:bytes) by (job)",
        expect![[r#"
        Profile: merge by (job) (memory:inuse_space:bytes:space:bytes)
        merge by (job) @0..52
          selector memory:inuse_space:bytes:space:bytes @6..42
    "#]],
    );
    check(
        "sum(memory:inuse_space:bytes:space:bytes) without (pod)",
        expect![[r#"
        SeriesSet: sum without (pod) (memory:inuse_space:bytes:space:bytes)
        sum without (pod) @0..55
          selector memory:inuse_space:bytes:space:bytes @4..40
    "#]],
    );
    check(
        "avg by () (memory:inuse_space:bytes:space:bytes)",
        expect![[r#"
        SeriesSet: avg by () (memory:inuse_space:bytes:space:bytes)
        avg by () @0..48
          selector memory:inuse_space:bytes:space:bytes @11..47
    "#]],
    );
    check(
        "min(memory:inuse_space:bytes:space:bytes)",
        expect![[r#"
        SeriesSet: min(memory:inuse_space:bytes:space:bytes)
        min @0..41
          selector memory:inuse_space:bytes:space:bytes @4..40
    "#]],
    );
    check(
        "max by (job,) (memory:inuse_space:bytes:space:bytes)",
        expect![[r#"
        SeriesSet: max by (job) (memory:inuse_space:bytes:space:bytes)
        max by (job) @0..52
          selector memory:inuse_space:bytes:space:bytes @15..51
    "#]],
    );
    check(
        "count(sum by (job) (memory:inuse_space:bytes:space:bytes))",
        expect![[r#"
        SeriesSet: count(sum by (job) (memory:inuse_space:bytes:space:bytes))
        count @0..58
          sum by (job) @6..57
            selector memory:inuse_space:bytes:space:bytes @20..56
    "#]],
    );
    check(
        "topk(3, memory:inuse_space:bytes:space:bytes)",
        expect![[r#"
        SeriesSet: topk(3, memory:inuse_space:bytes:space:bytes)
        topk 3 @0..45
          selector memory:inuse_space:bytes:space:bytes @8..44
    "#]],
    );
    check(
        "diff(memory:inuse_space:bytes:space:bytes offset 1h, memory:inuse_space:bytes:space:bytes)",
        expect![[r#"
        Profile: diff(memory:inuse_space:bytes:space:bytes offset 1h, memory:inuse_space:bytes:space:bytes)
        diff @0..90
          offset 3600s @5..51
            selector memory:inuse_space:bytes:space:bytes @5..41
          selector memory:inuse_space:bytes:space:bytes @53..89
    "#]],
    );
    check(
        "((memory:inuse_space:bytes:space:bytes))",
        expect![[r#"
        ProfileSet: ((memory:inuse_space:bytes:space:bytes))
        paren @0..40
          paren @1..39
            selector memory:inuse_space:bytes:space:bytes @2..38
    "#]],
    );
}

#[test]
fn comments() {
    check(
        "# the heap\nmerge( # of everything\n  memory:inuse_space:bytes:space:bytes # now\n) # done",
        expect![[r#"
        Profile: merge(memory:inuse_space:bytes:space:bytes)
        merge @11..80
          selector memory:inuse_space:bytes:space:bytes @36..72
    "#]],
    );
    check(
        r##"memory:inuse_space:bytes:space:bytes{a="#not a comment"}"##,
        expect![[r##"
        ProfileSet: memory:inuse_space:bytes:space:bytes{a="#not a comment"}
        selector memory:inuse_space:bytes:space:bytes a="#not a comment" @0..56
    "##]],
    );
}

#[test]
fn quoted_names_select_the_stored_sanitized_names() {
    check(
        r#"memory:inuse_space:bytes:space:bytes{"service.version"="1.2", job="api"}"#,
        expect![[r#"
            ProfileSet: memory:inuse_space:bytes:space:bytes{service_version="1.2", job="api"}
            selector memory:inuse_space:bytes:space:bytes service_version="1.2" job="api" @0..72
        "#]],
    );
    check(
        r#"{"shop.api:samples:count:cpu:nanoseconds:delta", "service.name"="shop"}[5m]"#,
        expect![[r#"
            ProfileSet: shop_api:samples:count:cpu:nanoseconds:delta{service_name="shop"}[5m]
            selector shop_api:samples:count:cpu:nanoseconds:delta service_name="shop" range=300s @0..75
        "#]],
    );
    check(
        r#"merge by ("service.version", instance) (memory:inuse_space:bytes:space:bytes[1h])"#,
        expect![[r#"
            Profile: merge by (service_version, instance) (memory:inuse_space:bytes:space:bytes[1h])
            merge by (service_version, instance) @0..81
              selector memory:inuse_space:bytes:space:bytes range=3600s @40..80
        "#]],
    );
}
