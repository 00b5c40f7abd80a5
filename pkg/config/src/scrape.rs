//! `scrape_configs`: jobs, their targets, how to reach them, and which profiles to fetch, with
//! Parca's defaults merged in.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};

use crate::checked::{Checked, FromRaw, map_then, str_then, unwrap_list};
use crate::duration::{self, format_duration};
use crate::http_client::{OAuth2, ProxyConfig, ProxyUrl};
use crate::labels::{UniqueMap, label_set_opt};
use crate::relabel::RelabelConfig;
use crate::secret::{Secret, inline_or_file};
use crate::tls::{TlsConfig, serialize_path_opt};

/// `scrape_interval` when neither the job nor `global` sets one (Parca's and Prometheus' 10s).
pub const DEFAULT_SCRAPE_INTERVAL: Duration = Duration::from_secs(10);

/// What the default `scrape_timeout` adds to the interval, as Parca does: a delta profile such
/// as `process_cpu` takes the whole interval to answer, and needs time on top to be sent.
pub const SCRAPE_TIMEOUT_MARGIN: Duration = Duration::from_secs(3);

/// `file_sd_configs[].refresh_interval` when not set (Prometheus' 5m).
pub const DEFAULT_FILE_SD_REFRESH_INTERVAL: Duration = Duration::from_secs(5 * 60);

/// Parca's default `pprof_config` entries, in Parca's order: (name, path, delta).
pub const DEFAULT_ENDPOINTS: [(&str, &str, bool); 5] = [
    ("memory", "/debug/pprof/allocs", false),
    ("block", "/debug/pprof/block", false),
    ("goroutine", "/debug/pprof/goroutine", false),
    ("mutex", "/debug/pprof/mutex", false),
    ("process_cpu", "/debug/pprof/profile", true),
];

/// One job (an item of `scrape_configs`), with every default resolved.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScrapeConfig {
    /// `job_name` (required, unique): the `job` label of every series from this job.
    pub job_name: String,
    /// `scrape_interval`: how often each profile of each target is fetched. Default:
    /// `global.scrape_interval` (10s).
    #[serde(serialize_with = "duration::serialize")]
    pub scrape_interval: Duration,
    /// `scrape_timeout`: how long one fetch may take. Default: `global.scrape_timeout` if set,
    /// else `scrape_interval` + 3s. Must exceed `scrape_interval` while a delta endpoint is
    /// enabled (such an endpoint is asked for a window as long as the interval).
    #[serde(serialize_with = "duration::serialize")]
    pub scrape_timeout: Duration,
    /// `scheme`: `http` (default) or `https`.
    pub scheme: Scheme,
    /// `params`: query parameters added to every request, e.g. `{debug: ["0"]}`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub params: BTreeMap<String, Vec<String>>,
    /// `static_configs`: targets written in the file.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub static_configs: Vec<StaticConfig>,
    /// `file_sd_configs`: files (JSON or YAML target lists) that name targets.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub file_sd_configs: Vec<FileSdConfig>,
    /// `relabel_configs`: rules applied to each target's labels before scraping; see
    /// [`relabel`](crate::relabel).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub relabel_configs: Vec<RelabelConfig>,
    /// `basic_auth`: HTTP basic authentication.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub basic_auth: Option<BasicAuth>,
    /// `authorization` (or the older `bearer_token` / `bearer_token_file`, which become an
    /// `authorization` of type `Bearer`): the `Authorization` header.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub authorization: Option<Authorization>,
    /// `oauth2`: an OAuth 2.0 client-credentials token sent as `Authorization: Bearer`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oauth2: Option<OAuth2>,
    /// `tls_config`: for `https`.
    #[serde(skip_serializing_if = "TlsConfig::is_default")]
    pub tls_config: TlsConfig,
    /// `proxy_url`, `no_proxy`, `proxy_from_environment`, `proxy_connect_header`: how requests
    /// reach the targets. Default: directly, whatever the environment says (as Prometheus).
    #[serde(flatten)]
    pub proxy: ProxyConfig,
    /// `follow_redirects`: follow HTTP redirects (up to 10), as Prometheus does by default.
    pub follow_redirects: bool,
    /// `enable_http2`: offer HTTP/2 to `https` targets (chosen in the TLS handshake); `false`
    /// keeps to HTTP/1.1. Default true.
    pub enable_http2: bool,
    /// `profiling_config.pprof_config`, resolved: Parca's five default endpoints first (in the
    /// order of [`DEFAULT_ENDPOINTS`], with the file's overrides), then the file's own entries in
    /// file order; `profiling_config.path_prefix` is already part of each `path`. Disabled
    /// endpoints stay in the list with `enabled: false`.
    #[serde(rename = "profiling_config", serialize_with = "serialize_endpoints")]
    pub endpoints: Vec<ProfileEndpoint>,
}

