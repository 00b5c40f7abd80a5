//! `alerting:`: the Alertmanagers alerts are sent to, as Prometheus configures them. Each
//! entry's targets, credentials, TLS and proxy are written as a scrape job's and decoded by the
//! same code (a [`ScrapeConfig`] holds them), so they are checked the same way.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::checked::{Checked, FromRaw, unwrap_list};
use crate::duration;
use crate::http_client::{OAuth2, ProxyUrl};
use crate::relabel::RelabelConfig;
use crate::scrape::{
    Authorization, BasicAuth, FileSdConfig, RawScrapeConfig, Scheme, ScrapeConfig, StaticConfig,
};
use crate::secret::Secret;
use crate::tls::TlsConfig;

/// How long a POST to an Alertmanager may take when `timeout` is not set: Prometheus' default.
pub const DEFAULT_ALERTMANAGER_TIMEOUT: Duration = Duration::from_secs(10);

/// `alerting`.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct AlertingConfig {
    /// `alert_relabel_configs`: applied to every alert before it is sent (a `drop` keeps it
    /// from every Alertmanager).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub alert_relabel_configs: Vec<RelabelConfig>,
    /// `alertmanagers`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub alertmanagers: Vec<AlertmanagerConfig>,
}

impl AlertingConfig {
    /// Whether no Alertmanager is configured.
    pub fn is_empty(&self) -> bool {
        self.alertmanagers.is_empty() && self.alert_relabel_configs.is_empty()
    }
}

/// One `alertmanagers` entry: a set of Alertmanagers reached the same way.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AlertmanagerConfig {
    /// `api_version`: only `v2` (Alertmanager's v1 API is gone since its 0.27).
    pub api_version: String,
    /// `path_prefix`: put before `/api/v2/alerts`. Default: none.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub path_prefix: String,
    /// `timeout`: how long one POST may take. Default 10s.
    #[serde(serialize_with = "duration::serialize")]
    pub timeout: Duration,
    /// `scheme`, `static_configs`, `file_sd_configs`, `relabel_configs`, `basic_auth`,
    /// `authorization`, `oauth2`, `tls_config`, proxy settings, `follow_redirects`,
    /// `enable_http2`: as a scrape job's (its `job_name` is `alertmanager`, its endpoints
    /// unused). Not written back by `to_yaml` but `scheme` and the targets.
    #[serde(skip)]
    pub client: ScrapeConfig,
    #[serde(rename = "scheme")]
    scheme_text: &'static str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    static_configs: Vec<StaticConfig>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    file_sd_configs: Vec<FileSdConfig>,
}

