//! HTTP/2 (issue 11): the `[virtual_servers.NAME.http2]` table (h2c prior
//! knowledge and the server's limits towards clients), a pool's `protocol`
//! and its `[pools.NAME.http2]` table (multiplexed connections to nodes):
//! the validated model. The tables as written are in `schema.rs` (HTTP/2
//! block), validation in `validate/http2.rs`, defaults in `defaults.rs`.

use std::time::Duration;

/// HTTP/2 towards the clients of one virtual server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Http2 {
    /// h2c with prior knowledge on a plain listener (a connection that starts
    /// with the HTTP/2 preface is served as HTTP/2; others as HTTP/1.1).
    pub cleartext: bool,
    /// SETTINGS_MAX_CONCURRENT_STREAMS: streams one client may have open.
    pub max_concurrent_streams: u32,
    /// SETTINGS_MAX_HEADER_LIST_SIZE: decoded bytes of one header list.
    pub max_header_list_size: u32,
    /// SETTINGS_HEADER_TABLE_SIZE: the HPACK table the client may make us keep.
    pub header_table_size: u32,
    /// SETTINGS_INITIAL_WINDOW_SIZE: request body bytes a stream may send unread.
    pub initial_stream_window: u32,
    /// The connection's receive window (all streams together).
    pub initial_connection_window: u32,
    /// SETTINGS_MAX_FRAME_SIZE we accept.
    pub max_frame_size: u32,
    /// A PING is sent after this long without a frame from the client.
    pub ping_interval: Duration,
    /// ... and the connection closed if its answer takes longer than this.
    pub ping_timeout: Duration,
    /// Which HTTP/2 implementation serves the clients.
    pub codec: Http2Codec,
}

/// The HTTP/2 implementation that serves a virtual server's clients: weir's
/// own, with the `h2` crate kept beside it while it is new
/// (`docs/design/http2.md`, "Step 5").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Http2Codec {
    /// The `h2` crate.
    H2,
    /// weir's own (`weir_http::h2server`).
    #[default]
    Weir,
}

/// The protocol a pool speaks to its nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamProtocol {
    /// HTTP/1.1, one request per connection at a time.
    Http1,
    /// HTTP/2 over TLS (ALPN `h2`); needs the pool's `[tls]`.
    H2,
    /// HTTP/2 over cleartext TCP with prior knowledge.
    H2c,
}

/// HTTP/2 towards the nodes of one pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamHttp2 {
    /// Streams weir opens at once on one connection (lowered to the node's own limit).
    pub max_concurrent_streams: u32,
    /// Response bytes one stream may receive before weir reads them (flow control).
    pub initial_stream_window: u32,
    /// ... and all streams of one connection together.
    pub initial_connection_window: u32,
    /// A PING is sent on a connection after this long without a frame from the node.
    pub ping_interval: Duration,
    /// ... and the connection is replaced if the answer takes longer than this.
    pub ping_timeout: Duration,
    /// Which HTTP/2 implementation carries the pool's connections
    /// (`docs/design/http2.md`, "The node side on weir's codec").
    pub codec: UpstreamHttp2Codec,
}

/// The HTTP/2 implementation of a pool's connections to its nodes: the `h2`
/// crate, or weir's own client (`weir_http::h2client`), kept opt-in while it is new.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UpstreamHttp2Codec {
    /// The `h2` crate.
    H2,
    /// weir's own (`weir_http::h2client`).
    #[default]
    Weir,
}
