//! The HTTP/2 server driver of one client connection: the `h2` codec with the
//! virtual server's settings over a [`Watched`] stream, one task per stream
//! (handed to a [`StreamHandler`]), PING for liveness while streams are open,
//! GOAWAY on an idle timeout, on shutdown (graceful: in-flight streams
//! finish) and on a flood (`ENHANCE_YOUR_CALM`, counted by kind).

use std::future::{Future, poll_fn};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Ping, PingPong, Reason, RecvStream};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Instant;
use weir_config::{Http2, Http2Codec};
use weir_core::ShutdownSignal;
use weir_observe::{Flood, Http2Metrics, LogBudget};

use super::flood::{FloodLimits, FrameWatch};
use super::io::{Outside, Tripwire, Watch, Watched, read_preface};
use super::stream::H2Stream;

/// How long a connection closed for abuse may take to flush its GOAWAY.
const GOAWAY_FLUSH: Duration = Duration::from_secs(1);
/// Streams reset by the server for protocol errors, and streams the client
/// reset before they were accepted, that a connection may cause before it
/// gets GOAWAY (the codec's own bounds, below its defaults of 1024 and 20).
const MAX_LOCAL_ERROR_RESETS: usize = 256;
const MAX_PENDING_ACCEPT_RESETS: usize = 20;
/// Bytes a stream may have queued for the client before its writer waits.
const MAX_SEND_BUFFER: usize = 256 * 1024;

/// How the client came to speak HTTP/2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Via {
    /// TLS, ALPN chose `h2`.
    Alpn,
    /// Cleartext, the client sent the preface first.
    H2c,
}

/// A stream's request, as the codec that read it hands it over.
pub(crate) enum Incoming {
    /// The `h2` crate's head.
    Parts(http::request::Parts),
    /// weir's codec's: the HTTP/1.1 head it stands for (with an extended
    /// CONNECT's `:protocol`), or why HTTP/1.1's rules refuse it.
    Own(Result<weir_http::http2::H2Request, Refused>),
}

/// A request weir's codec read whose head HTTP/1.1's rules refuse.
#[derive(Debug)]
pub(crate) struct Refused {
    pub error: weir_http::ParseError,
    /// A HEAD: answered without a body.
    pub head_request: bool,
    /// A gRPC call: answered trailers-only, with a `grpc-status`.
    pub grpc: bool,
}

/// Serves the streams of HTTP/2 connections: one call per request stream.
pub(crate) trait StreamHandler: Clone + Send + Sync + 'static {
    /// Serves one request to its end (response sent, or the stream reset).
    fn serve(&self, stream: H2Stream, request: Incoming) -> impl Future<Output = ()> + Send;

    /// True once the connection may serve no more streams although a new one could:
    /// its TLS handshake passed client certificate checks a reload has changed since,
    /// and its certificate does not pass the new ones.
    /// New streams are then refused (`REFUSED_STREAM`: the client retries them on a
    /// new connection) and the connection goes away.
    fn outdated(&self) -> bool {
        false
    }

    /// Called when the connection is closed because the client did not answer a PING
    /// within `ping_timeout`, before its streams see the close: their records then say
    /// the client went silent (`client_timeout`), not that it left.
    fn went_silent(&self) {}

    /// The codec refused `count` requests as malformed (RST_STREAM `PROTOCOL_ERROR`) before
    /// they were handed over: they are requests all the same, to count and log.
    fn refused_malformed(&self, count: u32) {
        let _ = count;
    }
}

/// What one connection is allowed, besides the `[http2]` table.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnectionLimits {
    /// From the start to the client's preface and SETTINGS.
    pub handshake: Duration,
    /// A connection without streams for this long gets GOAWAY.
    pub idle: Duration,
    /// Streams served on one connection (`limits.max_requests_per_connection`):
    /// the last one served brings GOAWAY; those the client opened meanwhile
    /// are refused (`REFUSED_STREAM`, so it retries them on a new connection).
    pub max_streams: Option<u32>,
    /// Bounds on the HTTP/1.1 head a request becomes (weir's codec builds it).
    pub head: weir_http::Limits,
}

