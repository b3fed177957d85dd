//! The validated model of layer 4 (issue 13): TCP and TLS virtual servers' sessions, TLS
//! passthrough routed by SNI and ALPN, and the PROXY protocol accepted from trusted clients
//! and sent to nodes. Validation is in `validate/layer4.rs`, defaults in `defaults.rs`.

use std::time::Duration;

use super::{Cidr, PoolId};

/// How a TCP virtual server moves bytes between a client and a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelayMode {
    /// Through a buffer in user space (always, when either end is TLS).
    Copy,
    /// `splice(2)` through a kernel pipe when both ends are plain TCP (Linux).
    Splice,
    /// Read and write for messages; a direction that carries bulk (a read fills the buffer)
    /// moves to `splice(2)`. Plain TCP on both ends only; else as `Copy`.
    Auto,
}

/// A TCP (or TLS-terminated TCP) virtual server's session settings.
#[derive(Debug, Clone, PartialEq)]
pub struct TcpSettings {
    /// How bytes move when both ends are plain TCP.
    pub relay: RelayMode,
    /// Per-direction buffer of the copy relay (and of `auto` until a direction moves to
    /// splice).
    pub buffer: usize,
    /// Capacity asked of each kernel pipe the splice relay uses (`splice`, and `auto`'s
    /// bulk directions): the most one `splice(2)` moves.
    pub pipe: usize,
    /// A session ends when no byte moved either way for this long.
    pub idle_timeout: Duration,
    /// With passthrough rules: how long a client has to send its ClientHello. A client that
    /// sent nothing by then waits for the server to speak first (SMTP, MySQL) and goes to
    /// the virtual server's pool; one that sent part of a ClientHello is closed.
    pub hello_timeout: Duration,
}

/// PROXY protocol accepted from clients in `trusted` networks: their header's source
/// address becomes the client address. Others' bytes are data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptProxy {
    /// The networks whose connections must start with a PROXY header.
    pub trusted: Vec<Cidr>,
    /// How long a trusted client has to send its whole header.
    pub timeout: Duration,
}

/// A TLS passthrough rule: a ClientHello whose server name matches one of `server_names`
/// (and, when `alpn` is not empty, that offers one of those protocols) is passed, still
/// encrypted, to `pool`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PassthroughRoute {
    /// Lower-cased names; `*.example.com` matches any subdomain.
    pub server_names: Vec<String>,
    /// ALPN protocols, one of which the ClientHello must offer; empty: any (or none).
    pub alpn: Vec<String>,
    /// The pool the matching connections are passed to.
    pub pool: PoolId,
}

/// The PROXY protocol version weir sends to a pool's nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyVersion {
    /// The text form (`PROXY TCP4 ...\r\n`).
    V1,
    /// The binary form (12-byte signature, then addresses).
    V2,
}

impl Default for TcpSettings {
    /// The settings a `[virtual_servers.NAME.tcp]` table with no keys gives (and TLS
    /// passthrough on an HTTPS virtual server uses).
    fn default() -> Self {
        TcpSettings {
            relay: crate::defaults::TCP_RELAY,
            buffer: crate::defaults::TCP_BUFFER as usize,
            pipe: crate::defaults::TCP_PIPE as usize,
            idle_timeout: crate::defaults::TCP_IDLE_TIMEOUT,
            hello_timeout: crate::defaults::TCP_HELLO_TIMEOUT,
        }
    }
}

impl PassthroughRoute {
    /// Whether a ClientHello with this server name and ALPN list matches.
    pub fn matches(&self, server_name: Option<&str>, alpn: &[Vec<u8>]) -> bool {
        let Some(name) = server_name else {
            return false;
        };
        let name_matches =
            self.server_names
                .iter()
                .any(|pattern| match pattern.strip_prefix("*.") {
                    Some(parent) => name
                        .strip_suffix(parent)
                        .is_some_and(|sub| sub.len() > 1 && sub.ends_with('.')),
                    None => pattern == name,
                });
        name_matches
            && (self.alpn.is_empty()
                || alpn
                    .iter()
                    .any(|offered| self.alpn.iter().any(|want| want.as_bytes() == &offered[..])))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passthrough_matches_names_wildcards_and_alpn() {
        let route = PassthroughRoute {
            server_names: vec!["db.example".into(), "*.internal".into()],
            alpn: Vec::new(),
            pool: PoolId(0),
        };
        assert!(route.matches(Some("db.example"), &[]));
        assert!(route.matches(Some("a.b.internal"), &[]));
        assert!(!route.matches(Some("internal"), &[]));
        assert!(!route.matches(Some("xinternal"), &[]));
        assert!(!route.matches(Some("db.example.com"), &[]));
        assert!(!route.matches(None, &[]));
        let h2 = PassthroughRoute {
            alpn: vec!["h2".into()],
            ..route
        };
        assert!(h2.matches(Some("db.example"), &[b"http/1.1".to_vec(), b"h2".to_vec()]));
        assert!(!h2.matches(Some("db.example"), &[b"http/1.1".to_vec()]));
        assert!(!h2.matches(Some("db.example"), &[]));
    }
}
