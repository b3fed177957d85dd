//! What changes between two validated configurations: the reload's plan, and what the
//! admin API's dry run shows before anything is applied.
//!
//! Virtual servers and pools are matched by name, nodes by pool name and address (a node
//! given by DNS name by its name), listeners by address. A [`ConfigDiff`] serialises to
//! JSON as the API returns it:
//!
//! ```
//! let old = weir_config::parse_str(
//!     "[pools.web]\nnodes = [{ address = \"127.0.0.1:81\" }]\n\
//!      [virtual_servers.web]\nlisten = \"127.0.0.1:80\"\npool = \"web\"\n",
//!     "a.toml",
//! ).unwrap();
//! let new = weir_config::parse_str(
//!     "[pools.web]\nnodes = [{ address = \"127.0.0.1:82\", weight = 2 }]\n\
//!      [virtual_servers.web]\nlisten = \"127.0.0.1:80\"\npool = \"web\"\n",
//!     "b.toml",
//! ).unwrap();
//! let diff = weir_config::diff::diff(&old, &new);
//! assert_eq!(diff.nodes.len(), 2);
//! assert_eq!(diff.pools.changed[0].name, "web");
//! assert!(diff.listeners.added.is_empty());
//! ```

use std::collections::HashMap;
use std::net::SocketAddr;

use serde::Serialize;

use crate::cache::ContentPolicy;
use crate::model::{Config, NamedNode, Node, Pool, PoolId, Route, Traffic, VirtualServer};

/// Everything that differs between a running configuration and a candidate.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ConfigDiff {
    /// Virtual servers added, removed or changed, by name.
    pub virtual_servers: Changes,
    /// Pools added, removed or changed, by name.
    pub pools: Changes,
    /// Nodes added, removed or changed, pool by pool.
    pub nodes: Vec<NodeChange>,
    /// Listening addresses opened, closed or given to another virtual server.
    pub listeners: ListenerChanges,
    /// Other sections that changed and are applied by a reload (`log.access_log`, ...).
    pub settings: Vec<String>,
    /// Keys that changed but only take effect in a new process (`weir serve --upgrade`
    /// or a restart): the reload applies everything else and says so.
    pub needs_restart: Vec<String>,
}

/// Named items (virtual servers or pools) added, removed or changed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Changes {
    /// Names only in the candidate.
    pub added: Vec<String>,
    /// Names only in the running configuration.
    pub removed: Vec<String>,
    /// Names in both whose settings differ.
    pub changed: Vec<Changed>,
}

/// One named item that stays, and which of its keys changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Changed {
    /// The item's name.
    pub name: String,
    /// The keys (relative to the item's table) whose values differ.
    pub keys: Vec<String>,
}

/// One node added, removed or changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeChange {
    /// The pool the node belongs to.
    pub pool: String,
    /// The node's address, which identifies it within the pool; `None` for an entry given
    /// by DNS name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<SocketAddr>,
    /// The label of an entry given by DNS name (`host:port`, `srv:NAME`), which identifies
    /// it within the pool; its weight and state are those of every address it resolves to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Whether it was added, removed or changed.
    pub change: NodeChangeKind,
    /// For a changed node: the keys that changed (`weight`, `state`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<String>,
}

/// What happened to a node between two configurations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeChangeKind {
    /// Only in the candidate.
    Added,
    /// Only in the running configuration.
    Removed,
    /// In both, with another weight or state.
    Changed,
}

/// Listening sockets: the only part of a reload that is diffed rather than rebuilt.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ListenerChanges {
    /// Addresses to bind.
    pub added: Vec<Listener>,
    /// Addresses to close.
    pub removed: Vec<Listener>,
    /// Kept open, now serving another virtual server or with other
    /// [`ListenOptions`] (backlog, deferred accept).
    pub rebound: Vec<Listener>,
}

/// A listening address and the virtual server it serves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Listener {
    /// The address bound.
    pub address: SocketAddr,
    /// The virtual server it serves.
    pub virtual_server: String,
}

impl ConfigDiff {
    /// True when applying the candidate would change nothing.
    pub fn is_empty(&self) -> bool {
        *self == ConfigDiff::default()
    }
}

impl Changes {
    fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }
}

/// How a listening socket is set up: what a reload changes in place on a
/// socket it keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenOptions {
    /// The backlog (`listen` again on a listening socket changes it).
    pub backlog: u32,
    /// `TCP_DEFER_ACCEPT` on the socket.
    pub defer_accept: bool,
}