impl ScrapeConfig {
    /// The endpoints to scrape.
    pub fn enabled_endpoints(&self) -> impl Iterator<Item = &ProfileEndpoint> {
        self.endpoints.iter().filter(|e| e.enabled)
    }
}

/// `scheme`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scheme {
    /// `http`, the default.
    #[default]
    Http,
    /// `https`.
    Https,
}

impl Scheme {
    /// `http` or `https`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A profile to fetch from each target of a job (an entry of `pprof_config`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProfileEndpoint {
    /// The entry's key, e.g. `process_cpu`: the first part of the series' `__name__`
    /// (`process_cpu:samples:count:cpu:nanoseconds:delta`).
    #[serde(skip)]
    pub name: String,
    /// `enabled`: default true.
    pub enabled: bool,
    /// `path`: the HTTP path, `profiling_config.path_prefix` included. Required for entries that
    /// are not Parca defaults.
    pub path: String,
    /// `delta`: the target is asked for a window (`?seconds=N`, N from the interval) rather than
    /// a snapshot. Default true for `process_cpu`, false otherwise.
    pub delta: bool,
    /// `keep_sample_type`: if not empty, only these sample types of the profile are kept.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub keep_sample_type: Vec<SampleType>,
}

/// An item of `keep_sample_type`: a pprof sample type such as `{type: alloc_space, unit: bytes}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SampleType {
    /// `type`, e.g. `alloc_space`.
    #[serde(rename = "type")]
    pub kind: String,
    /// `unit`, e.g. `bytes`.
    pub unit: String,
}

/// An item of `static_configs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StaticConfig {
    /// `targets`: `host:port` addresses (IPv6 as `[::1]:7070`; no scheme, no path). Each
    /// becomes the `__address__` (and by default `instance`) label. At least one.
    pub targets: Vec<String>,
    /// `labels`: added to every target of this group.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawStaticConfig {
    targets: Vec<TargetAddress>,
    #[serde(default, deserialize_with = "label_set_opt")]
    labels: Option<BTreeMap<String, String>>,
}

impl FromRaw for StaticConfig {
    type Raw = RawStaticConfig;
    const EXPECTING: &'static str = "a static config with `targets`";

    fn from_raw(raw: RawStaticConfig) -> Result<Self, String> {
        if raw.targets.is_empty() {
            return Err("`targets` must list at least one target".to_owned());
        }
        Ok(StaticConfig {
            targets: raw.targets.into_iter().map(|t| t.0).collect(),
            labels: raw.labels.unwrap_or_default(),
        })
    }
}

/// A static target, checked where it is written.
struct TargetAddress(String);

impl<'de> Deserialize<'de> for TargetAddress {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        str_then(d, "a target address (host:port)", |text| {
            check_target_address(text)?;
            Ok(TargetAddress(text.to_owned()))
        })
    }
}

