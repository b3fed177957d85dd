//! The connection task of a client connection on weir's own codec: reads the
//! socket into the codec, hands each new stream to a task of its own, writes
//! what the codec and the streams put out, and keeps the connection's clocks
//! (handshake, idle, PING) and limits (streams per connection, work bound,
//! floods) as `server.rs` does for the `h2` crate's connections.

use std::future::poll_fn;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;
use weir_config::Http2;
use weir_core::ShutdownSignal;
use weir_http::frame::ErrorCode;
use weir_http::h2server::{Config, ConnectionError, Event, ServerConnection};
use weir_http::http2::H2Request;
use weir_observe::{Flood, Http2Metrics, LogBudget};

use super::{Inner, Shared};
use crate::http2::io::{Outside, Tripwire, Watch};
use crate::http2::server::{
    ConnectionLimits, Incoming, Opened, Refused, StreamHandler, Via, YIELDS_BEFORE_REFUSING,
    note_flood, open, serve_stream, ticker, work_bound,
};
use crate::http2::stream::H2Stream;

/// How long a connection closed for abuse may take to flush its GOAWAY.
const GOAWAY_FLUSH: Duration = Duration::from_secs(1);
/// Bytes read from the socket at once.
const READ_SIZE: usize = 16 * 1024;
/// ... and by a connection with no stream at work (its next request's HEADERS, most often).
const IDLE_READ: usize = 1024;

/// A stream the codec opened in the last read, for the driver to hand over.
struct Fresh {
    stream: u32,
    request: Result<H2Request, Refused>,
}

/// The codec's settings for a virtual server.
fn config(settings: &Http2, limits: weir_http::Limits) -> Config {
    Config {
        max_concurrent_streams: settings.max_concurrent_streams,
        stream_window: settings.initial_stream_window,
        connection_window: settings.initial_connection_window,
        max_frame_size: settings.max_frame_size,
        max_header_list_size: settings.max_header_list_size,
        header_table_size: settings.header_table_size,
        enable_connect_protocol: true,
        head_limits: limits,
    }
}

