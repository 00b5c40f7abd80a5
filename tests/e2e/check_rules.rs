//! `parca check rules` against `promtool check rules` (Debian's prometheus package) on rule
//! files whose expressions are plain PromQL as well as profile queries (`sum(a:b:c:d:e)` is
//! both): the two must agree on every structural fault (YAML shape, names, fields, durations,
//! templates, label names), and ours names the file, line and column.
//!
//! Without promtool the test says so and checks only our side.

use std::process::Command;

use crate::server_harness::{parca_binary, skip};

/// (what, file text, whether it is valid).
const CASES: &[(&str, &str, bool)] = &[
    (
        "a recording and an alerting rule",
        "groups:\n  - name: cpu\n    interval: 30s\n    rules:\n      - record: job:cpu:sum\n        expr: sum by (job) (a:b:c:d:e)\n      - alert: CpuHigh\n        expr: sum by (job) (a:b:c:d:e) > 100\n        for: 5m\n        keep_firing_for: 1m\n        labels: {severity: page}\n        annotations: {summary: \"{{ $labels.job }} uses {{ $value }}\"}\n",
        true,
    ),
    (
        "rules reading what rules record, and ALERTS",
        "groups:\n  - name: cpu\n    rules:\n      - record: job:cpu:sum\n        expr: sum by (job) (a:b:c:d:e)\n      - alert: CpuHigh\n        expr: job:cpu:sum > 100\n      - record: job:cpu:firing\n        expr: count by (job) (ALERTS{alertstate=\"firing\"})\n",
        true,
    ),
    ("an empty file", "", true),
    (
        "an unknown key",
        "groups:\n  - name: a\n    rules:\n      - record: x\n        expr: sum(a:b:c:d:e)\n        exprr: y\n",
        false,
    ),
    (
        "a repeated group name",
        "groups:\n  - name: a\n    rules: []\n  - name: a\n    rules: []\n",
        false,
    ),
    ("no group name", "groups:\n  - rules: []\n", false),
    (
        "a bad `for`",
        "groups:\n  - name: a\n    rules:\n      - alert: x\n        expr: sum(a:b:c:d:e)\n        for: 5x\n",
        false,
    ),
    (
        "record and alert",
        "groups:\n  - name: a\n    rules:\n      - record: x\n        alert: y\n        expr: sum(a:b:c:d:e)\n",
        false,
    ),
    (
        "no expr",
        "groups:\n  - name: a\n    rules:\n      - record: x\n",
        false,
    ),
    (
        "`for` in a recording rule",
        "groups:\n  - name: a\n    rules:\n      - record: x\n        expr: sum(a:b:c:d:e)\n        for: 1m\n",
        false,
    ),
    (
        "a bad recording rule name",
        "groups:\n  - name: a\n    rules:\n      - record: 1x\n        expr: sum(a:b:c:d:e)\n",
        false,
    ),
    (
        "a bad label name",
        "groups:\n  - name: a\n    rules:\n      - alert: x\n        expr: sum(a:b:c:d:e)\n        labels: {1a: b}\n",
        false,
    ),
    (
        "an unclosed template",
        "groups:\n  - name: a\n    rules:\n      - alert: x\n        expr: sum(a:b:c:d:e)\n        annotations: {summary: \"{{ $value \"}\n",
        false,
    ),
    (
        "a query that does not parse",
        "groups:\n  - name: a\n    rules:\n      - record: x\n        expr: sum(a:b:c:d:e) /\n",
        false,
    ),
    ("not a mapping", "- a\n", false),
];

#[test]
fn parca_check_rules_agrees_with_promtool() {
    let binary = parca_binary(false);
    let promtool = Command::new("promtool").arg("--version").output().is_ok();
    if !promtool {
        skip("promtool (Debian's prometheus package)", "not installed");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    for (i, &(what, text, valid)) in CASES.iter().enumerate() {
        let path = dir.path().join(format!("{i}.yml"));
        std::fs::write(&path, text).expect("write");
        let ours = Command::new(&binary)
            .args(["check", "rules"])
            .arg(&path)
            .output()
            .expect("run parca check rules");
        let stdout = String::from_utf8_lossy(&ours.stdout);
        assert_eq!(ours.status.success(), valid, "{what}: {stdout}");
        if valid {
            assert!(stdout.contains("SUCCESS"), "{what}: {stdout}");
        } else {
            let located = format!("{}:", path.display());
            assert!(
                stdout.lines().any(|l| l.starts_with(&located)
                    && l[located.len()..]
                        .split(':')
                        .take(2)
                        .all(|n| n.parse::<u32>().is_ok())),
                "{what}: no file:line:column in {stdout}"
            );
        }
        if promtool {
            let theirs = Command::new("promtool")
                .args(["check", "rules"])
                .arg(&path)
                .output()
                .expect("run promtool");
            assert_eq!(
                theirs.status.success(),
                valid,
                "{what}: promtool disagrees: {}{}",
                String::from_utf8_lossy(&theirs.stdout),
                String::from_utf8_lossy(&theirs.stderr)
            );
        }
    }
    // Several files: each is reported, and the exit says how many failed.
    let all: Vec<_> = (0..CASES.len())
        .map(|i| dir.path().join(format!("{i}.yml")))
        .collect();
    let out = Command::new(&binary)
        .args(["check", "rules"])
        .args(&all)
        .output()
        .expect("run");
    assert!(!out.status.success());
    let n_bad = CASES.iter().filter(|c| !c.2).count();
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!(
            "{n_bad} of {} rule files have faults",
            CASES.len()
        )),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