/// Checks that a target is `host`, `host:port` or `[ipv6]:port`: no scheme, no path.
pub(crate) fn check_target_address(address: &str) -> Result<(), String> {
    let bad = |why: &str| format!("invalid target address {address:?}: {why}");
    if address.is_empty() {
        return Err(bad("it is empty"));
    }
    if address.contains('/') {
        return Err(bad(
            "write host:port, without a scheme or path (set `scheme` and `path_prefix` instead)",
        ));
    }
    if address.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad("it contains a space or control character"));
    }
    let (host, port) = if let Some(rest) = address.strip_prefix('[') {
        let Some((host, after)) = rest.split_once(']') else {
            return Err(bad("missing `]` after the IPv6 address"));
        };
        match after {
            "" => (host, None),
            _ => match after.strip_prefix(':') {
                Some(port) => (host, Some(port)),
                None => return Err(bad("expected `:port` after `]`")),
            },
        }
    } else {
        match address.split_once(':') {
            None => (address, None),
            Some((_, port)) if port.contains(':') => {
                return Err(bad("an IPv6 address needs brackets, as in [::1]:7070"));
            }
            Some((host, port)) => (host, Some(port)),
        }
    };
    if host.is_empty() {
        return Err(bad("the host is empty"));
    }
    if let Some(port) = port {
        let ok = !port.is_empty()
            && port.bytes().all(|b| b.is_ascii_digit())
            && port.parse::<u32>().is_ok_and(|p| (1..=65535).contains(&p));
        if !ok {
            return Err(bad("the port must be a number from 1 to 65535"));
        }
    }
    Ok(())
}

/// An item of `file_sd_configs`: files listing target groups, in Prometheus' file_sd format.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileSdConfig {
    /// `files`: paths ending in `.json`, `.yml` or `.yaml`; the last path element may hold a
    /// `*` glob, e.g. `targets/*.json`. Relative paths are relative to the config file's folder
    /// (when loaded with [`load`](crate::load)). At least one.
    pub files: Vec<String>,
    /// `refresh_interval`: how often the files are re-read even without a change event.
    /// Default 5m.
    #[serde(serialize_with = "duration::serialize")]
    pub refresh_interval: Duration,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFileSdConfig {
    files: Vec<String>,
    #[serde(default, deserialize_with = "duration::deserialize_positive_opt")]
    refresh_interval: Option<Duration>,
}

impl FromRaw for FileSdConfig {
    type Raw = RawFileSdConfig;
    const EXPECTING: &'static str = "a file_sd config with `files`";

    fn from_raw(raw: RawFileSdConfig) -> Result<Self, String> {
        if raw.files.is_empty() {
            return Err("`files` must list at least one file".to_owned());
        }
        for (i, f) in raw.files.iter().enumerate() {
            if !valid_file_sd_name(f) {
                return Err(format!(
                    "files[{i}]: {f:?} is not valid for file discovery: it must end in .json, \
                     .yml or .yaml, with `*` only in the last path element"
                ));
            }
        }
        Ok(FileSdConfig {
            files: raw.files,
            refresh_interval: raw
                .refresh_interval
                .unwrap_or(DEFAULT_FILE_SD_REFRESH_INTERVAL),
        })
    }
}

/// Prometheus' `^[^*]*(\*[^/]*)?\.(json|yml|yaml|JSON|YML|YAML)$`.
fn valid_file_sd_name(name: &str) -> bool {
    let Some((stem, ext)) = name.rsplit_once('.') else {
        return false;
    };
    if !matches!(ext, "json" | "yml" | "yaml" | "JSON" | "YML" | "YAML") {
        return false;
    }
    match stem.split_once('*') {
        None => true,
        Some((_, after)) => !after.contains('/'),
    }
}

/// `basic_auth`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BasicAuth {
    /// `username`.
    pub username: String,
    /// `password`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password: Option<Secret>,
    /// `password_file`: read for each scrape instead of `password`.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_path_opt"
    )]
    pub password_file: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawBasicAuth {
    #[serde(default)]
    username: String,
    password: Option<Secret>,
    password_file: Option<PathBuf>,
}

