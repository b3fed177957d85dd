//! HTTP/2 to a node: multiplexed connections shared by every thread, with a
//! cap on connections (`max_connections`) and on streams per connection (the
//! pool's `http2.max_concurrent_streams`, lowered to the node's own limit).
//! A request that finds no free stream and no free connection slot waits in
//! the node's bounded queue, fair between clients (`crate::queue`), which counts
//! streams; a finished stream or a freed slot goes to the next waiter, as in
//! `connection.rs`. GOAWAY from the node: the connection takes no new stream,
//! finishes those in flight, and is replaced; a request refused by it (nothing
//! processed) is sent again on another connection. PING for liveness; idle connections are closed.
//! Every state of a connection: `LIFECYCLE.md` in this crate ("HTTP/2").

mod connection;
mod empty_data;
pub mod own;
pub mod stream;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use bytes::Bytes;
use h2::client::SendRequest;
use tokio::sync::{oneshot, watch};
use weir_config::UpstreamHttp2Codec;
use weir_core::{Error, ErrorKind, Side};
use weir_observe::{GaugePart, NodeMetrics, PoolMetrics, UpstreamHttp2Metrics};

use crate::connection::{UpstreamTls, Waited, wait_for_grant};
use crate::queue::{FairQueue, Flow};
pub use stream::{NodeError, NodeStream, OwnRequest, StreamError, StreamRequest};

/// Requests sent again after a GOAWAY refused them before any was processed.
const GOAWAY_RETRIES: u32 = 3;

/// Settings of one node's HTTP/2 connections, from the pool's config.
#[derive(Debug, Clone)]
pub struct H2Settings {
    /// Connections open (or being opened) to the node at most (`connections.max_connections`).
    pub max_connections: u32,
    /// Streams at once on one connection, lowered to the node's own limit.
    pub max_streams: u32,
    /// Requests that may wait for a stream (`connections.queue_length`).
    pub queue_length: u32,
    /// How long a request may wait for a stream.
    pub queue_timeout: Duration,
    /// The queue takes clients in turn (`connections.fair_queue`).
    pub fair_queue: bool,
    /// A connection without streams for this long is closed.
    pub idle_timeout: Duration,
    /// TCP connect (and TLS handshake) time allowed.
    pub connect_timeout: Duration,
    /// Response bytes one stream may receive before weir reads them.
    pub initial_stream_window: u32,
    /// ... and all streams of one connection together.
    pub initial_connection_window: u32,
    /// A PING goes to a connection this often.
    pub ping_interval: Duration,
    /// A connection whose PING is unanswered for this long is replaced.
    pub ping_timeout: Duration,
    /// TLS (ALPN `h2`) for `protocol = "h2"`; `None` for h2c.
    pub tls: Option<UpstreamTls>,
    /// The HTTP/2 implementation of the connections (`http2.codec`).
    pub codec: UpstreamHttp2Codec,
}

impl H2Settings {
    /// The name TLS to the node at `address` sends and verifies (`None` for h2c).
    pub(crate) fn tls_name(
        &self,
        address: SocketAddr,
    ) -> Option<weir_tls::rustls::pki_types::ServerName<'static>> {
        self.tls.as_ref().map(|tls| tls.connector.name_for(address))
    }
}

/// The HTTP/2 connections of one node.
#[derive(Debug)]
pub struct H2Node {
    address: SocketAddr,
    /// Replaced by a reload that carries the node over ([`H2Node::update`]).
    settings: ArcSwap<H2Settings>,
    state: Mutex<State>,
    /// This side's part of the node's `weir_upstream_connections_open`, which the node's
    /// HTTP/1.1 connections, and the HTTP/2 side a reload retired, add to too.
    open_gauge: GaugePart,
    next_id: AtomicU64,
    metrics: NodeMetrics,
    h2_metrics: UpstreamHttp2Metrics,
    pool_metrics: PoolMetrics,
}

#[derive(Debug, Default)]
struct State {
    /// Connections open, oldest first.
    connections: Vec<Shared>,
    /// Connections being opened (they hold a slot of `max_connections`).
    connecting: u32,
    /// Requests waiting, each by its id and the sender of its grant.
    waiters: FairQueue<oneshot::Sender<Grant>>,
    /// The node takes no requests (disabled, or removed): see
    /// [`H2Node::set_taking_requests`].
    withdrawn: bool,
}

/// What opens streams on a connection: the `h2` crate's handle, or weir's own
/// client's shared state.
#[derive(Debug, Clone)]
enum Sender {
    H2(SendRequest<Bytes>),
    Own(Arc<own::Shared>),
}

