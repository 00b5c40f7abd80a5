//! Prometheus relabeling: the rules (`relabel_configs`), their validation, and the engine that
//! applies them to a label set. Follows `model/relabel/relabel.go` of Prometheus.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::LazyLock;

use md5::{Digest, Md5};
use regex::Regex;
use serde::de::{Deserialize, Deserializer};
use serde::{Serialize, Serializer};

use crate::checked::{FromRaw, str_then};
use parca_querylang::is_valid_label_name;

use crate::labels::{LabelName, invalid_label_name};
use crate::{Error, error};

/// What a relabeling rule does. Written in lower case in the file (any case is accepted, as in
/// Prometheus).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Action {
    /// `replace` (the default): if `regex` matches the joined source values, set `target_label`
    /// (expanded) to `replacement` (expanded); an empty result deletes the label.
    #[default]
    Replace,
    /// `keep`: drop the target unless `regex` matches the joined source values.
    Keep,
    /// `drop`: drop the target if `regex` matches the joined source values.
    Drop,
    /// `keepequal`: drop the target unless the joined source values equal `target_label`'s value.
    KeepEqual,
    /// `dropequal`: drop the target if the joined source values equal `target_label`'s value.
    DropEqual,
    /// `hashmod`: set `target_label` to the MD5 of the joined source values modulo `modulus`.
    HashMod,
    /// `labelmap`: for every label whose name `regex` matches, copy its value to the label named
    /// by `replacement` (expanded against the name).
    LabelMap,
    /// `labeldrop`: remove every label whose name `regex` matches.
    LabelDrop,
    /// `labelkeep`: remove every label whose name `regex` does not match.
    LabelKeep,
    /// `lowercase`: set `target_label` to the joined source values in lower case.
    Lowercase,
    /// `uppercase`: set `target_label` to the joined source values in upper case.
    Uppercase,
}

impl Action {
    /// Every action, in Prometheus' order.
    pub const ALL: [Action; 11] = [
        Action::Replace,
        Action::Keep,
        Action::Drop,
        Action::KeepEqual,
        Action::DropEqual,
        Action::HashMod,
        Action::LabelMap,
        Action::LabelDrop,
        Action::LabelKeep,
        Action::Lowercase,
        Action::Uppercase,
    ];

    /// The name written in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Replace => "replace",
            Action::Keep => "keep",
            Action::Drop => "drop",
            Action::KeepEqual => "keepequal",
            Action::DropEqual => "dropequal",
            Action::HashMod => "hashmod",
            Action::LabelMap => "labelmap",
            Action::LabelDrop => "labeldrop",
            Action::LabelKeep => "labelkeep",
            Action::Lowercase => "lowercase",
            Action::Uppercase => "uppercase",
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Action {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        str_then(d, "a relabel action", |text| {
            let lower = text.to_lowercase();
            Action::ALL
                .into_iter()
                .find(|a| a.as_str() == lower)
                .ok_or_else(|| {
                    let names: Vec<&str> = Action::ALL.iter().map(|a| a.as_str()).collect();
                    format!(
                        "unknown relabel action {text:?}, expected one of {}",
                        names.join(", ")
                    )
                })
        })
    }
}

impl Serialize for Action {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// A relabeling regular expression: Go's RE2 syntax, matched against the whole value (it is
/// compiled as `^(?:REGEX)$`, as Prometheus does). Equal when written the same.
#[derive(Clone)]
pub struct Regexp {
    source: String,
    anchored: Regex,
}

impl Regexp {
    /// Compiles `source`, anchored at both ends.
    pub fn new(source: &str) -> Result<Regexp, Error> {
        let fail = |e: regex::Error| Error::Regex {
            regex: source.to_owned(),
            reason: error::regex_reason(&e),
        };
        // Compiled alone first so that a syntax error quotes the user's text, not our anchors.
        Regex::new(source).map_err(fail)?;
        let anchored = Regex::new(&format!("^(?:{source})$")).map_err(fail)?;
        Ok(Regexp {
            source: source.to_owned(),
            anchored,
        })
    }

    /// The expression as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether the expression matches all of `text`.
    pub fn is_match(&self, text: &str) -> bool {
        self.anchored.is_match(text)
    }
}

impl Default for Regexp {
    /// `(.*)`, Prometheus' default.
    fn default() -> Self {
        Regexp::new(DEFAULT_REGEX).expect("the default regex compiles")
    }
}

impl PartialEq for Regexp {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Eq for Regexp {}

impl fmt::Debug for Regexp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Regexp({:?})", self.source)
    }
}

