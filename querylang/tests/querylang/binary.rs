//! Binary operators as PromQL's: precedence, `bool`, vector matching, stack filters told apart
//! from comparisons, leaf filters, and the errors a person gets.

use expect_test::expect;

use crate::check;

#[test]
fn a_functions_share_of_a_service() {
    check(
        r#"sum by (job) (x:a:b:c:d |= "hot_func") / sum by (job) (x:a:b:c:d)"#,
        expect![[r#"
            SeriesSet: sum by (job) (x:a:b:c:d |= "hot_func") / sum by (job) (x:a:b:c:d)
            binary Div op@39..40 @0..65
              sum by (job) @0..38
                stack_filter Contains "hot_func" @14..37
                  selector x:a:b:c:d @14..23
              sum by (job) @41..65
                selector x:a:b:c:d @55..64
        "#]],
    );
    check(
        r#"sum(x:a:b:c:d |= leaf "json.Marshal") / sum(x:a:b:c:d)"#,
        expect![[r#"
            SeriesSet: sum(x:a:b:c:d |= leaf "json.Marshal") / sum(x:a:b:c:d)
            binary Div op@38..39 @0..54
              sum @0..37
                stack_filter Contains leaf "json.Marshal" @4..36
                  selector x:a:b:c:d @4..13
              sum @40..54
                selector x:a:b:c:d @44..53
        "#]],
    );
}

#[test]
fn precedence_and_folding() {
    check(
        "1 + 2 * 3 - 4 / 5 > bool 0",
        expect![[r#"
        Scalar: 1 + 2 * 3 - 4 / 5 > bool 0
        binary Gtr bool op@18..24 @0..26
          binary Sub op@10..11 @0..17
            binary Add op@2..3 @0..9
              number 1.0 @0..1
              binary Mul op@6..7 @4..9
                number 2.0 @4..5
                number 3.0 @8..9
            binary Div op@14..15 @12..17
              number 4.0 @12..13
              number 5.0 @16..17
          number 0.0 @25..26
    "#]],
    );
    check(
        "x:a:b:c:d - x:a:b:c:d - x:a:b:c:d",
        expect![[r#"
        SeriesSet: x:a:b:c:d - x:a:b:c:d - x:a:b:c:d
        binary Sub op@22..23 @0..33
          binary Sub op@10..11 @0..21
            selector x:a:b:c:d @0..9
            selector x:a:b:c:d @12..21
          selector x:a:b:c:d @24..33
    "#]],
    );
    check(
        "x:a:b:c:d / (x:a:b:c:d + 1)",
        expect![[r#"
        SeriesSet: x:a:b:c:d / (x:a:b:c:d + 1)
        binary Div op@10..11 @0..27
          selector x:a:b:c:d @0..9
          paren @12..27
            binary Add op@23..24 @13..26
              selector x:a:b:c:d @13..22
              number 1.0 @25..26
    "#]],
    );
    check(
        "x:a:b:c:d offset 1h*2",
        expect![[r#"
        SeriesSet: x:a:b:c:d offset 1h * 2
        binary Mul op@19..20 @0..21
          offset 3600s @0..19
            selector x:a:b:c:d @0..9
          number 2.0 @20..21
    "#]],
    );
    check(
        "x:a:b:c:d -1",
        expect![[r#"
        SeriesSet: x:a:b:c:d - 1
        binary Sub op@10..11 @0..12
          selector x:a:b:c:d @0..9
          number 1.0 @11..12
    "#]],
    );
    check(
        "-1.5e-3 * x:a:b:c:d",
        expect![[r#"
        SeriesSet: -0.0015 * x:a:b:c:d
        binary Mul op@8..9 @0..19
          number -0.0015 @0..7
          selector x:a:b:c:d @10..19
    "#]],
    );
}

#[test]
fn a_string_on_the_right_makes_a_stack_filter() {
    check(
        r#"x:a:b:c:d != "f""#,
        expect![[r#"
        ProfileSet: x:a:b:c:d != "f"
        stack_filter NotContains "f" @0..16
          selector x:a:b:c:d @0..9
    "#]],
    );
    check(
        r#"x:a:b:c:d != leaf "f""#,
        expect![[r#"
        ProfileSet: x:a:b:c:d != leaf "f"
        stack_filter NotContains leaf "f" @0..21
          selector x:a:b:c:d @0..9
    "#]],
    );
    check(
        r#"x:a:b:c:d !~ "f.*" != x:a:b:c:d"#,
        expect![[r#"
        SeriesSet: x:a:b:c:d !~ "f.*" != x:a:b:c:d
        binary Neq op@19..21 @0..31
          stack_filter NotMatches "f.*" @0..18
            selector x:a:b:c:d @0..9
          selector x:a:b:c:d @22..31
    "#]],
    );
    check(
        "x:a:b:c:d != x:a:b:c:d",
        expect![[r#"
        SeriesSet: x:a:b:c:d != x:a:b:c:d
        binary Neq op@10..12 @0..22
          selector x:a:b:c:d @0..9
          selector x:a:b:c:d @13..22
    "#]],
    );
    check(
        r#"x:a:b:c:d == "f""#,
        expect![[r#"
            line 1, column 14: `==` compares or computes numbers, not a string: to keep samples with a function whose name contains the string, write `|=`; to drop them, `!=` (`|~` and `!~` for regular expressions)
            1 | x:a:b:c:d == "f"
              |              ^"#]],
    );
}

#[test]
fn a_string_after_an_operator_points_to_the_filters() {
    check(
        "x:a:b:c:d > bool 'f'",
        expect![[r#"
        line 1, column 18: `>` compares or computes numbers, not a string: to keep samples with a function whose name contains the string, write `|=`; to drop them, `!=` (`|~` and `!~` for regular expressions)
        1 | x:a:b:c:d > bool 'f'
          |                  ^"#]],
    );
    check(
        "x:a:b:c:d |= \"f\" - `g`",
        expect![[r#"
        line 1, column 20: `-` compares or computes numbers, not a string: to keep samples with a function whose name contains the string, write `|=`; to drop them, `!=` (`|~` and `!~` for regular expressions)
        1 | x:a:b:c:d |= "f" - `g`
          |                    ^"#]],
    );
}

#[test]
fn vector_matching() {
    check(
        "sum by (job, pod) (x:a:b:c:d) / on (job) group_left sum by (job) (x:a:b:c:d)",
        expect![[r#"
            SeriesSet: sum by (job, pod) (x:a:b:c:d) / on (job) group_left sum by (job) (x:a:b:c:d)
            binary Div on["job"] group_Left[] op@30..51 @0..76
              sum by (job, pod) @0..29
                selector x:a:b:c:d @19..28
              sum by (job) @52..76
                selector x:a:b:c:d @66..75
        "#]],
    );
    check(
        "x:a:b:c:d * ignoring (pod, \"k8s.node\") group_right (team) (x:a:b:c:d)",
        expect![[r#"
            SeriesSet: x:a:b:c:d * ignoring (pod, k8s_node) group_right (team) (x:a:b:c:d)
            binary Mul ignoring["pod", "k8s_node"] group_Right["team"] op@10..57 @0..69
              selector x:a:b:c:d @0..9
              paren @58..69
                selector x:a:b:c:d @59..68
        "#]],
    );
    check(
        "x:a:b:c:d > bool on () x:a:b:c:d",
        expect![[r#"
        SeriesSet: x:a:b:c:d > bool on () x:a:b:c:d
        binary Gtr bool on[] op@10..22 @0..32
          selector x:a:b:c:d @0..9
          selector x:a:b:c:d @23..32
    "#]],
    );
    check(
        "x:a:b:c:d * on (job) group_left (x:a:b:c:d)",
        expect![[r#"
        SeriesSet: x:a:b:c:d * on (job) group_left () (x:a:b:c:d)
        binary Mul on["job"] group_Left[] op@10..31 @0..43
          selector x:a:b:c:d @0..9
          paren @32..43
            selector x:a:b:c:d @33..42
    "#]],
    );
    check(
        "x:a:b:c:d * group_left x:a:b:c:d",
        expect![[r#"
        line 1, column 13: expected an expression such as memory:inuse_space:bytes:space:bytes{job="api"} or merge(…) or `bool`, `on (…)` or `ignoring (…)`, found `group_left`
        1 | x:a:b:c:d * group_left x:a:b:c:d
          |             ^^^^^^^^^^"#]],
    );
}

#[test]
fn binary_errors() {
    check(
        "x:a:b:c:d + bool 1",
        expect![[r#"
        line 1, column 11: `bool` only follows a comparison (==, !=, >, <, >=, <=), not `+`
        1 | x:a:b:c:d + bool 1
          |           ^^^^^^"#]],
    );
    check(
        "1 > 2",
        expect![[r#"
        line 1, column 3: a comparison between two numbers must say `bool`, as in `1 > bool 2`: there are no series to filter
        1 | 1 > 2
          |   ^"#]],
    );
    check(
        "x:a:b:c:d / on (job) 2",
        expect![[r#"
        line 1, column 11: `on` matches series with series; one side of `/` is a number
        1 | x:a:b:c:d / on (job) 2
          |           ^^^^^^^^^^"#]],
    );
    check(
        "x:a:b:c:d / on (job) group_left (job) x:a:b:c:d",
        expect![[r#"
            line 1, column 11: label `job` is in both `on` and the group modifier: a label the series match on is the same on both sides already
            1 | x:a:b:c:d / on (job) group_left (job) x:a:b:c:d
              |           ^^^^^^^^^^^^^^^^^^^^^^^^^^^"#]],
    );
    check(
        "merge(x:a:b:c:d) / 2",
        expect![[r#"
        line 1, column 1: `/` takes series sets or numbers, got a profile
        1 | merge(x:a:b:c:d) / 2
          | ^^^^^^^^^^^^^^^^"#]],
    );
    check(
        "sum(x:a:b:c:d) / diff(x:a:b:c:d, x:a:b:c:d)",
        expect![[r#"
        line 1, column 18: `/` takes series sets or numbers, got a profile
        1 | sum(x:a:b:c:d) / diff(x:a:b:c:d, x:a:b:c:d)
          |                  ^^^^^^^^^^^^^^^^^^^^^^^^^^"#]],
    );
    check(
        "sum(1)",
        expect![[r#"
        line 1, column 5: `sum` takes a profile set or a series set, got a number
        1 | sum(1)
          |     ^"#]],
    );
    check(
        "merge(x:a:b:c:d / 2)",
        expect![[r#"
        line 1, column 7: `merge` takes profiles, got a series set
        1 | merge(x:a:b:c:d / 2)
          |       ^^^^^^^^^^^^^"#]],
    );
    check(
        "(x:a:b:c:d / 2) |= \"f\"",
        expect![[r#"
        line 1, column 1: `|=` takes profiles, got a series set
        1 | (x:a:b:c:d / 2) |= "f"
          | ^^^^^^^^^^^^^^^"#]],
    );
    check(
        "2 offset 5m",
        expect![[r#"
        line 1, column 1: `offset` shifts the time of series and profiles; a number has none
        1 | 2 offset 5m
          | ^^^^^^^^^^^"#]],
    );
    check(
        "x:a:b:c:d * 5m",
        expect![[r#"
        line 1, column 13: `5m` is not a number: write a decimal number such as 0.5, 2 or 1e3 (a duration such as 5m belongs in a range [5m] or after `offset`)
        1 | x:a:b:c:d * 5m
          |             ^^"#]],
    );
    check(
        "x:a:b:c:d * 0x1f",
        expect![[r#"
        line 1, column 13: `0x1f` is not a number: write a decimal number such as 0.5, 2 or 1e3 (a duration such as 5m belongs in a range [5m] or after `offset`)
        1 | x:a:b:c:d * 0x1f
          |             ^^^^"#]],
    );
    check(
        "x:a:b:c:d * 1e999",
        expect![[r#"
        line 1, column 13: `1e999` is too large for a number
        1 | x:a:b:c:d * 1e999
          |             ^^^^^"#]],
    );
    check(
        "x:a:b:c:d +",
        expect![[r#"
        line 1, column 12: expected an expression such as memory:inuse_space:bytes:space:bytes{job="api"} or merge(…) or `bool`, `on (…)` or `ignoring (…)`, found the end of the query
        1 | x:a:b:c:d +
          |            ^"#]],
    );
    check(
        "x:a:b:c:d * on job x:a:b:c:d",
        expect![[r#"
        line 1, column 16: expected `(`, found `job`
        1 | x:a:b:c:d * on job x:a:b:c:d
          |                ^^^"#]],
    );
    check(
        "x:a:b:c:d * on (job, job) x:a:b:c:d",
        expect![[r#"
        line 1, column 22: label `job` is listed twice
        1 | x:a:b:c:d * on (job, job) x:a:b:c:d
          |                      ^^^"#]],
    );
}

#[test]
fn long_chains_count_towards_the_depth_limit() {
    let q = vec!["1"; 200].join(" + ");
    let e = parca_querylang::parse(&q).unwrap_err();
    assert_eq!(
        e.to_string(),
        "line 1, column 3: the query nests deeper than 128 levels"
    );
    let q = vec!["1"; 100].join(" + ");
    assert!(parca_querylang::parse(&q).is_ok());
}
