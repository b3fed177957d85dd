//! Opening one HTTP/2 connection to a node (TCP, TLS with ALPN `h2` or
//! cleartext prior knowledge, the HTTP/2 handshake, all within the connect
//! timeout) and its driver task: it runs the codec, PINGs the node at once
//! and then every `ping_interval` where one is set, and ends the connection when the node
//! closes it, when a PING goes unanswered past `ping_timeout`, or when the
//! pool stops it. The first PONG tells that the node's SETTINGS have been
//! applied (`Settled`). A stream that timed out on the connection makes it PING
//! at once ([`super::StreamLease::suspect`]).

use std::future::poll_fn;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use h2::client::Connection;
use h2::{Ping, PingPong};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::{oneshot, watch};
use weir_core::{Error, ErrorKind, Side};
use weir_tls::ClientStream;

use super::{H2Node, H2Settings};

/// Decoded bytes of one response header list weir accepts from a node.
const MAX_HEADER_LIST: u32 = 256 * 1024;

/// The least time between two PINGs sent because a stream timed out on a connection;
/// a timeout sooner after such a PING drains the connection instead. gRPC servers in
/// Go count a PING that comes less than 5 minutes after the previous one while they
/// send nothing, and close the connection at the third: the first PING and one of
/// these in any 5 minutes stay under that.
pub(super) const SUSPECT_PING_SPACING: std::time::Duration = std::time::Duration::from_secs(300);

/// Becomes true once the node's SETTINGS have been applied: the node sends
/// them before any other frame (RFC 9113 §3.4) and frames are processed in
/// order, so they are once the codec has processed the node's first frame
/// (`empty_data::Watched` sees it), and at the latest when the driver's first
/// PING is answered ([`super::settle`]). The sender is dropped when the connection ends.
pub(super) type Settled = watch::Receiver<bool>;

/// An open connection: the request sender, the handle that stops its driver,
/// and when its node's settings are known.
pub(super) struct Opened {
    pub send: super::Sender,
    pub stop: oneshot::Sender<()>,
    pub settled: Settled,
    /// Padded empty DATA frames the node sent on it so far (the ones the codec sees).
    pub empty_data: Arc<std::sync::atomic::AtomicU32>,
    /// Wakes the driver when a stream on the connection timed out.
    pub suspect: Arc<tokio::sync::Notify>,
}

/// Opens connection `id` to `node`.
pub(super) async fn open(node: &Arc<H2Node>, id: u64) -> Result<Opened, Error> {
    let settings = node.settings.load_full();
    let timeout = settings.connect_timeout;
    let started = tokio::time::Instant::now();
    let context = || format!("HTTP/2 node {}", node.address);
    let tcp = match tokio::time::timeout(timeout, TcpStream::connect(node.address)).await {
        Ok(Ok(tcp)) => tcp,
        Ok(Err(error)) => {
            return Err(Error::connect(ErrorKind::ConnectFailed, error).context(context()));
        }
        Err(_) => return Err(timed_out(context())),
    };
    let _ = tcp.set_nodelay(true);
    let stream = match &settings.tls {
        None => ClientStream::Plain(tcp),
        Some(tls) => {
            let left = timeout.saturating_sub(started.elapsed());
            match tokio::time::timeout(left, tls.connector.connect(tcp, node.address)).await {
                Ok(Ok(stream)) => {
                    crate::connection::count_finished(&tls.metrics, stream.get_ref().1);
                    if stream.get_ref().1.alpn_protocol() != Some(b"h2") {
                        // The session was made: it ends with a close_notify, not a cut.
                        crate::connection::close_gracefully(ClientStream::Tls(Box::new(stream)));
                        return Err(Error::new(ErrorKind::ConnectFailed, Side::Upstream)
                            .context(format!("{}: the node did not choose h2 in ALPN", context()))
                            .retry_safe(true));
                    }
                    ClientStream::Tls(Box::new(stream))
                }
                Ok(Err(error)) => {
                    tls.metrics.failed.inc();
                    return Err(Error::upstream(ErrorKind::ConnectFailed, error)
                        .context(format!("TLS handshake with {}", context()))
                        .retry_safe(true));
                }
                Err(_) => {
                    tls.metrics.failed.inc();
                    return Err(timed_out(context()));
                }
            }
        }
    };
    if settings.codec == weir_config::UpstreamHttp2Codec::Weir {
        return Ok(open_own(node, id, stream, &settings));
    }
    let mut builder = h2::client::Builder::new();
    builder
        .enable_push(false)
        .initial_window_size(settings.initial_stream_window)
        .initial_connection_window_size(settings.initial_connection_window)
        .max_header_list_size(MAX_HEADER_LIST)
        .initial_max_send_streams(settings.max_streams as usize);
    let left = timeout.saturating_sub(started.elapsed());
    // Empty DATA frames kept from the codec's lifetime bound on them (`empty_data`).
    let empty_data = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let (known, settled) = watch::channel(false);
    let known = Arc::new(known);
    let stream = super::empty_data::Watched::new(
        stream,
        (Arc::downgrade(node), id),
        (Arc::clone(&empty_data), Arc::clone(&known)),
    );
    let (send, connection) = match tokio::time::timeout(left, builder.handshake(stream)).await {
        Ok(Ok(pair)) => pair,
        Ok(Err(error)) => {
            return Err(Error::new(ErrorKind::ConnectFailed, Side::Upstream)
                .context(format!("{}: HTTP/2 handshake: {error}", context()))
                .retry_safe(true));
        }
        Err(_) => return Err(timed_out(context())),
    };
    let (stop, stopped) = oneshot::channel();
    let suspect = Arc::new(tokio::sync::Notify::new());
    let signals = Signals {
        stopped,
        settled: known,
        suspect: Arc::clone(&suspect),
    };
    tokio::spawn(drive(Arc::downgrade(node), id, connection, signals));
    Ok(Opened {
        send: super::Sender::H2(send),
        stop,
        settled,
        empty_data,
        suspect,
    })
}

