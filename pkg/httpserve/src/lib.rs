//! The one accept loop of our HTTP servers, the server's API and UI and the agent's pprof port:
//! each connection goes through the web configuration first ([`Security::accept`]: TLS when
//! configured), then speaks HTTP/1.1 or HTTP/2 (HTTP/2 only when the web configuration allows
//! it, and only HTTP/2 when TLS negotiated it), and every request is answered by the caller's
//! function. On shutdown the listener closes and open requests get a grace period.
//!
//! # Design constraints
//!
//! - What a request may do (credentials, rate limit, routes) is the caller's: this loop only
//!   accepts, handshakes and serves, so that both servers accept connections one way.
//! - A failed accept (out of file descriptors) waits a moment and goes on; a failed handshake
//!   drops that connection only, logged at debug level.
//!
//! # Example
//!
//! ```no_run
//! # async fn run() -> std::io::Result<()> {
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:7071").await?;
//! let security = Arc::new(parca_webconfig::Security::open());
//! let answer = |_request| async {
//!     hyper::Response::new(http_body_util::Full::new(bytes::Bytes::from("ok\n")))
//! };
//! parca_httpserve::serve(listener, security, answer, std::future::pending(), Duration::from_secs(5)).await;
//! # Ok(()) }
//! ```

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::{Body, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use parca_webconfig::Security;
use tokio::net::TcpListener;

/// Serves `listener` until `shutdown` completes, answering every request with `answer`; then
/// stops accepting and lets open requests finish for up to `grace`.
pub async fn serve<A, F, B>(
    listener: TcpListener,
    security: Arc<Security>,
    answer: A,
    shutdown: impl Future<Output = ()>,
    grace: Duration,
) where
    A: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<B>> + Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(conn) => conn,
                    Err(error) => {
                        tracing::warn!(%error, "cannot accept a connection");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let security = Arc::clone(&security);
                let answer = answer.clone();
                let watcher = graceful.watcher();
                tokio::spawn(async move {
                    let stream = match security.accept(stream).await {
                        Ok(stream) => stream,
                        Err(error) => {
                            tracing::debug!(%peer, %error, "connection refused");
                            return;
                        }
                    };
                    let mut builder =
                        hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                    if !security.http2_enabled() {
                        builder = builder.http1_only();
                    } else if stream.negotiated_h2() {
                        builder = builder.http2_only();
                    }
                    let service = service_fn(move |request| {
                        let response = answer(request);
                        async move { Ok::<_, Infallible>(response.await) }
                    });
                    let connection =
                        builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
                    let connection = watcher.watch(connection.into_owned());
                    if let Err(error) = connection.await {
                        tracing::debug!(%error, "connection ended with an error");
                    }
                });
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    if tokio::time::timeout(grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            grace_seconds = grace.as_secs_f64(),
            "open HTTP requests did not finish within the grace period of shutdown"
        );
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A request is answered by the caller's function, and shutdown waits for one in flight.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn answers_and_finishes_open_requests_on_shutdown() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("address");
        let security = std::sync::Arc::new(parca_webconfig::Security::open());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let started = std::sync::Arc::new(tokio::sync::Notify::new());
        let slow_started = std::sync::Arc::clone(&started);
        let answer = move |request: hyper::Request<hyper::body::Incoming>| {
            let started = std::sync::Arc::clone(&slow_started);
            async move {
                if request.uri().path() == "/slow" {
                    started.notify_one();
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
                hyper::Response::new(http_body_util::Full::new(bytes::Bytes::from(format!(
                    "{}\n",
                    request.uri().path()
                ))))
            }
        };
        let server = tokio::spawn(super::serve(
            listener,
            security,
            answer,
            async {
                let _ = stopped.await;
            },
            Duration::from_secs(5),
        ));
        let ask = |path: &'static str| async move {
            let mut stream = tokio::net::TcpStream::connect(address)
                .await
                .expect("connect");
            let request = format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
            stream.write_all(request.as_bytes()).await.expect("write");
            let mut answer = String::new();
            stream.read_to_string(&mut answer).await.expect("read");
            answer
        };
        assert!(ask("/fast").await.ends_with("/fast\n"));
        let slow = tokio::spawn(ask("/slow"));
        // Shutdown begins while the slow request is being answered.
        started.notified().await;
        stop.send(()).expect("stop");
        let answer = slow.await.expect("slow request");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with("/slow\n"), "{answer}");
        server.await.expect("server stops");
        assert!(
            tokio::net::TcpStream::connect(address).await.is_err(),
            "the listener is closed after shutdown"
        );
    }
}
