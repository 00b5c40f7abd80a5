//! Decoding a YAML mapping into a raw struct and then checking it as a whole, so that a rule
//! broken by a combination of keys is reported at the mapping it concerns.
//!
//! serde_yaml stamps an error with the position and path of the innermost value being decoded
//! when the error arises. A check made inside `visit_map` therefore points at the mapping's first
//! key, where a check made after decoding the whole file could only point at the top.

use std::fmt;
use std::marker::PhantomData;

use serde::de::value::MapAccessDeserializer;
use serde::de::{self, Deserialize, DeserializeOwned, Deserializer, MapAccess, Visitor};

/// Decodes a mapping as `R`, then turns it into a `T` with `check`; a message from `check`
/// becomes a decoding error located at the mapping.
pub(crate) fn map_then<'de, D, R, T, F>(
    d: D,
    expecting: &'static str,
    check: F,
) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    R: Deserialize<'de>,
    F: FnOnce(R) -> Result<T, String>,
{
    struct V<R, T, F> {
        expecting: &'static str,
        check: F,
        _types: PhantomData<fn(R) -> T>,
    }
    impl<'de, R, T, F> Visitor<'de> for V<R, T, F>
    where
        R: Deserialize<'de>,
        F: FnOnce(R) -> Result<T, String>,
    {
        type Value = T;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.expecting)
        }
        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
            let raw = R::deserialize(MapAccessDeserializer::new(map))?;
            (self.check)(raw).map_err(de::Error::custom)
        }
    }
    d.deserialize_map(V {
        expecting,
        check,
        _types: PhantomData,
    })
}

/// A part of the configuration that is decoded from a raw form and checked as a whole.
pub(crate) trait FromRaw: Sized {
    /// The form serde decodes, with `deny_unknown_fields` and optional keys.
    type Raw: DeserializeOwned;
    /// What the mapping is, for "invalid type: …, expected …" messages.
    const EXPECTING: &'static str;
    /// Applies defaults and checks the rules.
    fn from_raw(raw: Self::Raw) -> Result<Self, String>;
}

/// Decodes a `T: FromRaw` through [`map_then`].
pub(crate) struct Checked<T>(pub(crate) T);

impl<'de, T: FromRaw> Deserialize<'de> for Checked<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        map_then(d, T::EXPECTING, T::from_raw).map(Checked)
    }
}

/// Unwraps an optional list of checked items.
pub(crate) fn unwrap_list<T>(list: Option<Vec<Checked<T>>>) -> Vec<T> {
    list.unwrap_or_default().into_iter().map(|c| c.0).collect()
}

/// Decodes a scalar as text and converts it with `convert`; a message from `convert` becomes a
/// decoding error located at the scalar itself (raised inside serde_yaml's `deserialize_str`,
/// which stamps it with the scalar's position).
pub(crate) fn str_then<'de, D, T, F>(
    d: D,
    expecting: &'static str,
    convert: F,
) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    F: FnOnce(&str) -> Result<T, String>,
{
    struct V<T, F> {
        expecting: &'static str,
        convert: F,
        _types: PhantomData<fn() -> T>,
    }
    impl<T, F> Visitor<'_> for V<T, F>
    where
        F: FnOnce(&str) -> Result<T, String>,
    {
        type Value = T;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.expecting)
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
            (self.convert)(v).map_err(E::custom)
        }
    }
    d.deserialize_str(V {
        expecting,
        convert,
        _types: PhantomData,
    })
}
