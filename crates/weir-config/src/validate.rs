//! Turns the file as written (`crate::schema`) into the validated model
//! ([`crate::model`]), checking every value and every cross reference and
//! collecting every problem rather than stopping at the first.
//!
//! While checking, a value that is wrong is replaced by its default so that the
//! rest of the file can still be checked; the model is only returned when no
//! problem was found, so those stand-ins never escape.

mod cache;
mod http;
mod http2;
mod layer4;
mod pools;
mod primitives;
mod template;
mod tls;
mod traffic;
mod traffic_actions;
mod traffic_settings;
mod values;

pub use values::listeners_clash;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use crate::defaults;
use crate::error::{KeyPath, Problem};
use crate::model::{
    AccessLog, AccessLogFormat, Admin, ClientLimits, ClientTimeouts, Config, FileRef, Log,
    LogFormat, Origin, Pool, PoolId, Route, Runtime, VirtualServer,
};
use crate::schema::{
    AdminTable, ClientTimeoutsTable, DurationText, FileConfig, LimitsTable, LogTable, OneOrMany,
    OriginTable, RouteTable, RuntimeTable, VirtualServerTable,
};

/// The longest path a Unix socket can be bound at on Linux (`sun_path` less its NUL).
const MAX_SOCKET_PATH: usize = 107;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const GIB: u64 = 1024 * MIB;
/// Stands in for a pool reference that did not resolve (the config is rejected).
const UNRESOLVED: PoolId = PoolId(usize::MAX);

impl TryFrom<&FileConfig> for Config {
    type Error = Vec<Problem>;

    /// Validates a parsed file. The result's `source` is `None`; the loader sets it.
    fn try_from(file: &FileConfig) -> Result<Self, Self::Error> {
        let mut checker = Checker::default();
        let config = checker.config(file);
        if checker.problems.is_empty() {
            Ok(config)
        } else {
            Err(checker.problems)
        }
    }
}

/// Whether zero is a meaningful value for a duration.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Zero {
    Allowed,
    Rejected,
}

/// Collects problems while converting.
#[derive(Default)]
struct Checker {
    problems: Vec<Problem>,
    /// Every listen address seen so far, with where it was written, by port (only
    /// listeners on the same port can clash; a thousand virtual servers check fast).
    listeners: HashMap<u16, Vec<(SocketAddr, KeyPath)>>,
    /// Every valid node address, with its pool and where it was written.
    nodes: Vec<(PoolId, SocketAddr, KeyPath)>,
}

impl Checker {
    fn report(&mut self, path: &KeyPath, message: impl Into<String>) {
        self.problems.push(Problem {
            path: path.clone(),
            message: message.into(),
            because: None,
        });
    }

    /// Reports a problem of `path` that follows from the value at `because` (see
    /// [`Problem::because`]).
    fn report_because(&mut self, path: &KeyPath, because: &KeyPath, message: impl Into<String>) {
        self.problems.push(Problem {
            path: path.clone(),
            message: message.into(),
            because: Some(because.clone()),
        });
    }

    fn config(&mut self, file: &FileConfig) -> Config {
        let root = KeyPath::root();
        let runtime = self.runtime(&root.key("runtime"), file.runtime.as_ref());
        let admin = file
            .admin
            .as_ref()
            .and_then(|admin| self.admin(&root.key("admin"), admin));
        let log = self.log(&root.key("log"), file.log.as_ref());
        let access_log = self.access_log(&root.key("log"), file.log.as_ref());

        let pools_path = root.key("pools");
        let pool_ids: HashMap<&str, PoolId> = file
            .pools
            .0
            .iter()
            .enumerate()
            .map(|(index, (name, _))| (name.as_str(), PoolId(index)))
            .collect();
        let pools: Vec<Pool> = file
            .pools
            .0
            .iter()
            .enumerate()
            .map(|(index, (name, pool))| {
                self.pool(&pools_path.key(name), PoolId(index), name, pool)
            })
            .collect();
        self.persistence_cookies_apart(&pools_path, &pools);

        let servers_path = root.key("virtual_servers");
        if file.virtual_servers.0.is_empty() {
            self.report(
                &servers_path,
                "at least one virtual server is required, such as [virtual_servers.web]",
            );
        }
        let virtual_servers: Vec<VirtualServer> = file
            .virtual_servers
            .0
            .iter()
            .map(|(name, server)| {
                self.virtual_server(&servers_path.key(name), name, server, &pool_ids)
            })
            .collect();

        let origins = self.origins(&root.key("origins"), &file.origins);
        self.node_loops(&virtual_servers);
        self.proxy_protocol_pools(&pools_path, &pools, &virtual_servers);

        Config {
            source: None,
            runtime,
            admin,
            log,
            virtual_servers,
            pools,
            origins,
            access_log,
        }
    }

