//! Prometheus' HTTP client settings beyond authentication headers: proxies, redirects, HTTP/2
//! and OAuth 2.0 client credentials (`oauth2`), as Parca's scrape configs inline them.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Deserializer, Serialize};

use crate::checked::{Checked, FromRaw, str_then};
use crate::secret::{Secret, inline_or_file};
use crate::tls::{TlsConfig, serialize_path_opt};

/// An absolute `http`/`https` (or, for proxies, `socks5`) URL, checked when the file is read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct HttpUrl(String);

impl HttpUrl {
    /// The URL as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    fn parse(text: &str, schemes: &[&str]) -> Result<HttpUrl, String> {
        let (scheme, rest) = text
            .split_once("://")
            .ok_or_else(|| format!("invalid URL {text:?}: expected scheme://host[:port][/path]"))?;
        if !schemes.iter().any(|s| s.eq_ignore_ascii_case(scheme)) {
            return Err(format!(
                "invalid URL {text:?}: the scheme must be {}, not `{scheme}`",
                schemes
                    .iter()
                    .map(|s| format!("`{s}`"))
                    .collect::<Vec<_>>()
                    .join(" or ")
            ));
        }
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        let host = authority.rsplit('@').next().unwrap_or_default();
        if host.is_empty() || host.starts_with(':') {
            return Err(format!("invalid URL {text:?}: it has no host"));
        }
        if text.chars().any(char::is_whitespace) {
            return Err(format!("invalid URL {text:?}: it contains white space"));
        }
        Ok(HttpUrl(text.to_owned()))
    }
}

/// A proxy's URL: `http`, `https` or `socks5`.
pub(crate) struct ProxyUrl(pub(crate) HttpUrl);

impl<'de> Deserialize<'de> for ProxyUrl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        str_then(d, "a proxy URL", |s| {
            HttpUrl::parse(s, &["http", "https", "socks5", "socks5h"]).map(ProxyUrl)
        })
    }
}

/// An endpoint's URL: `http` or `https`.
pub(crate) struct EndpointUrl(pub(crate) HttpUrl);

impl<'de> Deserialize<'de> for EndpointUrl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        str_then(d, "a URL", |s| {
            HttpUrl::parse(s, &["http", "https"]).map(EndpointUrl)
        })
    }
}

/// How requests reach their server: directly (the default), through `proxy_url`, or through
/// the proxies the environment names (`HTTP_PROXY`, `HTTPS_PROXY`, `NO_PROXY`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct ProxyConfig {
    /// `proxy_url`: the proxy for every request, `http://`, `https://` or `socks5://`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proxy_url: Option<HttpUrl>,
    /// `no_proxy`: comma-separated hosts, domains and CIDR ranges reached without the proxy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_proxy: Option<String>,
    /// `proxy_from_environment`: use `HTTP_PROXY`, `HTTPS_PROXY` and `NO_PROXY`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub proxy_from_environment: bool,
    /// `proxy_connect_header`: headers sent to the proxy (for `CONNECT`), e.g.
    /// `Proxy-Authorization`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub proxy_connect_header: BTreeMap<String, Vec<Secret>>,
}

impl ProxyConfig {
    /// Checks Prometheus' rules on how the four keys combine.
    pub(crate) fn from_parts(
        proxy_url: Option<HttpUrl>,
        no_proxy: Option<String>,
        proxy_from_environment: bool,
        proxy_connect_header: BTreeMap<String, Vec<Secret>>,
    ) -> Result<ProxyConfig, String> {
        if proxy_from_environment && proxy_url.is_some() {
            return Err(
                "`proxy_url` cannot be set with `proxy_from_environment`, which takes the proxy \
                 from HTTP_PROXY and HTTPS_PROXY"
                    .to_owned(),
            );
        }
        if no_proxy.is_some() && proxy_from_environment {
            return Err(
                "`no_proxy` cannot be set with `proxy_from_environment`, which takes it from \
                 NO_PROXY"
                    .to_owned(),
            );
        }
        if no_proxy.is_some() && proxy_url.is_none() {
            return Err("`no_proxy` needs `proxy_url`".to_owned());
        }
        if !proxy_connect_header.is_empty() && proxy_url.is_none() && !proxy_from_environment {
            return Err(
                "`proxy_connect_header` needs `proxy_url` or `proxy_from_environment`".to_owned(),
            );
        }
        for name in proxy_connect_header.keys() {
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_graphic() && b != b':') {
                return Err(format!(
                    "`proxy_connect_header` name {name:?} is not a valid HTTP header name"
                ));
            }
        }
        Ok(ProxyConfig {
            proxy_url,
            no_proxy,
            proxy_from_environment,
            proxy_connect_header,
        })
    }

    /// Whether nothing is set: requests go directly.
    pub fn is_default(&self) -> bool {
        *self == ProxyConfig::default()
    }
}