/// Starts connection `id` on weir's own client over `stream` (the preface and
/// SETTINGS go out with the first write; the node's answer is not awaited:
/// requests may follow them at once, RFC 9113 §3.4).
fn open_own(node: &Arc<H2Node>, id: u64, stream: ClientStream, settings: &H2Settings) -> Opened {
    let config = weir_http::h2client::Config {
        stream_window: settings.initial_stream_window,
        connection_window: settings.initial_connection_window,
        max_header_list_size: MAX_HEADER_LIST,
        ..weir_http::h2client::Config::default()
    };
    let shared = super::own::Shared::new(weir_http::h2client::ClientConnection::new(config));
    let (stop, stopped) = oneshot::channel();
    let suspect = Arc::new(tokio::sync::Notify::new());
    let (known, settled) = watch::channel(false);
    let signals = super::own::Signals {
        stopped,
        settled: Arc::new(known),
        suspect: Arc::clone(&suspect),
    };
    tokio::spawn(super::own::drive(
        stream,
        Arc::clone(&shared),
        (Arc::downgrade(node), id),
        signals,
    ));
    Opened {
        send: super::Sender::Own(shared),
        stop,
        settled,
        empty_data: Arc::new(std::sync::atomic::AtomicU32::new(0)),
        suspect,
    }
}

fn timed_out(context: String) -> Error {
    Error::new(ErrorKind::ConnectTimeout, Side::Upstream)
        .context(context)
        .retry_safe(true)
}

/// What reaches a connection's driver from the pool.
struct Signals {
    /// The pool stops the connection (idle, drained, shut down).
    stopped: oneshot::Receiver<()>,
    /// Told once the node's settings are applied.
    settled: Arc<watch::Sender<bool>>,
    /// A stream on the connection timed out.
    suspect: Arc<tokio::sync::Notify>,
}

/// How long a connection weir closes may take to say so to the node (GOAWAY, close_notify).
pub(super) const GRACEFUL_CLOSE: std::time::Duration = std::time::Duration::from_secs(1);

