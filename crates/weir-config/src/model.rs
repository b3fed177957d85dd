//! The validated configuration model: what the rest of weir reads.
//!
//! Nothing here holds an unparsed string from the file. Every value has been
//! checked and converted (`SocketAddr`, `Duration`, enums, non-zero counts), and
//! cross references (a virtual server's pool) are indexes into [`Config::pools`].

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::time::Duration;

use crate::error::KeyPath;

// HTTP/2 (issue 11).
pub use crate::http2::{Http2, Http2Codec, UpstreamHttp2, UpstreamHttp2Codec, UpstreamProtocol};
// Cache and compression (issue 12).
pub use crate::cache::{
    CacheRules, CacheStore, Cidr, Compression, CompressionAlgorithm, ContentPolicy, SetCookieRule,
};
// Traffic rules, limits, hashing and persistence (issue 14).
mod traffic;
pub use traffic::*;
// Layer 4 (issue 13).
mod layer4;
pub use layer4::*;

/// A whole, validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Where it came from: a file path, or `None` for the embedded default.
    pub source: Option<PathBuf>,
    /// `[runtime]`: threads, drain and binary upgrade.
    pub runtime: Runtime,
    /// `[admin]`: the admin listener; `None` when the file has no such section.
    pub admin: Option<Admin>,
    /// `[log]`: levels and formats of the process log.
    pub log: Log,
    /// Virtual servers in file order.
    pub virtual_servers: Vec<VirtualServer>,
    /// Pools in file order; [`PoolId`] indexes into this.
    pub pools: Vec<Pool>,
    /// Built-in origin servers that `weir serve` starts in-process (demo, tests, labs).
    pub origins: Vec<Origin>,
    /// Where access records go and how they are written (`log.access_log_format`,
    /// `log.access_log_file`); whether they are written at all is [`Log::access_log`].
    pub access_log: AccessLog,
}

/// Process-wide settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Runtime {
    /// Worker threads; `None` means one per core.
    pub threads: Option<NonZeroU32>,
    /// How long in-flight requests may take to finish after SIGTERM/SIGINT, or after a
    /// binary upgrade handed the listeners to the new process.
    pub drain_timeout: Duration,
    /// The Unix socket a new weir process (`weir serve --upgrade`) connects to in order to
    /// take over the listening sockets. `None`: an abstract socket named after the config
    /// file's absolute path, so each config file has its own.
    pub upgrade_socket: Option<PathBuf>,
}

/// The admin listener: `/metrics`, `/healthz`, the REST API under `/api/v1/` and the
/// dashboard at `/`.
#[derive(Debug, Clone, PartialEq)]
pub struct Admin {
    /// The address the admin listener binds.
    pub listen: SocketAddr,
    /// A file holding the bearer token every API request must carry
    /// (`Authorization: Bearer ...`). Required when `listen` is not a loopback address.
    pub token_file: Option<FileRef>,
}

impl Admin {
    /// The bearer token `token_file` holds (surrounding whitespace ignored): `Ok(None)` when
    /// no file is named, `Err` with why when it cannot be read or holds nothing.
    pub fn read_token(&self) -> Result<Option<Vec<u8>>, String> {
        let Some(file) = &self.token_file else {
            return Ok(None);
        };
        let text = file
            .read()
            .map_err(|error| format!("cannot read {}: {error}", file.path.display()))?;
        let token = text.trim_ascii();
        if token.is_empty() {
            return Err(format!("{} is empty", file.path.display()));
        }
        Ok(Some(token.to_vec()))
    }
}

/// The access log's format and destination.
#[derive(Debug, Clone, PartialEq)]
pub struct AccessLog {
    /// How each record is written.
    pub format: AccessLogFormat,
    /// Appended to, and reopened on SIGUSR1 (after logrotate moved it); `None` is stdout.
    pub file: Option<FileRef>,
}

/// How each access record is written: one line either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessLogFormat {
    /// `key=value` pairs (logfmt).
    Text,
    /// One JSON object per line; the fields are listed in `docs/logging.md`.
    Json,
}

