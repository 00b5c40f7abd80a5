//! How a job's requests are made: its HTTP client (TLS, proxy, redirects, HTTP/2) and, with
//! `oauth2`, the client-credentials token it sends, all as Prometheus' HTTP client settings say.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parca_config::{OAuth2, ProxyConfig, ScrapeConfig, TlsConfig};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use crate::ScrapeError;
use crate::target::Target;

/// What a loop makes its requests with.
#[derive(Clone)]
pub(crate) struct JobHttp {
    /// The HTTP client.
    pub client: reqwest::Client,
    /// The job's OAuth 2.0 token, shared by its loops.
    pub oauth2: Option<Arc<TokenSource>>,
}

impl JobHttp {
    /// The job's client and token source; an error (an unreadable CA file, say) is what every
    /// scrape of the job reports.
    pub(crate) fn for_job(config: &ScrapeConfig) -> Result<JobHttp, String> {
        Ok(JobHttp {
            client: client(config, None)?,
            oauth2: config
                .oauth2
                .as_ref()
                .map(|o| TokenSource::new(o).map(Arc::new))
                .transpose()?,
        })
    }

    /// The client of one target's loop: the job's, except with `tls_config.server_name`, where
    /// the request names that server (SNI, certificate check, and so the connection pool) and
    /// so needs a client of its own that connects to the target's host, as Prometheus does.
    pub(crate) fn for_target(
        job: &Result<JobHttp, String>,
        config: &ScrapeConfig,
        target: &Target,
    ) -> Result<JobHttp, String> {
        let job = job.clone()?;
        let Some(server_name) = &config.tls_config.server_name else {
            return Ok(job);
        };
        let url = target.url("/", None);
        let host = reqwest::Url::parse(&url)
            .ok()
            .and_then(|u| u.host_str().map(|h| h.trim_matches(['[', ']']).to_owned()))
            .ok_or_else(|| format!("the target URL `{url}` has no host to connect to"))?;
        Ok(JobHttp {
            client: client(
                config,
                Some(ConnectTo {
                    server_name: server_name.clone(),
                    host,
                }),
            )?,
            oauth2: job.oauth2,
        })
    }
}

/// The HTTP client of a job: TLS, proxy (none from the environment unless asked, as
/// Prometheus), redirects, HTTP/2. With `connect_to`, requests for its server name go to its
/// host instead.
fn client(config: &ScrapeConfig, connect_to: Option<ConnectTo>) -> Result<reqwest::Client, String> {
    let mut builder = base_builder(&config.tls_config, &config.proxy)?
        .pool_idle_timeout(config.scrape_interval * 2)
        .redirect(if config.follow_redirects {
            reqwest::redirect::Policy::limited(10)
        } else {
            reqwest::redirect::Policy::none()
        });
    if !config.enable_http2 {
        builder = builder.http1_only();
    }
    if let Some(connect_to) = connect_to {
        builder = builder.dns_resolver(Arc::new(connect_to));
    }
    builder
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))
}

/// A client builder with the user agent, TLS and proxy settings, for targets and token URLs.
fn base_builder(tls: &TlsConfig, proxy: &ProxyConfig) -> Result<reqwest::ClientBuilder, String> {
    let mut builder = reqwest::Client::builder()
        .user_agent(concat!("parca-rs/", env!("CARGO_PKG_VERSION")))
        .no_proxy()
        .danger_accept_invalid_certs(tls.insecure_skip_verify);
    if let Some(ca) = &tls.ca_file {
        let pem = std::fs::read(ca)
            .map_err(|e| format!("cannot read ca_file `{}`: {e}", ca.display()))?;
        let certificate = reqwest::Certificate::from_pem(&pem)
            .map_err(|e| format!("ca_file `{}` is not a PEM certificate: {e}", ca.display()))?;
        builder = builder.add_root_certificate(certificate);
    }
    if let (Some(cert), Some(key)) = (&tls.cert_file, &tls.key_file) {
        let mut pem = std::fs::read(cert)
            .map_err(|e| format!("cannot read cert_file `{}`: {e}", cert.display()))?;
        pem.extend(
            std::fs::read(key)
                .map_err(|e| format!("cannot read key_file `{}`: {e}", key.display()))?,
        );
        let identity = reqwest::Identity::from_pem(&pem).map_err(|e| {
            format!("cert_file and key_file are not a PEM certificate and key: {e}")
        })?;
        builder = builder.identity(identity);
    }
    for proxy in proxies(proxy)? {
        builder = builder.proxy(proxy);
    }
    Ok(builder)
}