/// `oauth2`: the job fetches a token with the OAuth 2.0 client-credentials grant from
/// `token_url`, renews it before it expires, and sends it as `Authorization: Bearer …`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OAuth2 {
    /// `client_id`.
    pub client_id: String,
    /// `client_secret`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<Secret>,
    /// `client_secret_file`: read at each token request instead of `client_secret`.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_path_opt"
    )]
    pub client_secret_file: Option<PathBuf>,
    /// `scopes`: sent space-separated as `scope`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    /// `token_url` (required).
    pub token_url: HttpUrl,
    /// `endpoint_params`: more form parameters of the token request.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub endpoint_params: BTreeMap<String, String>,
    /// `tls_config`: for an `https` `token_url`.
    #[serde(skip_serializing_if = "TlsConfig::is_default")]
    pub tls_config: TlsConfig,
    /// `proxy_url` and the other proxy keys: how the token request reaches `token_url`.
    #[serde(flatten)]
    pub proxy: ProxyConfig,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawOAuth2 {
    client_id: Option<String>,
    client_secret: Option<Secret>,
    client_secret_file: Option<PathBuf>,
    #[serde(default)]
    scopes: Vec<String>,
    token_url: Option<EndpointUrl>,
    #[serde(default)]
    endpoint_params: BTreeMap<String, String>,
    tls_config: Option<Checked<TlsConfig>>,
    proxy_url: Option<ProxyUrl>,
    no_proxy: Option<String>,
    #[serde(default)]
    proxy_from_environment: bool,
    #[serde(default)]
    proxy_connect_header: BTreeMap<String, Vec<Secret>>,
}

impl FromRaw for OAuth2 {
    type Raw = RawOAuth2;
    const EXPECTING: &'static str = "oauth2 settings";

    fn from_raw(raw: RawOAuth2) -> Result<Self, String> {
        let token_url = raw
            .token_url
            .ok_or("`token_url` is required: where the client-credentials token is fetched")?
            .0;
        let client_id = raw.client_id.unwrap_or_default();
        if client_id.is_empty() {
            return Err("`client_id` is required".to_owned());
        }
        inline_or_file(
            "client_secret",
            raw.client_secret.as_ref(),
            raw.client_secret_file.as_deref(),
        )?;
        Ok(OAuth2 {
            client_id,
            client_secret: raw.client_secret,
            client_secret_file: raw.client_secret_file,
            scopes: raw.scopes,
            token_url,
            endpoint_params: raw.endpoint_params,
            tls_config: raw.tls_config.map(|t| t.0).unwrap_or_default(),
            proxy: ProxyConfig::from_parts(
                raw.proxy_url.map(|u| u.0),
                raw.no_proxy,
                raw.proxy_from_environment,
                raw.proxy_connect_header,
            )?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_need_a_known_scheme_and_a_host() {
        assert!(HttpUrl::parse("http://proxy:3128", &["http"]).is_ok());
        assert!(HttpUrl::parse("http://user:pw@proxy:3128/", &["http"]).is_ok());
        assert_eq!(
            HttpUrl::parse("proxy:3128", &["http"]).unwrap_err(),
            "invalid URL \"proxy:3128\": expected scheme://host[:port][/path]"
        );
        assert_eq!(
            HttpUrl::parse("ftp://proxy", &["http", "https"]).unwrap_err(),
            "invalid URL \"ftp://proxy\": the scheme must be `http` or `https`, not `ftp`"
        );
        assert_eq!(
            HttpUrl::parse("http://:80/x", &["http"]).unwrap_err(),
            "invalid URL \"http://:80/x\": it has no host"
        );
    }

    #[test]
    fn proxy_keys_combine_as_in_prometheus() {
        let url = || Some(HttpUrl("http://proxy:3128".into()));
        let header =
            || BTreeMap::from([("Proxy-Authorization".to_owned(), vec![Secret::new("x")])]);
        assert!(ProxyConfig::from_parts(url(), Some("localhost".into()), false, header()).is_ok());
        assert!(ProxyConfig::from_parts(None, None, true, header()).is_ok());
        for (url, no_proxy, env, header, message) in [
            (
                url(),
                None,
                true,
                BTreeMap::new(),
                "`proxy_url` cannot be set",
            ),
            (
                None,
                Some("a".to_owned()),
                true,
                BTreeMap::new(),
                "`no_proxy` cannot be set",
            ),
            (
                None,
                Some("a".to_owned()),
                false,
                BTreeMap::new(),
                "`no_proxy` needs",
            ),
            (None, None, false, header(), "`proxy_connect_header` needs"),
        ] {
            let e = ProxyConfig::from_parts(url, no_proxy, env, header).unwrap_err();
            assert!(e.starts_with(message), "{e}");
        }
    }
}