/// Runs one connection until it ends, then tells the node.
async fn drive<T>(
    node: Weak<H2Node>,
    id: u64,
    mut connection: Connection<T, Bytes>,
    signals: Signals,
) where
    T: AsyncRead + AsyncWrite + Unpin,
{
    let Signals {
        mut stopped,
        settled,
        suspect,
    } = signals;
    let Some((interval, timeout, address)) = node.upgrade().map(|node| {
        let settings = node.settings.load();
        (settings.ping_interval, settings.ping_timeout, node.address)
    }) else {
        return;
    };
    let mut ping = connection.ping_pong();
    // The first PING goes out at once: its answer tells the node's settings are applied.
    let mut ping_sent = ping
        .as_mut()
        .and_then(|ping| ping.send_ping(Ping::opaque()).ok())
        .map(|()| Instant::now());
    if ping_sent.is_none() {
        super::settle(&settled, &node, id);
    }
    // `ping_interval` zero: no PING after the first. gRPC servers in Go strike a client
    // that pings a connection more often than every 5 minutes while they send nothing
    // (a long call), or at all while no call is open, and close it after the third.
    let periodic = !interval.is_zero();
    let period = if periodic {
        interval.min(timeout)
    } else {
        timeout
    };
    // A tick runs a little after the PING it stands for was due, and a PING's time is taken
    // when it is sent: a PING due within this much of a tick goes at that tick, not at the
    // next one (which would space them two intervals apart).
    let slack = (period / 4).min(std::time::Duration::from_millis(50));
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_ping = Instant::now();
    // When a timed-out stream last made the driver PING.
    let mut suspected: Option<Instant> = None;
    // Whether the node ended the connection: with a GOAWAY, or (which the h2 crate reports
    // the same way as a GOAWAY without error) by closing it.
    let mut by_node = false;
    loop {
        tokio::select! {
            ended = &mut connection => {
                by_node = ended_by_node(&node, address, ended);
                break;
            }
            _ = &mut stopped => {
                // Taken out of the node's list (its cap lowered, idle too long, drained,
                // shut down): no handle sends on it any more, so the codec ends it with a
                // GOAWAY and, over TLS, a close_notify, when it is driven to its end;
                // dropped, it would be cut.
                let _ = tokio::time::timeout(GRACEFUL_CLOSE, &mut connection).await;
                break;
            }
            () = suspect.notified() => {
                // A PING already on its way answers the question.
                if ping_sent.is_some() {
                    continue;
                }
                let now = Instant::now();
                let may_ping = suspected
                    .is_none_or(|at| now.saturating_duration_since(at) >= SUSPECT_PING_SPACING);
                if may_ping
                    && let Some(ping) = ping.as_mut()
                    && ping.send_ping(Ping::opaque()).is_ok()
                {
                    tracing::debug!(node = %address, "a stream timed out on an HTTP/2 connection; PING to see that it is alive");
                    ping_sent = Some(now);
                    last_ping = now;
                    suspected = Some(now);
                    // The answer is due within `timeout`; ticks (at most that far apart)
                    // look from now on.
                    ticker.reset();
                } else if let Some(node) = node.upgrade() {
                    tracing::debug!(node = %address, "streams keep timing out on an HTTP/2 connection; draining it");
                    node.drain(id, false);
                }
            }
            pong = poll_fn(|cx| poll_pong(&mut ping, cx)), if ping_sent.is_some() => {
                ping_sent = None;
                if pong.is_err() {
                    break;
                }
                super::settle(&settled, &node, id);
            }
            _ = ticker.tick() => {
                let now = Instant::now();
                if let Some(sent) = ping_sent {
                    if now.saturating_duration_since(sent) >= timeout {
                        if let Some(node) = node.upgrade() {
                            node.h2_metrics.ping_timeouts.inc();
                        }
                        tracing::warn!(node = %address, "HTTP/2 node did not answer a PING; closing the connection");
                        break;
                    }
                } else if periodic
                    && now.saturating_duration_since(last_ping) + slack >= interval
                    && let Some(ping) = ping.as_mut()
                    && ping.send_ping(Ping::opaque()).is_ok()
                {
                    ping_sent = Some(now);
                    last_ping = now;
                }
            }
        }
    }
    if let Some(node) = node.upgrade() {
        node.ended(id, by_node);
    }
}

/// Whether the node ended the connection (GOAWAY, or closed); a TLS 1.3 node's refusal
/// of weir's client certificate, which comes only now, is counted as a failed handshake.
fn ended_by_node(
    node: &Weak<H2Node>,
    address: std::net::SocketAddr,
    ended: Result<(), h2::Error>,
) -> bool {
    let Err(error) = ended else {
        return true;
    };
    tracing::debug!(node = %address, %error, "HTTP/2 connection to node ended");
    // A TLS 1.3 node refusing weir's client certificate says so only now, after weir's
    // side of the handshake: a failed handshake and a connect failure of the node after
    // all, as for an HTTP/1.1 pool.
    if let (Some(io), Some(node)) = (error.get_io(), node.upgrade())
        && weir_tls::is_handshake_refusal(io)
    {
        node.metrics.connect_failures.inc();
        if let Some(tls) = &node.settings.load().tls {
            tls.metrics.failed.inc();
        }
    }
    error.is_go_away() && error.is_remote()
}

fn poll_pong(ping: &mut Option<PingPong>, cx: &mut Context<'_>) -> Poll<Result<(), h2::Error>> {
    match ping.as_mut() {
        Some(ping) => ping.poll_pong(cx).map(|pong| pong.map(drop)),
        None => Poll::Pending,
    }
}
