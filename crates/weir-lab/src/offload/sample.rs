//! The offload experiment's sampler: once a sampling period, the clients' gauges, the
//! origin's open connections, weir's gauges and everyone's memory.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::time::Instant;

use super::{OffloadSettings, Route};
use crate::clients::{LoadCounters, LoadSettings};
use crate::launch::{tree_cpu_seconds, tree_memory_kib};
use crate::model::Sample;
use crate::{Lab, http, metrics, procfs};

/// Where the sampler looks.
pub(super) struct Probe<'a> {
    pub origin_pids: &'a [u32],
    /// The origin's CPU seconds when the load started.
    pub origin_cpu_before: f64,
    /// The origin's listeners and Unix sockets, so its connections can be told apart.
    pub not_connections: procfs::NotConnections,
    /// The proxy's processes (none direct).
    pub proxy_pids: &'a [u32],
    /// weir's admin address (its gauges); `None` direct and for a peer.
    pub admin: Option<SocketAddr>,
}

/// Samples once a period until the load's last send.
pub(super) async fn sample(
    lab: &Lab,
    route: Route,
    load: &LoadSettings,
    counters: &LoadCounters,
    probe: &Probe<'_>,
    start: Instant,
    settings: &OffloadSettings,
) -> Vec<Sample> {
    let mut samples = Vec::new();
    let mut tick = start;
    loop {
        tick += settings.sample_every;
        if tick > start + load.duration + Duration::from_millis(1) {
            break;
        }
        tokio::time::sleep_until(tick).await;
        // A slow sample (a busy machine) skips the ticks it overran rather than bunching.
        let now = Instant::now();
        while tick + settings.sample_every <= now {
            tick += settings.sample_every;
        }
        let elapsed = start.elapsed();
        let origin_connections = probe.not_connections.connections_of(probe.origin_pids);
        let (proxy_clients, proxy_upstream) = match probe.admin {
            Some(admin) => {
                let page = weir_metrics(admin).await;
                (
                    metrics::sum(&page, "weir_client_connections_open", None).map(|v| v as u64),
                    metrics::sum(&page, "weir_upstream_connections_open", None).map(|v| v as u64),
                )
            }
            None => (None, None),
        };
        let proxy_rss = (!probe.proxy_pids.is_empty()).then(|| tree_memory_kib(probe.proxy_pids).0);
        let sample = Sample {
            t_s: elapsed.as_secs_f64(),
            clients_started: load.started_by(elapsed),
            clients_connected: counters.connected(),
            clients_held: counters.held(),
            origin_connections,
            proxy_clients,
            proxy_upstream,
            requests_ok: counters.ok.load(std::sync::atomic::Ordering::Relaxed),
            errors: counters.errors().total(),
            connect_ms_p99: counters.take_connect_p99(),
            origin_rss_kib: tree_memory_kib(probe.origin_pids).0,
            origin_cpu_s: tree_cpu_seconds(probe.origin_pids) - probe.origin_cpu_before,
            proxy_rss_kib: proxy_rss,
        };
        lab.say(&format!(
            "offload, {}: t={:>5.1}s started {} held {} connected {} origin {}{} ok {} errors {}",
            route.label(),
            sample.t_s,
            sample.clients_started,
            sample.clients_held,
            sample.clients_connected,
            sample.origin_connections,
            sample
                .proxy_upstream
                .map_or(String::new(), |up| format!(" (weir pool {up})")),
            sample.requests_ok,
            sample.errors,
        ));
        samples.push(sample);
    }
    samples
}

/// weir's `/metrics` page (empty if it does not answer).
pub(super) async fn weir_metrics(admin: SocketAddr) -> String {
    http::get(admin, "/metrics", Duration::from_secs(1))
        .await
        .map(|response| String::from_utf8_lossy(&response.body).into_owned())
        .unwrap_or_default()
}
