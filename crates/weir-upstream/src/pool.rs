//! A pool at run time: its nodes, their connection pools, the balancer and
//! node selection with health and fail-open.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use weir_config::NodeMode;
use weir_core::ShutdownSignal;
use weir_http::RequestHead;
use weir_observe::{Metrics, PoolMetrics};

use crate::balancer::{self, Balancer, ConsistentHash};
use crate::connection::{ConnectionSettings, NodeConnections, UpstreamTls};
use crate::health;
use crate::http2::{H2Node, H2Settings};
use crate::node::NodeState;
use crate::persistence::{Persistence, PersistenceKey};

/// A pool of nodes, shared by every thread.
#[derive(Debug)]
pub struct Pool {
    /// The pool's name in the config.
    pub name: String,
    /// The pool's validated settings.
    pub config: weir_config::Pool,
    /// The nodes, in config order.
    pub nodes: Vec<Arc<NodeState>>,
    /// The connection pool of each node, in the same order as `nodes`.
    pub connections: Vec<Arc<NodeConnections>>,
    /// With `protocol = "h2"` or `"h2c"`: each node's multiplexed HTTP/2
    /// connections, in the same order as `nodes` (empty for HTTP/1.1 pools).
    pub http2: Vec<Arc<H2Node>>,
    /// The pool's metric handles.
    pub metrics: PoolMetrics,
    balancer: Box<dyn Balancer>,
    /// The ring of a `consistent_hash` pool (issue 14).
    hashing: Option<ConsistentHash>,
    /// Session persistence (`[pools.NAME.persistence]`): signed cookie tokens, or the
    /// learned table carried over from the previous generation of the pool.
    pub persistence: Option<Persistence>,
    /// The TLS client config the pool was built with (`None`: plain TCP).
    connector: Option<weir_tls::Connector>,
}

/// Nodes already tried for one request, as a set of their indexes modulo 64: a node tried
/// is never picked again for the request. In a pool of more than 64 nodes a node whose
/// index shares a bit with a tried one's is passed over too, which only narrows the
/// retry's choice (it once left nodes past 64 out of the set, and a retry could go back to
/// the node that had just failed).
#[derive(Debug, Clone, Copy, Default)]
pub struct Tried(u64);

impl Tried {
    /// Marks the node at `index` as tried.
    pub fn add(&mut self, index: usize) {
        self.0 |= 1 << (index % 64);
    }

    /// Whether the node at `index` was tried (or shares its bit with one that was).
    pub fn contains(&self, index: usize) -> bool {
        self.0 & (1 << (index % 64)) != 0
    }
}

impl Pool {
    /// Passive health: a request to `node`, one of this pool's nodes, succeeded. Logs the
    /// node's return when it ends an ejection (the ejection's own line said it went out).
    pub fn record_success(&self, node: &NodeState, now: std::time::Instant) {
        if node.record_success(now) {
            tracing::info!(
                pool = %self.name,
                node = %node.address,
                "node back from passive ejection: a request succeeded"
            );
        }
    }

    /// Passive health: a connect failure, a 5xx or a failed exchange at `node`, one of this
    /// pool's nodes. Logs the ejection it may cause; returns whether it did.
    ///
    /// At most `max_ejected_percent` of the nodes that take requests (all but disabled
    /// ones: a draining node still takes those persistence sticks to it) are ejected at
    /// once, at least one; below 100 % never while no other node that takes new sessions
    /// (an active one) is still up (neither ejected nor down by its monitor): a draining
    /// node left up takes none. Past it a node that reaches its count of
    /// failures stays in (logged once per held outage), so failures a client can cause on
    /// every node, such as one URL that answers 500, cannot eject the whole pool while its
    /// nodes are up — a pool of one node, or of one node the others being down or disabled,
    /// included.
    pub fn record_failure(&self, node: &NodeState, now: std::time::Instant) -> bool {
        let percent = self.config.passive_health.max_ejected_percent as usize;
        let takes_requests = |n: &NodeState| n.mode() != NodeMode::Disabled;
        let taking = self.nodes.iter().filter(|n| takes_requests(n)).count();
        let allowed = match percent {
            100 => taking,
            _ => (taking * percent / 100)
                .max(1)
                .min(taking.saturating_sub(1)),
        };
        let full = || {
            let ejected = self
                .nodes
                .iter()
                .filter(|n| takes_requests(n) && n.is_ejected(now))
                .count();
            let others_available = self.nodes.iter().any(|n| {
                !std::ptr::eq(n.as_ref(), node) && n.mode() == NodeMode::Active && n.is_healthy(now)
            });
            ejected >= allowed || (percent < 100 && !others_available)
        };
        match node.record_failure_unless(now, full) {
            crate::node::Passive::Ejected => {
                tracing::warn!(
                    pool = %self.name,
                    node = %node.address,
                    "node ejected by passive health checks (consecutive failures)"
                );
                true
            }
            crate::node::Passive::Held { first } => {
                if first {
                    tracing::warn!(
                        pool = %self.name,
                        node = %node.address,
                        ejected = allowed,
                        "node not ejected by passive health: the pool has max_ejected_percent of its nodes out already"
                    );
                }
                false
            }
            crate::node::Passive::Counted => false,
        }
    }

