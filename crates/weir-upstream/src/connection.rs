//! The per-node connection pool: one per node, shared by every thread.
//!
//! `max_connections` is a hard cap on connections open (or being opened) to
//! the node. A request that finds no idle connection and no free slot waits
//! in the node's bounded queue, fair between clients (`crate::queue`); a released
//! connection (or a freed slot) goes to the next waiter directly, so a waiter
//! never races a newcomer. Idle connections are kept most-recently-used first
//! and closed after the idle timeout.
//!
//! Lifecycle of a slot: `checkout` takes an idle connection, or a free slot
//! (then connects), or queues. A [`Lease`] either goes back with
//! [`Lease::release`] (reusable) or is dropped (closed: the slot is freed). Every state and
//! transition of a slot: `LIFECYCLE.md` in this crate.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use weir_core::{Error, ErrorKind, Side};
use weir_observe::{GaugePart, NodeMetrics, PoolMetrics};
use weir_tls::ClientStream;

use crate::queue::{FairQueue, Flow};

/// Settings of one node's connection pool, taken from the pool's config.
#[derive(Debug, Clone)]
pub struct ConnectionSettings {
    /// Hard cap on connections open to the node.
    pub max_connections: u32,
    /// Requests that may wait for a connection; past it they are refused.
    pub queue_length: u32,
    /// How long a request may wait in the queue.
    pub queue_timeout: Duration,
    /// The queue takes clients in turn (`crate::queue`); `false`: first come, first served.
    pub fair_queue: bool,
    /// Idle connections are closed after this long.
    pub idle_timeout: Duration,
    /// Longest TCP connect (and TLS handshake) to the node.
    pub connect_timeout: Duration,
    /// Requests per connection before it is retired; `None` = unlimited.
    pub max_requests: Option<u32>,
    /// Connections that left HTTP (upgrades, CONNECT), counted apart from
    /// `max_connections`.
    pub max_tunnels: u32,
    /// TLS to the node; `None` = plain TCP. The pool is per pool and node, so
    /// connections are never shared across TLS settings.
    pub tls: Option<UpstreamTls>,
}

/// How connections to a pool's nodes are secured, and what is counted.
#[derive(Debug, Clone)]
pub struct UpstreamTls {
    /// Makes TLS connections with the pool's settings (and resumes sessions).
    pub connector: weir_tls::Connector,
    /// The same for layer 4 sessions: no ALPN offered, since the bytes they carry are
    /// whatever the client sends, not HTTP/1.1 (RFC 7301 §3.1).
    pub layer4: weir_tls::Connector,
    /// The pool's upstream handshake counters.
    pub metrics: weir_observe::UpstreamTlsMetrics,
}

/// Counts a handshake with a node that finished as full or resumed, whoever made it (a
/// request's connection, an HTTP/2 connection, a health check).
pub(crate) fn count_finished(
    metrics: &weir_observe::UpstreamTlsMetrics,
    connection: &weir_tls::rustls::ClientConnection,
) {
    if connection.handshake_kind() == Some(weir_tls::rustls::HandshakeKind::Resumed) {
        metrics.resumed.inc();
    } else {
        metrics.full.inc();
    }
}

impl UpstreamTls {
    /// The pool's TLS made with `connector`, counted in `metrics`.
    pub fn new(
        connector: weir_tls::Connector,
        metrics: weir_observe::UpstreamTlsMetrics,
    ) -> UpstreamTls {
        UpstreamTls {
            layer4: connector.with_alpn(&[]),
            connector,
            metrics,
        }
    }

    /// The pool's TLS for `node`: one given by DNS name names that host (without a
    /// `server_name`; [`weir_tls::Connector::for_host`]).
    pub fn for_node(&self, node: &weir_config::Node) -> UpstreamTls {
        UpstreamTls {
            connector: self.connector.for_host(node.dns_host()),
            layer4: self.layer4.for_host(node.dns_host()),
            metrics: self.metrics.clone(),
        }
    }
}

/// What a new connection to a node is opened for.
#[derive(Debug, Clone, Copy)]
enum Opening<'a> {
    /// HTTP requests: TLS offers ALPN `http/1.1`.
    Http,
    /// One layer 4 session: `preamble` (a PROXY protocol header, or nothing) written
    /// first, and no ALPN offered.
    Layer4 { preamble: &'a [u8] },
}

/// The connection pool of one node.
#[derive(Debug)]
pub struct NodeConnections {
    address: SocketAddr,
    /// Replaced by a reload that keeps the node ([`NodeConnections::update`]).
    settings: ArcSwap<ConnectionSettings>,
    /// Set when the node left the configuration, or stopped taking new requests: a
    /// connection given back is closed instead of kept idle.
    retired: AtomicBool,
    state: Mutex<State>,
    /// Tunnels open or reserved (see [`NodeConnections::reserve_tunnel`]).
    tunnels: AtomicU32,
    /// Connections that became tunnels and are still open: out of the slots, still
    /// connections (`weir_upstream_connections_open` counts them).
    tunnel_connections: AtomicU32,
    /// These connections' part of the node's `weir_upstream_connections_open`, which the
    /// node's HTTP/2 side (a pool switched to `h2c`) adds to too.
    open_gauge: GaugePart,
    next_waiter: AtomicU64,
    metrics: NodeMetrics,
    pool_metrics: PoolMetrics,
}

