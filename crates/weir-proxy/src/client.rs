//! The client side of a connection: buffers, timed reads and writes, and the
//! `read_head` stage.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;
use weir_config::{ClientTimeouts, TlsVersion};
use weir_core::{Error, ErrorKind, ShutdownSignal, Side};
use weir_http::{HeadScan, RequestHead, Version};
use weir_tls::ServerStream;

use crate::answer::{Failure, body_for, grpc_fields, headers_for};
use crate::buffers::Buffers;
use crate::http2::H2Stream;
use crate::route::VirtualServerRuntime;

/// Smallest free space worth a read call.
const READ_RESERVE: usize = 4096;
/// After an error answer: how long, and how many bytes, to keep reading what
/// the client still sends before closing.
const LINGER_TIME: Duration = Duration::from_secs(2);
/// ... and stop as soon as the client pauses this long.
const LINGER_PAUSE: Duration = Duration::from_millis(500);
/// (An upload of a few MiB in flight when the answer ends is read away whole; past the
/// bound the close resets, and the client may lose the unread end of its answer.)
const LINGER_BYTES: usize = 16 * 1024 * 1024;
/// Once a drain begins (shutdown, a binary upgrade, or a reload that removed the virtual
/// server), an idle kept-alive connection gets this long to send its next request, which
/// is answered with `Connection: close`: closing at once would race a client that is
/// sending it, and fail that request.
const DRAIN_GRACE: Duration = Duration::from_secs(1);
/// How long a close_notify and FIN may take to leave when weir closes.
const CLOSE_TIME: Duration = Duration::from_secs(1);

/// What a request's client is: an HTTP/1.1 connection, or one HTTP/2 stream
/// (`docs/design/http2.md`: one pipeline, two codecs). The stages read the
/// request body and send the response through [`Client`]'s methods, which
/// match on this in one place each.
#[derive(Debug)]
pub(crate) enum Downstream {
    Http1(ServerStream),
    /// A stream of an HTTP/2 connection; `tls`: what the connection's TLS
    /// handshake settled (ALPN `h2`), `None` for h2c.
    Http2 {
        stream: Box<H2Stream>,
        tls: Option<Arc<TlsFacts>>,
    },
}

/// What the TLS handshake of a connection settled, kept where the stream itself is not at
/// hand: shared by an HTTP/2 connection's streams (the rules' `${sni}` and
/// `${tls_version}`, the access log), and held by a tls virtual server's session for its
/// record.
#[derive(Debug)]
pub(crate) struct TlsFacts {
    pub(crate) sni: Option<Box<str>>,
    pub(crate) version: Option<TlsVersion>,
    /// The cipher suite's IANA name (the access log's `tls_cipher`).
    pub(crate) cipher: Option<&'static str>,
}

impl TlsFacts {
    /// The facts of `stream`'s handshake; `None` for plain TCP.
    pub(crate) fn of(stream: &ServerStream) -> Option<Arc<TlsFacts>> {
        stream.is_tls().then(|| {
            Arc::new(TlsFacts {
                sni: stream.server_name().map(Box::from),
                version: stream.tls_version(),
                cipher: stream.cipher_suite(),
            })
        })
    }

    /// The access log's TLS fields, with the subject of the client certificate weir
    /// verified, if any.
    pub(crate) fn record<'a>(
        &'a self,
        client_subject: Option<&'a str>,
    ) -> Option<weir_observe::TlsRecord<'a>> {
        Some(weir_observe::TlsRecord {
            version: weir_tls::provider::version_name(self.version?),
            cipher: self.cipher.unwrap_or("unknown"),
            server_name: self.sni.as_deref(),
            client_subject,
        })
    }
}

impl Downstream {
    pub(crate) fn is_tls(&self) -> bool {
        match self {
            Downstream::Http1(stream) => stream.is_tls(),
            Downstream::Http2 { tls, .. } => tls.is_some(),
        }
    }

    /// The server name (SNI) the client sent, on TLS.
    pub(crate) fn server_name(&self) -> Option<&str> {
        match self {
            Downstream::Http1(stream) => stream.server_name(),
            Downstream::Http2 { tls, .. } => tls.as_ref().and_then(|t| t.sni.as_deref()),
        }
    }

    /// The negotiated TLS version, on TLS.
    pub(crate) fn tls_version(&self) -> Option<TlsVersion> {
        match self {
            Downstream::Http1(stream) => stream.tls_version(),
            Downstream::Http2 { tls, .. } => tls.as_ref().and_then(|t| t.version),
        }
    }

    /// The negotiated cipher suite's IANA name, on TLS.
    pub(crate) fn tls_cipher(&self) -> Option<&'static str> {
        match self {
            Downstream::Http1(stream) => stream.cipher_suite(),
            Downstream::Http2 { tls, .. } => tls.as_ref().and_then(|t| t.cipher),
        }
    }

    /// Ends, with the error to log, when the client has gone while its request waits in a
    /// node's queue: an HTTP/2 stream reset by the client, or, when `fin` (the pool's
    /// `leave_queue_on_close`), the end of an HTTP/1.1 client's sending side. Never ends
    /// otherwise. See [`client_closed`].
    pub(crate) async fn left(&mut self, fin: bool) -> Error {
        match self {
            Downstream::Http2 { stream, .. } => stream.reset().await,
            Downstream::Http1(stream) if fin => client_closed(stream.tcp(), true).await,
            Downstream::Http1(_) => std::future::pending().await,
        }
    }
}

/// How often a queued request whose client has sent more (a pipelined request, a TLS
/// record) looks again for the client's FIN behind those bytes.
const LEFT_RECHECK: Duration = Duration::from_millis(250);

/// Ends when the client's FIN has arrived: the end of the stream at the socket (nothing
/// unread before it), or, when `behind_bytes`, the kernel's read-closed readiness behind
/// bytes weir has not read yet (a close_notify, a pipelined request; an HTTP client that
/// sent more and closed). A TCP session's client passes `false`: bytes it sent before its
/// FIN are for the node, so it is still waited for; but a reset behind them aborts the
/// connection both ways, and nothing could go back to it: that client has left. Reads
/// nothing: the socket is only peeked. A peek that finds nothing clears tokio's
/// readiness, which is then only stale; bytes that are waiting leave it set, so that the
/// next read finds them, and are looked past every [`LEFT_RECHECK`] (or, without
/// `behind_bytes`, only for a reset: the socket's error).
pub(crate) async fn client_closed(tcp: &tokio::net::TcpStream, behind_bytes: bool) -> Error {
    let closed = |why: &str| {
        Error::new(ErrorKind::ClientClosed, Side::Downstream).context(format!(
            "the client {why} while it waited in a node's queue"
        ))
    };
    loop {
        match tcp.ready(tokio::io::Interest::READABLE).await {
            Ok(ready) if behind_bytes && ready.is_read_closed() => {
                return closed("closed its connection");
            }
            Ok(_) => {}
            Err(error) => return closed(&format!("connection failed ({error})")),
        }
        let peeked = tcp.try_io(tokio::io::Interest::READABLE, || {
            let mut byte = [std::mem::MaybeUninit::<u8>::uninit()];
            socket2::SockRef::from(tcp).peek(&mut byte)
        });
        match peeked {
            Ok(0) => return closed("closed its connection"),
            Ok(_) if behind_bytes => tokio::time::sleep(LEFT_RECHECK).await,
            Ok(_) => {
                return match tcp.ready(tokio::io::Interest::ERROR).await {
                    Ok(_) => closed("reset its connection"),
                    Err(error) => closed(&format!("connection failed ({error})")),
                };
            }
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(error) => return closed(&format!("connection failed ({error})")),
        }
    }
}