/// Logging.
#[derive(Debug, Clone, PartialEq)]
pub struct Log {
    /// One access record per request (written as [`Config::access_log`] says).
    pub access_log: bool,
    /// Default filter directive (`info`, `weir=debug`, ...); `RUST_LOG` overrides it.
    pub level: String,
    /// How the process log (not the access log) is written.
    pub format: LogFormat,
}

/// How the process log is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Index of a pool in [`Config::pools`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PoolId(pub usize);

/// A virtual server: where clients connect and how their traffic is handled.
#[derive(Debug, Clone, PartialEq)]
pub struct VirtualServer {
    /// The name of its table in the file (`[virtual_servers.NAME]`), unique.
    pub name: String,
    /// One or more listen addresses.
    pub listen: Vec<SocketAddr>,
    /// Plain HTTP or HTTPS to clients.
    pub protocol: Protocol,
    /// The pool used when no route matches.
    pub default_pool: PoolId,
    /// Routing rules, tried in order; the first match wins.
    pub routes: Vec<Route>,
    /// What one client may send and hold.
    pub limits: ClientLimits,
    /// How long clients may take.
    pub timeouts: ClientTimeouts,
    /// Which methods, upgrades and header names are let through.
    pub http: HttpPolicy,
    /// Add `X-Forwarded-For`, `X-Forwarded-Proto` and `Via` to forwarded requests.
    pub forwarded_headers: bool,
    /// Size of the listen backlog.
    pub backlog: u32,
    /// Accept a connection only once its first bytes have arrived
    /// (`TCP_DEFER_ACCEPT`): one wake-up and one read fewer per connection,
    /// and a client that connects and sends nothing costs the kernel a
    /// request socket, not weir a task. Default: on, except for `tcp`
    /// (protocols where the server speaks first).
    pub defer_accept: bool,
    /// TLS termination; `Some` exactly when `protocol` is [`Protocol::Https`] or [`Protocol::Tls`].
    pub tls: Option<ServerTls>,
    /// Headers set on every response relayed to clients (replacing the
    /// node's fields of the same names), in file order.
    pub response_headers: Vec<(String, String)>,
    /// The cache store (`[cache]`); `None`: nothing is cached.
    pub cache: Option<CacheStore>,
    /// Cache and compression for requests that match no route.
    pub content: ContentPolicy,
    /// HTTP/2 towards clients (ALPN `h2` on HTTPS is `tls.alpn`; h2c is opt-in).
    pub http2: Http2,
    /// Rules, request id, client address and limits (issue 14).
    pub traffic: Traffic,
    /// Session settings; `Some` exactly when `protocol` is [`Protocol::Tcp`] or [`Protocol::Tls`].
    pub tcp: Option<TcpSettings>,
    /// PROXY protocol headers accepted from trusted clients; `None`: never read.
    pub accept_proxy: Option<AcceptProxy>,
    /// TLS passed through by server name, tried in order before anything else.
    pub passthrough: Vec<PassthroughRoute>,
}

impl VirtualServer {
    /// Every pool its requests or sessions may be sent to: the default, the routes' and the
    /// rules' (TLS passed through by name aside, `passthrough`).
    pub fn pools(&self) -> impl Iterator<Item = PoolId> + '_ {
        let rules = self
            .traffic
            .rules
            .iter()
            .filter_map(|rule| match rule.actions.terminal {
                Some(Terminal::Pool(pool)) => Some(pool),
                _ => None,
            });
        std::iter::once(self.default_pool)
            .chain(self.routes.iter().map(|route| route.pool))
            .chain(rules)
    }
}

/// The protocol a virtual server speaks to clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// HTTP/1.1 (and 1.0) over plain TCP.
    Http,
    /// HTTP/1.1 over TLS, terminated by weir.
    Https,
    /// Bytes both ways between a client and a node (layer 4).
    Tcp,
    /// TLS terminated by weir, then bytes both ways to a node (plain or TLS, as the pool says).
    Tls,
}

impl Protocol {
    /// Whether the virtual server proxies bytes (layer 4) rather than HTTP requests.
    pub fn is_layer4(self) -> bool {
        matches!(self, Protocol::Tcp | Protocol::Tls)
    }

