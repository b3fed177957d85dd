//! Every metric weir exports, named in one place: name, type, labels and help text.
//!
//! [`crate::Metrics`] registers exactly the entries of [`ALL`] (a tunnel side's registry those
//! of [`TUNNEL`] too), and `docs/metrics.md` lists them (a test checks both). Names here carry
//! neither the `weir_` prefix nor the `_total` suffix of counters: the registry adds those;
//! [`MetricSpec::exposed_name`] shows the result.

/// The Prometheus type of a metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Only ever goes up; exposed with the `_total` suffix.
    Counter,
    /// Goes up and down; the value now.
    Gauge,
}

/// The description of one metric family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricSpec {
    /// The name without the `weir_` prefix and without the `_total` suffix of counters.
    pub name: &'static str,
    /// Counter or gauge.
    pub kind: MetricKind,
    /// Label names, in the order they appear in the exposition.
    pub labels: &'static [&'static str],
    /// The `# HELP` text, one sentence without a final period.
    pub help: &'static str,
}

/// The prefix the registry puts before every name.
pub const PREFIX: &str = "weir";

const VIRTUAL_SERVER: &[&str] = &["virtual_server"];
const VIRTUAL_SERVER_CLASS: &[&str] = &["virtual_server", "class"];
const POOL: &[&str] = &["pool"];
const POOL_CLASS: &[&str] = &["pool", "class"];
const POOL_NODE: &[&str] = &["pool", "node"];

const fn counter(
    name: &'static str,
    labels: &'static [&'static str],
    help: &'static str,
) -> MetricSpec {
    MetricSpec {
        name,
        kind: MetricKind::Counter,
        labels,
        help,
    }
}

const fn gauge(
    name: &'static str,
    labels: &'static [&'static str],
    help: &'static str,
) -> MetricSpec {
    MetricSpec {
        name,
        kind: MetricKind::Gauge,
        labels,
        help,
    }
}

// Process.

/// `weir_build_info`, a gauge: always 1; the version label names the running weir build.
pub const BUILD_INFO: MetricSpec = gauge(
    "build_info",
    &["version"],
    "Always 1; the version label names the running weir build",
);
/// `weir_process_open_fds`, a gauge: file descriptors the process holds open.
pub const PROCESS_OPEN_FDS: MetricSpec = gauge(
    "process_open_fds",
    &[],
    "File descriptors the process holds open (each client, node and listening socket is one)",
);
/// `weir_process_max_fds`, a gauge: the process's open-file limit (soft).
pub const PROCESS_MAX_FDS: MetricSpec = gauge(
    "process_max_fds",
    &[],
    "The open-file limit (soft): past it accepts and connects fail",
);
/// `weir_process_resident_memory_bytes`, a gauge: resident memory.
pub const PROCESS_RESIDENT_MEMORY_BYTES: MetricSpec = gauge(
    "process_resident_memory_bytes",
    &[],
    "Resident memory of the process, bytes",
);
/// `weir_process_start_time_seconds`, a gauge: when the process started, Unix time.
pub const PROCESS_START_TIME_SECONDS: MetricSpec = gauge(
    "process_start_time_seconds",
    &[],
    "When the process started, Unix time in seconds",
);
/// `weir_access_log_records_lost_total`, a counter: access records written nowhere.
pub const ACCESS_LOG_RECORDS_LOST: MetricSpec = counter(
    "access_log_records_lost",
    &[],
    "Access log records written nowhere: dropped while its writer was behind (a reader that stopped reading) or failed to write (a full disk)",
);
/// `weir_log_lines_dropped_total`, a counter: lines of weir's own log dropped.
pub const LOG_LINES_DROPPED: MetricSpec = counter(
    "log_lines_dropped",
    &[],
    "Lines of weir's own log (standard error) dropped because its reader was behind",
);
/// `weir_reuse_ratio`, a gauge: requests forwarded per upstream connection created, over all nodes
/// (0 when none created).
pub const REUSE_RATIO: MetricSpec = gauge(
    "reuse_ratio",
    &[],
    "Requests forwarded per upstream connection created, over all nodes (0 when none created)",
);
/// `weir_offload_ratio`, a gauge: open client connections per open upstream connection, over all
/// virtual servers and nodes (0 when none open).
pub const OFFLOAD_RATIO: MetricSpec = gauge(
    "offload_ratio",
    &[],
    "Open client connections per open upstream connection, over all virtual servers and nodes (0 when none open)",
);

// Virtual servers (client side).

