//! Rule files: Prometheus' format of recording and alerting rules (`groups:` of `rules:`), with
//! expressions in the profile query language. Read by `parca check rules` and, through
//! `rule_files:` of parca.yaml, by the server.
//!
//! Checked as promtool checks a rule file, each fault where it is written: the YAML's shape
//! (unknown keys, wrong types), group names (present, not repeated in a file), each rule's kind
//! (exactly one of `record` and `alert`), its fields (`for`, `keep_firing_for` and
//! `annotations` only for alerts), names (a recording rule's name is a metric name; label and
//! annotation names), durations, templates' `{{ … }}` delimiters, and the expression, which must
//! parse, type-check and give numbers (a series set, a profile set read as series of totals, or
//! a number), not a profile.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, SeqAccess, Visitor};

use crate::Error;
use crate::checked::{Checked, FromRaw, map_then, str_then};
use crate::duration;
use crate::error::{invalid_error, syntax_error};
use crate::labels::label_set_opt;

/// A rule file: its groups, in file order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RuleFile {
    /// `groups`.
    pub groups: Vec<RuleGroup>,
}

impl RuleFile {
    /// How many rules the file holds, over all its groups.
    pub fn n_rules(&self) -> usize {
        self.groups.iter().map(|g| g.rules.len()).sum()
    }
}

/// A group of rules, evaluated together at one interval.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleGroup {
    /// `name`: unique within its file.
    pub name: String,
    /// `interval`; `None`: the global evaluation interval.
    pub interval: Option<Duration>,
    /// `limit`: most series a recording rule, or alerts an alerting rule, may give; 0 for no
    /// limit.
    pub limit: usize,
    /// `labels`: added to every rule's result (a rule's own labels win).
    pub labels: BTreeMap<String, String>,
    /// `rules`, in file order.
    pub rules: Vec<Rule>,
}

/// One rule.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// Recording or alerting, with its name.
    pub kind: RuleKind,
    /// `expr`: a query that gives numbers (checked to parse and type-check).
    pub expr: String,
    /// `for`: how long an alert is pending before it fires (alerts only; zero: at once).
    pub for_: Duration,
    /// `keep_firing_for`: how long an alert keeps firing after its condition is gone (alerts
    /// only).
    pub keep_firing_for: Duration,
    /// `labels`: added to the result (templates for alerts).
    pub labels: BTreeMap<String, String>,
    /// `annotations` (alerts only; templates).
    pub annotations: BTreeMap<String, String>,
}

/// What a rule makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleKind {
    /// `record: NAME`: the expression's series, stored under this metric name.
    Record(String),
    /// `alert: NAME`: an alert per series of the expression.
    Alert(String),
}

impl RuleKind {
    /// The rule's name.
    pub fn name(&self) -> &str {
        match self {
            RuleKind::Record(name) | RuleKind::Alert(name) => name,
        }
    }
}

/// Parses a rule file's text. `source_name` (usually the file name) starts every error, which
/// gives the line, the column and the key path, as in
/// `rules.yml:7:15: groups[0].rules[1].expr: line 1, column 5 of the query: …`. An empty text is
/// a file without groups. The first fault of the file is reported.
pub fn parse_rules(yaml: &str, source_name: &str) -> Result<RuleFile, Error> {
    serde_yaml::Deserializer::from_str(yaml)
        .deserialize_ignored_any(IgnoredAny)
        .map_err(|e| syntax_error(&e, source_name))?;
    let mut track = serde_path_to_error::Track::new();
    let de = serde_path_to_error::Deserializer::new(
        serde_yaml::Deserializer::from_str(yaml),
        &mut track,
    );
    match Option::<RawFile>::deserialize(de) {
        Ok(file) => Ok(RuleFile {
            groups: file.map(|f| f.groups.0).unwrap_or_default(),
        }),
        Err(e) => Err(invalid_error(
            serde_path_to_error::Error::new(track.path(), e),
            source_name,
        )),
    }
}

/// Reads and parses a rule file.
pub fn load_rules(path: impl AsRef<std::path::Path>) -> Result<RuleFile, Error> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.to_owned(),
        source,
    })?;
    parse_rules(&text, &path.display().to_string())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    groups: Groups,
}

/// The groups, each name checked against those before it (inside the group's mapping, so that
/// a repeated name is reported where it is).
#[derive(Default)]
struct Groups(Vec<RuleGroup>);

impl<'de> Deserialize<'de> for Groups {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Groups;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of rule groups")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Groups, E> {
                Ok(Groups::default())
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Groups, A::Error> {
                let seen = RefCell::new(BTreeSet::new());
                let mut groups = Vec::new();
                while let Some(group) = seq.next_element_seed(GroupSeed(&seen))? {
                    groups.push(group);
                }
                Ok(Groups(groups))
            }
        }
        d.deserialize_any(V)
    }
}

struct GroupSeed<'a>(&'a RefCell<BTreeSet<String>>);