/// A client connection (or HTTP/2 stream) with requests in progress, and the
/// buffers lent to it for them (see [`Buffers`]).
#[derive(Debug)]
pub(crate) struct Client {
    pub stream: Downstream,
    pub peer: SocketAddr,
    /// Bytes read from the client and not yet used (pipelined requests stay here).
    pub read_buf: BytesMut,
    /// Scratch for what goes to the client.
    pub write_buf: BytesMut,
    /// Scratch for what goes to the node.
    pub upstream_out: BytesMut,
    /// Scratch for what comes from the node.
    pub upstream_in: BytesMut,
    /// When the connection was accepted, until its first request is
    /// answered; then when its latest answer was done ([`Client::answered`]).
    /// The first request's `header_read` and the `idle` timeout between
    /// requests count from it.
    pub since: Instant,
    /// Requests read on this connection so far.
    pub requests: u32,
    /// The epoch of the client certificate checks its TLS handshake passed
    /// (`weir_tls::HandshakeInfo::checks_epoch`, moved on by `weir_tls::Acceptor::recheck`;
    /// 0 without TLS).
    pub checks_epoch: u32,
    /// The answer being written ends with the connection (an HTTP/1.0 client, no
    /// length): cut short, it must end with a reset ([`Client::reset`]).
    pub open_ended: bool,
    /// Subject of the verified client certificate (HTTPS with client certificates).
    pub client_subject: Option<Box<str>>,
    /// Bytes of answers handed to writes on an HTTP/1.x connection (an HTTP/2 stream
    /// counts its own; a write cut from outside may have sent less): whether, and about
    /// how much of, an answer went out when a request is cut ([`Client::bytes_out`]).
    pub written: u64,
    /// The status of the final answer whose head went out for the request being served
    /// (0: none yet), for the access record of a request cut from outside.
    pub answering: u16,
    /// The index (in its pool) of the node the request being served was last sent or
    /// queued to, for the access record of a request cut from outside (the drain's
    /// timeout), which loses the exchange's own. An index, not an address: every request
    /// moves this struct, and an address is four times the size.
    pub node: Option<u32>,
    /// Bytes the tunnel of the request being served (a WebSocket, a CONNECT) has sent the
    /// client so far, counted as they go ([`Client::tunnel_tally`]): a tunnel cut from
    /// outside is logged with them.
    pub tunnelled: Option<Arc<AtomicU64>>,
}

/// A client connection between requests: the stream and what the pipeline
/// remembers about it, and no buffer. This is all an idle keep-alive
/// connection holds, besides its task and its socket.
#[derive(Debug)]
pub(crate) struct IdleConnection {
    stream: ServerStream,
    peer: SocketAddr,
    /// See [`Client::since`].
    since: Instant,
    requests: u32,
    /// See [`Client::checks_epoch`] (beside `requests`, where it costs no space).
    checks_epoch: u32,
    client_subject: Option<Box<str>>,
}

/// What a TLS handshake verified of the client: its certificate's subject, when it
/// sent one, and the epoch of the client certificate checks it passed.
pub(crate) type Verified = (Option<Box<str>>, u32);

/// What a kept-alive connection's task keeps for its idle waits: one timer
/// and one shutdown watch for all of them (see
/// [`IdleConnection::wait_for_request`]). The watch joins the shutdown's
/// waiters on the connection's first wait and stays there through its
/// requests, so the shutdown wakes the task even in the middle of one (a
/// request in flight then starts waiting for the drain's cut: `pipeline.rs`).
pub(crate) struct IdleTimer<'a, 's> {
    sleep: Pin<&'a mut tokio::time::Sleep>,
    watch: Pin<&'a mut weir_core::shutdown::ShutdownWatch<'s>>,
}

impl<'a, 's> IdleTimer<'a, 's> {
    pub(crate) fn new(
        sleep: Pin<&'a mut tokio::time::Sleep>,
        watch: Pin<&'a mut weir_core::shutdown::ShutdownWatch<'s>>,
    ) -> IdleTimer<'a, 's> {
        IdleTimer { sleep, watch }
    }

    /// The shutdown watch, for the first wait of a roused connection
    /// ([`IdleConnection::poll_roused`]).
    pub(crate) fn watch(&mut self) -> Pin<&mut weir_core::shutdown::ShutdownWatch<'s>> {
        self.watch.as_mut()
    }

    /// Makes the timer fire no later than `deadline`, the end of a wait that
    /// began at `since`, and not in the wait's first half. Between those it is
    /// left where an earlier wait put it: moving it costs a trip to the timer
    /// wheel, which every request would pay; firing early costs a poll of the
    /// connection's task that ends in moving it.
    /// So a connection whose requests come more often than every half timeout
    /// moves its timer once per half timeout and is never woken by it, and
    /// one with rarer requests is woken early at most once per wait.
    fn aim(&mut self, since: Instant, deadline: Instant) {
        let armed = self.sleep.deadline();
        let halfway = since + deadline.saturating_duration_since(since) / 2;
        if self.sleep.is_elapsed() || armed > deadline || armed < halfway {
            self.sleep.as_mut().reset(deadline);
        }
    }

    /// One poll of an idle wait that began at `since` and ends at `wait.deadline` (see
    /// [`IdleConnection::wait_for_request`]); `draining`: whether a drain began during
    /// this wait; `aimed`: whether the timer was aimed for it.
    ///
    /// The timer is aimed at the wait's first poll that finds nothing to read, not
    /// before: a request already there (the first one of a TLS connection, read with
    /// the client's Finished) then costs no trip to the timer wheel, nor the wake of
    /// the event loop that a timer set earlier than all others makes.
    fn poll_wait(
        &mut self,
        (stream, since): (&ServerStream, Instant),
        wait: Wait,
        (draining, aimed): (&mut bool, &mut bool),
        cx: &mut Context<'_>,
    ) -> Poll<Waited> {
        // The watch first, even with bytes waiting: its first poll joins the shutdown's
        // waiters, which a request in flight relies on (see `IdleTimer`).
        let drain_began = !*draining && self.watch.as_mut().poll_triggered(cx).is_ready();
        if let Poll::Ready(ready) = stream.poll_readable(cx) {
            return Poll::Ready(match ready {
                Ok(()) => Waited::Bytes,
                Err(_) => Waited::Close,
            });
        }
        if !*aimed {
            *aimed = true;
            self.aim(since, wait.leave.map_or(wait.deadline, |(at, _)| at));
        }
        if drain_began {
            // A drain began: the next request may already be on its way; it gets
            // DRAIN_GRACE and is answered with `Connection: close`.
            *draining = true;
            let grace = wait.deadline.min(Instant::now() + DRAIN_GRACE);
            self.sleep.as_mut().reset(grace);
        }
        loop {
            if self.sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let now = Instant::now();
            if *draining || now >= wait.deadline {
                return Poll::Ready(Waited::Close);
            }
            // Armed at an earlier wait, or at the time this one leaves its task.
            let next = match wait.leave {
                Some((at, how)) if now >= at => return Poll::Ready(how),
                Some((at, _)) => at,
                None => wait.deadline,
            };
            self.sleep.as_mut().reset(next);
        }
    }
}