/// `weir_client_connections_open`, a gauge: client connections currently open.
pub const CLIENT_CONNECTIONS_OPEN: MetricSpec = gauge(
    "client_connections_open",
    VIRTUAL_SERVER,
    "Client connections currently open",
);
/// `weir_client_connections_parked`, a gauge: idle client connections parked now.
pub const CLIENT_CONNECTIONS_PARKED: MetricSpec = gauge(
    "client_connections_parked",
    VIRTUAL_SERVER,
    "Idle client connections parked now (out of the runtime; counted in client_connections_open too)",
);
/// `weir_client_connections_resting`, a gauge: idle client connections resting now.
pub const CLIENT_CONNECTIONS_RESTING: MetricSpec = gauge(
    "client_connections_resting",
    VIRTUAL_SERVER,
    "Idle client connections resting now (no task, still registered with the runtime; counted in client_connections_open too)",
);
/// `weir_client_connections_accepted_total`, a counter: client connections accepted.
pub const CLIENT_CONNECTIONS_ACCEPTED: MetricSpec = counter(
    "client_connections_accepted",
    VIRTUAL_SERVER,
    "Client connections accepted",
);
/// `weir_client_connections_rejected_total`, a counter: client connections refused because the
/// virtual server was at max_connections.
pub const CLIENT_CONNECTIONS_REJECTED: MetricSpec = counter(
    "client_connections_rejected",
    VIRTUAL_SERVER,
    "Client connections refused because the virtual server was at max_connections",
);
/// `weir_requests_total`, a counter: responses sent to clients, by status class.
pub const REQUESTS: MetricSpec = counter(
    "requests",
    VIRTUAL_SERVER_CLASS,
    "Responses sent to clients, by status class",
);
/// `weir_bad_requests_total`, a counter: client requests rejected while parsing (malformed, too
/// large or smuggling-prone).
pub const BAD_REQUESTS: MetricSpec = counter(
    "bad_requests",
    VIRTUAL_SERVER,
    "Client requests rejected while parsing (malformed, too large or smuggling-prone)",
);
/// `weir_client_bytes_received_total`, a counter: bytes read from clients.
pub const CLIENT_BYTES_RECEIVED: MetricSpec = counter(
    "client_bytes_received",
    VIRTUAL_SERVER,
    "Bytes read from clients",
);
/// `weir_client_bytes_sent_total`, a counter: bytes written to clients.
pub const CLIENT_BYTES_SENT: MetricSpec = counter(
    "client_bytes_sent",
    VIRTUAL_SERVER,
    "Bytes written to clients",
);

// Pools.

/// `weir_pool_requests_total`, a counter: responses obtained from the pool's nodes (or generated on
/// its behalf), by status class.
pub const POOL_REQUESTS: MetricSpec = counter(
    "pool_requests",
    POOL_CLASS,
    "Responses obtained from the pool's nodes (or generated on its behalf), by status class",
);
/// `weir_queue_length`, a gauge: requests currently waiting for an upstream connection, summed over
/// the pool's nodes.
pub const QUEUE_LENGTH: MetricSpec = gauge(
    "queue_length",
    POOL,
    "Requests currently waiting for an upstream connection, summed over the pool's nodes",
);
/// `weir_queue_timeouts_total`, a counter: requests that gave up waiting in the queue for an
/// upstream connection.
pub const QUEUE_TIMEOUTS: MetricSpec = counter(
    "queue_timeouts",
    POOL,
    "Requests that gave up waiting in the queue for an upstream connection",
);
/// `weir_queue_abandoned_total`, a counter: requests whose client left while they waited in
/// the queue; they left it and were never sent.
pub const QUEUE_ABANDONED: MetricSpec = counter(
    "queue_abandoned",
    POOL,
    "Requests whose client left while they waited in the queue (never sent)",
);
/// `weir_queue_full_total`, a counter: requests refused because the queue was full, or
/// pushed out of it by a client with fewer requests waiting (`fair_queue`).
pub const QUEUE_FULL: MetricSpec = counter(
    "queue_full",
    POOL,
    "Requests refused because the queue was full, or pushed out of it by a client with fewer waiting",
);
/// `weir_retries_total`, a counter: requests sent again to a node after a retry-safe failure.
pub const RETRIES: MetricSpec = counter(
    "retries",
    POOL,
    "Requests sent again to a node after a retry-safe failure",
);
/// `weir_no_node_available_total`, a counter: requests for which the balancer found no healthy
/// node.
pub const NO_NODE_AVAILABLE: MetricSpec = counter(
    "no_node_available",
    POOL,
    "Requests for which the balancer found no healthy node",
);

// Nodes (upstream side).

