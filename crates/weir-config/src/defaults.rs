//! The value of every key the file leaves out, in one place, and `Default` impls for
//! the model's sections built from them (handy for tests in other crates).
//!
//! `examples/weir.toml` documents each of these; keep the two in step.

use std::num::NonZeroU32;
use std::time::Duration;

use crate::model::{
    AccessLog, AccessLogFormat, AddressFamilies, ClientLimits, ClientTimeouts, HttpPolicy,
    KeyExchangeGroup, Log, LogFormat, PassiveHealth, PoolDns, RelayMode, Runtime, TlsVersion,
    UnderscoreHeaders, UpstreamConnections, UpstreamTimeouts,
};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

pub(crate) const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) const ACCESS_LOG: bool = true;
pub(crate) const LOG_LEVEL: &str = "info";
pub(crate) const LOG_FORMAT: LogFormat = LogFormat::Text;
pub(crate) const ACCESS_LOG_FORMAT: AccessLogFormat = AccessLogFormat::Text;

pub(crate) const FORWARDED_HEADERS: bool = true;
pub(crate) const BACKLOG: u32 = 1024;

pub(crate) const CLIENT_MAX_CONNECTIONS: u32 = 10_000;
pub(crate) const MAX_HEADER_BYTES: u64 = 16 * KIB;
pub(crate) const MAX_HEADERS: u32 = 100;
pub(crate) const MAX_BODY_BYTES: u64 = 10 * MIB;
pub(crate) const REQUEST_BUFFER: u64 = 64 * KIB;
pub(crate) const RESPONSE_BUFFER: u64 = 256 * KIB;

pub(crate) const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
pub(crate) const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);
pub(crate) const BODY_TOTAL_TIMEOUT: Duration = Duration::from_secs(5 * 60);
pub(crate) const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
pub(crate) const TUNNEL_IDLE_TIMEOUT: Duration = Duration::from_secs(5 * 60);
/// An idle plain HTTP/1.1 client connection is parked after this long without a request.
/// Parking and waking cost about as much CPU as a short request (a new task, the socket
/// registered again): ten seconds keeps that off connections in use and saves most of
/// an idle connection's memory on those that wait for their timeout.
pub(crate) const PARK_IDLE: Duration = Duration::from_secs(10);
/// An idle client connection rests (gives up its task, keeps the runtime's registration
/// of its socket) after this long without a request. Waking it costs a new task and no
/// system call: one second keeps that off connections with requests back to back and
/// halves the memory of those that wait longer.
pub(crate) const REST_IDLE: Duration = Duration::from_secs(1);
pub(crate) const MIN_BODY_RATE: u64 = KIB;

pub(crate) const ALLOW_CONNECT: bool = false;
pub(crate) const ALLOW_TRACE: bool = false;
pub(crate) const UPGRADES: &[&str] = &["websocket"];
pub(crate) const UNDERSCORE_HEADERS: UnderscoreHeaders = UnderscoreHeaders::Drop;

pub(crate) const RETRIES: u32 = 2;
pub(crate) const FAIL_OPEN: bool = false;

pub(crate) const NODE_WEIGHT: NonZeroU32 = nonzero(1);
pub(crate) const NODE_MAX_CONNECTIONS: NonZeroU32 = nonzero(64);
pub(crate) const QUEUE_LENGTH: u32 = 1024;
pub(crate) const QUEUE_TIMEOUT: Duration = Duration::from_secs(5);
pub(crate) const FAIR_QUEUE: bool = true;
pub(crate) const LEAVE_QUEUE_ON_CLOSE: bool = true;
pub(crate) const UPSTREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
pub(crate) const MAX_TUNNELS: u32 = 64;

pub(crate) const DNS_TIMEOUT: Duration = Duration::from_secs(2);
pub(crate) const DNS_MIN_TTL: Duration = Duration::from_secs(1);
pub(crate) const DNS_MAX_TTL: Duration = Duration::from_secs(5 * 60);

pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
pub(crate) const RESPONSE_TIMEOUT: Duration = Duration::from_secs(60);
pub(crate) const UPSTREAM_WRITE_TIMEOUT: Duration = Duration::from_secs(30);

