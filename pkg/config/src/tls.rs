//! `tls_config`: how a client (scrape, Alertmanager, remote write, proxies) checks a server's
//! certificate and shows its own, as Prometheus' configuration writes it.

use std::path::PathBuf;

use serde::{Deserialize, Serialize, Serializer};

use crate::checked::FromRaw;

/// `tls_config`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct TlsConfig {
    /// `ca_file`: the CA certificates to check the target's certificate with (default: the
    /// system's).
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_path_opt"
    )]
    pub ca_file: Option<PathBuf>,
    /// `cert_file`: a client certificate; needs `key_file`.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_path_opt"
    )]
    pub cert_file: Option<PathBuf>,
    /// `key_file`: the client certificate's key; needs `cert_file`.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_path_opt"
    )]
    pub key_file: Option<PathBuf>,
    /// `server_name`: the name expected in the target's certificate (and sent as SNI).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_name: Option<String>,
    /// `insecure_skip_verify`: do not check the target's certificate. Default false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub insecure_skip_verify: bool,
}

impl TlsConfig {
    pub(crate) fn is_default(&self) -> bool {
        *self == TlsConfig::default()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTlsConfig {
    ca_file: Option<PathBuf>,
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    server_name: Option<String>,
    #[serde(default)]
    insecure_skip_verify: bool,
}

impl FromRaw for TlsConfig {
    type Raw = RawTlsConfig;
    const EXPECTING: &'static str = "tls_config settings";

    fn from_raw(raw: RawTlsConfig) -> Result<Self, String> {
        if raw.cert_file.is_some() != raw.key_file.is_some() {
            return Err("`cert_file` and `key_file` must be set together".to_owned());
        }
        Ok(TlsConfig {
            ca_file: raw.ca_file,
            cert_file: raw.cert_file,
            key_file: raw.key_file,
            server_name: raw.server_name,
            insecure_skip_verify: raw.insecure_skip_verify,
        })
    }
}

/// A path written as text (`None` left out by `skip_serializing_if`).
pub(crate) fn serialize_path_opt<S: Serializer>(
    path: &Option<PathBuf>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match path {
        Some(p) => s.serialize_str(&p.to_string_lossy()),
        None => s.serialize_none(),
    }
}