/// `weir_upstream_connections_open`, a gauge: connections to the node currently open, idle or in
/// use.
pub const UPSTREAM_CONNECTIONS_OPEN: MetricSpec = gauge(
    "upstream_connections_open",
    POOL_NODE,
    "Connections to the node currently open, idle or in use",
);
/// `weir_upstream_connections_created_total`, a counter: connections to the node established.
pub const UPSTREAM_CONNECTIONS_CREATED: MetricSpec = counter(
    "upstream_connections_created",
    POOL_NODE,
    "Connections to the node established",
);
/// `weir_upstream_connections_reused_total`, a counter: requests that reused an idle keep-alive
/// connection to the node.
pub const UPSTREAM_CONNECTIONS_REUSED: MetricSpec = counter(
    "upstream_connections_reused",
    POOL_NODE,
    "Requests that reused an idle keep-alive connection to the node",
);
/// `weir_node_requests_forwarded_total`, a counter: requests forwarded to the node.
pub const NODE_REQUESTS_FORWARDED: MetricSpec = counter(
    "node_requests_forwarded",
    POOL_NODE,
    "Requests forwarded to the node",
);
/// `weir_node_connect_failures_total`, a counter: failed attempts to connect to the node (refused,
/// timed out, TLS failure).
pub const NODE_CONNECT_FAILURES: MetricSpec = counter(
    "node_connect_failures",
    POOL_NODE,
    "Failed attempts to connect to the node (refused, timed out, TLS failure)",
);
/// `weir_node_responses_5xx_total`, a counter: responses with a 5xx status received from the node.
pub const NODE_RESPONSES_5XX: MetricSpec = counter(
    "node_responses_5xx",
    POOL_NODE,
    "Responses with a 5xx status received from the node",
);
/// `weir_node_healthy`, a gauge: 1 while the node is considered up, 0 while it is down.
pub const NODE_HEALTHY: MetricSpec = gauge(
    "node_healthy",
    POOL_NODE,
    "1 while the node is considered up, 0 while it is down",
);
/// `weir_node_ejections_total`, a counter: times the node was marked down by active or passive
/// health checks.
pub const NODE_EJECTIONS: MetricSpec = counter(
    "node_ejections",
    POOL_NODE,
    "Times the node was marked down by active or passive health checks",
);
/// `weir_node_response_time_ewma_seconds`, a gauge: exponentially weighted moving average of the
/// node's response time, in seconds.
pub const NODE_RESPONSE_TIME_EWMA: MetricSpec = gauge(
    "node_response_time_ewma_seconds",
    POOL_NODE,
    "Exponentially weighted moving average of the node's response time, in seconds",
);
/// `weir_node_tunnels_open`, a gauge: tunnels (WebSocket after its `101`, CONNECT after its
/// `2xx`) open to the node now. Their connections are also in `weir_upstream_connections_open`.
pub const NODE_TUNNELS_OPEN: MetricSpec = gauge(
    "node_tunnels_open",
    POOL_NODE,
    "Tunnels (WebSocket, CONNECT) open to the node now",
);

// Configuration reloads.

/// `weir_config_reloads_total`, a counter: configuration reloads tried (SIGHUP, weir reload, the
/// admin API), by result: applied or refused.
pub const CONFIG_RELOADS: MetricSpec = counter(
    "config_reloads",
    &["result"],
    "Configuration reloads tried (SIGHUP, weir reload, the admin API), by result: applied or refused",
);
/// `weir_config_generation`, a gauge: generation of the running configuration: 1 at start, one more
/// per applied reload.
pub const CONFIG_GENERATION: MetricSpec = gauge(
    "config_generation",
    &[],
    "Generation of the running configuration: 1 at start, one more per applied reload",
);
/// `weir_config_last_reload_timestamp_seconds`, a gauge: unix time of the last reload tried,
/// applied or refused (0 before the first).
pub const CONFIG_LAST_RELOAD_TIMESTAMP: MetricSpec = gauge(
    "config_last_reload_timestamp_seconds",
    &[],
    "Unix time of the last reload tried, applied or refused (0 before the first)",
);
/// `weir_config_last_reload_success`, a gauge: 1 when the last reload tried was applied (or none
/// was tried), 0 when it was refused.
pub const CONFIG_LAST_RELOAD_SUCCESS: MetricSpec = gauge(
    "config_last_reload_success",
    &[],
    "1 when the last reload tried was applied (or none was tried), 0 when it was refused",
);

/// `weir_admin_unauthorized_total`, a counter: admin API requests refused for their token.
pub const ADMIN_UNAUTHORIZED: MetricSpec = counter(
    "admin_unauthorized",
    &[],
    "Admin API requests refused with 401: no bearer token, or a wrong one",
);

