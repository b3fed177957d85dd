//! Active health monitors: one task per node checks it every `interval` and
//! marks it down after `fall` failed checks in a row, up after `rise` passed.
//!
//! The verdict is the sans-IO [`RiseFall`] state machine; [`check`] (one TCP
//! or HTTP probe) and [`spawn_monitors`] (timing, logging) are thin drivers.
//!
//! A node starts **up**, optimistically, as in HAProxy's default: traffic
//! flows at start-up and a dead node leaves after `fall` failed checks,
//! instead of every node waiting `rise` checks before its first request. A
//! monitor started on a node already marked down (by an earlier monitor)
//! starts from that verdict instead.

use std::io;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use weir_config::{HealthCheckKind, HealthMonitor, ProxyVersion, UpstreamProtocol};
use weir_core::ShutdownSignal;

use crate::connection::{CheckSlot, NodeConnections, UpstreamTls};
use crate::node::NodeState;

/// Longest answer head accepted from an HTTP check (its status line and headers).
pub const MAX_ANSWER_HEAD: usize = 16 * 1024;

/// Checks are spaced `interval` ± this fraction of it, so monitors started
/// together drift apart instead of probing every node at the same instant.
const JITTER: f64 = 0.1;

/// A monitor's verdict on its node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// Takes new requests.
    Up,
    /// Takes no requests until it rises again.
    Down,
}

/// A change of verdict, reported once by [`RiseFall::observe`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// An up node reached `fall` consecutive failures.
    WentDown,
    /// A down node reached `rise` consecutive successes.
    WentUp,
}

/// Turns a stream of check results into a verdict with hysteresis: an up
/// node goes down after `fall` failures in a row, a down node comes up after
/// `rise` successes in a row; a result the other way resets the count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RiseFall {
    rise: u32,
    fall: u32,
    state: Health,
    /// Consecutive results against the current state.
    count: u32,
}

/// Why a check failed; its `Display` is the reason logged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckFailure {
    /// The node refused the connection.
    #[error("connect refused")]
    ConnectRefused,
    /// The connect failed otherwise.
    #[error("connect failed: {0}")]
    Connect(io::ErrorKind),
    /// The check did not finish within its timeout.
    #[error("timeout")]
    Timeout,
    /// The node answered with a status outside the expected ranges.
    #[error("status {0}")]
    Status(u16),
    /// The node closed the connection before a whole response head.
    #[error("closed before a whole response head")]
    Closed,
    /// The response head does not parse.
    #[error("malformed response head")]
    Malformed,
    /// Reading or writing failed.
    #[error("i/o error: {0}")]
    Io(io::ErrorKind),
    /// The TLS handshake with the node failed, or the node refused the session right
    /// after it (a TLS 1.3 alert such as `certificate_required` on the first read).
    #[error("TLS handshake failed: {0}")]
    Tls(String),
    /// A TLS error after the handshake (the node's bytes are not TLS records, say).
    #[error("TLS error: {0}")]
    TlsSession(String),
    /// The node of an `h2` pool did not choose `h2` in ALPN: weir's requests refuse such
    /// a connection (`http2::connection`), so its checks do too.
    #[error("the node did not choose h2 in ALPN")]
    NoH2,
    /// weir could not open the check's connection (out of descriptors, memory or local
    /// ports): says nothing of the node, so the check does not count.
    #[error("weir is out of resources: {}", io::Error::from_raw_os_error(*.0))]
    OutOfResources(i32),
}

impl RiseFall {
    /// A verdict that starts up (see the module doc).
    pub fn new(rise: NonZeroU32, fall: NonZeroU32) -> RiseFall {
        RiseFall::starting(rise, fall, Health::Up)
    }

    /// A verdict that starts at `state`, with no result counted yet.
    pub fn starting(rise: NonZeroU32, fall: NonZeroU32, state: Health) -> RiseFall {
        RiseFall::resuming(rise, fall, state, 0)
    }

    /// A verdict at `state` with `count` results against it already seen (a monitor
    /// restarted by a reload goes on from its predecessor's count).
    pub fn resuming(rise: NonZeroU32, fall: NonZeroU32, state: Health, count: u32) -> RiseFall {
        RiseFall {
            rise: rise.get(),
            fall: fall.get(),
            state,
            count,
        }
    }

    /// Consecutive results against the verdict seen so far.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The verdict now.
    pub fn state(&self) -> Health {
        self.state
    }

