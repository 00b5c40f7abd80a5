//! Pushing each window to a server's `POST /api/v1/write`: over TLS unless told otherwise, with
//! a bearer token, and through outages with a bounded queue and backoff.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use crate::Error;
use crate::metrics::Metrics;

/// Where and how to push (Parca Agent's `--remote-store-*` flags).
#[derive(Debug, Clone)]
pub struct RemoteStore {
    /// `host:port` (TLS unless [`RemoteStore::insecure`]), or a URL with its scheme.
    pub address: String,
    /// Sent as `Authorization: Bearer …`.
    pub bearer_token: Option<String>,
    /// A file holding the token, read again before each push (so a rotated token is used).
    pub bearer_token_file: Option<PathBuf>,
    /// Plain HTTP for an address without a scheme.
    pub insecure: bool,
    /// Do not verify the server's certificate (tests, self-signed labs; never production).
    pub insecure_skip_verify: bool,
    /// PEM file of CAs trusted besides the system's (webpki roots).
    pub ca_file: Option<PathBuf>,
    /// Windows held while the server cannot take them; the oldest go first beyond this.
    pub max_pending_windows: usize,
}

impl RemoteStore {
    /// Pushes to `address` with every other setting at its default.
    pub fn new(address: impl Into<String>) -> RemoteStore {
        RemoteStore {
            address: address.into(),
            bearer_token: None,
            bearer_token_file: None,
            insecure: false,
            insecure_skip_verify: false,
            ca_file: None,
            max_pending_windows: 12,
        }
    }
}

/// Longest wait between retries.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// First wait after a failure.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);

/// One profile to push: its gzipped pprof and the name the server files it under.
#[derive(Debug, Clone)]
pub(crate) struct Push {
    /// `__name__`: [`crate::profile::PROFILE_NAME`], or [`crate::profile::OFF_CPU_PROFILE_NAME`].
    pub name: &'static str,
    /// Gzipped pprof.
    pub body: Vec<u8>,
}

/// A push that failed, and whether trying the same body again may succeed.
#[derive(Debug)]
pub(crate) struct PushError {
    message: String,
    retry: bool,
}

/// Where and how to push.
#[derive(Debug, Clone)]
pub(crate) struct Pusher {
    client: reqwest::Client,
    url: String,
    token: Option<String>,
    token_file: Option<PathBuf>,
    max_pending: usize,
}

