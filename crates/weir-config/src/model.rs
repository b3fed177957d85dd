//! The validated configuration model: what the rest of weir reads.
//!
//! Nothing here holds an unparsed string from the file. Every value has been
//! checked and converted (`SocketAddr`, `Duration`, enums, non-zero counts), and
//! cross references (a virtual server's pool) are indexes into [`Config::pools`].

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::time::Duration;

/// A whole, validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Where it came from: a file path, or `None` for the embedded default.
    pub source: Option<PathBuf>,
    pub runtime: Runtime,
    pub admin: Option<Admin>,
    pub log: Log,
    /// Virtual servers in file order.
    pub virtual_servers: Vec<VirtualServer>,
    /// Pools in file order; [`PoolId`] indexes into this.
    pub pools: Vec<Pool>,
    /// Built-in origin servers that `weir serve` starts in-process (demo, tests, labs).
    pub origins: Vec<Origin>,
}

/// Process-wide settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Runtime {
    /// Worker threads; `None` means one per core.
    pub threads: Option<NonZeroU32>,
    /// How long in-flight requests may take to finish after SIGTERM/SIGINT.
    pub drain_timeout: Duration,
}

/// The admin listener: `/metrics` and `/healthz`.
#[derive(Debug, Clone, PartialEq)]
pub struct Admin {
    pub listen: SocketAddr,
}

/// Logging.
#[derive(Debug, Clone, PartialEq)]
pub struct Log {
    /// One access record per request, at info level on the `weir::access` target.
    pub access_log: bool,
    /// Default filter directive (`info`, `weir=debug`, ...); `RUST_LOG` overrides it.
    pub level: String,
    pub format: LogFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// Index of a pool in [`Config::pools`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PoolId(pub usize);

/// A virtual server: where clients connect and how their traffic is handled.
#[derive(Debug, Clone, PartialEq)]
pub struct VirtualServer {
    pub name: String,
    /// One or more listen addresses.
    pub listen: Vec<SocketAddr>,
    pub protocol: Protocol,
    /// The pool used when no route matches.
    pub default_pool: PoolId,
    /// Routing rules, tried in order; the first match wins.
    pub routes: Vec<Route>,
    pub limits: ClientLimits,
    pub timeouts: ClientTimeouts,
    /// Add `X-Forwarded-For`, `X-Forwarded-Proto` and `Via` to forwarded requests.
    pub forwarded_headers: bool,
    /// Size of the listen backlog.
    pub backlog: u32,
}

/// The protocol a virtual server speaks to clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// HTTP/1.1 (and 1.0) over plain TCP.
    Http,
}

/// A routing rule: match on host and/or path prefix, send to a pool.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    /// Lower-cased host (without port) to match exactly; `*.example.com` matches subdomains.
    pub host: Option<String>,
    /// Path prefix to match (must start with `/`).
    pub path_prefix: Option<String>,
    pub pool: PoolId,
}

/// Limits on what one client may send and hold.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientLimits {
    /// Client connections open at once on this virtual server; past it new ones are closed at accept.
    pub max_connections: u32,
    /// Bytes in a request head (request line and headers); past it → 431.
    pub max_header_bytes: usize,
    /// Header fields in a request; past it → 431.
    pub max_headers: usize,
    /// Bytes in a request body; past it → 413.
    pub max_body_bytes: u64,
    /// Request body bytes read before an upstream connection is taken.
    pub request_buffer: usize,
    /// Response bytes read from the node before the client must keep up (backpressure).
    pub response_buffer: usize,
    /// Requests on one client connection before weir closes it; `None` means no limit.
    pub max_requests_per_connection: Option<NonZeroU32>,
}

/// Client-side timeouts.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientTimeouts {
    /// From the first byte of a request to the end of its head (slowloris defence).
    pub header_read: Duration,
    /// Keep-alive: how long an idle client connection is kept between requests.
    pub idle: Duration,
    /// Longest pause while reading a request body or writing a response.
    pub body_read: Duration,
    pub write: Duration,
}