    /// Folds in one check result; returns the transition it causes, if any.
    pub fn observe(&mut self, ok: bool) -> Option<Transition> {
        let (against, threshold, next, transition) = match self.state {
            Health::Up => (!ok, self.fall, Health::Down, Transition::WentDown),
            Health::Down => (ok, self.rise, Health::Up, Transition::WentUp),
        };
        if !against {
            self.count = 0;
            return None;
        }
        self.count += 1;
        if self.count < threshold {
            return None;
        }
        self.state = next;
        self.count = 0;
        Some(transition)
    }
}

/// How a pool's checks connect ([`spawn_monitors`]): each node's TLS (its connector, and
/// the pool's handshake counters, which count the checks' handshakes too), each node's
/// connection pool when capped, the PROXY protocol version, what the nodes speak.
pub type Wiring<'a> = (
    &'a [Option<UpstreamTls>],
    &'a [Arc<NodeConnections>],
    Option<ProxyVersion>,
    UpstreamProtocol,
);

/// Starts one monitor task per node of a pool; each ends when `shutdown`
/// triggers. Must be called inside a tokio runtime.
///
/// `tls`: for a TLS pool, each node's TLS, in the order of `nodes` (one given by DNS name
/// names its host: [`weir_tls::Connector::for_host`]); empty for a plain pool. A check's
/// handshake counts in `weir_upstream_tls_handshakes_total` as the traffic's do: a node
/// marked down for its certificate shows there as failed handshakes.
///
/// `capped`: for a pool with a connection cap (HTTP/1.1 and TCP pools), each node's
/// connection pool, in the order of `nodes`; a check then takes one of its slots
/// ([`NodeConnections::check_slot`]). Empty for a pool without one (HTTP/2 nodes).
///
/// `proxy`: the PROXY protocol version the pool's connections start with. A node that
/// expects the header refuses a connection without one, so each check's connection starts
/// with the header a connection made on the proxy's own behalf gets (v1 `UNKNOWN`, v2
/// `LOCAL`): the node serves it with the connection's own addresses.
///
/// `protocol`: what the pool's nodes speak. An HTTP check of an `h2` or `h2c` pool is an
/// HTTP/2 request (over TLS with ALPN `h2`, or in cleartext with prior knowledge): such a
/// node may speak nothing else.
pub fn spawn_monitors(
    pool_name: &str,
    nodes: &[Arc<NodeState>],
    monitor: &HealthMonitor,
    (tls, capped, proxy, protocol): Wiring<'_>,
    shutdown: ShutdownSignal,
) -> Vec<JoinHandle<()>> {
    let pool: Arc<str> = Arc::from(pool_name);
    let mut preamble = Vec::new();
    match proxy {
        None => {}
        Some(ProxyVersion::V1) => weir_proxy_protocol::write_v1_unknown(&mut preamble),
        Some(ProxyVersion::V2) => weir_proxy_protocol::write_v2_local(&mut preamble),
    }
    let monitor = Arc::new(Monitor {
        settings: monitor.clone(),
        preamble,
        http2: protocol != UpstreamProtocol::Http1,
    });
    nodes
        .iter()
        .enumerate()
        .map(|(index, node)| {
            // Each node's own connector: TLS to a node given by DNS name names its host.
            let tls = tls.get(index).cloned().flatten().map(|tls| CheckTls {
                connector: match protocol {
                    UpstreamProtocol::H2 => tls.connector.with_alpn(&[b"h2"]),
                    UpstreamProtocol::Http1 | UpstreamProtocol::H2c => tls.connector,
                },
                metrics: Some(tls.metrics),
                h2: protocol == UpstreamProtocol::H2,
            });
            tokio::spawn(run_monitor(
                Arc::clone(&pool),
                (Arc::clone(node), capped.get(index).cloned(), tls),
                Arc::clone(&monitor),
                shutdown.clone(),
            ))
        })
        .collect()
}

/// TLS for a check's own connections: the node's connector, and the counters its
/// handshakes count in (none for a check made on its own, [`check`]).
#[derive(Debug, Clone)]
struct CheckTls {
    connector: weir_tls::Connector,
    metrics: Option<weir_observe::UpstreamTlsMetrics>,
    /// The node must choose `h2` in ALPN, as for a request (an `h2` pool): one that
    /// chose nothing may still answer HTTP/2 with prior knowledge, but no request reaches it.
    h2: bool,
}