    /// Whether weir terminates TLS from clients.
    pub fn terminates_tls(self) -> bool {
        matches!(self, Protocol::Https | Protocol::Tls)
    }
}

/// A routing rule: match on host and/or path prefix, send to a pool.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    /// Lower-cased host (without port) to match exactly; `*.example.com` matches subdomains.
    pub host: Option<String>,
    /// Path prefix to match (must start with `/`).
    pub path_prefix: Option<String>,
    /// The pool matching requests go to.
    pub pool: PoolId,
    /// Cache and compression: the virtual server's, with the route's overrides.
    pub content: ContentPolicy,
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
    /// Average bytes per second a request body must keep up after its first
    /// `timeouts.body_read` (slow POST defence); 0 turns the check off.
    pub min_body_rate: u64,
}

/// Client-side timeouts.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientTimeouts {
    /// From the first byte of a request to the end of its head (slowloris defence).
    pub header_read: Duration,
    /// Keep-alive: how long an idle client connection is kept between requests.
    pub idle: Duration,
    /// Longest pause while reading a request body.
    pub body_read: Duration,
    /// The whole request body, from the end of its head.
    pub body_total: Duration,
    /// Longest pause while writing a response.
    pub write: Duration,
    /// An upgraded (WebSocket) or CONNECT tunnel with no byte either way for
    /// this long is closed.
    pub tunnel_idle: Duration,
    /// A plain HTTP/1.1 connection idle this long is parked: its task and the
    /// runtime's registration of its socket are given up until the client sends
    /// again (`crates/weir-proxy/src/park.rs`). Zero: never parked.
    pub park_idle: Duration,
    /// An HTTP/1.1 connection (plain or TLS) idle this long rests: its task is given
    /// up and the runtime's registration of its socket kept, so that the client's
    /// next bytes start a task again with no system call (`crates/weir-proxy/src/park.rs`).
    /// Zero: never rests. Past `park_idle` a resting plain connection is parked.
    pub rest_idle: Duration,
}

/// What a virtual server lets through besides ordinary requests.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpPolicy {
    /// CONNECT requests are sent to the pool and, on a 2xx, tunnelled; when
    /// false they are answered 405.
    pub connect: bool,
    /// TRACE requests are forwarded; when false they are answered 405.
    pub trace: bool,
    /// Protocols (`Upgrade` tokens, lower case) a client may switch to; an
    /// `Upgrade` naming none of them is removed and the request sent as is.
    pub upgrades: Vec<String>,
    /// What happens to request header names holding `_`.
    pub underscore_headers: UnderscoreHeaders,
}

/// What happens to request header fields whose names hold `_`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnderscoreHeaders {
    /// Answered 400.
    Reject,
    /// The fields are removed before forwarding.
    Drop,
    /// Forwarded unchanged.
    Forward,
}

/// A pool of nodes and how traffic is spread over them.
#[derive(Debug, Clone, PartialEq)]
pub struct Pool {
    /// The name of its table in the file (`[pools.NAME]`), unique.
    pub name: String,
    /// The servers traffic is spread over, in file order; never empty.
    pub nodes: Vec<Node>,
    /// How a node is chosen for each request.
    pub algorithm: Algorithm,
    /// Connection cap, queue and reuse per node.
    pub connections: UpstreamConnections,
    /// Timeouts towards the nodes.
    pub timeouts: UpstreamTimeouts,
    /// Extra attempts on another node after a failed connect (nothing was sent: any
    /// request); a request whose bytes reached a node is not sent to another.
    pub retries: u32,
    /// The active health monitor; `None`: nodes are not probed.
    pub health: Option<HealthMonitor>,
    /// Ejection of nodes after failures seen on live traffic.
    pub passive_health: PassiveHealth,
    /// When every node is down, send to all nodes anyway instead of answering 503.
    pub fail_open: bool,
    /// TLS to the nodes; `None` means plain TCP.
    pub tls: Option<UpstreamTls>,
    /// HTTP/1.1 or HTTP/2 to the nodes.
    pub protocol: UpstreamProtocol,
    /// HTTP/2 settings, used when `protocol` is HTTP/2.
    pub http2: UpstreamHttp2,
    // --- issue 14 ---
    /// The request key, set exactly when `algorithm` is [`Algorithm::ConsistentHash`].
    pub hash: Option<HashSettings>,
    /// Session persistence (sticky sessions); `None`: off.
    pub persistence: Option<Persistence>,
    // --- end issue 14 ---
    /// PROXY protocol header sent on each connection to a node (TCP virtual servers only).
    pub proxy_protocol: Option<ProxyVersion>,
    /// Nodes given by DNS name (`address = "host:port"`), in file order. `nodes` holds the
    /// nodes given by IP address; at run time each name adds a node per address it
    /// resolves to (see [`Pool::with_resolved`]).
    pub names: Vec<NamedNode>,
    /// How `names` are resolved (`[pools.NAME.dns]`).
    pub dns: PoolDns,
}