    /// Builds the pool. `tls` must be given exactly when `config.tls` is set
    /// (it is built from it by [`weir_tls::Connector::new`], which reads files
    /// and so can fail before anything starts).
    pub fn new(
        config: &weir_config::Pool,
        metrics: &Metrics,
        tls: Option<weir_tls::Connector>,
    ) -> Arc<Pool> {
        Pool::build(config, metrics, tls, None)
    }

    /// Builds the pool of a new model. A node of `previous` (the same pool in the running
    /// model) that stays, at the same address with the same TLS settings, is carried over
    /// whole: its state (in-flight count, EWMA, health) and its connection pool (idle
    /// connections, queue) are the same `Arc`s, updated with the new weight, mode and
    /// settings. This is part of a reload's commit: the updates are visible at once.
    pub fn build(
        config: &weir_config::Pool,
        metrics: &Metrics,
        tls: Option<weir_tls::Connector>,
        previous: Option<&Pool>,
    ) -> Arc<Pool> {
        debug_assert_eq!(config.tls.is_some(), tls.is_some());
        let connector = tls.clone();
        let tls =
            tls.map(|connector| UpstreamTls::new(connector, metrics.upstream_tls(&config.name)));
        let pool_metrics = metrics.pool(&config.name);
        let settings = connection_settings(config, tls);
        let learned = previous.and_then(|pool| pool.persistence.as_ref());
        let turns = previous
            .filter(|pool| pool.config.algorithm == config.algorithm)
            .and_then(|pool| pool.balancer.turns());
        // The same TLS settings, and files of the same contents: a CA or client certificate
        // replaced in place (same path, re-read by a reload) retires the connections made
        // with the old one, as a changed path does. Another protocol replaces the nodes too:
        // their HTTP/1.1 connections would otherwise stay open, idle and never used again.
        let previous = previous.filter(|pool| {
            pool.config.protocol == config.protocol
                && pool.config.tls == config.tls
                && match (&pool.connector, &connector) {
                    (Some(old), Some(new)) => old.same_files(new),
                    (old, new) => old.is_none() && new.is_none(),
                }
        });
        let mut nodes = Vec::with_capacity(config.nodes.len());
        let mut connections = Vec::with_capacity(config.nodes.len());
        for node in &config.nodes {
            let settings = node_settings(&settings, node);
            let kept = previous.and_then(|pool| {
                let index = pool.nodes.iter().position(|n| n.address == node.address)?;
                let connections = &pool.connections[index];
                // Connections verified under another name (a node given by address now
                // given by DNS name) are not kept.
                let name =
                    |tls: Option<&UpstreamTls>| tls.map(|tls| tls.connector.name_for(node.address));
                (name(connections.tls().as_ref()) == name(settings.tls.as_ref()))
                    .then(|| (Arc::clone(&pool.nodes[index]), Arc::clone(connections)))
            });
            let (state, pooled) = match kept {
                Some((state, pooled)) => {
                    state.update(node.weight.get(), node.state, &config.passive_health);
                    if config.health.is_none() {
                        // No monitor any more: nothing would ever set a verdict it left
                        // (down, a streak) right, and without one nodes are up.
                        state.set_active_up(true);
                        state.set_check_streak(0);
                    }
                    pooled.update(settings.clone());
                    (state, pooled)
                }
                None => {
                    let state = Arc::new(NodeState::new(
                        node.address,
                        node.weight.get(),
                        config.passive_health.clone(),
                        metrics.node(&config.name, &node.address.to_string()),
                    ));
                    state.set_mode(node.state);
                    let pooled = NodeConnections::new(
                        node.address,
                        settings.clone(),
                        state.metrics.clone(),
                        pool_metrics.clone(),
                    );
                    (state, pooled)
                }
            };
            pooled.follow_mode(node.state);
            nodes.push(state);
            connections.push(pooled);
        }
        let http2 = http2_nodes(config, &nodes, &settings, metrics, &pool_metrics, previous);
        let balancer = balancer::for_algorithm(config.algorithm, &nodes);
        if let Some(turns) = turns {
            balancer.carry_on(turns);
        }
        let hashing = config
            .hash
            .as_ref()
            .map(|hash| ConsistentHash::new(&nodes, hash.max_load));
        let persistence = config.persistence.as_ref().map(|settings| {
            Persistence::new(
                settings,
                &config.name,
                &nodes,
                PersistenceKey::process(),
                learned,
                Instant::now(),
            )
        });
        Arc::new(Pool {
            name: config.name.clone(),
            config: config.clone(),
            nodes,
            connections,
            http2,
            metrics: pool_metrics,
            balancer,
            hashing,
            persistence,
            connector,
        })
    }