impl<'de> Deserialize<'de> for Regexp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        str_then(d, "a regular expression", |text| {
            Regexp::new(text).map_err(|e| e.to_string())
        })
    }
}

impl Serialize for Regexp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.source)
    }
}

const DEFAULT_SEPARATOR: &str = ";";
const DEFAULT_REGEX: &str = "(.*)";
const DEFAULT_REPLACEMENT: &str = "$1";

/// One relabeling rule (an item of `relabel_configs`), with Prometheus' defaults filled in.
///
/// Build one from the file with [`parse`](crate::parse); one built by hand should pass
/// [`RelabelConfig::validate`]. [`Default`] gives Prometheus' defaults (a `replace` with no
/// target, which does not validate).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RelabelConfig {
    /// `source_labels`: the labels whose values are joined with `separator` and matched against
    /// `regex`. A missing label counts as the empty string. Default: none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub source_labels: Vec<String>,
    /// `separator`: put between the source values. Default `;`.
    pub separator: String,
    /// `regex`: matched against the whole joined value (or, for `labelmap`, `labeldrop` and
    /// `labelkeep`, against each label name). Default `(.*)`.
    pub regex: Regexp,
    /// `modulus`: for `hashmod`. Default 0 (and `hashmod` requires it non-zero).
    #[serde(skip_serializing_if = "is_zero")]
    pub modulus: u64,
    /// `target_label`: the label written by `replace` (may contain `$1`, `${name}`), `hashmod`,
    /// `lowercase` and `uppercase`, or compared by `keepequal` and `dropequal`. Default: none.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub target_label: String,
    /// `replacement`: the value written by `replace`, or the new name for `labelmap`; `$1`,
    /// `${1}`, `$name` and `${name}` are replaced by capture groups (Go's `Regexp.Expand`), `$$`
    /// by `$`. Default `$1`.
    pub replacement: String,
    /// `action`. Default `replace`.
    pub action: Action,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Default for RelabelConfig {
    fn default() -> Self {
        RelabelConfig {
            source_labels: Vec::new(),
            separator: DEFAULT_SEPARATOR.to_owned(),
            regex: Regexp::default(),
            modulus: 0,
            target_label: String::new(),
            replacement: DEFAULT_REPLACEMENT.to_owned(),
            action: Action::Replace,
        }
    }
}

/// A `target_label` (for `replace`) or `replacement` (for `labelmap`) that may hold `$`
/// references: Prometheus' `relabelTarget` expression, with ASCII `\w` as in Go.
static RELABEL_TARGET: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?:(?:[a-zA-Z_]|\$(?:\{[0-9A-Za-z_]+\}|[0-9A-Za-z_]+))+[0-9A-Za-z_]*)+$")
        .expect("the target pattern compiles")
});

impl RelabelConfig {
    /// Checks Prometheus' rules for the action: which fields it needs and which it refuses.
    pub fn validate(&self) -> Result<(), Error> {
        self.check(true)
            .map_err(|message| Error::Relabel { message })
    }

    /// `source_labels_given`: whether the file had the key at all (`labeldrop` and `labelkeep`
    /// refuse it even empty, as Prometheus does).
    fn check(&self, source_labels_given: bool) -> Result<(), String> {
        use Action::*;
        let action = self.action;
        let invalid_target = || {
            format!(
                "invalid `target_label` {:?} for action `{action}`",
                self.target_label
            )
        };
        if let Some(bad) = self.source_labels.iter().find(|n| !is_valid_label_name(n)) {
            return Err(format!("`source_labels`: {}", invalid_label_name(bad)));
        }
        if action == HashMod && self.modulus == 0 {
            return Err("action `hashmod` requires a non-zero `modulus`".to_owned());
        }
        let needs_target = matches!(
            action,
            Replace | HashMod | Lowercase | Uppercase | KeepEqual | DropEqual
        );
        if needs_target && self.target_label.is_empty() {
            return Err(format!("action `{action}` requires `target_label`"));
        }
        if action == Replace {
            let ok = if self.target_label.contains('$') {
                RELABEL_TARGET.is_match(&self.target_label)
            } else {
                is_valid_label_name(&self.target_label)
            };
            if !ok {
                return Err(invalid_target());
            }
        }
        if matches!(
            action,
            HashMod | Lowercase | Uppercase | KeepEqual | DropEqual
        ) && !is_valid_label_name(&self.target_label)
        {
            return Err(invalid_target());
        }
        if matches!(action, Lowercase | Uppercase | KeepEqual | DropEqual)
            && self.replacement != DEFAULT_REPLACEMENT
        {
            return Err(format!("`replacement` cannot be set for action `{action}`"));
        }
        if action == LabelMap && !RELABEL_TARGET.is_match(&self.replacement) {
            return Err(format!(
                "invalid `replacement` {:?} for action `labelmap`: it must be a label name, \
                 possibly with $1 or ${{name}} references",
                self.replacement
            ));
        }
        if matches!(action, KeepEqual | DropEqual)
            && (self.regex.as_str() != DEFAULT_REGEX
                || self.modulus != 0
                || self.separator != DEFAULT_SEPARATOR
                || self.replacement != DEFAULT_REPLACEMENT)
        {
            return Err(format!(
                "action `{action}` takes only `source_labels` and `target_label`"
            ));
        }
        if matches!(action, LabelDrop | LabelKeep)
            && (source_labels_given
                || !self.target_label.is_empty()
                || self.modulus != 0
                || self.separator != DEFAULT_SEPARATOR
                || self.replacement != DEFAULT_REPLACEMENT)
        {
            return Err(format!("action `{action}` takes only `regex`"));
        }
        Ok(())
    }
}