/// The ends of one idle wait: its deadline, and when the connection leaves its task
/// ([`Waited::Rest`] or [`Waited::Park`]) if that comes first.
#[derive(Clone, Copy)]
struct Wait {
    deadline: Instant,
    leave: Option<(Instant, Waited)>,
}

/// How an idle wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Waited {
    /// The client sent something (or closed: the read that follows sees it).
    Bytes,
    /// Weir ends the connection quietly: its timeout passed, a drain began, or its
    /// socket failed.
    Close,
    /// The connection waited its virtual server's `park_idle`: it goes on waiting
    /// parked (`park.rs`).
    Park,
    /// The connection waited its virtual server's `rest_idle` (sooner than
    /// `park_idle`): it goes on waiting resting, without its task (`park.rs`).
    Rest,
}

/// An idle plain HTTP/1.1 connection out of the runtime: a socket of the standard
/// library's, registered nowhere but the lot (`park.rs`), and what its
/// [`IdleConnection`] knew.
#[derive(Debug)]
pub(crate) struct ParkedConnection {
    stream: std::net::TcpStream,
    peer: SocketAddr,
    since: Instant,
    requests: u32,
    checks_epoch: u32,
    client_subject: Option<Box<str>>,
}

impl ParkedConnection {
    /// The socket, for the lot's registration.
    pub(crate) fn socket(&self) -> &std::net::TcpStream {
        &self.stream
    }

    /// When its wait for the next request ends (see [`IdleConnection::deadline`]).
    pub(crate) fn deadline(&self, vs: &VirtualServerRuntime) -> Instant {
        wait_deadline(self.requests, self.since, vs)
    }

    /// Back in the runtime (registered with its reactor), to be served by a
    /// task again.
    pub(crate) fn resume(self) -> std::io::Result<IdleConnection> {
        let stream = tokio::net::TcpStream::from_std(self.stream)?;
        Ok(IdleConnection {
            stream: ServerStream::Plain(stream),
            peer: self.peer,
            since: self.since,
            requests: self.requests,
            checks_epoch: self.checks_epoch,
            client_subject: self.client_subject,
        })
    }

    /// Ends a parked connection whose idle timeout passed, as [`IdleConnection::close`]
    /// does a plain one: a FIN, then the close.
    pub(crate) fn close(self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Write);
    }
}

fn wait_deadline(requests: u32, since: Instant, vs: &VirtualServerRuntime) -> Instant {
    since + wait_limit(requests, &vs.config.timeouts)
}

/// How long a wait for the next request may last: `header_read` for the first
/// request, `idle` for later ones.
fn wait_limit(requests: u32, timeouts: &ClientTimeouts) -> Duration {
    match requests {
        0 => timeouts.header_read,
        _ => timeouts.idle,
    }
}

/// How long into its wait an idle connection leaves its task, and how: it rests at
/// `rest_idle`, or is parked at `park_idle` (plain connections only) when that is no
/// later. Zero turns either off.
fn leave_after(timeouts: &ClientTimeouts, tls: bool) -> Option<(Duration, Waited)> {
    let rest = timeouts.rest_idle;
    let park = if tls {
        Duration::ZERO
    } else {
        timeouts.park_idle
    };
    match (rest.is_zero(), park.is_zero()) {
        (true, true) => None,
        (false, false) if rest < park => Some((rest, Waited::Rest)),
        (_, false) => Some((park, Waited::Park)),
        (false, true) => Some((rest, Waited::Rest)),
    }
}

impl IdleConnection {
    /// A connection just accepted (and through its TLS handshake, if any).
    pub(crate) fn new(
        stream: ServerStream,
        peer: SocketAddr,
        accepted_at: Instant,
        (client_subject, checks_epoch): Verified,
    ) -> IdleConnection {
        IdleConnection {
            stream,
            peer,
            since: accepted_at,
            requests: 0,
            checks_epoch,
            client_subject,
        }
    }