    fn runtime(&mut self, path: &KeyPath, table: Option<&RuntimeTable>) -> Runtime {
        let Some(table) = table else {
            return Runtime::default();
        };
        let threads = table.threads.map(|threads| {
            self.nonzero(
                &path.key("threads"),
                Some(threads),
                NonZeroU32::MIN,
                1..=1024,
            )
        });
        let upgrade_socket = table.upgrade_socket.as_deref().and_then(|text| {
            let path_buf = std::path::PathBuf::from(text.trim());
            if path_buf.is_absolute() && path_buf.as_os_str().len() > MAX_SOCKET_PATH {
                self.report(
                    &path.key("upgrade_socket"),
                    format!(
                        "\"{text}\" is longer than a Unix socket path may be ({MAX_SOCKET_PATH} bytes)"
                    ),
                );
                None
            } else if path_buf.is_absolute() {
                Some(path_buf)
            } else {
                self.report(
                    &path.key("upgrade_socket"),
                    format!("\"{text}\" must be an absolute path, like \"/run/weir/upgrade.sock\""),
                );
                None
            }
        });
        Runtime {
            threads,
            drain_timeout: self.duration(
                &path.key("drain_timeout"),
                table.drain_timeout.as_ref(),
                defaults::DRAIN_TIMEOUT,
                Zero::Allowed,
            ),
            upgrade_socket,
        }
    }

    fn admin(&mut self, path: &KeyPath, table: &AdminTable) -> Option<Admin> {
        let token_path = path.key("token_file");
        let token_file = table
            .token_file
            .as_deref()
            .and_then(|text| self.named_file(&token_path, text));
        let listen = self.listen_address(&path.key("listen"), table.listen.as_deref())?;
        if !listen.ip().is_loopback() && token_file.is_none() && table.token_file.is_none() {
            self.report(
                &path.key("listen"),
                format!(
                    "{listen} is not a loopback address: the admin API can change the running \
                     configuration, so set admin.token_file to a file holding a bearer token"
                ),
            );
        }
        Some(Admin { listen, token_file })
    }

    /// A file named in the config; relative paths are resolved by the loader.
    fn named_file(&mut self, path: &KeyPath, text: &str) -> Option<FileRef> {
        if text.trim().is_empty() {
            self.report(path, "must name a file");
            return None;
        }
        Some(FileRef {
            path: std::path::PathBuf::from(text.trim()),
            key: path.clone(),
            line: None,
        })
    }

    fn access_log(&mut self, path: &KeyPath, table: Option<&LogTable>) -> AccessLog {
        let Some(table) = table else {
            return AccessLog::default();
        };
        let format = self.choice(
            &path.key("access_log_format"),
            table.access_log_format.as_deref(),
            defaults::ACCESS_LOG_FORMAT,
            &[
                ("text", AccessLogFormat::Text),
                ("json", AccessLogFormat::Json),
            ],
        );
        let file_path = path.key("access_log_file");
        let file = table
            .access_log_file
            .as_deref()
            .and_then(|text| self.named_file(&file_path, text));
        AccessLog { format, file }
    }

    fn log(&mut self, path: &KeyPath, table: Option<&LogTable>) -> Log {
        let Some(table) = table else {
            return Log::default();
        };
        let level = match &table.level {
            Some(level) => {
                if let Err(message) = values::log_level(level) {
                    self.report(&path.key("level"), message);
                }
                level.trim().to_owned()
            }
            None => defaults::LOG_LEVEL.to_owned(),
        };
        let format = self.choice(
            &path.key("format"),
            table.format.as_deref(),
            defaults::LOG_FORMAT,
            &[("text", LogFormat::Text), ("json", LogFormat::Json)],
        );
        Log {
            access_log: table.access_log.unwrap_or(defaults::ACCESS_LOG),
            level,
            format,
        }
    }

