//! Checks of the layer 4 keys: the protocol and its TLS table, `[tcp]`, `[proxy_protocol]`,
//! `[[passthrough]]`, keys that only HTTP uses, and pools that send the PROXY protocol.

use std::collections::HashMap;

use super::{Checker, KIB, MIB, Zero, values};
use crate::defaults;
use crate::error::{KeyPath, Problem};
use crate::model::{AcceptProxy, PassthroughRoute, RelayMode, TcpSettings};
use crate::model::{Pool, PoolId, Protocol, ServerTls, VirtualServer};
use crate::schema::VirtualServerTable;

impl Checker {
    /// The protocol, and the TLS termination it needs (https, tls) or forbids (http, tcp).
    pub(super) fn protocol_and_tls(
        &mut self,
        path: &KeyPath,
        table: &VirtualServerTable,
    ) -> (Protocol, Option<ServerTls>) {
        let protocol = self.choice(
            &path.key("protocol"),
            table.protocol.as_deref(),
            Protocol::Http,
            &[
                ("http", Protocol::Http),
                ("https", Protocol::Https),
                ("tcp", Protocol::Tcp),
                ("tls", Protocol::Tls),
            ],
        );
        let tls_path = path.key("tls");
        let tls = match (protocol.terminates_tls(), &table.tls) {
            (true, Some(tls_table)) => {
                let mut tls = self.server_tls(&tls_path, tls_table, protocol == Protocol::Tls);
                if protocol == Protocol::Tls && tls_table.alpn.is_none() {
                    // TLS-terminated TCP speaks no protocol weir knows of: offer none.
                    tls.alpn.clear();
                }
                Some(tls)
            }
            (true, None) => {
                self.report(
                    &tls_path,
                    "missing required table: protocol = \"https\" or \"tls\" needs a [tls] table with certificates",
                );
                None
            }
            (false, Some(_)) => {
                self.report(
                    &tls_path,
                    "a tls table needs protocol = \"https\" or \"tls\" on this virtual server",
                );
                None
            }
            (false, None) => None,
        };
        if protocol.is_layer4() {
            self.layer4_http_keys(path, table);
        }
        (protocol, tls)
    }

    /// Keys a TCP or TLS virtual server would silently ignore are errors.
    fn layer4_http_keys(&mut self, path: &KeyPath, table: &VirtualServerTable) {
        let limits = table.limits.as_ref();
        let set = [
            ("routes", !table.routes.is_empty()),
            ("forwarded_headers", table.forwarded_headers.is_some()),
            ("response_headers", table.response_headers.is_some()),
            ("cache", table.cache.is_some()),
            ("compression", table.compression.is_some()),
            ("timeouts", table.timeouts.is_some()),
            ("http", table.http.is_some()),
            ("http2", table.http2.is_some()),
            ("rules", !table.rules.is_empty()),
            ("request_id", table.request_id.is_some()),
            ("client_address", table.client_address.is_some()),
            ("rate_limits", table.rate_limits.is_some()),
            ("concurrency_limits", table.concurrency_limits.is_some()),
            ("client_connections", table.client_connections.is_some()),
            (
                "limits.min_body_rate",
                limits.is_some_and(|l| l.min_body_rate.is_some()),
            ),
            (
                "limits.max_header_bytes",
                limits.is_some_and(|l| l.max_header_bytes.is_some()),
            ),
            (
                "limits.max_headers",
                limits.is_some_and(|l| l.max_headers.is_some()),
            ),
            (
                "limits.max_body_bytes",
                limits.is_some_and(|l| l.max_body_bytes.is_some()),
            ),
            (
                "limits.request_buffer",
                limits.is_some_and(|l| l.request_buffer.is_some()),
            ),
            (
                "limits.response_buffer",
                limits.is_some_and(|l| l.response_buffer.is_some()),
            ),
            (
                "limits.max_requests_per_connection",
                limits.is_some_and(|l| l.max_requests_per_connection.is_some()),
            ),
        ];
        for (key, present) in set {
            if present {
                let key_path = key
                    .split('.')
                    .fold(path.clone(), |path, part| path.key(part));
                self.report(
                    &key_path,
                    "an HTTP setting; a tcp or tls virtual server does not use it (the session's idle timeout is tcp.idle_timeout)",
                );
            }
        }
    }

    /// `[tcp]`: present exactly for layer 4 virtual servers (defaults when absent).
    pub(super) fn tcp_settings(
        &mut self,
        path: &KeyPath,
        protocol: Protocol,
        table: &VirtualServerTable,
    ) -> Option<TcpSettings> {
        let path = path.key("tcp");
        let tcp = table.tcp.as_ref();
        if !protocol.is_layer4() {
            if tcp.is_some() {
                self.report(&path, "a tcp table needs protocol = \"tcp\" or \"tls\"");
            }
            return None;
        }
        Some(TcpSettings {
            relay: self.choice(
                &path.key("relay"),
                tcp.and_then(|t| t.relay.as_deref()),
                defaults::TCP_RELAY,
                &[
                    ("auto", RelayMode::Auto),
                    ("splice", RelayMode::Splice),
                    ("copy", RelayMode::Copy),
                ],
            ),
            buffer: self.size_usize(
                &path.key("buffer"),
                tcp.and_then(|t| t.buffer.as_ref()),
                defaults::TCP_BUFFER,
                KIB..=16 * MIB,
            ),
            // The kernel's limit for an unprivileged process (`fs.pipe-max-size`) is 1 MiB
            // unless raised; a page is the least a pipe holds.
            pipe: self.size_usize(
                &path.key("pipe"),
                tcp.and_then(|t| t.pipe.as_ref()),
                defaults::TCP_PIPE,
                4 * KIB..=MIB,
            ),
            idle_timeout: self.duration(
                &path.key("idle_timeout"),
                tcp.and_then(|t| t.idle_timeout.as_ref()),
                defaults::TCP_IDLE_TIMEOUT,
                Zero::Rejected,
            ),
            hello_timeout: self.duration(
                &path.key("hello_timeout"),
                tcp.and_then(|t| t.hello_timeout.as_ref()),
                defaults::TCP_HELLO_TIMEOUT,
                Zero::Rejected,
            ),
        })
    }