    /// Waits, holding no buffer, until the client sends something (or
    /// closes: the read that follows sees it). [`Waited::Close`] when the connection
    /// should close quietly instead: nothing arrived within `header_read` of
    /// the accept (first request) or within `idle` (later ones), or a drain
    /// began. [`Waited::Park`] after its virtual server's `park_idle` with nothing
    /// sent, when `parkable`.
    ///
    /// `timer` stays with the connection's task across its waits (see
    /// [`IdleTimer`]), and the wait is a plain poll of the socket, the timer
    /// and the shutdown watch: it adds a few words to the task while idle.
    pub(crate) fn wait_for_request<'w>(
        &'w self,
        vs: &'w VirtualServerRuntime,
        parkable: bool,
        timer: &'w mut IdleTimer<'_, '_>,
    ) -> impl Future<Output = Waited> + 'w {
        let (mut draining, mut aimed) = (false, false);
        // The ends are worked out again at each poll, not kept: the future lives in
        // every idle connection's task.
        std::future::poll_fn(move |cx| {
            let wait = self.wait(vs, parkable);
            let flags = (&mut draining, &mut aimed);
            timer.poll_wait((&self.stream, self.since), wait, flags, cx)
        })
    }

    /// The ends of the wait for the next request: its deadline, and when it leaves its
    /// task (`parkable`: where the proxy has a lot for it) if that comes first: it
    /// rests at `rest_idle`, or is parked at `park_idle` (plain connections only) when
    /// that is no later.
    ///
    /// Worked out at each poll of the wait: in durations, with one clock addition each.
    fn wait(&self, vs: &VirtualServerRuntime, parkable: bool) -> Wait {
        let timeouts = &vs.config.timeouts;
        let limit = wait_limit(self.requests, timeouts);
        let leave = if parkable {
            leave_after(timeouts, self.stream.is_tls())
        } else {
            None
        };
        Wait {
            deadline: self.since + limit,
            leave: leave
                .filter(|(after, _)| *after < limit)
                .map(|(after, how)| (self.since + after, how)),
        }
    }

    /// When this connection is parked (`park_idle` into its wait), if it can be: a
    /// plain one, with parking on, before its deadline.
    pub(crate) fn park_at(&self, vs: &VirtualServerRuntime) -> Option<Instant> {
        let park = vs.config.timeouts.park_idle;
        (!self.stream.is_tls() && !park.is_zero())
            .then(|| self.since + park)
            .filter(|at| *at < self.deadline(vs))
    }

    /// Whether its wait leaves its task to rest (not to be parked) when it leaves
    /// (`parkable`: where the proxy has a lot for it).
    pub(crate) fn rests_first(&self, vs: &VirtualServerRuntime, parkable: bool) -> bool {
        matches!(self.wait(vs, parkable).leave, Some((_, Waited::Rest)))
    }

    /// Whether `wait` has passed since its wait began.
    pub(crate) fn waited_past(&self, wait: Duration) -> bool {
        Instant::now() >= self.since + wait
    }

    /// The first wait of a connection woken in the lot (`park.rs`): a single poll,
    /// which joins the shutdown's waiters (see [`IdleTimer`]) and looks at the socket,
    /// arming no timer. `None` when the socket is not readable after all.
    pub(crate) fn poll_roused<'w>(
        &'w self,
        mut watch: Pin<&'w mut weir_core::shutdown::ShutdownWatch<'_>>,
    ) -> impl Future<Output = Option<Waited>> + 'w {
        std::future::poll_fn(move |cx| {
            // A drain that began is seen by the request (or by the usual wait).
            let _ = watch.as_mut().poll_triggered(cx);
            Poll::Ready(match self.stream.poll_readable(cx) {
                Poll::Ready(Ok(())) => Some(Waited::Bytes),
                Poll::Ready(Err(_)) => Some(Waited::Close),
                Poll::Pending => None,
            })
        })
    }

    /// Registers `waker` to be woken when the client sends something (or closes);
    /// `true` instead when it already has (or a TLS session holds bytes read), when
    /// the waker may or may not have been kept. The waker takes the place of the
    /// connection's task's (see `park.rs`: resting).
    pub(crate) fn rouse_on_bytes(&self, waker: &Waker) -> bool {
        let mut cx = Context::from_waker(waker);
        self.stream.poll_readable(&mut cx).is_ready()
    }

    /// When the wait for the next request ends: `header_read` after the
    /// accept for the first request, `idle` after the latest answer for
    /// later ones (no clock read: the answer's end was taken when it was
    /// logged).
    pub(crate) fn deadline(&self, vs: &VirtualServerRuntime) -> Instant {
        wait_deadline(self.requests, self.since, vs)
    }

    /// Completes once the runtime sees the socket readable (bytes, a close or an
    /// error), taking nothing.
    pub(crate) async fn readable(&self) {
        let _ = self.stream.tcp().readable().await;
    }

    /// The connection out of the runtime, to wait parked; `Err` gives back one that
    /// cannot be (TLS, or its socket would not leave the runtime: it is closed).
    pub(crate) fn park(self) -> Result<ParkedConnection, Option<IdleConnection>> {
        let tcp = match self.stream {
            ServerStream::Plain(tcp) => tcp,
            tls @ ServerStream::Tls(_) => {
                return Err(Some(IdleConnection {
                    stream: tls,
                    ..self
                }));
            }
        };
        let stream = tcp.into_std().map_err(|_| None)?;
        Ok(ParkedConnection {
            stream,
            peer: self.peer,
            since: self.since,
            requests: self.requests,
            checks_epoch: self.checks_epoch,
            client_subject: self.client_subject,
        })
    }

    /// Closes a connection that ended while it was idle (idle timeout, drain, the
    /// client's close): on TLS a close_notify goes out first, as in [`Client::close`];
    /// plain TCP is closed by the drop that follows.
    pub(crate) async fn close(mut self) {
        if self.stream.is_tls() {
            let _ = tokio::time::timeout(CLOSE_TIME, self.stream.shutdown()).await;
        }
    }

    /// The connection with buffers lent from this thread's pool, to serve requests.
    pub(crate) fn into_client(self) -> Client {
        let buffers = Buffers::take();
        Client {
            stream: Downstream::Http1(self.stream),
            peer: self.peer,
            read_buf: buffers.read,
            write_buf: buffers.write,
            upstream_out: buffers.upstream_out,
            upstream_in: buffers.upstream_in,
            since: self.since,
            requests: self.requests,
            checks_epoch: self.checks_epoch,
            open_ended: false,
            client_subject: self.client_subject,
            written: 0,
            answering: 0,
            node: None,
            tunnelled: None,
        }
    }
}

impl Client {
    /// Reads what the client has sent, without waiting: `None` when nothing is
    /// there after all (readiness can be reported without bytes, for one right
    /// after the accept, or a TLS record not yet whole), `Some(Ok(0))` at its end.
    /// Not async, so the connection's task keeps no state for it.
    pub(crate) fn read_now(&mut self) -> Option<std::io::Result<usize>> {
        let Downstream::Http1(stream) = &mut self.stream else {
            return None;
        };
        self.read_buf.reserve(READ_RESERVE);
        // One poll with a waker that does nothing: if the read would wait, the
        // idle wait that follows registers the task's own waker in its place.
        let mut context = Context::from_waker(Waker::noop());
        let read = std::pin::pin!(stream.read_buf(&mut self.read_buf));
        match read.poll(&mut context) {
            Poll::Ready(result) => Some(result),
            Poll::Pending => None,
        }
    }

    /// The next request head when the read buffer holds all of it, taken without
    /// waiting; `None` for a partial head or one that does not parse, which
    /// [`Client::read_head`] then reads on or refuses.
    pub(crate) fn head_now(&mut self, vs: &VirtualServerRuntime) -> Option<RequestHead> {
        if !matches!(self.stream, Downstream::Http1(_)) {
            return None;
        }
        let head = RequestHead::split_from(&mut self.read_buf, &vs.head_limits).ok()??;
        self.requests += 1;
        Some(head)
    }

    /// Notes that a request's answer is done and returns when: the
    /// connection's idle time counts from here. Called where answers are
    /// logged (`record` in `pipeline.rs`, `RequestTraffic::answer` in
    /// `rules.rs`), which need the same instant for the request's duration.
    pub(crate) fn answered(&mut self) -> Instant {
        self.since = Instant::now();
        self.since
    }

    /// Gives the buffers back to this thread's pool and keeps the connection.
    /// Only once every byte read has been used: call it with `read_buf` empty.
    /// `None` for an HTTP/2 stream, which has no connection of its own to keep.
    pub(crate) fn into_idle(self) -> Option<IdleConnection> {
        debug_assert!(
            self.read_buf.is_empty(),
            "unused client bytes would be lost"
        );
        let (connection, buffers) = self.split();
        buffers.give_back();
        connection
    }

    /// Gives the buffers back to this thread's pool as the connection closes.
    pub(crate) fn release(self) {
        let (connection, buffers) = self.split();
        buffers.give_back();
        drop(connection);
    }

    fn split(self) -> (Option<IdleConnection>, Buffers) {
        let buffers = Buffers {
            read: self.read_buf,
            write: self.write_buf,
            upstream_out: self.upstream_out,
            upstream_in: self.upstream_in,
        };
        let connection = match self.stream {
            Downstream::Http1(stream) => Some(IdleConnection {
                stream,
                peer: self.peer,
                since: self.since,
                requests: self.requests,
                checks_epoch: self.checks_epoch,
                client_subject: self.client_subject,
            }),
            Downstream::Http2 { .. } => None,
        };
        (connection, buffers)
    }