impl CheckTls {
    /// A TLS connection to `address` over `tcp`, counted; a handshake the check's timeout
    /// ends counts as failed, as a request's does.
    async fn connect(
        &self,
        tcp: TcpStream,
        address: SocketAddr,
    ) -> Result<weir_tls::ClientStream, CheckFailure> {
        let mut unfinished = Unfinished(self.metrics.as_ref());
        let connected = self.connector.connect(tcp, address).await;
        unfinished.0 = None;
        if let Some(metrics) = &self.metrics {
            match &connected {
                Ok(stream) => crate::connection::count_finished(metrics, stream.get_ref().1),
                Err(_) => {
                    metrics.failed.inc();
                }
            }
        }
        let stream = connected.map_err(|error| CheckFailure::Tls(error.to_string()))?;
        if self.h2 && stream.get_ref().1.alpn_protocol() != Some(b"h2") {
            // The session was made: it ends with a close_notify, not a cut.
            crate::connection::close_gracefully(weir_tls::ClientStream::Tls(Box::new(stream)));
            return Err(CheckFailure::NoH2);
        }
        Ok(weir_tls::ClientStream::Tls(Box::new(stream)))
    }

    /// A handshake that ended, but whose node then refused it (a TLS 1.3 node refuses
    /// weir's client certificate only after weir's side of the handshake): counted failed
    /// too, as a request's is (`NodeConnections::record_refused_handshake`).
    fn refused_after_handshake(&self) {
        if let Some(metrics) = &self.metrics {
            metrics.failed.inc();
        }
    }
}

/// Counts a handshake as failed when dropped before it finished (the check timed out).
struct Unfinished<'a>(Option<&'a weir_observe::UpstreamTlsMetrics>);

impl Drop for Unfinished<'_> {
    fn drop(&mut self) {
        if let Some(metrics) = self.0 {
            metrics.failed.inc();
        }
    }
}

/// A monitor's settings, and how HTTP checks connect.
#[derive(Debug)]
struct Monitor {
    settings: HealthMonitor,
    /// What each check's new connection sends first (a PROXY header), if anything.
    preamble: Vec<u8>,
    /// HTTP checks speak HTTP/2 (an `h2` or `h2c` pool).
    http2: bool,
}

/// Probes `address` once, within `timeout`: a TCP connect, or for HTTP a
/// request whose answer's status must fall in one of the expected ranges
/// (over TLS when `tls` is given, as the pool's traffic is).
pub async fn check(
    address: SocketAddr,
    kind: &HealthCheckKind,
    tls: Option<&weir_tls::Connector>,
    timeout: Duration,
) -> Result<(), CheckFailure> {
    let tls = tls.map(|connector| CheckTls {
        connector: connector.clone(),
        metrics: None,
        h2: false,
    });
    check_on(address, kind, (tls.as_ref(), &[], false), timeout, None).await
}

/// [`check`], for an HTTP check on `lent` (a kept-alive connection of the pool's, at the
/// node's cap) when given, instead of a connection of its own. A TCP check always connects.
/// A new connection sends `preamble` first; with `http2`, an HTTP check is an HTTP/2
/// request on it.
async fn check_on(
    address: SocketAddr,
    kind: &HealthCheckKind,
    connect: (Option<&CheckTls>, &[u8], bool),
    timeout: Duration,
    lent: Option<weir_tls::ClientStream>,
) -> Result<(), CheckFailure> {
    weir_core::timeout::timeout_settled(
        timeout,
        check_without_timeout(address, kind, connect, lent),
    )
    .await
    .unwrap_or(Err(CheckFailure::Timeout))
}

/// The bytes of an HTTP check's request. `Connection: close` keeps the
/// check to one exchange on a fresh connection.
pub fn http_request(method: &str, path: &str, host: &str) -> Vec<u8> {
    format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: weir-health\r\nConnection: close\r\n\r\n"
    )
    .into_bytes()
}

