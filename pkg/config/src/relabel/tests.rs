//! Tests of relabeling: Prometheus' own cases (`model/relabel/relabel_test.go`), validation,
//! and `hashmod` values checked against an independent MD5.
#![allow(
    clippy::too_many_lines,
    reason = "tests are scenarios read top to bottom; the line budget is for product code"
)]

use std::collections::BTreeMap;

use super::*;

/// The `relabel_configs` of a one-job config.
fn rules(yaml_list: &str) -> Vec<RelabelConfig> {
    let indented: String = yaml_list.lines().map(|l| format!("      {l}\n")).collect();
    let text = format!("scrape_configs:\n  - job_name: t\n    relabel_configs:\n{indented}");
    match crate::parse(&text, "test.yaml") {
        Ok(mut c) => c.scrape_configs.remove(0).relabel_configs,
        Err(e) => panic!("{e}\n{text}"),
    }
}

/// The message for an invalid rule.
fn rule_error(yaml_list: &str) -> String {
    let indented: String = yaml_list.lines().map(|l| format!("      {l}\n")).collect();
    let text = format!("scrape_configs:\n  - job_name: t\n    relabel_configs:\n{indented}");
    match crate::parse(&text, "test.yaml") {
        Ok(_) => panic!("accepted: {yaml_list}"),
        Err(crate::Error::Invalid { message, .. }) => message,
        Err(e) => panic!("{e}"),
    }
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn check(input: &[(&str, &str)], yaml_list: &str, want: Option<&[(&str, &str)]>) {
    let got = relabel(&labels(input), &rules(yaml_list));
    assert_eq!(got, want.map(labels), "rules:\n{yaml_list}");
}

// Prometheus' TestRelabel, case by case, in its order.

#[test]
fn replace_with_braced_references() {
    check(
        &[("a", "foo"), ("b", "bar"), ("c", "baz")],
        "- source_labels: [a]\n  regex: f(.*)\n  target_label: d\n  separator: ';'\n  replacement: ch${1}-ch${1}\n  action: replace",
        Some(&[("a", "foo"), ("b", "bar"), ("c", "baz"), ("d", "choo-choo")]),
    );
}

#[test]
fn replace_chains_and_joins_sources() {
    check(
        &[("a", "foo"), ("b", "bar"), ("c", "baz")],
        "- source_labels: [a, b]\n  regex: f(.*);(.*)r\n  target_label: a\n  replacement: b${1}${2}m\n\
         - source_labels: [c, a]\n  regex: (b).*b(.*)ba(.*)\n  target_label: d\n  replacement: $1$2$2$3",
        Some(&[("a", "boobam"), ("b", "bar"), ("c", "baz"), ("d", "boooom")]),
    );
}

#[test]
fn drop_stops_before_later_rules() {
    check(
        &[("a", "foo")],
        "- source_labels: [a]\n  regex: .*o.*\n  action: drop\n\
         - source_labels: [a]\n  regex: f(.*)\n  target_label: d\n  replacement: ch$1-ch$1",
        None,
    );
    check(
        &[("a", "foo"), ("b", "bar")],
        "- source_labels: [a]\n  regex: .*o.*\n  action: drop",
        None,
    );
}

#[test]
fn replace_with_a_partial_pattern() {
    check(
        &[("a", "abc")],
        "- source_labels: [a]\n  regex: .*(b).*\n  target_label: d\n  replacement: $1",
        Some(&[("a", "abc"), ("d", "b")]),
    );
}

#[test]
fn drop_and_keep_match_the_whole_value() {
    check(
        &[("a", "foo")],
        "- source_labels: [a]\n  regex: no-match\n  action: drop",
        Some(&[("a", "foo")]),
    );
    // Anchored: `f|o` does not match `foo`.
    check(
        &[("a", "foo")],
        "- source_labels: [a]\n  regex: f|o\n  action: drop",
        Some(&[("a", "foo")]),
    );
    check(
        &[("a", "foo")],
        "- source_labels: [a]\n  regex: no-match\n  action: keep",
        None,
    );
    check(
        &[("a", "foo")],
        "- source_labels: [a]\n  regex: f.*\n  action: keep",
        Some(&[("a", "foo")]),
    );
}

#[test]
fn no_match_no_replacement() {
    check(
        &[("a", "boo")],
        "- source_labels: [a]\n  regex: f\n  target_label: b\n  replacement: bar",
        Some(&[("a", "boo")]),
    );
}

#[test]
fn hashmod_matches_prometheus() {
    check(
        &[("a", "foo"), ("b", "bar"), ("c", "baz")],
        "- source_labels: [c]\n  target_label: d\n  action: hashmod\n  modulus: 1000",
        Some(&[("a", "foo"), ("b", "bar"), ("c", "baz"), ("d", "976")]),
    );
    check(
        &[("a", "foo\nbar")],
        "- source_labels: [a]\n  target_label: b\n  action: hashmod\n  modulus: 1000",
        Some(&[("a", "foo\nbar"), ("b", "734")]),
    );
}

#[test]
fn labelmap_copies_matching_names() {
    check(
        &[("a", "foo"), ("b1", "bar"), ("b2", "baz")],
        "- regex: (b.*)\n  replacement: bar_${1}\n  action: labelmap",
        Some(&[
            ("a", "foo"),
            ("b1", "bar"),
            ("b2", "baz"),
            ("bar_b1", "bar"),
            ("bar_b2", "baz"),
        ]),
    );
    check(
        &[
            ("a", "foo"),
            ("__meta_my_bar", "aaa"),
            ("__meta_my_baz", "bbb"),
            ("__meta_other", "ccc"),
        ],
        "- regex: __meta_(my.*)\n  replacement: ${1}\n  action: labelmap",
        Some(&[
            ("a", "foo"),
            ("__meta_my_bar", "aaa"),
            ("__meta_my_baz", "bbb"),
            ("__meta_other", "ccc"),
            ("my_bar", "aaa"),
            ("my_baz", "bbb"),
        ]),
    );
}

#[test]
fn target_label_from_a_capture_group() {
    check(
        &[("a", "some-name-value")],
        "- source_labels: [a]\n  regex: some-([^-]+)-([^,]+)\n  action: replace\n  replacement: ${2}\n  target_label: ${1}",
        Some(&[("a", "some-name-value"), ("name", "value")]),
    );
    // A replacement that expands to nothing deletes (here: does not create) the label.
    check(
        &[("a", "some-name-value")],
        "- source_labels: [a]\n  regex: some-([^-]+)-([^,]+)\n  action: replace\n  replacement: ${3}\n  target_label: ${1}",
        Some(&[("a", "some-name-value")]),
    );
    // A target that expands to an invalid name does nothing.
    check(
        &[("a", "some-name-0")],
        "- source_labels: [a]\n  regex: some-([^-]+)-([^,]+)\n  action: replace\n  replacement: ${1}\n  target_label: ${3}\n\
         - source_labels: [a]\n  regex: some-([^-]+)-([^,]+)\n  action: replace\n  replacement: ${1}\n  target_label: ${3}\n\
         - source_labels: [a]\n  regex: some-([^-]+)(-[^,]+)\n  action: replace\n  replacement: ${1}\n  target_label: ${3}",
        Some(&[("a", "some-name-0")]),
    );
}

#[test]
fn a_real_life_service_discovery_case() {
    check(
        &[("__meta_sd_tags", "path:/secret,job:some-job,label:foo=bar")],
        "- source_labels: [__meta_sd_tags]\n  regex: '(?:.+,|^)path:(/[^,]+).*'\n  action: replace\n  replacement: ${1}\n  target_label: __metrics_path__\n\
         - source_labels: [__meta_sd_tags]\n  regex: '(?:.+,|^)job:([^,]+).*'\n  action: replace\n  replacement: ${1}\n  target_label: job\n\
         - source_labels: [__meta_sd_tags]\n  regex: '(?:.+,|^)label:([^=]+)=([^,]+).*'\n  action: replace\n  replacement: ${2}\n  target_label: ${1}",
        Some(&[
            ("__meta_sd_tags", "path:/secret,job:some-job,label:foo=bar"),
            ("__metrics_path__", "/secret"),
            ("job", "some-job"),
            ("foo", "bar"),
        ]),
    );
}

#[test]
fn prometheus_issue_12283_labeldrop_then_replace_then_keep() {
    check(
        &[
            ("__meta_kubernetes_pod_container_port_name", "foo"),
            ("__meta_kubernetes_pod_annotation_XXX_metrics_port", "9091"),
        ],
        "- regex: ^__meta_kubernetes_pod_container_port_name$\n  action: labeldrop\n\
         - source_labels: [__meta_kubernetes_pod_annotation_XXX_metrics_port]\n  regex: (.+)\n  action: replace\n  replacement: metrics\n  target_label: __meta_kubernetes_pod_container_port_name\n\
         - source_labels: [__meta_kubernetes_pod_container_port_name]\n  regex: ^metrics$\n  action: keep",
        Some(&[
            ("__meta_kubernetes_pod_annotation_XXX_metrics_port", "9091"),
            ("__meta_kubernetes_pod_container_port_name", "metrics"),
        ]),
    );
}

#[test]
fn labelkeep_and_labeldrop() {
    check(
        &[("a", "foo"), ("b1", "bar"), ("b2", "baz")],
        "- regex: (b.*)\n  action: labelkeep",
        Some(&[("b1", "bar"), ("b2", "baz")]),
    );
    check(
        &[("a", "foo"), ("b1", "bar"), ("b2", "baz")],
        "- regex: (b.*)\n  action: labeldrop",
        Some(&[("a", "foo")]),
    );
}

#[test]
fn uppercase_and_lowercase() {
    check(
        &[("foo", "bAr123Foo")],
        "- source_labels: [foo]\n  action: uppercase\n  target_label: foo_uppercase\n\
         - source_labels: [foo]\n  action: lowercase\n  target_label: foo_lowercase",
        Some(&[
            ("foo", "bAr123Foo"),
            ("foo_lowercase", "bar123foo"),
            ("foo_uppercase", "BAR123FOO"),
        ]),
    );
}

#[test]
fn keepequal_and_dropequal() {
    let input = [
        ("__tmp_port", "1234"),
        ("__port1", "1234"),
        ("__port2", "5678"),
    ];
    check(
        &input,
        "- source_labels: [__tmp_port]\n  action: keepequal\n  target_label: __port1",
        Some(&input),
    );
    check(
        &input,
        "- source_labels: [__tmp_port]\n  action: dropequal\n  target_label: __port1",
        None,
    );
    check(
        &input,
        "- source_labels: [__tmp_port]\n  action: dropequal\n  target_label: __port2",
        Some(&input),
    );
    check(
        &input,
        "- source_labels: [__tmp_port]\n  action: keepequal\n  target_label: __port2",
        None,
    );
}

/// The "kubernetes" case of Prometheus' BenchmarkRelabel, a realistic chain of every common
/// action. The expected labels were worked out rule by rule; `hashmod` of `10.132.183.40:80`
/// modulo 3 is 1 (an independent MD5 agrees), so the final `keep` of shard 0 drops the target.
#[test]
fn the_kubernetes_chain_from_prometheus_benchmarks() {
    let input = [
        ("__address__", "10.132.183.40:80"),
        ("__meta_kubernetes_namespace", "loki-boltdb-shipper"),
        ("__meta_kubernetes_pod_container_name", "promtail"),
        ("__meta_kubernetes_pod_container_port_name", "http-metrics"),
        (
            "__meta_kubernetes_pod_label_name",
            "promtail-loki-boltdb-shipper",
        ),
        (
            "__meta_kubernetes_pod_name",
            "promtail-loki-boltdb-shipper-jgtr7",
        ),
        ("__meta_kubernetes_pod_phase", "Running"),
        ("__metrics_path__", "/metrics"),
        ("__scheme__", "http"),
        ("job", "kubernetes-pods"),
    ];
    let chain = r#"- source_labels: [__meta_kubernetes_pod_container_port_name]
  regex: .*-metrics
  action: keep
- source_labels: [__meta_kubernetes_pod_label_name]
  action: drop
  regex: ""
- source_labels: [__meta_kubernetes_pod_phase]
  regex: Succeeded|Failed
  action: drop
- source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_scrape]
  regex: "false"
  action: drop
- source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_scheme]
  target_label: __scheme__
  regex: (https?)
  replacement: $1
  action: replace