/// Streams at work on one connection at most: `max_concurrent_streams`, which the codec
/// holds the client to, and a quarter more for streams the client has reset that are
/// still finishing here. A gRPC client whose calls reach their deadline resets one and
/// opens the next at once, and before weir's stream has seen its reset the new one would
/// otherwise be refused (an audit: 88 of 1,375 such calls refused, at 99 open of 100).
pub(super) fn work_bound(settings: &Http2) -> usize {
    let max = settings.max_concurrent_streams as usize;
    max + max / 4
}

/// Turns of the scheduler a new stream waits for streams the client reset to finish
/// before the work bound refuses it.
pub(super) const YIELDS_BEFORE_REFUSING: usize = 4;

/// The codec's settings for a virtual server.
fn builder(settings: &Http2) -> h2::server::Builder {
    let mut builder = h2::server::Builder::new();
    builder
        .max_concurrent_streams(settings.max_concurrent_streams)
        .max_header_list_size(settings.max_header_list_size)
        .header_table_size(settings.header_table_size)
        .initial_window_size(settings.initial_stream_window)
        .initial_connection_window_size(settings.initial_connection_window)
        .max_frame_size(settings.max_frame_size)
        .max_send_buffer_size(MAX_SEND_BUFFER)
        .max_concurrent_reset_streams(settings.max_concurrent_streams as usize)
        .max_local_error_reset_streams(Some(MAX_LOCAL_ERROR_RESETS))
        .max_pending_accept_reset_streams(MAX_PENDING_ACCEPT_RESETS)
        .enable_connect_protocol();
    builder
}

/// A client connection past its preface, read through the flood watcher: what both
/// drivers start from.
pub(super) struct Opened<S> {
    /// The connection, the preface replayed first.
    pub io: Watched<S>,
    pub tripwire: Arc<Tripwire>,
    /// The socket, handed back when `io` is dropped (for a lingering close).
    pub returned: tokio::sync::oneshot::Receiver<S>,
}

/// Serves one client connection as HTTP/2 until it closes, with the codec the virtual
/// server names (`[http2] codec`). `rewind`: bytes already read from it (the preface,
/// with h2c).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn serve<S, H>(
    io: S,
    rewind: Bytes,
    via: Via,
    settings: &Http2,
    timing: ConnectionLimits,
    watch: (&Http2Metrics, &LogBudget),
    handler: H,
    shutdown: ShutdownSignal,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    H: StreamHandler,
{
    let start = (io, rewind, via);
    match settings.codec {
        Http2Codec::H2 => serve_h2(start, settings, timing, watch, handler, shutdown).await,
        Http2Codec::Weir => {
            // Boxed: the `h2` crate's connections keep their future's size.
            let serving = super::own::serve(start, settings, timing, watch, handler, shutdown);
            Box::pin(serving).await;
        }
    }
}

/// Opens a client connection for either driver: counted by how it came to HTTP/2, its
/// preface checked (`None`: it had none, and was closed), then read through the flood
/// watcher, the preface replayed first. Each driver awaits it inside its own future, so
/// that its state is not kept beside the driver's for the connection's life.
pub(super) async fn open<S: AsyncRead + AsyncWrite + Unpin>(
    (io, rewind, via): (S, Bytes, Via),
    settings: &Http2,
    timing: ConnectionLimits,
    metrics: &Http2Metrics,
) -> Option<Opened<S>> {
    match via {
        Via::Alpn => metrics.connections_alpn.inc(),
        Via::H2c => metrics.connections_h2c.inc(),
    };
    let mut io = io;
    let Some(rewind) = read_preface(&mut io, rewind, timing.handshake).await else {
        metrics.protocol_errors.inc();
        tracing::debug!("not an HTTP/2 connection preface; closed");
        return None;
    };
    let tripwire = Arc::new(Tripwire::default());
    let limits = FloodLimits::new(settings.max_header_list_size, settings.max_frame_size);
    let (back, returned) = tokio::sync::oneshot::channel();
    let watching = (FrameWatch::new(limits), Arc::clone(&tripwire));
    Some(Opened {
        io: Watched::new(io, rewind, watching, back),
        tripwire,
        returned,
    })
}

