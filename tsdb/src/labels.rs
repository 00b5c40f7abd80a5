//! Series labels and label matchers, Prometheus' model.

use std::fmt;

use regex::Regex;

use crate::Error;

/// The label holding a series' profile type, e.g. `process_cpu:samples:count:cpu:nanoseconds:delta`.
pub const NAME_LABEL: &str = "__name__";

/// One label of a series.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Label {
    /// Label name, e.g. `job`.
    pub name: String,
    /// Label value, e.g. `api`.
    pub value: String,
}

/// The labels of a series: sorted by name, names unique and valid, values non-empty (a label
/// with an empty value is the same as no label, as in Prometheus).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Labels(Vec<Label>);

impl Labels {
    /// Builds a label set from pairs, in any order. Refuses empty or invalid names and repeated
    /// names; drops pairs with empty values.
    pub fn new<N: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (N, V)>,
    ) -> Result<Self, Error> {
        let mut labels: Vec<Label> = pairs
            .into_iter()
            .map(|(n, v)| Label {
                name: n.into(),
                value: v.into(),
            })
            .filter(|l| !l.value.is_empty())
            .collect();
        for l in &labels {
            if !parca_vocab::is_valid_label_name(&l.name) {
                return Err(Error::InvalidLabelName {
                    name: l.name.clone(),
                });
            }
        }
        labels.sort_unstable();
        if let Some(w) = labels.windows(2).find(|w| w[0].name == w[1].name) {
            return Err(Error::DuplicateLabel {
                name: w[0].name.clone(),
            });
        }
        Ok(Labels(labels))
    }

    /// The value of label `name`, if the series has it.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .binary_search_by(|l| l.name.as_str().cmp(name))
            .ok()
            .map(|i| self.0[i].value.as_str())
    }

    /// The labels, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = &Label> {
        self.0.iter()
    }

    /// Number of labels.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for Labels {
    /// Prometheus' notation: `{job="api", instance="a:1"}`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (i, l) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{}={:?}", l.name, l.value)?;
        }
        f.write_str("}")
    }
}

pub use parca_vocab::MatchOp;

/// Selects series by one label: `name op "value"`. As in Prometheus, a series without the label
/// is treated as having it with the empty value, so `{env=""}` selects series without `env`.
#[derive(Debug, Clone)]
pub struct Matcher {
    /// The label name.
    pub name: String,
    /// The comparison.
    pub op: MatchOp,
    /// The value or pattern as written.
    pub value: String,
    re: Option<Regex>,
}

impl Matcher {
    /// Builds a matcher; a regex is anchored at both ends and must compile.
    pub fn new(
        op: MatchOp,
        name: impl Into<String>,
        value: impl Into<String>,
    ) -> Result<Self, Error> {
        let (name, value) = (name.into(), value.into());
        let re = match op {
            MatchOp::Re | MatchOp::NotRe => {
                Some(Regex::new(&format!("^(?:{value})$")).map_err(|source| {
                    Error::InvalidRegex {
                        matcher: format!("{name}{op}{value:?}"),
                        source: Box::new(source),
                    }
                })?)
            }
            _ => None,
        };
        Ok(Matcher {
            name,
            op,
            value,
            re,
        })
    }

    /// Whether a label value (`""` for a missing label) satisfies the matcher.
    pub fn matches(&self, value: &str) -> bool {
        match self.op {
            MatchOp::Equal => value == self.value,
            MatchOp::NotEqual => value != self.value,
            MatchOp::Re => self.re.as_ref().is_some_and(|re| re.is_match(value)),
            MatchOp::NotRe => !self.re.as_ref().is_some_and(|re| re.is_match(value)),
        }
    }

    /// Whether a series with these labels is selected.
    pub fn matches_labels(&self, labels: &Labels) -> bool {
        self.matches(labels.get(&self.name).unwrap_or(""))
    }
}

impl fmt::Display for Matcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}{:?}", self.name, self.op, self.value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_sort_and_refuse_bad_names() {
        let l = Labels::new([("job", "api"), ("instance", "a:1"), ("empty", "")]).expect("valid");
        assert_eq!(l.to_string(), r#"{instance="a:1", job="api"}"#);
        assert_eq!(l.get("job"), Some("api"));
        assert_eq!(l.get("empty"), None);
        assert_eq!(
            Labels::new([("", "x")])
                .expect_err("empty name")
                .to_string(),
            "label name `` is invalid: use letters, digits and `_`, not starting with a digit"
        );
        assert_eq!(
            Labels::new([("a", "1"), ("a", "2")])
                .expect_err("twice")
                .to_string(),
            "label `a` is given twice"
        );
    }

    #[test]
    fn regex_matchers_are_anchored_and_empty_means_missing() {
        let m = Matcher::new(MatchOp::Re, "instance", r"10\.0\..*").expect("valid");
        assert!(m.matches("10.0.1.2:80"));
        assert!(!m.matches("x10.0.1.2"));
        let missing = Matcher::new(MatchOp::Equal, "env", "").expect("valid");
        assert!(missing.matches_labels(&Labels::new([("job", "a")]).expect("valid")));
        let err = Matcher::new(MatchOp::Re, "job", "(").expect_err("bad regex");
        assert_eq!(err.to_string(), r#"invalid regex in matcher `job=~"("`"#);
    }
}