    /// A client for one HTTP/2 stream, with buffers lent from this thread's pool.
    pub(crate) fn for_stream(
        stream: H2Stream,
        tls: Option<Arc<TlsFacts>>,
        peer: SocketAddr,
        accepted_at: Instant,
        client_subject: Option<&str>,
    ) -> Client {
        let buffers = Buffers::take();
        Client {
            stream: Downstream::Http2 {
                stream: Box::new(stream),
                tls,
            },
            peer,
            read_buf: buffers.read,
            write_buf: buffers.write,
            upstream_out: buffers.upstream_out,
            upstream_in: buffers.upstream_in,
            since: accepted_at,
            requests: 1,
            // The connection's driver checks it, before each stream.
            checks_epoch: 0,
            open_ended: false,
            client_subject: client_subject.map(Box::from),
            written: 0,
            answering: 0,
            node: None,
            tunnelled: None,
        }
    }

    /// The HTTP/1.1 connection itself, the bytes read from it and not used,
    /// and what its TLS handshake verified, for another protocol (h2c); the
    /// buffers go back to the pool.
    pub(crate) fn into_stream(mut self) -> Option<(ServerStream, Bytes, Verified)> {
        let unread = Bytes::copy_from_slice(&self.read_buf);
        self.read_buf.clear();
        let (connection, buffers) = self.split();
        buffers.give_back();
        connection.map(|idle| {
            let verified = (idle.client_subject, idle.checks_epoch);
            (idle.stream, unread, verified)
        })
    }

    /// The HTTP/2 stream this request came on, if it did.
    pub(crate) fn h2(&mut self) -> Option<&mut H2Stream> {
        match &mut self.stream {
            Downstream::Http2 { stream, .. } => Some(stream),
            Downstream::Http1(_) => None,
        }
    }

    pub(crate) fn is_h2(&self) -> bool {
        matches!(self.stream, Downstream::Http2 { .. })
    }

    /// An HTTP/2 stream whose connection weir closed because the client did not answer a
    /// PING in time.
    pub(crate) fn went_silent(&self) -> bool {
        match &self.stream {
            Downstream::Http2 { stream, .. } => stream.went_silent(),
            Downstream::Http1(_) => false,
        }
    }

    /// Bytes of answers sent so far on this connection (HTTP/1.x: handed to writes) or
    /// stream (HTTP/2: DATA the stream sent).
    pub(crate) fn bytes_out(&self) -> u64 {
        let tunnelled = self
            .tunnelled
            .as_ref()
            .map_or(0, |tally| tally.load(Ordering::Relaxed));
        tunnelled
            + match &self.stream {
                Downstream::Http1(_) => self.written,
                Downstream::Http2 { stream, .. } => stream.bytes_sent,
            }
    }

    /// A count of what the request's tunnel sends the client, kept here as well as by
    /// the relay (which a cut drops).
    pub(crate) fn tunnel_tally(&mut self) -> Arc<AtomicU64> {
        Arc::clone(self.tunnelled.get_or_insert_with(Arc::default))
    }

    /// Whether this request is an HTTP/2 WebSocket extended CONNECT (RFC
    /// 8441), which only a switch to WebSocket can answer with success.
    pub(crate) fn is_h2_websocket(&self) -> bool {
        match &self.stream {
            Downstream::Http2 { stream, .. } => stream.websocket_key().is_some(),
            Downstream::Http1(_) => false,
        }
    }

    /// The read_head stage: waits for the next request head. `Ok(None)` means
    /// the connection should close quietly (client closed, idle timeout, or
    /// shutdown while idle). With the head, when its first bytes came if it took more
    /// than one read (the request's duration counts from there; a head read whole
    /// began about now, and costs no clock read here).
    pub(crate) async fn read_head(
        &mut self,
        vs: &VirtualServerRuntime,
        shutdown: &ShutdownSignal,
    ) -> Result<Option<(RequestHead, Option<Instant>)>, Failure> {
        // An HTTP/2 stream carries one request, whose head came with the stream.
        let Downstream::Http1(stream) = &mut self.stream else {
            return Ok(None);
        };
        let timeouts = &vs.config.timeouts;
        // The first head must arrive within header_read of the accept; later
        // ones may idle first, then have header_read from their first byte.
        let mut head_deadline = (self.requests == 0).then(|| self.since + timeouts.header_read);
        let mut drain_deadline: Option<Instant> = None;
        // When the head's first bytes were seen, once it is known to take another read.
        let mut began: Option<Instant> = None;
        // Parse only when it can tell something new, not on every read: a
        // head sent one byte at a time must not cost a parse per byte.
        let mut scan = HeadScan::new();
        loop {
            if !self.read_buf.is_empty()
                && scan.ready(&self.read_buf, vs.head_limits.max_head_bytes)
            {
                match RequestHead::split_from(&mut self.read_buf, &vs.head_limits) {
                    Ok(Some(head)) => {
                        self.requests += 1;
                        return Ok(Some((head, began)));
                    }
                    Ok(None) => {}
                    Err(error) => {
                        self.since = head_started(head_deadline, self.since, timeouts);
                        return Err(Failure::parse(error));
                    }
                }
            }
            if !self.read_buf.is_empty() {
                let now = *began.get_or_insert_with(Instant::now);
                head_deadline.get_or_insert(now + timeouts.header_read);
            }
            let idle = self.read_buf.is_empty();
            let deadline = match head_deadline {
                Some(deadline) => deadline,
                None => Instant::now() + timeouts.idle,
            };
            let deadline = drain_deadline
                .filter(|_| idle)
                .map_or(deadline, |drain| drain.min(deadline));
            self.read_buf.reserve(READ_RESERVE);
            let read = tokio::select! {
                biased;
                read = tokio::time::timeout_at(deadline, stream.read_buf(&mut self.read_buf)) => read,
                _ = shutdown.triggered(), if idle && drain_deadline.is_none() => {
                    drain_deadline = Some(Instant::now() + DRAIN_GRACE);
                    continue;
                }
            };
            match read {
                Ok(Ok(0)) if idle => return Ok(None),
                Ok(Ok(0)) => {
                    self.since = head_started(head_deadline, self.since, timeouts);
                    return Err(Failure::silent(
                        Error::new(ErrorKind::ClientClosed, Side::Downstream)
                            .context("closed in the middle of a request head"),
                    ));
                }
                Ok(Ok(_)) => {}
                Ok(Err(error)) => {
                    return Err(Failure::silent(Error::downstream(
                        ErrorKind::ClientClosed,
                        error,
                    )));
                }
                // Nothing sent at all (a browser's spare connection, or a
                // keep-alive client gone quiet): close without an answer.
                Err(_) if idle => return Ok(None),
                Err(_) => {
                    self.since = head_started(head_deadline, self.since, timeouts);
                    return Err(Failure::from_error(
                        Error::new(ErrorKind::ClientTimeout, Side::Downstream)
                            .context("request head not received in time"),
                    ));
                }
            }
        }
    }

