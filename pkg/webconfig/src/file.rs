//! The web configuration file's shape (Prometheus exporter-toolkit's `web-config.yml`) and the
//! checks that need no file system: a file either loads whole or is refused with what is wrong.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::error::Error;

/// The whole file. Unknown keys are refused, as exporter-toolkit refuses them.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WebConfigFile {
    /// TLS for the listener; absent or empty: plain HTTP.
    #[serde(default)]
    pub tls_server_config: TlsServerConfig,
    /// HTTP/2 and the headers added to every response.
    #[serde(default)]
    pub http_server_config: HttpServerConfig,
    /// User name → bcrypt hash of the password. Empty: no basic auth.
    #[serde(default)]
    pub basic_auth_users: BTreeMap<String, String>,
    /// Requests per interval over all clients, beyond which the answer is 429.
    #[serde(default)]
    pub rate_limit: RateLimit,
}

/// `tls_server_config`, with exporter-toolkit's keys.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TlsServerConfig {
    /// PEM certificate chain, inline.
    #[serde(default)]
    pub cert: String,
    /// PEM private key, inline.
    #[serde(default)]
    pub key: String,
    /// File of the PEM certificate chain (relative paths are to the config file's directory).
    #[serde(default)]
    pub cert_file: String,
    /// File of the PEM private key.
    #[serde(default)]
    pub key_file: String,
    /// PEM certificates of the CAs that sign client certificates, inline.
    #[serde(default)]
    pub client_ca: String,
    /// File of the PEM certificates of the CAs that sign client certificates.
    #[serde(default)]
    pub client_ca_file: String,
    /// Go's names: `NoClientCert` (default), `RequestClientCert`, `RequireAnyClientCert`,
    /// `VerifyClientCertIfGiven`, `RequireAndVerifyClientCert`.
    #[serde(default)]
    pub client_auth_type: String,
    /// Subject alternative names (DNS names or IP addresses) one of which a verified client
    /// certificate must carry; empty: any.
    #[serde(default)]
    pub client_allowed_sans: Vec<String>,
    /// TLS 1.2 cipher suites by Go's (IANA) names, in no particular order; empty: rustls' own.
    /// TLS 1.3 suites are not configurable, as in Go.
    #[serde(default)]
    pub cipher_suites: Vec<String>,
    /// Key exchange groups by Go's names (`X25519`, `CurveP256`, `CurveP384`), most preferred
    /// first; empty: rustls' own.
    #[serde(default)]
    pub curve_preferences: Vec<String>,
    /// `TLS10` … `TLS13`; default `TLS12`.
    #[serde(default)]
    pub min_version: String,
    /// `TLS12` or `TLS13`; default `TLS13`.
    #[serde(default)]
    pub max_version: String,
    /// Whether the server's cipher order wins (rustls' always does).
    #[serde(default)]
    pub prefer_server_cipher_suites: Option<bool>,
}

impl TlsServerConfig {
    /// Whether any TLS key is set: exporter-toolkit serves plain HTTP only when none is.
    pub fn is_set(&self) -> bool {
        *self != TlsServerConfig::default()
    }
}

/// `http_server_config`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HttpServerConfig {
    /// Whether HTTP/2 is offered (default true).
    #[serde(default = "yes")]
    pub http2: bool,
    /// Headers added to every response.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

fn yes() -> bool {
    true
}

impl Default for HttpServerConfig {
    fn default() -> Self {
        HttpServerConfig {
            http2: true,
            headers: BTreeMap::new(),
        }
    }
}

/// `rate_limit`: a token bucket shared by every client.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RateLimit {
    /// Tokens the bucket holds; 0: no limit.
    #[serde(default)]
    pub burst: u32,
    /// How often one token comes back, e.g. `100ms`.
    #[serde(default, deserialize_with = "duration")]
    pub interval: Option<Duration>,
}

fn duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    // Prometheus' durations (`100ms`, `1m30s`), as exporter-toolkit reads them.
    let text = String::deserialize(d)?;
    parca_vocab::duration::parse(text.trim())
        .map(Some)
        .map_err(serde::de::Error::custom)
}

/// Headers exporter-toolkit lets the file set, with the values it allows (`None`: any value).
const ALLOWED_HEADERS: &[(&str, Option<&[&str]>)] = &[
    ("Strict-Transport-Security", None),
    ("X-Content-Type-Options", Some(&["nosniff"])),
    ("X-Frame-Options", Some(&["deny", "sameorigin"])),
    ("X-XSS-Protection", None),
    ("Content-Security-Policy", None),
];

