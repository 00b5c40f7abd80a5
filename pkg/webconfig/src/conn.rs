//! An accepted connection, plain or TLS, as one stream type; and what a TLS port says to a
//! client that speaks plain HTTP to it.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

/// How long a client may take to start and finish its TLS handshake: a connection that
/// says nothing does not hold a task for ever.
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The first byte of every TLS record that starts a handshake.
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// A client connection after [`crate::Security::accept`].
#[derive(Debug)]
pub enum Connection {
    /// Plain HTTP (no `tls_server_config`).
    Plain(TcpStream),
    /// TLS, handshake done.
    Tls(Box<TlsStream<TcpStream>>),
}

impl Connection {
    /// Whether the client chose HTTP/2 by ALPN (TLS only; plain connections are told apart
    /// by their first bytes).
    pub fn negotiated_h2(&self) -> bool {
        match self {
            Connection::Plain(_) => false,
            Connection::Tls(tls) => tls.get_ref().1.alpn_protocol() == Some(b"h2"),
        }
    }
}

/// Why a connection was not accepted. Logged at debug level: scanners and broken clients
/// cause these all day.
#[derive(Debug, thiserror::Error)]
pub enum AcceptError {
    /// The client spoke plain HTTP to the TLS port; it was answered 400, as Go answers.
    #[error("client sent an HTTP request to an HTTPS server")]
    PlainHttpOnTlsPort,
    /// The handshake failed: no common version or suite, a refused client certificate, ….
    #[error("TLS handshake failed: {0}")]
    Handshake(#[source] io::Error),
    /// The client did not finish its handshake within [`HANDSHAKE_TIMEOUT`].
    #[error("TLS handshake not finished within {HANDSHAKE_TIMEOUT:?}")]
    Timeout,
}

/// Runs the TLS handshake on `stream`; a client that starts with anything but a TLS record
/// gets Go's `400 Bad Request` in plain text instead of a handshake error it cannot read.
pub(crate) async fn handshake(
    mut stream: TcpStream,
    acceptor: tokio_rustls::TlsAcceptor,
) -> Result<Connection, AcceptError> {
    let work = async {
        let mut first = [0u8; 1];
        let n = stream
            .peek(&mut first)
            .await
            .map_err(AcceptError::Handshake)?;
        if n == 1 && first[0] != TLS_HANDSHAKE_RECORD && first[0].is_ascii_uppercase() {
            let _ = stream
                .write_all(
                    b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n\
                      Connection: close\r\n\r\nClient sent an HTTP request to an HTTPS server.\n",
                )
                .await;
            let _ = stream.shutdown().await;
            return Err(AcceptError::PlainHttpOnTlsPort);
        }
        acceptor
            .accept(stream)
            .await
            .map(|tls| Connection::Tls(Box::new(tls)))
            .map_err(AcceptError::Handshake)
    };
    tokio::time::timeout(HANDSHAKE_TIMEOUT, work)
        .await
        .unwrap_or(Err(AcceptError::Timeout))
}

impl AsyncRead for Connection {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Connection::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Connection::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Connection {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Connection::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Connection::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Connection::Plain(s) => Pin::new(s).poll_flush(cx),
            Connection::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Connection::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Connection::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Connection::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Connection::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Connection::Plain(s) => s.is_write_vectored(),
            Connection::Tls(s) => s.is_write_vectored(),
        }
    }
}
