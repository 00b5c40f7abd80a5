//! `object_storage`: where blocks are shipped, in Thanos' `objstore` format (as Parca takes it).

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};

use crate::checked::{Checked, FromRaw, str_then};
use crate::labels::UniqueMap;
use crate::secret::REDACTED;

/// `object_storage`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ObjectStorage {
    /// `bucket` (required).
    pub bucket: BucketConfig,
}

/// `object_storage.bucket`: a Thanos objstore bucket configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct BucketConfig {
    /// `type`: `FILESYSTEM`, `S3`, `GCS`, `AZURE`, `SWIFT`, `COS`, `ALIYUNOSS`, `BOS`, `OCI` or
    /// `OBS` (any case).
    pub kind: BucketType,
    /// `config`: the provider's settings, as Thanos names them (e.g. `directory` for
    /// `FILESYSTEM`; `bucket`, `endpoint`, `access_key`, `secret_key` for `S3`).
    pub config: BTreeMap<String, ConfigValue>,
    /// `prefix`: a folder inside the bucket under which everything is stored. Default empty.
    pub prefix: String,
}

impl BucketConfig {
    /// A string setting of `config`.
    pub fn get_str(&self, key: &str) -> Option<&str> {
        match self.config.get(key) {
            Some(ConfigValue::String(s)) => Some(s),
            _ => None,
        }
    }
}

/// `object_storage.bucket.type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BucketType {
    /// `FILESYSTEM`: a local folder (`config.directory`).
    Filesystem,
    /// `S3` and S3-compatible stores.
    S3,
    /// `GCS`: Google Cloud Storage.
    Gcs,
    /// `AZURE`: Azure Blob Storage.
    Azure,
    /// `SWIFT`: OpenStack Swift.
    Swift,
    /// `COS`: Tencent Cloud Object Storage.
    Cos,
    /// `ALIYUNOSS`: Alibaba Cloud OSS.
    AliyunOss,
    /// `BOS`: Baidu Object Storage.
    Bos,
    /// `OCI`: Oracle Cloud Infrastructure.
    Oci,
    /// `OBS`: Huawei Object Storage Service.
    Obs,
}

impl BucketType {
    /// Every type.
    pub const ALL: [BucketType; 10] = [
        BucketType::Filesystem,
        BucketType::S3,
        BucketType::Gcs,
        BucketType::Azure,
        BucketType::Swift,
        BucketType::Cos,
        BucketType::AliyunOss,
        BucketType::Bos,
        BucketType::Oci,
        BucketType::Obs,
    ];

    /// The name written in the file (upper case).
    pub fn as_str(self) -> &'static str {
        match self {
            BucketType::Filesystem => "FILESYSTEM",
            BucketType::S3 => "S3",
            BucketType::Gcs => "GCS",
            BucketType::Azure => "AZURE",
            BucketType::Swift => "SWIFT",
            BucketType::Cos => "COS",
            BucketType::AliyunOss => "ALIYUNOSS",
            BucketType::Bos => "BOS",
            BucketType::Oci => "OCI",
            BucketType::Obs => "OBS",
        }
    }

    /// The `config` keys that must be present and non-empty, as Thanos checks them.
    fn required_keys(self) -> &'static [&'static str] {
        match self {
            BucketType::Filesystem => &["directory"],
            BucketType::S3 => &["bucket", "endpoint"],
            BucketType::Gcs => &["bucket"],
            BucketType::Azure => &["storage_account", "container"],
            _ => &[],
        }
    }
}

impl fmt::Display for BucketType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for BucketType {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        str_then(d, "a bucket type", |text| {
            let upper = text.to_uppercase();
            BucketType::ALL
                .into_iter()
                .find(|t| t.as_str() == upper)
                .ok_or_else(|| {
                    let names: Vec<&str> = BucketType::ALL.iter().map(|t| t.as_str()).collect();
                    format!(
                        "unknown bucket type {text:?}, expected one of {}",
                        names.join(", ")
                    )
                })
        })
    }
}