impl WebConfigFile {
    /// Parses and checks `text`, read from `path` (named in errors).
    pub fn parse(text: &str, path: &Path) -> Result<WebConfigFile, Error> {
        let invalid = |message: String| Error::Invalid {
            path: path.to_owned(),
            message,
        };
        // An empty file is a valid, empty configuration (as in exporter-toolkit).
        let file: WebConfigFile = if text.trim().is_empty() {
            WebConfigFile::default()
        } else {
            serde_yaml::from_str(text).map_err(|e| invalid(e.to_string()))?
        };
        for (name, value) in &file.http_server_config.headers {
            let Some((_, allowed)) = ALLOWED_HEADERS
                .iter()
                .find(|(known, _)| known.eq_ignore_ascii_case(name))
            else {
                return Err(invalid(format!(
                    "header `{name}` cannot be set in http_server_config.headers; these can: {}",
                    ALLOWED_HEADERS
                        .iter()
                        .map(|(h, _)| *h)
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            };
            if let Some(values) = allowed
                && !values.iter().any(|v| v.eq_ignore_ascii_case(value))
            {
                return Err(invalid(format!(
                    "header `{name}` must be one of {}, not `{value}`",
                    values.join(", ")
                )));
            }
            if value.contains(['\r', '\n']) {
                return Err(invalid(format!("header `{name}` has a line break")));
            }
        }
        for (user, hash) in &file.basic_auth_users {
            if let Err(e) = hash.parse::<bcrypt::HashParts>() {
                return Err(invalid(format!(
                    "the password of user `{user}` is not a bcrypt hash ({e}); make one with \
                     `htpasswd -nBC 10 \"\" | tr -d ':\\n'`"
                )));
            }
        }
        if file.rate_limit.burst > 0 && file.rate_limit.interval.is_none_or(|i| i.is_zero()) {
            return Err(invalid(
                "rate_limit.interval must be set (e.g. 100ms) when rate_limit.burst is".into(),
            ));
        }
        Ok(file)
    }

    /// The file names the configuration refers to, resolved against `dir` (the configuration
    /// file's directory), so that a change of any of them is noticed.
    pub fn referenced_files(&self, dir: &Path) -> Vec<PathBuf> {
        let tls = &self.tls_server_config;
        [&tls.cert_file, &tls.key_file, &tls.client_ca_file]
            .into_iter()
            .filter(|f| !f.is_empty())
            .map(|f| dir.join(f))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<WebConfigFile, String> {
        WebConfigFile::parse(text, Path::new("web.yml")).map_err(|e| e.to_string())
    }

    #[test]
    fn reads_exporter_toolkit_examples() {
        let file = parse(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  \
             client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n  \
             min_version: TLS12\n  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]\n\
             http_server_config:\n  http2: false\n  headers:\n    X-Frame-Options: deny\n\
             basic_auth_users:\n  alice: $2y$10$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi\n\
             rate_limit:\n  burst: 10\n  interval: 100ms\n",
        )
        .unwrap();
        assert!(file.tls_server_config.is_set());
        assert!(!file.http_server_config.http2);
        assert_eq!(file.rate_limit.interval, Some(Duration::from_millis(100)));
        assert_eq!(
            file.referenced_files(Path::new("/etc/parca")),
            [
                Path::new("/etc/parca/server.crt"),
                Path::new("/etc/parca/server.key"),
                Path::new("/etc/parca/ca.crt")
            ]
        );
        assert_eq!(parse("").unwrap(), WebConfigFile::default());
        assert!(parse("").unwrap().http_server_config.http2);
    }

    #[test]
    fn refuses_what_exporter_toolkit_refuses() {
        for (text, expected) in [
            (
                "tls_server_config:\n  certfile: x\n",
                "unknown field `certfile`",
            ),
            ("basic_auth_users:\n  bob: secret\n", "not a bcrypt hash"),
            (
                "http_server_config:\n  headers:\n    Server: mine\n",
                "cannot be set",
            ),
            (
                "http_server_config:\n  headers:\n    X-Frame-Options: allow\n",
                "must be one of deny, sameorigin",
            ),
            (
                "rate_limit:\n  burst: 3\n",
                "rate_limit.interval must be set",
            ),
            ("rate_limit:\n  interval: 3x\n", "unknown duration unit `x`"),
        ] {
            let error = parse(text).unwrap_err();
            assert!(error.contains(expected), "{text}: {error}");
            assert!(error.contains("web.yml"), "{error}");
        }
    }
}