pub(crate) const HEALTH_METHOD: &str = "GET";
pub(crate) const HEALTH_PATH: &str = "/";
pub(crate) const HEALTH_EXPECT_STATUS: (u16, u16) = (200, 399);
pub(crate) const HEALTH_INTERVAL: Duration = Duration::from_secs(5);
pub(crate) const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);
pub(crate) const HEALTH_RISE: NonZeroU32 = nonzero(2);
pub(crate) const HEALTH_FALL: NonZeroU32 = nonzero(3);

pub(crate) const CONSECUTIVE_FAILURES: u32 = 5;
pub(crate) const BASE_EJECTION: Duration = Duration::from_secs(10);
pub(crate) const MAX_EJECTION: Duration = Duration::from_secs(5 * 60);
pub(crate) const MAX_EJECTED_PERCENT: u32 = 50;

pub(crate) const ORIGIN_KEEP_ALIVE: bool = true;

pub(crate) const TLS_VERSIONS: &[TlsVersion] = &[TlsVersion::Tls12, TlsVersion::Tls13];
/// `virtual_servers.NAME.tls.groups` when not given, in preference order; also the groups weir
/// offers nodes.
pub const TLS_GROUPS: &[KeyExchangeGroup] =
    &[KeyExchangeGroup::X25519, KeyExchangeGroup::Secp256r1];
/// `http/1.0` too, so `curl --http1.0` and other HTTP/1.0 clients that offer
/// only it are served rather than refused with `no_application_protocol`.
pub(crate) const TLS_ALPN: &[&str] = &["http/1.1", "http/1.0"];
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
pub(crate) const MAX_HANDSHAKES: NonZeroU32 = nonzero(1024);
pub(crate) const SESSION_TICKETS: bool = true;
pub(crate) const TICKET_ROTATION: Duration = Duration::from_secs(60 * 60);
pub(crate) const SESSION_CACHE_SIZE: u32 = 20_000;
pub(crate) const SESSION_CACHE_LIFETIME: Duration = Duration::from_secs(5 * 60);
pub(crate) const UPSTREAM_TLS_VERIFY: bool = true;
pub(crate) const UPSTREAM_SESSION_RESUMPTION: bool = true;

// --- traffic rules, limits, hashing, persistence (issue 14) ---
pub(crate) const REQUEST_ID_ENABLED: bool = true;
pub(crate) const REQUEST_ID_HEADER: &str = "X-Request-Id";
pub(crate) const REQUEST_ID_TRUST_INCOMING: bool = true;
pub(crate) const REQUEST_ID_TO_CLIENT: bool = false;
pub(crate) const REDIRECT_STATUS: u16 = 302;
pub(crate) const RESPOND_STATUS: u16 = 200;
pub(crate) const DENY_STATUS: u16 = 403;
pub(crate) const RATE_LIMIT_PER: Duration = Duration::from_secs(1);
pub(crate) const RATE_LIMIT_MAX_KEYS: u32 = 100_000;
pub(crate) const RATE_LIMIT_STATUS: u16 = 429;
pub(crate) const CONCURRENCY_LIMIT_STATUS: u16 = 503;
pub(crate) const LIMIT_RETRY_AFTER: Duration = Duration::from_secs(1);
pub(crate) const HASH_MAX_LOAD: f64 = 1.25;
pub(crate) const PERSISTENCE_COOKIE: &str = "WEIR_NODE";
pub(crate) const PERSISTENCE_HTTP_ONLY: bool = true;
pub(crate) const PERSISTENCE_PATH: &str = "/";
pub(crate) const PERSISTENCE_TIMEOUT: Duration = Duration::from_secs(30 * 60);
pub(crate) const PERSISTENCE_MAX_ENTRIES: u32 = 100_000;

impl Default for crate::model::RequestIdSettings {
    fn default() -> Self {
        Self {
            enabled: REQUEST_ID_ENABLED,
            header: REQUEST_ID_HEADER.to_owned(),
            trust_incoming: REQUEST_ID_TRUST_INCOMING,
            to_client: REQUEST_ID_TO_CLIENT,
        }
    }
}
// --- end issue 14 ---

impl Default for Runtime {
    fn default() -> Self {
        Self {
            threads: None,
            drain_timeout: DRAIN_TIMEOUT,
            upgrade_socket: None,
        }
    }
}

impl Default for Log {
    fn default() -> Self {
        Self {
            access_log: ACCESS_LOG,
            level: LOG_LEVEL.to_owned(),
            format: LOG_FORMAT,
        }
    }
}

