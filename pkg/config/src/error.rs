//! The one error type of the crate, and the translation of YAML decoding errors into it.

use std::fmt;
use std::path::PathBuf;

/// Why a configuration could not be loaded.
///
/// Every message about the file names the source, the line and column, and the key path, as in
/// `parca.yaml:12:5: scrape_configs[0].scrape_interval: invalid duration "10x": expected a number
/// and a unit such as 10s or 1m`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration file could not be read.
    #[error("cannot read config file `{}`", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The text is not YAML (bad syntax, or more than one document).
    #[error("{}invalid YAML: {message}", Prefix(source_name, location, ""))]
    Syntax {
        /// The name given to [`parse`](crate::parse), usually the file name.
        source_name: String,
        /// Where the parser stopped, when known.
        location: Option<Location>,
        /// The parser's message.
        message: String,
    },
    /// The YAML is well formed but is not a valid configuration: an unknown key, a value of the
    /// wrong type, or a value that breaks a rule.
    #[error("{}{message}", Prefix(source_name, location, path))]
    Invalid {
        /// The name given to [`parse`](crate::parse), usually the file name.
        source_name: String,
        /// Where the offending key or value starts, when known.
        location: Option<Location>,
        /// The key path, e.g. `scrape_configs[0].scrape_interval` (empty for the top level).
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A duration is not in Prometheus' form.
    #[error("invalid duration {input:?}: {reason}")]
    Duration {
        /// The text given.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A relabeling regular expression does not compile.
    #[error("invalid regex {regex:?}: {reason}")]
    Regex {
        /// The expression as written.
        regex: String,
        /// The compiler's complaint, on one line.
        reason: String,
    },
    /// A relabeling rule breaks one of Prometheus' rules for its action.
    #[error("{message}")]
    Relabel {
        /// What is wrong.
        message: String,
    },
}

impl Error {
    /// Whether this is an [`Error::Invalid`] at `key` or inside it.
    pub(crate) fn is_under(&self, key: &str) -> bool {
        match self {
            Error::Invalid { path, .. } => path
                .strip_prefix(key)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '['])),
            _ => false,
        }
    }
}

/// A position in the configuration text, both counted from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location {
    /// Line, from 1.
    pub line: usize,
    /// Column (in characters), from 1.
    pub column: usize,
}

/// `source:line:column: path: ` with the missing parts left out.
struct Prefix<'a>(&'a str, &'a Option<Location>, &'a str);

impl fmt::Display for Prefix<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Prefix(source_name, location, path) = *self;
        f.write_str(source_name)?;
        if let Some(l) = location {
            write!(f, ":{}:{}", l.line, l.column)?;
        }
        f.write_str(": ")?;
        if !path.is_empty() {
            write!(f, "{path}: ")?;
        }
        Ok(())
    }
}

/// Builds [`Error::Syntax`] from a failure to read the text as YAML at all.
pub(crate) fn syntax_error(err: &serde_yaml::Error, source_name: &str) -> Error {
    let location = location_of(err);
    let mut message = err.to_string();
    if let Some(l) = location {
        // libyaml puts the position in the middle of its message; we print it up front.
        let at = format!(" at line {} column {}", l.line, l.column);
        if let Some(i) = message.find(&at) {
            message.replace_range(i..i + at.len(), "");
        }
    }
    Error::Syntax {
        source_name: source_name.to_owned(),
        location,
        message,
    }
}

/// Builds [`Error::Invalid`] from a decoding error, separating serde_yaml's own rendering
/// (`path: message at line L column C`) back into its parts.
///
/// serde_yaml 0.9 is frozen (its last release is marked deprecated), so the rendering this
/// relies on cannot change under us; a test pins it.
pub(crate) fn invalid_error(
    err: serde_path_to_error::Error<serde_yaml::Error>,
    source_name: &str,
) -> Error {
    let tracked = err.path().to_string();
    let inner = err.into_inner();
    let location = location_of(&inner);
    let mut message = inner.to_string();
    if let Some(l) = location {
        let at = format!(" at line {} column {}", l.line, l.column);
        if message.ends_with(&at) {
            message.truncate(message.len() - at.len());
        }
    }
    // serde_yaml prefixes the path of the node that failed, which is the tracked path or one of
    // its ancestors (for an unknown key: the mapping that holds it). Prefer that one: it is the
    // node the location points into.
    let mut path = String::new();
    let mut candidate = tracked.as_str();
    loop {
        if candidate.is_empty() || candidate == "." {
            break;
        }
        if let Some(rest) = message
            .strip_prefix(candidate)
            .and_then(|r| r.strip_prefix(": "))
        {
            path = candidate.to_owned();
            message = rest.to_owned();
            break;
        }
        candidate = parent_path(candidate);
    }
    Error::Invalid {
        source_name: source_name.to_owned(),
        location,
        path,
        message,
    }
}

/// `a.b[3]` → `a.b`, `a.b` → `a`, `a` → ``.
fn parent_path(path: &str) -> &str {
    match path.rfind(['.', '[']) {
        Some(i) => &path[..i],
        None => "",
    }
}

fn location_of(err: &serde_yaml::Error) -> Option<Location> {
    err.location().map(|l| Location {
        line: l.line(),
        column: l.column(),
    })
}

/// The first line of a regex compiler error that says what is wrong, without the caret diagram.
pub(crate) fn regex_reason(err: &regex::Error) -> String {
    let text = err.to_string();
    text.lines()
        .rev()
        .find_map(|l| l.strip_prefix("error: "))
        .unwrap_or(text.lines().next().unwrap_or_default())
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `invalid_error` takes serde_yaml's rendering apart; this pins that rendering.
    #[test]
    fn serde_yaml_renders_path_message_and_position() {
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct T {
            a: Vec<u32>,
        }
        let e = serde_yaml::from_str::<T>("a: [1, x]").unwrap_err();
        assert_eq!(
            e.to_string(),
            "a[1]: invalid type: string \"x\", expected u32 at line 1 column 8"
        );
        let e = serde_yaml::from_str::<T>("b: 1").unwrap_err();
        assert_eq!(e.to_string(), "unknown field `b`, expected `a`");
    }

    #[test]
    fn parent_paths() {
        assert_eq!(parent_path("a.b[3]"), "a.b");
        assert_eq!(parent_path("a.b"), "a");
        assert_eq!(parent_path("a"), "");
    }

    #[test]
    fn prefix_leaves_out_what_is_unknown() {
        let e = Error::Invalid {
            source_name: "x.yaml".into(),
            location: None,
            path: String::new(),
            message: "bad".into(),
        };
        assert_eq!(e.to_string(), "x.yaml: bad");
        let e = Error::Invalid {
            source_name: "x.yaml".into(),
            location: Some(Location { line: 3, column: 7 }),
            path: "a[0].b".into(),
            message: "bad".into(),
        };
        assert_eq!(e.to_string(), "x.yaml:3:7: a[0].b: bad");
    }

    #[test]
    fn regex_reason_is_one_line() {
        let unclosed = String::from("(");
        let err = regex::Regex::new(&unclosed).unwrap_err();
        assert_eq!(regex_reason(&err), "unclosed group");
    }
}