    /// The TLS client config the pool was built with, for a rebuild that re-reads no file
    /// (new addresses of its nodes given by name).
    pub fn tls_connector(&self) -> Option<&weir_tls::Connector> {
        self.connector.as_ref()
    }

    /// The nodes of this pool that `next` does not carry over (removed, or whose TLS
    /// settings changed): they drain. Requests in flight on them finish on the model they
    /// started with; their connections close once given back. The requests waiting in their
    /// queues choose again among this pool's nodes that `next` keeps, when one of those is
    /// available; with none (a pool of one node whose TLS settings changed, say), they too
    /// finish on the model they started with, served by the retired node as its busy
    /// connections come back, rather than answered 503 with nowhere to go.
    pub fn retire_nodes_missing_from(&self, next: Option<&Pool>) {
        let kept_node = |node: &Arc<NodeState>| {
            next.is_some_and(|pool| pool.nodes.iter().any(|n| Arc::ptr_eq(n, node)))
        };
        let kept_h2 = |node: &Arc<H2Node>| {
            next.is_some_and(|pool| pool.http2.iter().any(|n| Arc::ptr_eq(n, node)))
        };
        let now = Instant::now();
        let elsewhere = self.nodes.iter().enumerate().any(|(index, node)| {
            kept_node(node) && self.http2.get(index).is_none_or(&kept_h2) && node.is_available(now)
        });
        for (node, connections) in self.nodes.iter().zip(&self.connections) {
            if !kept_node(node) {
                connections.set_reusable(false);
                if elsewhere {
                    connections.set_taking_requests(false);
                }
            }
        }
        for node in &self.http2 {
            if !kept_h2(node) {
                // Streams in flight finish; the connections close once they have none.
                node.close_idle();
                if elsewhere {
                    node.set_taking_requests(false);
                }
            }
        }
    }

    /// The index of the node at `address`, if the pool has one.
    pub fn node_index(&self, address: SocketAddr) -> Option<usize> {
        self.nodes.iter().position(|node| node.address == address)
    }