impl Pusher {
    /// A pusher to the server `remote.address`. The samples carry their labels (`node` among
    /// them), so the URL adds only the profile name.
    pub fn new(remote: &RemoteStore) -> Result<Pusher, Error> {
        let config = |message: String| Error::Config(message);
        let address = remote.address.trim_end_matches('/');
        let base = if address.contains("://") {
            address.to_owned()
        } else if remote.insecure {
            format!("http://{address}")
        } else {
            format!("https://{address}")
        };
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(config(format!(
                "--remote-store-address `{}`: the scheme must be http:// or https://",
                remote.address
            )));
        }
        if remote.bearer_token.is_some() && remote.bearer_token_file.is_some() {
            return Err(config(
                "--remote-store-bearer-token and --remote-store-bearer-token-file exclude each \
                 other; give one"
                    .into(),
            ));
        }
        if let Some(file) = &remote.bearer_token_file {
            read_token(file).map_err(config)?;
        }
        let mut builder = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .danger_accept_invalid_certs(remote.insecure_skip_verify);
        if let Some(path) = &remote.ca_file {
            let pem = std::fs::read(path)
                .map_err(|e| config(format!("--remote-store-ca-file `{}`: {e}", path.display())))?;
            for cert in reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
                config(format!(
                    "--remote-store-ca-file `{}` is not PEM: {e}",
                    path.display()
                ))
            })? {
                builder = builder.add_root_certificate(cert);
            }
        }
        let client = builder
            .build()
            .map_err(|e| config(format!("cannot build the HTTP client: {e}")))?;
        Ok(Pusher {
            client,
            url: format!("{base}/api/v1/write"),
            token: remote.bearer_token.clone(),
            token_file: remote.bearer_token_file.clone(),
            max_pending: remote.max_pending_windows.max(1),
        })
    }

    /// The URL a profile named `name` is pushed to (the server's `__name__`).
    fn url_of(&self, name: &str) -> String {
        let query: String = form_urlencoded::Serializer::new(String::new())
            .append_pair("__name__", name)
            .finish();
        format!("{}?{query}", self.url)
    }

    /// Sends one gzipped pprof under `name`; the error says what the server answered.
    pub(crate) async fn push(&self, name: &str, body: Vec<u8>) -> Result<(), PushError> {
        let url = self.url_of(name);
        let token = match &self.token_file {
            Some(file) => Some(read_token(file).map_err(|message| PushError {
                message,
                retry: true,
            })?),
            None => self.token.clone(),
        };
        let mut request = self
            .client
            .post(&url)
            .header("content-type", "application/vnd.google.protobuf+gzip")
            .body(body);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.map_err(|e| PushError {
            message: format!("POST {url}: {}", parca_vocab::with_causes(&e)),
            retry: true,
        })?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        let text = response.text().await.unwrap_or_default();
        // The server's own trouble, overload or credentials being rotated: try again. A body
        // the server refuses would be refused again.
        let retry = status.is_server_error() || matches!(status.as_u16(), 401 | 403 | 408 | 429);
        Err(PushError {
            message: format!("POST {url}: {status}: {}", text.trim()),
            retry,
        })
    }

    /// The URL the CPU profile is pushed to.
    pub fn url(&self) -> String {
        self.url_of(crate::profile::PROFILE_NAME)
    }

    /// Pushes the windows that come in `windows` in order until the channel closes. Failed
    /// pushes are retried with backoff (1 s doubling to 30 s) while later windows queue
    /// behind; beyond [`RemoteStore::max_pending_windows`] the oldest is dropped. Everything
    /// is counted in `metrics`.
    pub(crate) async fn run(
        self,
        mut windows: tokio::sync::mpsc::UnboundedReceiver<Push>,
        metrics: &Metrics,
    ) {
        let mut queue: VecDeque<Push> = VecDeque::new();
        let mut backoff = FIRST_BACKOFF;
        let enqueue = |queue: &mut VecDeque<Push>, body: Push| {
            queue.push_back(body);
            while queue.len() > self.max_pending {
                queue.pop_front();
                metrics.push_dropped.fetch_add(1, Relaxed);
                tracing::warn!(
                    max = self.max_pending,
                    "the remote store is behind: dropped the oldest unsent window"
                );
            }
            metrics.push_pending.store(queue.len() as u64, Relaxed);
        };
        loop {
            while let Ok(body) = windows.try_recv() {
                enqueue(&mut queue, body);
            }
            let Some(body) = queue.front().cloned() else {
                match windows.recv().await {
                    Some(body) => enqueue(&mut queue, body),
                    None => return,
                }
                continue;
            };
            match self.push(body.name, body.body).await {
                Ok(()) => {
                    queue.pop_front();
                    metrics.pushes.fetch_add(1, Relaxed);
                    backoff = FIRST_BACKOFF;
                }
                Err(error) if !error.retry => {
                    queue.pop_front();
                    metrics.push_failures.fetch_add(1, Relaxed);
                    metrics.push_dropped.fetch_add(1, Relaxed);
                    tracing::warn!(error = %error.message, "push refused; the window is dropped");
                }
                Err(error) => {
                    metrics.push_failures.fetch_add(1, Relaxed);
                    tracing::warn!(
                        error = %error.message,
                        retry_in = ?backoff,
                        pending = queue.len(),
                        "push failed; will retry"
                    );
                    let sleep = tokio::time::sleep(backoff);
                    tokio::pin!(sleep);
                    loop {
                        tokio::select! {
                            () = &mut sleep => break,
                            body = windows.recv() => match body {
                                Some(body) => enqueue(&mut queue, body),
                                None => return,
                            },
                        }
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
            metrics.push_pending.store(queue.len() as u64, Relaxed);
        }
    }
}

fn read_token(file: &std::path::Path) -> Result<String, String> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| format!("--remote-store-bearer-token-file `{}`: {e}", file.display()))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(format!(
            "--remote-store-bearer-token-file `{}` is empty",
            file.display()
        ));
    }
    Ok(token.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_unless_insecure_and_names_the_profile() {
        let p = Pusher::new(&RemoteStore::new("127.0.0.1:7070/")).unwrap();
        assert_eq!(
            p.url(),
            "https://127.0.0.1:7070/api/v1/write?__name__=parca_agent"
        );
        assert_eq!(
            p.url_of(crate::profile::OFF_CPU_PROFILE_NAME),
            "https://127.0.0.1:7070/api/v1/write?__name__=parca_agent_off_cpu"
        );
        let insecure = RemoteStore {
            insecure: true,
            ..RemoteStore::new("127.0.0.1:7070")
        };
        assert!(Pusher::new(&insecure).unwrap().url().starts_with("http://"));
        let explicit = Pusher::new(&RemoteStore::new("http://x:1")).unwrap();
        assert!(explicit.url().starts_with("http://x:1/"));
        assert!(Pusher::new(&RemoteStore::new("ftp://x")).is_err());
        let both = RemoteStore {
            bearer_token: Some("a".into()),
            bearer_token_file: Some("/nonexistent".into()),
            ..RemoteStore::new("x:1")
        };
        assert!(
            Pusher::new(&both)
                .unwrap_err()
                .to_string()
                .contains("exclude")
        );
    }

    #[tokio::test]
    async fn queues_while_the_server_is_down_and_drops_the_oldest() {
        // Nothing listens on this port (bound, then closed).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let remote = RemoteStore {
            insecure: true,
            max_pending_windows: 2,
            ..RemoteStore::new(format!("127.0.0.1:{port}"))
        };
        let pusher = Pusher::new(&remote).unwrap();
        let metrics = Box::leak(Box::new(Metrics::default()));
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let task = tokio::spawn(pusher.run(rx, metrics));
        for i in 0..5u8 {
            tx.send(Push {
                name: crate::profile::PROFILE_NAME,
                body: vec![i],
            })
            .unwrap();
        }
        // The pusher runs once this test awaits it (one thread): it finds five windows and a
        // closed channel, keeps two, tries the oldest, fails and stops.
        drop(tx);
        task.await.unwrap();
        assert_eq!(metrics.push_pending.load(Relaxed), 2);
        assert_eq!(metrics.push_dropped.load(Relaxed), 3);
        assert!(metrics.push_failures.load(Relaxed) >= 1);
        assert_eq!(metrics.pushes.load(Relaxed), 0);
    }
}
