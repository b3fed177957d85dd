//! A connection that is either plain TCP or TLS over TCP, so that the proxy's
//! pipeline is written once for both. Plain TCP pays one `match` per call.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// Plain TCP, or TLS (boxed: a TLS session is a few kilobytes of state).
#[derive(Debug)]
pub enum Stream<T> {
    /// A plain TCP connection.
    Plain(TcpStream),
    /// A TLS session over TCP.
    Tls(Box<T>),
}

/// A client connection as accepted by a virtual server.
pub type ServerStream = Stream<tokio_rustls::server::TlsStream<TcpStream>>;
/// A connection from weir to a node.
pub type ClientStream = Stream<tokio_rustls::client::TlsStream<TcpStream>>;

impl<T> Stream<T> {
    /// Whether the connection is TLS.
    pub fn is_tls(&self) -> bool {
        matches!(self, Stream::Tls(_))
    }
}

impl ServerStream {
    /// The TCP connection underneath.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(tcp) => tcp,
            Stream::Tls(tls) => tls.get_ref().0,
        }
    }

    /// The server name (SNI) the client sent, on TLS.
    pub fn server_name(&self) -> Option<&str> {
        match self {
            Stream::Plain(_) => None,
            Stream::Tls(tls) => tls.get_ref().1.server_name(),
        }
    }

    /// The negotiated TLS version, on TLS.
    pub fn tls_version(&self) -> Option<weir_config::TlsVersion> {
        let Stream::Tls(tls) = self else {
            return None;
        };
        match tls.get_ref().1.protocol_version()? {
            rustls::ProtocolVersion::TLSv1_3 => Some(weir_config::TlsVersion::Tls13),
            rustls::ProtocolVersion::TLSv1_2 => Some(weir_config::TlsVersion::Tls12),
            _ => None,
        }
    }

    /// The negotiated cipher suite's IANA name, on TLS.
    pub fn cipher_suite(&self) -> Option<&'static str> {
        let Stream::Tls(tls) = self else {
            return None;
        };
        let suite = tls.get_ref().1.negotiated_cipher_suite()?;
        Some(crate::provider::iana_name(suite))
    }

    /// Weir is about to write the last bytes of this connection, all of them
    /// at hand, and then end it: hold partial segments (`TCP_CORK`) so that
    /// those bytes, the close_notify and the FIN leave in one segment when
    /// the connection is shut down, instead of two or three. The shutdown
    /// sends what is held at once; the cork must not be set while weir still
    /// waits for data to write (a held partial segment waits up to 200 ms).
    pub fn hold_until_shutdown(&self) {
        // Best effort: without the option the bytes simply leave as before.
        let _ = socket2::SockRef::from(self.tcp()).set_tcp_cork(true);
    }

    /// On TLS, hands `bytes` to the session to be sent with whatever it
    /// sends next (the close_notify of a shutdown, in one write) instead of
    /// writing them now; returns how many it took (the session holds a
    /// bounded amount). Plain TCP takes none: the caller writes them.
    pub fn queue_plaintext(&mut self, bytes: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(_) => Ok(0),
            Stream::Tls(tls) => io::Write::write(&mut tls.get_mut().1.writer(), bytes),
        }
    }

    /// The certificate chain the client presented in the handshake, on TLS.
    pub fn peer_certificates(
        &self,
    ) -> Option<&[tokio_rustls::rustls::pki_types::CertificateDer<'static>]> {
        match self {
            Stream::Plain(_) => None,
            Stream::Tls(tls) => tls.get_ref().1.peer_certificates(),
        }
    }

    /// Whether the client chose HTTP/2 by ALPN (`h2`) in the TLS handshake.
    pub fn alpn_is_h2(&self) -> bool {
        match self {
            Stream::Plain(_) => false,
            Stream::Tls(tls) => tls.get_ref().1.alpn_protocol() == Some(b"h2"),
        }
    }

    /// Ready when a read would not wait: bytes (or the end) on the socket, or
    /// TLS plaintext (or a close_notify) already received. A poll rather than
    /// a future, so that a task waiting on it beside other things (an idle
    /// connection: its timer, the shutdown) holds no buffer and no waiter of
    /// its own, and stays small.
    pub fn poll_readable(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let tcp = match self {
            Stream::Plain(tcp) => tcp,
            Stream::Tls(tls) => {
                let (tcp, session) = tls.get_ref();
                if !session.wants_read() {
                    return Poll::Ready(Ok(()));
                }
                tcp
            }
        };
        tcp.poll_read_ready(cx)
    }
}

impl ClientStream {
    /// The TCP connection underneath.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(tcp) => tcp,
            Stream::Tls(tls) => tls.get_ref().0,
        }
    }
}

/// A TLS stream whose session can say it has records to send.
pub trait Session {
    /// Whether the session holds TLS records not yet written (an alert, say).
    fn wants_write(&self) -> bool;
}

impl<IO> Session for tokio_rustls::server::TlsStream<IO> {
    fn wants_write(&self) -> bool {
        self.get_ref().1.wants_write()
    }
}

impl<IO> Session for tokio_rustls::client::TlsStream<IO> {
    fn wants_write(&self) -> bool {
        self.get_ref().1.wants_write()
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin + Session> AsyncRead for Stream<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_read(cx, buf),
            Stream::Tls(tls) => {
                let read = Pin::new(tls.as_mut()).poll_read(cx, buf);
                // What the peer sent may call for an answer of the session's own with no
                // plaintext for weir: the no_renegotiation alert to a TLS 1.2 client that
                // asks to renegotiate. Sent now; otherwise it would wait for weir's next
                // write, which a connection waiting for the client never makes. A write
                // that cannot go at once, or fails, is left to the next write or flush.
                if tls.wants_write() {
                    let _ = Pin::new(tls.as_mut()).poll_flush(cx);
                }
                read
            }
        }
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Stream<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_write(cx, buf),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_write_vectored(cx, bufs),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(tcp) => tcp.is_write_vectored(),
            Stream::Tls(tls) => tls.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_flush(cx),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_shutdown(cx),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_shutdown(cx),
        }
    }
}