/// Every metric, in exposition order.
pub const ALL: &[MetricSpec] = &[
    BUILD_INFO,
    PROCESS_OPEN_FDS,
    PROCESS_MAX_FDS,
    PROCESS_RESIDENT_MEMORY_BYTES,
    PROCESS_START_TIME_SECONDS,
    ACCESS_LOG_RECORDS_LOST,
    LOG_LINES_DROPPED,
    REUSE_RATIO,
    OFFLOAD_RATIO,
    CONFIG_RELOADS,
    CONFIG_GENERATION,
    CONFIG_LAST_RELOAD_TIMESTAMP,
    CONFIG_LAST_RELOAD_SUCCESS,
    ADMIN_UNAUTHORIZED,
    CLIENT_CONNECTIONS_OPEN,
    CLIENT_CONNECTIONS_PARKED,
    CLIENT_CONNECTIONS_RESTING,
    CLIENT_CONNECTIONS_ACCEPTED,
    CLIENT_CONNECTIONS_REJECTED,
    REQUESTS,
    BAD_REQUESTS,
    CLIENT_BYTES_RECEIVED,
    CLIENT_BYTES_SENT,
    POOL_REQUESTS,
    QUEUE_LENGTH,
    QUEUE_TIMEOUTS,
    QUEUE_ABANDONED,
    QUEUE_FULL,
    RETRIES,
    NO_NODE_AVAILABLE,
    UPSTREAM_CONNECTIONS_OPEN,
    UPSTREAM_CONNECTIONS_CREATED,
    UPSTREAM_CONNECTIONS_REUSED,
    NODE_REQUESTS_FORWARDED,
    NODE_CONNECT_FAILURES,
    NODE_RESPONSES_5XX,
    NODE_HEALTHY,
    NODE_EJECTIONS,
    NODE_RESPONSE_TIME_EWMA,
    NODE_TUNNELS_OPEN,
    TLS_HANDSHAKES,
    TLS_HANDSHAKE_FAILURES,
    TLS_CERTIFICATE_EXPIRY_TIMESTAMP,
    TLS_OCSP_NEXT_UPDATE_TIMESTAMP,
    UPSTREAM_TLS_HANDSHAKES,
    // Cache and compression (issue 12).
    CACHE_HITS,
    CACHE_MISSES,
    CACHE_STALE_SERVED,
    CACHE_COALESCED,
    CACHE_WAITING,
    CACHE_REVALIDATED,
    CACHE_BYTES_STORED,
    CACHE_BYTES_FILLING,
    CACHE_OBJECTS,
    CACHE_EVICTIONS,
    COMPRESSION_BYTES_IN,
    COMPRESSION_BYTES_OUT,
    // End of cache and compression.
    // Traffic rules and limits (issue 14).
    RULE_MATCHES,
    LIMIT_REFUSALS,
    // HTTP/2 (issue 11).
    HTTP2_CONNECTIONS,
    HTTP2_STREAMS,
    HTTP2_PROTOCOL_ERRORS,
    HTTP2_FLOODS,
    UPSTREAM_HTTP2_STREAMS_OPEN,
    UPSTREAM_HTTP2_GOAWAYS,
    UPSTREAM_HTTP2_PING_TIMEOUTS,
    // End of HTTP/2.
    // Layer 4 (issue 13).
    TCP_SESSIONS,
    PROXY_PROTOCOL_HEADERS,
    CLIENT_HELLOS,
    DNS_RESOLUTIONS,
    DNS_ADDRESSES,
];

// Layer 4 (issue 13).

/// `weir_tcp_sessions_total`: TCP sessions by how they ended.
pub const TCP_SESSIONS: MetricSpec = counter(
    "tcp_sessions",
    &["virtual_server", "result"],
    "TCP sessions of tcp and tls virtual servers and TLS passthrough, by how they ended",
);
/// `weir_proxy_protocol_headers_total`: PROXY headers from trusted clients, by outcome.
pub const PROXY_PROTOCOL_HEADERS: MetricSpec = counter(
    "proxy_protocol_headers",
    &["virtual_server", "result"],
    "PROXY protocol headers expected from trusted clients, by outcome",
);
/// `weir_client_hellos_total`: ClientHellos read for passthrough, by outcome.
pub const CLIENT_HELLOS: MetricSpec = counter(
    "client_hellos",
    &["virtual_server", "result"],
    "ClientHellos read for TLS passthrough routing, by outcome",
);
/// `weir_dns_resolutions_total`: re-resolutions of node names, by how they went.
pub const DNS_RESOLUTIONS: MetricSpec = counter(
    "dns_resolutions",
    &["pool", "name", "result"],
    "Re-resolutions of a node name, by result: changed, unchanged, partial (a query failed) or failed (the last good set kept)",
);
/// `weir_dns_addresses`: the addresses a node name has now.
pub const DNS_ADDRESSES: MetricSpec = gauge(
    "dns_addresses",
    &["pool", "name"],
    "Addresses a node name resolves to now (the last good set after a failure)",
);

// HTTP/2 (issue 11).