#[derive(Debug, Default)]
struct State {
    /// Slots taken: connections open, being opened, or granted to a waiter.
    open: u32,
    /// `max_connections` as last set: a reload that lowers it leaves `open` above it until
    /// connections come back, and each one that does is closed, not reused or passed on.
    cap: u32,
    /// Idle connections, oldest at the front, most recently used at the back.
    idle: VecDeque<Connection>,
    /// Requests waiting, each by its id and the sender of its grant.
    waiters: FairQueue<oneshot::Sender<Grant>>,
    /// The node takes no requests (disabled, or removed): see
    /// [`NodeConnections::set_taking_requests`].
    withdrawn: bool,
}

/// The outcome of the synchronous part of a checkout.
enum Taken {
    Idle(Connection),
    Slot,
    /// In the queue: the flow it waits in, its id, its receiver, and how long it may wait.
    Queued(Flow, u64, oneshot::Receiver<Grant>, Duration),
    QueueFull,
    /// The node takes no requests: choose another.
    Withdrawn,
}

/// What a waiter receives: a connection to reuse, a slot to connect with, or word that
/// the node was withdrawn while it waited.
#[derive(Debug)]
enum Grant {
    Connection(Connection),
    Slot,
    Elsewhere,
}

/// How long a connection found open by [`Connection::looks_open`] is taken
/// to still be open without asking the kernel again. A connection released
/// to a waiting request (or taken from the idle list) right after its release
/// checked it is not peeked twice: under load that second check was one of a
/// request's four system calls, and it could only catch what the node sent
/// or closed in the microseconds between the two, a race no check closes
/// (bytes may as well arrive just after it). A node's late bytes after a
/// bodiless response are waited for before the release (`release_after`).
const RECHECK_AFTER: Duration = Duration::from_millis(1);

/// An open upstream connection.
#[derive(Debug)]
pub struct Connection {
    stream: ClientStream,
    requests: u32,
    idle_since: Instant,
    /// When the release that made it reusable found it open.
    checked_at: Instant,
    /// How long the node said (its last response's `Keep-Alive: timeout=N`) it keeps the
    /// connection open between requests.
    node_idle_limit: Option<Duration>,
}

impl Connection {
    /// How long this connection may stay idle and still be given a request: the pool's
    /// idle timeout, or less where the node said it closes idle connections sooner. A
    /// request sent just as the node closes is lost (and one that is not idempotent cannot
    /// be retried), so the node's limit is kept with a margin: a second, or half of a
    /// limit shorter than two seconds.
    fn reusable_for(&self, idle_timeout: Duration) -> Duration {
        match self.node_idle_limit {
            None => idle_timeout,
            Some(limit) => {
                let margin = (limit / 2).min(NODE_IDLE_MARGIN);
                idle_timeout.min(limit - margin)
            }
        }
    }

    /// Closes a connection that is between requests: a TLS one sends its close_notify
    /// (RFC 8446 §6.1), then reads what the node sends back (its own close_notify), off the
    /// caller's path and for at most [`CLOSE_WAIT`], so that the node sees a clean end and
    /// no bytes are left unread (closing a socket over unread bytes sends a reset). A plain
    /// one is dropped (FIN).
    fn close(self) {
        close_gracefully(self.stream);
    }
}