/// [`serve`] on the `h2` crate.
async fn serve_h2<S, H>(
    start: (S, Bytes, Via),
    settings: &Http2,
    timing: ConnectionLimits,
    (metrics, log): (&Http2Metrics, &LogBudget),
    handler: H,
    shutdown: ShutdownSignal,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    H: StreamHandler,
{
    let Some(Opened {
        io,
        tripwire,
        returned,
    }) = open(start, settings, timing, metrics).await
    else {
        return;
    };
    // Boxed (and built in its box, `crate::boxed`): the handshake holds the codec and a
    // timer (about 1.8 KB), and inline it would size this whole future, which each
    // connection keeps for its life, by its largest await (the `idle_memory` tests count
    // it); the box lives only until the SETTINGS.
    let handshake =
        crate::boxed(|| tokio::time::timeout(timing.handshake, builder(settings).handshake(io)));
    let mut connection = match handshake.await {
        Ok(Ok(connection)) => connection,
        Ok(Err(error)) => {
            record_end(&error, &tripwire, metrics, log);
            return;
        }
        Err(_) => {
            tracing::debug!("HTTP/2 preface not received in time");
            return;
        }
    };
    // However the connection ends, the requests the codec refused are counted.
    let _refused = ReportRefused(&handler, &tripwire);
    let mut driver = Driver::new(connection.ping_pong());
    let mut ticker = ticker(settings, timing);
    // The flood and wear watch and the shutdown's, joined once for the connection's life
    // and looked at through their flags on each turn (`Tripwire::poll_outside`).
    let mut outside = std::pin::pin!(tripwire.waiter());
    let mut watch = Watch::default();
    let mut shutdown_watch = std::pin::pin!(shutdown.watch());
    loop {
        let draining = driver.draining.is_some();
        tokio::select! {
            biased;
            event = poll_fn(|cx| tripwire.poll_outside(&mut outside, &mut watch, !draining, cx)) => {
                match event {
                    Outside::Flood(flood) => {
                        note_flood(flood, metrics, log);
                        close_now(&mut connection, Reason::ENHANCE_YOUR_CALM).await;
                        return;
                    }
                    Outside::WornOut => {
                        // Before the codec's lifetime bound on empty DATA frames closes the
                        // connection under its streams: GOAWAY, the open streams finish,
                        // and the client opens a new connection.
                        tracing::debug!("HTTP/2 client sent many empty DATA frames; connection retired");
                        driver.go_away(&mut connection);
                    }
                }
            }
            () = poll_fn(|cx| shutdown_watch.as_mut().poll_triggered(cx)), if !draining => {
                driver.go_away(&mut connection);
            }
            accepted = connection.accept() => match accepted {
                Some(Ok((request, respond))) => {
                    handler.refused_malformed(tripwire.accepted(respond.stream_id().as_u32()));
                    metrics.streams.inc();
                    // Streams the client reset just before (their RST_STREAM came with
                    // this HEADERS) are woken but may not have finished yet: a few turns of
                    // the scheduler let them, before the work bound refuses this one.
                    for _ in 0..YIELDS_BEFORE_REFUSING {
                        if driver.active.load(Ordering::Acquire) < work_bound(settings) {
                            break;
                        }
                        tokio::task::yield_now().await;
                    }
                    driver.admit(&handler, (request, respond), &mut connection, (settings, timing));
                }
                Some(Err(error)) => {
                    record_end(&error, &tripwire, metrics, log);
                    return;
                }
                // GOAWAY sent and every stream done: closed without a reset.
                None => break,
            },
            pong = poll_fn(|cx| poll_pong(&mut driver.ping, cx)), if driver.ping_sent.is_some() => {
                driver.ping_sent = None;
                if pong.is_err() {
                    return;
                }
            }
            _ = ticker.tick() => {
                handler.refused_malformed(tripwire.take_refused());
                if !driver.tick(settings) {
                    tracing::debug!("HTTP/2 client did not answer a PING in time; closing");
                    handler.went_silent();
                    return;
                }
                if driver.draining.is_none() && driver.idle_for() >= timing.idle {
                    driver.go_away(&mut connection);
                }
                if driver.goaway_ignored(settings) {
                    tracing::debug!("HTTP/2 client did not answer its GOAWAY's PING in time; closing");
                    close_now(&mut connection, Reason::NO_ERROR).await;
                    return;
                }
            }
        }
    }
    drop(connection);
    super::io::close_lingering(returned).await;
}

/// The driver's clock: a quarter of the PING interval or idle timeout, whichever is shorter,
/// within 100 ms and 5 s.
pub(super) fn ticker(settings: &Http2, timing: ConnectionLimits) -> tokio::time::Interval {
    let period = settings
        .ping_interval
        .min(timing.idle)
        .div_f64(4.0)
        .clamp(Duration::from_millis(100), Duration::from_secs(5));
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker
}

/// The connection's own state besides the codec's.
struct Driver {
    /// Streams being served.
    active: Arc<AtomicUsize>,
    ping: Option<PingPong>,
    ping_sent: Option<Instant>,
    last_ping: Instant,
    /// Last time streams were open.
    last_busy: Instant,
    /// Since when the connection is going away (a GOAWAY sent: idle, shut down, or its
    /// last stream served).
    draining: Option<Instant>,
    /// Streams handed to the handler so far.
    served: u32,
}

impl Driver {
    fn new(ping: Option<PingPong>) -> Driver {
        Driver {
            active: Arc::new(AtomicUsize::new(0)),
            ping,
            ping_sent: None,
            last_ping: Instant::now(),
            last_busy: Instant::now(),
            draining: None,
            served: 0,
        }
    }

    /// Serves a stream the client opened, or refuses it (`REFUSED_STREAM`, which the client
    /// retries on another connection): past the connection's stream limits, or on a
    /// connection whose TLS handshake is outdated ([`StreamHandler::outdated`]), which
    /// then goes away.
    #[inline]
    fn admit<T, H>(
        &mut self,
        handler: &H,
        (request, mut respond): (http::Request<RecvStream>, SendResponse<Bytes>),
        connection: &mut h2::server::Connection<T, Bytes>,
        (settings, timing): (&Http2, ConnectionLimits),
    ) where
        T: AsyncRead + AsyncWrite + Unpin,
        H: StreamHandler,
    {
        if handler.outdated() {
            respond.send_reset(Reason::REFUSED_STREAM);
            if self.draining.is_none() {
                tracing::debug!(
                    "HTTP/2 client's TLS handshake passed client certificate checks changed since; connection retired"
                );
                self.go_away(connection);
            }
            return;
        }
        let used_up = timing.max_streams.is_some_and(|max| self.served >= max);
        if used_up || self.active.load(Ordering::Acquire) >= work_bound(settings) {
            // Streams the client reset are closed for the codec but may still be at work
            // here: the work per connection stays bounded whatever the client resets.
            respond.send_reset(Reason::REFUSED_STREAM);
            return;
        }
        self.spawn_stream(handler, request, respond);
        if timing.max_streams.is_some_and(|max| self.served >= max) && self.draining.is_none() {
            // The last stream this connection may serve: GOAWAY,
            // and the open streams finish.
            self.go_away(connection);
        }
    }

    /// Starts the connection's graceful end: GOAWAY, and the open streams finish.
    fn go_away<T, B>(&mut self, connection: &mut h2::server::Connection<T, B>)
    where
        T: AsyncRead + AsyncWrite + Unpin,
        B: bytes::Buf,
    {
        self.draining = Some(Instant::now());
        connection.graceful_shutdown();
    }

    fn spawn_stream<H: StreamHandler>(
        &mut self,
        handler: &H,
        request: http::Request<RecvStream>,
        respond: SendResponse<Bytes>,
    ) {
        self.last_busy = Instant::now();
        self.served = self.served.saturating_add(1);
        self.active.fetch_add(1, Ordering::AcqRel);
        let active = Arc::clone(&self.active);
        let handler = handler.clone();
        // Boxed where it is made (`crate::boxed`): the stream's state (kilobytes, the
        // pipeline's) is built in this allocation, and tokio's moves of the task's future
        // copy a pointer.
        let (parts, stream) = H2Stream::new(request, respond);
        tokio::spawn(crate::boxed(|| {
            serve_stream(handler, stream, Incoming::Parts(parts), active)
        }));
    }

    /// A graceful GOAWAY ends once the client answers its PING (the codec then sends the
    /// final GOAWAY and closes when no stream is left). A client that never answers would
    /// hold the connection, and its place under max_connections, for ever: true once
    /// `ping_timeout` has passed since the GOAWAY with no stream left.
    fn goaway_ignored(&self, settings: &Http2) -> bool {
        self.draining
            .is_some_and(|since| since.elapsed() >= settings.ping_timeout)
            && self.active.load(Ordering::Acquire) == 0
    }

    fn idle_for(&self) -> Duration {
        if self.active.load(Ordering::Acquire) > 0 {
            Duration::ZERO
        } else {
            self.last_busy.elapsed()
        }
    }

    /// Sends a PING every `ping_interval` while streams are open; false
    /// when the last one went unanswered past `ping_timeout`.
    fn tick(&mut self, settings: &Http2) -> bool {
        let now = Instant::now();
        let busy = self.active.load(Ordering::Acquire) > 0;
        if busy {
            self.last_busy = now;
        }
        if let Some(sent) = self.ping_sent {
            return now.saturating_duration_since(sent) < settings.ping_timeout;
        }
        let due = now.saturating_duration_since(self.last_ping) >= settings.ping_interval;
        if busy
            && due
            && let Some(ping) = self.ping.as_mut()
            && ping.send_ping(Ping::opaque()).is_ok()
        {
            self.ping_sent = Some(now);
            self.last_ping = now;
        }
        true
    }
}

/// Reports the requests the codec refused and were not reported yet when dropped (the
/// connection's end).
struct ReportRefused<'a, H: StreamHandler>(&'a H, &'a Tripwire);

impl<H: StreamHandler> Drop for ReportRefused<'_, H> {
    fn drop(&mut self) {
        self.0.refused_malformed(self.1.take_refused());
    }
}