/// `weir_http2_connections_total{virtual_server, via}`, a counter: client connections served
/// as HTTP/2, by how HTTP/2 was chosen (`alpn` or `h2c`).
pub const HTTP2_CONNECTIONS: MetricSpec = counter(
    "http2_connections",
    &["virtual_server", "via"],
    "Client connections served as HTTP/2, by how HTTP/2 was chosen (alpn or h2c prior knowledge)",
);
/// `weir_http2_streams_total{virtual_server}`, a counter: streams (requests) received on
/// HTTP/2 client connections.
pub const HTTP2_STREAMS: MetricSpec = counter(
    "http2_streams",
    VIRTUAL_SERVER,
    "Requests (streams) received on HTTP/2 client connections",
);
/// `weir_http2_protocol_errors_total{virtual_server}`, a counter: HTTP/2 client connections
/// ended by the client's protocol error.
pub const HTTP2_PROTOCOL_ERRORS: MetricSpec = counter(
    "http2_protocol_errors",
    VIRTUAL_SERVER,
    "HTTP/2 client connections ended by a protocol error of the client (GOAWAY sent)",
);
/// `weir_http2_floods_total{virtual_server, kind}`, a counter: HTTP/2 client connections
/// closed for a flood, by kind.
pub const HTTP2_FLOODS: MetricSpec = counter(
    "http2_floods",
    &["virtual_server", "kind"],
    "HTTP/2 client connections closed with GOAWAY for a flood, by kind (rapid_reset, continuation, settings, ping, empty_frames, window_update, ignored_frames, codec)",
);
/// `weir_upstream_http2_streams_open{pool, node}`, a gauge: streams open on HTTP/2
/// connections to the node.
pub const UPSTREAM_HTTP2_STREAMS_OPEN: MetricSpec = gauge(
    "upstream_http2_streams_open",
    POOL_NODE,
    "Streams open on HTTP/2 connections to the node",
);
/// `weir_upstream_http2_goaways_total{pool, node}`, a counter: GOAWAY frames received from
/// the node (and connections it closed without one, which the h2 crate reports alike).
pub const UPSTREAM_HTTP2_GOAWAYS: MetricSpec = counter(
    "upstream_http2_goaways",
    POOL_NODE,
    "GOAWAY frames received from the node, or connections it closed (drained and replaced)",
);
/// `weir_upstream_http2_ping_timeouts_total{pool, node}`, a counter: HTTP/2 connections to
/// the node closed because a PING went unanswered.
pub const UPSTREAM_HTTP2_PING_TIMEOUTS: MetricSpec = counter(
    "upstream_http2_ping_timeouts",
    POOL_NODE,
    "HTTP/2 connections to the node closed because a PING went unanswered",
);

// TLS.

/// `weir_tls_handshakes_total`, a counter: TLS handshakes completed with clients, by protocol
/// version, cipher suite and kind (full or resumed).
pub const TLS_HANDSHAKES: MetricSpec = counter(
    "tls_handshakes",
    &["virtual_server", "version", "suite", "kind"],
    "TLS handshakes completed with clients, by protocol version, cipher suite and kind (full or resumed)",
);
/// `weir_tls_handshake_failures_total`, a counter: TLS handshakes with clients that did not
/// complete, by reason.
pub const TLS_HANDSHAKE_FAILURES: MetricSpec = counter(
    "tls_handshake_failures",
    &["virtual_server", "reason"],
    "TLS handshakes with clients that did not complete, by reason",
);
/// `weir_tls_certificate_expiry_timestamp_seconds`, a gauge: when each served certificate
/// expires (its notAfter), Unix time: true however long ago it was set, where a count of days
/// left would only be as fresh as the last reload.
pub const TLS_CERTIFICATE_EXPIRY_TIMESTAMP: MetricSpec = gauge(
    "tls_certificate_expiry_timestamp_seconds",
    &["virtual_server", "certificate", "key_type"],
    "When each served certificate expires (its notAfter), Unix time in seconds",
);
/// `weir_tls_ocsp_next_update_timestamp_seconds`, a gauge: the nextUpdate of the OCSP
/// response stapled to each served certificate, Unix time; past it the response is no longer
/// sent. Only certificates with a stapled response that has a nextUpdate have a series.
pub const TLS_OCSP_NEXT_UPDATE_TIMESTAMP: MetricSpec = gauge(
    "tls_ocsp_next_update_timestamp_seconds",
    &["virtual_server", "certificate", "key_type"],
    "When the OCSP response stapled to each served certificate stops being sent (its nextUpdate), Unix time in seconds",
);
/// `weir_upstream_tls_handshakes_total`, a counter: TLS handshakes with nodes, by kind (full,
/// resumed or failed).
pub const UPSTREAM_TLS_HANDSHAKES: MetricSpec = counter(
    "upstream_tls_handshakes",
    &["pool", "kind"],
    "TLS handshakes with nodes, by kind (full, resumed or failed)",
);

// Traffic rules and limits (issue 14).

/// `weir_rule_matches_total`: requests a traffic rule's terminal action decided.
pub const RULE_MATCHES: MetricSpec = counter(
    "rule_matches",
    &["virtual_server", "rule"],
    "Requests whose pool or answer a traffic rule decided, by rule (as named in the configuration, else rules[N])",
);
/// `weir_limit_refusals_total`: requests and connections a limit refused.
pub const LIMIT_REFUSALS: MetricSpec = counter(
    "limit_refusals",
    &["virtual_server", "limit"],
    "Requests refused by a rate or concurrency limit, and connections refused by client_connections, by limit name",
);

// Cache and compression (issue 12): one store per virtual server.

const VIRTUAL_SERVER_ALGORITHM: &[&str] = &["virtual_server", "algorithm"];

