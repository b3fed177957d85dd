//! Pools: nodes, connection pool, timeouts and health monitors.

use std::net::SocketAddr;
use std::num::NonZeroU32;

use super::values::{self, show_duration};
use super::{Checker, Zero};
use crate::defaults;
use crate::error::KeyPath;
use crate::model::{
    AddressFamilies, Algorithm, HealthCheckKind, HealthMonitor, NamedNode, Node, NodeMode,
    PassiveHealth, Pool, PoolDns, PoolId, ProxyVersion, UpstreamConnections, UpstreamTimeouts,
};
use crate::schema::{
    ConnectionsTable, DnsTable, HealthTable, NodeTable, PassiveHealthTable, PoolTable, StatusValue,
    UpstreamTimeoutsTable,
};

impl Checker {
    pub(super) fn pool(
        &mut self,
        path: &KeyPath,
        id: PoolId,
        name: &str,
        table: &PoolTable,
    ) -> Pool {
        self.name(path, name);
        let algorithm = self.choice(
            &path.key("algorithm"),
            table.algorithm.as_deref(),
            Algorithm::RoundRobin,
            &[
                ("round_robin", Algorithm::RoundRobin),
                ("weighted_round_robin", Algorithm::WeightedRoundRobin),
                ("least_connections", Algorithm::LeastConnections),
                ("perceptive", Algorithm::Perceptive),
                ("consistent_hash", Algorithm::ConsistentHash),
            ],
        );
        let (nodes, names) = self.nodes(&path.key("nodes"), id, table.nodes.as_deref());
        Pool {
            name: name.to_owned(),
            nodes,
            names,
            dns: self.pool_dns(&path.key("dns"), table.dns.as_ref()),
            algorithm,
            connections: self.connections(&path.key("connections"), table.connections.as_ref()),
            timeouts: self.upstream_timeouts(&path.key("timeouts"), table.timeouts.as_ref()),
            retries: self.count(
                &path.key("retries"),
                table.retries,
                defaults::RETRIES,
                0..=100,
            ),
            health: table
                .health
                .as_ref()
                .map(|health| self.health(&path.key("health"), health)),
            passive_health: self
                .passive_health(&path.key("passive_health"), table.passive_health.as_ref()),
            fail_open: table.fail_open.unwrap_or(defaults::FAIL_OPEN),
            proxy_protocol: self.choice(
                &path.key("proxy_protocol"),
                table.proxy_protocol.as_deref(),
                None,
                &[
                    ("v1", Some(ProxyVersion::V1)),
                    ("v2", Some(ProxyVersion::V2)),
                ],
            ),
            tls: table
                .tls
                .as_ref()
                .map(|tls| self.upstream_tls(&path.key("tls"), tls)),
            protocol: self.upstream_protocol(
                &path.key("protocol"),
                table.protocol.as_deref(),
                table.tls.is_some(),
            ),
            http2: self.upstream_http2(&path.key("http2"), table.http2.as_ref()),
            hash: self.hash_settings(&path.key("hash"), algorithm, table.hash.as_ref()),
            persistence: table
                .persistence
                .as_ref()
                .and_then(|table| self.persistence(&path.key("persistence"), table)),
        }
    }