    /// Reads more bytes into `read_buf`, waiting until `deadline` at most
    /// (then 408, with `late` as the reason). Errors if the client closed.
    pub(crate) async fn read_more(
        &mut self,
        deadline: Instant,
        late: &'static str,
    ) -> Result<usize, Failure> {
        let stream = match &mut self.stream {
            Downstream::Http1(stream) => stream,
            Downstream::Http2 { stream, .. } => {
                return match stream.read_framed(&mut self.read_buf, deadline, late).await {
                    Ok(0) => Err(Failure::silent(
                        Error::new(ErrorKind::ClientClosed, Side::Downstream)
                            .context("stream ended in the middle of a request body"),
                    )),
                    Ok(n) => Ok(n),
                    // Too slow, or malformed (the codec reset the stream): answered and
                    // logged as 408 or 400; a client that left, silently.
                    Err(error)
                        if matches!(
                            error.kind(),
                            ErrorKind::ClientTimeout | ErrorKind::BadRequest
                        ) =>
                    {
                        Err(Failure::from_error(error))
                    }
                    Err(error) => Err(Failure::silent(error)),
                };
            }
        };
        self.read_buf.reserve(READ_RESERVE);
        match tokio::time::timeout_at(deadline, stream.read_buf(&mut self.read_buf)).await {
            Ok(Ok(0)) => Err(Failure::silent(
                Error::new(ErrorKind::ClientClosed, Side::Downstream)
                    .context("closed in the middle of a request body"),
            )),
            Ok(Ok(n)) => Ok(n),
            Ok(Err(error)) => Err(Failure::silent(Error::downstream(
                ErrorKind::ClientClosed,
                error,
            ))),
            Err(_) => Err(Failure::from_error(
                Error::new(ErrorKind::ClientTimeout, Side::Downstream).context(late),
            )),
        }
    }

    /// Writes `write_buf` to the client without waiting: true when all of it
    /// left (`write_buf` is then empty), false when the socket would not take
    /// the rest now (or failed), which stays in `write_buf` for
    /// [`Client::flush`]. On TLS "left" includes the session's records.
    /// Not async, so the request's future keeps no state for it.
    pub(crate) fn write_now(&mut self) -> bool {
        use tokio::io::AsyncWrite;
        let Downstream::Http1(stream) = &mut self.stream else {
            return false;
        };
        // As in `read_now`: a waker that does nothing; should the write have
        // to wait, the flush that follows registers the task's own.
        let mut context = Context::from_waker(Waker::noop());
        let mut stream = Pin::new(stream);
        let mut written = 0;
        while written < self.write_buf.len() {
            match stream
                .as_mut()
                .poll_write(&mut context, &self.write_buf[written..])
            {
                Poll::Ready(Ok(n)) if n > 0 => written += n,
                // Would wait, or failed: the flush waits, or reports the error.
                _ => {
                    bytes::Buf::advance(&mut self.write_buf, written);
                    self.written += written as u64;
                    return false;
                }
            }
        }
        self.written += written as u64;
        self.write_buf.clear();
        matches!(stream.poll_flush(&mut context), Poll::Ready(Ok(())))
    }

    /// Writes `write_buf` to the client and clears it.
    pub(crate) async fn flush(&mut self, timeout: Duration) -> Result<(), Failure> {
        let Downstream::Http1(stream) = &mut self.stream else {
            self.write_buf.clear();
            return Err(not_for_h2());
        };
        self.written += self.write_buf.len() as u64;
        let result = weir_core::timeout::timeout(timeout, async {
            stream.write_all(&self.write_buf).await?;
            stream.flush().await
        })
        .await;
        self.write_buf.clear();
        written(result)
    }

    /// Writes `bytes` (after anything in `write_buf`) to the client.
    pub(crate) async fn send(&mut self, bytes: &[u8], timeout: Duration) -> Result<(), Failure> {
        if !self.write_buf.is_empty() {
            if bytes.len() <= 64 * 1024 {
                self.write_buf.extend_from_slice(bytes);
                return self.flush(timeout).await;
            }
            self.flush(timeout).await?;
        }
        let Downstream::Http1(stream) = &mut self.stream else {
            return Err(not_for_h2());
        };
        self.written += bytes.len() as u64;
        let write = async {
            stream.write_all(bytes).await?;
            stream.flush().await
        };
        written(weir_core::timeout::timeout(timeout, write).await)
    }

    /// Sends `write_buf`, the whole of the connection's last answer:
    /// [`Client::close`] must follow. Its bytes, the close_notify and the FIN
    /// leave together ([`weir_tls::ServerStream::hold_until_shutdown`]); on
    /// TLS the bytes wait in the session and go out with the close_notify in
    /// one write. Clears `write_buf`.
    pub(crate) async fn send_last(&mut self, timeout: Duration) -> Result<(), Failure> {
        let Downstream::Http1(stream) = &mut self.stream else {
            self.write_buf.clear();
            return Err(not_for_h2());
        };
        stream.hold_until_shutdown();
        let queued = match stream.queue_plaintext(&self.write_buf) {
            Ok(n) => n,
            Err(error) => {
                self.write_buf.clear();
                return Err(Failure::silent(Error::downstream(
                    ErrorKind::ClientClosed,
                    error,
                )));
            }
        };
        self.written += queued as u64;
        if queued == self.write_buf.len() {
            self.write_buf.clear();
            return Ok(());
        }
        // The session took part (it holds a bounded amount): the rest is
        // written now, after the part it holds.
        bytes::Buf::advance(&mut self.write_buf, queued);
        self.flush(timeout).await
    }

    /// Writes `write_buf` (a head, or nothing) and then `chunks` with
    /// vectored writes, up to [`VECTORED_SLICES`] slices a call: the chunks
    /// go to the kernel (or TLS) from where they are, never copied into
    /// `write_buf`. Clears `write_buf`.
    pub(crate) async fn send_vectored(
        &mut self,
        chunks: &[Bytes],
        timeout: Duration,
    ) -> Result<(), Failure> {
        let Downstream::Http1(stream) = &mut self.stream else {
            self.write_buf.clear();
            return Err(not_for_h2());
        };
        let head = &self.write_buf[..];
        let write = async {
            let mut cursor = VectoredCursor::default();
            loop {
                let mut slices = [std::io::IoSlice::new(&[]); VECTORED_SLICES];
                let count = cursor.fill(head, chunks, &mut slices);
                if count == 0 {
                    break;
                }
                let n = stream.write_vectored(&slices[..count]).await?;
                if n == 0 {
                    return Err(std::io::ErrorKind::WriteZero.into());
                }
                cursor.advance(head, chunks, n);
            }
            stream.flush().await
        };
        let body: usize = chunks.iter().map(Bytes::len).sum();
        self.written += (head.len() + body) as u64;
        let result = weir_core::timeout::timeout(timeout, write).await;
        self.write_buf.clear();
        written(result)
    }

    /// Closes after an error answer without losing it: our side is shut
    /// down first, then whatever the client is still sending (the rest of a
    /// rejected body) is read and discarded for a bounded time. Closing with
    /// unread bytes would make the kernel reset the connection, which can
    /// destroy the answer before the client reads it.
    pub(crate) async fn linger_close(&mut self) {
        // An HTTP/2 stream ends with its response (or reset); the connection stays.
        let Downstream::Http1(stream) = &mut self.stream else {
            return;
        };
        // A client that reads nothing more leaves no room for a TLS close_notify: bounded,
        // as in `close`.
        if !matches!(
            tokio::time::timeout(CLOSE_TIME, stream.shutdown()).await,
            Ok(Ok(()))
        ) {
            return;
        }
        self.discard_lingering().await;
    }