impl<'de> DeserializeSeed<'de> for GroupSeed<'_> {
    type Value = RuleGroup;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<RuleGroup, D::Error> {
        map_then(
            d,
            "a rule group with `name` and `rules`",
            |raw: RawGroup| {
                let group = RuleGroup::from_raw(raw)?;
                if !self.0.borrow_mut().insert(group.name.clone()) {
                    return Err(format!(
                        "groupname: \"{}\" is repeated in the same file",
                        group.name
                    ));
                }
                Ok(group)
            },
        )
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGroup {
    name: Option<String>,
    #[serde(default, deserialize_with = "duration::deserialize_positive_opt")]
    interval: Option<Duration>,
    limit: Option<usize>,
    #[serde(default, deserialize_with = "label_set_opt")]
    labels: Option<BTreeMap<String, String>>,
    rules: Option<Vec<Checked<Rule>>>,
}

impl RuleGroup {
    fn from_raw(raw: RawGroup) -> Result<RuleGroup, String> {
        let name = raw.name.unwrap_or_default();
        if name.is_empty() {
            return Err("groupname must not be empty".into());
        }
        Ok(RuleGroup {
            name,
            interval: raw.interval,
            limit: raw.limit.unwrap_or(0),
            labels: raw.labels.unwrap_or_default(),
            rules: raw
                .rules
                .unwrap_or_default()
                .into_iter()
                .map(|c| c.0)
                .collect(),
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRule {
    record: Option<String>,
    alert: Option<String>,
    expr: Option<Expression>,
    #[serde(
        default,
        rename = "for",
        deserialize_with = "duration::deserialize_opt"
    )]
    for_: Option<Duration>,
    #[serde(default, deserialize_with = "duration::deserialize_opt")]
    keep_firing_for: Option<Duration>,
    #[serde(default, deserialize_with = "label_set_opt")]
    labels: Option<BTreeMap<String, String>>,
    #[serde(default, deserialize_with = "label_set_opt")]
    annotations: Option<BTreeMap<String, String>>,
}

/// A rule's expression, parsed and checked where it is written.
pub(crate) struct Expression(String);

impl<'de> Deserialize<'de> for Expression {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        str_then(d, "a query", |text| {
            // A rule may read series that rules record (`job:cpu:sum`), as in Prometheus.
            let expr = parca_querylang::parse_rule_query(text).map_err(|e| {
                format!(
                    "line {}, column {} of the query: {}",
                    e.line, e.column, e.message
                )
            })?;
            if expr.value_type() == parca_querylang::ValueType::Profile {
                return Err(
                    "a rule's query must give numbers (an aggregation, `topk`, arithmetic, or a \
                     selector read as totals), not a profile: drop `merge`/`diff`"
                        .into(),
                );
            }
            Ok(Expression(text.to_owned()))
        })
    }
}

impl FromRaw for Rule {
    type Raw = RawRule;
    const EXPECTING: &'static str = "a rule with `record` or `alert`, and `expr`";

    fn from_raw(raw: RawRule) -> Result<Rule, String> {
        let kind = match (raw.record, raw.alert) {
            (Some(_), Some(_)) => {
                return Err("only one of 'record' and 'alert' must be set".into());
            }
            (None, None) => return Err("one of 'record' or 'alert' must be set".into()),
            (Some(name), None) => {
                if !is_metric_name(&name) {
                    return Err(format!("invalid recording rule name: {name}"));
                }
                for (present, field) in [
                    (raw.for_.is_some(), "for"),
                    (raw.keep_firing_for.is_some(), "keep_firing_for"),
                    (raw.annotations.is_some(), "annotations"),
                ] {
                    if present {
                        return Err(format!("invalid field '{field}' in recording rule"));
                    }
                }
                RuleKind::Record(name)
            }
            (None, Some(name)) => {
                if name.is_empty() {
                    return Err("alert name must not be empty".into());
                }
                RuleKind::Alert(name)
            }
        };
        let Some(Expression(expr)) = raw.expr else {
            return Err("field 'expr' must be set in rule".into());
        };
        let labels = raw.labels.unwrap_or_default();
        let annotations = raw.annotations.unwrap_or_default();
        if matches!(kind, RuleKind::Alert(_)) {
            for (what, set) in [("label", &labels), ("annotation", &annotations)] {
                for (name, text) in set {
                    check_template(text).map_err(|why| format!("{what} `{name}`: {why}"))?;
                }
            }
        }
        Ok(Rule {
            kind,
            expr,
            for_: raw.for_.unwrap_or_default(),
            keep_firing_for: raw.keep_firing_for.unwrap_or_default(),
            labels,
            annotations,
        })
    }
}

/// Prometheus' metric name rule, `[a-zA-Z_:][a-zA-Z0-9_:]*`.
fn is_metric_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_' || b == b':')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':')
}

/// The delimiters of a Go template: every action opened by `{{` is closed by a later `}}`
/// (text outside actions may hold `}}`, as Go's templates allow). What is inside an action is
/// left to the evaluation.
fn check_template(text: &str) -> Result<(), String> {
    let mut from = 0;
    while let Some(open) = text[from..].find("{{").map(|i| from + i) {
        match text[open + 2..].find("}}") {
            Some(close) => from = open + 2 + close + 2,
            None => {
                return Err(format!(
                    "template: the action at byte {open} is not closed: add `}}}}`"
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
