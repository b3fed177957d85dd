//! Issue: one HTTP/1.1 exchange on a client connection — plain TCP or TLS — write the prebuilt
//! request, read the response with `weir-http` (Content-Length, chunked, close-delimited,
//! HEAD). The exchange is generic over the stream, so plain TCP pays nothing for TLS. The read buffer
//! belongs to the connection slot and outlives its connections, so a new connection per
//! request allocates no new buffer; bodies are counted and dropped as they arrive.

use std::io;
use std::net::SocketAddr;
use std::time::Instant;

use bytes::{Buf, BytesMut};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use weir_http::{BodyFraming, ChunkedDecoder, Decoded, Limits, Method, ResponseHead};

use crate::record::ErrorKind;
use crate::tls::{Handshake, TlsClient};

/// Spare room made in the read buffer before a read.
const READ_RESERVE: usize = 16 * 1024;
/// Trailers of a chunked response may take this many bytes.
const MAX_TRAILER_BYTES: usize = 16 * 1024;

/// Spare room a slot's read buffer starts with.
pub const BUFFER_CAPACITY: usize = READ_RESERVE;

/// An open client connection.
#[derive(Debug)]
pub struct Connection {
    pub(crate) stream: Stream,
    pub address: SocketAddr,
}

/// What a connection carries its bytes on.
#[derive(Debug)]
pub(crate) enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// One exchange in progress: the connection and the slot's read buffer.
struct Exchange<'a, S> {
    stream: &'a mut S,
    buffer: &'a mut BytesMut,
    bytes: u64,
}

/// A complete response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    /// The connection may carry another request.
    pub keep_alive: bool,
    /// Bytes read for it, head and body.
    pub bytes: u64,
    /// How long the request waited in the client for a stream (HTTP/2, past the server's
    /// limit on concurrent streams): not part of its service time. Zero otherwise.
    pub queued: std::time::Duration,
    /// HTTP/2: the concurrent streams the server allows on the connection.
    pub streams_allowed: Option<u64>,
}

/// A failed exchange: its kind, and the bytes read before it failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failure {
    pub kind: ErrorKind,
    pub bytes: u64,
}

impl Connection {
    /// Connects to `address` and, with `tls`, runs the handshake sending `name`; returns the
    /// connection and the handshake (TLS only).
    pub async fn open(
        address: SocketAddr,
        tls: Option<(&TlsClient, &ServerName<'static>)>,
    ) -> Result<(Connection, Option<Handshake>), ErrorKind> {
        let started = Instant::now();
        let stream = TcpStream::connect(address)
            .await
            .map_err(|_| ErrorKind::Connect)?;
        // Small requests go out at once; a failure here only costs latency.
        let _ = stream.set_nodelay(true);
        let Some((client, name)) = tls else {
            let stream = Stream::Plain(stream);
            return Ok((Connection { stream, address }, None));
        };
        let (stream, handshake) = client
            .handshake(stream, name.clone(), started)
            .await
            .map_err(|_| ErrorKind::Tls)?;
        let stream = Stream::Tls(Box::new(stream));
        Ok((Connection { stream, address }, Some(handshake)))
    }

    /// Whether the server has closed (or reset) this idle connection. Only what the
    /// runtime has already seen is asked: no system call unless the socket was reported
    /// readable since it was last read. Bytes waiting (a late TLS ticket) leave it in use.
    pub fn closed_by_server(&self) -> bool {
        let tcp = match &self.stream {
            Stream::Plain(tcp) => tcp,
            Stream::Tls(tls) => tls.get_ref().0,
        };
        let mut byte = [0u8; 1];
        let mut peeked = tokio::io::ReadBuf::new(&mut byte);
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        matches!(
            tcp.poll_peek(&mut context, &mut peeked),
            std::task::Poll::Ready(Ok(0) | Err(_))
        )
    }

    /// Sends `request` and reads the whole response to it through `buffer`.
    pub async fn exchange(
        &mut self,
        buffer: &mut BytesMut,
        request: &[u8],
        method: Method,
    ) -> Result<Response, Failure> {
        match &mut self.stream {
            Stream::Plain(stream) => exchange(stream, buffer, request, method).await,
            Stream::Tls(stream) => exchange(&mut **stream, buffer, request, method).await,
        }
    }
}

/// Sends `request` on `stream` and reads the whole response to it through `buffer`.
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    buffer: &mut BytesMut,
    request: &[u8],
    method: Method,
) -> Result<Response, Failure> {
    buffer.clear();
    if stream.write_all(request).await.is_err() {
        return Err(Failure {
            kind: ErrorKind::Write,
            bytes: 0,
        });
    }
    let mut exchange = Exchange {
        stream,
        buffer,
        bytes: 0,
    };
    match exchange.read_response(method).await {
        Ok((status, keep_alive)) => Ok(Response {
            status,
            keep_alive,
            bytes: exchange.bytes,
            queued: std::time::Duration::ZERO,
            streams_allowed: None,
        }),
        Err(kind) => Err(Failure {
            kind,
            bytes: exchange.bytes,
        }),
    }
}