impl Default for AccessLog {
    fn default() -> Self {
        Self {
            format: ACCESS_LOG_FORMAT,
            file: None,
        }
    }
}

impl Default for ClientLimits {
    fn default() -> Self {
        Self {
            max_connections: CLIENT_MAX_CONNECTIONS,
            max_header_bytes: MAX_HEADER_BYTES as usize,
            max_headers: MAX_HEADERS as usize,
            max_body_bytes: MAX_BODY_BYTES,
            request_buffer: REQUEST_BUFFER as usize,
            response_buffer: RESPONSE_BUFFER as usize,
            max_requests_per_connection: None,
            min_body_rate: MIN_BODY_RATE,
        }
    }
}

impl Default for ClientTimeouts {
    fn default() -> Self {
        Self {
            header_read: HEADER_READ_TIMEOUT,
            idle: IDLE_TIMEOUT,
            body_read: BODY_READ_TIMEOUT,
            body_total: BODY_TOTAL_TIMEOUT,
            write: WRITE_TIMEOUT,
            tunnel_idle: TUNNEL_IDLE_TIMEOUT,
            park_idle: PARK_IDLE,
            rest_idle: REST_IDLE,
        }
    }
}

impl Default for HttpPolicy {
    fn default() -> Self {
        Self {
            connect: ALLOW_CONNECT,
            trace: ALLOW_TRACE,
            upgrades: UPGRADES.iter().map(|name| (*name).to_owned()).collect(),
            underscore_headers: UNDERSCORE_HEADERS,
        }
    }
}

impl Default for UpstreamConnections {
    fn default() -> Self {
        Self {
            max_connections: NODE_MAX_CONNECTIONS,
            queue_length: QUEUE_LENGTH,
            queue_timeout: QUEUE_TIMEOUT,
            fair_queue: FAIR_QUEUE,
            leave_queue_on_close: LEAVE_QUEUE_ON_CLOSE,
            idle_timeout: UPSTREAM_IDLE_TIMEOUT,
            max_requests_per_connection: None,
            max_tunnels: MAX_TUNNELS,
        }
    }
}

impl Default for UpstreamTimeouts {
    fn default() -> Self {
        Self {
            connect: CONNECT_TIMEOUT,
            response: RESPONSE_TIMEOUT,
            write: UPSTREAM_WRITE_TIMEOUT,
        }
    }
}

impl Default for PassiveHealth {
    fn default() -> Self {
        Self {
            consecutive_failures: CONSECUTIVE_FAILURES,
            base_ejection: BASE_EJECTION,
            max_ejection: MAX_EJECTION,
            max_ejected_percent: MAX_EJECTED_PERCENT,
        }
    }
}

// Cache and compression (issue 12).

/// `virtual_servers.NAME.cache.size`: the bytes a virtual server's store holds (heads, bodies,
/// keys).
pub const CACHE_SIZE: u64 = 256 * MIB;
/// `virtual_servers.NAME.cache.max_object_size`: responses larger than this many bytes are not
/// stored.
pub const CACHE_MAX_OBJECT_SIZE: u64 = 8 * MIB;
pub(crate) const CACHE_HEURISTIC_PERCENT: u8 = 0;
pub(crate) const CACHE_HEURISTIC_MAX: Duration = Duration::from_secs(24 * 60 * 60);
pub(crate) const CACHE_STALE_WHILE_REVALIDATE: Duration = Duration::ZERO;
pub(crate) const CACHE_STALE_IF_ERROR: Duration = Duration::ZERO;
pub(crate) const CACHE_REQUEST_CACHE_CONTROL: bool = true;
pub(crate) const CACHE_COALESCE: bool = true;
pub(crate) const CACHE_COALESCE_TIMEOUT: Duration = Duration::from_secs(10);
pub(crate) const CACHE_COALESCE_MAX_WAITERS: u32 = 4096;
/// RFC 9213's field for every CDN-like cache; an operator may name its own first.
pub(crate) const CACHE_TARGETED_CACHE_CONTROL: &[&str] = &["cdn-cache-control"];