impl FromRaw for BasicAuth {
    type Raw = RawBasicAuth;
    const EXPECTING: &'static str = "basic_auth settings";

    fn from_raw(raw: RawBasicAuth) -> Result<Self, String> {
        inline_or_file(
            "password",
            raw.password.as_ref(),
            raw.password_file.as_deref(),
        )?;
        Ok(BasicAuth {
            username: raw.username,
            password: raw.password,
            password_file: raw.password_file,
        })
    }
}

/// `authorization`: sends `Authorization: <type> <credentials>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Authorization {
    /// `type`: default `Bearer`. `Basic` is refused: use `basic_auth`.
    #[serde(rename = "type")]
    pub kind: String,
    /// `credentials`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credentials: Option<Secret>,
    /// `credentials_file`: read for each scrape instead of `credentials`.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_path_opt"
    )]
    pub credentials_file: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAuthorization {
    #[serde(rename = "type")]
    kind: Option<String>,
    credentials: Option<Secret>,
    credentials_file: Option<PathBuf>,
}

impl FromRaw for Authorization {
    type Raw = RawAuthorization;
    const EXPECTING: &'static str = "authorization settings";

    fn from_raw(raw: RawAuthorization) -> Result<Self, String> {
        let kind = raw.kind.unwrap_or_else(|| "Bearer".to_owned());
        if kind.eq_ignore_ascii_case("basic") {
            return Err(
                "authorization `type` cannot be `Basic`: use `basic_auth` instead".to_owned(),
            );
        }
        if kind.is_empty() || kind.contains(char::is_whitespace) {
            return Err(format!(
                "authorization `type` {kind:?} must be one word, such as Bearer"
            ));
        }
        inline_or_file(
            "credentials",
            raw.credentials.as_ref(),
            raw.credentials_file.as_deref(),
        )?;
        Ok(Authorization {
            kind,
            credentials: raw.credentials,
            credentials_file: raw.credentials_file,
        })
    }
}

/// `scrape_configs[i]` as written.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawScrapeConfig {
    pub(crate) job_name: String,
    #[serde(default, deserialize_with = "duration::deserialize_positive_opt")]
    pub(crate) scrape_interval: Option<Duration>,
    #[serde(default, deserialize_with = "duration::deserialize_positive_opt")]
    pub(crate) scrape_timeout: Option<Duration>,
    pub(crate) scheme: Option<Scheme>,
    pub(crate) params: Option<UniqueMap<String, Vec<String>>>,
    pub(crate) static_configs: Option<Vec<Checked<StaticConfig>>>,
    pub(crate) file_sd_configs: Option<Vec<Checked<FileSdConfig>>>,
    pub(crate) relabel_configs: Option<Vec<Checked<RelabelConfig>>>,
    pub(crate) basic_auth: Option<Checked<BasicAuth>>,
    pub(crate) authorization: Option<Checked<Authorization>>,
    pub(crate) bearer_token: Option<Secret>,
    pub(crate) bearer_token_file: Option<PathBuf>,
    pub(crate) oauth2: Option<Checked<OAuth2>>,
    pub(crate) tls_config: Option<Checked<TlsConfig>>,
    pub(crate) proxy_url: Option<ProxyUrl>,
    pub(crate) no_proxy: Option<String>,
    #[serde(default)]
    pub(crate) proxy_from_environment: bool,
    #[serde(default)]
    pub(crate) proxy_connect_header: BTreeMap<String, Vec<Secret>>,
    pub(crate) follow_redirects: Option<bool>,
    pub(crate) enable_http2: Option<bool>,
    pub(crate) profiling_config: Option<RawProfilingConfig>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawProfilingConfig {
    pprof_config: Option<PprofEntries>,
    path_prefix: Option<String>,
}