/// The status of an answer to a `method` check, once `received` holds its whole head
/// (interim 1xx answers skipped): `Ok(None)` while more bytes are needed. The head is parsed
/// by weir's own codec, as the proxy parses the node's answers, so a node whose responses
/// the proxy would refuse fails its check too.
pub fn parse_answer(received: &[u8], method: &str) -> Result<Option<u16>, CheckFailure> {
    let limits = weir_http::Limits {
        max_head_bytes: MAX_ANSWER_HEAD,
        ..weir_http::Limits::default()
    };
    let method = weir_http::Method::from_bytes(method.as_bytes());
    // The whole answer head, interim answers included, within one head's bound and a few
    // interim answers (as the proxy bounds a node's): a node that sends 1xx answers
    // without end fails its check instead of filling weir's memory.
    let mut rest = received;
    for _ in 0..=MAX_INTERIM_ANSWERS {
        match weir_http::parse_response(rest, &limits, method) {
            Ok(weir_http::Parsed::Complete(head, used)) if head.is_interim() => {
                rest = &rest[used..];
            }
            Ok(weir_http::Parsed::Complete(head, _)) => return Ok(Some(head.status())),
            Ok(weir_http::Parsed::Partial) if received.len() > MAX_ANSWER_HEAD => {
                return Err(CheckFailure::Malformed);
            }
            Ok(weir_http::Parsed::Partial) => return Ok(None),
            Err(_) => return Err(CheckFailure::Malformed),
        }
    }
    Err(CheckFailure::Malformed)
}

/// Interim (1xx) answers a check's answer may begin with.
const MAX_INTERIM_ANSWERS: usize = 8;

/// Whether `status` falls in one of the inclusive ranges.
pub fn status_expected(status: u16, expected: &[(u16, u16)]) -> bool {
    expected
        .iter()
        .any(|&(low, high)| (low..=high).contains(&status))
}

