//! What an origin is told at start: its name, where it listens and how it treats connections.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use crate::tls::OriginTls;

/// Settings of one [`Origin`](crate::Origin).
///
/// Build it with [`OriginOptions::new`] or with struct-update syntax over
/// [`OriginOptions::default`]; every field is public.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OriginOptions {
    /// Sent in every response as `X-Origin: <name>` and in the `/` body.
    pub name: String,
    /// Address to bind; port 0 picks a free port (see [`Origin::local_addr`](crate::Origin::local_addr)).
    pub listen: SocketAddr,
    /// At most this many connections open at once. Past the cap a new connection is accepted
    /// and reset at once (SO_LINGER 0), the way an overloaded Apache refuses, and counted in
    /// `connections_refused`. `None`: no cap.
    pub max_connections: Option<u32>,
    /// `false`: every response carries `Connection: close` and the connection then closes.
    pub keep_alive: bool,
    /// A connection that sends nothing (or reads nothing) for this long is closed.
    pub idle_timeout: Duration,
    /// Bytes each open connection holds allocated and touched, to model a server whose memory
    /// grows with its connections. 0 (the default) holds nothing.
    pub per_connection_memory: usize,
    /// What the origin speaks: HTTP/1.1 (the default) or raw TCP echo.
    pub mode: OriginMode,
    /// `Some`: HTTPS — every connection starts with a TLS handshake (HTTP mode only).
    /// `None` (the default): plain TCP.
    pub tls: Option<OriginTls>,
}

/// What an origin speaks on its connections.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OriginMode {
    /// The HTTP/1.1 server with its routes.
    #[default]
    Http,
    /// A raw TCP echo server (the L4 benchmarks): every byte read is written back, until the
    /// client closes (answered with FIN), `idle_timeout` passes with nothing read, or shutdown.
    /// `keep_alive` does not apply; the cap, `per_connection_memory` and the connection
    /// counters do, and `bytes_echoed` counts what was written back.
    Echo,
}

impl OriginOptions {
    /// Default options with the given name and listen address.
    pub fn new(name: impl Into<String>, listen: SocketAddr) -> OriginOptions {
        OriginOptions {
            name: name.into(),
            listen,
            ..OriginOptions::default()
        }
    }
}

impl Default for OriginOptions {
    /// Name `origin`, `127.0.0.1:0`, no connection cap, keep-alive on, 60 s idle timeout,
    /// no per-connection memory, HTTP, no TLS.
    fn default() -> OriginOptions {
        OriginOptions {
            name: "origin".to_owned(),
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            max_connections: None,
            keep_alive: true,
            idle_timeout: Duration::from_secs(60),
            per_connection_memory: 0,
            mode: OriginMode::Http,
            tls: None,
        }
    }
}