    fn virtual_server(
        &mut self,
        path: &KeyPath,
        name: &str,
        table: &VirtualServerTable,
        pool_ids: &HashMap<&str, PoolId>,
    ) -> VirtualServer {
        self.name(path, name);
        let listen = self.listen_list(&path.key("listen"), table.listen.as_ref());
        let (protocol, tls) = self.protocol_and_tls(path, table);
        let default_pool = self.pool_reference(&path.key("pool"), table.pool.as_deref(), pool_ids);
        let routes_path = path.key("routes");
        let mut routes = table
            .routes
            .iter()
            .enumerate()
            .map(|(index, route)| self.route(&routes_path.index(index), route, pool_ids))
            .collect::<Vec<_>>();
        self.duplicate_routes(&routes_path, &routes);
        let (cache, content) = self.content(path, table.cache.as_ref(), table.compression.as_ref());
        for (index, (route, route_table)) in routes.iter_mut().zip(&table.routes).enumerate() {
            route.content = self.route_content(
                &routes_path.index(index),
                &content,
                cache.as_ref(),
                route_table.cache.as_ref(),
                route_table.compression.as_ref(),
            );
        }
        let virtual_server = VirtualServer {
            name: name.to_owned(),
            listen,
            protocol,
            default_pool: default_pool.unwrap_or(UNRESOLVED),
            routes,
            limits: self.limits(&path.key("limits"), table.limits.as_ref()),
            timeouts: self.client_timeouts(&path.key("timeouts"), table.timeouts.as_ref()),
            http: self.http_policy(&path.key("http"), table.http.as_ref()),
            forwarded_headers: table
                .forwarded_headers
                .unwrap_or(defaults::FORWARDED_HEADERS),
            backlog: self.count(
                &path.key("backlog"),
                table.backlog,
                defaults::BACKLOG,
                1..=65_535,
            ),
            defer_accept: table
                .defer_accept
                .unwrap_or(protocol != crate::model::Protocol::Tcp),
            tls,
            response_headers: self.response_headers(
                &path.key("response_headers"),
                table.response_headers.as_ref(),
            ),
            http2: self.http2(
                &path.key("http2"),
                table.http2.as_ref(),
                protocol == crate::model::Protocol::Https,
            ),
            cache,
            content,
            traffic: self.traffic(path, table, pool_ids),
            tcp: self.tcp_settings(path, protocol, table),
            accept_proxy: self.accept_proxy(&path.key("proxy_protocol"), table),
            passthrough: self.passthrough(path, protocol, table, pool_ids),
        };
        self.subject_apart_from_request_id(path, &virtual_server);
        virtual_server
    }

    /// The verified client certificate's subject and the request id go to nodes in fields of
    /// their own: under one name, a client's `X-Request-Id: CN=admin` (taken as its id)
    /// would stand in for the subject weir verified.
    fn subject_apart_from_request_id(&mut self, path: &KeyPath, virtual_server: &VirtualServer) {
        let request_id = &virtual_server.traffic.request_id;
        let Some(subject) = virtual_server
            .tls
            .as_ref()
            .and_then(|tls| tls.client_subject_header.as_deref())
        else {
            return;
        };
        let spelled = |name: &str| name.to_ascii_lowercase().replace('_', "-");
        if request_id.enabled && spelled(subject) == spelled(&request_id.header) {
            self.report(
                &path.key("tls").key("client_subject_header"),
                format!(
                    "{subject} is also this virtual server's request id header \
                     (request_id.header): a client's id would stand in for the verified \
                     subject; choose another name, or another request_id.header"
                ),
            );
        }
    }