    /// Closes after an answer the node cut short, as [`Client::linger_close`] does but
    /// without a TLS close_notify (whose absence tells a TLS client of the cut): the TCP
    /// side is shut, and what the client still sends (the rest of an upload) is read
    /// away for a bounded time, so that closing with it unread does not reset the
    /// connection and take the part of the answer the client has not read yet.
    pub(crate) async fn linger_cut(&mut self) {
        let Downstream::Http1(stream) = &mut self.stream else {
            return;
        };
        let shut = socket2::SockRef::from(stream.tcp()).shutdown(std::net::Shutdown::Write);
        if shut.is_err() {
            return;
        }
        self.discard_lingering().await;
    }

    /// What the client still sends after weir's side was shut, read and dropped: at
    /// most [`LINGER_TIME`] and [`LINGER_BYTES`], until it pauses [`LINGER_PAUSE`].
    async fn discard_lingering(&mut self) {
        let Downstream::Http1(stream) = &mut self.stream else {
            return;
        };
        let end = Instant::now() + LINGER_TIME;
        let mut discarded = 0;
        while discarded < LINGER_BYTES {
            self.read_buf.clear();
            self.read_buf.reserve(READ_RESERVE);
            let deadline = end.min(Instant::now() + LINGER_PAUSE);
            match tokio::time::timeout_at(deadline, stream.read_buf(&mut self.read_buf)).await {
                Ok(Ok(n)) if n > 0 => discarded += n,
                _ => break,
            }
        }
    }

    /// Makes the connection's end a reset: for an answer cut short, which a FIN
    /// would make look complete to a client whose answer ends with the
    /// connection ([`Client::open_ended`]). Takes effect when the connection
    /// is dropped, and discards what the socket still holds to send; an HTTP/2
    /// stream is reset on its own.
    pub(crate) fn reset(&self) {
        if let Downstream::Http1(stream) = &self.stream
            && let Err(error) = stream.tcp().set_zero_linger()
        {
            tracing::debug!(%error, "cannot set SO_LINGER 0 on a client connection");
        }
    }

    /// Closes a connection weir chose to end (after `Connection: close`, an
    /// HTTP/1.0 response, an idle timeout, a drain): on TLS a close_notify
    /// goes out first, so clients can tell the end from a truncation
    /// (OpenSSL 3 reports "unexpected eof" without it). Bounded in time.
    ///
    /// Plain TCP is left to the drop that follows: closing the socket sends the
    /// FIN after what is still queued to send, as a shutdown would, and a reset
    /// where the client's bytes wait unread, shut down first or not
    /// ([`Client::linger_close`] is for that case). One system call fewer per
    /// connection.
    pub(crate) async fn close(&mut self) {
        if let Downstream::Http1(stream) = &mut self.stream
            && stream.is_tls()
        {
            let _ = tokio::time::timeout(CLOSE_TIME, stream.shutdown()).await;
        }
    }

    /// What the connection's TLS handshake settled, for its access records; `None` on
    /// plain TCP.
    pub(crate) fn tls_record(&self) -> Option<weir_observe::TlsRecord<'_>> {
        let version = self.stream.tls_version()?;
        Some(weir_observe::TlsRecord {
            version: weir_tls::provider::version_name(version),
            cipher: self.stream.tls_cipher().unwrap_or("unknown"),
            server_name: self.stream.server_name(),
            client_subject: self.client_subject.as_deref(),
        })
    }

    /// The protocol this client spoke, as access records write it.
    pub(crate) fn version_label(&self, version: Version) -> &'static str {
        match self.is_h2() {
            true => "HTTP/2.0",
            false => crate::answer::version_str(version),
        }
    }

    /// Sends one of weir's own error answers with `edits` applied (the rules' response
    /// edits and the request id), with `Connection: close` unless `keep_alive`; returns
    /// its size. To a
    /// gRPC request (`grpc`) it is a trailers-only gRPC response (`grpc-status` and
    /// `grpc-message` in its only HEADERS, no body), so a gRPC client reads a status
    /// instead of failing to decode weir's text body as messages.
    pub(crate) async fn answer_error(
        &mut self,
        (status, keep_alive): (u16, bool),
        version: Version,
        timeout: Duration,
        edits: &impl weir_http::HeaderEdit,
        (grpc, head_request): (bool, bool),
    ) -> Result<u64, Failure> {
        // An answer to HEAD has its head only (RFC 9110 §9.3.2), as every other.
        let shape = weir_http::SimpleResponse {
            status,
            version,
            keep_alive,
            head_request,
        };
        if grpc {
            let mut extra = grpc_fields(status).to_vec();
            extra.extend_from_slice(headers_for(status));
            return self
                .answer_simple(&shape, &extra, edits, b"", timeout)
                .await;
        }
        let (headers, body) = (headers_for(status), body_for(status));
        self.answer_simple(&shape, headers, edits, body, timeout)
            .await
    }

    /// One of weir's own answers with `extra` fields and `edits` (a rule's
    /// redirect or response, a limit's refusal): HTTP/1.1 bytes, or on an
    /// HTTP/2 stream a head and DATA carrying the same fields. Returns its size.
    pub(crate) async fn answer_simple(
        &mut self,
        shape: &weir_http::SimpleResponse,
        extra: &[(&str, &str)],
        edits: &impl weir_http::HeaderEdit,
        body: &[u8],
        timeout: Duration,
    ) -> Result<u64, Failure> {
        if let Downstream::Http2 { stream, .. } = &mut self.stream {
            if stream.responded() {
                // Too late for an answer: the client learns from a reset.
                stream.finish(false);
                return Ok(0);
            }
            self.answering = shape.status;
            self.write_buf.clear();
            weir_http::http2::write_simple_head_for_h2(
                shape,
                extra,
                edits,
                body,
                &mut self.write_buf,
            );
            let bodiless = body.is_empty()
                || shape.head_request
                || !weir_http::status_has_content(shape.status);
            let head = crate::http2::Head::Written(shape.status, &self.write_buf);
            stream.send_head(head, bodiless).map_err(Failure::silent)?;
            if !bodiless {
                let data = Bytes::copy_from_slice(body);
                let sent = stream.send_data(data, true, timeout).await;
                sent.map_err(Failure::silent)?;
            }
            // Its size as the access record counts an HTTP/2 answer: the head in its
            // HTTP/1.1 form (as for a node's answer), then the body.
            self.write_buf.clear();
            weir_http::write_simple_response_edited(shape, extra, edits, body, &mut self.write_buf);
            let size = self.write_buf.len() as u64;
            self.write_buf.clear();
            return Ok(size);
        }
        self.answering = shape.status;
        self.write_buf.clear();
        weir_http::write_simple_response_edited(shape, extra, edits, body, &mut self.write_buf);
        let size = self.write_buf.len() as u64;
        if shape.keep_alive {
            self.flush(timeout).await?;
        } else {
            // `Connection: close`: the connection's last answer, whole here.
            self.send_last(timeout).await?;
        }
        Ok(size)
    }
}

