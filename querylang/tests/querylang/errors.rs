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
}