impl<S: AsyncRead + Unpin> Exchange<'_, S> {
    async fn read_response(&mut self, method: Method) -> Result<(u16, bool), ErrorKind> {
        let limits = Limits::default();
        let (status, framing, mut keep_alive) = loop {
            match ResponseHead::split_from(self.buffer, &limits, method) {
                Ok(Some(head)) if head.is_interim() => continue,
                // The head's bytes are dropped here, so the buffer can reuse its memory.
                Ok(Some(head)) => break (head.status(), head.framing(), head.keep_alive()),
                Ok(None) => self.fill().await?,
                Err(_) => return Err(ErrorKind::Parse),
            }
        };
        match framing {
            BodyFraming::None => {}
            BodyFraming::Length(length) => {
                let mut remaining = length;
                loop {
                    let taken = remaining.min(self.buffer.len() as u64);
                    // `taken` is at most the buffer's length, so it fits in usize.
                    self.buffer.advance(taken as usize);
                    remaining -= taken;
                    if remaining == 0 {
                        break;
                    }
                    self.fill().await?;
                }
            }
            BodyFraming::Chunked => {
                let mut decoder = ChunkedDecoder::new(MAX_TRAILER_BYTES);
                loop {
                    match decoder.decode(self.buffer) {
                        Ok(Decoded::Data(_)) => {}
                        Ok(Decoded::NeedMore) => self.fill().await?,
                        Ok(Decoded::Done { .. }) => break,
                        Err(_) => return Err(ErrorKind::Parse),
                    }
                }
            }
            BodyFraming::CloseDelimited => {
                keep_alive = false;
                loop {
                    self.buffer.clear();
                    match self.read().await {
                        Ok(0) => break,
                        Ok(_) => {}
                        Err(_) => return Err(ErrorKind::Read),
                    }
                }
            }
        }
        // One request at a time: bytes past the response's end are the server's framing
        // error (a body longer than its Content-Length), not the next answer.
        if !self.buffer.is_empty() {
            return Err(ErrorKind::Parse);
        }
        Ok((status, keep_alive))
    }

    /// Reads more into the buffer; the peer closing counts as a read error.
    async fn fill(&mut self) -> Result<(), ErrorKind> {
        match self.read().await {
            Ok(0) | Err(_) => Err(ErrorKind::Read),
            Ok(_) => Ok(()),
        }
    }

    async fn read(&mut self) -> io::Result<usize> {
        if self.buffer.capacity() - self.buffer.len() < READ_RESERVE / 4 {
            self.buffer.reserve(READ_RESERVE);
        }
        let read = self.stream.read_buf(self.buffer).await?;
        self.bytes += read as u64;
        Ok(read)
    }
}