- source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_path]
  target_label: __metrics_path__
  regex: (.+)
  replacement: $1
  action: replace
- source_labels: [__address__, __meta_kubernetes_pod_annotation_prometheus_io_port]
  target_label: __address__
  regex: (.+?)(\:\d+)?;(\d+)
  replacement: $1:$3
  action: replace
- regex: __meta_kubernetes_pod_annotation_prometheus_io_param_(.+)
  replacement: __param_$1
  action: labelmap
- regex: __meta_kubernetes_pod_label_prometheus_io_label_(.+)
  action: labelmap
- source_labels: [__meta_kubernetes_namespace, __meta_kubernetes_pod_label_name]
  separator: /
  target_label: job
  replacement: $1
  action: replace
- source_labels: [__meta_kubernetes_namespace]
  target_label: namespace
  action: replace
- source_labels: [__meta_kubernetes_pod_name]
  target_label: pod
- source_labels: [__meta_kubernetes_pod_container_name]
  target_label: container
- source_labels: [__meta_kubernetes_pod_name, __meta_kubernetes_pod_container_name, __meta_kubernetes_pod_container_port_name]
  separator: ':'
  target_label: instance
- target_label: cluster
  replacement: dev-us-central-0
- source_labels: [__meta_kubernetes_namespace]
  regex: hosted-grafana
  action: drop