    /// Picks a node not yet tried for this request: an available one, or
    /// with fail-open any one when none is available, or else one passive health
    /// ejected but its monitor has up (`Pool::ejected_but_up`). `None` → 503.
    ///
    /// A node at its connection cap would make the request wait in its queue (or get a
    /// 503 past it) while another node may have room: with HTTP/1.1 (and TCP) nodes the
    /// balancer first picks among the available nodes with fewer requests in flight than
    /// `max_connections`; when every one is at its cap, among those whose queue has room
    /// (requests in flight count those waiting); and among all available ones only when
    /// every queue is full (the pick then answers 503).
    pub fn select(&self, tried: Tried, now: Instant) -> Option<usize> {
        let available =
            |index: usize| !tried.contains(index) && self.nodes[index].is_available(now);
        if self.config.fail_open && !(0..self.nodes.len()).any(available) {
            // Nothing available: a node only ejected and still up first, then fail-open's
            // pick, each the balancer's only turn for this request (a failed pick first
            // would take a turn too, and fail-open would then go to every other node only).
            let ejected = self.ejected_but_up(tried);
            return match (0..self.nodes.len()).any(&ejected) {
                true => self.balancer.pick(&self.nodes, &ejected),
                false => self.fail_open(tried),
            };
        }
        let picked = if self.config.protocol == weir_config::UpstreamProtocol::Http1 {
            // Nodes with room under their cap, then in their queue, then any: one
            // choice (see `Balancer::pick_tiered`).
            let connections = &self.config.connections;
            let cap = connections.max_connections.get();
            let queued = cap.saturating_add(connections.queue_length);
            let under_cap = |index: usize| available(index) && self.nodes[index].in_flight() < cap;
            let in_queue =
                |index: usize| available(index) && self.nodes[index].in_flight() < queued;
            self.balancer
                .pick_tiered(&self.nodes, &[&under_cap, &in_queue, &available])
        } else {
            self.balancer.pick(&self.nodes, &available)
        };
        picked.or_else(|| self.balancer.pick(&self.nodes, &self.ejected_but_up(tried)))
    }

