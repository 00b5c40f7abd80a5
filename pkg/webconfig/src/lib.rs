//! Prometheus' web configuration file for our HTTP servers (the server's API and UI, the
//! agent's pprof port): TLS, client certificates, basic auth with bcrypt, bearer tokens, a rate
//! limit and response headers, with the keys and meanings of exporter-toolkit's
//! `web-config.yml`, so that a file written for Prometheus or an exporter works unchanged.
//!
//! [`Security`] is the live form of the file: [`Security::accept`] turns an accepted TCP
//! connection into a [`Connection`] (TLS handshake when configured), and
//! [`Security::authorize`], [`Security::rate_limited`] and [`Security::response_headers`] are
//! what a server asks of every request.
//!
//! # Design constraints
//!
//! - No HTTP library appears here: headers come in as bytes and go out as strings, so each
//!   server keeps its own hyper types.
//! - The file and every file it names (certificate, key, client CAs) and the bearer token file
//!   are looked at on every new connection, as exporter-toolkit reads its file per connection:
//!   a renewed certificate or a rotated password takes effect without a restart. A change that
//!   does not load is logged and the last good configuration stays in force; at start, a bad
//!   file is an error.
//! - A refusal tells the client nothing of what was wrong (user, password or token): 401 with a
//!   challenge. Unknown users cost a bcrypt as known ones do; tokens are compared as SHA-256
//!   digests in constant time.
//!
//! # Example
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let security = parca_webconfig::Security::load(Some("web.yml".as_ref()), None)?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:7070").await?;
//! let (stream, _) = listener.accept().await?;
//! let connection = security.accept(stream).await?;
//! // Serve HTTP on `connection`; per request:
//! let allowed = security.authorize(Some(b"Basic YWxpY2U6czNjcmV0")).await.is_ok();
//! # Ok(()) }
//! ```

mod auth;
mod conn;
mod error;
mod file;
mod tls;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

pub use auth::Denied;
pub use conn::{AcceptError, Connection};
pub use error::Error;
pub use file::{HttpServerConfig, RateLimit, TlsServerConfig, WebConfigFile};

/// The web configuration in force, reloaded when its files change.
pub struct Security {
    web_config_file: Option<PathBuf>,
    bearer_token_file: Option<PathBuf>,
    state: Mutex<State>,
}

impl std::fmt::Debug for Security {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Security")
            .field("web_config_file", &self.web_config_file)
            .field("bearer_token_file", &self.bearer_token_file)
            .finish_non_exhaustive()
    }
}

struct State {
    /// What the files looked like when `loaded` was made (or last failed to load).
    stamps: Vec<Stamp>,
    loaded: Arc<Loaded>,
}

/// A file's identity and change time; `None` when it could not be looked at.
type Stamp = Option<(SystemTime, u64, u64)>;

/// One loaded configuration.
struct Loaded {
    tls: Option<tokio_rustls::TlsAcceptor>,
    http2: bool,
    headers: Arc<[(String, String)]>,
    credentials: Arc<auth::Credentials>,
    bucket: Option<Mutex<Bucket>>,
    /// The files whose change means a reload.
    watched: Vec<PathBuf>,
}

impl Security {
    /// No TLS, no credentials: what a server without `--web-config-file` serves.
    pub fn open() -> Security {
        Security {
            web_config_file: None,
            bearer_token_file: None,
            state: Mutex::new(State {
                stamps: Vec::new(),
                loaded: Arc::new(Loaded {
                    tls: None,
                    http2: true,
                    headers: Arc::new([]),
                    credentials: Arc::new(auth::Credentials::new(Default::default(), Vec::new())),
                    bucket: None,
                    watched: Vec::new(),
                }),
            }),
        }
    }

    /// Loads `web_config_file` (exporter-toolkit's format) and `bearer_token_file` (one token
    /// per line; blank lines and lines starting with `#` are skipped). Either may be absent.
    pub fn load(
        web_config_file: Option<&Path>,
        bearer_token_file: Option<&Path>,
    ) -> Result<Security, Error> {
        let loaded = load(web_config_file, bearer_token_file)?;
        let stamps = stamps(&loaded.watched);
        Ok(Security {
            web_config_file: web_config_file.map(Path::to_owned),
            bearer_token_file: bearer_token_file.map(Path::to_owned),
            state: Mutex::new(State {
                stamps,
                loaded: Arc::new(loaded),
            }),
        })
    }

    /// The configuration in force, reloaded first when a file changed.
    fn current(&self) -> Arc<Loaded> {
        let mut state = self.state.lock().expect("web config lock");
        let now = stamps(&state.loaded.watched);
        if now != state.stamps {
            state.stamps = now;
            match load(
                self.web_config_file.as_deref(),
                self.bearer_token_file.as_deref(),
            ) {
                Ok(loaded) => {
                    // The new file may name other files: watch those from now on.
                    state.stamps = stamps(&loaded.watched);
                    state.loaded = Arc::new(loaded);
                    tracing::info!("web configuration reloaded");
                }
                Err(error) => tracing::error!(
                    error = %error,
                    "web configuration not reloaded; the last good one stays in force"
                ),
            }
        }
        Arc::clone(&state.loaded)
    }

    /// The configuration as last loaded, without looking at the files (per request).
    fn loaded(&self) -> Arc<Loaded> {
        Arc::clone(&self.state.lock().expect("web config lock").loaded)
    }

    /// Whether responses are served over TLS.
    pub fn tls_enabled(&self) -> bool {
        self.loaded().tls.is_some()
    }