/// Closes a connection to a node, a TLS one with a close_notify (on a task of its own, off
/// the caller's path, for at most [`CLOSE_WAIT`]), a plain one by dropping it (FIN).
pub(crate) fn close_gracefully(stream: ClientStream) {
    if !matches!(stream, ClientStream::Tls(_)) {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let mut stream = stream;
    runtime.spawn(async move {
        let _ = tokio::time::timeout(CLOSE_WAIT, async {
            stream.shutdown().await?;
            let mut rest = [0u8; 512];
            while tokio::io::AsyncReadExt::read(&mut stream, &mut rest).await? > 0 {}
            Ok::<(), std::io::Error>(())
        })
        .await;
    });
}

/// The most a connection's reuse keeps short of the node's own idle limit
/// ([`Connection::reusable_for`]).
const NODE_IDLE_MARGIN: Duration = Duration::from_secs(1);

/// How long closing a TLS connection waits for the node's close_notify.
const CLOSE_WAIT: Duration = Duration::from_secs(1);

/// Connections to close once the pool's lock is released: dropped, each is closed with
/// [`Connection::close`].
#[derive(Default)]
struct Closing(Vec<Connection>);

impl Drop for Closing {
    fn drop(&mut self) {
        for connection in self.0.drain(..) {
            connection.close();
        }
    }
}

/// A connection slot held by a health check ([`NodeConnections::check_slot`]), given back
/// when dropped.
#[derive(Debug)]
pub struct CheckSlot {
    pool: Arc<NodeConnections>,
    /// The idle connection lent with the slot, when the node was at its cap.
    lent: Option<Connection>,
}

impl CheckSlot {
    /// The stream of the idle connection lent with the slot, if one was: the check uses
    /// it instead of a connection of its own. It is not given back to the pool.
    pub fn take_stream(&mut self) -> Option<ClientStream> {
        self.lent.take().map(|connection| connection.stream)
    }
}

impl Drop for CheckSlot {
    fn drop(&mut self) {
        self.pool.free_slot();
    }
}

/// A connection checked out of a node's pool. Release it when the exchange
/// ended cleanly and the connection may carry another request; drop it to
/// close it.
#[derive(Debug)]
pub struct Lease {
    pool: Arc<NodeConnections>,
    connection: Option<Connection>,
    reused: bool,
    /// Opened for one client alone ([`NodeConnections::checkout_dedicated`]): closed, never
    /// kept idle, when the lease ends.
    dedicated: bool,
}

impl NodeConnections {
    /// An empty pool of connections to `address`.
    pub fn new(
        address: SocketAddr,
        settings: ConnectionSettings,
        metrics: NodeMetrics,
        pool_metrics: PoolMetrics,
    ) -> Arc<NodeConnections> {
        let state = State {
            cap: settings.max_connections,
            ..State::default()
        };
        Arc::new(NodeConnections {
            address,
            settings: ArcSwap::from_pointee(settings),
            retired: AtomicBool::new(false),
            state: Mutex::new(state),
            tunnels: AtomicU32::new(0),
            tunnel_connections: AtomicU32::new(0),
            open_gauge: GaugePart::new(metrics.connections_open.clone()),
            next_waiter: AtomicU64::new(0),
            metrics,
            pool_metrics,
        })
    }

    /// The node's address.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// TLS settings of connections to this node, if any.
    pub fn tls(&self) -> Option<UpstreamTls> {
        self.settings.load().tls.clone()
    }

    /// New settings from a reload that keeps this node: the queue and timeouts apply from
    /// the next checkout, and the cap at once. Lowered: idle connections past it close now,
    /// busy ones as they come back, and no waiter is served until the node is under it.
    /// Raised: waiting requests take the new slots.
    pub fn update(&self, settings: ConnectionSettings) {
        let cap = settings.max_connections;
        self.settings.store(Arc::new(settings));
        let mut past_cap = Closing(Vec::new());
        {
            let mut state = self.lock();
            let open_before = state.open;
            state.cap = cap;
            while state.open > cap
                && let Some(oldest) = state.idle.pop_front()
            {
                past_cap.0.push(oldest);
                state.open -= 1;
            }
            // A raised cap serves waiting requests now, not as connections come back.
            while state.open < cap
                && let Some(waiter) = state.waiters.pop()
            {
                self.pool_metrics.queue_length.dec();
                if waiter.send(Grant::Slot).is_ok() {
                    state.open += 1;
                }
            }
            if !past_cap.0.is_empty() || state.open != open_before {
                self.publish_open(state.open);
            }
        }
        // Closed outside the lock.
        drop(past_cap);
    }

    /// Whether connections given back are kept for reuse. `false` (a removed, draining or
    /// disabled node) closes the idle ones now and each busy one when it is given back;
    /// requests already waiting are still served.
    pub fn set_reusable(&self, reusable: bool) {
        let was_retired = self.retired.swap(!reusable, Ordering::AcqRel);
        if !reusable && !was_retired {
            self.close_idle();
        }
    }

    /// Follows the operator's choice for the node: an active node keeps connections for
    /// reuse; a draining one closes them as they come back and serves its queue; a disabled
    /// one also sends its queue elsewhere ([`Self::set_taking_requests`]).
    pub fn follow_mode(&self, mode: weir_config::NodeMode) {
        self.set_reusable(mode == weir_config::NodeMode::Active);
        self.set_taking_requests(mode != weir_config::NodeMode::Disabled);
    }

    /// Whether the node takes requests at all. `false` for a disabled node, or one a reload
    /// (or its name's new addresses) removed: the requests waiting in its queue, and any
    /// that reach it later, are sent back to choose another node, with a retry-safe
    /// [`ErrorKind::NoNodeAvailable`] (nothing was sent). "No requests" is what disabling
    /// promises (docs/admin-api.md); waiting for the connections of a node that takes
    /// none would hold them while another node is free. A draining node keeps its queue:
    /// it finishes what it accepted.
    pub fn set_taking_requests(&self, taking: bool) {
        let mut state = self.lock();
        state.withdrawn = !taking;
        if !taking {
            self.send_away(&mut state);
        }
    }

    /// Sends the requests waiting now to choose another node, as a withdrawn node does,
    /// but for this once: the node was marked down (its monitor, or passive health) while
    /// they waited, and another node is up (`Pool::redistribute`). The pool moves a down
    /// node's queue only where the requests have somewhere to go.
    pub fn send_waiters_elsewhere(&self) -> usize {
        let mut state = self.lock();
        self.send_away(&mut state)
    }

    fn send_away(&self, state: &mut State) -> usize {
        let (taken, sent) = state.waiters.send_each(|| Grant::Elsewhere);
        self.pool_metrics.queue_length.dec_by(taken as i64);
        sent
    }

    /// Request slots taken: connections open (or being opened) to the node, or granted to
    /// a waiter. Connections that became tunnels are not among them ([`Self::tunnelled`]).
    pub fn open(&self) -> u32 {
        self.lock().open
    }

    /// Connections to the node that became tunnels and are still open.
    pub fn tunnelled(&self) -> u32 {
        self.tunnel_connections.load(Ordering::Relaxed)
    }

    /// Idle connections kept for reuse now.
    pub fn idle(&self) -> usize {
        self.lock().idle.len()
    }

    /// Requests waiting for a connection now.
    pub fn queued(&self) -> usize {
        self.lock().waiters.len()
    }

    /// Takes a connection: an idle one, a new one under the cap, or one freed while
    /// this request waits in the queue, in the flow of requests without a client.
    ///
    /// The connect and the queue's wait are boxed: a kept-alive node connection
    /// is the common case, and their futures (each over 1.5 KiB) would
    /// otherwise sit in every request's future, copied whole as it starts.
    pub async fn checkout(self: &Arc<Self>) -> Result<Lease, Error> {
        self.checkout_watching(Flow::Shared, std::future::pending)
            .await
    }

    /// [`NodeConnections::checkout`] for a request of `flow` (its client's) whose client may
    /// leave while it waits. `left` is made only when the request must wait in the queue: a
    /// future that ends (with the error to answer) when the request's client has gone. The
    /// wait ends with it, the request leaves the queue unsent and `weir_queue_abandoned_total`
    /// counts it. Once a connection is granted the request goes on, whatever `left` says.
    pub async fn checkout_watching<F, L>(
        self: &Arc<Self>,
        flow: Flow,
        left: F,
    ) -> Result<Lease, Error>
    where
        F: FnOnce() -> L,
        L: Future<Output = Error>,
    {
        match self.try_take(true, flow) {
            Taken::Idle(connection) => Ok(self.reuse(connection)),
            Taken::Slot => weir_core::boxed(|| self.connect(Opening::Http)).await,
            Taken::Queued(flow, id, receiver, queue_timeout) => {
                let queued = QueuedWait {
                    pool: self,
                    flow,
                    id,
                    receiver: Some(receiver),
                    queue_timeout,
                    dedicated: false,
                };
                weir_core::boxed(|| queued.wait(Opening::Http, left())).await
            }
            Taken::QueueFull => Err(self.queue_full()),
            Taken::Withdrawn => Err(self.withdrawn()),
        }
    }

    /// Opens a connection for one client alone (a TCP virtual server's session): a new one
    /// under the cap, or one opened in a slot freed while the client waits in the queue
    /// (in the flow of requests without a client). Never an idle connection, and the lease
    /// never goes back idle: it closes when dropped (or released), which frees its slot for
    /// the next waiter. At the cap, an idle connection (left by HTTP exchanges to the same
    /// node) is closed to make room, and an idle connection granted to a waiting dedicated
    /// checkout is closed and its slot used.
    ///
    /// `preamble` (a PROXY protocol header, or nothing) is written on the new TCP connection
    /// before anything else, TLS handshake included.
    pub async fn checkout_dedicated(self: &Arc<Self>, preamble: &[u8]) -> Result<Lease, Error> {
        self.checkout_dedicated_watching(preamble, Flow::Shared, std::future::pending)
            .await
    }

    /// [`NodeConnections::checkout_dedicated`] for a client of `flow` that may leave while
    /// it waits; `left` as for [`NodeConnections::checkout_watching`].
    pub async fn checkout_dedicated_watching<F, L>(
        self: &Arc<Self>,
        preamble: &[u8],
        flow: Flow,
        left: F,
    ) -> Result<Lease, Error>
    where
        F: FnOnce() -> L,
        L: Future<Output = Error>,
    {
        let lease = self
            .checkout_new_for(Opening::Layer4 { preamble }, flow, left)
            .await;
        lease.map(|mut lease| {
            lease.dedicated = true;
            lease
        })
    }

    /// A new connection for HTTP, never an idle one, under the cap or in a slot freed while
    /// the request of `flow` waits in the queue (at the cap an idle connection gives up its
    /// slot, and an idle one granted is closed and its slot used); `left` as for
    /// [`NodeConnections::checkout_watching`]. For a request sent again after the node
    /// closed the reused connection it went on: the other idle ones may be as dead.
    /// Released, the lease goes back idle as any other.
    pub async fn checkout_new_watching<F, L>(
        self: &Arc<Self>,
        flow: Flow,
        left: F,
    ) -> Result<Lease, Error>
    where
        F: FnOnce() -> L,
        L: Future<Output = Error>,
    {
        self.checkout_new_for(Opening::Http, flow, left).await
    }

    /// A new connection opened for `opening` ([`NodeConnections::checkout_new_watching`]
    /// for HTTP, [`NodeConnections::checkout_dedicated_watching`] for a layer 4 session).
    async fn checkout_new_for<F, L>(
        self: &Arc<Self>,
        opening: Opening<'_>,
        flow: Flow,
        left: F,
    ) -> Result<Lease, Error>
    where
        F: FnOnce() -> L,
        L: Future<Output = Error>,
    {
        match self.try_take(false, flow) {
            Taken::Idle(_) => unreachable!("idle connections are not taken for a new one"),
            Taken::Slot => self.connect(opening).await,
            Taken::Queued(flow, id, receiver, queue_timeout) => {
                QueuedWait {
                    pool: self,
                    flow,
                    id,
                    receiver: Some(receiver),
                    queue_timeout,
                    dedicated: true,
                }
                .wait(opening, left())
                .await
            }
            Taken::QueueFull => Err(self.queue_full()),
            Taken::Withdrawn => Err(self.withdrawn()),
        }
    }

    /// The answer to a request for a node that takes none: retry-safe, so the exchange
    /// chooses another node (without counting a retry or a failure of this one).
    fn withdrawn(&self) -> Error {
        Error::new(ErrorKind::NoNodeAvailable, Side::Internal)
            .retry_safe(true)
            .context(format!(
                "node {} was disabled, removed or marked down while the request was on its way to it",
                self.address
            ))
    }

    fn queue_full(&self) -> Error {
        self.pool_metrics.queue_full.inc();
        Error::new(ErrorKind::QueueFull, Side::Internal)
            .context(format!("node {} has no free connection", self.address))
    }

    /// The synchronous part of checkout, under the lock. A request of `flow` that finds
    /// the queue full takes the place of the newest of a longer flow's
    /// ([`FairQueue::make_room`]), which is refused.
    fn try_take(&self, idle: bool, flow: Flow) -> Taken {
        let mut stale = Closing::default();
        // Loaded once per checkout: each load is a few atomic operations.
        let settings = self.settings.load();
        let mut state = self.lock();
        if state.withdrawn {
            return Taken::Withdrawn;
        }
        if idle
            && let Some(connection) = self.take_idle(&mut state, &mut stale, settings.idle_timeout)
        {
            return Taken::Idle(connection);
        }
        if state.open < state.cap {
            state.open += 1;
            self.publish_open(state.open);
            return Taken::Slot;
        }
        if !idle && let Some(oldest) = state.idle.pop_front() {
            // A dedicated connection at the cap: an idle one gives up its slot.
            stale.0.push(oldest);
            return Taken::Slot;
        }
        let flow = flow.waiting_in(settings.fair_queue);
        let bound = settings.queue_length as usize;
        let Ok(pushed_out) = state.waiters.make_room(flow, bound) else {
            return Taken::QueueFull;
        };
        if pushed_out.is_some() {
            self.pool_metrics.queue_length.dec();
        }
        let (sender, receiver) = oneshot::channel();
        let id = self.next_waiter.fetch_add(1, Ordering::Relaxed);
        state.waiters.push(flow, id, sender);
        self.pool_metrics.queue_length.inc();
        drop(state);
        // `stale` connections close here, outside the lock; the request pushed out learns
        // it when its sender drops.
        drop(pushed_out);
        Taken::Queued(flow, id, receiver, settings.queue_timeout)
    }

    /// Pops the most recently used idle connection that is still usable.
    /// Expired or closed ones go to `stale` (closed after the lock is dropped).
    fn take_idle(
        &self,
        state: &mut State,
        stale: &mut Closing,
        idle_timeout: Duration,
    ) -> Option<Connection> {
        let now = Instant::now();
        while let Some(connection) = state.idle.pop_back() {
            if now.duration_since(connection.idle_since) < connection.reusable_for(idle_timeout)
                && connection.still_open(now)
            {
                return Some(connection);
            }
            state.open -= 1;
            self.publish_open(state.open);
            stale.0.push(connection);
        }
        None
    }

    fn reuse(self: &Arc<Self>, connection: Connection) -> Lease {
        self.metrics.connections_reused.inc();
        Lease {
            pool: Arc::clone(self),
            connection: Some(connection),
            reused: true,
            dedicated: false,
        }
    }

    /// Opens a new connection in a slot already taken, for `opening` (a layer 4 session's
    /// preamble written first).
    async fn connect(self: &Arc<Self>, opening: Opening<'_>) -> Result<Lease, Error> {
        let settings = self.settings.load_full();
        let attempt = tokio::time::timeout(settings.connect_timeout, async {
            let mut stream = TcpStream::connect(self.address).await?;
            if let Opening::Layer4 { preamble } = opening
                && !preamble.is_empty()
            {
                stream.write_all(preamble).await?;
            }
            Ok::<_, std::io::Error>(stream)
        })
        .await;
        let stream = match attempt {
            Ok(Ok(stream)) => stream,
            Ok(Err(error)) => {
                self.free_slot();
                let error = Error::connect(ErrorKind::ConnectFailed, error);
                // weir's own limits (descriptors, local ports) are no failure of the node.
                if error.kind() == ErrorKind::ConnectFailed {
                    self.metrics.connect_failures.inc();
                }
                return Err(error.context(format!("node {}", self.address)));
            }
            Err(_) => {
                self.free_slot();
                self.metrics.connect_failures.inc();
                return Err(Error::new(ErrorKind::ConnectTimeout, Side::Upstream)
                    .context(format!("node {}", self.address))
                    .retry_safe(true));
            }
        };
        // Small requests and responses: don't wait to coalesce.
        let _ = stream.set_nodelay(true);
        let stream = match &settings.tls {
            None => ClientStream::Plain(stream),
            Some(tls) => match self
                .handshake(tls, opening, settings.connect_timeout, stream)
                .await
            {
                Ok(stream) => stream,
                Err(error) => {
                    self.free_slot();
                    self.metrics.connect_failures.inc();
                    return Err(error);
                }
            },
        };
        self.metrics.connections_created.inc();
        Ok(Lease {
            pool: Arc::clone(self),
            connection: Some(Connection {
                stream,
                requests: 0,
                idle_since: Instant::now(),
                checked_at: Instant::now(),
                node_idle_limit: None,
            }),
            reused: false,
            dedicated: false,
        })
    }

    /// Returns a reusable connection, idle from `now`: to the first live waiter, else to
    /// the idle list.
    fn give_back(&self, mut connection: Connection, now: Instant) {
        connection.idle_since = now;
        let mut state = self.lock();
        // Past a cap a reload lowered, this connection's slot is gone: no waiter gets it.
        let past_cap = state.open > state.cap;
        while !past_cap && let Some(waiter) = state.waiters.pop() {
            self.pool_metrics.queue_length.dec();
            match waiter.send(Grant::Connection(connection)) {
                Ok(()) => return,
                Err(Grant::Connection(back)) => connection = back,
                Err(Grant::Slot | Grant::Elsewhere) => unreachable!("we sent a connection"),
            }
        }
        if past_cap || self.retired.load(Ordering::Acquire) {
            state.open -= 1;
            self.publish_open(state.open);
            drop(state);
            connection.close();
            return;
        }
        state.idle.push_back(connection);
    }

    /// A slot for a health check, so that a check never takes the node past its cap: a free
    /// slot for a connection of its own, else, at the cap, the most recently used idle
    /// connection that is still open, lent to the check with its slot (an HTTP check is
    /// sent on it; a node that enforces its own cap would refuse one more connection).
    /// `None` when every slot is held by a request (whose outcome tells how the node is).
    /// The slot goes back (to the first waiter, if any) when the returned guard drops.
    pub fn check_slot(self: &Arc<Self>) -> Option<CheckSlot> {
        let settings = self.settings.load();
        let mut stale = Closing::default();
        let mut state = self.lock();
        let lent = match state.open < state.cap {
            true => None,
            // At the cap; stale idle connections the search finds free their slots.
            false => self.take_idle(&mut state, &mut stale, settings.idle_timeout),
        };
        if lent.is_none() {
            if state.open >= state.cap {
                return None;
            }
            state.open += 1;
            self.publish_open(state.open);
        }
        drop(state);
        // `stale` connections close here, outside the lock.
        drop(stale);
        Some(CheckSlot {
            pool: Arc::clone(self),
            lent,
        })
    }

    /// Brings this pool's part of `weir_upstream_connections_open` to the slots taken and
    /// the connections that became tunnels (the gauge is the sum of the node's parts).
    fn publish_open(&self, open: u32) {
        let tunnels = self.tunnel_connections.load(Ordering::Relaxed);
        self.open_gauge.set(i64::from(open) + i64::from(tunnels));
    }

    /// Frees a slot (a connection closed or a connect failed): hands it to the
    /// first live waiter, else lowers the open count.
    fn free_slot(&self) {
        let mut state = self.lock();
        // Past a cap a reload lowered, the slot is gone rather than passed on.
        while state.open <= state.cap
            && let Some(waiter) = state.waiters.pop()
        {
            self.pool_metrics.queue_length.dec();
            if waiter.send(Grant::Slot).is_ok() {
                return;
            }
        }
        state.open -= 1;
        self.publish_open(state.open);
    }

    /// Closes idle connections past the idle timeout (or past the shorter time their node
    /// keeps them, `Connection::reusable_for`), and those the node has closed (or sent
    /// something on) meanwhile, so that a node's own keep-alive timeout does not leave
    /// weir holding its half-closed sockets, counted as open, until one is tried. Returns
    /// how many.
    pub fn close_expired(&self, now: Instant) -> usize {
        let mut expired = Closing::default();
        let idle_timeout = self.settings.load().idle_timeout;
        {
            let mut state = self.lock();
            // Not in `idle_since` order once nodes' limits differ: every one is looked at
            // (at most the node's connection cap). `looks_open` makes no system call
            // unless the socket was reported readable.
            let mut index = 0;
            while index < state.idle.len() {
                let connection = &state.idle[index];
                if now.duration_since(connection.idle_since) < connection.reusable_for(idle_timeout)
                    && connection.looks_open()
                {
                    index += 1;
                    continue;
                }
                expired.0.extend(state.idle.remove(index));
                state.open -= 1;
            }
            if !expired.0.is_empty() {
                self.publish_open(state.open);
            }
        }
        expired.0.len()
    }

    /// Closes every idle connection (shutdown).
    pub fn close_idle(&self) {
        let idle = {
            let mut state = self.lock();
            let idle = Closing(state.idle.drain(..).collect());
            state.open -= idle.0.len() as u32;
            // The gauge is the node's, shared with its HTTP/2 side in an h2 pool: set only
            // when this side changed it.
            if !idle.0.is_empty() {
                self.publish_open(state.open);
            }
            idle
        };
        drop(idle);
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is consistent after every statement; a panic elsewhere cannot break it.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A request waiting in a node's queue. Dropping it (timeout, client gone)
/// removes it from the queue, and returns anything granted meanwhile.
struct QueuedWait<'a> {
    pool: &'a Arc<NodeConnections>,
    flow: Flow,
    id: u64,
    receiver: Option<oneshot::Receiver<Grant>>,
    /// The pool's `queue_timeout` when the request joined the queue.
    queue_timeout: Duration,
    /// Waiting for a new connection (dedicated, or a request sent again): a granted idle
    /// one is closed, its slot used.
    dedicated: bool,
}

impl QueuedWait<'_> {
    /// Waits for a grant, at most the queue timeout, and no longer than `left` (the
    /// client's leaving). Only the wait races `left`: once granted, a connect runs to its
    /// end, so that its slot is always given back.
    async fn wait(
        mut self,
        opening: Opening<'_>,
        left: impl Future<Output = Error>,
    ) -> Result<Lease, Error> {
        let pool = self.pool;
        let receiver = self
            .receiver
            .as_mut()
            .expect("set at construction, taken only here or in drop");
        let queue_timeout = self.queue_timeout;
        match wait_for_grant(receiver, queue_timeout, left, &pool.pool_metrics).await {
            // The client has gone: dropping `self` takes the request out of the
            // queue, or passes on what was granted meanwhile.
            Waited::Left(error) => Err(error),
            Waited::Granted(grant) => {
                self.receiver = None;
                match grant {
                    // The granted connection closes; its slot stays ours.
                    Grant::Connection(granted) if self.dedicated => {
                        granted.close();
                        pool.connect(opening).await
                    }
                    // The same check an idle connection gets: bytes the node
                    // sent after its last response (a body after HEAD, 204 or
                    // 304) must never be read as the next client's response.
                    Grant::Connection(connection) if connection.still_open(Instant::now()) => {
                        Ok(pool.reuse(connection))
                    }
                    Grant::Connection(stale) => {
                        stale.close();
                        pool.connect(opening).await
                    }
                    Grant::Slot => pool.connect(opening).await,
                    Grant::Elsewhere => Err(pool.withdrawn()),
                }
            }
            Waited::TimedOut => Err(Error::new(ErrorKind::QueueTimeout, Side::Internal).context(
                format!(
                    "waited {:?} for a connection to node {}",
                    queue_timeout, pool.address
                ),
            )),
            Waited::PushedOut => Err(Error::new(ErrorKind::QueueFull, Side::Internal).context(
                format!(
                    "pushed out of node {}'s full queue by a client with fewer requests waiting",
                    pool.address
                ),
            )),
        }
    }
}

/// How a wait in a node's queue ended.
pub(crate) enum Waited<G> {
    /// A connection, stream or slot was granted.
    Granted(G),
    /// The client went away first (the error `left` made).
    Left(Error),
    /// The queue timeout passed.
    TimedOut,
    /// The queue was full and a client with fewer requests waiting took this one's place
    /// (its sender was dropped: a sender is otherwise only dropped after a failed send,
    /// never while its request waits).
    PushedOut,
}

/// The wait of a request in a node's queue, for HTTP/1.1 connections and HTTP/2 streams
/// alike: `receiver`'s grant, at most `timeout`, and no longer than `left` (the client's
/// leaving). A wait the client left counts in `weir_queue_abandoned_total`, one that timed
/// out in `weir_queue_timeouts_total`, one pushed out of a full queue in
/// `weir_queue_full_total`.
pub(crate) async fn wait_for_grant<G>(
    receiver: &mut oneshot::Receiver<G>,
    timeout: Duration,
    left: impl Future<Output = Error>,
    metrics: &PoolMetrics,
) -> Waited<G> {
    let waited = tokio::time::timeout(timeout, async {
        tokio::select! {
            biased;
            grant = receiver => grant.map_or(Waited::PushedOut, Waited::Granted),
            error = left => Waited::Left(error),
        }
    })
    .await
    .unwrap_or(Waited::TimedOut);
    match &waited {
        Waited::Granted(_) => {}
        Waited::Left(_) => {
            metrics.queue_abandoned.inc();
        }
        Waited::TimedOut => {
            metrics.queue_timeouts.inc();
        }
        Waited::PushedOut => {
            metrics.queue_full.inc();
        }
    }
    waited
}

impl Drop for QueuedWait<'_> {
    fn drop(&mut self) {
        let Some(mut receiver) = self.receiver.take() else {
            return;
        };
        let pool = self.pool;
        {
            let mut state = pool.lock();
            if state.waiters.remove(self.flow, self.id).is_some() {
                pool.pool_metrics.queue_length.dec();
                return;
            }
        }
        // Not queued any more: a grant was sent. Pass it on.
        receiver.close();
        match receiver.try_recv() {
            Ok(Grant::Connection(connection)) => pool.give_back(connection, Instant::now()),
            Ok(Grant::Slot) => pool.free_slot(),
            Ok(Grant::Elsewhere) | Err(_) => {}
        }
    }
}