async fn check_without_timeout(
    address: SocketAddr,
    kind: &HealthCheckKind,
    (tls, preamble, http2): (Option<&CheckTls>, &[u8], bool),
    lent: Option<weir_tls::ClientStream>,
) -> Result<(), CheckFailure> {
    let connect = || async {
        let mut stream = TcpStream::connect(address)
            .await
            .map_err(|error| match error.kind() {
                _ if weir_core::error::is_out_of_resources(&error) => {
                    CheckFailure::OutOfResources(error.raw_os_error().unwrap_or_default())
                }
                io::ErrorKind::ConnectionRefused => CheckFailure::ConnectRefused,
                kind => CheckFailure::Connect(kind),
            })?;
        if !preamble.is_empty() {
            stream
                .write_all(preamble)
                .await
                .map_err(|error| io_failure(&error))?;
        }
        Ok(stream)
    };
    let HealthCheckKind::Http {
        method,
        path,
        host,
        expect_status,
    } = kind
    else {
        // A lent connection closes here: its slot is the new connection's.
        drop(lent);
        return connect().await.map(drop);
    };
    let fresh = lent.is_none();
    let stream = match lent {
        Some(stream) => stream,
        None => {
            let stream = connect().await?;
            // A failure here only costs latency on a one-request connection.
            let _ = stream.set_nodelay(true);
            match tls {
                None => weir_tls::ClientStream::Plain(stream),
                Some(tls) => tls.connect(stream, address).await?,
            }
        }
    };
    let host = match host {
        Some(host) => host.clone(),
        None => address.to_string(),
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    let asked = ask(stream, (scheme, &host, path, method), expect_status, http2).await;
    // Only a refusal of the handshake just made counts as a failed one, as a request's does.
    if let (true, Some(tls), Err(CheckFailure::Tls(_))) = (fresh, tls, &asked) {
        tls.refused_after_handshake();
    }
    asked
}

/// An HTTP check's request on `stream` (HTTP/2 with `http2`), and whether its answer's
/// status is one of `expect_status`.
async fn ask(
    mut stream: weir_tls::ClientStream,
    (scheme, host, path, method): (&str, &str, &str, &str),
    expect_status: &[(u16, u16)],
    http2: bool,
) -> Result<(), CheckFailure> {
    if http2 {
        let status = http2_status(stream, &format!("{scheme}://{host}{path}"), method).await?;
        return match status_expected(status, expect_status) {
            true => Ok(()),
            false => Err(CheckFailure::Status(status)),
        };
    }
    let status = http1_status(&mut stream, method, path, host).await;
    // The node sees a clean end (a close_notify over TLS), as a pooled connection's,
    // whatever the answer was.
    crate::connection::close_gracefully(stream);
    let status = status?;
    if status_expected(status, expect_status) {
        Ok(())
    } else {
        Err(CheckFailure::Status(status))
    }
}

/// The status of the answer to an HTTP/1.1 `method` `path` on `stream`.
async fn http1_status(
    stream: &mut weir_tls::ClientStream,
    method: &str,
    path: &str,
    host: &str,
) -> Result<u16, CheckFailure> {
    stream
        .write_all(&http_request(method, path, host))
        .await
        .map_err(|error| io_failure(&error))?;
    stream.flush().await.map_err(|error| io_failure(&error))?;
    let mut received = Vec::with_capacity(256);
    loop {
        if let Some(status) = parse_answer(&received, method)? {
            return Ok(status);
        }
        let read = stream.read_buf(&mut received).await;
        match read {
            Ok(0) => return Err(CheckFailure::Closed),
            Ok(_) => {}
            // A refusal is one only as the first thing the node sends, as for a request.
            Err(error) if received.is_empty() => return Err(io_failure(&error)),
            Err(error) => return Err(session_failure(&error)),
        }
    }
}

/// The status of the answer to `method` `uri` sent as the first stream of a new HTTP/2
/// connection on `stream`; the connection ends with the check.
async fn http2_status(
    stream: weir_tls::ClientStream,
    uri: &str,
    method: &str,
) -> Result<u16, CheckFailure> {
    let (client, connection) = h2::client::handshake(stream).await.map_err(http2_failure)?;
    let request = http::Request::builder()
        .method(method)
        .uri(uri)
        .header("user-agent", "weir-health")
        .body(())
        .map_err(|_| CheckFailure::Malformed)?;
    let exchange = async {
        let mut client = client.ready().await.map_err(http2_failure)?;
        let (response, _) = client.send_request(request, true).map_err(http2_failure)?;
        let response = response.await.map_err(http2_failure)?;
        Ok(response.status().as_u16())
    };
    // The connection's frames move only while it is polled beside the exchange.
    let mut connection = Box::pin(connection);
    let status = tokio::select! {
        status = exchange => status,
        ended = &mut connection => Err(ended.map_or_else(http2_failure, |()| CheckFailure::Closed)),
    };
    if status.is_ok() {
        // Its handles are gone with the exchange: polled on, the connection says GOAWAY
        // and closes its stream (with a close_notify over TLS), off the check's path.
        tokio::spawn(async move {
            let _ = tokio::time::timeout(Duration::from_secs(1), connection).await;
        });
    }
    status
}

/// A read that failed after the node's answer began: a TLS alert then is no refusal of
/// the handshake, whatever it says.
fn session_failure(error: &io::Error) -> CheckFailure {
    match weir_tls::tls_error(error) {
        Some(tls) => CheckFailure::TlsSession(tls.to_string()),
        None => CheckFailure::Io(error.kind()),
    }
}

/// A read or write that failed: the TLS alert or error it carries (what the node said,
/// `received fatal alert: UnknownCA` for one; a refusal of the handshake apart from other
/// TLS errors), or else its kind.
fn io_failure(error: &io::Error) -> CheckFailure {
    match weir_tls::tls_error(error) {
        Some(tls) if weir_tls::is_handshake_refusal(error) => CheckFailure::Tls(tls.to_string()),
        Some(tls) => CheckFailure::TlsSession(tls.to_string()),
        None => CheckFailure::Io(error.kind()),
    }
}

/// An HTTP/2 check's failure: the connection's I/O error, the node closing, or its
/// protocol error.
fn http2_failure(error: h2::Error) -> CheckFailure {
    match error.get_io() {
        Some(io) => io_failure(io),
        None if error.is_go_away() || error.is_reset() => CheckFailure::Closed,
        None => CheckFailure::Malformed,
    }
}

/// Whether the node sent a response head within the last `interval`.
fn answering(node: &NodeState, interval: Duration) -> bool {
    node.since_last_answer(std::time::Instant::now())
        .is_some_and(|since| since < interval)
}

/// One node's monitor: check, fold the result in, apply and log a
/// transition, sleep, until shutdown.
async fn run_monitor(
    pool: Arc<str>,
    (node, capped, tls): (
        Arc<NodeState>,
        Option<Arc<NodeConnections>>,
        Option<CheckTls>,
    ),
    monitor: Arc<Monitor>,
    shutdown: ShutdownSignal,
) {
    let connect = (tls.as_ref(), monitor.preamble.as_slice(), monitor.http2);
    let monitor = &monitor.settings;
    let start = if node.is_active_up() {
        Health::Up
    } else {
        Health::Down
    };
    // A reload that rebuilt the pool restarts its monitors: the count of checks in a row
    // against the verdict goes on from where the last monitor left it, so a pool changed
    // more often than `fall` intervals still marks a failing node down.
    let mut verdict = RiseFall::resuming(monitor.rise, monitor.fall, start, node.check_streak());
    // The first check of a node comes at once, give or take the jitter; a monitor
    // restarted by a reload waits out the interval since the node's last check, so a pool
    // changed often (node operations, names that move) does not check its nodes more often.
    let first = monitor
        .interval
        .mul_f64(rand::rng().random_range(0.0..JITTER));
    // Since when every slot is held and the node has sent no response head (see below).
    let mut stalled_since: Option<std::time::Instant> = None;
    let mut delay = match node.since_checked(std::time::Instant::now()) {
        Some(since) => monitor.interval.saturating_sub(since).max(first),
        None => first,
    };
    loop {
        tokio::select! {
            () = shutdown.triggered() => return,
            () = tokio::time::sleep(delay) => {}
        }
        // The check's connection counts against the cap like any other: one past it would
        // be refused by a node that enforces its own, and mark a working node down. An
        // idle connection gives up its slot; while every slot is held by requests that the
        // node answers (a response head within the last interval), they say how it is
        // and there is no check. A node that answered nothing for an interval while its
        // requests hold every slot may be frozen, holding them until the response timeout:
        // it is checked on a connection of its own, one past the cap. Such a check only
        // tells a node that holds connections and answers nothing (a timeout, what a
        // stopped process gives) from one that answers: a node slower than the interval
        // that refuses the extra connection (its own cap) or answers it 5xx is at work,
        // and that check counts for nothing.
        // It must have been so at two checks an interval apart: a request sent a moment
        // ago to a node that last answered long ago (sparse traffic) says nothing yet.
        let mut past_cap = false;
        let mut slot = match &capped {
            None => None,
            Some(connections) => match connections.check_slot() {
                Some(slot) => {
                    stalled_since = None;
                    Some(slot)
                }
                None if answering(&node, monitor.interval) => {
                    stalled_since = None;
                    delay = jittered(monitor.interval);
                    continue;
                }
                None => {
                    let now = std::time::Instant::now();
                    let since = *stalled_since.get_or_insert(now);
                    if now.duration_since(since) < monitor.interval {
                        delay = jittered(monitor.interval);
                        continue;
                    }
                    past_cap = true;
                    None
                }
            },
        };
        let lent = slot.as_mut().and_then(CheckSlot::take_stream);
        let outcome = tokio::select! {
            () = shutdown.triggered() => return,
            outcome = check_on(node.address, &monitor.check, connect, monitor.timeout, lent) => outcome,
        };
        drop(slot);
        node.set_checked(std::time::Instant::now());
        if let Err(failure @ CheckFailure::OutOfResources(_)) = &outcome {
            tracing::debug!(pool = %pool, node = %node.address, reason = %failure, "health check not made");
            delay = jittered(monitor.interval);
            continue;
        }
        if past_cap && matches!(&outcome, Err(failure) if *failure != CheckFailure::Timeout) {
            tracing::debug!(pool = %pool, node = %node.address, "health check past the cap answered: the node is at work");
            delay = jittered(monitor.interval);
            continue;
        }
        let transition = verdict.observe(outcome.is_ok());
        node.set_check_streak(verdict.count());
        match (&outcome, transition) {
            (Err(reason), Some(Transition::WentDown)) => {
                node.set_active_up(false);
                tracing::warn!(
                    pool = %pool,
                    node = %node.address,
                    reason = %reason,
                    checks = monitor.fall.get(),
                    "node marked down by its health monitor"
                );
            }
            (_, Some(Transition::WentUp)) => {
                node.set_active_up(true);
                tracing::info!(
                    pool = %pool,
                    node = %node.address,
                    reason = "health checks passed",
                    checks = monitor.rise.get(),
                    "node marked up by its health monitor"
                );
            }
            (Err(reason), _) => {
                tracing::debug!(pool = %pool, node = %node.address, reason = %reason, "health check failed");
            }
            (Ok(()), _) => {}
        }
        delay = jittered(monitor.interval);
    }
}

/// `interval` ± [`JITTER`] of it, at random.
fn jittered(interval: Duration) -> Duration {
    interval.mul_f64(1.0 + rand::rng().random_range(-JITTER..JITTER))
}

#[cfg(test)]
mod tests;