- source_labels: [__address__]
  target_label: __tmp_hash
  modulus: 3
  action: hashmod"#;
    let mut want: Vec<(&str, &str)> = input.to_vec();
    want.retain(|(k, _)| *k != "job");
    want.extend([
        ("job", "loki-boltdb-shipper/promtail-loki-boltdb-shipper"),
        ("namespace", "loki-boltdb-shipper"),
        ("pod", "promtail-loki-boltdb-shipper-jgtr7"),
        ("container", "promtail"),
        (
            "instance",
            "promtail-loki-boltdb-shipper-jgtr7:promtail:http-metrics",
        ),
        ("cluster", "dev-us-central-0"),
        ("__tmp_hash", "1"),
    ]);
    check(&input, chain, Some(&want));
    let with_shard_filter = format!(
        "{chain}\n- source_labels: [__tmp_hash]\n  regex: ^0$\n  action: keep\n- regex: __tmp_hash\n  action: labeldrop"
    );
    check(&input, &with_shard_filter, None);
}

// Beyond Prometheus' table.

#[test]
fn hashmod_values_agree_with_an_independent_md5() {
    // Computed with Python's hashlib: int.from_bytes(md5(v).digest()[8:], "big") % m.
    for (value, modulus, want) in [
        ("baz", 1000, 976),
        ("foo\nbar", 1000, 734),
        ("10.132.183.40:80", 3, 1),
        ("127.0.0.1:7070", 2, 0),
        ("a:1;b", 7, 4),
        ("", 10, 8),
    ] {
        assert_eq!(
            hash_mod(value, modulus),
            Some(want),
            "{value:?} % {modulus}"
        );
    }
    assert_eq!(hash_mod("x", 0), None);
}