/// Serves one client connection as HTTP/2 on weir's own codec until it
/// closes.
pub(crate) async fn serve<S, H>(
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
    let shared = Shared::new(ServerConnection::new(config(settings, timing.head)));
    let mut driver = Driver {
        shared,
        active: Arc::new(AtomicUsize::new(0)),
        served: 0,
        draining: None,
        ping_sent: None,
        last_ping: Instant::now(),
        last_busy: Instant::now(),
        peer_gone: false,
        goaway_acked: false,
    };
    let ended = driver
        .run(
            io,
            (settings, timing),
            &handler,
            &tripwire,
            shutdown,
            (metrics, log),
        )
        .await;
    handler.refused_malformed(tripwire.take_refused());
    driver.shared.lock().close();
    if ended == End::Graceful {
        super::super::io::close_lingering(returned).await;
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// GOAWAY sent and every stream done: the socket closes gently.
    Graceful,
    /// Closed at once (an error, a flood, the client gone or silent).
    Abrupt,
}

struct Driver {
    shared: Arc<Shared>,
    /// Stream tasks at work.
    active: Arc<AtomicUsize>,
    /// Streams handed to tasks so far.
    served: u32,
    /// Since when a GOAWAY of weir's is out.
    draining: Option<Instant>,
    ping_sent: Option<Instant>,
    last_ping: Instant,
    /// Last time streams were open.
    last_busy: Instant,
    /// The client sent GOAWAY: it opens no more streams.
    peer_gone: bool,
    /// The client answered a PING sent with or after weir's GOAWAY.
    goaway_acked: bool,
}

/// The socket's two halves and what is waiting to go out on it.
struct Wire<S> {
    reader: tokio::io::ReadHalf<S>,
    writer: tokio::io::WriteHalf<S>,
    input: BytesMut,
    output: Vec<u8>,
    /// Bytes of `output` written.
    at: usize,
    /// Written and not yet flushed (TLS keeps records until then).
    unflushed: bool,
    /// Last time the client took bytes (or there were none to give it).
    moved: Instant,
    eof: bool,
}

impl<S: AsyncRead + AsyncWrite> Wire<S> {
    fn new(io: S) -> Self {
        let (reader, writer) = tokio::io::split(io);
        Wire {
            reader,
            writer,
            input: BytesMut::with_capacity(READ_SIZE),
            output: Vec::new(),
            at: 0,
            unflushed: false,
            moved: Instant::now(),
            eof: false,
        }
    }

    fn pending(&self) -> bool {
        self.at < self.output.len()
    }

    /// Writes what is left within `limit`: the connection's last words.
    async fn flush_within(&mut self, shared: &Shared, limit: Duration) {
        let flushed = async {
            loop {
                if !self.pending() {
                    self.take(shared);
                    if !self.pending() {
                        break;
                    }
                }
                match self.writer.write(&self.output[self.at..]).await {
                    Ok(n) if n > 0 => self.at += n,
                    _ => return,
                }
            }
            let _ = self.writer.flush().await;
        };
        let _ = tokio::time::timeout(limit, flushed).await;
    }

    /// Makes room to read into: [`READ_SIZE`] while streams are at work; on a
    /// connection with none and nothing waiting either way, the buffers go
    /// (an idle connection keeps [`IDLE_READ`] bytes to read its next request into).
    fn ready_to_read(&mut self, shared: &Shared, busy: bool) {
        if !busy && self.input.is_empty() && !self.pending() && !self.unflushed {
            let mut inner = shared.lock();
            if inner.streams() == 0 && inner.core.output().is_empty() {
                if self.input.capacity() > IDLE_READ {
                    self.input = BytesMut::with_capacity(IDLE_READ);
                }
                self.output = Vec::new();
                *inner.core.output() = Vec::new();
                return;
            }
        }
        self.input.reserve(READ_SIZE);
    }

    /// Takes the codec's output, once what was taken before is written.
    fn take(&mut self, shared: &Shared) {
        if self.pending() {
            return;
        }
        self.output.clear();
        self.at = 0;
        let mut inner = shared.lock();
        std::mem::swap(inner.core.output(), &mut self.output);
        inner.unwritten = self.output.len();
        if !self.pending() {
            self.moved = Instant::now();
        }
    }

    /// `n` more bytes went to the socket: streams held back for the bytes
    /// waiting look again.
    fn wrote(&mut self, n: usize, shared: &Shared) {
        self.at += n;
        self.unflushed = true;
        self.moved = Instant::now();
        let mut inner = shared.lock();
        inner.unwritten = self.output.len() - self.at;
        if inner.send_blocked && inner.unwritten + inner.core.output().len() < super::MAX_UNWRITTEN
        {
            inner.send_blocked = false;
            inner.slots.windows_opened();
        }
    }
}

impl Driver {
    #[allow(clippy::too_many_arguments)]
    async fn run<S, H>(
        &mut self,
        io: S,
        (settings, timing): (&Http2, ConnectionLimits),
        handler: &H,
        tripwire: &Tripwire,
        shutdown: ShutdownSignal,
        (metrics, log): (&Http2Metrics, &LogBudget),
    ) -> End
    where
        S: AsyncRead + AsyncWrite + Unpin,
        H: StreamHandler,
    {
        let mut wire = Wire::new(io);
        let handshake_by = Instant::now() + timing.handshake;
        let mut ticker = ticker(settings, timing);
        let mut outside = std::pin::pin!(tripwire.waiter());
        let mut watch = Watch::default();
        let mut shutdown_watch = std::pin::pin!(shutdown.watch());
        let mut fresh = Vec::new();
        loop {
            if !wire.input.is_empty() {
                match self.receive(&wire.input, &mut fresh) {
                    Ok(used) => wire.input.advance(used),
                    Err(error) => {
                        record_end(error, tripwire, metrics, log);
                        wire.flush_within(&self.shared, GOAWAY_FLUSH).await;
                        return End::Abrupt;
                    }
                }
            }
            for new in fresh.drain(..) {
                self.admit(new, handler, tripwire, (settings, timing)).await;
                metrics.streams.inc();
            }
            // Every stream let go (a task that still runs holds none: nothing more can go
            // out on its behalf).
            if (self.goaway_seen() || self.peer_gone) && self.shared.lock().streams() == 0 {
                wire.flush_within(&self.shared, GOAWAY_FLUSH).await;
                return End::Graceful;
            }
            wire.take(&self.shared);
            wire.ready_to_read(&self.shared, self.busy());
            let draining = self.draining.is_some();
            tokio::select! {
                biased;
                event = poll_fn(|cx| tripwire.poll_outside(&mut outside, &mut watch, !draining, cx)) => {
                    match event {
                        Outside::Flood(flood) => {
                            note_flood(flood, metrics, log);
                            self.shared.lock().core.abort(ErrorCode::ENHANCE_YOUR_CALM);
                            wire.flush_within(&self.shared, GOAWAY_FLUSH).await;
                            return End::Abrupt;
                        }
                        Outside::WornOut => {
                            tracing::debug!("HTTP/2 client sent many empty DATA frames; connection retired");
                            self.go_away();
                        }
                    }
                }
                () = poll_fn(|cx| shutdown_watch.as_mut().poll_triggered(cx)), if !draining => {
                    self.go_away();
                }
                moved = weir_core::wait::write_or_flush(&mut wire.writer, &wire.output[wire.at..]), if wire.pending() || wire.unflushed => {
                    match moved {
                        Ok(Some(n)) if n > 0 => wire.wrote(n, &self.shared),
                        Ok(None) => wire.unflushed = false,
                        _ => return End::Abrupt,
                    }
                }
                read = wire.reader.read_buf(&mut wire.input), if !wire.eof => {
                    match read {
                        Ok(n) if n > 0 => {}
                        // The client closed (or its connection broke): nothing more comes, and
                        // nothing more can be answered.
                        _ => {
                            wire.eof = true;
                            tracing::debug!("HTTP/2 client closed its connection");
                            wire.flush_within(&self.shared, GOAWAY_FLUSH).await;
                            return End::Abrupt;
                        }
                    }
                }
                () = self.shared.wake.notified() => {}
                _ = ticker.tick() => {
                    handler.refused_malformed(tripwire.take_refused());
                    let stalled = wire.pending() && wire.moved.elapsed() >= timing.idle;
                    match self.on_tick(settings, timing, handshake_by, stalled) {
                        Ok(()) => {}
                        Err(End::Graceful) => {
                            wire.flush_within(&self.shared, GOAWAY_FLUSH).await;
                            return End::Graceful;
                        }
                        Err(End::Abrupt) => {
                            if self.ping_late(settings) {
                                handler.went_silent();
                            }
                            return End::Abrupt;
                        }
                    }
                }
            }
        }
    }

    /// The driver's clock: the handshake's deadline, PING, the client's reading, idleness.
    /// `Err`: the connection ends so.
    /// `stalled`: bytes have waited for the client to take them for `timeouts.idle`.
    fn on_tick(
        &mut self,
        settings: &Http2,
        timing: ConnectionLimits,
        handshake_by: Instant,
        stalled: bool,
    ) -> Result<(), End> {
        if !self.shared.lock().core.is_open() && Instant::now() >= handshake_by {
            tracing::debug!("HTTP/2 preface not received in time");
            return Err(End::Abrupt);
        }
        if self.draining.is_some() && self.ping_late(settings) && !self.busy() {
            // The client never answered the GOAWAY's PING: gone, with nothing open.
            return Err(End::Graceful);
        }
        if !self.tick(settings) {
            tracing::debug!("HTTP/2 client did not answer a PING in time; closing");
            return Err(End::Abrupt);
        }
        if stalled {
            tracing::debug!("HTTP/2 client took none of its bytes for the idle timeout; closing");
            return Err(End::Abrupt);
        }
        if self.draining.is_none() && self.idle_for() >= timing.idle {
            self.go_away();
        }
        Ok(())
    }

    /// Feeds the codec what came in; the streams it opened go to `fresh`.
    fn receive(&mut self, input: &[u8], fresh: &mut Vec<Fresh>) -> Result<usize, ConnectionError> {
        let mut guard = self.shared.lock();
        let Inner { core, slots, .. } = &mut *guard;
        let mut give_back: Vec<(u32, u32)> = Vec::new();
        let mut opened = false;
        let mut peer_gone = false;
        let mut answered = false;
        let used = core.receive(input, |event| match event {
            Event::Request {
                stream,
                request,
                end_stream,
            } => {
                slots.open(stream, end_stream);
                fresh.push(Fresh {
                    stream,
                    request: Ok(request),
                });
            }
            Event::Malformed {
                stream,
                error,
                head_request,
                grpc,
            } => {
                slots.open(stream, false);
                fresh.push(Fresh {
                    stream,
                    request: Err(Refused {
                        error,
                        head_request,
                        grpc,
                    }),
                });
            }
            Event::Data {
                stream,
                data,
                end_stream,
            } => {
                let unread = slots.data(stream, data, end_stream);
                if unread > 0 {
                    give_back.push((stream, unread));
                }
            }
            Event::Trailers { stream, lines } => slots.trailers(stream, lines),
            Event::Reset {
                stream,
                error,
                by_client,
            } => slots.reset(stream, error, by_client),
            Event::GoAway { .. } => peer_gone = true,
            Event::PingAnswered { .. } => answered = true,
            Event::WindowOpened => opened = true,
        });
        for (stream, len) in give_back {
            core.release(stream, len);
        }
        if opened {
            slots.windows_opened();
        }
        drop(guard);
        self.peer_gone |= peer_gone;
        if answered {
            self.ping_sent = None;
            self.goaway_acked = self.draining.is_some();
        }
        used
    }

    /// Hands a new stream to a task of its own, or refuses it (`REFUSED_STREAM`,
    /// which the client retries on another connection): past the connection's
    /// limits, or on a connection whose TLS handshake is outdated.
    async fn admit<H: StreamHandler>(
        &mut self,
        new: Fresh,
        handler: &H,
        tripwire: &Tripwire,
        (settings, timing): (&Http2, ConnectionLimits),
    ) {
        handler.refused_malformed(tripwire.accepted(new.stream));
        for _ in 0..YIELDS_BEFORE_REFUSING {
            if self.active.load(Ordering::Acquire) < work_bound(settings) {
                break;
            }
            tokio::task::yield_now().await;
        }
        if handler.outdated() {
            self.shared.lock().refuse(new.stream);
            if self.draining.is_none() {
                tracing::debug!(
                    "HTTP/2 client's TLS handshake passed client certificate checks changed since; connection retired"
                );
                self.go_away();
            }
            return;
        }
        let used_up = timing.max_streams.is_some_and(|max| self.served >= max);
        if used_up || self.active.load(Ordering::Acquire) >= work_bound(settings) {
            self.shared.lock().refuse(new.stream);
            return;
        }
        self.last_busy = Instant::now();
        self.served = self.served.saturating_add(1);
        self.active.fetch_add(1, Ordering::AcqRel);
        let stream = H2Stream::own(&self.shared, new.stream);
        let incoming = Incoming::Own(new.request);
        let active = Arc::clone(&self.active);
        let handler = handler.clone();
        tokio::spawn(crate::boxed(|| {
            serve_stream(handler, stream, incoming, active)
        }));
        if timing.max_streams.is_some_and(|max| self.served >= max) && self.draining.is_none() {
            self.go_away();
        }
    }

    /// GOAWAY, and a PING after it: the open streams finish, and the connection
    /// closes after them once the client has answered the PING (so it has read
    /// the GOAWAY: closed earlier, what it sent meanwhile could come back as a
    /// reset that loses it the end of its answers), or `ping_timeout` after it.
    fn go_away(&mut self) {
        self.draining = Some(Instant::now());
        self.goaway_acked = false;
        let mut inner = self.shared.lock();
        inner.core.go_away(ErrorCode::NO_ERROR);
        if self.ping_sent.is_none() {
            inner.core.ping(*b"weir-bye");
            self.ping_sent = Some(Instant::now());
            self.last_ping = Instant::now();
        }
    }

    /// A GOAWAY of weir's went out and the client has shown it read it.
    fn goaway_seen(&self) -> bool {
        self.draining.is_some() && self.goaway_acked
    }

    /// The PING out has gone unanswered past `ping_timeout`.
    fn ping_late(&self, settings: &Http2) -> bool {
        self.ping_sent
            .is_some_and(|sent| sent.elapsed() >= settings.ping_timeout)
    }

    fn busy(&self) -> bool {
        self.active.load(Ordering::Acquire) > 0
    }

    fn idle_for(&self) -> Duration {
        if self.busy() {
            Duration::ZERO
        } else {
            self.last_busy.elapsed()
        }
    }

    /// Sends a PING every `ping_interval` while streams are open; false when
    /// the last one went unanswered past `ping_timeout`.
    fn tick(&mut self, settings: &Http2) -> bool {
        let now = Instant::now();
        let busy = self.busy();
        if busy {
            self.last_busy = now;
        }
        if let Some(sent) = self.ping_sent {
            return now.saturating_duration_since(sent) < settings.ping_timeout;
        }
        if busy && now.saturating_duration_since(self.last_ping) >= settings.ping_interval {
            self.shared.lock().core.ping(*b"weir-png");
            self.ping_sent = Some(now);
            self.last_ping = now;
        }
        true
    }
}

/// Counts how a connection ended in error: a flood the watcher or the codec
/// found, or another protocol error of the client (one line per connection, on
/// the virtual server's budget of refusals).
fn record_end(
    error: ConnectionError,
    tripwire: &Tripwire,
    metrics: &Http2Metrics,
    log: &LogBudget,
) {
    if let Some(flood) = tripwire.flood() {
        note_flood(flood, metrics, log);
    } else if error.code == ErrorCode::ENHANCE_YOUR_CALM {
        let flood = tripwire.suspect().unwrap_or(Flood::Codec);
        metrics.flood(flood).inc();
        if let Some(left_out) = log.take() {
            tracing::info!(
                reason = error.reason,
                left_out,
                "HTTP/2 abuse caught by the codec; connection closed"
            );
        }
    } else {
        metrics.protocol_errors.inc();
        if let Some(left_out) = log.take() {
            tracing::info!(code = ?error.code, reason = error.reason, left_out, "HTTP/2 protocol error of the client; connection closed");
        }
    }
}
