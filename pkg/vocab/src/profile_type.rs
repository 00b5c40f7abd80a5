//! Parca's profile type names, `name:sample_type:sample_unit:period_type:period_unit[:delta]`:
//! the `__name__` of every stored series, written by ingest and read by queries, rules and the
//! API.

use std::fmt;

/// A profile-type name that is not of the form `name:sample_type:sample_unit:period_type:period_unit[:delta]`;
/// the message says which part is wrong and how to write it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct InvalidProfileTypeName {
    reason: String,
}

/// A Parca profile type name, `name:sample_type:sample_unit:period_type:period_unit[:delta]`,
/// as in `process_cpu:samples:count:cpu:nanoseconds:delta`. It is the value of the `__name__`
/// label of the series that hold such profiles.
///
/// A name in a parsed query has five or six parts, the sixth being `delta`. The
/// name and the sample type are never empty; the sample unit, period type and period unit may
/// be, as pprof allows (py-spy's profiles have no period type: `bar:samples:count::milliseconds`).
/// One from the lenient parser may be half-typed.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProfileTypeName(String);

impl ProfileTypeName {
    /// A name taken as it is, unchecked: a half-typed name an editor is completing (the
    /// query language's lenient parser keeps them), or one [`ProfileTypeName::problem`] passed.
    pub fn unchecked(text: &str) -> ProfileTypeName {
        ProfileTypeName(text.to_owned())
    }

    /// Parses a whole name such as a `__name__` value; the error says what is wrong with it,
    /// as a query's would.
    pub fn parse(text: &str) -> Result<ProfileTypeName, InvalidProfileTypeName> {
        match ProfileTypeName::problem(text) {
            Some(reason) => Err(InvalidProfileTypeName { reason }),
            None => Ok(ProfileTypeName(text.to_owned())),
        }
    }

    /// The name of profiles named `name` with these types, `:delta` appended for profiles
    /// that each cover a window. The one place the form is written: characters a query could
    /// not write in a part (anything but ASCII letters, digits and `_`, such as the `-` of
    /// `wall-time`) become `_`, so every stored type is selectable as it is listed.
    pub fn from_parts(
        name: &str,
        sample_type: &str,
        sample_unit: &str,
        period_type: &str,
        period_unit: &str,
        delta: bool,
    ) -> ProfileTypeName {
        let word = |part: &str| -> String {
            part.chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '_' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect()
        };
        let mut text = [name, sample_type, sample_unit, period_type, period_unit]
            .map(word)
            .join(":");
        if delta {
            text.push_str(":delta");
        }
        ProfileTypeName(text)
    }

    /// The whole name, as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    fn part(&self, i: usize) -> &str {
        self.0.split(':').nth(i).unwrap_or("")
    }

    /// The first part, as `process_cpu`.
    pub fn name(&self) -> &str {
        self.part(0)
    }

    /// The second part, as `samples`.
    pub fn sample_type(&self) -> &str {
        self.part(1)
    }

    /// The third part, as `count`.
    pub fn sample_unit(&self) -> &str {
        self.part(2)
    }

    /// The fourth part, as `cpu`.
    pub fn period_type(&self) -> &str {
        self.part(3)
    }

    /// The fifth part, as `nanoseconds`.
    pub fn period_unit(&self) -> &str {
        self.part(4)
    }

    /// Whether the name ends in `:delta`: each profile holds what happened in its period (CPU
    /// time), rather than a state at an instant (heap in use).
    pub fn is_delta(&self) -> bool {
        self.part(5) == "delta"
    }

    /// Why `text` is not a complete profile type name, if it is not.
    pub fn problem(text: &str) -> Option<String> {
        const FORM: &str = "name:sample_type:sample_unit:period_type:period_unit[:delta], \
                            such as process_cpu:samples:count:cpu:nanoseconds:delta";
        let n_parts = text.split(':').count();
        let word = |p: &str| p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if n_parts == 1 {
            return Some(format!("`{text}` is not a profile type: write {FORM}"));
        }
        if !(5..=6).contains(&n_parts) {
            return Some(format!(
                "`{text}` has {n_parts} parts, a profile type has 5 or 6: {FORM}"
            ));
        }
        let parts: Vec<&str> = text.split(':').collect();
        if n_parts == 6 && parts[5].is_empty() {
            return Some(format!(
                "`{text}` ends with `:`; the sixth part, when there is one, is `delta`: {FORM}"
            ));
        }
        if parts[0].is_empty() || parts[1].is_empty() {
            let which = if parts[0].is_empty() {
                "name"
            } else {
                "sample type"
            };
            return Some(format!("`{text}` has an empty {which}: write {FORM}"));
        }
        if parts[0].starts_with(|c: char| c.is_ascii_digit()) {
            return Some(format!(
                "`{}` in `{text}` must start with a letter or `_`",
                parts[0]
            ));
        }
        if let Some(part) = parts.iter().find(|p| !word(p)) {
            return Some(format!(
                "`{part}` in `{text}` may only hold letters, digits and `_`"
            ));
        }
        if n_parts == 6 && !text.ends_with(":delta") {
            return Some(format!(
                "the sixth part of a profile type can only be `delta`, not `{}`",
                text.rsplit(':').next().unwrap_or("")
            ));
        }
        None
    }
}

impl std::str::FromStr for ProfileTypeName {
    type Err = InvalidProfileTypeName;

    /// Checks the form, as [`ProfileTypeName::parse`].
    fn from_str(s: &str) -> Result<ProfileTypeName, InvalidProfileTypeName> {
        ProfileTypeName::parse(s)
    }
}

impl fmt::Display for ProfileTypeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::ProfileTypeName;

    #[test]
    fn profile_type_names_are_written_selectable() {
        let t = ProfileTypeName::from_parts("wall", "wall-time", "nanoseconds", "", "ms", true);
        assert_eq!(t.as_str(), "wall:wall_time:nanoseconds::ms:delta");
        assert!(ProfileTypeName::parse(t.as_str()).is_ok());
        assert!(ProfileTypeName::parse("a:b").is_err());
    }
}