impl NodeConnections {
    /// The node refused the TLS session after weir's side of the handshake had ended
    /// (TLS 1.3: its alert about weir's client certificate follows weir's Finished, and
    /// `Self::handshake` counted the handshake as made): counted as the failed handshake
    /// it was.
    pub fn record_refused_handshake(&self) {
        if let Some(tls) = &self.settings.load().tls {
            tls.metrics.failed.inc();
        }
    }

    /// The TLS handshake with the node, within the connect timeout. A
    /// failure (verification included) is retry-safe: nothing was sent.
    async fn handshake(
        &self,
        tls: &UpstreamTls,
        opening: Opening<'_>,
        connect_timeout: Duration,
        tcp: TcpStream,
    ) -> Result<ClientStream, Error> {
        let connector = match opening {
            Opening::Http => &tls.connector,
            Opening::Layer4 { .. } => &tls.layer4,
        };
        let attempt =
            tokio::time::timeout(connect_timeout, connector.connect(tcp, self.address)).await;
        match attempt {
            Ok(Ok(stream)) => {
                count_finished(&tls.metrics, stream.get_ref().1);
                Ok(ClientStream::Tls(Box::new(stream)))
            }
            Ok(Err(error)) => {
                tls.metrics.failed.inc();
                tracing::warn!(node = %self.address, %error, "TLS handshake with node failed");
                Err(Error::upstream(ErrorKind::ConnectFailed, error)
                    .context(format!("TLS handshake with node {}", self.address))
                    .retry_safe(true))
            }
            Err(_) => {
                tls.metrics.failed.inc();
                Err(Error::new(ErrorKind::ConnectTimeout, Side::Upstream)
                    .context(format!(
                        "TLS handshake with node {} timed out",
                        self.address
                    ))
                    .retry_safe(true))
            }
        }
    }
}