/// `weir_cache_hits_total`, a counter: requests answered from the cache with a fresh object.
pub const CACHE_HITS: MetricSpec = counter(
    "cache_hits",
    VIRTUAL_SERVER,
    "Requests answered from the cache with a fresh object",
);
/// `weir_cache_misses_total`, a counter: cacheable requests sent to a node because nothing usable
/// was stored (coalesced waiters not included).
pub const CACHE_MISSES: MetricSpec = counter(
    "cache_misses",
    VIRTUAL_SERVER,
    "Cacheable requests sent to a node because nothing usable was stored (coalesced waiters not included)",
);
/// `weir_cache_stale_served_total`, a counter: requests answered with a stale object
/// (stale-while-revalidate, max-stale, or stale-if-error while nodes failed).
pub const CACHE_STALE_SERVED: MetricSpec = counter(
    "cache_stale_served",
    VIRTUAL_SERVER,
    "Requests answered with a stale object (stale-while-revalidate, max-stale, or stale-if-error while nodes failed)",
);
/// `weir_cache_coalesced_total`, a counter: requests answered from another request's fill of the
/// same object, which they waited for, instead of going to a node.
pub const CACHE_COALESCED: MetricSpec = counter(
    "cache_coalesced",
    VIRTUAL_SERVER,
    "Requests answered from another request's fill of the same object, which they waited for, instead of going to a node",
);
/// `weir_cache_waiting`, a gauge: requests waiting now for another request's fill of the same
/// object.
pub const CACHE_WAITING: MetricSpec = gauge(
    "cache_waiting",
    VIRTUAL_SERVER,
    "Requests waiting now for another request's fill of the same object",
);
/// `weir_cache_revalidated_total`, a counter: stored objects confirmed by a node with 304 Not
/// Modified.
pub const CACHE_REVALIDATED: MetricSpec = counter(
    "cache_revalidated",
    VIRTUAL_SERVER,
    "Stored objects confirmed by a node with 304 Not Modified",
);
/// `weir_cache_bytes_stored`, a gauge: bytes charged to the cache's bound (heads, bodies, keys and
/// per-object overhead).
pub const CACHE_BYTES_STORED: MetricSpec = gauge(
    "cache_bytes_stored",
    VIRTUAL_SERVER,
    "Bytes charged to the cache's bound (heads, bodies, keys and per-object overhead)",
);
/// `weir_cache_bytes_filling`, a gauge: bytes of bodies being filled that the store does not
/// charge (length unknown until complete, or taken out of the store while filling).
pub const CACHE_BYTES_FILLING: MetricSpec = gauge(
    "cache_bytes_filling",
    VIRTUAL_SERVER,
    "Bytes of bodies being filled that the store does not charge (length unknown until \
     complete, or taken out of the store while filling); at most the cache's size",
);
/// `weir_cache_objects`, a gauge: objects (variants) in the cache.
pub const CACHE_OBJECTS: MetricSpec = gauge(
    "cache_objects",
    VIRTUAL_SERVER,
    "Objects (variants) in the cache",
);
/// `weir_cache_evictions_total`, a counter: objects evicted to keep the cache within its size.
pub const CACHE_EVICTIONS: MetricSpec = counter(
    "cache_evictions",
    VIRTUAL_SERVER,
    "Objects evicted to keep the cache within its size",
);
/// `weir_compression_bytes_in_total`, a counter: bytes given to the compressor, by algorithm (gzip,
/// brotli, zstd).
pub const COMPRESSION_BYTES_IN: MetricSpec = counter(
    "compression_bytes_in",
    VIRTUAL_SERVER_ALGORITHM,
    "Bytes given to the compressor, by algorithm (gzip, brotli, zstd)",
);
/// `weir_compression_bytes_out_total`, a counter: compressed bytes produced, by algorithm (gzip,
/// brotli, zstd).
pub const COMPRESSION_BYTES_OUT: MetricSpec = counter(
    "compression_bytes_out",
    VIRTUAL_SERVER_ALGORITHM,
    "Compressed bytes produced, by algorithm (gzip, brotli, zstd)",
);

// End of cache and compression.
// The WAN tunnel (`weir tunnel client|server`): one process is one side of one tunnel, so these
// have no labels, and only a tunnel side registers them (`Metrics::for_tunnel`).

/// `weir_tunnel_connections_total`, a counter: tunnel connections established (near side: including
/// reconnections).
pub const TUNNEL_CONNECTIONS: MetricSpec = counter(
    "tunnel_connections",
    &[],
    "Tunnel connections established (near side: including reconnections)",
);
/// `weir_tunnel_connected`, a gauge: tunnel connections open now.
pub const TUNNEL_CONNECTED: MetricSpec =
    gauge("tunnel_connected", &[], "Tunnel connections open now");
/// `weir_tunnel_flows_total`, a counter: TCP flows carried (opened as streams).
pub const TUNNEL_FLOWS: MetricSpec =
    counter("tunnel_flows", &[], "TCP flows carried (opened as streams)");