/// One stream's task: the handler's answer, counted among the connection's active streams
/// until it ends. Never inlined: `crate::boxed` builds a future in its box only when the
/// future comes out of a call; this one's constructor, inlined, was built on the stack and
/// copied into the box whole (5.2 KB per stream).
#[inline(never)]
pub(super) async fn serve_stream<H: StreamHandler>(
    handler: H,
    stream: H2Stream,
    request: Incoming,
    active: Arc<AtomicUsize>,
) {
    // Decremented however the stream ends, a panic included.
    let _guard = ActiveGuard(active);
    handler.serve(stream, request).await;
}

struct ActiveGuard(Arc<AtomicUsize>);

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Sends GOAWAY with `reason` at once and waits (at most [`GOAWAY_FLUSH`]) for the codec
/// to write it.
async fn close_now<T, B>(connection: &mut h2::server::Connection<T, B>, reason: Reason)
where
    T: AsyncRead + AsyncWrite + Unpin,
    B: bytes::Buf,
{
    connection.abrupt_shutdown(reason);
    let _ = tokio::time::timeout(GOAWAY_FLUSH, poll_fn(|cx| connection.poll_closed(cx))).await;
}

fn poll_pong(
    ping: &mut Option<PingPong>,
    cx: &mut std::task::Context<'_>,
) -> std::task::Poll<Result<(), h2::Error>> {
    match ping.as_mut() {
        Some(ping) => ping.poll_pong(cx).map(|pong| pong.map(drop)),
        None => std::task::Poll::Pending,
    }
}