impl Sender {
    /// Streams the node takes at once, as its SETTINGS say.
    fn max_send_streams(&self) -> u32 {
        match self {
            Sender::H2(send) => send.current_max_send_streams() as u32,
            Sender::Own(shared) => shared.max_concurrent_streams(),
        }
    }

    /// Whether the node announced extended CONNECT (RFC 8441).
    fn extended_connect(&self) -> bool {
        match self {
            Sender::H2(send) => send.is_extended_connect_protocol_enabled(),
            Sender::Own(shared) => shared.enables_connect_protocol(),
        }
    }
}

/// One open connection as the pool sees it.
#[derive(Debug)]
struct Shared {
    id: u64,
    send: Sender,
    streams: u32,
    /// Streams it carried so far (a stream on a connection with any is a reuse).
    carried: u64,
    /// GOAWAY received, PING unanswered, or the driver ended: no new streams.
    draining: bool,
    idle_since: Instant,
    /// Stops the connection's driver task (idle close, shutdown).
    stop: Option<oneshot::Sender<()>>,
    /// When the node's SETTINGS are known (an extended CONNECT waits for them).
    settled: connection::Settled,
    /// The node's SETTINGS are applied (the codec has processed the node's first frame,
    /// or answered its first PING): until then the connection carries the stream of the
    /// request that opened it and no other, since the codec assumes `max_streams` and a
    /// node that allows fewer would refuse the rest.
    known: bool,
    /// Padded empty DATA frames the node sent on it, which the codec counts (see
    /// `empty_data`): with its open streams, at most [`empty_data::RETIRE_AT`].
    empty_data: Arc<std::sync::atomic::AtomicU32>,
    /// Tells the connection's driver that a stream on it timed out ([`StreamLease::suspect`]).
    suspect: Arc<tokio::sync::Notify>,
}

impl Shared {
    /// Whether it may carry one more stream: not draining, under `max` and the node's
    /// limit, and with room under the codec's bound on empty DATA frames should each open
    /// stream, this one too, send one more (a connection at the bound is drained, so one
    /// without room here always has streams that will end).
    fn has_room(&self, max: u32) -> bool {
        let empty = self.empty_data.load(Ordering::Relaxed);
        let max = match self.known {
            true => max.min(self.send.max_send_streams()),
            false => 1,
        };
        !self.draining
            && self.streams < max
            && self.streams.saturating_add(empty) < empty_data::RETIRE_AT
    }
}

/// Open connections that take new streams (not draining).
fn serving(state: &State) -> usize {
    state.connections.iter().filter(|c| !c.draining).count()
}

/// What a waiter receives: a stream on an open connection, a slot to connect with, or
/// word that the node was withdrawn while it waited.
#[derive(Debug)]
enum Grant {
    Stream(u64, Sender),
    Slot,
    Elsewhere,
}

enum Taken {
    Stream(u64, Sender, bool),
    Slot,
    Queued(Flow, u64, oneshot::Receiver<Grant>),
    QueueFull,
    Withdrawn,
}

/// A request the stream did not take: the lease, the codec's error, and the
/// request itself when it was not consumed (the connection refused before).
#[derive(Debug)]
pub struct SendFailure {
    /// The stream slot the request was offered.
    pub lease: StreamLease,
    /// Why the codec did not take it.
    pub error: NodeError,
    /// The request, when the connection refused it before consuming it.
    pub request: Option<StreamRequest>,
}

/// A stream slot on one of the node's connections, held until the exchange
/// ends (response body read, or given up). Dropping it frees the slot.
#[derive(Debug)]
pub struct StreamLease {
    node: Arc<H2Node>,
    connection: u64,
    send: Sender,
    reused: bool,
}

/// A request sent on a stream: the lease, and the stream (the response to
/// come and the request body's sender).
pub struct Sent {
    /// The stream slot, held until the response body is read.
    pub lease: StreamLease,
    /// The stream the request opened.
    pub stream: NodeStream,
}

impl H2Node {
    /// A node's HTTP/2 side, with no connection yet (they open on demand).
    pub fn new(
        address: SocketAddr,
        settings: H2Settings,
        metrics: NodeMetrics,
        h2_metrics: UpstreamHttp2Metrics,
        pool_metrics: PoolMetrics,
    ) -> Arc<H2Node> {
        Arc::new(H2Node {
            address,
            settings: ArcSwap::from_pointee(settings),
            state: Mutex::new(State::default()),
            open_gauge: GaugePart::new(metrics.connections_open.clone()),
            next_id: AtomicU64::new(0),
            metrics,
            h2_metrics,
            pool_metrics,
        })
    }