/// A node given by DNS name: every address the name resolves to (A and AAAA records, as
/// `dns.families` says) is a node on `port`, with this node's weight and state.
#[derive(Debug, Clone)]
pub struct NamedNode {
    /// The host name, lower-cased, without a trailing dot; with `srv`, the
    /// service's name (`_http._tcp.api.internal`).
    pub host: String,
    /// The port of every address the name resolves to (0 with `srv`: each
    /// SRV record gives its own).
    pub port: u16,
    /// Given as `srv`: the nodes are the targets of the name's SRV records.
    pub srv: bool,
    /// The weight of each node the name resolves to.
    pub weight: NonZeroU32,
    /// The state of each node the name resolves to.
    pub state: NodeMode,
    /// The key that named it (`pools.web.nodes[0].address`), for errors.
    pub key: KeyPath,
    /// Its line in the config file, when known.
    pub line: Option<usize>,
}

impl NamedNode {
    /// `host:port` (`srv:name` for a service), as nodes, logs and the admin
    /// API show it.
    pub fn label(&self) -> String {
        match self.srv {
            true => format!("srv:{}", self.host),
            false => format!("{}:{}", self.host, self.port),
        }
    }
}

impl PartialEq for NamedNode {
    /// Where it is written (key, line) is not part of what it means.
    fn eq(&self, other: &Self) -> bool {
        (&self.host, self.port, self.srv, self.weight, self.state)
            == (
                &other.host,
                other.port,
                other.srv,
                other.weight,
                other.state,
            )
    }
}

/// `[pools.NAME.dns]`: how a pool's nodes given by name are resolved and re-resolved.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PoolDns {
    /// Name servers to ask; empty: the system's (`/etc/resolv.conf`).
    pub servers: Vec<SocketAddr>,
    /// One query's timeout.
    pub timeout: Duration,
    /// A name is re-resolved no sooner than this after an answer, whatever its TTL (and
    /// the first retry after a failure).
    pub min_ttl: Duration,
    /// A name is re-resolved no later than this, whatever its TTL (and the longest retry
    /// back-off after failures).
    pub max_ttl: Duration,
    /// Which address records make nodes.
    pub families: AddressFamilies,
}

/// Which DNS address records make nodes (`dns.families`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AddressFamilies {
    /// A records only (`"ipv4"`).
    Ipv4,
    /// AAAA records only (`"ipv6"`).
    Ipv6,
    /// Both (`"both"`, the default).
    Both,
}

impl Pool {
    /// This pool with the nodes its names resolved to added after the nodes given by
    /// address: for each name in `names`' order, one node per address `resolved` gives
    /// for it (none while it has none), with the name's weight and state and
    /// [`Node::name`] set. An address already a node (given by address, or by an earlier
    /// name) is not added twice.
    pub fn with_resolved<'a>(
        &self,
        mut resolved: impl FnMut(&NamedNode) -> &'a [SocketAddr],
    ) -> Pool {
        let mut pool = self.clone();
        let mut taken: std::collections::HashSet<SocketAddr> =
            pool.nodes.iter().map(|node| node.address).collect();
        for named in &self.names {
            for &address in resolved(named) {
                if !taken.insert(address) {
                    continue;
                }
                pool.nodes.push(Node {
                    address,
                    weight: named.weight,
                    state: named.state,
                    name: Some(named.label()),
                });
            }
        }
        pool
    }
}

