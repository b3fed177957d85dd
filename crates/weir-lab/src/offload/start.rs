//! Starting one phase's processes: the capped origin, then weir or a peer in front of it
//! with its `bench/lab/` offload config.

use std::net::SocketAddr;
use std::time::Duration;

use super::{Plan, Route};
use crate::error::LabError;
use crate::launch::Launcher;
use crate::peers::Peer;
use crate::process::{Child, free_ports, loopback};
use crate::template;

/// The processes of one phase.
pub(super) struct Running {
    pub origin: Child,
    pub origin_port: u16,
    pub proxy: Option<RunningProxy>,
    pub target: SocketAddr,
}

/// weir or a peer between the clients and the origin.
pub(super) struct RunningProxy {
    pub child: Child,
    /// weir's admin listener (its gauges); `None` for a peer.
    pub admin: Option<SocketAddr>,
}

pub(super) async fn start(
    launcher: &Launcher,
    plan: &Plan<'_>,
    route: Route,
) -> Result<Running, LabError> {
    let settings = plan.settings;
    let ports = free_ports(3)?;
    let (origin_port, proxy_port, admin_port) = (ports[0], ports[1], ports[2]);
    let origin = match &plan.nginx {
        Some(program) => {
            let config = template::render(
                template::NGINX_ORIGIN,
                &[
                    ("PORT", origin_port.to_string()),
                    ("WORKER_CONNECTIONS", (settings.origin_cap + 1).to_string()),
                ],
            )?;
            launcher
                .nginx(
                    program,
                    "origin-nginx",
                    &config,
                    &[(loopback(origin_port), "/")],
                )
                .await?
        }
        None => {
            let args = [
                "--max-connections".to_owned(),
                settings.origin_cap.to_string(),
                "--per-connection-memory".to_owned(),
                settings.connection_memory.to_string(),
            ];
            launcher
                .weir_origin("origin", origin_port, &args, false)
                .await?
        }
    };
    let proxied = ProxyPorts {
        proxy: proxy_port,
        admin: admin_port,
        origin: origin_port,
    };
    let (proxy, target) = match route {
        Route::Direct => (None, loopback(origin_port)),
        Route::Weir => (
            Some(start_weir(launcher, plan, &proxied).await?),
            loopback(proxy_port),
        ),
        Route::Peer(peer) => (
            Some(start_peer(launcher, plan, &proxied, peer).await?),
            loopback(proxy_port),
        ),
    };
    Ok(Running {
        origin,
        origin_port,
        proxy,
        target,
    })
}

/// Where a proxy between the clients and the origin listens, and where the origin does.
struct ProxyPorts {
    proxy: u16,
    admin: u16,
    origin: u16,
}

/// The values every proxy's offload config shares: its port, the origin's, its threads, the
/// cap to the origin, the client timeouts.
fn proxy_values(plan: &Plan<'_>, ports: &ProxyPorts) -> Vec<(&'static str, String)> {
    let settings = plan.settings;
    // Timeouts well past a client's silence: one interval before its first request.
    let client_timeout = (settings.interval * 4).max(Duration::from_secs(60));
    vec![
        ("PROXY_PORT", ports.proxy.to_string()),
        ("ORIGIN_PORT", ports.origin.to_string()),
        ("THREADS", settings.proxy_threads.to_string()),
        ("POOL_CAP", settings.pool_cap().to_string()),
        ("CLIENT_TIMEOUT", format!("{}s", client_timeout.as_secs())),
    ]
}

/// Room for every client of the lab.
fn client_limit(plan: &Plan<'_>) -> u32 {
    plan.clients + 100
}

async fn start_weir(
    launcher: &Launcher,
    plan: &Plan<'_>,
    ports: &ProxyPorts,
) -> Result<RunningProxy, LabError> {
    let mut values = proxy_values(plan, ports);
    values.push(("ADMIN_PORT", ports.admin.to_string()));
    values.push(("CLIENT_LIMIT", client_limit(plan).to_string()));
    let config = template::render(template::WEIR_OFFLOAD, &values)?;
    let admin = loopback(ports.admin);
    let ready = [
        (admin, "/healthz"),
        (loopback(ports.proxy), plan.settings.path.as_str()),
    ];
    let child = launcher.weir_serve("weir", &config, &ready, &[]).await?;
    Ok(RunningProxy {
        child,
        admin: Some(admin),
    })
}

async fn start_peer(
    launcher: &Launcher,
    plan: &Plan<'_>,
    ports: &ProxyPorts,
    peer: Peer,
) -> Result<RunningProxy, LabError> {
    let program = plan
        .peers
        .iter()
        .find(|(installed, _, _)| *installed == peer)
        .map(|(_, program, _)| program.clone())
        .ok_or_else(|| LabError::Invalid(format!("{} is not installed", peer.name())))?;
    let mut values = proxy_values(plan, ports);
    let ready = [(loopback(ports.proxy), plan.settings.path.as_str())];
    let child = match peer {
        Peer::Haproxy => {
            values.push(("CLIENT_LIMIT", client_limit(plan).to_string()));
            let config = template::render(template::HAPROXY_OFFLOAD, &values)?;
            launcher
                .haproxy(&program, "haproxy", &config, &ready)
                .await?
        }
        Peer::Nginx => {
            // Client and origin connections share nginx's worker_connections, and nginx
            // starts closing idle keep-alive connections once fewer than a sixteenth of them
            // are free: room for every connection with that sixteenth to spare.
            let connections = (client_limit(plan) + plan.settings.pool_cap()) * 16 / 15 + 100;
            values.push(("WORKER_CONNECTIONS", connections.to_string()));
            let config = template::render(template::NGINX_OFFLOAD, &values)?;
            launcher.nginx(&program, "nginx", &config, &ready).await?
        }
    };
    Ok(RunningProxy { child, admin: None })
}