/// `weir_tunnel_flows_active`, a gauge: TCP flows open now.
pub const TUNNEL_FLOWS_ACTIVE: MetricSpec = gauge("tunnel_flows_active", &[], "TCP flows open now");
/// `weir_tunnel_flows_failed_total`, a counter: flows refused or broken: no tunnel in time, unknown
/// service, connect failure, reset, protocol error.
pub const TUNNEL_FLOWS_FAILED: MetricSpec = counter(
    "tunnel_flows_failed",
    &[],
    "Flows refused or broken: no tunnel in time, unknown service, connect failure, reset, protocol error",
);
/// `weir_tunnel_stream_read_bytes_total`, a counter: bytes read from local TCP connections (what
/// the tunnel carries, before encoding).
pub const TUNNEL_STREAM_READ_BYTES: MetricSpec = counter(
    "tunnel_stream_read_bytes",
    &[],
    "Bytes read from local TCP connections (what the tunnel carries, before encoding)",
);
/// `weir_tunnel_stream_written_bytes_total`, a counter: bytes written to local TCP connections
/// (after decoding).
pub const TUNNEL_STREAM_WRITTEN_BYTES: MetricSpec = counter(
    "tunnel_stream_written_bytes",
    &[],
    "Bytes written to local TCP connections (after decoding)",
);
/// `weir_tunnel_encoded_sent_bytes_total`, a counter: bytes of encoded blocks sent on flow streams
/// (after compression and deduplication).
pub const TUNNEL_ENCODED_SENT_BYTES: MetricSpec = counter(
    "tunnel_encoded_sent_bytes",
    &[],
    "Bytes of encoded blocks sent on flow streams (after compression and deduplication)",
);
/// `weir_tunnel_encoded_received_bytes_total`, a counter: bytes of encoded blocks received on flow
/// streams.
pub const TUNNEL_ENCODED_RECEIVED_BYTES: MetricSpec = counter(
    "tunnel_encoded_received_bytes",
    &[],
    "Bytes of encoded blocks received on flow streams",
);
/// `weir_tunnel_compression_saved_bytes_total`, a counter: bytes compression removed from what was
/// sent.
pub const TUNNEL_COMPRESSION_SAVED_BYTES: MetricSpec = counter(
    "tunnel_compression_saved_bytes",
    &[],
    "Bytes compression removed from what was sent",
);
/// `weir_tunnel_dedup_saved_bytes_total`, a counter: bytes sent as references to chunks the far end
/// holds, instead of literally.
pub const TUNNEL_DEDUP_SAVED_BYTES: MetricSpec = counter(
    "tunnel_dedup_saved_bytes",
    &[],
    "Bytes sent as references to chunks the far end holds, instead of literally",
);
/// `weir_tunnel_dedup_misses_total`, a counter: references that missed this end's store and were
/// fetched over the control stream.
pub const TUNNEL_DEDUP_MISSES: MetricSpec = counter(
    "tunnel_dedup_misses",
    &[],
    "References that missed this end's store and were fetched over the control stream",
);
/// `weir_tunnel_dedup_store_bytes`, a gauge: bytes of chunks held in this end's stores (one per
/// connection, summed; a connection's part goes when it ends).
pub const TUNNEL_DEDUP_STORE_BYTES: MetricSpec = gauge(
    "tunnel_dedup_store_bytes",
    &[],
    "Bytes of chunks held in this end's stores, one per connection, summed",
);
/// `weir_tunnel_dedup_pinned_bytes`, a gauge: bytes of chunks this end sent and keeps until the
/// peer resolves its references to them (every connection's, summed; a connection's part goes
/// when it ends).
pub const TUNNEL_DEDUP_PINNED_BYTES: MetricSpec = gauge(
    "tunnel_dedup_pinned_bytes",
    &[],
    "Bytes of sent chunks kept until the peer resolves the references to them, over all connections",
);
/// `weir_tunnel_link_sent_bytes_total`, a counter: UDP payload bytes sent on the WAN link (QUIC
/// packets, retransmissions included).
pub const TUNNEL_LINK_SENT_BYTES: MetricSpec = counter(
    "tunnel_link_sent_bytes",
    &[],
    "UDP payload bytes sent on the WAN link (QUIC packets, retransmissions included)",
);
/// `weir_tunnel_link_received_bytes_total`, a counter: UDP payload bytes received from the WAN
/// link.
pub const TUNNEL_LINK_RECEIVED_BYTES: MetricSpec = counter(
    "tunnel_link_received_bytes",
    &[],
    "UDP payload bytes received from the WAN link",
);
/// `weir_tunnel_lost_packets_total`, a counter: QUIC packets declared lost (and their data
/// retransmitted).
pub const TUNNEL_LOST_PACKETS: MetricSpec = counter(
    "tunnel_lost_packets",
    &[],
    "QUIC packets declared lost (and their data retransmitted)",
);
/// `weir_tunnel_congestion_events_total`, a counter: loss episodes the congestion controller was
/// told of.
pub const TUNNEL_CONGESTION_EVENTS: MetricSpec = counter(
    "tunnel_congestion_events",
    &[],
    "Loss episodes the congestion controller was told of",
);
/// `weir_tunnel_rtt_seconds`, a gauge: smoothed round-trip time of the current connection.
pub const TUNNEL_RTT: MetricSpec = gauge(
    "tunnel_rtt_seconds",
    &[],
    "Smoothed round-trip time of the current connection",
);
/// `weir_tunnel_congestion_window_bytes`, a gauge: congestion window of the current connection.
pub const TUNNEL_CONGESTION_WINDOW: MetricSpec = gauge(
    "tunnel_congestion_window_bytes",
    &[],
    "Congestion window of the current connection",
);
/// `weir_tunnel_fec_repairs_total`, a counter: lost datagrams rebuilt from FEC repair datagrams and
/// passed to QUIC (no retransmission needed).
pub const TUNNEL_FEC_REPAIRS: MetricSpec = counter(
    "tunnel_fec_repairs",
    &[],
    "Lost datagrams rebuilt from FEC repair datagrams and passed to QUIC (no retransmission needed)",
);
/// `weir_tunnel_fec_repair_datagrams_sent_total`, a counter: FEC repair datagrams sent (the
/// redundancy).
pub const TUNNEL_FEC_REPAIR_DATAGRAMS_SENT: MetricSpec = counter(
    "tunnel_fec_repair_datagrams_sent",
    &[],
    "FEC repair datagrams sent (the redundancy)",
);
/// `weir_tunnel_fec_repair_sent_bytes_total`, a counter: UDP payload bytes of FEC repair datagrams
/// sent.
pub const TUNNEL_FEC_REPAIR_SENT_BYTES: MetricSpec = counter(
    "tunnel_fec_repair_sent_bytes",
    &[],
    "UDP payload bytes of FEC repair datagrams sent",
);
/// `weir_tunnel_fec_malformed_total`, a counter: received datagrams that were neither QUIC nor a
/// valid FEC frame (dropped).
pub const TUNNEL_FEC_MALFORMED: MetricSpec = counter(
    "tunnel_fec_malformed",
    &[],
    "Received datagrams that were neither QUIC nor a valid FEC frame (dropped)",
);
/// `weir_tunnel_fec_link_loss_ppm`, a gauge: loss rate of what this side sends, as the peer last
/// reported it (parts per million, before FEC).
pub const TUNNEL_FEC_LINK_LOSS: MetricSpec = gauge(
    "tunnel_fec_link_loss_ppm",
    &[],
    "Loss rate of what this side sends, as the peer last reported it (parts per million, before FEC)",
);
/// `weir_tunnel_fec_send_failures_total`, a counter: FEC repair and report datagrams the socket
/// refused (dropped; repairs are best effort).
pub const TUNNEL_FEC_SEND_FAILURES: MetricSpec = counter(
    "tunnel_fec_send_failures",
    &[],
    "FEC repair and report datagrams the socket refused (dropped; repairs are best effort)",
);