#[test]
fn hashmod_shards_targets_across_servers() {
    // Two servers, each keeping its own shard: every target is scraped by exactly one.
    let shard = |n: u32| {
        rules(&format!(
            "- source_labels: [__address__]\n  modulus: 2\n  target_label: __tmp_hash\n  action: hashmod\n\
             - source_labels: [__tmp_hash]\n  regex: '{n}'\n  action: keep"
        ))
    };
    let (s0, s1) = (shard(0), shard(1));
    for i in 0..50 {
        let l = labels(&[("__address__", &format!("10.0.0.{i}:6060"))]);
        assert_ne!(
            relabel(&l, &s0).is_some(),
            relabel(&l, &s1).is_some(),
            "{i}"
        );
    }
}

#[test]
fn defaults_copy_a_label() {
    let r = rules("- source_labels: [a]\n  target_label: b");
    assert_eq!(r[0].separator, ";");
    assert_eq!(r[0].regex.as_str(), "(.*)");
    assert_eq!(r[0].replacement, "$1");
    assert_eq!(r[0].action, Action::Replace);
    assert_eq!(
        r[0],
        RelabelConfig {
            source_labels: vec!["a".into()],
            target_label: "b".into(),
            ..Default::default()
        }
    );
    check(
        &[("a", "x")],
        "- source_labels: [a]\n  target_label: b",
        Some(&[("a", "x"), ("b", "x")]),
    );
}

