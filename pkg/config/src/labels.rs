//! Label names and label sets as they appear in the file: names checked where they are written,
//! repeated keys refused.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};

use parca_querylang::is_valid_label_name;

use crate::checked::str_then;

/// The message for a name that breaks [`is_valid_label_name`] (the query language's rule).
pub(crate) fn invalid_label_name(name: &str) -> String {
    format!("invalid label name {name:?}: use letters, digits and `_`, not starting with a digit")
}

/// A label name, checked when decoded so that the error points at it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct LabelName(pub(crate) String);

impl<'de> Deserialize<'de> for LabelName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        str_then(d, "a label name", |name| {
            if is_valid_label_name(name) {
                Ok(LabelName(name.to_owned()))
            } else {
                Err(invalid_label_name(name))
            }
        })
    }
}

/// A YAML mapping whose keys must be distinct (serde would let the last one win silently).
/// Keeps the file's order.
#[derive(Debug)]
pub(crate) struct UniqueMap<K, V>(pub(crate) Vec<(K, V)>);

impl<'de, K, V> Deserialize<'de> for UniqueMap<K, V>
where
    K: Deserialize<'de> + PartialEq + fmt::Debug + KeyText,
    V: Deserialize<'de>,
{
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V2<K, V>(PhantomData<(K, V)>);
        impl<'de, K, V> Visitor<'de> for V2<K, V>
        where
            K: Deserialize<'de> + PartialEq + fmt::Debug + KeyText,
            V: Deserialize<'de>,
        {
            type Value = UniqueMap<K, V>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out: Vec<(K, V)> = Vec::new();
                while let Some(key) = map.next_key::<K>()? {
                    if out.iter().any(|(k, _)| *k == key) {
                        return Err(de::Error::custom(format!(
                            "key `{}` is given twice",
                            key.key_text()
                        )));
                    }
                    let value = map.next_value::<V>()?;
                    out.push((key, value));
                }
                Ok(UniqueMap(out))
            }
        }
        d.deserialize_map(V2(PhantomData))
    }
}

/// How a mapping key is named in a message.
pub(crate) trait KeyText {
    fn key_text(&self) -> &str;
}

impl KeyText for String {
    fn key_text(&self) -> &str {
        self
    }
}

impl KeyText for LabelName {
    fn key_text(&self) -> &str {
        &self.0
    }
}

/// Decodes a label set (`labels:`, `external_labels:`): valid names, distinct keys.
pub(crate) fn label_set_opt<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    let map = Option::<UniqueMap<LabelName, String>>::deserialize(d)?;
    Ok(map.map(|m| m.0.into_iter().map(|(k, v)| (k.0, v)).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_names() {
        for ok in ["a", "_", "__name__", "job", "A9_z"] {
            assert!(is_valid_label_name(ok), "{ok}");
        }
        for bad in ["", "9a", "a-b", "a.b", "é", "a b"] {
            assert!(!is_valid_label_name(bad), "{bad}");
        }
    }
}