    /// Whether HTTP/2 may be served (`http_server_config.http2`).
    pub fn http2_enabled(&self) -> bool {
        self.loaded().http2
    }

    /// Makes a freshly accepted connection ready for HTTP: the TLS handshake when TLS is on,
    /// after reloading the configuration if any of its files changed.
    pub async fn accept(&self, stream: tokio::net::TcpStream) -> Result<Connection, AcceptError> {
        let loaded = self.current();
        match &loaded.tls {
            None => Ok(Connection::Plain(stream)),
            Some(acceptor) => conn::handshake(stream, acceptor.clone()).await,
        }
    }

    /// Checks a request's `Authorization` header value against the configured users and
    /// tokens; passes everything when none are configured.
    pub async fn authorize(&self, authorization: Option<&[u8]>) -> Result<(), Denied> {
        let credentials = Arc::clone(&self.loaded().credentials);
        credentials.check(authorization).await
    }

    /// Whether credentials are required at all.
    pub fn auth_required(&self) -> bool {
        self.loaded().credentials.required()
    }

    /// Takes a token from `rate_limit`'s bucket; `true` when there is none left and the
    /// request is to be answered 429.
    pub fn rate_limited(&self) -> bool {
        let loaded = self.loaded();
        let Some(bucket) = &loaded.bucket else {
            return false;
        };
        !bucket.lock().expect("rate limit lock").take(Instant::now())
    }

    /// Headers to add to every response (`http_server_config.headers`).
    pub fn response_headers(&self) -> Arc<[(String, String)]> {
        Arc::clone(&self.loaded().headers)
    }
}

fn load(web_config_file: Option<&Path>, bearer_token_file: Option<&Path>) -> Result<Loaded, Error> {
    let mut watched = Vec::new();
    let (file, dir) = match web_config_file {
        None => (WebConfigFile::default(), PathBuf::new()),
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
                path: path.to_owned(),
                source,
            })?;
            let file = WebConfigFile::parse(&text, path)?;
            let dir = path.parent().map(Path::to_owned).unwrap_or_default();
            watched.push(path.to_owned());
            watched.extend(file.referenced_files(&dir));
            (file, dir)
        }
    };
    let tls = if file.tls_server_config.is_set() {
        let config = tls::server_config(
            &file.tls_server_config,
            &dir,
            file.http_server_config.http2,
            web_config_file.unwrap_or(Path::new("")),
        )?;
        Some(tokio_rustls::TlsAcceptor::from(config))
    } else {
        None
    };
    let tokens = match bearer_token_file {
        None => Vec::new(),
        Some(path) => {
            watched.push(path.to_owned());
            read_tokens(path)?
        }
    };
    let bucket = match (file.rate_limit.burst, file.rate_limit.interval) {
        (burst, Some(interval)) if burst > 0 => Some(Mutex::new(Bucket {
            burst,
            interval,
            tokens: f64::from(burst),
            at: Instant::now(),
        })),
        _ => None,
    };
    Ok(Loaded {
        tls,
        http2: file.http_server_config.http2,
        headers: file.http_server_config.headers.into_iter().collect(),
        credentials: Arc::new(auth::Credentials::new(file.basic_auth_users, tokens)),
        bucket,
        watched,
    })
}

fn read_tokens(path: &Path) -> Result<Vec<String>, Error> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.to_owned(),
        source,
    })?;
    let tokens: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect();
    if tokens.is_empty() {
        return Err(Error::Invalid {
            path: path.to_owned(),
            message: "the bearer token file holds no token".into(),
        });
    }
    Ok(tokens)
}

fn stamps(files: &[PathBuf]) -> Vec<Stamp> {
    use std::os::unix::fs::MetadataExt;
    files
        .iter()
        .map(|f| {
            std::fs::metadata(f).ok().map(|m| {
                (
                    m.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                    m.len(),
                    m.ino(),
                )
            })
        })
        .collect()
}

/// `rate_limit`: `burst` tokens, one back every `interval`.
struct Bucket {
    burst: u32,
    interval: std::time::Duration,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn take(&mut self, now: Instant) -> bool {
        let refill = now.duration_since(self.at).as_secs_f64() / self.interval.as_secs_f64();
        self.tokens = (self.tokens + refill).min(f64::from(self.burst));
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn bucket_refills() {
        let start = Instant::now();
        let mut bucket = Bucket {
            burst: 2,
            interval: Duration::from_millis(100),
            tokens: 2.0,
            at: start,
        };
        assert!(bucket.take(start));
        assert!(bucket.take(start));
        assert!(!bucket.take(start));
        assert!(bucket.take(start + Duration::from_millis(100)));
        assert!(!bucket.take(start + Duration::from_millis(150)));
    }

    #[test]
    fn a_broken_change_keeps_the_last_good_configuration() {
        let dir = tempfile::tempdir().unwrap();
        let web = dir.path().join("web.yml");
        let hash = bcrypt::hash("pw", 4).unwrap();
        std::fs::write(&web, format!("basic_auth_users:\n  alice: {hash}\n")).unwrap();
        let security = Security::load(Some(&web), None).unwrap();
        assert!(security.auth_required());
        std::fs::write(&web, "basic_auth_users: [oops\n").unwrap();
        let _ = security.current();
        assert!(
            security.auth_required(),
            "the broken file must not open the server"
        );
        std::fs::write(&web, "").unwrap();
        let _ = security.current();
        assert!(!security.auth_required());
        let error = Security::load(Some(&dir.path().join("missing.yml")), None).unwrap_err();
        assert!(error.to_string().contains("missing.yml"), "{error}");
    }
}