/// The proxies `proxy_url` or `proxy_from_environment` name, with `no_proxy` and
/// `proxy_connect_header` applied.
fn proxies(config: &ProxyConfig) -> Result<Vec<reqwest::Proxy>, String> {
    let mut headers = HeaderMap::new();
    for (name, values) in &config.proxy_connect_header {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|e| format!("proxy_connect_header `{name}`: {e}"))?;
        for value in values {
            let value = HeaderValue::from_str(value.expose())
                .map_err(|e| format!("proxy_connect_header `{name}`: {e}"))?;
            headers.append(name.clone(), value);
        }
    }
    let finish = |proxy: reqwest::Proxy, no_proxy: Option<reqwest::NoProxy>| {
        let proxy = proxy.no_proxy(no_proxy);
        if headers.is_empty() {
            proxy
        } else {
            proxy.headers(headers.clone())
        }
    };
    let bad = |url: &str, e: reqwest::Error| format!("invalid proxy URL `{url}`: {e}");
    if let Some(url) = &config.proxy_url {
        let proxy = reqwest::Proxy::all(url.as_str()).map_err(|e| bad(url.as_str(), e))?;
        let no_proxy = config
            .no_proxy
            .as_deref()
            .and_then(reqwest::NoProxy::from_string);
        return Ok(vec![finish(proxy, no_proxy)]);
    }
    if !config.proxy_from_environment {
        return Ok(Vec::new());
    }
    // Go's `http.ProxyFromEnvironment`: upper case first, then lower case.
    let env = |name: &str| {
        std::env::var(name)
            .or_else(|_| std::env::var(name.to_lowercase()))
            .ok()
            .filter(|v| !v.is_empty())
    };
    let mut out = Vec::new();
    if let Some(url) = env("HTTP_PROXY") {
        let proxy = reqwest::Proxy::http(&url).map_err(|e| bad(&url, e))?;
        out.push(finish(proxy, reqwest::NoProxy::from_env()));
    }
    if let Some(url) = env("HTTPS_PROXY") {
        let proxy = reqwest::Proxy::https(&url).map_err(|e| bad(&url, e))?;
        out.push(finish(proxy, reqwest::NoProxy::from_env()));
    }
    Ok(out)
}

/// Resolves `server_name` to the addresses of `host` (looked up afresh each time, so DNS changes
/// are followed) and every other name as usual.
struct ConnectTo {
    server_name: String,
    host: String,
}

impl reqwest::dns::Resolve for ConnectTo {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = if name.as_str().eq_ignore_ascii_case(&self.server_name) {
            self.host.clone()
        } else {
            name.as_str().to_owned()
        };
        Box::pin(async move {
            let addrs: Vec<std::net::SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let addrs: reqwest::dns::Addrs = Box::new(addrs.into_iter());
            Ok(addrs)
        })
    }
}

/// A token is renewed this long before it expires, so that no request carries a stale one.
const RENEW_BEFORE_EXPIRY: Duration = Duration::from_secs(10);

/// A job's OAuth 2.0 client-credentials token: fetched on first use, kept until shortly before
/// it expires, then fetched again; shared by the job's loops.
pub(crate) struct TokenSource {
    config: OAuth2,
    client: reqwest::Client,
    token: tokio::sync::Mutex<Option<Token>>,
}