/// A `pprof_config` entry as written, checked against its name.
struct RawEndpoint {
    enabled: Option<bool>,
    path: Option<String>,
    delta: Option<bool>,
    keep_sample_type: Vec<SampleType>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEndpointFields {
    enabled: Option<bool>,
    path: Option<String>,
    delta: Option<bool>,
    keep_sample_type: Option<Vec<SampleType>>,
}

/// `pprof_config`: entries in file order, names checked, each entry checked knowing its name.
struct PprofEntries(Vec<(String, RawEndpoint)>);

impl<'de> Deserialize<'de> for PprofEntries {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct EntriesVisitor;
        impl<'de> Visitor<'de> for EntriesVisitor {
            type Value = PprofEntries;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping from profile names to endpoints")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<PprofEntries, A::Error> {
                let mut out: Vec<(String, RawEndpoint)> = Vec::new();
                while let Some(name) = map.next_key::<ProfileName>()? {
                    let name = name.0;
                    if out.iter().any(|(n, _)| *n == name) {
                        return Err(de::Error::custom(format!(
                            "profile `{name}` is given twice"
                        )));
                    }
                    let entry = map.next_value_seed(EndpointSeed { name: &name })?;
                    out.push((name, entry));
                }
                Ok(PprofEntries(out))
            }
        }
        d.deserialize_map(EntriesVisitor)
    }
}

/// A `pprof_config` key: it becomes the first part of `__name__`, so the same rule as a label
/// name (no `:`).
struct ProfileName(String);

impl<'de> Deserialize<'de> for ProfileName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        str_then(d, "a profile name", |name| {
            if parca_querylang::is_valid_label_name(name) {
                Ok(ProfileName(name.to_owned()))
            } else {
                Err(format!(
                    "invalid profile name {name:?}: use letters, digits and `_`, not starting \
                     with a digit"
                ))
            }
        })
    }
}

struct EndpointSeed<'a> {
    name: &'a str,
}

impl<'de> DeserializeSeed<'de> for EndpointSeed<'_> {
    type Value = RawEndpoint;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<RawEndpoint, D::Error> {
        let name = self.name;
        map_then(d, "a pprof endpoint", |raw: RawEndpointFields| {
            let is_default = DEFAULT_ENDPOINTS.iter().any(|(n, _, _)| *n == name);
            if !is_default && raw.path.is_none() {
                let defaults: Vec<&str> = DEFAULT_ENDPOINTS.iter().map(|(n, _, _)| *n).collect();
                return Err(format!(
                    "profile `{name}` needs a `path`: only Parca's defaults ({}) have one",
                    defaults.join(", ")
                ));
            }
            if let Some(path) = raw.path.as_ref().filter(|p| !p.starts_with('/')) {
                return Err(format!("`path` {path:?} must start with `/`"));
            }
            Ok(RawEndpoint {
                enabled: raw.enabled,
                path: raw.path,
                delta: raw.delta,
                keep_sample_type: raw.keep_sample_type.unwrap_or_default(),
            })
        })
    }
}

/// Defaults for jobs, from `global`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct JobDefaults {
    pub(crate) scrape_interval: Duration,
    /// `global.scrape_timeout`, if the file sets it.
    pub(crate) scrape_timeout: Option<Duration>,
}

impl ScrapeConfig {
    /// The HTTP client settings of something that is not a scrape job (Alertmanagers, remote
    /// write receivers), written with a scrape job's keys: `raw` resolved and checked as a
    /// job named `job_name`, with the global defaults (its intervals and endpoints unused).
    pub(crate) fn client_only(job_name: &str, raw: RawScrapeConfig) -> Result<Self, String> {
        let defaults = JobDefaults {
            scrape_interval: DEFAULT_SCRAPE_INTERVAL,
            scrape_timeout: None,
        };
        let raw = RawScrapeConfig {
            job_name: job_name.to_owned(),
            ..raw
        };
        ScrapeConfig::resolve(raw, &defaults, &[])
    }