    /// Past every available node, an active one up by its monitor that passive health
    /// ejected: below `max_ejected_percent = 100` ejections never take the whole pool out,
    /// also when the last other node was drained, disabled or went down after the
    /// ejection ([`Pool::record_failure`] holds the line only when it ejects).
    fn ejected_but_up(&self, tried: Tried) -> impl Fn(usize) -> bool + '_ {
        let allowed = self.config.passive_health.max_ejected_percent < 100;
        let untried_active = self.untried_active(tried);
        move |index: usize| allowed && untried_active(index) && self.nodes[index].is_active_up()
    }

    /// Fail-open's pick: the balancer's among the untried nodes whatever their health
    /// (never the operator's: draining and disabled nodes stay out).
    fn fail_open(&self, tried: Tried) -> Option<usize> {
        self.balancer.pick(&self.nodes, &self.untried_active(tried))
    }

    /// The nodes fail-open may take: untried and active, whatever their health.
    fn untried_active(&self, tried: Tried) -> impl Fn(usize) -> bool + '_ {
        move |index: usize| !tried.contains(index) && self.nodes[index].is_active()
    }

    /// [`Pool::select`] for a request with a key (`weir_rules::request_key`
    /// with the pool's `hash.key`, then `Key::stable_hash`): a consistent-hash
    /// pool picks the key's node, any other pool ignores the key.
    pub fn select_by_key(&self, tried: Tried, now: Instant, key: u64) -> Option<usize> {
        let Some(ring) = &self.hashing else {
            return self.select(tried, now);
        };
        let available =
            |index: usize| !tried.contains(index) && self.nodes[index].is_available(now);
        if let Some(index) = ring.pick_keyed(&self.nodes, &available, key) {
            return Some(index);
        }
        // A node only ejected and still up, then with fail-open any node: fail-open
        // ignores health, never the operator's draining or disabled.
        let ejected = ring.pick_keyed(&self.nodes, &self.ejected_but_up(tried), key);
        if ejected.is_some() || !self.config.fail_open {
            return ejected;
        }
        ring.pick_keyed(&self.nodes, &self.untried_active(tried), key)
    }

    /// The select stage for one request from `client`: the node its session sticks to
    /// (persistence, when that node is available and not tried yet), else the key's node in
    /// a consistent-hash pool, else the balancer's pick. On a retry the tried node is
    /// excluded, so persistence breaks to another node; the response then teaches it.
    pub fn select_request(
        &self,
        tried: Tried,
        now: Instant,
        head: &RequestHead,
        client: IpAddr,
    ) -> Option<usize> {
        if let Some(persistence) = &self.persistence {
            // A draining node takes no new sessions but keeps those that stick to it (as
            // HAProxy's drain and F5's disabled do): only a disabled or unhealthy node
            // breaks persistence.
            let sticky = |index: usize| {
                let node = &self.nodes[index];
                !tried.contains(index) && node.mode() != NodeMode::Disabled && node.is_healthy(now)
            };
            if let Some(index) = persistence.preferred(head, client, &sticky, now) {
                return Some(index);
            }
        }
        match &self.config.hash {
            Some(hash) => {
                let mut scratch = Vec::new();
                let key =
                    weir_rules::request_key(&hash.key, head, client, &mut scratch).stable_hash();
                self.select_by_key(tried, now, key)
            }
            None => self.select(tried, now),
        }
    }

    /// Sends the requests waiting for a node that is down (by its monitor, or ejected by
    /// passive health) to choose another node, when another is available: they would
    /// otherwise wait for the connections of a node that fails, and then fail or time out.
    /// Where no node is available they stay (a pool with `fail_open`, or one that is all
    /// down, has nowhere better). A draining or disabled node is not down: it has rules of
    /// its own ([`NodeConnections::follow_mode`]). Called by the pool's reaper, so a down
    /// node's queue moves within one of its periods. Returns how many requests moved.
    pub fn redistribute(&self, now: Instant) -> usize {
        if !self.nodes.iter().any(|node| node.is_available(now)) {
            return 0;
        }
        let mut moved = 0;
        for (index, node) in self.nodes.iter().enumerate() {
            if node.is_active() && !node.is_healthy(now) {
                moved += self.connections[index].send_waiters_elsewhere();
                if let Some(h2) = self.http2.get(index) {
                    moved += h2.send_waiters_elsewhere();
                }
            }
        }
        if moved > 0 {
            tracing::info!(pool = %self.name, moved, "requests waiting for a node that is down sent to other nodes");
        }
        moved
    }

    /// Starts the pool's background work: active health monitors (not for disabled
    /// nodes) and the idle-connection reaper. The tasks end when `stop` triggers (the
    /// pool was replaced by a reload) or `shutdown` does; only `shutdown` closes the idle
    /// connections, since a reload hands them to the next model.
    pub fn start(
        self: &Arc<Self>,
        stop: ShutdownSignal,
        shutdown: ShutdownSignal,
    ) -> Vec<JoinHandle<()>> {
        let mut tasks = Vec::new();
        if let Some(monitor) = &self.config.health {
            // HTTP/1.1 and TCP pools cap each node's connections; a check takes a slot.
            let capped = self.config.protocol == weir_config::UpstreamProtocol::Http1;
            let (monitored, slots): (Vec<Arc<NodeState>>, Vec<Arc<NodeConnections>>) = self
                .nodes
                .iter()
                .zip(&self.connections)
                .filter(|(node, _)| node.mode() != NodeMode::Disabled)
                .map(|(node, connections)| (Arc::clone(node), Arc::clone(connections)))
                .unzip();
            tasks.extend(health::spawn_monitors(
                &self.name,
                &monitored,
                monitor,
                (
                    &slots.iter().map(|node| node.tls()).collect::<Vec<_>>(),
                    if capped { &slots } else { &[] },
                    self.config.proxy_protocol,
                    self.config.protocol,
                ),
                stop.either(&shutdown),
            ));
        }
        let pool = Arc::clone(self);
        let (stop, shutdown) = (stop, shutdown);
        let period = (self.config.connections.idle_timeout / 4)
            .clamp(Duration::from_millis(100), Duration::from_secs(5));
        tasks.push(tokio::spawn(async move {
            let mut ticker = tokio::time::interval(period);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = ticker.tick() => {
                        let now = Instant::now();
                        for (node, connections) in pool.nodes.iter().zip(&pool.connections) {
                            connections.close_expired(now);
                            node.refresh_healthy_gauge(now);
                        }
                        pool.redistribute(now);
                        for node in &pool.http2 {
                            node.close_expired(now);
                        }
                    }
                    _ = stop.triggered() => break,
                    _ = shutdown.triggered() => break,
                }
            }
            if shutdown.is_triggered() {
                for connections in &pool.connections {
                    connections.close_idle();
                }
                for node in &pool.http2 {
                    node.close_idle();
                }
            }
        }));
        tasks
    }
}