    fn response_headers(
        &mut self,
        path: &KeyPath,
        table: Option<&crate::schema::Named<String>>,
    ) -> Vec<(String, String)> {
        let Some(table) = table else {
            return Vec::new();
        };
        let mut headers = Vec::new();
        for (name, value) in &table.0 {
            let at = path.key(name);
            if !values::is_token(name) {
                self.report(&at, format!("\"{name}\" is not a valid header name"));
            } else if values::MANAGED_RESPONSE_HEADERS.contains(&name.to_ascii_lowercase().as_str())
            {
                self.report(&at, format!("{name} is managed by weir and cannot be set"));
            } else if value.bytes().any(|b| b.is_ascii_control() && b != b'\t') {
                self.report(&at, "the value must not contain control characters");
            } else if self.named_once(&at, name, headers.iter().map(|(n, _)| n)) {
                headers.push((name.clone(), value.trim().to_owned()));
            }
        }
        headers
    }

    fn listen_list(
        &mut self,
        path: &KeyPath,
        listen: Option<&OneOrMany<String>>,
    ) -> Vec<SocketAddr> {
        let Some(listen) = listen else {
            self.report(
                path,
                "missing required key: the address(es) to listen on, like \"127.0.0.1:8080\"",
            );
            return Vec::new();
        };
        if listen.values.is_empty() {
            self.report(path, "at least one listen address is required");
        }
        listen
            .values
            .iter()
            .enumerate()
            .filter_map(|(index, text)| {
                let element = if listen.array {
                    path.index(index)
                } else {
                    path.clone()
                };
                self.listen_address(&element, Some(text))
            })
            .collect()
    }

    /// Parses a listen address and checks it against every listener seen before.
    fn listen_address(&mut self, path: &KeyPath, text: Option<&str>) -> Option<SocketAddr> {
        let Some(text) = text else {
            self.report(
                path,
                "missing required key: an address like \"127.0.0.1:9090\"",
            );
            return None;
        };
        let address = match values::socket_addr(text) {
            Ok(address) => address,
            Err(message) => {
                self.report(path, message);
                return None;
            }
        };
        if let std::net::IpAddr::V6(v6) = address.ip()
            && let Some(v4) = v6.to_ipv4_mapped()
        {
            // IPv6 listeners are bound IPv6-only, where a mapped address cannot be bound.
            self.report(
                path,
                format!(
                    "{address} is an IPv4-mapped address, which weir cannot listen on \
                     (IPv6 listeners are IPv6-only); write {}",
                    SocketAddr::new(v4.into(), address.port())
                ),
            );
            return None;
        }
        let clash = self
            .listeners
            .get(&address.port())
            .into_iter()
            .flatten()
            .find(|(other, _)| values::listeners_clash(address, *other))
            .map(|(other, other_path)| (*other, other_path.clone()));
        match clash {
            Some((other, other_path)) if other == address => self.report(
                path,
                format!("address {address} is already used by {other_path}"),
            ),
            Some((other, other_path)) => self.report(
                path,
                format!("address {address} overlaps {other} of {other_path}"),
            ),
            None => self
                .listeners
                .entry(address.port())
                .or_default()
                .push((address, path.clone())),
        }
        Some(address)
    }

    fn route(
        &mut self,
        path: &KeyPath,
        table: &RouteTable,
        pool_ids: &HashMap<&str, PoolId>,
    ) -> Route {
        let host = table.host.as_deref().and_then(|host| {
            values::route_host(host)
                .map_err(|message| self.report(&path.key("host"), message))
                .ok()
        });
        // Routes match the normalised path, as rules do: a prefix in any other form could
        // never match.
        if let Some(prefix) = &table.path_prefix
            && let Err(message) = values::rule_path(prefix, true)
        {
            self.report(&path.key("path_prefix"), message);
        }
        if table.host.is_none() && table.path_prefix.is_none() {
            self.report(
                path,
                "a route needs host, path_prefix or both; for a catch-all, set the virtual \
                 server's pool",
            );
        }
        let pool = self.pool_reference(&path.key("pool"), table.pool.as_deref(), pool_ids);
        Route {
            host,
            path_prefix: table.path_prefix.clone(),
            pool: pool.unwrap_or(UNRESOLVED),
            content: Default::default(),
        }
    }