    /// `[proxy_protocol]`: the networks trusted to send a PROXY header.
    pub(super) fn accept_proxy(
        &mut self,
        path: &KeyPath,
        table: &VirtualServerTable,
    ) -> Option<AcceptProxy> {
        let table = table.proxy_protocol.as_ref()?;
        let trusted_path = path.key("trusted");
        let trusted: Vec<_> = table
            .trusted
            .iter()
            .flatten()
            .enumerate()
            .filter_map(|(index, text)| {
                values::cidr(text)
                    .map_err(|message| self.report(&trusted_path.index(index), message))
                    .ok()
            })
            .collect();
        if table.trusted.as_ref().is_none_or(Vec::is_empty) {
            self.report(
                &trusted_path,
                "required: the networks allowed to send a PROXY header, such as [\"10.0.0.0/8\"]",
            );
        }
        let timeout = self.duration(
            &path.key("timeout"),
            table.timeout.as_ref(),
            defaults::PROXY_PROTOCOL_TIMEOUT,
            Zero::Rejected,
        );
        Some(AcceptProxy { trusted, timeout })
    }

    /// `[[passthrough]]`: on tcp, tls and https virtual servers.
    pub(super) fn passthrough(
        &mut self,
        path: &KeyPath,
        protocol: Protocol,
        table: &VirtualServerTable,
        pool_ids: &HashMap<&str, PoolId>,
    ) -> Vec<PassthroughRoute> {
        let path = path.key("passthrough");
        if protocol == Protocol::Http && !table.passthrough.is_empty() {
            self.report(
                &path,
                "TLS passthrough needs protocol = \"tcp\", \"tls\" or \"https\"",
            );
            return Vec::new();
        }
        let mut routes = Vec::new();
        for (index, rule) in table.passthrough.iter().enumerate() {
            let path = path.index(index);
            let names_path = path.key("server_names");
            let server_names: Vec<String> = rule
                .server_names
                .iter()
                .flatten()
                .enumerate()
                .filter_map(|(n, name)| {
                    passthrough_name(name)
                        .map_err(|message| self.report(&names_path.index(n), message))
                        .ok()
                })
                .collect();
            if rule.server_names.as_ref().is_none_or(Vec::is_empty) {
                self.report(&names_path, "required: at least one server name");
            }
            let alpn = rule.alpn.clone().unwrap_or_default();
            if alpn.iter().any(|p| p.is_empty() || p.len() > 255) {
                self.report(&path.key("alpn"), "ALPN names are 1 to 255 bytes");
            }
            let pool = self.pool_reference(&path.key("pool"), rule.pool.as_deref(), pool_ids);
            routes.push(PassthroughRoute {
                server_names,
                alpn,
                pool: pool.unwrap_or(super::UNRESOLVED),
            });
        }
        routes
    }

    /// A pool that sends the PROXY protocol must only serve layer 4 sessions: on pooled
    /// HTTP connections one header would name one client for every later request.
    pub(super) fn proxy_protocol_pools(
        &mut self,
        path: &KeyPath,
        pools: &[Pool],
        servers: &[VirtualServer],
    ) {
        let mut problems = Vec::new();
        for (index, pool) in pools.iter().enumerate() {
            if pool.proxy_protocol.is_none() {
                continue;
            }
            let id = PoolId(index);
            // The default pool, a route's or a rule's: each carries HTTP requests on
            // pooled connections, which no PROXY header could describe.
            let http_user = servers.iter().find(|server| {
                !server.protocol.is_layer4() && server.pools().any(|used| used == id)
            });
            if let Some(server) = http_user {
                problems.push(Problem {
                    path: path.key(&pool.name).key("proxy_protocol"),
                    message: format!(
                        "HTTP virtual server \"{}\" uses this pool; the PROXY protocol is sent only \
                         on TCP sessions (HTTP carries the client in X-Forwarded-For)",
                        server.name
                    ),
                    because: None,
                });
            }
        }
        self.problems.extend(problems);
    }
}

#[cfg(test)]
#[path = "layer4_tests.rs"]
mod tests;

/// A passthrough rule's server name: a host name as routes take it, never an IP address,
/// which SNI does not carry (RFC 6066 §3): such a rule could never match.
fn passthrough_name(text: &str) -> Result<String, String> {
    let host = values::route_host(text)?;
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if bare.parse::<std::net::IpAddr>().is_ok() {
        return Err(format!(
            "\"{text}\" is an IP address, which no ClientHello names (SNI carries host names \
             only, RFC 6066 §3); route clients that connect by address with the virtual \
             server's own pool"
        ));
    }
    Ok(host)
}
