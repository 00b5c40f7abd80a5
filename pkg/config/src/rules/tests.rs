//! Rule files: what is read, and each fault with its place, in promtool's words where it has
//! them.

use std::time::Duration;

use super::*;

fn fault(yaml: &str) -> String {
    parse_rules(yaml, "rules.yml").unwrap_err().to_string()
}

const CPU: &str = "process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta";

#[test]
fn recording_and_alerting_rules_are_read() {
    let yaml = format!(
        r#"
groups:
  - name: json
    interval: 30s
    limit: 10
    labels: {{ team: core }}
    rules:
      - record: job:json_marshal_self:share
        expr: sum by (job) ({CPU} |= leaf "encoding/json.Marshal") / sum by (job) ({CPU})
        labels: {{ source: parca }}
      - alert: JsonMarshalHot
        expr: job:json_marshal_self:share > 0.1
        for: 5m
        keep_firing_for: 1m
        annotations:
          summary: "{{{{ $labels.job }}}} spends {{{{ $value | humanizePercentage }}}} in json.Marshal"
"#
    );
    // `job:json_marshal_self:share` is a metric name, not a profile type: as a query it is an
    // error, so the alert here reads the recorded series through its own expression instead.
    let yaml = yaml.replace(
        "expr: job:json_marshal_self:share > 0.1",
        &format!(r#"expr: sum by (job) ({CPU} |= leaf "encoding/json.Marshal") / sum by (job) ({CPU}) > 0.1"#),
    );
    let file = parse_rules(&yaml, "rules.yml").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(file.n_rules(), 2);
    let group = &file.groups[0];
    assert_eq!(group.name, "json");
    assert_eq!(group.interval, Some(Duration::from_secs(30)));
    assert_eq!(group.limit, 10);
    assert_eq!(group.labels["team"], "core");
    assert_eq!(
        group.rules[0].kind,
        RuleKind::Record("job:json_marshal_self:share".into())
    );
    assert_eq!(group.rules[1].kind.name(), "JsonMarshalHot");
    assert_eq!(group.rules[1].for_, Duration::from_secs(300));
    assert_eq!(group.rules[1].keep_firing_for, Duration::from_secs(60));
    assert!(group.rules[1].annotations["summary"].contains("$labels.job"));
    assert_eq!(parse_rules("", "rules.yml").unwrap(), RuleFile::default());
    assert_eq!(
        parse_rules("groups: []", "rules.yml").unwrap(),
        RuleFile::default()
    );
}

#[test]
fn faults_name_file_line_column_and_key() {
    assert_eq!(
        fault(
            "groups:\n  - name: a\n    rules:\n      - record: x\n        expr: sum(a:b:c:d:e)\n        exprr: 1\n"
        ),
        "rules.yml:6:9: groups[0].rules[0]: unknown field `exprr`, expected one of `record`, `alert`, `expr`, `for`, `keep_firing_for`, `labels`, `annotations`"
    );
    assert_eq!(
        fault("groups:\n  - name: a\n    rules: []\n  - name: a\n    rules: []\n"),
        "rules.yml:4:5: groups[1]: groupname: \"a\" is repeated in the same file"
    );
    assert_eq!(
        fault("groups:\n  - rules: []\n"),
        "rules.yml:2:5: groups[0]: groupname must not be empty"
    );
    assert_eq!(
        fault("groups:\n  - name: a\n    rules:\n      - expr: sum(a:b:c:d:e)\n"),
        "rules.yml:4:9: groups[0].rules[0]: one of 'record' or 'alert' must be set"
    );
    assert_eq!(
        fault(
            "groups:\n  - name: a\n    rules:\n      - record: x\n        alert: y\n        expr: sum(a:b:c:d:e)\n"
        ),
        "rules.yml:4:9: groups[0].rules[0]: only one of 'record' and 'alert' must be set"
    );
    assert_eq!(
        fault("groups:\n  - name: a\n    rules:\n      - record: x\n"),
        "rules.yml:4:9: groups[0].rules[0]: field 'expr' must be set in rule"
    );
    assert_eq!(
        fault(
            "groups:\n  - name: a\n    rules:\n      - record: x\n        expr: sum(a:b:c:d:e)\n        for: 5m\n"
        ),
        "rules.yml:4:9: groups[0].rules[0]: invalid field 'for' in recording rule"
    );
    assert_eq!(
        fault(
            "groups:\n  - name: a\n    rules:\n      - record: 1x\n        expr: sum(a:b:c:d:e)\n"
        ),
        "rules.yml:4:9: groups[0].rules[0]: invalid recording rule name: 1x"
    );
    assert_eq!(
        fault(
            "groups:\n  - name: a\n    rules:\n      - alert: x\n        expr: sum(a:b:c:d:e)\n        for: 5x\n"
        ),
        "rules.yml:6:14: groups[0].rules[0].for: invalid duration \"5x\": unknown duration unit `x`: use ms, s, m, h, d, w or y"
    );
    assert_eq!(
        fault(
            "groups:\n  - name: a\n    rules:\n      - alert: x\n        expr: sum(a:b:c:d:e)\n        labels: { 1a: b }\n"
        ),
        "rules.yml:6:19: groups[0].rules[0].labels: invalid label name \"1a\": use letters, digits and `_`, not starting with a digit"
    );
    assert_eq!(
        fault(
            "groups:\n  - name: a\n    rules:\n      - alert: x\n        expr: sum(a:b:c:d:e)\n        annotations: { summary: \"{{ $value \" }\n"
        ),
        "rules.yml:4:9: groups[0].rules[0]: annotation `summary`: template: the action at byte 0 is not closed: add `}}`"
    );
}

#[test]
fn expressions_are_checked_where_they_are_written() {
    assert_eq!(
        fault(
            "groups:\n  - name: a\n    rules:\n      - record: x\n        expr: sum(a:b:c:d:e) /\n"
        ),
        "rules.yml:5:15: groups[0].rules[0].expr: line 1, column 17 of the query: expected an expression such as memory:inuse_space:bytes:space:bytes{job=\"api\"} or merge(…) or `bool`, `on (…)` or `ignoring (…)`, found the end of the query"
    );
    assert_eq!(
        fault(
            "groups:\n  - name: a\n    rules:\n      - record: x\n        expr: merge(a:b:c:d:e)\n"
        ),
        "rules.yml:5:15: groups[0].rules[0].expr: a rule's query must give numbers (an aggregation, `topk`, arithmetic, or a selector read as totals), not a profile: drop `merge`/`diff`"
    );
}

#[test]
fn rule_files_of_parca_yaml_are_read_with_the_configuration() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("rules")).expect("mkdir");
    let good =
        "groups:\n  - name: a\n    rules:\n      - record: x\n        expr: sum(a:b:c:d:e)\n";
    std::fs::write(dir.path().join("rules/a.yml"), good).expect("write");
    std::fs::write(dir.path().join("rules/b.yml"), "groups: []\n").expect("write");
    let config_path = dir.path().join("parca.yaml");
    std::fs::write(
        &config_path,
        "rule_files:\n  - rules/*.yml\n  - rules/a.yml\n",
    )
    .expect("write");
    let config = crate::load(&config_path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config.rule_files, ["rules/*.yml", "rules/a.yml"]);
    let paths: Vec<_> = config.rules.iter().map(|(p, _)| p.clone()).collect();
    assert_eq!(
        paths,
        [
            dir.path().join("rules/a.yml"),
            dir.path().join("rules/b.yml")
        ]
    );
    assert_eq!(config.rules[0].1.n_rules(), 1);
    assert!(config.to_yaml().contains("rule_files:"));

    // A bad rule file fails the load (so a reload keeps the old rules), naming its place.
    std::fs::write(
        dir.path().join("rules/b.yml"),
        "groups:\n  - name: a\n    rules: [{}]\n",
    )
    .expect("write");
    let err = crate::load(&config_path).unwrap_err().to_string();
    assert_eq!(
        err,
        format!(
            "{}:3:13: groups[0].rules[0]: one of 'record' or 'alert' must be set",
            dir.path().join("rules/b.yml").display()
        )
    );
    assert_eq!(
        crate::parse("rule_files: [\"a[\"]\n", "parca.yaml")
            .unwrap_err()
            .to_string(),
        "parca.yaml:1:14: rule_files[0]: invalid glob \"a[\": Pattern syntax error near position 1: invalid range pattern"
    );
}