struct Token {
    /// The `Authorization` header value, e.g. `Bearer abc`.
    header: String,
    expires: Option<Instant>,
}

/// How the client authenticates to the token endpoint: Basic auth first, as Go's
/// `golang.org/x/oauth2` tries, then the credentials in the form if the server refuses that.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ClientAuth {
    Header,
    Form,
}

impl TokenSource {
    fn new(config: &OAuth2) -> Result<TokenSource, String> {
        let client = base_builder(&config.tls_config, &config.proxy)
            .and_then(|b| {
                b.timeout(Duration::from_secs(30))
                    .build()
                    .map_err(|e| e.to_string())
            })
            .map_err(|e| format!("oauth2: {e}"))?;
        Ok(TokenSource {
            config: config.clone(),
            client,
            token: tokio::sync::Mutex::new(None),
        })
    }

    /// The `Authorization` header value to send, fetching a token if there is no valid one.
    pub(crate) async fn authorization(&self) -> Result<String, ScrapeError> {
        let mut token = self.token.lock().await;
        if let Some(t) = &*token
            && t.expires
                .is_none_or(|at| Instant::now() + RENEW_BEFORE_EXPIRY < at)
        {
            return Ok(t.header.clone());
        }
        let fresh = match self.fetch(ClientAuth::Header).await {
            Err(FetchError::Refused(_)) => self.fetch(ClientAuth::Form).await,
            other => other,
        }
        .map_err(|e| ScrapeError::OAuth2 {
            url: self.config.token_url.as_str().to_owned(),
            why: e.to_string(),
        })?;
        let header = fresh.header.clone();
        *token = Some(fresh);
        Ok(header)
    }

    #[expect(
        clippy::too_many_lines,
        reason = "one scrape: request, status, size limit, decompression and timing share the client's state"
    )]
    async fn fetch(&self, auth: ClientAuth) -> Result<Token, FetchError> {
        let c = &self.config;
        let secret = match (&c.client_secret, &c.client_secret_file) {
            (Some(s), _) => s.expose().to_owned(),
            (None, Some(path)) => {
                read_secret(path).map_err(|e| FetchError::Other(e.to_string()))?
            }
            (None, None) => String::new(),
        };
        let mut form: Vec<(&str, &str)> = vec![("grant_type", "client_credentials")];
        let scope = c.scopes.join(" ");
        if !scope.is_empty() {
            form.push(("scope", &scope));
        }
        for (k, v) in &c.endpoint_params {
            form.push((k, v));
        }
        let mut request = self.client.post(c.token_url.as_str());
        match auth {
            // RFC 6749 §2.3.1: both parts form-URL-encoded before Basic.
            ClientAuth::Header => {
                let encode = |s: &str| form_urlencoded::byte_serialize(s.as_bytes()).collect();
                let id: String = encode(&c.client_id);
                let secret: String = encode(&secret);
                request = request.basic_auth(id, Some(secret));
            }
            ClientAuth::Form => {
                form.push(("client_id", &c.client_id));
                form.push(("client_secret", &secret));
            }
        }
        let body: String = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(&form)
            .finish();
        let response = request
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(body)
            .send()
            .await
            .map_err(|e| FetchError::Other(parca_vocab::with_causes(&e)))?;
        let status = response.status();
        let text = response
            .text()
            .await
            .map_err(|e| FetchError::Other(e.to_string()))?;
        if !status.is_success() {
            let why = format!(
                "the token endpoint answered HTTP {}: {}",
                status.as_u16(),
                text.trim().chars().take(200).collect::<String>()
            );
            return Err(
                if matches!(status.as_u16(), 400 | 401) && auth == ClientAuth::Header {
                    FetchError::Refused(why)
                } else {
                    FetchError::Other(why)
                },
            );
        }
        #[derive(serde::Deserialize)]
        struct Answer {
            access_token: String,
            #[serde(default)]
            token_type: Option<String>,
            #[serde(default)]
            expires_in: Option<f64>,
        }
        let answer: Answer = serde_json::from_str(&text).map_err(|e| {
            FetchError::Other(format!(
                "the token endpoint's answer is not a token (JSON with access_token): {e}"
            ))
        })?;
        // As Go's oauth2: a "bearer" type is sent as "Bearer".
        let kind = match answer.token_type.as_deref() {
            None | Some("") => "Bearer".to_owned(),
            Some(t) if t.eq_ignore_ascii_case("bearer") => "Bearer".to_owned(),
            Some(t) => t.to_owned(),
        };
        Ok(Token {
            header: format!("{kind} {}", answer.access_token),
            expires: answer
                .expires_in
                .filter(|s| *s > 0.0)
                .map(|s| Instant::now() + Duration::from_secs_f64(s)),
        })
    }
}

