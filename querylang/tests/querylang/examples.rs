//! Every example of querylang.md, and the other well-formed shapes of the language.

use expect_test::expect;

use crate::check;

#[test]
fn design_document_examples() {
    check(
        r#"process_cpu:samples:count:cpu:nanoseconds:delta{job="api"}"#,
        expect![[r#"
        ProfileSet: process_cpu:samples:count:cpu:nanoseconds:delta{job="api"}
        selector process_cpu:samples:count:cpu:nanoseconds:delta job="api"  ⟨process_cpu:samples:count:cpu:nanosecon…⟩
    "#]],
    );
    check(
        r#"process_cpu:samples:count:cpu:nanoseconds:delta{job="api", instance=~"10\\.0\\..*"}[1h]"#,
        expect![[r#"
        ProfileSet: process_cpu:samples:count:cpu:nanoseconds:delta{job="api", instance=~"10\\.0\\..*"}[1h]
        selector process_cpu:samples:count:cpu:nanoseconds:delta job="api" instance=~"10\\.0\\..*" range=3600s  ⟨process_cpu:samples:count:cpu:nanosecon…⟩
    "#]],
    );
    check(
        r#"merge(memory:inuse_space:bytes:space:bytes{job="api"}[30m])"#,
        expect![[r#"
        Profile: merge(memory:inuse_space:bytes:space:bytes{job="api"}[30m])
        merge None  ⟨merge(memory:inuse_space:bytes:space:by…⟩
          selector memory:inuse_space:bytes:space:bytes job="api" range=1800s  ⟨memory:inuse_space:bytes:space:bytes{jo…⟩
    "#]],
    );
    check(
        r#"merge by (instance) (process_cpu:samples:count:cpu:nanoseconds:delta{job="api"}[5m])"#,
        expect![[r#"
        Profile: merge by (instance) (process_cpu:samples:count:cpu:nanoseconds:delta{job="api"}[5m])
        merge Some(Grouping { without: false, labels: ["instance"] })  ⟨merge by (instance) (process_cpu:sample…⟩
          selector process_cpu:samples:count:cpu:nanoseconds:delta job="api" range=300s  ⟨process_cpu:samples:count:cpu:nanosecon…⟩
    "#]],
    );
    check(
        "diff(merge(process_cpu:samples:count:cpu:nanoseconds:delta{job=\"api\"}[1h] offset 1d),\n     merge(process_cpu:samples:count:cpu:nanoseconds:delta{job=\"api\"}[1h]))",
        expect![[r#"
        Profile: diff(merge(process_cpu:samples:count:cpu:nanoseconds:delta{job="api"}[1h] offset 1d), merge(process_cpu:samples:count:cpu:nanoseconds:delta{job="api"}[1h]))
        diff  ⟨diff(merge(process_cpu:samples:count:cp…⟩
          merge None  ⟨merge(process_cpu:samples:count:cpu:nan…⟩
            offset 86400s  ⟨process_cpu:samples:count:cpu:nanosecon…⟩
              selector process_cpu:samples:count:cpu:nanoseconds:delta job="api" range=3600s  ⟨process_cpu:samples:count:cpu:nanosecon…⟩
          merge None  ⟨merge(process_cpu:samples:count:cpu:nan…⟩
            selector process_cpu:samples:count:cpu:nanoseconds:delta job="api" range=3600s  ⟨process_cpu:samples:count:cpu:nanosecon…⟩
    "#]],
    );
    check(
        "sum by (job) (process_cpu:samples:count:cpu:nanoseconds:delta)",
        expect![[r#"
        SeriesSet: sum by (job) (process_cpu:samples:count:cpu:nanoseconds:delta)
        Sum Some(Grouping { without: false, labels: ["job"] })  ⟨sum by (job) (process_cpu:samples:count…⟩
          selector process_cpu:samples:count:cpu:nanoseconds:delta  ⟨process_cpu:samples:count:cpu:nanosecon…⟩
    "#]],
    );
    check(
        "topk(5, sum by (instance) (memory:inuse_space:bytes:space:bytes))",
        expect![[r#"
        SeriesSet: topk(5, sum by (instance) (memory:inuse_space:bytes:space:bytes))
        topk 5  ⟨topk(5, sum by (instance) (memory:inuse…⟩
          Sum Some(Grouping { without: false, labels: ["instance"] })  ⟨sum by (instance) (memory:inuse_space:b…⟩
            selector memory:inuse_space:bytes:space:bytes  ⟨memory:inuse_space:bytes:space:bytes⟩
    "#]],
    );
    check(
        r#"merge(process_cpu:samples:count:cpu:nanoseconds:delta{job="api"}[1h] |= "runtime.mallocgc" !~ "^net/http\\..*")"#,
        expect![[r#"
        Profile: merge(process_cpu:samples:count:cpu:nanoseconds:delta{job="api"}[1h] |= "runtime.mallocgc" !~ "^net/http\\..*")
        merge None  ⟨merge(process_cpu:samples:count:cpu:nan…⟩
          stack_filter NotMatches "^net/http\\..*"  ⟨process_cpu:samples:count:cpu:nanosecon…⟩
            stack_filter Contains "runtime.mallocgc"  ⟨process_cpu:samples:count:cpu:nanosecon…⟩
              selector process_cpu:samples:count:cpu:nanoseconds:delta job="api" range=3600s  ⟨process_cpu:samples:count:cpu:nanosecon…⟩
    "#]],
    );
    check(
        r#"{__name__=~"memory:.*", instance="localhost:7070"}"#,
        expect![[r#"
        ProfileSet: {__name__=~"memory:.*", instance="localhost:7070"}
        selector __name__=~"memory:.*" instance="localhost:7070"  ⟨{__name__=~"memory:.*", instance="local…⟩
    "#]],
    );
}