/// Counts a flood the watcher found, and says so within the log budget.
pub(super) fn note_flood(flood: Flood, metrics: &Http2Metrics, log: &LogBudget) {
    metrics.flood(flood).inc();
    if let Some(left_out) = log.take() {
        tracing::info!(
            kind = flood.as_str(),
            left_out,
            "HTTP/2 flood; connection closed"
        );
    }
}

/// Counts how a connection ended in error: a flood the watcher or the codec
/// found, or another protocol error of the client.
/// Its lines are the client's to cause, one per connection: on the virtual server's budget
/// of refusals (`log`), as refused requests are.
fn record_end(error: &h2::Error, tripwire: &Tripwire, metrics: &Http2Metrics, log: &LogBudget) {
    if let Some(flood) = tripwire.flood() {
        note_flood(flood, metrics, log);
    } else if error.is_go_away() && error.is_library() {
        if error.reason() == Some(Reason::ENHANCE_YOUR_CALM) {
            let flood = tripwire.suspect().unwrap_or(Flood::Codec);
            metrics.flood(flood).inc();
            if let Some(left_out) = log.take() {
                tracing::info!(%error, left_out, "HTTP/2 abuse caught by the codec; connection closed");
            }
        } else {
            metrics.protocol_errors.inc();
            // A malformed request can end the connection (a forbidden byte in a field):
            // news, as a refused HTTP/1.1 request is.
            if let Some(left_out) = log.take() {
                tracing::info!(%error, left_out, "HTTP/2 protocol error of the client; connection closed");
            }
        }
    } else {
        tracing::debug!(%error, "HTTP/2 connection ended");
    }
}