impl Connection {
    /// [`Connection::looks_open`], unless the release found the connection
    /// open less than [`RECHECK_AFTER`] before `now`.
    fn still_open(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.checked_at) < RECHECK_AFTER || self.looks_open()
    }

    /// A cheap check that the node has not closed an idle connection: any
    /// readable data or EOF on an idle HTTP connection means it is unusable.
    fn looks_open(&self) -> bool {
        // Peek, not read: on a TLS connection a consumed byte would corrupt
        // the record stream. Any byte (a close_notify, an alert, stray data)
        // or EOF makes an idle connection unusable.
        //
        // The peek is made only when tokio has seen the socket readable since
        // it was last drained (`try_io`; tokio clears a socket's readiness when
        // a read leaves its buffer part empty, or when this peek finds nothing):
        // otherwise nothing the node sent or closed since has been reported,
        // and the connection is taken as open without a system call. The
        // node's bytes that came with the response are in the reader's buffer,
        // which a reusable release requires empty (`Upstream::finish` in
        // `crates/weir-proxy/src/response.rs`).
        let tcp = self.stream.tcp();
        let mut probe = [std::mem::MaybeUninit::<u8>::uninit(); 1];
        let peeked = tcp.try_io(Interest::READABLE, || {
            socket2::SockRef::from(tcp).peek(&mut probe)
        });
        matches!(peeked, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
    }
}