/// The virtual server's `response_headers`, then `edits`: the fields of weir's own answers
/// (errors, rule answers and limit refusals, a purge's answer), as of the answers it relays
/// (`response.rs`) and serves from the cache. The operator's fields ("set on every response
/// to clients", `examples/weir.toml`), such as `Strict-Transport-Security`, were missing
/// from weir's own answers (an outside audit).
pub(crate) struct OwnAnswer<'a, E: ?Sized> {
    pub(crate) set: &'a [(String, String)],
    pub(crate) edits: &'a E,
}

impl<E: weir_http::HeaderEdit + ?Sized> weir_http::HeaderEdit for OwnAnswer<'_, E> {
    fn drops(&self, name: &[u8]) -> bool {
        self.edits.drops(name)
            || self
                .set
                .iter()
                .any(|(set, _)| name.eq_ignore_ascii_case(set.as_bytes()))
    }

    fn write_added(&self, out: &mut bytes::BytesMut) {
        // A field the edits set or remove too is theirs, as on relayed answers.
        for (name, value) in self
            .set
            .iter()
            .filter(|(name, _)| !self.edits.drops(name.as_bytes()))
        {
            for piece in [name.as_bytes(), b": ", value.as_bytes(), b"\r\n"] {
                out.extend_from_slice(piece);
            }
        }
        self.edits.write_added(out);
    }
}

/// When the head that failed began to arrive, for the failure's access record (the
/// connection closes after it, so [`Client::since`] can take it): its `header_read`
/// deadline less the timeout, or `since` when no deadline was set (bytes that were already
/// there, pipelined behind the previous request).
fn head_started(deadline: Option<Instant>, since: Instant, timeouts: &ClientTimeouts) -> Instant {
    deadline.map_or(since, |deadline| deadline - timeouts.header_read)
}

/// HTTP/1.1 bytes meant for the client of an HTTP/2 stream: a stage that
/// should have gone through the stream's own operations (a bug, not a panic).
fn not_for_h2() -> Failure {
    Failure::silent(
        Error::new(ErrorKind::Io, Side::Internal).context("HTTP/1.1 bytes for an HTTP/2 stream"),
    )
}

/// Slices handed to one vectored write (Linux's `IOV_MAX` is 1024).
const VECTORED_SLICES: usize = 64;

/// Where a vectored write of a head and chunks has got to: `head` bytes of
/// the head written, then `offset` bytes into chunk `index`.
#[derive(Default)]
struct VectoredCursor {
    head: usize,
    index: usize,
    offset: usize,
}

impl VectoredCursor {
    /// Fills `slices` with what is left to write; returns how many it used.
    fn fill<'a>(
        &self,
        head: &'a [u8],
        chunks: &'a [Bytes],
        slices: &mut [std::io::IoSlice<'a>],
    ) -> usize {
        let mut count = 0;
        if self.head < head.len() {
            slices[0] = std::io::IoSlice::new(&head[self.head..]);
            count = 1;
        }
        let mut offset = self.offset;
        for chunk in chunks.iter().skip(self.index) {
            if count == slices.len() {
                break;
            }
            if offset < chunk.len() {
                slices[count] = std::io::IoSlice::new(&chunk[offset..]);
                count += 1;
            }
            offset = 0;
        }
        count
    }

    /// Moves past `n` written bytes.
    fn advance(&mut self, head: &[u8], chunks: &[Bytes], mut n: usize) {
        let in_head = n.min(head.len() - self.head);
        self.head += in_head;
        n -= in_head;
        while n > 0 {
            let Some(chunk) = chunks.get(self.index) else {
                return;
            };
            let here = (chunk.len() - self.offset).min(n);
            self.offset += here;
            n -= here;
            if self.offset == chunk.len() {
                self.index += 1;
                self.offset = 0;
            }
        }
        // Skip empty chunks so that a finished write fills no slice.
        while chunks
            .get(self.index)
            .is_some_and(|chunk| self.offset == chunk.len())
        {
            self.index += 1;
            self.offset = 0;
        }
    }
}

/// A write to the client as a result: closed or timed out.
fn written(
    result: Result<std::io::Result<()>, weir_core::timeout::Elapsed>,
) -> Result<(), Failure> {
    match result {
        Ok(Ok(())) => Ok(()),
        Ok(Err(error)) => Err(Failure::silent(Error::downstream(
            ErrorKind::ClientClosed,
            error,
        ))),
        Err(_) => Err(Failure::silent(
            Error::new(ErrorKind::ClientTimeout, Side::Downstream)
                .context("client did not read the response in time"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;
    use tokio::time::Instant;

    use super::{IdleTimer, VectoredCursor};

    /// The idle timer of a busy connection moves once per half timeout, not
    /// for every request, and is never left to fire in a wait's first half or
    /// after its end.
    #[tokio::test]
    async fn the_idle_timer_moves_once_per_half_timeout() {
        let (_owner, shutdown) = weir_core::Shutdown::new();
        let timeout = Duration::from_secs(60);
        let accepted = Instant::now();
        let sleep = std::pin::pin!(tokio::time::sleep_until(accepted + timeout));
        let watch = std::pin::pin!(shutdown.watch());
        let mut timer = IdleTimer::new(sleep, watch);
        let second = Duration::from_secs(1);
        // Requests every 5 s: the first timer stays until a wait begins past
        // its halfway point (at 35 s: 30 s after the accept would be too early).
        for at in (5..=30).step_by(5) {
            let since = accepted + at * second;
            timer.aim(since, since + timeout);
            assert_eq!(timer.sleep.deadline(), accepted + timeout, "wait at {at} s");
        }
        let since = accepted + 35 * second;
        timer.aim(since, since + timeout);
        assert_eq!(timer.sleep.deadline(), since + timeout);
        // A shorter deadline than the armed one (a lower timeout after a
        // reload) moves the timer at once.
        let since = accepted + 36 * second;
        timer.aim(since, since + Duration::from_secs(10));
        assert_eq!(timer.sleep.deadline(), since + Duration::from_secs(10));
    }

    /// Writes that take any number of bytes (short writes included) add up
    /// to the head and the chunks in order, and then nothing is left.
    #[test]
    fn a_vectored_cursor_survives_short_writes() {
        let head = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
        let chunks: Vec<Bytes> = (0..200)
            .map(|i: usize| Bytes::from(vec![(i % 251) as u8; (i * 37) % 300]))
            .collect();
        let mut expected = head.clone();
        for chunk in &chunks {
            expected.extend_from_slice(chunk);
        }
        for step in [1, 7, 300, 4096, usize::MAX] {
            let mut cursor = VectoredCursor::default();
            let mut out = Vec::new();
            loop {
                let mut slices = [std::io::IoSlice::new(&[]); 16];
                let count = cursor.fill(&head, &chunks, &mut slices);
                if count == 0 {
                    break;
                }
                let mut taken = 0;
                for slice in &slices[..count] {
                    let take = slice.len().min(step - taken);
                    out.extend_from_slice(&slice[..take]);
                    taken += take;
                    if taken == step {
                        break;
                    }
                }
                assert!(taken > 0);
                cursor.advance(&head, &chunks, taken);
            }
            assert!(out == expected, "step {step}");
        }
    }
}