impl ListenOptions {
    /// How `vs` wants its listening sockets set up.
    pub fn of(vs: &VirtualServer) -> ListenOptions {
        ListenOptions {
            backlog: vs.backlog,
            defer_accept: vs.defer_accept,
        }
    }
}

/// The listening addresses of a configuration, with their virtual server and
/// how each socket is set up.
pub fn listeners(config: &Config) -> Vec<(SocketAddr, &str, ListenOptions)> {
    config
        .virtual_servers
        .iter()
        .flat_map(|vs| {
            let options = ListenOptions::of(vs);
            vs.listen
                .iter()
                .map(move |&address| (address, vs.name.as_str(), options))
        })
        .collect()
}

/// What changes from `old` to `new`.
pub fn diff(old: &Config, new: &Config) -> ConfigDiff {
    diff_running(old, old, new)
}

/// [`diff`] for a running process: the settings that take effect only in a new process
/// (`needs_restart`) are compared with `running`, the config the process started with,
/// and the others with `old`, the last one applied. Compared with `old`, a reload that
/// puts back the value the process runs with would be listed as needing a restart, and
/// one that keeps a changed value not yet in effect would drop it from the list.
pub fn diff_running(old: &Config, running: &Config, new: &Config) -> ConfigDiff {
    let mut result = ConfigDiff {
        virtual_servers: named_changes(&old.virtual_servers, &new.virtual_servers, |o, n| {
            virtual_server_keys(old, o, new, n)
        }),
        pools: named_changes(&old.pools, &new.pools, pool_keys),
        listeners: listener_changes(old, new),
        ..ConfigDiff::default()
    };
    let old_pools: HashMap<&str, &Pool> = old.pools.iter().map(|p| (p.name.as_str(), p)).collect();
    let new_pools: HashMap<&str, &Pool> = new.pools.iter().map(|p| (p.name.as_str(), p)).collect();
    for pool in &new.pools {
        let before = old_pools.get(pool.name.as_str());
        let before_nodes = before.map_or(&[][..], |p| &p.nodes[..]);
        result
            .nodes
            .extend(node_changes(&pool.name, before_nodes, &pool.nodes));
        let before_names = before.map_or(&[][..], |p| &p.names[..]);
        result
            .nodes
            .extend(node_changes(&pool.name, before_names, &pool.names));
    }
    for pool in &old.pools {
        if !new_pools.contains_key(pool.name.as_str()) {
            result
                .nodes
                .extend(node_changes::<Node>(&pool.name, &pool.nodes, &[]));
            result
                .nodes
                .extend(node_changes::<NamedNode>(&pool.name, &pool.names, &[]));
        }
    }
    let mut setting = |changed: bool, key: &str, restart: bool| {
        if changed {
            let list = if restart {
                &mut result.needs_restart
            } else {
                &mut result.settings
            };
            list.push(key.to_owned());
        }
    };
    setting(
        running.runtime.threads != new.runtime.threads,
        "runtime.threads",
        true,
    );
    setting(
        old.runtime.drain_timeout != new.runtime.drain_timeout,
        "runtime.drain_timeout",
        false,
    );
    setting(
        running.runtime.upgrade_socket != new.runtime.upgrade_socket,
        "runtime.upgrade_socket",
        true,
    );
    let admin_listen = |c: &Config| c.admin.as_ref().map(|a| a.listen);
    setting(
        admin_listen(running) != admin_listen(new),
        "admin.listen",
        true,
    );
    let token = |c: &Config| c.admin.as_ref().and_then(|a| a.token_file.clone());
    setting(token(old) != token(new), "admin.token_file", false);
    setting(
        old.log.access_log != new.log.access_log,
        "log.access_log",
        false,
    );
    setting(
        old.access_log.format != new.access_log.format,
        "log.access_log_format",
        false,
    );
    setting(
        old.access_log.file != new.access_log.file,
        "log.access_log_file",
        false,
    );
    setting(running.log.level != new.log.level, "log.level", true);
    setting(running.log.format != new.log.format, "log.format", true);
    setting(running.origins != new.origins, "origins", true);
    result
}