    /// Applies the defaults and checks the rules that concern the job as a whole. `earlier`:
    /// the jobs before this one, for unique names.
    #[expect(
        clippy::too_many_lines,
        reason = "checks a scrape config and applies Prometheus' defaults to it key by key"
    )]
    fn resolve(
        raw: RawScrapeConfig,
        defaults: &JobDefaults,
        earlier: &[ScrapeConfig],
    ) -> Result<ScrapeConfig, String> {
        let job_name = raw.job_name;
        if job_name.is_empty() {
            return Err("`job_name` is empty".to_owned());
        }
        if let Some(i) = earlier.iter().position(|j| j.job_name == job_name) {
            return Err(format!(
                "job_name {job_name:?} is already used by scrape_configs[{i}]"
            ));
        }

        let authorization = match (raw.authorization, raw.bearer_token, raw.bearer_token_file) {
            (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
                return Err(
                    "`authorization` cannot be combined with `bearer_token` or `bearer_token_file`"
                        .to_owned(),
                );
            }
            (_, Some(_), Some(_)) => {
                return Err(
                    "at most one of `bearer_token` and `bearer_token_file` may be set".to_owned(),
                );
            }
            (Some(a), None, None) => Some(a.0),
            (None, token, file) if token.is_some() || file.is_some() => Some(Authorization {
                kind: "Bearer".to_owned(),
                credentials: token,
                credentials_file: file,
            }),
            (None, _, _) => None,
        };
        let basic_auth = raw.basic_auth.map(|b| b.0);
        let oauth2 = raw.oauth2.map(|o| o.0);
        let n_auth = [
            basic_auth.is_some(),
            authorization.is_some(),
            oauth2.is_some(),
        ]
        .iter()
        .filter(|set| **set)
        .count();
        if n_auth > 1 {
            return Err(
                "at most one of `basic_auth`, `authorization` (or `bearer_token`) and `oauth2` \
                 may be set"
                    .to_owned(),
            );
        }
        let proxy = ProxyConfig::from_parts(
            raw.proxy_url.map(|u| u.0),
            raw.no_proxy,
            raw.proxy_from_environment,
            raw.proxy_connect_header,
        )?;

        let endpoints = resolve_endpoints(raw.profiling_config);

        let scrape_interval = raw.scrape_interval.unwrap_or(defaults.scrape_interval);
        let (scrape_timeout, timeout_from) = match (raw.scrape_timeout, defaults.scrape_timeout) {
            (Some(t), _) => (t, ""),
            (None, Some(t)) => (t, ", from `global.scrape_timeout`"),
            (None, None) => (scrape_interval + SCRAPE_TIMEOUT_MARGIN, ""),
        };
        if let Some(delta) = endpoints.iter().find(|e| e.enabled && e.delta)
            && scrape_timeout <= scrape_interval
        {
            return Err(format!(
                "`scrape_timeout` ({}{timeout_from}) must be greater than `scrape_interval` \
                 ({}): the delta profile `{}` is asked for a window as long as the interval",
                format_duration(scrape_timeout),
                format_duration(scrape_interval),
                delta.name,
            ));
        }

        Ok(ScrapeConfig {
            job_name,
            scrape_interval,
            scrape_timeout,
            scheme: raw.scheme.unwrap_or_default(),
            params: raw
                .params
                .map(|p| p.0.into_iter().collect())
                .unwrap_or_default(),
            static_configs: unwrap_list(raw.static_configs),
            file_sd_configs: unwrap_list(raw.file_sd_configs),
            relabel_configs: unwrap_list(raw.relabel_configs),
            basic_auth,
            authorization,
            oauth2,
            tls_config: raw.tls_config.map(|t| t.0).unwrap_or_default(),
            proxy,
            follow_redirects: raw.follow_redirects.unwrap_or(true),
            enable_http2: raw.enable_http2.unwrap_or(true),
            endpoints,
        })
    }

    /// Makes the file paths relative to `dir` absolute (Prometheus' `SetDirectory`).
    pub(crate) fn set_directory(&mut self, dir: &Path) {
        let join = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = dir.join(&*p);
            }
        };
        if let Some(b) = &mut self.basic_auth {
            b.password_file.as_mut().map(join);
        }
        if let Some(a) = &mut self.authorization {
            a.credentials_file.as_mut().map(join);
        }
        if let Some(o) = &mut self.oauth2 {
            o.client_secret_file.as_mut().map(join);
        }
        let oauth2_tls = self.oauth2.as_mut().map(|o| &mut o.tls_config);
        for tls in std::iter::once(&mut self.tls_config).chain(oauth2_tls) {
            for p in [&mut tls.ca_file, &mut tls.cert_file, &mut tls.key_file]
                .into_iter()
                .flatten()
            {
                join(p);
            }
        }
        for sd in &mut self.file_sd_configs {
            for f in &mut sd.files {
                if Path::new(f.as_str()).is_relative() {
                    *f = dir.join(&*f).to_string_lossy().into_owned();
                }
            }
        }
    }
}