impl Serialize for BucketType {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// A value under `object_storage.bucket.config`: whatever YAML holds.
#[derive(Debug, Clone, PartialEq)]
pub enum ConfigValue {
    /// `null` or nothing.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A whole number.
    Integer(i64),
    /// Any other number.
    Float(f64),
    /// Text.
    String(String),
    /// A sequence.
    List(Vec<ConfigValue>),
    /// A mapping with text keys.
    Map(BTreeMap<String, ConfigValue>),
}

impl<'de> Deserialize<'de> for ConfigValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ConfigValue;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a YAML value")
            }
            fn visit_unit<E: de::Error>(self) -> Result<ConfigValue, E> {
                Ok(ConfigValue::Null)
            }
            fn visit_none<E: de::Error>(self) -> Result<ConfigValue, E> {
                Ok(ConfigValue::Null)
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<ConfigValue, E> {
                Ok(ConfigValue::Bool(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ConfigValue, E> {
                Ok(ConfigValue::Integer(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ConfigValue, E> {
                Ok(i64::try_from(v).map_or(ConfigValue::Float(v as f64), ConfigValue::Integer))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<ConfigValue, E> {
                Ok(ConfigValue::Float(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ConfigValue, E> {
                Ok(ConfigValue::String(v.to_owned()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ConfigValue, A::Error> {
                let mut out = Vec::new();
                while let Some(v) = seq.next_element()? {
                    out.push(v);
                }
                Ok(ConfigValue::List(out))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ConfigValue, A::Error> {
                let m = UniqueMap::<String, ConfigValue>::deserialize(
                    de::value::MapAccessDeserializer::new(map),
                )?;
                Ok(ConfigValue::Map(m.0.into_iter().collect()))
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for ConfigValue {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ConfigValue::Null => s.serialize_unit(),
            ConfigValue::Bool(b) => s.serialize_bool(*b),
            ConfigValue::Integer(i) => s.serialize_i64(*i),
            ConfigValue::Float(f) => s.serialize_f64(*f),
            ConfigValue::String(t) => s.serialize_str(t),
            ConfigValue::List(l) => l.serialize(s),
            ConfigValue::Map(m) => m.serialize(s),
        }
    }
}

/// `config` keys whose values are secrets in some provider; shown as `<secret>`.
const SECRET_KEYS: [&str; 7] = [
    "secret_key",
    "session_token",
    "service_account",
    "storage_account_key",
    "password",
    "application_credential_secret",
    "access_key_secret",
];

impl Serialize for BucketConfig {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        struct Redacted<'a>(&'a BTreeMap<String, ConfigValue>);
        impl Serialize for Redacted<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut map = s.serialize_map(Some(self.0.len()))?;
                for (k, v) in self.0 {
                    if SECRET_KEYS.contains(&k.as_str()) {
                        map.serialize_entry(k, REDACTED)?;
                    } else {
                        map.serialize_entry(k, v)?;
                    }
                }
                map.end()
            }
        }
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("type", &self.kind)?;
        map.serialize_entry("config", &Redacted(&self.config))?;
        if !self.prefix.is_empty() {
            map.serialize_entry("prefix", &self.prefix)?;
        }
        map.end()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawObjectStorage {
    bucket: Checked<BucketConfig>,
}

impl FromRaw for ObjectStorage {
    type Raw = RawObjectStorage;
    const EXPECTING: &'static str = "object storage settings with a `bucket`";

    fn from_raw(raw: RawObjectStorage) -> Result<Self, String> {
        Ok(ObjectStorage {
            bucket: raw.bucket.0,
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawBucketConfig {
    #[serde(rename = "type")]
    kind: BucketType,
    config: Option<UniqueMap<String, ConfigValue>>,
    prefix: Option<String>,
}

impl FromRaw for BucketConfig {
    type Raw = RawBucketConfig;
    const EXPECTING: &'static str = "a bucket with `type` and `config`";

    fn from_raw(raw: RawBucketConfig) -> Result<Self, String> {
        let config: BTreeMap<String, ConfigValue> = raw
            .config
            .map(|c| c.0.into_iter().collect())
            .unwrap_or_default();
        for key in raw.kind.required_keys() {
            let present = match config.get(*key) {
                Some(ConfigValue::String(s)) => !s.is_empty(),
                Some(ConfigValue::Null) | None => false,
                Some(_) => true,
            };
            if !present {
                return Err(format!(
                    "bucket type {} needs `config.{key}`",
                    raw.kind.as_str()
                ));
            }
        }
        if raw.kind == BucketType::Filesystem {
            if let Some(other) = config.keys().find(|k| *k != "directory") {
                return Err(format!(
                    "unknown key `config.{other}` for bucket type FILESYSTEM, expected `directory`"
                ));
            }
            if !matches!(config.get("directory"), Some(ConfigValue::String(_))) {
                return Err("`config.directory` must be a path".to_owned());
            }
        }
        if raw.kind == BucketType::S3 {
            let has = |k: &str| config.get(k).is_some_and(|v| *v != ConfigValue::Null);
            if has("access_key") != has("secret_key") {
                return Err(
                    "bucket type S3 needs both `config.access_key` and `config.secret_key`, or \
                     neither"
                        .to_owned(),
                );
            }
        }
        Ok(BucketConfig {
            kind: raw.kind,
            config,
            prefix: raw.prefix.unwrap_or_default(),
        })
    }
}