/// A node: one server in a pool.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// Where the node listens.
    pub address: SocketAddr,
    /// Its share of traffic relative to the pool's other nodes (weighted algorithms).
    pub weight: NonZeroU32,
    /// Whether the node takes new requests (`state` in the file).
    pub state: NodeMode,
    /// The DNS name (`host:port`) this node is an address of; `None` for a node given by
    /// address.
    pub name: Option<String>,
}

impl Node {
    /// The host of the DNS name this node is an address of (`api.internal` for
    /// `api.internal:443`): what TLS to it names by default. `None` for a node given by
    /// address, or by SRV record (the targets' names are not kept).
    pub fn dns_host(&self) -> Option<&str> {
        let name = self.name.as_deref()?;
        if name.starts_with("srv:") {
            return None;
        }
        name.rsplit_once(':').map(|(host, _)| host)
    }
}

/// An operator's choice for a node (vTM's node states).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeMode {
    /// Takes requests while healthy.
    Active,
    /// Takes no new requests; those in flight finish; health checks go on, so it can be
    /// made active again with its health known.
    Draining,
    /// Takes no requests and is not health checked.
    Disabled,
}

impl NodeMode {
    /// The value written in the file and shown by the API.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeMode::Active => "active",
            NodeMode::Draining => "draining",
            NodeMode::Disabled => "disabled",
        }
    }
}

/// How a pool chooses a node for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// Each node in turn.
    RoundRobin,
    /// Each node in turn, in proportion to its weight.
    WeightedRoundRobin,
    /// The node with the fewest requests in flight (ties go to the lower load for its weight).
    LeastConnections,
    /// Power of two choices scored by EWMA response time and in-flight requests.
    Perceptive,
    /// Ring hash with bounded loads on a key taken from the request (issue 14).
    ConsistentHash,
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
    /// The queue takes clients (by address) in turn, and a full queue refuses the newest
    /// request of the client with the most waiting rather than a newcomer with fewer;
    /// `false`: first come, first served.
    pub fair_queue: bool,
    /// A request (or TCP session) still waiting in the queue when its client
    /// closes the connection leaves the queue and is never sent; a request
    /// whose node takes longer than 100 ms to answer ends the same way. Off
    /// for clients that half-close after their request and still read the answer.
    pub leave_queue_on_close: bool,
    /// Idle keep-alive connections are closed after this long.
    pub idle_timeout: Duration,
    /// Requests sent on one upstream connection before it is retired; `None` means no limit.
    pub max_requests_per_connection: Option<NonZeroU32>,
    /// Connections to each node that left HTTP (WebSocket upgrades, CONNECT
    /// tunnels). They are counted apart from `max_connections`, so tunnels
    /// never take the slots requests need.
    pub max_tunnels: u32,
}

/// Timeouts towards the nodes of a pool.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamTimeouts {
    /// TCP connect; past it → try another node (any request: nothing was sent) or 502.
    pub connect: Duration,
    /// From the request sent to the response head received (past it → 504), and the
    /// longest pause in the response body after it (past it the answer is cut short).
    pub response: Duration,
    /// Longest stall while writing a request (head or body) to a node.
    pub write: Duration,
}

/// An active health monitor.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthMonitor {
    /// What a probe does.
    pub check: HealthCheckKind,
    /// Time from the end of one probe of a node to the start of the next, ± 10 % at random.
    pub interval: Duration,
    /// How long a probe may take before it counts as a failure.
    pub timeout: Duration,
    /// Consecutive successes before a down node is marked up.
    pub rise: NonZeroU32,
    /// Consecutive failures before an up node is marked down.
    pub fall: NonZeroU32,
}