/// Parca's merge: defaults first, a file entry with a default's name overrides the fields it
/// sets, other entries are added; then `path_prefix` goes in front of every path.
fn resolve_endpoints(raw: Option<RawProfilingConfig>) -> Vec<ProfileEndpoint> {
    let (entries, prefix) = match raw {
        Some(p) => (
            p.pprof_config.map(|e| e.0).unwrap_or_default(),
            p.path_prefix,
        ),
        None => (Vec::new(), None),
    };
    let mut entries: Vec<(String, Option<RawEndpoint>)> =
        entries.into_iter().map(|(n, e)| (n, Some(e))).collect();
    let mut out = Vec::with_capacity(DEFAULT_ENDPOINTS.len() + entries.len());
    for (name, path, delta) in DEFAULT_ENDPOINTS {
        let given = entries
            .iter_mut()
            .find(|(n, _)| n == name)
            .and_then(|(_, e)| e.take());
        let endpoint = match given {
            None => ProfileEndpoint {
                name: name.to_owned(),
                enabled: true,
                path: path.to_owned(),
                delta,
                keep_sample_type: Vec::new(),
            },
            Some(e) => ProfileEndpoint {
                name: name.to_owned(),
                enabled: e.enabled.unwrap_or(true),
                path: e.path.unwrap_or_else(|| path.to_owned()),
                delta: e.delta.unwrap_or(delta),
                keep_sample_type: e.keep_sample_type,
            },
        };
        out.push(endpoint);
    }
    for (name, e) in entries {
        let Some(e) = e else { continue };
        out.push(ProfileEndpoint {
            name,
            enabled: e.enabled.unwrap_or(true),
            path: e.path.unwrap_or_default(),
            delta: e.delta.unwrap_or(false),
            keep_sample_type: e.keep_sample_type,
        });
    }
    if let Some(prefix) = prefix.filter(|p| !p.is_empty()) {
        for e in &mut out {
            e.path = join_url_path(&prefix, &e.path);
        }
    }
    out
}

/// Go's `path.Join(prefix, path)` (which Parca uses), always starting with `/`: `..` and `.`
/// resolved, repeated and trailing slashes removed.
fn join_url_path(prefix: &str, path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in prefix.split('/').chain(path.split('/')) {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    format!("/{}", parts.join("/"))
}

fn serialize_endpoints<S: Serializer>(
    endpoints: &[ProfileEndpoint],
    s: S,
) -> Result<S::Ok, S::Error> {
    struct Entries<'a>(&'a [ProfileEndpoint]);
    impl Serialize for Entries<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let mut map = s.serialize_map(Some(self.0.len()))?;
            for e in self.0 {
                map.serialize_entry(&e.name, e)?;
            }
            map.end()
        }
    }
    let mut map = s.serialize_map(Some(1))?;
    map.serialize_entry("pprof_config", &Entries(endpoints))?;
    map.end()
}

/// `scrape_configs`, decoded knowing the `global` defaults.
pub(crate) struct ScrapeConfigsSeed<'a>(pub(crate) &'a JobDefaults);

