//! A pool at run time: its nodes, their connection pools, the balancer and
//! node selection with health and fail-open.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use weir_core::ShutdownSignal;
use weir_observe::{Metrics, PoolMetrics};

use crate::balancer::{self, Balancer, ConsistentHash};
use crate::connection::{ConnectionSettings, NodeConnections, UpstreamTls};
use crate::health;
use crate::http2::{H2Node, H2Settings};
use crate::node::NodeState;

/// A pool of nodes, shared by every thread.
#[derive(Debug)]
pub struct Pool {
    pub name: String,
    pub config: weir_config::Pool,
    pub nodes: Vec<Arc<NodeState>>,
    /// The connection pool of each node, in the same order as `nodes`.
    pub connections: Vec<Arc<NodeConnections>>,
    /// With `protocol = "h2"` or `"h2c"`: each node's multiplexed HTTP/2
    /// connections, in the same order as `nodes` (empty for HTTP/1.1 pools).
    pub http2: Vec<Arc<H2Node>>,
    pub metrics: PoolMetrics,
    balancer: Box<dyn Balancer>,
    /// The ring of a `consistent_hash` pool (issue 14).
    hashing: Option<ConsistentHash>,
}

/// Nodes already tried for one request (a pool has at most 64 nodes in play
/// for retries; nodes past 64 are never excluded, which only costs a retry).
#[derive(Debug, Clone, Copy, Default)]
pub struct Tried(u64);

impl Tried {
    pub fn add(&mut self, index: usize) {
        if index < 64 {
            self.0 |= 1 << index;
        }
    }

    pub fn contains(&self, index: usize) -> bool {
        index < 64 && self.0 & (1 << index) != 0
    }

    pub fn count(&self) -> u32 {
        self.0.count_ones()
    }
}

impl Pool {
    /// Builds the pool. `tls` must be given exactly when `config.tls` is set
    /// (it is built from it by [`weir_tls::Connector::new`], which reads files
    /// and so can fail before anything starts).
    pub fn new(
        config: &weir_config::Pool,
        metrics: &Metrics,
        tls: Option<weir_tls::Connector>,
    ) -> Arc<Pool> {
        debug_assert_eq!(config.tls.is_some(), tls.is_some());
        let tls = tls.map(|connector| UpstreamTls {
            connector,
            metrics: metrics.upstream_tls(&config.name),
        });
        let pool_metrics = metrics.pool(&config.name);
        let nodes: Vec<Arc<NodeState>> = config
            .nodes
            .iter()
            .enumerate()
            .map(|(index, node)| {
                Arc::new(NodeState::new(
                    index,
                    node.address,
                    node.weight.get(),
                    config.passive_health.clone(),
                    metrics.node(&config.name, &node.address.to_string()),
                ))
            })
            .collect();
        let settings = ConnectionSettings {
            max_connections: config.connections.max_connections.get(),
            queue_length: config.connections.queue_length,
            queue_timeout: config.connections.queue_timeout,
            idle_timeout: config.connections.idle_timeout,
            connect_timeout: config.timeouts.connect,
            max_requests: config
                .connections
                .max_requests_per_connection
                .map(|n| n.get()),
            max_tunnels: config.connections.max_tunnels,
            tls: tls.clone(),
        };
        let connections = nodes
            .iter()
            .map(|node| {
                NodeConnections::new(
                    node.address,
                    settings.clone(),
                    node.metrics.clone(),
                    pool_metrics.clone(),
                )
            })
            .collect();
        let http2 = http2_nodes(config, &nodes, &settings, metrics, &pool_metrics);
        let balancer = balancer::for_algorithm(config.algorithm, &nodes);
        let hashing = config
            .hash
            .as_ref()
            .map(|hash| ConsistentHash::new(&nodes, hash.max_load));
        Arc::new(Pool {
            name: config.name.clone(),
            config: config.clone(),
            nodes,
            connections,
            http2,
            metrics: pool_metrics,
            balancer,
            hashing,
        })
    }

    /// Picks a node not yet tried for this request: an available one, or
    /// with fail-open any one when none is available. `None` → 503.
    pub fn select(&self, tried: Tried, now: Instant) -> Option<usize> {
        let available =
            |index: usize| !tried.contains(index) && self.nodes[index].is_available(now);
        if let Some(index) = self.balancer.pick(&self.nodes, &available) {
            return Some(index);
        }
        if self.config.fail_open {
            let untried = |index: usize| !tried.contains(index);
            return self.balancer.pick(&self.nodes, &untried);
        }
        None
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
        if self.config.fail_open {
            let untried = |index: usize| !tried.contains(index);
            return ring.pick_keyed(&self.nodes, &untried, key);
        }
        None
    }

    /// Starts the pool's background work: active health monitors and the
    /// idle-connection reaper. The tasks end when `shutdown` triggers.
    pub fn start(self: &Arc<Self>, shutdown: ShutdownSignal) -> Vec<JoinHandle<()>> {
        let mut tasks = Vec::new();
        if let Some(monitor) = &self.config.health {
            tasks.extend(health::spawn_monitors(
                &self.name,
                &self.nodes,
                monitor,
                self.connections
                    .first()
                    .and_then(|node| node.tls().map(|tls| tls.connector.clone())),
                shutdown.clone(),
            ));
        }
        let pool = Arc::clone(self);
        let mut stop = shutdown;
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
                        for node in &pool.http2 {
                            node.close_expired(now);
                        }
                    }
                    _ = stop.triggered() => break,
                }
            }
            for connections in &pool.connections {
                connections.close_idle();
            }
            for node in &pool.http2 {
                node.close_idle();
            }
        }));
        tasks
    }
}

/// The HTTP/2 side of each node for an `h2`/`h2c` pool (TLS offers ALPN `h2`).
fn http2_nodes(
    config: &weir_config::Pool,
    nodes: &[Arc<NodeState>],
    settings: &ConnectionSettings,
    metrics: &Metrics,
    pool_metrics: &PoolMetrics,
) -> Vec<Arc<H2Node>> {
    if config.protocol == weir_config::UpstreamProtocol::Http1 {
        return Vec::new();
    }
    let tls = settings.tls.as_ref().map(|tls| UpstreamTls {
        connector: tls.connector.with_alpn(&[b"h2"]),
        metrics: tls.metrics.clone(),
    });
    let http2 = &config.http2;
    let h2_settings = H2Settings {
        max_connections: settings.max_connections,
        max_streams: http2.max_concurrent_streams,
        queue_length: settings.queue_length,
        queue_timeout: settings.queue_timeout,
        idle_timeout: settings.idle_timeout,
        connect_timeout: settings.connect_timeout,
        initial_stream_window: http2.initial_stream_window,
        initial_connection_window: http2.initial_connection_window,
        ping_interval: http2.ping_interval,
        ping_timeout: http2.ping_timeout,
        tls,
    };
    nodes
        .iter()
        .map(|node| {
            H2Node::new(
                node.address,
                h2_settings.clone(),
                node.metrics.clone(),
                metrics.upstream_http2(&config.name, &node.address.to_string()),
                pool_metrics.clone(),
            )
        })
        .collect()
}