impl ConfigDiff {
    /// One line per change, for the log and `weir reload`'s output.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        let mut changes = |what: &str, changes: &Changes| {
            if !changes.is_empty() {
                parts.push(format!(
                    "{what}: {} added, {} removed, {} changed",
                    changes.added.len(),
                    changes.removed.len(),
                    changes.changed.len()
                ));
            }
        };
        changes("virtual servers", &self.virtual_servers);
        changes("pools", &self.pools);
        if !self.nodes.is_empty() {
            parts.push(format!("{} node changes", self.nodes.len()));
        }
        let l = &self.listeners;
        if !(l.added.is_empty() && l.removed.is_empty() && l.rebound.is_empty()) {
            parts.push(format!(
                "listeners: {} added, {} removed, {} rebound",
                l.added.len(),
                l.removed.len(),
                l.rebound.len()
            ));
        }
        if !self.settings.is_empty() {
            parts.push(format!("settings: {}", self.settings.join(", ")));
        }
        if !self.needs_restart.is_empty() {
            parts.push(format!(
                "not applied until a restart or upgrade: {}",
                self.needs_restart.join(", ")
            ));
        }
        if parts.is_empty() {
            "no changes".to_owned()
        } else {
            parts.join("; ")
        }
    }
}

trait Named {
    fn name(&self) -> &str;
}

impl Named for VirtualServer {
    fn name(&self) -> &str {
        &self.name
    }
}

impl Named for Pool {
    fn name(&self) -> &str {
        &self.name
    }
}

fn named_changes<T: Named>(old: &[T], new: &[T], keys: impl Fn(&T, &T) -> Vec<String>) -> Changes {
    let mut changes = Changes::default();
    let old_by_name: HashMap<&str, &T> = old.iter().map(|o| (o.name(), o)).collect();
    let new_names: std::collections::HashSet<&str> = new.iter().map(|n| n.name()).collect();
    for item in new {
        match old_by_name.get(item.name()) {
            None => changes.added.push(item.name().to_owned()),
            Some(before) => {
                let keys = keys(before, item);
                if !keys.is_empty() {
                    changes.changed.push(Changed {
                        name: item.name().to_owned(),
                        keys,
                    });
                }
            }
        }
    }
    for item in old {
        if !new_names.contains(item.name()) {
            changes.removed.push(item.name().to_owned());
        }
    }
    changes
}

/// The keys of a virtual server that differ; pools are compared by name, since their
/// ids are positions in each configuration. Every field is named below (the struct is
/// taken apart whole), so a field added to [`VirtualServer`] cannot be left out of the diff
/// without the compiler saying so.
fn virtual_server_keys(
    old_config: &Config,
    old: &VirtualServer,
    new_config: &Config,
    new: &VirtualServer,
) -> Vec<String> {
    let pool_name = |config: &Config, id: PoolId| config.pool(id).name.clone();
    let VirtualServer {
        name: _,
        listen,
        protocol,
        default_pool,
        routes: old_routes,
        limits,
        timeouts,
        http,
        forwarded_headers,
        backlog,
        defer_accept,
        tls,
        response_headers,
        cache,
        content,
        http2,
        traffic,
        tcp,
        accept_proxy,
        passthrough: _,
    } = old;
    let ContentPolicy {
        cache: cache_rules,
        compression,
    } = content;
    let mut keys = Vec::new();
    let mut key = |changed: bool, name: &str| {
        if changed {
            keys.push(name.to_owned());
        }
    };
    key(*listen != new.listen, "listen");
    key(*protocol != new.protocol, "protocol");
    key(
        pool_name(old_config, *default_pool) != pool_name(new_config, new.default_pool),
        "pool",
    );
    key(
        route_list(old_config, old_routes) != route_list(new_config, &new.routes),
        "routes",
    );
    key(*limits != new.limits, "limits");
    key(*timeouts != new.timeouts, "timeouts");
    key(*http != new.http, "http");
    key(*http2 != new.http2, "http2");
    key(
        *forwarded_headers != new.forwarded_headers,
        "forwarded_headers",
    );
    key(*backlog != new.backlog, "backlog");
    key(*defer_accept != new.defer_accept, "defer_accept");
    key(*tls != new.tls, "tls");
    key(
        *response_headers != new.response_headers,
        "response_headers",
    );
    key(
        *cache != new.cache || *cache_rules != new.content.cache,
        "cache",
    );
    key(*compression != new.content.compression, "compression");
    for name in traffic_keys(traffic, &new.traffic) {
        key(true, name);
    }
    key(*tcp != new.tcp, "tcp");
    key(*accept_proxy != new.accept_proxy, "accept_proxy");
    key(
        passthrough_list(old_config, old) != passthrough_list(new_config, new),
        "passthrough",
    );
    keys
}