pub(crate) const COMPRESSION_MIN_SIZE: u64 = 1024;
pub(crate) const COMPRESSION_GZIP_LEVEL: u32 = 6;
pub(crate) const COMPRESSION_BROTLI_LEVEL: u32 = 4;
pub(crate) const COMPRESSION_ZSTD_LEVEL: i32 = 3;
/// Media types compressed by default: text and the text-like application types.
pub(crate) const COMPRESSION_CONTENT_TYPES: &[&str] = &[
    "text/*",
    "application/json",
    "application/javascript",
    "application/xml",
    "application/xhtml+xml",
    "application/rss+xml",
    "application/atom+xml",
    "application/manifest+json",
    "application/ld+json",
    "application/wasm",
    "image/svg+xml",
    "image/x-icon",
    "font/ttf",
    "font/otf",
];

impl Default for crate::cache::CacheRules {
    fn default() -> Self {
        Self {
            heuristic_percent: CACHE_HEURISTIC_PERCENT,
            heuristic_max: CACHE_HEURISTIC_MAX,
            stale_while_revalidate: CACHE_STALE_WHILE_REVALIDATE,
            stale_if_error: CACHE_STALE_IF_ERROR,
            set_cookie: crate::cache::SetCookieRule::Pass,
            request_cache_control: CACHE_REQUEST_CACHE_CONTROL,
            coalesce: CACHE_COALESCE,
            coalesce_timeout: CACHE_COALESCE_TIMEOUT,
            coalesce_max_waiters: CACHE_COALESCE_MAX_WAITERS,
            targeted_cache_control: CACHE_TARGETED_CACHE_CONTROL
                .iter()
                .map(|&name| name.to_owned())
                .collect(),
        }
    }
}

impl Default for crate::cache::Compression {
    fn default() -> Self {
        use crate::cache::CompressionAlgorithm;
        Self {
            algorithms: vec![
                CompressionAlgorithm::Zstd,
                CompressionAlgorithm::Brotli,
                CompressionAlgorithm::Gzip,
            ],
            min_size: COMPRESSION_MIN_SIZE,
            content_types: COMPRESSION_CONTENT_TYPES
                .iter()
                .map(|t| (*t).to_owned())
                .collect(),
            gzip_level: COMPRESSION_GZIP_LEVEL,
            brotli_level: COMPRESSION_BROTLI_LEVEL,
            zstd_level: COMPRESSION_ZSTD_LEVEL,
        }
    }
}

// End of cache and compression.

// HTTP/2 (issue 11): towards clients, then towards nodes.

pub(crate) const H2_CLEARTEXT: bool = false;
/// As nginx and HAProxy: enough for a browser page, small enough to bound a connection.
pub(crate) const H2_MAX_CONCURRENT_STREAMS: u32 = 100;
pub(crate) const H2_MAX_HEADER_LIST_SIZE: u64 = 64 * 1024;
/// The protocol's default: the HPACK table a client may make weir keep.
pub(crate) const H2_HEADER_TABLE_SIZE: u64 = 4096;
/// Request body bytes a stream may send before weir reads them.
pub(crate) const H2_INITIAL_STREAM_WINDOW: u64 = 256 * 1024;
pub(crate) const H2_INITIAL_CONNECTION_WINDOW: u64 = 1024 * 1024;
/// The protocol's minimum and default.
pub(crate) const H2_MAX_FRAME_SIZE: u64 = 16 * 1024;
pub(crate) const H2_PING_INTERVAL: Duration = Duration::from_secs(30);
pub(crate) const H2_PING_TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) const UPSTREAM_H2_MAX_CONCURRENT_STREAMS: u32 = 100;
/// What a node may send on a stream before weir reads it: held in weir for the client of
/// that stream, on top of `response_buffer` and the client's send buffer, so it counts in a
/// client connection's memory once per stream (docs/design/http2.md, "Defences"). As the
/// client side's own stream window: ample for a node on the same network (256 KiB per
/// round trip is 2 GB/s at 0.125 ms).
pub(crate) const UPSTREAM_H2_INITIAL_STREAM_WINDOW: u64 = 256 * 1024;