/// Every metric of a tunnel side, in exposition order.
pub const TUNNEL: &[MetricSpec] = &[
    TUNNEL_CONNECTIONS,
    TUNNEL_CONNECTED,
    TUNNEL_FLOWS,
    TUNNEL_FLOWS_ACTIVE,
    TUNNEL_FLOWS_FAILED,
    TUNNEL_STREAM_READ_BYTES,
    TUNNEL_STREAM_WRITTEN_BYTES,
    TUNNEL_ENCODED_SENT_BYTES,
    TUNNEL_ENCODED_RECEIVED_BYTES,
    TUNNEL_COMPRESSION_SAVED_BYTES,
    TUNNEL_DEDUP_SAVED_BYTES,
    TUNNEL_DEDUP_MISSES,
    TUNNEL_DEDUP_STORE_BYTES,
    TUNNEL_DEDUP_PINNED_BYTES,
    TUNNEL_LINK_SENT_BYTES,
    TUNNEL_LINK_RECEIVED_BYTES,
    TUNNEL_LOST_PACKETS,
    TUNNEL_CONGESTION_EVENTS,
    TUNNEL_RTT,
    TUNNEL_CONGESTION_WINDOW,
    TUNNEL_FEC_REPAIRS,
    TUNNEL_FEC_REPAIR_DATAGRAMS_SENT,
    TUNNEL_FEC_REPAIR_SENT_BYTES,
    TUNNEL_FEC_MALFORMED,
    TUNNEL_FEC_LINK_LOSS,
    TUNNEL_FEC_SEND_FAILURES,
];

impl MetricSpec {
    /// The name as it appears in the exposition, e.g. `weir_requests_total`.
    pub fn exposed_name(&self) -> String {
        match self.kind {
            MetricKind::Counter => format!("{PREFIX}_{}_total", self.name),
            MetricKind::Gauge => format!("{PREFIX}_{}", self.name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_well_formed() {
        let mut seen = std::collections::HashSet::new();
        for spec in ALL.iter().chain(TUNNEL) {
            assert!(seen.insert(spec.exposed_name()), "duplicate {}", spec.name);
            assert!(
                spec.name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                "bad name {}",
                spec.name
            );
            assert!(
                !spec.name.ends_with("_total"),
                "{} ends in _total",
                spec.name
            );
            assert!(!spec.help.is_empty());
        }
    }

    #[test]
    fn docs_list_every_metric() {
        let docs = include_str!("../../../docs/metrics.md");
        for spec in ALL.iter().chain(TUNNEL) {
            let row = format!("| `{}` |", spec.exposed_name());
            assert!(docs.contains(&row), "docs/metrics.md lacks a row for {row}");
        }
    }
}