/// Why a token request failed: `Refused` may succeed with the credentials in the form.
#[derive(Debug)]
enum FetchError {
    Refused(String),
    Other(String),
}

impl std::fmt::Display for FetchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FetchError::Refused(why) | FetchError::Other(why) => f.write_str(why),
        }
    }
}

/// `request` with the job's credentials: `basic_auth`, `authorization` (secrets read from their
/// files at each request, so a rotated file takes effect), or an `oauth2` token.
pub(crate) async fn authorize(
    config: &ScrapeConfig,
    http: &JobHttp,
    mut request: reqwest::RequestBuilder,
) -> Result<reqwest::RequestBuilder, ScrapeError> {
    if let Some(auth) = &config.basic_auth {
        let password = match (&auth.password, &auth.password_file) {
            (Some(p), _) => Some(p.expose().to_owned()),
            (None, Some(path)) => Some(read_secret(path)?),
            (None, None) => None,
        };
        request = request.basic_auth(&auth.username, password);
    }
    if let Some(auth) = &config.authorization {
        let credentials = match (&auth.credentials, &auth.credentials_file) {
            (Some(c), _) => c.expose().to_owned(),
            (None, Some(path)) => read_secret(path)?,
            (None, None) => String::new(),
        };
        request = request.header(
            reqwest::header::AUTHORIZATION,
            format!("{} {credentials}", auth.kind),
        );
    }
    if let Some(tokens) = &http.oauth2 {
        request = request.header(
            reqwest::header::AUTHORIZATION,
            tokens.authorization().await?,
        );
    }
    Ok(request)
}

/// Servers reached as a scrape job's settings say, for callers other than the scrape loops (a
/// querier's shards): the job's targets (static and file_sd groups, relabeled, files read
/// again at each call) and its requests (TLS, proxy, redirects, credentials).
pub struct JobClient {
    config: ScrapeConfig,
    http: JobHttp,
}

impl JobClient {
    /// The client of `config`; an error names the setting that cannot be used (an unreadable
    /// CA file, say).
    pub fn new(config: ScrapeConfig) -> Result<JobClient, String> {
        let http = JobHttp::for_job(&config)?;
        Ok(JobClient { config, http })
    }

    /// The job's name.
    pub fn job(&self) -> &str {
        &self.config.job_name
    }

    /// The base URL (`scheme://address`) of each target discovery finds now.
    pub fn targets(&self) -> Vec<String> {
        crate::discovery::discover(&self.config)
            .active
            .iter()
            .map(|t| t.url("", None))
            .collect()
    }

    /// A request of `method` for `url`, with the job's credentials.
    pub async fn request(
        &self,
        method: reqwest::Method,
        url: &str,
    ) -> Result<reqwest::RequestBuilder, ScrapeError> {
        authorize(
            &self.config,
            &self.http,
            self.http.client.request(method, url),
        )
        .await
    }
}

/// A credential kept in a file (`password_file`, `credentials_file`), trimmed.
fn read_secret(path: &std::path::Path) -> Result<String, ScrapeError> {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_owned())
        .map_err(|e| ScrapeError::Credentials {
            path: path.display().to_string(),
            why: e.to_string(),
        })
}