/// A virtual server's routes as compared: pools by name, every field named.
fn route_list(
    config: &Config,
    routes: &[Route],
) -> Vec<(Option<String>, Option<String>, String, ContentPolicy)> {
    routes
        .iter()
        .map(|route| {
            let Route {
                host,
                path_prefix,
                pool,
                content,
            } = route;
            (
                host.clone(),
                path_prefix.clone(),
                config.pool(*pool).name.clone(),
                content.clone(),
            )
        })
        .collect()
}

/// A virtual server's passthrough routes as compared: pools by name.
fn passthrough_list(
    config: &Config,
    vs: &VirtualServer,
) -> Vec<(Vec<String>, Vec<String>, String)> {
    vs.passthrough
        .iter()
        .map(|r| {
            (
                r.server_names.clone(),
                r.alpn.clone(),
                config.pool(r.pool).name.clone(),
            )
        })
        .collect()
}

/// The keys of a virtual server's traffic settings (rules, request id, client address,
/// limits) that differ, every field named.
fn traffic_keys(old: &Traffic, new: &Traffic) -> Vec<&'static str> {
    let Traffic {
        rules,
        request_id,
        client_address,
        rate_limits,
        concurrency_limits,
        client_connections,
    } = old;
    [
        (*rules != new.rules, "rules"),
        (*request_id != new.request_id, "request_id"),
        (*client_address != new.client_address, "client_address"),
        (*rate_limits != new.rate_limits, "rate_limits"),
        (
            *concurrency_limits != new.concurrency_limits,
            "concurrency_limits",
        ),
        (
            *client_connections != new.client_connections,
            "client_connections",
        ),
    ]
    .into_iter()
    .filter_map(|(changed, name)| changed.then_some(name))
    .collect()
}

/// The keys of a pool that differ; like [`virtual_server_keys`], every field is named.
fn pool_keys(old: &Pool, new: &Pool) -> Vec<String> {
    let Pool {
        name: _,
        nodes,
        algorithm,
        connections,
        timeouts,
        retries,
        health,
        passive_health,
        fail_open,
        tls,
        protocol,
        http2,
        hash,
        persistence,
        proxy_protocol,
        names,
        dns,
    } = old;
    let mut keys = Vec::new();
    let mut key = |changed: bool, name: &str| {
        if changed {
            keys.push(name.to_owned());
        }
    };
    key(*nodes != new.nodes || *names != new.names, "nodes");
    key(*dns != new.dns, "dns");
    key(*algorithm != new.algorithm, "algorithm");
    key(*hash != new.hash, "hash");
    key(*persistence != new.persistence, "persistence");
    key(*connections != new.connections, "connections");
    key(*timeouts != new.timeouts, "timeouts");
    key(*retries != new.retries, "retries");
    key(*health != new.health, "health");
    key(*passive_health != new.passive_health, "passive_health");
    key(*fail_open != new.fail_open, "fail_open");
    key(*tls != new.tls, "tls");
    key(*protocol != new.protocol, "protocol");
    key(*http2 != new.http2, "http2");
    key(*proxy_protocol != new.proxy_protocol, "proxy_protocol");
    keys
}

/// A pool entry as the diff compares it: what identifies it within the pool, and the
/// settings an operator changes on it.
trait Entry {
    /// The entry's identity: its address, or the label of its name.
    fn id(&self) -> (Option<SocketAddr>, Option<String>);
    fn weight(&self) -> std::num::NonZeroU32;
    fn state(&self) -> crate::model::NodeMode;
}

impl Entry for Node {
    fn id(&self) -> (Option<SocketAddr>, Option<String>) {
        (Some(self.address), None)
    }
    fn weight(&self) -> std::num::NonZeroU32 {
        self.weight
    }
    fn state(&self) -> crate::model::NodeMode {
        self.state
    }
}

impl Entry for NamedNode {
    fn id(&self) -> (Option<SocketAddr>, Option<String>) {
        (None, Some(self.label()))
    }
    fn weight(&self) -> std::num::NonZeroU32 {
        self.weight
    }
    fn state(&self) -> crate::model::NodeMode {
        self.state
    }
}

