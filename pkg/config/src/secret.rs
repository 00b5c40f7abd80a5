//! A password or token from the file, kept out of logs and of the config shown by the API.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What a secret is shown as (Prometheus shows the same).
pub const REDACTED: &str = "<secret>";

/// A password or token. `Debug` and serialization (so [`Config::to_yaml`](crate::Config::to_yaml))
/// show [`REDACTED`]; [`Secret::expose`] gives the value. Equality compares the values, so a
/// reload notices a changed password.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a value.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The value itself, for sending it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({REDACTED:?})")
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(REDACTED)
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Secret)
    }
}

/// Refuses a secret given both inline (`key`) and as a file (`key_file`), as Prometheus does.
pub(crate) fn inline_or_file(
    key: &str,
    inline: Option<&Secret>,
    file: Option<&std::path::Path>,
) -> Result<(), String> {
    if inline.is_some() && file.is_some() {
        return Err(format!(
            "at most one of `{key}` and `{key}_file` may be set"
        ));
    }
    Ok(())
}