    pub(super) fn nodes(
        &mut self,
        path: &KeyPath,
        pool: PoolId,
        nodes: Option<&[NodeTable]>,
    ) -> (Vec<Node>, Vec<NamedNode>) {
        let nodes = nodes.unwrap_or_default();
        if nodes.is_empty() {
            self.report(
                path,
                "a pool needs at least one node, like nodes = [{ address = \"127.0.0.1:8081\" }]",
            );
        }
        let mut seen: Vec<(SocketAddr, usize)> = Vec::new();
        let mut result = Vec::new();
        let mut names: Vec<(NamedNode, usize)> = Vec::new();
        for (index, node) in nodes.iter().enumerate() {
            let node_path = path.index(index);
            let weight = self.nonzero(
                &node_path.key("weight"),
                node.weight,
                defaults::NODE_WEIGHT,
                1..=10_000,
            );
            let state = self.choice(
                &node_path.key("state"),
                node.state.as_deref(),
                NodeMode::Active,
                &[
                    ("active", NodeMode::Active),
                    ("draining", NodeMode::Draining),
                    ("disabled", NodeMode::Disabled),
                ],
            );
            if let Some(service) = &node.srv {
                let srv_path = node_path.key("srv");
                if node.address.is_some() {
                    self.report(&srv_path, "give a node either address or srv, not both");
                } else if let Some(named) = self.service_node(&srv_path, service, weight, state) {
                    self.named_node(&srv_path, named, index, &mut names);
                }
                continue;
            }
            let address_path = node_path.key("address");
            let Some(text) = &node.address else {
                self.report(&address_path, "missing required key: the node's IP:port");
                continue;
            };
            let address = match values::socket_addr(text) {
                Ok(address) => address,
                Err(message) => {
                    match values::host_port(text) {
                        Some(Ok((host, port))) => {
                            let named = NamedNode {
                                host,
                                port,
                                srv: false,
                                weight,
                                state,
                                key: address_path.clone(),
                                line: None,
                            };
                            self.named_node(&address_path, named, index, &mut names);
                        }
                        Some(Err(message)) => self.report(&address_path, message),
                        None => self.report(&address_path, message),
                    }
                    continue;
                }
            };
            if address.port() == 0 {
                self.report(&address_path, "a node's port must not be 0");
            } else if address.ip().is_unspecified() {
                self.report(
                    &address_path,
                    format!(
                        "{} is not an address a node can be reached at",
                        address.ip()
                    ),
                );
            } else if let Some((_, earlier)) = seen.iter().find(|(other, _)| *other == address) {
                self.report(
                    &address_path,
                    format!("duplicate node: nodes[{earlier}] has the same address"),
                );
            } else {
                seen.push((address, index));
                self.nodes.push((pool, address, address_path));
            }
            result.push(Node {
                address,
                weight,
                state,
                name: None,
            });
        }
        (result, names.into_iter().map(|(named, _)| named).collect())
    }

    /// A node given as a service (`srv`), whose SRV records give the nodes.
    fn service_node(
        &mut self,
        path: &KeyPath,
        service: &str,
        weight: NonZeroU32,
        state: NodeMode,
    ) -> Option<NamedNode> {
        match values::service_name(service) {
            Ok(host) => Some(NamedNode {
                host,
                port: 0,
                srv: true,
                weight,
                state,
                key: path.clone(),
                line: None,
            }),
            Err(message) => {
                self.report(path, message);
                None
            }
        }
    }

    /// A node given by name: a port that is not 0, and no name given twice.
    fn named_node(
        &mut self,
        path: &KeyPath,
        named: NamedNode,
        index: usize,
        names: &mut Vec<(NamedNode, usize)>,
    ) {
        if named.port == 0 && !named.srv {
            self.report(path, "a node's port must not be 0");
        } else if let Some((_, earlier)) = names.iter().find(|(other, _)| {
            (&other.host, other.port, other.srv) == (&named.host, named.port, named.srv)
        }) {
            self.report(
                path,
                format!("duplicate node: nodes[{earlier}] has the same name and port"),
            );
        } else {
            names.push((named, index));
        }
    }

    /// `[pools.NAME.dns]`: the resolver's servers and the bounds on re-resolution.
    fn pool_dns(&mut self, path: &KeyPath, table: Option<&DnsTable>) -> PoolDns {
        let Some(table) = table else {
            return PoolDns::default();
        };
        let defaults = PoolDns::default();
        let mut servers = Vec::new();
        for (index, text) in table.servers.iter().flatten().enumerate() {
            // A name server is an IP address, with port 53 when none is given.
            let parsed = text
                .parse::<std::net::IpAddr>()
                .map(|ip| SocketAddr::new(ip, 53))
                .or_else(|_| values::socket_addr(text));
            match parsed {
                Ok(address) if address.port() != 0 => servers.push(address),
                Ok(_) => self.report(&path.key("servers").index(index), "the port must not be 0"),
                Err(message) => self.report(&path.key("servers").index(index), message),
            }
        }
        let min_ttl = self.duration(
            &path.key("min_ttl"),
            table.min_ttl.as_ref(),
            defaults.min_ttl,
            Zero::Rejected,
        );
        let max_ttl = self.duration(
            &path.key("max_ttl"),
            table.max_ttl.as_ref(),
            defaults.max_ttl,
            Zero::Rejected,
        );
        if max_ttl < min_ttl {
            self.report(
                &path.key("max_ttl"),
                format!(
                    "must not be shorter than min_ttl ({})",
                    show_duration(min_ttl)
                ),
            );
        }
        PoolDns {
            servers,
            timeout: self.duration(
                &path.key("timeout"),
                table.timeout.as_ref(),
                defaults.timeout,
                Zero::Rejected,
            ),
            min_ttl,
            max_ttl,
            families: self.choice(
                &path.key("families"),
                table.families.as_deref(),
                AddressFamilies::Both,
                &[
                    ("both", AddressFamilies::Both),
                    ("ipv4", AddressFamilies::Ipv4),
                    ("ipv6", AddressFamilies::Ipv6),
                ],
            ),
        }
    }