/// The entries of one pool added, removed or changed (`weight`, `state`), matched by their
/// identity: nodes given by address by it, those given by DNS name by their label.
fn node_changes<E: Entry>(pool: &str, old: &[E], new: &[E]) -> Vec<NodeChange> {
    let change = |entry: &E, change, keys| {
        let (address, name) = entry.id();
        NodeChange {
            pool: pool.to_owned(),
            address,
            name,
            change,
            keys,
        }
    };
    let mut changes = Vec::new();
    for entry in new {
        match old.iter().find(|o| o.id() == entry.id()) {
            None => changes.push(change(entry, NodeChangeKind::Added, Vec::new())),
            Some(before) => {
                let mut keys = Vec::new();
                if before.weight() != entry.weight() {
                    keys.push("weight".to_owned());
                }
                if before.state() != entry.state() {
                    keys.push("state".to_owned());
                }
                if !keys.is_empty() {
                    changes.push(change(entry, NodeChangeKind::Changed, keys));
                }
            }
        }
    }
    for entry in old {
        if !new.iter().any(|n| n.id() == entry.id()) {
            changes.push(change(entry, NodeChangeKind::Removed, Vec::new()));
        }
    }
    changes
}

fn listener_changes(old: &Config, new: &Config) -> ListenerChanges {
    let before = listeners(old);
    let after = listeners(new);
    let before_by_address: HashMap<SocketAddr, (&str, ListenOptions)> =
        before.iter().map(|&(a, n, o)| (a, (n, o))).collect();
    let after_addresses: std::collections::HashSet<SocketAddr> =
        after.iter().map(|&(a, _, _)| a).collect();
    let listener = |address: SocketAddr, name: &str| Listener {
        address,
        virtual_server: name.to_owned(),
    };
    let mut changes = ListenerChanges::default();
    for &(address, name, options) in &after {
        match before_by_address.get(&address) {
            None => changes.added.push(listener(address, name)),
            Some(&(old_name, old_options)) if old_name != name || old_options != options => {
                changes.rebound.push(listener(address, name));
            }
            Some(_) => {}
        }
    }
    for &(address, name, _) in &before {
        if !after_addresses.contains(&address) {
            changes.removed.push(listener(address, name));
        }
    }
    changes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pools: &str, servers: &str) -> Config {
        crate::parse_str(&format!("{pools}\n{servers}"), "t.toml").unwrap()
    }

    const WEB: &str = "[virtual_servers.web]\nlisten = \"127.0.0.1:8080\"\npool = \"a\"\n";

    #[test]
    fn same_config_is_empty() {
        let pools = "[pools.a]\nnodes = [{ address = \"127.0.0.1:1\" }]\n";
        let diff = diff(&config(pools, WEB), &config(pools, WEB));
        assert!(diff.is_empty(), "{diff:?}");
        assert_eq!(diff.summary(), "no changes");
    }

    #[test]
    fn nodes_are_matched_by_address() {
        let old = config(
            "[pools.a]\nnodes = [{ address = \"127.0.0.1:1\" }, { address = \"127.0.0.1:2\" }]\n",
            WEB,
        );
        let new = config(
            "[pools.a]\nnodes = [{ address = \"127.0.0.1:2\", weight = 5 }, \
             { address = \"127.0.0.1:3\", state = \"draining\" }]\n",
            WEB,
        );
        let diff = diff(&old, &new);
        let kinds: Vec<(u16, NodeChangeKind, Vec<String>)> = diff
            .nodes
            .iter()
            .map(|c| {
                (
                    c.address.expect("an address").port(),
                    c.change,
                    c.keys.clone(),
                )
            })
            .collect();
        assert_eq!(
            kinds,
            vec![
                (2, NodeChangeKind::Changed, vec!["weight".to_owned()]),
                (3, NodeChangeKind::Added, vec![]),
                (1, NodeChangeKind::Removed, vec![]),
            ]
        );
        assert_eq!(diff.pools.changed[0].keys, vec!["nodes"]);
        assert!(diff.virtual_servers.changed.is_empty());
    }

    /// Entries given by DNS name are matched by their name, and listed by it.
    #[test]
    fn nodes_given_by_name_are_matched_by_name() {
        let old = config(
            "[pools.a]\nnodes = [{ address = \"app.test:80\" }, { address = \"old.test:80\" }, \
             { srv = \"_http._tcp.api.test\" }]\n",
            WEB,
        );
        let new = config(
            "[pools.a]\nnodes = [{ address = \"APP.test.:80\", state = \"draining\" }, \
             { srv = \"_http._tcp.api.test\", weight = 3 }, { address = \"new.test:80\" }]\n",
            WEB,
        );
        let diff = diff(&old, &new);
        let kinds: Vec<(Option<&str>, NodeChangeKind, Vec<String>)> = diff
            .nodes
            .iter()
            .map(|c| (c.name.as_deref(), c.change, c.keys.clone()))
            .collect();
        assert_eq!(
            kinds,
            vec![
                (
                    Some("app.test:80"),
                    NodeChangeKind::Changed,
                    vec!["state".to_owned()]
                ),
                (
                    Some("srv:_http._tcp.api.test"),
                    NodeChangeKind::Changed,
                    vec!["weight".to_owned()]
                ),
                (Some("new.test:80"), NodeChangeKind::Added, vec![]),
                (Some("old.test:80"), NodeChangeKind::Removed, vec![]),
            ]
        );
        assert!(diff.nodes.iter().all(|c| c.address.is_none()));
        let json = serde_json::to_string(&diff.nodes[0]).unwrap();
        assert_eq!(
            json,
            r#"{"pool":"a","name":"app.test:80","change":"changed","keys":["state"]}"#
        );
        assert!(
            diff.summary().ends_with("4 node changes"),
            "{}",
            diff.summary()
        );
    }

    #[test]
    fn every_table_of_a_virtual_server_and_a_pool_is_compared() {
        let pools = "[pools.a]\nnodes = [{ address = \"127.0.0.1:1\" }]\n";
        let old = config(pools, WEB);
        for (extra, key) in [
            (
                "[virtual_servers.web.http2]\nmax_concurrent_streams = 7\n",
                "http2",
            ),
            ("[virtual_servers.web.http]\nupgrades = []\n", "http"),
            ("[virtual_servers.web.cache]\nsize = \"64MiB\"\n", "cache"),
            (
                "[virtual_servers.web.compression]\nalgorithms = [\"gzip\"]\n",
                "compression",
            ),
            (
                "[virtual_servers.web.request_id]\nheader = \"X-Trace\"\n",
                "request_id",
            ),
        ] {
            let new = config(pools, &format!("{WEB}{extra}"));
            let diff = diff(&old, &new);
            assert_eq!(diff.virtual_servers.changed.len(), 1, "{extra}: {diff:?}");
            assert_eq!(diff.virtual_servers.changed[0].keys, vec![key], "{extra}");
        }
        for (extra, key) in [
            ("protocol = \"h2c\"\n", "protocol"),
            ("[pools.a.http2]\nmax_concurrent_streams = 3\n", "http2"),
        ] {
            let new = config(&format!("{pools}{extra}"), WEB);
            let diff = diff(&old, &new);
            assert_eq!(diff.pools.changed.len(), 1, "{extra}: {diff:?}");
            assert_eq!(diff.pools.changed[0].keys, vec![key], "{extra}");
        }
    }

    #[test]
    fn listeners_are_added_removed_and_rebound() {
        let pools = "[pools.a]\nnodes = [{ address = \"127.0.0.1:1\" }]\n";
        let old = config(
            pools,
            "[virtual_servers.web]\nlisten = [\"127.0.0.1:8080\", \"127.0.0.1:8081\"]\npool = \"a\"\n",
        );
        let new = config(
            pools,
            "[virtual_servers.web]\nlisten = [\"127.0.0.1:8082\"]\npool = \"a\"\n\
             [virtual_servers.api]\nlisten = \"127.0.0.1:8081\"\npool = \"a\"\n",
        );
        let diff = diff(&old, &new);
        let ports = |list: &[Listener]| list.iter().map(|l| l.address.port()).collect::<Vec<_>>();
        assert_eq!(ports(&diff.listeners.added), vec![8082]);
        assert_eq!(ports(&diff.listeners.removed), vec![8080]);
        assert_eq!(ports(&diff.listeners.rebound), vec![8081]);
        assert_eq!(diff.listeners.rebound[0].virtual_server, "api");
        assert_eq!(diff.virtual_servers.added, vec!["api"]);
        assert_eq!(diff.virtual_servers.changed[0].keys, vec!["listen"]);
    }

    #[test]
    fn a_new_backlog_or_deferred_accept_rebinds_the_listener_in_place() {
        let pools = "[pools.a]\nnodes = [{ address = \"127.0.0.1:1\" }]\n";
        let old = config(pools, WEB);
        for (extra, key) in [
            ("defer_accept = false\n", "defer_accept"),
            ("backlog = 64\n", "backlog"),
        ] {
            let new = config(pools, &format!("{WEB}{extra}"));
            let diff = diff(&old, &new);
            assert_eq!(diff.listeners.rebound.len(), 1, "{extra}");
            assert!(diff.listeners.added.is_empty() && diff.listeners.removed.is_empty());
            assert_eq!(diff.virtual_servers.changed[0].keys, vec![key]);
        }
    }

    #[test]
    fn pool_references_compare_by_name() {
        // Pool ids are positions: adding a pool before "a" must not read as a change of
        // the virtual server's pool.
        let old = config("[pools.a]\nnodes = [{ address = \"127.0.0.1:1\" }]\n", WEB);
        let new = config(
            "[pools.z]\nnodes = [{ address = \"127.0.0.1:9\" }]\n\
             [pools.a]\nnodes = [{ address = \"127.0.0.1:1\" }]\n",
            WEB,
        );
        let diff = diff(&old, &new);
        assert!(diff.virtual_servers.changed.is_empty(), "{diff:?}");
        assert_eq!(diff.pools.added, vec!["z"]);
    }

    #[test]
    fn layer4_keys_are_reported() {
        let pools = "[pools.a]\nnodes = [{ address = \"127.0.0.1:1\" }]\n\
                     [pools.b]\nnodes = [{ address = \"127.0.0.1:2\" }]\n";
        let old = config(
            pools,
            "[virtual_servers.db]\nlisten = \"127.0.0.1:6432\"\nprotocol = \"tcp\"\npool = \"a\"\n",
        );
        let new = config(
            &pools.replace("[pools.a]", "[pools.a]\nproxy_protocol = \"v1\""),
            "[virtual_servers.db]\nlisten = \"127.0.0.1:6432\"\nprotocol = \"tcp\"\npool = \"a\"\n\
             [virtual_servers.db.tcp]\nidle_timeout = \"1s\"\n\
             [virtual_servers.db.proxy_protocol]\ntrusted = [\"127.0.0.1/32\"]\n\
             [[virtual_servers.db.passthrough]]\nserver_names = [\"x.example\"]\npool = \"b\"\n",
        );
        let diff = diff(&old, &new);
        assert_eq!(
            diff.virtual_servers.changed[0].keys,
            vec!["tcp", "accept_proxy", "passthrough"]
        );
        assert_eq!(diff.pools.changed[0].keys, vec!["proxy_protocol"]);
    }

    #[test]
    fn restart_only_settings_are_compared_with_what_the_process_runs() {
        let pools = "[pools.a]\nnodes = [{ address = \"127.0.0.1:1\" }]\n";
        let running = config(&format!("[runtime]\nthreads = 2\n{pools}"), WEB);
        let applied = config(
            &format!("[runtime]\nthreads = 1\n[log]\nlevel = \"debug\"\n{pools}"),
            WEB,
        );
        // Back to the running value: nothing waits for a restart.
        let reverted = config(&format!("[runtime]\nthreads = 2\n{pools}"), WEB);
        let diff = diff_running(&applied, &running, &reverted);
        assert!(diff.needs_restart.is_empty(), "{:?}", diff.needs_restart);
        // An unrelated change keeps the pending ones listed.
        let other = config(
            &format!(
                "[runtime]\nthreads = 1\ndrain_timeout = \"3s\"\n[log]\nlevel = \"debug\"\n{pools}"
            ),
            WEB,
        );
        let diff = diff_running(&applied, &running, &other);
        assert_eq!(diff.needs_restart, ["runtime.threads", "log.level"]);
        assert_eq!(diff.settings, ["runtime.drain_timeout"]);
    }

    #[test]
    fn serialises_for_the_api() {
        let old = config("[pools.a]\nnodes = [{ address = \"127.0.0.1:1\" }]\n", WEB);
        let new = config(
            "[runtime]\nthreads = 2\n[pools.a]\nnodes = [{ address = \"127.0.0.1:1\", weight = 2 }]\n",
            WEB,
        );
        let json = serde_json::to_string(&diff(&old, &new)).unwrap();
        assert!(
            json.contains(r#""nodes":[{"pool":"a","address":"127.0.0.1:1","change":"changed","keys":["weight"]}]"#),
            "{json}"
        );
        assert!(
            json.contains(r#""needs_restart":["runtime.threads"]"#),
            "{json}"
        );
    }
}
