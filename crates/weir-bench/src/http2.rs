//! Issue over HTTP/2 (`--h2`): one connection per connection slot — h2c with
//! prior knowledge for `http://`, TLS with ALPN `h2` for `https://` — shared
//! by that slot's `--streams` stream loops (like h2load's `-m`). Each stream
//! loop is a slot of the one driver; a request is a stream, its response read
//! whole and dropped. A connection that fails (I/O, GOAWAY) is opened again by
//! the next stream that needs it; the others wait for it.

use std::cell::{Cell, RefCell};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use h2::client::SendRequest;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Notify;

use crate::http1::{Failure, Response};
use crate::record::ErrorKind;
use crate::tls::{Handshake, TlsClient};

/// What an HTTP/2 request is made of, prebuilt once per URL.
#[derive(Debug, Clone)]
pub struct H2Request {
    pub method: http::Method,
    pub uri: http::Uri,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl H2Request {
    fn to_request(&self) -> http::Request<()> {
        let mut request = http::Request::new(());
        *request.method_mut() = self.method.clone();
        *request.uri_mut() = self.uri.clone();
        *request.headers_mut() = self.headers.clone();
        request
    }
}

/// One connection slot's connection, shared by its stream loops.
#[derive(Debug, Default)]
pub struct Shared {
    state: RefCell<State>,
    ready: Notify,
    /// Places among the connection's open streams, in order: a stream loop past the
    /// server's limit waits here, first come first served, where the wait is measured, not
    /// in the codec's queue, where it would be taken for the server's time (h2load
    /// measures from the stream's opening). Tickets handed out, and streams ended.
    tickets: Cell<u64>,
    ended: Cell<u64>,
    stream_ended: Notify,
}

/// A stream's place among its connection's open streams, given back when dropped (a
/// timed-out request included).
struct StreamPlace<'a>(&'a Shared);

impl Drop for StreamPlace<'_> {
    fn drop(&mut self) {
        self.0.ended.set(self.0.ended.get() + 1);
        self.0.stream_ended.notify_waiters();
    }
}

#[derive(Debug, Default)]
enum State {
    #[default]
    Closed,
    Opening,
    Open {
        address: SocketAddr,
        send: SendRequest<Bytes>,
        generation: u64,
        /// Bytes read from the connection (its frames) not yet given to a response.
        received: Rc<Cell<u64>>,
    },
}

/// How many times a request the server did not process (refused, or past a GOAWAY) is
/// sent: RFC 9113 sections 8.7 and 6.8 let a client send it again on a new connection.
const ATTEMPTS: usize = 3;

/// What opening a connection for one request did (HTTP/1.1, L4 and HTTP/2 alike): a TCP
/// connection was opened, and a TLS handshake completed on it.
#[derive(Debug, Default)]
pub struct Opened {
    pub connection: bool,
    pub handshake: Option<Handshake>,
}