impl AlertmanagerConfig {
    /// Makes relative file paths (credentials, TLS files, `file_sd_configs`) relative to `dir`.
    pub(crate) fn set_directory(&mut self, dir: &std::path::Path) {
        self.client.set_directory(dir);
        self.file_sd_configs = self.client.file_sd_configs.clone();
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAlerting {
    alert_relabel_configs: Option<Vec<Checked<RelabelConfig>>>,
    alertmanagers: Option<Vec<Checked<AlertmanagerConfig>>>,
}

impl RawAlerting {
    pub(crate) fn resolve(self) -> AlertingConfig {
        AlertingConfig {
            alert_relabel_configs: unwrap_list(self.alert_relabel_configs),
            alertmanagers: unwrap_list(self.alertmanagers),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAlertmanager {
    api_version: Option<String>,
    path_prefix: Option<String>,
    #[serde(default, deserialize_with = "duration::deserialize_positive_opt")]
    timeout: Option<Duration>,
    scheme: Option<Scheme>,
    static_configs: Option<Vec<Checked<StaticConfig>>>,
    file_sd_configs: Option<Vec<Checked<FileSdConfig>>>,
    relabel_configs: Option<Vec<Checked<RelabelConfig>>>,
    basic_auth: Option<Checked<BasicAuth>>,
    authorization: Option<Checked<Authorization>>,
    bearer_token: Option<Secret>,
    bearer_token_file: Option<PathBuf>,
    oauth2: Option<Checked<OAuth2>>,
    tls_config: Option<Checked<TlsConfig>>,
    proxy_url: Option<ProxyUrl>,
    no_proxy: Option<String>,
    #[serde(default)]
    proxy_from_environment: bool,
    #[serde(default)]
    proxy_connect_header: BTreeMap<String, Vec<Secret>>,
    follow_redirects: Option<bool>,
    enable_http2: Option<bool>,
}

impl FromRaw for AlertmanagerConfig {
    type Raw = RawAlertmanager;
    const EXPECTING: &'static str =
        "an Alertmanager config with `static_configs` or `file_sd_configs`";

    fn from_raw(raw: RawAlertmanager) -> Result<Self, String> {
        let api_version = raw.api_version.unwrap_or_else(|| "v2".to_owned());
        if api_version != "v2" {
            return Err(format!(
                "unsupported `api_version` {api_version:?}: Alertmanager's API is v2"
            ));
        }
        let path_prefix = raw.path_prefix.unwrap_or_default();
        if !path_prefix.is_empty() && !path_prefix.starts_with('/') {
            return Err(format!("`path_prefix` {path_prefix:?} must start with `/`"));
        }
        let client = ScrapeConfig::client_only(
            "alertmanager",
            RawScrapeConfig {
                scheme: raw.scheme,
                static_configs: raw.static_configs,
                file_sd_configs: raw.file_sd_configs,
                relabel_configs: raw.relabel_configs,
                basic_auth: raw.basic_auth,
                authorization: raw.authorization,
                bearer_token: raw.bearer_token,
                bearer_token_file: raw.bearer_token_file,
                oauth2: raw.oauth2,
                tls_config: raw.tls_config,
                proxy_url: raw.proxy_url,
                no_proxy: raw.no_proxy,
                proxy_from_environment: raw.proxy_from_environment,
                proxy_connect_header: raw.proxy_connect_header,
                follow_redirects: raw.follow_redirects,
                enable_http2: raw.enable_http2,
                ..Default::default()
            },
        )?;
        Ok(AlertmanagerConfig {
            api_version,
            path_prefix: path_prefix.trim_end_matches('/').to_owned(),
            timeout: raw.timeout.unwrap_or(DEFAULT_ALERTMANAGER_TIMEOUT),
            scheme_text: client.scheme.as_str(),
            static_configs: client.static_configs.clone(),
            file_sd_configs: client.file_sd_configs.clone(),
            client,
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::parse;

    #[test]
    fn alertmanagers_as_prometheus_writes_them() {
        let config = parse(
            "alerting:\n  alertmanagers:\n    - scheme: https\n      path_prefix: /am/\n      timeout: 3s\n      basic_auth: {username: u, password: p}\n      tls_config: {insecure_skip_verify: true}\n      static_configs: [{targets: ['am:9093']}]\n",
            "parca.yaml",
        )
        .unwrap();
        let am = &config.alerting.alertmanagers[0];
        assert_eq!(am.path_prefix, "/am");
        assert_eq!(am.timeout.as_secs(), 3);
        assert_eq!(am.api_version, "v2");
        assert_eq!(am.client.scheme.as_str(), "https");
        assert_eq!(am.client.basic_auth.as_ref().unwrap().username, "u");
        assert!(config.to_yaml().contains("path_prefix: /am"));
        assert!(!config.to_yaml().contains("password"));
        let err = parse(
            "alerting:\n  alertmanagers:\n    - api_version: v1\n",
            "parca.yaml",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with(
                "parca.yaml:3:7: alerting.alertmanagers[0]: unsupported `api_version` \"v1\""
            ),
            "{err}"
        );
        let err = parse(
            "alerting:\n  alertmanagers:\n    - static_configs: [{targets: ['http://am:9093']}]\n",
            "parca.yaml",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("invalid target address"), "{err}");
        let err = parse("alerting:\n  alertmanager: []\n", "parca.yaml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown field `alertmanager`"), "{err}");
    }
}