/// `relabel_configs[i]` as written.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRelabelConfig {
    source_labels: Option<Vec<LabelName>>,
    separator: Option<String>,
    #[serde(default, deserialize_with = "regex_field")]
    regex: Option<Regexp>,
    modulus: Option<u64>,
    target_label: Option<String>,
    replacement: Option<String>,
    action: Option<Action>,
}

/// `regex:` given but empty (YAML null) is the empty expression, as in Prometheus; not given at
/// all is the default `(.*)`.
fn regex_field<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Regexp>, D::Error> {
    let given = Option::<Regexp>::deserialize(d)?;
    Ok(Some(given.unwrap_or_else(|| {
        Regexp::new("").expect("the empty regex compiles")
    })))
}

impl FromRaw for RelabelConfig {
    type Raw = RawRelabelConfig;
    const EXPECTING: &'static str = "a relabeling rule";

    fn from_raw(raw: RawRelabelConfig) -> Result<Self, String> {
        let defaults = RelabelConfig::default();
        let source_labels_given = raw.source_labels.is_some();
        let config = RelabelConfig {
            source_labels: raw
                .source_labels
                .unwrap_or_default()
                .into_iter()
                .map(|n| n.0)
                .collect(),
            separator: raw.separator.unwrap_or(defaults.separator),
            regex: raw.regex.unwrap_or(defaults.regex),
            modulus: raw.modulus.unwrap_or(0),
            target_label: raw.target_label.unwrap_or_default(),
            replacement: raw.replacement.unwrap_or(defaults.replacement),
            action: raw.action.unwrap_or_default(),
        };
        config.check(source_labels_given)?;
        Ok(config)
    }
}

/// Applies `configs` in order to a copy of `labels`. `None` means a rule dropped the target.
///
/// As in Prometheus: a missing label reads as `""`, setting a label to `""` removes it, and a
/// `replace` whose expanded `target_label` is not a valid label name does nothing. Labels left
/// with an empty value are removed from the result.
///
/// ```
/// use std::collections::BTreeMap;
/// let config = parca_config::parse(
///     r#"
/// scrape_configs:
///   - job_name: app
///     static_configs: [{ targets: ["app:8080"] }]
///     relabel_configs:
///       - source_labels: [__address__]
///         regex: "(.*):.*"
///         target_label: host
/// "#,
///     "parca.yaml",
/// )
/// .unwrap();
/// let labels = BTreeMap::from([("__address__".to_owned(), "app:8080".to_owned())]);
/// let out = parca_config::relabel(&labels, &config.scrape_configs[0].relabel_configs).unwrap();
/// assert_eq!(out["host"], "app");
/// ```
pub fn relabel(
    labels: &BTreeMap<String, String>,
    configs: &[RelabelConfig],
) -> Option<BTreeMap<String, String>> {
    let mut out = labels.clone();
    relabel_in_place(&mut out, configs).then_some(out)
}

/// Like [`relabel`], but rewrites `labels` itself; returns `false` when the target is dropped
/// (and then `labels` holds whatever the rules before the dropping one made of it).
pub fn relabel_in_place(labels: &mut BTreeMap<String, String>, configs: &[RelabelConfig]) -> bool {
    for config in configs {
        if !apply(config, labels) {
            return false;
        }
    }
    labels.retain(|_, v| !v.is_empty());
    true
}

fn get<'a>(labels: &'a BTreeMap<String, String>, name: &str) -> &'a str {
    labels.get(name).map_or("", String::as_str)
}

