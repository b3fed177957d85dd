//! The JSON documents the API returns: the running model, the status of every virtual
//! server, pool and node, and the stats snapshot. Field names are listed in
//! `docs/admin-api.md`.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use weir_config::{Algorithm, Config, Protocol};
use weir_observe::Metrics;
use weir_observe::stats::{self, BUCKETS};
use weir_proxy::{Live, Model, ReloadRecord};
use weir_upstream::Pool;

/// The running model: what the configuration says, by generation.
pub(crate) fn model(model: &Model, last: Option<&ReloadRecord>) -> Value {
    let config = &model.config;
    json!({
        "generation": model.generation,
        "loaded_at": unix(model.loaded_at),
        // Absolute (against weir's working directory), so that `weir reload --config FILE`
        // run from elsewhere can tell whether FILE is the one this weir reads.
        "source": config.source.as_ref().map(|path| {
            std::path::absolute(path).unwrap_or_else(|_| path.clone()).display().to_string()
        }),
        "virtual_servers": config.virtual_servers.iter().map(|vs| json!({
            "name": vs.name,
            "listen": vs.listen.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "protocol": match vs.protocol {
                Protocol::Http => "http",
                Protocol::Https => "https",
                Protocol::Tcp => "tcp",
                Protocol::Tls => "tls",
            },
            "pool": config.pool(vs.default_pool).name,
            "routes": vs.routes.iter().map(|route| json!({
                "host": route.host,
                "path_prefix": route.path_prefix,
                "pool": config.pool(route.pool).name,
            })).collect::<Vec<_>>(),
            "max_connections": vs.limits.max_connections,
        })).collect::<Vec<_>>(),
        "pools": config.pools.iter().map(|pool| json!({
            "name": pool.name,
            "algorithm": algorithm(pool.algorithm),
            "nodes": pool.nodes.iter().map(|node| json!({
                "address": node.address.to_string(),
                "weight": node.weight.get(),
                "state": node.state.as_str(),
            })).chain(pool.names.iter().map(|named| json!({
                "address": named.label(),
                "weight": named.weight.get(),
                "state": named.state.as_str(),
                "resolved": true,
            }))).collect::<Vec<_>>(),
            "retries": pool.retries,
            "fail_open": pool.fail_open,
            "max_connections_per_node": pool.connections.max_connections.get(),
            "health_monitor": pool.health.is_some(),
            "tls": pool.tls.is_some(),
        })).collect::<Vec<_>>(),
        "last_reload": last.map(reload),
    })
}

/// The outcome of a reload.
pub(crate) fn reload(record: &ReloadRecord) -> Value {
    json!({
        "at": unix(record.at),
        "generation": record.generation,
        "applied": record.error.is_none(),
        "error": record.error,
        "summary": record.summary,
    })
}

/// Every virtual server, pool and node now.
pub(crate) fn status(live: &Live) -> Value {
    let model = live.current();
    let addrs = live.local_addrs();
    json!({
        "generation": model.generation,
        "virtual_servers": model.virtual_servers.iter().map(|vs| json!({
            "name": vs.config.name,
            "listen": addrs.iter().filter(|(name, _)| *name == vs.config.name)
                .map(|(_, addr)| addr.to_string()).collect::<Vec<_>>(),
            "connections_open": vs.metrics.connections_open.get(),
            "connections_accepted": vs.metrics.connections_accepted.get(),
            "requests": vs.metrics.requests.iter().map(|c| c.get()).sum::<u64>(),
            "pool": vs.default_pool.name,
        })).collect::<Vec<_>>(),
        "pools": model.pools.iter().map(|pool| pool_status(pool)).collect::<Vec<_>>(),
    })
}

