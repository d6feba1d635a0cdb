//! A connection to a shim: TCP, or TLS 1.3 over TCP with the shim's key pinned (PROTOCOL.md 1.1).
//! [`Connector`] opens one; [`Stream`] is what both the JSON exchanges and hyper read and write.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// An open connection.
#[derive(Debug)]
pub(crate) enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Stream {
    /// Whether the shim closed the connection or sent something unasked (then it cannot carry
    /// another request): a read of the socket that would block means neither. For TLS the probe
    /// reads the TCP socket under the session, so a connection that had bytes waiting is dropped,
    /// never used.
    pub(crate) fn is_quiet(&self) -> bool {
        let tcp = match self {
            Stream::Plain(t) => t,
            Stream::Tls(s) => s.get_ref().0,
        };
        let mut probe = [0u8; 1];
        matches!(tcp.try_read(&mut probe), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }
}

/// Opens connections: plain, or TLS pinned to one shim's key.
#[derive(Clone)]
pub(crate) enum Connector {
    Plain,
    Tls(tokio_rustls::TlsConnector),
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Connector::Plain => "plain",
            Connector::Tls(_) => "tls",
        })
    }
}

impl Connector {
    /// TLS to the shim whose key is `pin`.
    pub(crate) fn pinned(pin: stepshim_tls::Pin) -> Result<Self, stepshim_tls::Error> {
        let config: Arc<_> = stepshim_tls::client_config(pin)?;
        Ok(Connector::Tls(tokio_rustls::TlsConnector::from(config)))
    }

    /// The URL scheme this connector speaks.
    pub(crate) fn scheme(&self) -> &'static str {
        match self {
            Connector::Plain => "http",
            Connector::Tls(_) => "https",
        }
    }

    /// Wraps a connected socket (the TLS handshake, when pinned).
    pub(crate) async fn wrap(&self, tcp: TcpStream) -> io::Result<Stream> {
        match self {
            Connector::Plain => Ok(Stream::Plain(tcp)),
            Connector::Tls(c) => {
                let tls = c.connect(stepshim_tls::server_name(), tcp).await?;
                Ok(Stream::Tls(Box::new(tls)))
            }
        }
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(t) => Pin::new(t).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(t) => Pin::new(t).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(t) => Pin::new(t).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(t) => Pin::new(t).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