    /// A route that repeats an earlier one's match can never be chosen.
    fn duplicate_routes(&mut self, path: &KeyPath, routes: &[Route]) {
        for (index, route) in routes.iter().enumerate() {
            if route.host.is_none() && route.path_prefix.is_none() {
                continue;
            }
            let earlier = routes[..index].iter().position(|other| {
                other.host == route.host && other.path_prefix == route.path_prefix
            });
            if let Some(earlier) = earlier {
                self.report(
                    &path.index(index),
                    format!("this route can never match: routes[{earlier}] has the same host and path_prefix"),
                );
            }
        }
    }

    fn pool_reference(
        &mut self,
        path: &KeyPath,
        name: Option<&str>,
        pool_ids: &HashMap<&str, PoolId>,
    ) -> Option<PoolId> {
        let Some(name) = name else {
            self.report(path, "missing required key: the name of a pool");
            return None;
        };
        if let Some(&id) = pool_ids.get(name) {
            return Some(id);
        }
        let mut known: Vec<(&str, PoolId)> = pool_ids.iter().map(|(n, id)| (*n, *id)).collect();
        known.sort_by_key(|(_, id)| id.0);
        let names: Vec<&str> = known.into_iter().map(|(n, _)| n).collect();
        let message = if names.is_empty() {
            format!("unknown pool \"{name}\"; no pools are defined (add a [pools.{name}] table)")
        } else {
            let mut message = format!("unknown pool \"{name}\"");
            if let Some(close) = crate::error::closest(name, &names) {
                message.push_str(&format!(" (did you mean \"{close}\"?)"));
            }
            message.push_str(&format!("; defined pools: {}", names.join(", ")));
            message
        };
        self.report(path, message);
        None
    }

    fn limits(&mut self, path: &KeyPath, table: Option<&LimitsTable>) -> ClientLimits {
        let Some(table) = table else {
            return ClientLimits::default();
        };
        ClientLimits {
            max_connections: self.count(
                &path.key("max_connections"),
                table.max_connections,
                defaults::CLIENT_MAX_CONNECTIONS,
                1..=u32::MAX,
            ),
            max_header_bytes: self.size_usize(
                &path.key("max_header_bytes"),
                table.max_header_bytes.as_ref(),
                defaults::MAX_HEADER_BYTES,
                KIB..=MIB,
            ),
            max_headers: self.count(
                &path.key("max_headers"),
                table.max_headers,
                defaults::MAX_HEADERS,
                1..=10_000,
            ) as usize,
            max_body_bytes: self.size(
                &path.key("max_body_bytes"),
                table.max_body_bytes.as_ref(),
                defaults::MAX_BODY_BYTES,
                1..=u64::MAX,
            ),
            request_buffer: self.size_usize(
                &path.key("request_buffer"),
                table.request_buffer.as_ref(),
                defaults::REQUEST_BUFFER,
                KIB..=GIB,
            ),
            response_buffer: self.size_usize(
                &path.key("response_buffer"),
                table.response_buffer.as_ref(),
                defaults::RESPONSE_BUFFER,
                KIB..=GIB,
            ),
            max_requests_per_connection: self.optional_limit(
                &path.key("max_requests_per_connection"),
                table.max_requests_per_connection,
            ),
            min_body_rate: self.size(
                &path.key("min_body_rate"),
                table.min_body_rate.as_ref(),
                defaults::MIN_BODY_RATE,
                0..=GIB,
            ),
        }
    }