/// What an active health probe does.
#[derive(Debug, Clone, PartialEq)]
pub enum HealthCheckKind {
    /// A TCP connect that succeeds.
    Tcp,
    /// An HTTP/1.1 request answered with an expected status.
    Http {
        /// The request method (`GET`, `HEAD`, ...).
        method: String,
        /// The request target, starting with `/`.
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
    /// At most this share of the pool's nodes, in percent, is ejected at once (at least
    /// one node): failures that a client can cause everywhere (one URL that answers 500)
    /// must not take the whole pool out while its nodes are up.
    pub max_ejected_percent: u32,
}

/// A built-in origin server started by `weir serve` (see `weir origin`).
#[derive(Debug, Clone, PartialEq)]
pub struct Origin {
    /// The name of its table in the file (`[origins.NAME]`), unique.
    pub name: String,
    /// Where it listens.
    pub listen: SocketAddr,
    /// Connections accepted at once; past it new ones are refused. `None` means no cap.
    pub max_connections: Option<NonZeroU32>,
    /// Whether it keeps connections open between requests.
    pub keep_alive: bool,
}

/// A file named in the configuration, with where it was named, so that a
/// problem found when the file is read later (a certificate that does not
/// parse) is reported like any other configuration error.
///
/// Two references are equal when they name the same path: where the file was named
/// (key and line) does not change what is loaded, so moving a key in the file is not a
/// change of configuration.
#[derive(Debug, Clone, Eq)]
pub struct FileRef {
    /// As written; relative paths are resolved against the config file's
    /// directory by [`crate::load_file`].
    pub path: PathBuf,
    /// The key that named it (`virtual_servers.web.tls.certificates[0].cert`).
    pub key: KeyPath,
    /// Its line in the config file, when known.
    pub line: Option<usize>,
}

impl FileRef {
    /// The file's bytes. Anything but a regular file (a FIFO, a socket, a device) is
    /// refused without being opened: reading a FIFO that no process writes to would hold
    /// a start, a reload or `weir check` for ever.
    pub fn read(&self) -> std::io::Result<Vec<u8>> {
        let meta = std::fs::metadata(&self.path)?;
        if !meta.is_file() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a regular file (a FIFO, socket or device is not read)",
            ));
        }
        std::fs::read(&self.path)
    }
}

/// TLS termination on a virtual server.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerTls {
    /// Certificates offered; chosen by SNI against each certificate's names,
    /// then by the signature schemes the client supports (ECDSA before RSA).
    /// The first one is the default when nothing matches or no SNI is sent.
    pub certificates: Vec<CertificateSource>,
    /// Protocol versions, a subset of 1.2 and 1.3.
    pub versions: Vec<TlsVersion>,
    /// IANA names of the cipher suites allowed, in preference order; `None`
    /// means weir's defaults (AEAD suites only).
    pub cipher_suites: Option<Vec<String>>,
    /// Key exchange groups in preference order.
    pub groups: Vec<KeyExchangeGroup>,
    /// ALPN protocols offered, in preference order.
    pub alpn: Vec<String>,
    /// From accept to the end of the handshake; past it the connection is closed.
    pub handshake_timeout: Duration,
    /// Handshakes in progress at once on this virtual server; past it new
    /// connections are closed at once.
    pub max_handshakes: NonZeroU32,
    /// Stateless resumption (TLS 1.3 and TLS 1.2 tickets).
    pub session_tickets: bool,
    /// Ticket keys are replaced this often; a ticket stays valid for two periods.
    pub ticket_rotation: Duration,
    /// Sessions kept in the stateful cache shared by all threads; 0 turns it off.
    pub session_cache_size: usize,
    /// How long a cached session may be resumed.
    pub session_cache_lifetime: Duration,
    /// Whether client certificates are asked for, and against which CA.
    pub client_auth: ClientAuth,
    /// Certificate revocation lists (PEM) client certificates are checked against: a
    /// certificate they list is refused, and so is one whose issuer has no list in the file.
    pub client_crl: Option<FileRef>,
    /// Request header that carries the verified client certificate's subject
    /// to the node (removed from what the client sent either way).
    pub client_subject_header: Option<String>,
}

/// The cipher suites weir can offer (IANA names): AEAD only, TLS 1.3 first.
pub const CIPHER_SUITES: &[&str] = &[
    "TLS13_AES_128_GCM_SHA256",
    "TLS13_AES_256_GCM_SHA384",
    "TLS13_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
];