/// The connection window towards a node when the file sets none: room for every stream's
/// own window at once (at most HTTP/2's largest window). The stream windows already bound
/// what weir holds; a smaller connection window bounds nothing more, and lets a few streams
/// whose clients stopped reading stall every other stream of the connection.
pub(crate) const fn upstream_h2_connection_window(streams: u32, stream_window: u32) -> u64 {
    let room = streams as u64 * stream_window as u64;
    let most = (1 << 31) - 1;
    if room < 64 * KIB {
        64 * KIB
    } else if room > most {
        most
    } else {
        room
    }
}
/// Zero: no PING to a node after the first (which tells its SETTINGS are applied). A
/// periodic PING is what gRPC servers in Go punish (see `examples/weir.toml`), and
/// neither HAProxy, nginx nor Envoy pings its nodes by default.
pub(crate) const UPSTREAM_H2_PING_INTERVAL: Duration = Duration::ZERO;
pub(crate) const UPSTREAM_H2_PING_TIMEOUT: Duration = Duration::from_secs(5);

// End of HTTP/2.

impl Default for crate::model::Http2 {
    fn default() -> crate::model::Http2 {
        crate::model::Http2 {
            cleartext: H2_CLEARTEXT,
            max_concurrent_streams: H2_MAX_CONCURRENT_STREAMS,
            max_header_list_size: H2_MAX_HEADER_LIST_SIZE as u32,
            header_table_size: H2_HEADER_TABLE_SIZE as u32,
            initial_stream_window: H2_INITIAL_STREAM_WINDOW as u32,
            initial_connection_window: H2_INITIAL_CONNECTION_WINDOW as u32,
            max_frame_size: H2_MAX_FRAME_SIZE as u32,
            ping_interval: H2_PING_INTERVAL,
            ping_timeout: H2_PING_TIMEOUT,
            codec: crate::http2::Http2Codec::default(),
        }
    }
}

impl Default for crate::model::UpstreamHttp2 {
    fn default() -> crate::model::UpstreamHttp2 {
        crate::model::UpstreamHttp2 {
            max_concurrent_streams: UPSTREAM_H2_MAX_CONCURRENT_STREAMS,
            initial_stream_window: UPSTREAM_H2_INITIAL_STREAM_WINDOW as u32,
            initial_connection_window: upstream_h2_connection_window(
                UPSTREAM_H2_MAX_CONCURRENT_STREAMS,
                UPSTREAM_H2_INITIAL_STREAM_WINDOW as u32,
            ) as u32,
            ping_interval: UPSTREAM_H2_PING_INTERVAL,
            ping_timeout: UPSTREAM_H2_PING_TIMEOUT,
            codec: crate::http2::UpstreamHttp2Codec::default(),
        }
    }
}

/// For the non-zero constants above; evaluated at compile time, so a zero fails the build.
const fn nonzero(value: u32) -> NonZeroU32 {
    match NonZeroU32::new(value) {
        Some(value) => value,
        None => panic!("a default that must be non-zero is zero"),
    }
}

// Layer 4 (issue 13).
/// read/write for messages (cheapest per small exchange), splice(2) once a flow carries bulk
/// (less CPU per MiB than copying for one-way bulk, through pipes of [`TCP_PIPE`]): both
/// measured in BENCHMARKING.md ("Layer 4").
pub(crate) const TCP_RELAY: RelayMode = RelayMode::Auto;
pub(crate) const TCP_BUFFER: u64 = 16 * KIB;
/// Half the kernel's default pipe (64 KiB). Through default pipes the splice relay cost more
/// CPU per MiB than the copy relay. 32 KiB was the cheapest size for a one-way download
/// (wrk), where larger pipes drained the node's socket at each read and slept more; 256 KiB
/// was cheaper for 1 MiB echoed both ways at once (BENCHMARKING.md, "Layer 4", 2026-12-04).
pub(crate) const TCP_PIPE: u64 = 32 * KIB;
pub(crate) const TCP_IDLE_TIMEOUT: Duration = Duration::from_secs(5 * 60);
/// Long enough for a ClientHello over a slow, lossy path (a few retransmissions of its first
/// segment); a port that also serves server-first protocols wants less.
pub(crate) const TCP_HELLO_TIMEOUT: Duration = Duration::from_secs(10);
pub(crate) const PROXY_PROTOCOL_TIMEOUT: Duration = Duration::from_secs(5);

impl Default for PoolDns {
    fn default() -> Self {
        PoolDns {
            servers: Vec::new(),
            timeout: DNS_TIMEOUT,
            min_ttl: DNS_MIN_TTL,
            max_ttl: DNS_MAX_TTL,
            families: AddressFamilies::Both,
        }
    }
}