    fn client_timeouts(
        &mut self,
        path: &KeyPath,
        table: Option<&ClientTimeoutsTable>,
    ) -> ClientTimeouts {
        let Some(table) = table else {
            return ClientTimeouts::default();
        };
        let mut timeout = |key: &str, value: Option<&DurationText>, default: Duration| {
            self.duration(&path.key(key), value, default, Zero::Rejected)
        };
        ClientTimeouts {
            header_read: timeout(
                "header_read",
                table.header_read.as_ref(),
                defaults::HEADER_READ_TIMEOUT,
            ),
            idle: timeout("idle", table.idle.as_ref(), defaults::IDLE_TIMEOUT),
            body_read: timeout(
                "body_read",
                table.body_read.as_ref(),
                defaults::BODY_READ_TIMEOUT,
            ),
            body_total: timeout(
                "body_total",
                table.body_total.as_ref(),
                defaults::BODY_TOTAL_TIMEOUT,
            ),
            write: timeout("write", table.write.as_ref(), defaults::WRITE_TIMEOUT),
            tunnel_idle: timeout(
                "tunnel_idle",
                table.tunnel_idle.as_ref(),
                defaults::TUNNEL_IDLE_TIMEOUT,
            ),
            park_idle: self.duration(
                &path.key("park_idle"),
                table.park_idle.as_ref(),
                defaults::PARK_IDLE,
                Zero::Allowed,
            ),
            rest_idle: self.duration(
                &path.key("rest_idle"),
                table.rest_idle.as_ref(),
                defaults::REST_IDLE,
                Zero::Allowed,
            ),
        }
    }

    fn origins(&mut self, path: &KeyPath, tables: &[OriginTable]) -> Vec<Origin> {
        let mut names: Vec<(&str, usize)> = Vec::new();
        let mut origins = Vec::new();
        for (index, table) in tables.iter().enumerate() {
            let origin_path = path.index(index);
            let name_path = origin_path.key("name");
            match table.name.as_deref() {
                None => self.report(&name_path, "missing required key: a name for the origin"),
                Some(name) => match values::name(name) {
                    Err(message) => self.report(&name_path, message),
                    Ok(()) => match names.iter().find(|(other, _)| *other == name) {
                        Some((_, earlier)) => self.report(
                            &name_path,
                            format!("duplicate origin name: origins[{earlier}] is also \"{name}\""),
                        ),
                        None => names.push((name, index)),
                    },
                },
            }
            let listen = self.listen_address(&origin_path.key("listen"), table.listen.as_deref());
            origins.push(Origin {
                name: table.name.clone().unwrap_or_default(),
                listen: listen.unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0))),
                max_connections: self
                    .optional_limit(&origin_path.key("max_connections"), table.max_connections),
                keep_alive: table.keep_alive.unwrap_or(defaults::ORIGIN_KEEP_ALIVE),
            });
        }
        origins
    }

    /// A node that is one of weir's own listeners for a virtual server that sends to
    /// the same pool would forward requests to itself forever.
    fn node_loops(&mut self, servers: &[VirtualServer]) {
        // Only a node on a listener's port can loop: index the listeners by port first.
        let mut by_port: HashMap<u16, Vec<(SocketAddr, &VirtualServer)>> = HashMap::new();
        for server in servers {
            for listen in &server.listen {
                by_port
                    .entry(listen.port())
                    .or_default()
                    .push((*listen, server));
            }
        }
        let mut loops = Vec::new();
        for (pool, address, path) in &self.nodes {
            let looping = by_port
                .get(&address.port())
                .into_iter()
                .flatten()
                .find(|(listen, server)| {
                    let uses_pool = server.pools().any(|used| used == *pool)
                        || server.passthrough.iter().any(|r| r.pool == *pool);
                    uses_pool && reaches(*listen, *address)
                })
                .map(|(_, server)| server);
            if let Some(server) = looping {
                loops.push(Problem {
                    path: path.clone(),
                    message: format!(
                        "{address} is a listener of virtual server \"{}\", which uses this \
                         pool: requests would loop",
                        server.name
                    ),
                    because: None,
                });
            }
        }
        self.problems.extend(loops);
    }
}

/// Whether a connection to node `address` would arrive at `listen`: the same
/// port and address (an IPv4-mapped address is its IPv4 one), or loopback of
/// the family of a wildcard listener (`[::]` is bound IPv6-only, so it takes
/// `::1` and never `127.0.0.1`).
fn reaches(listen: std::net::SocketAddr, address: std::net::SocketAddr) -> bool {
    let (listen_ip, node_ip) = (
        crate::canonical(listen.ip()),
        crate::canonical(address.ip()),
    );
    listen.port() == address.port()
        && (listen_ip == node_ip
            || (listen_ip.is_unspecified()
                && node_ip.is_loopback()
                && listen_ip.is_ipv4() == node_ip.is_ipv4()))
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod traffic_tests;