    /// The name TLS to this node sends and verifies (`None` for h2c).
    pub(crate) fn tls_name(&self) -> Option<weir_tls::rustls::pki_types::ServerName<'static>> {
        self.settings.load().tls_name(self.address)
    }

    /// The settings in force: those of the last reload.
    fn settings(&self) -> arc_swap::Guard<Arc<H2Settings>> {
        self.settings.load()
    }

    /// A reload kept the node (same address, protocol and TLS name) with new settings: they
    /// apply at once to its queue and caps, and to connections opened from now on (windows,
    /// PING timing and the connect timeout of those open stay as they were). The queue, the
    /// open connections and the count under the cap are carried over, as an HTTP/1.1 node's
    /// are (`NodeConnections::update`). Past a lowered cap, idle connections close now and
    /// the newest busy ones take no new stream and close once their streams end (as do
    /// connections being opened, once open); a raised cap, or more streams per connection,
    /// serves waiting requests now.
    pub fn update(&self, settings: H2Settings) {
        let cap = settings.max_connections as usize;
        let codec_changed = settings.codec != self.settings().codec;
        self.settings.store(Arc::new(settings));
        let mut state = self.lock();
        if codec_changed {
            // Requests are put in the new codec's form from now on: the connections of
            // the other one take no new stream, and close once their streams end.
            self.drain_all(&mut state);
        }
        // Connections being opened are not counted: one that opens past the cap is
        // drained as it goes in (`connect_in_slot`).
        let mut serving = serving(&state);
        while serving > cap {
            // Idle ones first, then the newest.
            let idle = state
                .connections
                .iter()
                .position(|c| !c.draining && c.streams == 0);
            let Some(index) = idle.or_else(|| state.connections.iter().rposition(|c| !c.draining))
            else {
                break;
            };
            state.connections[index].draining = true;
            if state.connections[index].streams == 0 {
                self.remove(&mut state, index);
            }
            serving -= 1;
        }
        self.grant_streams(&mut state);
        self.open_for_waiters(&mut state);
    }

    /// Whether one more connection may open: those open (draining ones too, until they
    /// close) and being opened are under the cap.
    fn under_cap(&self, state: &State) -> bool {
        (state.connections.len() as u32) + state.connecting < self.settings().max_connections
    }

    /// The node's address.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The HTTP/2 implementation its connections run on: requests are put in its form.
    pub fn codec(&self) -> UpstreamHttp2Codec {
        self.settings().codec
    }

    /// The scheme its requests name (`:scheme`): `https` over TLS, `http` for h2c.
    pub fn scheme(&self) -> &'static [u8] {
        match self.settings().tls {
            Some(_) => b"https",
            None => b"http",
        }
    }

    /// Connections open or being opened.
    pub fn open(&self) -> u32 {
        let state = self.lock();
        state.connections.len() as u32 + state.connecting
    }

    /// Streams in flight over all connections.
    pub fn streams(&self) -> u32 {
        self.lock().connections.iter().map(|c| c.streams).sum()
    }

    /// Open connections without streams.
    pub fn idle(&self) -> usize {
        let state = self.lock();
        state.connections.iter().filter(|c| c.streams == 0).count()
    }

    /// Requests waiting for a stream.
    pub fn queued(&self) -> usize {
        self.lock().waiters.len()
    }

    /// Sends `request` on a stream: a free one on an open connection, one
    /// on a new connection under the cap, or one freed while this request
    /// waits in the queue (in the flow of requests without a client). A connection that
    /// refuses it with GOAWAY (nothing was processed) is drained and the request sent
    /// again.
    pub async fn send(
        self: &Arc<Self>,
        request: StreamRequest,
        end_of_stream: bool,
    ) -> Result<Sent, Error> {
        self.send_watching(request, end_of_stream, Flow::Shared, std::future::pending)
            .await
    }

    /// [`H2Node::send`] for a request of `flow` (its client's) whose client may leave
    /// while it waits in the queue: `left` as for `NodeConnections::checkout_watching`.
    /// It watches the first wait only: a request sent again after a GOAWAY waits
    /// without it.
    pub async fn send_watching<F, L>(
        self: &Arc<Self>,
        request: StreamRequest,
        end_of_stream: bool,
        flow: Flow,
        left: F,
    ) -> Result<Sent, Error>
    where
        F: FnOnce() -> L,
        L: Future<Output = Error>,
    {
        match self
            .send_checked(request, end_of_stream, None, flow, left)
            .await?
        {
            Some(sent) => Ok(sent),
            // Only an extended CONNECT is checked against the node's settings.
            None => Err(Error::new(ErrorKind::Io, Side::Internal)
                .context("request refused by a settings check it did not ask for")),
        }
    }

    /// Sends an extended CONNECT (RFC 8441: `request` carries
    /// `h2::ext::Protocol`) as [`send`](Self::send) does, on a connection
    /// whose node announced `SETTINGS_ENABLE_CONNECT_PROTOCOL`; the stream
    /// stays open for DATA both ways. `Ok(None)`: the node did not announce
    /// it (its settings are awaited at most `settle` on a new connection).
    /// `flow`: the client's, as for [`H2Node::send_watching`].
    pub async fn send_extended_connect(
        self: &Arc<Self>,
        request: StreamRequest,
        settle: Duration,
        flow: Flow,
    ) -> Result<Option<Sent>, Error> {
        self.send_checked(request, false, Some(settle), flow, std::future::pending)
            .await
    }

    async fn send_checked<F, L>(
        self: &Arc<Self>,
        mut request: StreamRequest,
        end_of_stream: bool,
        extended_connect: Option<Duration>,
        flow: Flow,
        left: F,
    ) -> Result<Option<Sent>, Error>
    where
        F: FnOnce() -> L,
        L: Future<Output = Error>,
    {
        let mut attempt = 0;
        let mut left = Some(left);
        loop {
            let watch = left.take();
            let lease = self
                .checkout_watching(flow, move || async move {
                    match watch {
                        Some(left) => left().await,
                        None => std::future::pending().await,
                    }
                })
                .await?;
            if let Some(settle) = extended_connect
                && !lease.extended_connect_enabled(settle).await
            {
                return Ok(None);
            }
            let failure = match lease.send_request(request, end_of_stream).await {
                Ok(sent) => return Ok(Some(sent)),
                Err(failure) => failure,
            };
            let refused = failure.error.refused();
            if refused && failure.error.ends_the_connection() {
                self.drain(failure.lease.connection, failure.error.is_go_away());
            }
            match failure.request {
                // The connection said no before taking it: try another.
                Some(unsent) if refused && attempt < GOAWAY_RETRIES => {
                    request = unsent;
                    attempt += 1;
                }
                _ => {
                    return Err(Error::new(ErrorKind::Io, Side::Upstream)
                        .context(format!("HTTP/2 node {}: {}", self.address, failure.error))
                        .retry_safe(refused));
                }
            }
        }
    }

    /// Takes a stream slot.
    pub async fn checkout(self: &Arc<Self>) -> Result<StreamLease, Error> {
        self.checkout_watching(Flow::Shared, std::future::pending)
            .await
    }

    /// [`H2Node::checkout`] for a request of `flow`; a wait in the queue also ends when
    /// `left` (made only then) ends: the client has gone, the request leaves the queue
    /// unsent and is counted in `weir_queue_abandoned_total`.
    async fn checkout_watching<F, L>(
        self: &Arc<Self>,
        flow: Flow,
        left: F,
    ) -> Result<StreamLease, Error>
    where
        F: FnOnce() -> L,
        L: Future<Output = Error>,
    {
        match self.try_take(flow) {
            Taken::Stream(connection, send, reused) => Ok(self.lease(connection, send, reused)),
            // Boxed, as the queue's wait: a new connection is the rare case, and its
            // kilobytes inline would be carried (and copied) by every request's future.
            Taken::Slot => weir_core::boxed(|| self.connect_in_slot()).await,
            Taken::Queued(flow, id, receiver) => {
                let queued = QueuedWait {
                    node: self,
                    flow,
                    id,
                    receiver: Some(receiver),
                };
                weir_core::boxed(|| queued.wait(left())).await
            }
            Taken::QueueFull => {
                self.pool_metrics.queue_full.inc();
                Err(Error::new(ErrorKind::QueueFull, Side::Internal)
                    .context(format!("HTTP/2 node {} has no free stream", self.address)))
            }
            Taken::Withdrawn => Err(self.withdrawn()),
        }
    }

    /// Whether the node takes requests at all, as `NodeConnections::set_taking_requests`
    /// says for an HTTP/1.1 node: `false` sends its waiting requests, and any that reach it
    /// later, to choose another node.
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

    /// A retry-safe refusal: nothing was sent, another node is chosen.
    fn withdrawn(&self) -> Error {
        Error::new(ErrorKind::NoNodeAvailable, Side::Internal)
            .retry_safe(true)
            .context(format!(
                "HTTP/2 node {} was disabled, removed or marked down while the request was on its way to it",
                self.address
            ))
    }

    /// The synchronous part of a checkout; a full queue as in `NodeConnections::try_take`.
    fn try_take(&self, flow: Flow) -> Taken {
        let mut state = self.lock();
        if state.withdrawn {
            return Taken::Withdrawn;
        }
        if let Some(taken) = self.take_stream(&mut state) {
            return taken;
        }
        // A connection being opened will carry streams for others too: a burst of requests
        // waits for it rather than each opening a connection of its own.
        let coming = self.coming_streams(&state);
        let settings = self.settings();
        let queue_length = settings.queue_length as usize;
        let waits_for_one = state.waiters.len() < coming.min(queue_length);
        if !waits_for_one && self.under_cap(&state) {
            state.connecting += 1;
            self.set_open_gauge(&state);
            return Taken::Slot;
        }
        let flow = flow.waiting_in(settings.fair_queue);
        let Ok(pushed_out) = state.waiters.make_room(flow, queue_length) else {
            return Taken::QueueFull;
        };
        if pushed_out.is_some() {
            self.pool_metrics.queue_length.dec();
        }
        let (sender, receiver) = oneshot::channel();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        state.waiters.push(flow, id, sender);
        self.pool_metrics.queue_length.inc();
        drop(state);
        // The request pushed out learns it when its sender drops.
        drop(pushed_out);
        Taken::Queued(flow, id, receiver)
    }

    /// Streams the connections being opened, or open but whose node has not said yet how
    /// many it allows, are expected to have for waiters: `max_streams` each, less those
    /// taken (a connection being opened has one, for the request that opens it).
    fn coming_streams(&self, state: &State) -> usize {
        let max = self.settings().max_streams as usize;
        let connecting = (state.connecting as usize).saturating_mul(max.saturating_sub(1));
        let unsettled: usize = state
            .connections
            .iter()
            .filter(|c| !c.known && !c.draining)
            .map(|c| max.saturating_sub(c.streams as usize))
            .sum();
        connecting + unsettled
    }

    /// The node's SETTINGS on connection `id` are applied (told by the connection's stream
    /// once the codec has processed the node's first frame, and by its driver when the
    /// first PING is answered): its streams go to waiters, and waiters it has no room for
    /// open connections of their own.
    fn settled(&self, id: u64) {
        let mut state = self.lock();
        let Some(shared) = state.connections.iter_mut().find(|c| c.id == id) else {
            // Not in the pool yet: it reads the settled flag as it goes in.
            return;
        };
        shared.known = true;
        self.grant_streams(&mut state);
        self.open_for_waiters(&mut state);
    }

    /// Waiters that no connection, open or coming, has a stream for (a node that allows
    /// fewer streams than `max_streams`, a connect that failed) get slots to open
    /// connections of their own, under the cap.
    fn open_for_waiters(&self, state: &mut State) {
        while state.waiters.len() > self.coming_streams(state) && self.under_cap(state) {
            if !self.grant(state, Grant::Slot) {
                break;
            }
            state.connecting += 1;
        }
        self.set_open_gauge(state);
    }

    /// A free stream on the oldest connection that has one (packing streams
    /// on few connections keeps the others idle, so they can close).
    fn take_stream(&self, state: &mut State) -> Option<Taken> {
        let max = self.settings().max_streams;
        let connection = state.connections.iter_mut().find(|c| c.has_room(max))?;
        connection.streams += 1;
        let reused = connection.carried > 0;
        connection.carried += 1;
        self.h2_metrics.streams_open.inc();
        Some(Taken::Stream(
            connection.id,
            connection.send.clone(),
            reused,
        ))
    }

    fn lease(self: &Arc<Self>, connection: u64, send: Sender, reused: bool) -> StreamLease {
        if reused {
            self.metrics.connections_reused.inc();
        }
        StreamLease {
            node: Arc::clone(self),
            connection,
            send,
            reused,
        }
    }

    /// Opens a connection in a slot already taken; the caller gets its first stream.
    async fn connect_in_slot(self: &Arc<Self>) -> Result<StreamLease, Error> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        match connection::open(self, id).await {
            Ok(opened) => {
                let send = opened.send;
                let mut state = self.lock();
                // Read under the lock: `settled` takes it too, so a connection whose
                // settings come meanwhile is either known here or found by it.
                let known = *opened.settled.borrow();
                state.connecting -= 1;
                // Opened while a reload lowered the cap below the connections serving:
                // it carries its opener's stream and closes.
                let past_cap = serving(&state) >= self.settings().max_connections as usize;
                state.connections.push(Shared {
                    id,
                    send: send.clone(),
                    streams: 1,
                    carried: 1,
                    draining: past_cap,
                    idle_since: Instant::now(),
                    stop: Some(opened.stop),
                    known,
                    settled: opened.settled,
                    empty_data: opened.empty_data,
                    suspect: opened.suspect,
                });
                self.h2_metrics.streams_open.inc();
                // The new connection may carry waiters' streams at once; those it has no
                // room for open connections of their own.
                self.grant_streams(&mut state);
                self.open_for_waiters(&mut state);
                drop(state);
                self.metrics.connections_created.inc();
                Ok(self.lease(id, send, false))
            }
            Err(error) => {
                // weir's own limits (descriptors, local ports) are no failure of the node.
                if error.kind() != ErrorKind::OutOfResources {
                    self.metrics.connect_failures.inc();
                }
                self.free_slot();
                Err(error)
            }
        }
    }

    /// Hands free streams to waiters, in the queue's order.
    fn grant_streams(&self, state: &mut State) {
        while !state.waiters.is_empty() {
            let Some(Taken::Stream(connection, send, _)) = self.take_stream(state) else {
                return;
            };
            if !self.grant(state, Grant::Stream(connection, send)) {
                // No live waiter took it: give the stream back.
                self.release_stream(state, connection);
                return;
            }
        }
    }

    /// Sends a grant to the next live waiter; false when none took it.
    fn grant(&self, state: &mut State, mut grant: Grant) -> bool {
        while let Some(waiter) = state.waiters.pop() {
            self.pool_metrics.queue_length.dec();
            match waiter.send(grant) {
                Ok(()) => return true,
                Err(back) => grant = back,
            }
        }
        false
    }

    /// A connection slot freed (connect failed, connection closed): to the
    /// first waiter, who connects, else back to the pool (and past a cap a reload
    /// lowered, gone).
    fn free_slot(&self) {
        let mut state = self.lock();
        state.connecting -= 1;
        if self.under_cap(&state) && self.grant(&mut state, Grant::Slot) {
            state.connecting += 1;
        }
        self.set_open_gauge(&state);
    }

    /// A stream ended: its slot goes to the first waiter, else the
    /// connection may become idle (or, draining, close once empty).
    fn release_stream(&self, state: &mut State, connection: u64) {
        let Some(index) = state.connections.iter().position(|c| c.id == connection) else {
            return;
        };
        self.h2_metrics.streams_open.dec();
        let shared = &mut state.connections[index];
        shared.streams -= 1;
        if shared.streams == 0 {
            shared.idle_since = Instant::now();
        }
        if shared.draining {
            if shared.streams == 0 {
                self.remove(state, index);
            }
            return;
        }
        let send = shared.send.clone();
        if !state.waiters.is_empty() && shared.has_room(self.settings().max_streams) {
            state.connections[index].streams += 1;
            self.h2_metrics.streams_open.inc();
            if !self.grant(state, Grant::Stream(connection, send)) {
                self.h2_metrics.streams_open.dec();
                state.connections[index].streams -= 1;
            }
        }
    }

    /// Takes a connection out of service: no new streams; it closes once
    /// its streams are done.
    fn drain(&self, connection: u64, goaway: bool) {
        let mut state = self.lock();
        let Some(index) = state.connections.iter().position(|c| c.id == connection) else {
            return;
        };
        if !state.connections[index].draining {
            tracing::debug!(node = %self.address, goaway, "HTTP/2 connection takes no new stream; draining");
            state.connections[index].draining = true;
            if goaway {
                self.h2_metrics.goaways.inc();
            }
        }
        if state.connections[index].streams == 0 {
            self.remove(&mut state, index);
        }
    }

    /// Removes a connection: its slot goes to the first waiter, who connects (unless a
    /// reload lowered the cap below the connections still open).
    fn remove(&self, state: &mut State, index: usize) {
        let mut shared = state.connections.swap_remove(index);
        self.h2_metrics
            .streams_open
            .dec_by(i64::from(shared.streams));
        if let Some(stop) = shared.stop.take() {
            let _ = stop.send(());
        }
        if self.under_cap(state) && self.grant(state, Grant::Slot) {
            state.connecting += 1;
        }
        self.set_open_gauge(state);
    }

    /// Called by a connection's driver when it ended (closed by the node, an
    /// error, a PING unanswered). `by_node`: the node sent a GOAWAY (or closed), which
    /// counts as one unless a refused stream already counted it.
    fn ended(&self, connection: u64, by_node: bool) {
        let mut state = self.lock();
        if let Some(index) = state.connections.iter().position(|c| c.id == connection) {
            if by_node && !state.connections[index].draining {
                self.h2_metrics.goaways.inc();
            }
            // Streams still leased fail on their own; their slots are not reused.
            state.connections[index].draining = true;
            self.remove(&mut state, index);
        }
    }

    /// Closes connections idle for longer than `idle_timeout`. Returns how many.
    pub fn close_expired(&self, now: Instant) -> usize {
        let mut state = self.lock();
        let mut closed = 0;
        let idle_timeout = self.settings().idle_timeout;
        while let Some(index) = state.connections.iter().position(|c| {
            c.streams == 0 && now.saturating_duration_since(c.idle_since) >= idle_timeout
        }) {
            self.remove(&mut state, index);
            closed += 1;
        }
        closed
    }

    /// Closes every connection without streams (shutdown); the others close
    /// once their streams are done.
    pub fn close_idle(&self) {
        let mut state = self.lock();
        self.drain_all(&mut state);
    }

    /// Takes every connection out of service: those without streams close now, the
    /// others once their streams are done.
    fn drain_all(&self, state: &mut State) {
        for connection in &mut state.connections {
            connection.draining = true;
        }
        while let Some(index) = state.connections.iter().position(|c| c.streams == 0) {
            self.remove(state, index);
        }
    }

    /// Sets this side's part of the node's `weir_upstream_connections_open`.
    fn set_open_gauge(&self, state: &State) {
        let open = state.connections.len() as u32 + state.connecting;
        self.open_gauge.set(i64::from(open));
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is consistent after every statement; a panic elsewhere cannot break it.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl StreamLease {
    /// The address of the node the stream goes to.
    pub fn node(&self) -> SocketAddr {
        self.node.address
    }

    /// True when the stream is on a connection that carried earlier streams.
    pub fn is_reused(&self) -> bool {
        self.reused
    }

    /// Whether the node announced `SETTINGS_ENABLE_CONNECT_PROTOCOL` (RFC
    /// 8441) on this stream's connection. On a connection whose node's
    /// settings are not applied yet (a new one), waits for them, at most
    /// `settle`; a connection that ended meanwhile answers as its codec last knew.
    pub async fn extended_connect_enabled(&self, settle: Duration) -> bool {
        let settled = {
            let state = self.node.lock();
            let shared = state.connections.iter().find(|c| c.id == self.connection);
            shared.map(|shared| shared.settled.clone())
        };
        if let Some(mut settled) = settled {
            let known = tokio::time::timeout(settle, settled.wait_for(|known| *known)).await;
            if !matches!(known, Ok(Ok(_))) {
                tracing::debug!(node = %self.node.address, "HTTP/2 node's settings not known in time");
            }
        }
        self.send.extended_connect()
    }

    /// The node kept this stream waiting past a timeout (its answer, the rest of its body,
    /// room in its window): the connection may be dead while its socket is not, which
    /// nothing else finds while streams keep it busy (no idle timeout), unless PINGs go
    /// every `ping_interval`. Its driver PINGs it, and closes it if no answer comes within
    /// `ping_timeout`; a connection PINGed so lately that another PING could count against
    /// weir (see `connection::SUSPECT_PING_SPACING`) is drained instead, so new streams go to
    /// a new connection.
    pub fn suspect(&self) {
        let state = self.node.lock();
        if let Some(shared) = state.connections.iter().find(|c| c.id == self.connection) {
            shared.suspect.notify_one();
        }
    }

    /// Sends the request head on this stream. On failure the lease comes back
    /// with the codec's error (see [`refused`]) and, when the connection had
    /// already refused new streams, the request.
    pub async fn send_request(
        mut self,
        request: StreamRequest,
        end_of_stream: bool,
    ) -> Result<Sent, SendFailure> {
        let stream = match (&self.send, request) {
            (Sender::H2(send), StreamRequest::H2(request)) => {
                let mut send = match send.clone().ready().await {
                    Ok(send) => send,
                    Err(error) => {
                        return Err(SendFailure {
                            lease: self,
                            error: NodeError::H2(error),
                            request: Some(StreamRequest::H2(request)),
                        });
                    }
                };
                let sent = send.send_request(request, end_of_stream);
                self.send = Sender::H2(send);
                match sent {
                    Ok((response, body)) => NodeStream::H2 { response, body },
                    Err(error) => {
                        return Err(SendFailure {
                            lease: self,
                            error: NodeError::H2(error),
                            request: None,
                        });
                    }
                }
            }
            (Sender::Own(shared), StreamRequest::Own(request)) => {
                let head = weir_http::http2::NodeRequest {
                    written: &request.written,
                    scheme: self.node.scheme(),
                    te_trailers: request.te_trailers,
                    protocol: request.protocol,
                };
                match shared.open(&head, end_of_stream) {
                    Ok((recv, send)) => NodeStream::Own { recv, send },
                    Err(error) => {
                        let unsent = matches!(error, StreamError::Refused(_));
                        return Err(SendFailure {
                            lease: self,
                            error: NodeError::Own(error),
                            request: unsent.then_some(StreamRequest::Own(request)),
                        });
                    }
                }
            }
            // A reload changed the codec while this request was on its way: the old
            // connection takes no new stream, and the request goes on another.
            (_, request) => {
                return Err(SendFailure {
                    lease: self,
                    error: NodeError::Own(StreamError::Refused(
                        weir_http::h2client::Refused::GoingAway,
                    )),
                    request: Some(request),
                });
            }
        };
        self.node.metrics.requests_forwarded.inc();
        Ok(Sent {
            lease: self,
            stream,
        })
    }
}

impl Drop for StreamLease {
    fn drop(&mut self) {
        let mut state = self.node.lock();
        self.node.release_stream(&mut state, self.connection);
    }
}

/// The node's SETTINGS on connection `id` are applied: `known` says so, and the node's
/// pool is told ([`H2Node::settled`]) the first time. Called by the connection's driver
/// (its first PING answered) and by its stream (`empty_data::Watched`: the node's first
/// frame processed), whichever comes first.
fn settle(known: &watch::Sender<bool>, node: &Weak<H2Node>, id: u64) {
    if !known.send_replace(true)
        && let Some(node) = node.upgrade()
    {
        node.settled(id);
    }
}

/// A request waiting in a node's queue; dropping it removes it, and passes on
/// anything granted meanwhile.
struct QueuedWait<'a> {
    node: &'a Arc<H2Node>,
    flow: Flow,
    id: u64,
    receiver: Option<oneshot::Receiver<Grant>>,
}