impl<'de> DeserializeSeed<'de> for ScrapeConfigsSeed<'_> {
    type Value = Vec<ScrapeConfig>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<ScrapeConfig>, D::Error> {
        struct ListVisitor<'a>(&'a JobDefaults);
        impl<'de> Visitor<'de> for ListVisitor<'_> {
            type Value = Vec<ScrapeConfig>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of scrape configs")
            }
            fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Vec::new())
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Vec::new())
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
                d.deserialize_seq(self)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out: Vec<ScrapeConfig> = Vec::new();
                loop {
                    let seed = JobSeed {
                        defaults: self.0,
                        earlier: &out,
                    };
                    match seq.next_element_seed(seed)? {
                        Some(job) => out.push(job),
                        None => return Ok(out),
                    }
                }
            }
        }
        d.deserialize_option(ListVisitor(self.0))
    }
}

struct JobSeed<'a> {
    defaults: &'a JobDefaults,
    earlier: &'a [ScrapeConfig],
}

impl<'de> DeserializeSeed<'de> for JobSeed<'_> {
    type Value = ScrapeConfig;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<ScrapeConfig, D::Error> {
        map_then(d, "a scrape config", |raw: RawScrapeConfig| {
            ScrapeConfig::resolve(raw, self.defaults, self.earlier)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_addresses() {
        for ok in [
            "localhost",
            "localhost:7070",
            "127.0.0.1:7070",
            "[::1]:7070",
            "[::1]",
            "app.example.com:65535",
        ] {
            assert_eq!(check_target_address(ok), Ok(()), "{ok}");
        }
        let cases = [
            ("", "invalid target address \"\": it is empty"),
            (
                "http://a:1",
                "invalid target address \"http://a:1\": write host:port, without a scheme or path \
                 (set `scheme` and `path_prefix` instead)",
            ),
            (
                "a:1/x",
                "invalid target address \"a:1/x\": write host:port, without a scheme or path \
                 (set `scheme` and `path_prefix` instead)",
            ),
            (
                "::1:7070",
                "invalid target address \"::1:7070\": an IPv6 address needs brackets, as in \
                 [::1]:7070",
            ),
            (
                "a:0",
                "invalid target address \"a:0\": the port must be a number from 1 to 65535",
            ),
            (
                "a:70000",
                "invalid target address \"a:70000\": the port must be a number from 1 to 65535",
            ),
            (
                "a:",
                "invalid target address \"a:\": the port must be a number from 1 to 65535",
            ),
            (":80", "invalid target address \":80\": the host is empty"),
            (
                "[::1",
                "invalid target address \"[::1\": missing `]` after the IPv6 address",
            ),
            (
                "[::1]7070",
                "invalid target address \"[::1]7070\": expected `:port` after `]`",
            ),
            (
                "a b:1",
                "invalid target address \"a b:1\": it contains a space or control character",
            ),
        ];
        for (address, message) in cases {
            assert_eq!(check_target_address(address), Err(message.to_owned()));
        }
    }

    #[test]
    fn file_sd_names() {
        for ok in ["a.json", "dir/*.yaml", "/etc/t/a*b.YML", "x.yml"] {
            assert!(valid_file_sd_name(ok), "{ok}");
        }
        for bad in ["a.txt", "a", "*/a.json", "dir/*/x.json", ".json/x"] {
            assert!(!valid_file_sd_name(bad), "{bad}");
        }
    }

    #[test]
    fn url_paths_join_as_go_does() {
        assert_eq!(
            join_url_path("/x", "/debug/pprof/allocs"),
            "/x/debug/pprof/allocs"
        );
        assert_eq!(join_url_path("/x/", "/debug/"), "/x/debug");
        assert_eq!(join_url_path("x", "a"), "/x/a");
        assert_eq!(join_url_path("/x/../y", "./a//b"), "/y/a/b");
    }
}