/// The connection settings of a pool's nodes, from its config.
fn connection_settings(config: &weir_config::Pool, tls: Option<UpstreamTls>) -> ConnectionSettings {
    ConnectionSettings {
        max_connections: config.connections.max_connections.get(),
        queue_length: config.connections.queue_length,
        queue_timeout: config.connections.queue_timeout,
        fair_queue: config.connections.fair_queue,
        idle_timeout: config.connections.idle_timeout,
        connect_timeout: config.timeouts.connect,
        max_requests: config
            .connections
            .max_requests_per_connection
            .map(|n| n.get()),
        max_tunnels: config.connections.max_tunnels,
        tls,
    }
}

/// The pool's connection settings for `node` ([`UpstreamTls::for_node`]).
fn node_settings(settings: &ConnectionSettings, node: &weir_config::Node) -> ConnectionSettings {
    ConnectionSettings {
        tls: settings.tls.as_ref().map(|tls| tls.for_node(node)),
        ..settings.clone()
    }
}

/// The HTTP/2 side of each node for an `h2`/`h2c` pool (TLS offers ALPN `h2`).
/// A node that `previous` (already filtered to the same TLS settings) had with
/// the same protocol and TLS name is carried over with its open connections and
/// its queue, and takes the new HTTP/2 and connection settings
/// ([`H2Node::update`]), as HTTP/1.1 nodes do.
fn http2_nodes(
    config: &weir_config::Pool,
    nodes: &[Arc<NodeState>],
    settings: &ConnectionSettings,
    metrics: &Metrics,
    pool_metrics: &PoolMetrics,
    previous: Option<&Pool>,
) -> Vec<Arc<H2Node>> {
    if config.protocol == weir_config::UpstreamProtocol::Http1 {
        return Vec::new();
    }
    let previous = previous.filter(|pool| pool.config.protocol == config.protocol);
    let tls = settings.tls.as_ref().map(|tls| UpstreamTls {
        connector: tls.connector.with_alpn(&[b"h2"]),
        layer4: tls.layer4.clone(),
        metrics: tls.metrics.clone(),
    });
    let http2 = &config.http2;
    let h2_settings = H2Settings {
        max_connections: settings.max_connections,
        max_streams: http2.max_concurrent_streams,
        queue_length: settings.queue_length,
        queue_timeout: settings.queue_timeout,
        fair_queue: settings.fair_queue,
        idle_timeout: settings.idle_timeout,
        connect_timeout: settings.connect_timeout,
        initial_stream_window: http2.initial_stream_window,
        initial_connection_window: http2.initial_connection_window,
        ping_interval: http2.ping_interval,
        ping_timeout: http2.ping_timeout,
        tls,
        codec: http2.codec,
    };
    nodes
        .iter()
        .zip(&config.nodes)
        .map(|(node, given)| {
            // TLS to a node given by DNS name names that host (without `server_name`); a
            // node kept names what it named before, or is replaced.
            let h2_settings = H2Settings {
                tls: h2_settings.tls.as_ref().map(|tls| tls.for_node(given)),
                ..h2_settings.clone()
            };
            let kept = previous.and_then(|pool| {
                pool.http2
                    .iter()
                    .find(|h2| {
                        h2.address() == node.address
                            && h2.tls_name() == h2_settings.tls_name(node.address)
                    })
                    .cloned()
            });
            let h2 = match kept {
                Some(h2) => {
                    h2.update(h2_settings);
                    h2
                }
                None => H2Node::new(
                    node.address,
                    h2_settings,
                    node.metrics.clone(),
                    metrics.upstream_http2(&config.name, &node.address.to_string()),
                    pool_metrics.clone(),
                ),
            };
            // A draining or disabled node keeps no idle connection (as the HTTP/1.1
            // side's `set_reusable(false)`): those without streams close now, the others
            // once their streams are done.
            if !node.is_active() {
                h2.close_idle();
            }
            h2.set_taking_requests(node.mode() != NodeMode::Disabled);
            h2
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::Tried;

    #[test]
    fn a_tried_node_past_the_64th_is_never_picked_again() {
        let mut tried = Tried::default();
        tried.add(70);
        tried.add(3);
        assert!(tried.contains(70) && tried.contains(3));
        assert!(!tried.contains(71) && !tried.contains(4));
        // Its bit's other node is passed over too: the choice narrows, no node repeats.
        assert!(tried.contains(6));
    }
}