#[test]
fn a_static_label_without_sources() {
    check(
        &[("a", "x")],
        "- target_label: env\n  replacement: prod",
        Some(&[("a", "x"), ("env", "prod")]),
    );
}

#[test]
fn replacing_with_nothing_deletes_the_label() {
    check(
        &[("a", "x"), ("b", "y")],
        "- target_label: b\n  replacement: ''",
        Some(&[("a", "x")]),
    );
    // Copying a missing label deletes the target too.
    check(
        &[("b", "y")],
        "- source_labels: [a]\n  target_label: b",
        Some(&[]),
    );
}

#[test]
fn an_explicitly_empty_regex_matches_only_the_empty_value() {
    // `regex:` with no value is Prometheus' empty regex, not the default `(.*)`.
    let r = rules("- source_labels: [a]\n  regex:\n  target_label: b\n  replacement: set");
    assert_eq!(r[0].regex.as_str(), "");
    assert_eq!(
        relabel(&labels(&[("a", "x")]), &r),
        Some(labels(&[("a", "x")]))
    );
    assert_eq!(relabel(&labels(&[]), &r), Some(labels(&[("b", "set")])));
}

#[test]
fn empty_values_are_removed() {
    let out = relabel(&labels(&[("a", ""), ("b", "x")]), &[]);
    assert_eq!(out, Some(labels(&[("b", "x")])));
    // A missing source reads as empty: lowercase then deletes its target.
    check(
        &[("t", "v")],
        "- source_labels: [missing]\n  action: lowercase\n  target_label: t",
        Some(&[]),
    );
}

#[test]
fn labelmap_reads_the_labels_as_they_were() {
    // Prometheus ranges over the labels before the rule: a copied label is not copied again.
    check(
        &[("a_x", "1")],
        "- regex: a_(.*)\n  replacement: a_a_$1\n  action: labelmap",
        Some(&[("a_x", "1"), ("a_a_x", "1")]),
    );
    // A name that expands to an invalid label name is skipped.
    check(
        &[("a1", "v")],
        "- regex: a(.*)\n  action: labelmap",
        Some(&[("a1", "v")]),
    );
}

#[test]
fn relabel_in_place_reports_a_drop() {
    let r = rules("- source_labels: [a]\n  regex: x\n  action: drop");
    let mut l = labels(&[("a", "x")]);
    assert!(!relabel_in_place(&mut l, &r));
    let mut l = labels(&[("a", "y")]);
    assert!(relabel_in_place(&mut l, &r));
}

#[test]
fn action_names_are_case_insensitive() {
    assert_eq!(
        rules("- action: LabelDrop\n  regex: x")[0].action,
        Action::LabelDrop
    );
}

#[test]
fn go_expand_semantics() {
    let re = Regex::new(r"^(?:(?P<word>[a-z]+)-(\d+))$").unwrap();
    let caps = re.captures("abc-42").unwrap();
    for (template, want) in [
        ("$1", "abc"),
        ("${1}", "abc"),
        ("$2", "42"),
        ("$word", "abc"),
        ("${word}x", "abcx"),
        // `$1x` is the group named `1x`, which does not exist.
        ("$1x", ""),
        ("${1}x", "abcx"),
        ("$$1", "$1"),
        ("$", "$"),
        ("a$-b", "a$-b"),
        ("${1", "${1"),
        ("${}", "${}"),
        ("$9", ""),
        ("$nope", ""),
        // Leading zeros make a name, not a number (Go).
        ("$01", ""),
        ("$0", "abc-42"),
        ("pre-${2}-post", "pre-42-post"),
    ] {
        assert_eq!(expand(template, &caps), want, "{template}");
    }
}