impl Lease {
    /// The connection, to write the request and read the response.
    pub fn stream(&mut self) -> &mut ClientStream {
        &mut self
            .connection
            .as_mut()
            .expect("present until release or drop")
            .stream
    }

    /// True when the connection carried an earlier request (it may have been
    /// closed by the node meanwhile: a failure on it is worth one retry when safe).
    pub fn is_reused(&self) -> bool {
        self.reused
    }

    /// The node the connection goes to.
    pub fn node(&self) -> SocketAddr {
        self.pool.address
    }

    /// Records what the node's latest response said of how long it keeps the connection
    /// open between requests (`None`: nothing), so that it is not reused past that.
    pub fn node_keeps_idle_for(&mut self, limit: Option<Duration>) {
        if let Some(connection) = self.connection.as_mut() {
            connection.node_idle_limit = limit;
        }
    }

    /// Returns the connection for reuse after `quiet` has passed with nothing
    /// more from the node: for a response whose node announced a body it
    /// cannot have (HEAD, 204, 304), which a confused node may send anyway a
    /// moment later. Bytes that arrive meanwhile close the connection.
    pub fn release_after(mut self, quiet: Duration) {
        let Some(connection) = self.connection.take() else {
            return;
        };
        let pool = Arc::clone(&self.pool);
        let (reused, dedicated) = (self.reused, self.dedicated);
        tokio::spawn(async move {
            tokio::time::sleep(quiet).await;
            Lease {
                pool,
                connection: Some(connection),
                reused,
                dedicated,
            }
            .release();
        });
    }

    /// Returns the connection for reuse after a complete, clean exchange.
    /// Anything the node sent past its response (a body after a bodiless
    /// response) makes it unusable: it is closed instead.
    pub fn release(mut self) {
        let Some(mut connection) = self.connection.take() else {
            return;
        };
        if !connection.looks_open() {
            drop(connection);
            self.pool.free_slot();
            return;
        }
        let now = Instant::now();
        connection.checked_at = now;
        connection.requests += 1;
        let settings = self.pool.settings.load();
        let retire = self.dedicated
            || settings
                .max_requests
                .is_some_and(|max| connection.requests >= max)
            // The node keeps it open for no time (`Keep-Alive: timeout=0`).
            || connection.reusable_for(settings.idle_timeout).is_zero();
        drop(settings);
        if retire {
            connection.close();
            self.pool.free_slot();
        } else {
            self.pool.give_back(connection, now);
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.connection.take().is_some() {
            self.pool.free_slot();
        }
    }
}

mod tunnel;

pub use tunnel::{Tunnel, TunnelPermit};

#[cfg(test)]
mod tests;