impl QueuedWait<'_> {
    /// Waits for a grant, at most the queue timeout, and no longer than `left`; once
    /// granted, a connect runs to its end (its slot is always given back).
    async fn wait(mut self, left: impl Future<Output = Error>) -> Result<StreamLease, Error> {
        let node = self.node;
        let receiver = self
            .receiver
            .as_mut()
            .expect("set at construction, taken only here or in drop");
        let queue_timeout = node.settings().queue_timeout;
        match wait_for_grant(receiver, queue_timeout, left, &node.pool_metrics).await {
            // The client has gone: dropping `self` takes the request out of the
            // queue, or passes on what was granted meanwhile.
            Waited::Left(error) => Err(error),
            Waited::Granted(grant) => {
                self.receiver = None;
                match grant {
                    Grant::Stream(connection, send) => Ok(node.lease(connection, send, true)),
                    Grant::Slot => node.connect_in_slot().await,
                    Grant::Elsewhere => Err(node.withdrawn()),
                }
            }
            Waited::TimedOut => Err(Error::new(ErrorKind::QueueTimeout, Side::Internal).context(
                format!(
                    "waited {:?} for a stream to HTTP/2 node {}",
                    queue_timeout, node.address
                ),
            )),
            Waited::PushedOut => Err(Error::new(ErrorKind::QueueFull, Side::Internal).context(
                format!(
                    "pushed out of HTTP/2 node {}'s full queue by a client with fewer requests waiting",
                    node.address
                ),
            )),
        }
    }
}

impl Drop for QueuedWait<'_> {
    fn drop(&mut self) {
        let Some(mut receiver) = self.receiver.take() else {
            return;
        };
        let node = self.node;
        let mut state = node.lock();
        if state.waiters.remove(self.flow, self.id).is_some() {
            node.pool_metrics.queue_length.dec();
            return;
        }
        receiver.close();
        match receiver.try_recv() {
            Ok(Grant::Stream(connection, _)) => node.release_stream(&mut state, connection),
            Ok(Grant::Slot) => {
                // Passed on while the cap (a reload may have lowered it) still has room
                // for it: the slot is counted in `connecting` now.
                let open = state.connections.len() as u32 + state.connecting;
                let passed =
                    open <= node.settings().max_connections && node.grant(&mut state, Grant::Slot);
                if !passed {
                    state.connecting -= 1;
                }
                node.set_open_gauge(&state);
            }
            Ok(Grant::Elsewhere) | Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests;