#[test]
fn target_label_validity() {
    // Prometheus' TestTargetLabelValidity.
    for (text, valid) in [
        ("-label", false),
        ("label", true),
        ("label${1}", true),
        ("${1}label", true),
        ("${1}", true),
        ("${", false),
        ("$", false),
        ("${}", false),
        ("foo${", false),
        ("$1", true),
        ("asd$2asd", true),
        ("-foo${1}bar-", false),
        ("_${1}_", true),
        ("foo${bar}foo", true),
    ] {
        assert_eq!(RELABEL_TARGET.is_match(text), valid, "{text}");
    }
}

/// Prometheus' TestRelabelValidate and the rest of its `Validate`, with our messages.
#[test]
fn validation_messages() {
    let cases = [
        (
            "- action: replace",
            "action `replace` requires `target_label`",
        ),
        (
            "- action: lowercase",
            "action `lowercase` requires `target_label`",
        ),
        (
            "- action: uppercase\n  target_label: ${3}",
            "invalid `target_label` \"${3}\" for action `uppercase`",
        ),
        (
            "- action: hashmod\n  target_label: x",
            "action `hashmod` requires a non-zero `modulus`",
        ),
        (
            "- action: hashmod\n  modulus: 2",
            "action `hashmod` requires `target_label`",
        ),
        (
            "- action: hashmod\n  modulus: 2\n  target_label: 'a-b'",
            "invalid `target_label` \"a-b\" for action `hashmod`",
        ),
        (
            "- source_labels: [a]\n  regex: some-([^-]+)-([^,]+)\n  replacement: ${1}\n  target_label: 0${3}",
            "invalid `target_label` \"0${3}\" for action `replace`",
        ),
        (
            "- source_labels: [a]\n  regex: some-([^-]+)-([^,]+)\n  replacement: ${1}\n  target_label: -${3}",
            "invalid `target_label` \"-${3}\" for action `replace`",
        ),
        (
            "- target_label: a.b",
            "invalid `target_label` \"a.b\" for action `replace`",
        ),
        (
            "- action: lowercase\n  target_label: x\n  replacement: y",
            "`replacement` cannot be set for action `lowercase`",
        ),
        (
            "- action: keepequal\n  target_label: x\n  regex: a",
            "action `keepequal` takes only `source_labels` and `target_label`",
        ),
        (
            "- action: dropequal\n  target_label: x\n  separator: ','",
            "action `dropequal` takes only `source_labels` and `target_label`",
        ),
        (
            "- action: labeldrop\n  regex: a\n  source_labels: [b]",
            "action `labeldrop` takes only `regex`",
        ),
        (
            "- action: labelkeep\n  regex: a\n  source_labels: []",
            "action `labelkeep` takes only `regex`",
        ),
        (
            "- action: labelkeep\n  regex: a\n  target_label: b",
            "action `labelkeep` takes only `regex`",
        ),
        (
            "- action: labelmap\n  regex: (.*)\n  replacement: '-$1'",
            "invalid `replacement` \"-$1\" for action `labelmap`: it must be a label name, possibly with $1 or ${name} references",
        ),
    ];
    for (yaml, want) in cases {
        assert_eq!(rule_error(yaml), want, "{yaml}");
    }
    // Valid per Prometheus: a target with a reference, explicit defaults for keepequal.
    rules(
        "- source_labels: [a]\n  regex: some-([^-]+)-([^,]+)\n  replacement: ${1}\n  target_label: ${3}",
    );
    rules("- action: keepequal\n  source_labels: [a]\n  target_label: b\n  separator: ';'");
    rules("- action: labeldrop\n  regex: x\n  replacement: $1");
}

#[test]
fn validate_by_hand() {
    let bad = RelabelConfig {
        action: Action::HashMod,
        target_label: "x".into(),
        ..Default::default()
    };
    assert_eq!(
        bad.validate().unwrap_err().to_string(),
        "action `hashmod` requires a non-zero `modulus`"
    );
    // Applied anyway, a zero modulus does nothing rather than panic.
    assert_eq!(
        relabel(&labels(&[("a", "1")]), &[bad]),
        Some(labels(&[("a", "1")]))
    );
    let good = RelabelConfig {
        target_label: "x".into(),
        ..Default::default()
    };
    assert!(good.validate().is_ok());
    assert!(Regexp::new("(").is_err());
    assert_eq!(Regexp::new("a|b").unwrap().as_str(), "a|b");
    assert!(!Regexp::new("a|b").unwrap().is_match("ab"));
}