/// Sets a label; the empty value removes it (Prometheus' `labels.Builder.Set`).
fn set(labels: &mut BTreeMap<String, String>, name: String, value: String) {
    if value.is_empty() {
        labels.remove(&name);
    } else {
        labels.insert(name, value);
    }
}

/// One rule; `false` drops the target.
fn apply(config: &RelabelConfig, labels: &mut BTreeMap<String, String>) -> bool {
    let value = config
        .source_labels
        .iter()
        .map(|n| get(labels, n))
        .collect::<Vec<_>>()
        .join(&config.separator);
    match config.action {
        Action::Drop => return !config.regex.is_match(&value),
        Action::Keep => return config.regex.is_match(&value),
        Action::DropEqual => return get(labels, &config.target_label) != value,
        Action::KeepEqual => return get(labels, &config.target_label) == value,
        Action::Replace => {
            let re = &config.regex.anchored;
            // No match: no replacement.
            if let Some(caps) = re.captures(&value) {
                let target = expand(&config.target_label, &caps);
                if is_valid_label_name(&target) {
                    let result = expand(&config.replacement, &caps);
                    set(labels, target, result);
                }
            }
        }
        Action::Lowercase => set(labels, config.target_label.clone(), value.to_lowercase()),
        Action::Uppercase => set(labels, config.target_label.clone(), value.to_uppercase()),
        Action::HashMod => {
            if let Some(m) = hash_mod(&value, config.modulus) {
                set(labels, config.target_label.clone(), m.to_string());
            }
        }
        Action::LabelMap => {
            let re = &config.regex.anchored;
            // Prometheus ranges over the labels as they were before the rule.
            let before: Vec<(String, String)> =
                labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            for (name, v) in before {
                if let Some(caps) = re.captures(&name) {
                    let new_name = expand(&config.replacement, &caps);
                    // Prometheus would set an invalid name and fail the scrape later; we skip it.
                    if is_valid_label_name(&new_name) {
                        set(labels, new_name, v);
                    }
                }
            }
        }
        Action::LabelDrop => labels.retain(|name, _| !config.regex.is_match(name)),
        Action::LabelKeep => labels.retain(|name, _| config.regex.is_match(name)),
    }
    true
}

/// Prometheus' `hashmod`: the MD5 of `value`, its last 8 bytes read as a big-endian integer,
/// modulo `modulus` (`None` for a zero modulus, which validation refuses).
pub(crate) fn hash_mod(value: &str, modulus: u64) -> Option<u64> {
    let digest = Md5::digest(value.as_bytes());
    let mut last8 = [0u8; 8];
    last8.copy_from_slice(&digest[8..16]);
    u64::from_be_bytes(last8).checked_rem(modulus)
}

/// Go's `Regexp.ExpandString`: `$name` or `${name}` is replaced by the capture group of that
/// number or name (empty when it did not take part or does not exist); `$$` is a `$`; a `$` not
/// followed by a valid reference is kept as is. In `$name` the name is the longest run of
/// letters, digits and `_`, so `$1x` means `${1x}`.
fn expand(template: &str, caps: &regex::Captures<'_>) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        rest = &rest[i + 1..];
        if let Some(after) = rest.strip_prefix('$') {
            out.push('$');
            rest = after;
            continue;
        }
        let Some((name, after)) = extract_name(rest) else {
            out.push('$');
            continue;
        };
        rest = after;
        let group = match group_number(name) {
            Some(n) => caps.get(n),
            None => caps.name(name),
        };
        if let Some(m) = group {
            out.push_str(m.as_str());
        }
    }
    out.push_str(rest);
    out
}

/// Go's `extract`: the reference after a `$`, and what follows it.
fn extract_name(s: &str) -> Option<(&str, &str)> {
    let (braced, body) = match s.strip_prefix('{') {
        Some(b) => (true, b),
        None => (false, s),
    };
    let len: usize = body
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .map(char::len_utf8)
        .sum();
    if len == 0 {
        return None;
    }
    let name = &body[..len];
    let mut after = &body[len..];
    if braced {
        after = after.strip_prefix('}')?;
    }
    Some((name, after))
}

/// A reference that is a group number: ASCII digits, no leading zero, below 10^8 (Go's rule;
/// anything else is looked up as a name).
fn group_number(name: &str) -> Option<usize> {
    if !name.bytes().all(|b| b.is_ascii_digit()) || (name.len() > 1 && name.starts_with('0')) {
        return None;
    }
    name.parse::<usize>().ok().filter(|&n| n < 100_000_000)
}

#[cfg(test)]
mod tests;