    pub(super) fn connections(
        &mut self,
        path: &KeyPath,
        table: Option<&ConnectionsTable>,
    ) -> UpstreamConnections {
        let Some(table) = table else {
            return UpstreamConnections::default();
        };
        UpstreamConnections {
            max_connections: self.nonzero(
                &path.key("max_connections"),
                table.max_connections,
                defaults::NODE_MAX_CONNECTIONS,
                1..=1_000_000,
            ),
            queue_length: self.count(
                &path.key("queue_length"),
                table.queue_length,
                defaults::QUEUE_LENGTH,
                0..=10_000_000,
            ),
            queue_timeout: self.duration(
                &path.key("queue_timeout"),
                table.queue_timeout.as_ref(),
                defaults::QUEUE_TIMEOUT,
                Zero::Rejected,
            ),
            fair_queue: table.fair_queue.unwrap_or(defaults::FAIR_QUEUE),
            leave_queue_on_close: table
                .leave_queue_on_close
                .unwrap_or(defaults::LEAVE_QUEUE_ON_CLOSE),
            idle_timeout: self.duration(
                &path.key("idle_timeout"),
                table.idle_timeout.as_ref(),
                defaults::UPSTREAM_IDLE_TIMEOUT,
                Zero::Rejected,
            ),
            max_requests_per_connection: self.optional_limit(
                &path.key("max_requests_per_connection"),
                table.max_requests_per_connection,
            ),
            max_tunnels: self.count(
                &path.key("max_tunnels"),
                table.max_tunnels,
                defaults::MAX_TUNNELS,
                0..=1_000_000,
            ),
        }
    }

    pub(super) fn upstream_timeouts(
        &mut self,
        path: &KeyPath,
        table: Option<&UpstreamTimeoutsTable>,
    ) -> UpstreamTimeouts {
        let Some(table) = table else {
            return UpstreamTimeouts::default();
        };
        UpstreamTimeouts {
            connect: self.duration(
                &path.key("connect"),
                table.connect.as_ref(),
                defaults::CONNECT_TIMEOUT,
                Zero::Rejected,
            ),
            response: self.duration(
                &path.key("response"),
                table.response.as_ref(),
                defaults::RESPONSE_TIMEOUT,
                Zero::Rejected,
            ),
            write: self.duration(
                &path.key("write"),
                table.write.as_ref(),
                defaults::UPSTREAM_WRITE_TIMEOUT,
                Zero::Rejected,
            ),
        }
    }

    pub(super) fn health(&mut self, path: &KeyPath, table: &HealthTable) -> HealthMonitor {
        let check = match table.kind.as_deref() {
            Some("tcp") => {
                self.http_only_keys(path, table);
                HealthCheckKind::Tcp
            }
            Some("http") => self.http_check(path, table),
            Some(other) => {
                self.report(
                    &path.key("type"),
                    format!("unknown health check type \"{other}\"; expected \"http\" or \"tcp\""),
                );
                HealthCheckKind::Tcp
            }
            None => {
                self.report(
                    &path.key("type"),
                    "missing required key: the kind of check, \"http\" or \"tcp\"",
                );
                HealthCheckKind::Tcp
            }
        };
        let interval = self.duration(
            &path.key("interval"),
            table.interval.as_ref(),
            defaults::HEALTH_INTERVAL,
            Zero::Rejected,
        );
        let timeout = self.duration(
            &path.key("timeout"),
            table.timeout.as_ref(),
            defaults::HEALTH_TIMEOUT,
            Zero::Rejected,
        );
        if timeout >= interval {
            self.report(
                &path.key("timeout"),
                format!(
                    "must be shorter than interval ({}), or checks would overlap",
                    show_duration(interval)
                ),
            );
        }
        HealthMonitor {
            check,
            interval,
            timeout,
            rise: self.nonzero(
                &path.key("rise"),
                table.rise,
                defaults::HEALTH_RISE,
                1..=100,
            ),
            fall: self.nonzero(
                &path.key("fall"),
                table.fall,
                defaults::HEALTH_FALL,
                1..=100,
            ),
        }
    }