fn pool_status(pool: &Pool) -> Value {
    let now = Instant::now();
    json!({
        "name": pool.name,
        "algorithm": algorithm(pool.config.algorithm),
        "queue_length": pool.metrics.queue_length.get(),
        "requests": pool.metrics.requests.iter().map(|c| c.get()).sum::<u64>(),
        "nodes": pool.nodes.iter().zip(&pool.connections).enumerate().map(|(index, (node, connections))| {
            let metrics = &node.metrics;
            // An `h2`/`h2c` pool's requests wait for and use the node's HTTP/2 side; its
            // HTTP/1.1 side still counts the connections that became tunnels.
            let (queued, open, idle) = match pool.http2.get(index) {
                Some(h2) => (h2.queued(), h2.open() as usize, h2.idle()),
                None => (connections.queued(), connections.open() as usize, connections.idle()),
            };
            // Nodes are built in the order of the pool's (resolved) config.
            let name = pool.config.nodes.get(index).and_then(|config| config.name.clone());
            json!({
                "address": node.address.to_string(),
                "name": name,
                "weight": node.weight(),
                "state": node.mode().as_str(),
                "healthy": node.is_healthy(now),
                "monitor_up": node.is_active_up(),
                "ejected": node.is_ejected(now),
                "in_flight": node.in_flight(),
                "tunnels": node.tunnels(),
                "queue_length": queued,
                "response_time_ewma_ms": node.response_time().map(|d| d.as_secs_f64() * 1000.0),
                "connections_open": open + connections.tunnelled() as usize,
                "connections_idle": idle,
                "connections_created": metrics.connections_created.get(),
                "connections_reused": metrics.connections_reused.get(),
                "requests_forwarded": metrics.requests_forwarded.get(),
                "connect_failures": metrics.connect_failures.get(),
                "responses_5xx": metrics.responses_5xx.get(),
            })
        }).collect::<Vec<_>>(),
    })
}

/// Totals, ratios and latency since start; the dashboard turns two of these into rates.
pub(crate) fn stats(live: &Live, metrics: &Metrics) -> Value {
    let totals = metrics.totals();
    let counts = metrics.latency().snapshot();
    let quantile = |q| stats::quantile(&counts, q);
    let [r1, r2, r3, r4, r5] = totals.responses;
    json!({
        "time": unix(SystemTime::now()),
        "generation": live.generation(),
        "client_connections_open": totals.client_connections_open,
        "client_connections_accepted": totals.client_connections_accepted,
        "upstream_connections_open": totals.upstream_connections_open,
        "offload_ratio": metrics.offload_ratio(),
        "requests": r1 + r2 + r3 + r4 + r5,
        "responses": { "1xx": r1, "2xx": r2, "3xx": r3, "4xx": r4, "5xx": r5 },
        "bad_requests": totals.bad_requests,
        "upstream": {
            "connections_created": totals.upstream_connections_created,
            "connections_reused": totals.upstream_connections_reused,
            "requests_forwarded": totals.requests_forwarded,
            "connect_failures": totals.connect_failures,
            "reuse_ratio": metrics.reuse_ratio(),
        },
        "tls_handshakes": {
            "full": totals.tls_handshakes_full,
            "resumed": totals.tls_handshakes_resumed,
        },
        "latency_us": {
            "p50": quantile(0.5),
            "p90": quantile(0.9),
            "p99": quantile(0.99),
            "p999": quantile(0.999),
            "max": quantile(1.0),
        },
        "latency_histogram": {
            "upper_us": (0..BUCKETS).map(stats::bucket_upper).collect::<Vec<_>>(),
            "counts": counts,
        },
        "last_reload": live.last_reload().as_ref().map(reload),
    })
}

/// A validation error list: file, line, key and message of each problem.
pub(crate) fn config_errors(error: &weir_config::ConfigError) -> Value {
    json!({
        "valid": false,
        "error": error.to_string(),
        "errors": error.errors.iter().map(|d| json!({
            "file": error.file,
            "line": d.line,
            "key": d.path,
            "message": d.message,
        })).collect::<Vec<_>>(),
    })
}

/// The generation and what changed, after a candidate was applied (or would be).
pub(crate) fn diff(diff: &weir_config::diff::ConfigDiff) -> Value {
    serde_json::to_value(diff).unwrap_or(Value::Null)
}

/// Whether `config` can be changed through its file (the API writes the file first).
pub(crate) fn writable(config: &Config) -> bool {
    config.source.is_some()
}

fn algorithm(algorithm: Algorithm) -> &'static str {
    match algorithm {
        Algorithm::RoundRobin => "round_robin",
        Algorithm::WeightedRoundRobin => "weighted_round_robin",
        Algorithm::LeastConnections => "least_connections",
        Algorithm::Perceptive => "perceptive",
        Algorithm::ConsistentHash => "consistent_hash",
    }
}

fn unix(time: SystemTime) -> f64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0.0, |since| since.as_secs_f64())
}