/// Where a server certificate comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum CertificateSource {
    /// A PEM chain (leaf first) and its PEM private key.
    Files {
        /// The certificate chain file.
        cert: FileRef,
        /// The private key file.
        key: FileRef,
        /// A DER OCSP response about the leaf, stapled to it (`ocsp`).
        ocsp: Option<FileRef>,
    },
    /// Generated at start-up, self-signed, for these names (demos and tests).
    SelfSigned {
        /// DNS names (or IP addresses) the certificate is valid for.
        names: Vec<String>,
        /// The key that asked for it, for diagnostics.
        key: KeyPath,
    },
}

/// A TLS protocol version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TlsVersion {
    /// TLS 1.2 (`"1.2"` in the file).
    Tls12,
    /// TLS 1.3 (`"1.3"` in the file).
    Tls13,
}

/// A key exchange group for the TLS handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyExchangeGroup {
    /// X25519 (`x25519`).
    X25519,
    /// NIST P-256 (`secp256r1`).
    Secp256r1,
    /// NIST P-384 (`secp384r1`).
    Secp384r1,
    /// The hybrid post-quantum group X25519 + ML-KEM-768 (`x25519mlkem768`).
    X25519MlKem768,
}

/// Client certificates on a virtual server.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientAuth {
    /// Not asked for.
    None,
    /// Asked for and verified against `ca` when sent; clients without one are served.
    Optional {
        /// The CA that client certificates must chain to.
        ca: FileRef,
    },
    /// Clients without a certificate that verifies against `ca` are refused.
    Required {
        /// The CA that client certificates must chain to.
        ca: FileRef,
    },
}

/// TLS from weir to the nodes of a pool.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamTls {
    /// Verify the node's certificate (against `ca`, or the system roots when `ca` is `None`).
    pub verify: bool,
    /// CA certificates (PEM) to verify nodes against; `None`: the system's roots.
    pub ca: Option<FileRef>,
    /// Name sent as SNI and verified; the node's IP address when `None`.
    pub server_name: Option<String>,
    /// Client certificate and key presented to nodes (mTLS).
    pub client_certificate: Option<(FileRef, FileRef)>,
    /// Resume sessions with nodes.
    pub session_resumption: bool,
    /// Protocol versions offered to nodes.
    pub versions: Vec<TlsVersion>,
}

impl PartialEq for FileRef {
    fn eq(&self, other: &Self) -> bool {
        self.path == other.path
    }
}

impl Config {
    /// Every file the configuration names, for resolving paths and lines.
    pub fn file_refs_mut(&mut self) -> impl Iterator<Item = &mut FileRef> {
        let servers = self
            .virtual_servers
            .iter_mut()
            .filter_map(|vs| vs.tls.as_mut())
            .flat_map(|tls| {
                let certificates = tls.certificates.iter_mut().flat_map(|source| match source {
                    CertificateSource::Files { cert, key, ocsp } => {
                        [Some(cert), Some(key), ocsp.as_mut()]
                            .into_iter()
                            .flatten()
                            .collect()
                    }
                    CertificateSource::SelfSigned { .. } => Vec::new(),
                });
                let ca = match &mut tls.client_auth {
                    ClientAuth::None => None,
                    ClientAuth::Optional { ca } | ClientAuth::Required { ca } => Some(ca),
                };
                let crl = tls.client_crl.as_mut();
                certificates.chain(ca).chain(crl).collect::<Vec<_>>()
            });
        let pools = self
            .pools
            .iter_mut()
            .filter_map(|pool| pool.tls.as_mut())
            .flat_map(|tls| {
                let pair = tls
                    .client_certificate
                    .as_mut()
                    .map(|(cert, key)| [cert, key])
                    .into_iter()
                    .flatten();
                tls.ca.as_mut().into_iter().chain(pair).collect::<Vec<_>>()
            });
        let token = self
            .admin
            .as_mut()
            .and_then(|admin| admin.token_file.as_mut());
        servers
            .chain(pools)
            .chain(token)
            .chain(self.access_log.file.as_mut())
    }
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