    pub(super) fn http_only_keys(&mut self, path: &KeyPath, table: &HealthTable) {
        let set = [
            ("method", table.method.is_some()),
            ("path", table.path.is_some()),
            ("host", table.host.is_some()),
            ("expect_status", table.expect_status.is_some()),
        ];
        for (key, _) in set.iter().filter(|(_, is_set)| *is_set) {
            self.report(
                &path.key(key),
                format!("{key} applies only to HTTP checks (type = \"http\")"),
            );
        }
    }

    pub(super) fn http_check(&mut self, path: &KeyPath, table: &HealthTable) -> HealthCheckKind {
        let method = table.method.as_deref().unwrap_or(defaults::HEALTH_METHOD);
        if let Err(message) = values::method(method) {
            self.report(&path.key("method"), message);
        }
        let request_path = table.path.as_deref().unwrap_or(defaults::HEALTH_PATH);
        if let Err(message) = values::request_path(request_path) {
            self.report(&path.key("path"), message);
        }
        if let Some(host) = &table.host
            && let Err(message) = values::host_header(host)
        {
            self.report(&path.key("host"), message);
        }
        let expect_path = path.key("expect_status");
        let expect_status = match &table.expect_status {
            None => vec![defaults::HEALTH_EXPECT_STATUS],
            Some(list) => {
                if list.values.is_empty() {
                    self.report(
                        &expect_path,
                        "must list at least one status, like [\"200-399\"]",
                    );
                }
                list.values
                    .iter()
                    .enumerate()
                    .filter_map(|(index, value)| {
                        let element = if list.array {
                            expect_path.index(index)
                        } else {
                            expect_path.clone()
                        };
                        status_range(value)
                            .map_err(|message| self.report(&element, message))
                            .ok()
                    })
                    .collect()
            }
        };
        HealthCheckKind::Http {
            method: method.to_owned(),
            path: request_path.to_owned(),
            host: table.host.clone(),
            expect_status,
        }
    }

    pub(super) fn passive_health(
        &mut self,
        path: &KeyPath,
        table: Option<&PassiveHealthTable>,
    ) -> PassiveHealth {
        let Some(table) = table else {
            return PassiveHealth::default();
        };
        let base_ejection = self.duration(
            &path.key("base_ejection"),
            table.base_ejection.as_ref(),
            defaults::BASE_EJECTION,
            Zero::Rejected,
        );
        let max_ejection = self.duration(
            &path.key("max_ejection"),
            table.max_ejection.as_ref(),
            defaults::MAX_EJECTION,
            Zero::Rejected,
        );
        if max_ejection < base_ejection {
            self.report(
                &path.key("max_ejection"),
                format!(
                    "must be at least base_ejection ({})",
                    show_duration(base_ejection)
                ),
            );
        }
        PassiveHealth {
            consecutive_failures: self.count(
                &path.key("consecutive_failures"),
                table.consecutive_failures,
                defaults::CONSECUTIVE_FAILURES,
                0..=10_000,
            ),
            base_ejection,
            max_ejection,
            max_ejected_percent: self.count(
                &path.key("max_ejected_percent"),
                table.max_ejected_percent,
                defaults::MAX_EJECTED_PERCENT,
                1..=100,
            ),
        }
    }
}

/// An inclusive status range from one `expect_status` entry.
fn status_range(value: &StatusValue) -> Result<(u16, u16), String> {
    let (low, high) = match value {
        StatusValue::Code(code) => {
            let code = u16::try_from(*code)
                .map_err(|_| format!("invalid status {code}: must be between 100 and 599"))?;
            (code, code)
        }
        StatusValue::Text(text) => crate::units::parse_status_range(text)?,
    };
    if !(100..=599).contains(&low) || !(100..=599).contains(&high) {
        return Err(format!(
            "invalid status range {low}-{high}: statuses are between 100 and 599"
        ));
    }
    if low > high {
        return Err(format!(
            "invalid status range {low}-{high}: the low end is above the high end"
        ));
    }
    Ok((low, high))
}