/// A pool of nodes and how traffic is spread over them.
#[derive(Debug, Clone, PartialEq)]
pub struct Pool {
    pub name: String,
    pub nodes: Vec<Node>,
    pub algorithm: Algorithm,
    pub connections: UpstreamConnections,
    pub timeouts: UpstreamTimeouts,
    /// Extra attempts for an idempotent request whose connection failed; never for others.
    pub retries: u32,
    pub health: Option<HealthMonitor>,
    pub passive_health: PassiveHealth,
    /// When every node is down, send to all nodes anyway instead of answering 503.
    pub fail_open: bool,
}

/// A node: one server in a pool.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub address: SocketAddr,
    pub weight: NonZeroU32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    RoundRobin,
    WeightedRoundRobin,
    LeastConnections,
    /// Power of two choices scored by EWMA response time and in-flight requests.
    Perceptive,
}

/// The per-node connection pool: cap, queue, reuse.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamConnections {
    /// Hard cap on connections open to each node.
    pub max_connections: NonZeroU32,
    /// Requests that may wait for a connection per node; past it → 503.
    pub queue_length: u32,
    /// How long a request may wait in the queue; past it → 503 with `Retry-After`.
    pub queue_timeout: Duration,
    /// Idle keep-alive connections are closed after this long.
    pub idle_timeout: Duration,
    /// Requests sent on one upstream connection before it is retired; `None` means no limit.
    pub max_requests_per_connection: Option<NonZeroU32>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamTimeouts {
    /// TCP connect; past it → try another node (idempotent) or 502.
    pub connect: Duration,
    /// From the request sent to the response head received; past it → 504.
    pub response: Duration,
}

/// An active health monitor.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthMonitor {
    pub check: HealthCheckKind,
    pub interval: Duration,
    pub timeout: Duration,
    /// Consecutive successes before a down node is marked up.
    pub rise: NonZeroU32,
    /// Consecutive failures before an up node is marked down.
    pub fall: NonZeroU32,
}

#[derive(Debug, Clone, PartialEq)]
pub enum HealthCheckKind {
    /// A TCP connect that succeeds.
    Tcp,
    /// An HTTP/1.1 request answered with an expected status.
    Http {
        method: String,
        path: String,
        /// `Host` header to send; the node address when `None`.
        host: Option<String>,
        /// Inclusive status ranges that count as healthy.
        expect_status: Vec<(u16, u16)>,
    },
}

/// Passive health: eject a node after consecutive failures seen on live traffic.
#[derive(Debug, Clone, PartialEq)]
pub struct PassiveHealth {
    /// Consecutive connect failures or 5xx answers that eject a node; 0 turns it off.
    pub consecutive_failures: u32,
    /// First ejection lasts this long; each further ejection doubles it.
    pub base_ejection: Duration,
    /// Upper bound on an ejection.
    pub max_ejection: Duration,
}

/// A built-in origin server started by `weir serve` (see `weir origin`).
#[derive(Debug, Clone, PartialEq)]
pub struct Origin {
    pub name: String,
    pub listen: SocketAddr,
    /// Connections accepted at once; past it new ones are refused. `None` means no cap.
    pub max_connections: Option<NonZeroU32>,
    pub keep_alive: bool,
}

impl Config {
    /// The pool a [`PoolId`] from this configuration names.
    ///
    /// # Panics
    ///
    /// If `id` comes from another configuration with more pools; ids made by
    /// validation always index [`Config::pools`].
    pub fn pool(&self, id: PoolId) -> &Pool {
        &self.pools[id.0]
    }

    /// The id of the pool called `name`, if there is one.
    pub fn pool_id(&self, name: &str) -> Option<PoolId> {
        self.pools
            .iter()
            .position(|pool| pool.name == name)
            .map(PoolId)
    }
}