impl Shared {
    /// Sends one request and reads its whole response, opening the
    /// connection first if it is closed (or another stream is opening it). A request
    /// the server did not process is sent again (at most [`ATTEMPTS`] times in all).
    /// The bytes a response counts are those read from the connection since the last
    /// response ended (its frames: heads, bodies and the rest), so a run's total is what
    /// its connections received, as with HTTP/1.1.
    pub async fn exchange(
        &self,
        address: SocketAddr,
        tls: Option<(&TlsClient, &ServerName<'static>)>,
        request: &H2Request,
        opened: &mut Opened,
    ) -> Result<Response, Failure> {
        let mut attempt = 1;
        loop {
            let (send, generation, received) = self.connection(address, tls, opened).await?;
            let waiting = Instant::now();
            let ticket = self.tickets.get();
            self.tickets.set(ticket + 1);
            let place = StreamPlace(self);
            loop {
                let ended = self.stream_ended.notified();
                // The server's limit, from its SETTINGS (one stream before they come).
                let allowed = send.current_max_send_streams().max(1);
                if ticket < self.ended.get().saturating_add(allowed as u64) {
                    break;
                }
                ended.await;
            }
            let queued = waiting.elapsed();
            let result = exchange(send, request).await;
            drop(place);
            match result {
                Ok(mut response) => {
                    response.queued = queued;
                    response.bytes = received.take();
                    // By the end of a response the server's SETTINGS are in (read from the
                    // slot's handle, not another clone of it); none: no limit.
                    let allowed = match &*self.state.borrow() {
                        State::Open { send, .. } => send.current_max_send_streams(),
                        _ => usize::MAX,
                    };
                    response.streams_allowed = (allowed < usize::MAX)
                        .then(|| u64::try_from(allowed).ok())
                        .flatten();
                    return Ok(response);
                }
                Err(failed) => {
                    if failed.connection_failed {
                        self.close(generation);
                    }
                    if failed.unprocessed && attempt < ATTEMPTS {
                        attempt += 1;
                        continue;
                    }
                    return Err(failed.failure);
                }
            }
        }
    }

    async fn connection(
        &self,
        address: SocketAddr,
        tls: Option<(&TlsClient, &ServerName<'static>)>,
        opened: &mut Opened,
    ) -> Result<(SendRequest<Bytes>, u64, Rc<Cell<u64>>), Failure> {
        loop {
            let notified = self.ready.notified();
            let generation = match &*self.state.borrow() {
                State::Open {
                    address: open,
                    send,
                    generation,
                    received,
                } if *open == address => {
                    return Ok((send.clone(), *generation, Rc::clone(received)));
                }
                State::Opening => None,
                State::Open { generation, .. } => Some(*generation + 1),
                State::Closed => Some(0),
            };
            let Some(generation) = generation else {
                notified.await;
                continue;
            };
            *self.state.borrow_mut() = State::Opening;
            let received = Rc::new(Cell::new(0));
            let result = open(address, tls, opened, &received).await;
            let outcome = match result {
                Ok(send) => {
                    *self.state.borrow_mut() = State::Open {
                        address,
                        send: send.clone(),
                        generation,
                        received: Rc::clone(&received),
                    };
                    Ok((send, generation, received))
                }
                Err(kind) => {
                    *self.state.borrow_mut() = State::Closed;
                    Err(Failure { kind, bytes: 0 })
                }
            };
            self.ready.notify_waiters();
            return outcome;
        }
    }

    /// Drops the connection if it is still the one that failed.
    fn close(&self, generation: u64) {
        let mut state = self.state.borrow_mut();
        if matches!(&*state, State::Open { generation: open, .. } if *open == generation) {
            *state = State::Closed;
        }
    }
}

/// Connects, runs the TLS handshake (checking that ALPN chose `h2`) or goes
/// h2c, then the HTTP/2 handshake; the connection's task runs on this thread.
async fn open(
    address: SocketAddr,
    tls: Option<(&TlsClient, &ServerName<'static>)>,
    opened: &mut Opened,
    received: &Rc<Cell<u64>>,
) -> Result<SendRequest<Bytes>, ErrorKind> {
    let started = Instant::now();
    let tcp = TcpStream::connect(address)
        .await
        .map_err(|_| ErrorKind::Connect)?;
    let _ = tcp.set_nodelay(true);
    opened.connection = true;
    let mut builder = h2::client::Builder::new();
    builder
        // One stream until the server's SETTINGS say how many it takes: streams sent past
        // a limit not yet known would be refused (REFUSED_STREAM) and counted as errors.
        .initial_max_send_streams(1)
        .enable_push(false)
        .initial_window_size(1 << 20)
        .initial_connection_window_size(1 << 24);
    let send = match tls {
        None => {
            let (send, connection) = builder
                .handshake(Counted::new(tcp, received))
                .await
                .map_err(|_| ErrorKind::Connect)?;
            tokio::task::spawn_local(connection);
            send
        }
        Some((client, name)) => {
            let (stream, handshake) = client
                .handshake(tcp, name.clone(), started)
                .await
                .map_err(|_| ErrorKind::Tls)?;
            opened.handshake = Some(handshake);
            if stream.get_ref().1.alpn_protocol() != Some(b"h2") {
                return Err(ErrorKind::Tls);
            }
            let (send, connection) = builder
                .handshake(Counted::new(stream, received))
                .await
                .map_err(|_| ErrorKind::Connect)?;
            tokio::task::spawn_local(connection);
            send
        }
    };
    Ok(send)
}

/// Why a stream failed: the failure to count, whether the connection itself failed
/// (then it is opened again), and whether the server did not process the request (a
/// refused stream, one past a GOAWAY, or one never sent), which may go again.
struct StreamFailed {
    failure: Failure,
    connection_failed: bool,
    unprocessed: bool,
}

/// One stream: request (and body), then the whole response (the bytes it counts are
/// set by the caller).
async fn exchange(send: SendRequest<Bytes>, request: &H2Request) -> Result<Response, StreamFailed> {
    // Nothing of the request went out: it may go again.
    let write = |error: &h2::Error| StreamFailed {
        failure: Failure {
            kind: ErrorKind::Write,
            bytes: 0,
        },
        connection_failed: connection_level(error),
        unprocessed: true,
    };
    let mut send = send.ready().await.map_err(|error| write(&error))?;
    let end = request.body.is_empty();
    let (response, mut body) = send
        .send_request(request.to_request(), end)
        .map_err(|error| write(&error))?;
    if !end {
        body.send_data(request.body.clone(), true)
            .map_err(|error| write(&error))?;
    }
    let read = |bytes, error: &h2::Error| StreamFailed {
        failure: Failure {
            kind: ErrorKind::Read,
            bytes,
        },
        connection_failed: connection_level(error),
        unprocessed: bytes == 0 && unprocessed(error),
    };
    let response = response.await.map_err(|error| read(0, &error))?;
    let status = response.status().as_u16();
    let mut body = response.into_body();
    let mut bytes = 0u64;
    while let Some(data) = body.data().await {
        let data = data.map_err(|error| read(bytes, &error))?;
        bytes += data.len() as u64;
        // Credit the window at once, as h2load does, so flow control never stalls the stream.
        let _ = body.flow_control().release_capacity(data.len());
    }
    Ok(Response {
        status,
        keep_alive: true,
        bytes,
        queued: std::time::Duration::ZERO,
        streams_allowed: None,
    })
}

/// Whether a stream's error says the server did not process its request: a
/// `REFUSED_STREAM` reset (RFC 9113 section 8.7), or a graceful GOAWAY from the server
/// whose last stream came before it (section 6.8).
fn unprocessed(error: &h2::Error) -> bool {
    error.reason() == Some(h2::Reason::REFUSED_STREAM)
        || (error.is_go_away() && error.is_remote() && error.reason() == Some(h2::Reason::NO_ERROR))
}

/// Whether an error ends the connection (not just the stream).
fn connection_level(error: &h2::Error) -> bool {
    !error.is_reset()
}

impl H2Request {
    /// The request a run sends to `scheme://authority/target`: its method,
    /// `:authority` from the URL, the given headers (connection-specific ones refused: HTTP/2 has
    /// none), and the body with its length.
    pub fn new(
        method: &str,
        scheme: &str,
        authority: &str,
        target: &str,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Result<H2Request, String> {
        let uri = format!("{scheme}://{authority}{target}")
            .parse::<http::Uri>()
            .map_err(|_| target.to_owned())?;
        let method = http::Method::from_bytes(method.as_bytes()).map_err(|_| method.to_owned())?;
        let mut map = http::HeaderMap::new();
        for (name, value) in headers {
            let lower = name.to_ascii_lowercase();
            let forbidden = [
                "connection",
                "keep-alive",
                "proxy-connection",
                "transfer-encoding",
                "upgrade",
                "host",
            ];
            if forbidden.contains(&lower.as_str()) {
                return Err(name.clone());
            }
            let name = http::HeaderName::from_bytes(lower.as_bytes()).map_err(|_| name.clone())?;
            let value = http::HeaderValue::from_str(value).map_err(|_| value.clone())?;
            map.append(name, value);
        }
        if !map.contains_key(http::header::USER_AGENT) {
            map.insert(
                http::header::USER_AGENT,
                http::HeaderValue::from_static("weir-bench"),
            );
        }
        let expects_body = matches!(method.as_str(), "POST" | "PUT" | "PATCH");
        if !map.contains_key(http::header::CONTENT_LENGTH) && (!body.is_empty() || expects_body) {
            map.insert(
                http::header::CONTENT_LENGTH,
                http::HeaderValue::from(body.len()),
            );
        }
        Ok(H2Request {
            method,
            uri,
            headers: map,
            body: Bytes::copy_from_slice(body),
        })
    }
}

/// A connection's transport that counts the bytes read from it (frames, after TLS).
struct Counted<S> {
    inner: S,
    received: Rc<Cell<u64>>,
}

impl<S> Counted<S> {
    fn new(inner: S, received: &Rc<Cell<u64>>) -> Counted<S> {
        Counted {
            inner,
            received: Rc::clone(received),
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let read = (buf.filled().len() - before) as u64;
        self.received.set(self.received.get() + read);
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
