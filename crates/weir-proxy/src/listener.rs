//! Listeners: bind every address up front, then the accept → admit stages,
//! and the drain on shutdown.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use weir_config::Config;
use weir_core::ShutdownSignal;
use weir_observe::Metrics;
use weir_upstream::Pool;

use crate::drain::Drain;
use crate::pipeline;
use crate::route::VirtualServerRuntime;

/// The proxy built from a config: pools and virtual servers, no sockets yet.
#[derive(Debug)]
pub struct Proxy {
    pub pools: Vec<Arc<Pool>>,
    pub virtual_servers: Vec<Arc<VirtualServerRuntime>>,
    drain_timeout: Duration,
}

/// A proxy whose listeners are bound.
#[derive(Debug)]
pub struct BoundProxy {
    proxy: Proxy,
    listeners: Vec<(Arc<VirtualServerRuntime>, std::net::TcpListener)>,
}

impl Proxy {
    /// Builds pools and virtual servers from a validated config.
    pub fn build(config: &Config, metrics: &Arc<Metrics>) -> Proxy {
        let pools: Vec<Arc<Pool>> = config
            .pools
            .iter()
            .map(|pool| Pool::new(pool, metrics))
            .collect();
        let virtual_servers = config
            .virtual_servers
            .iter()
            .map(|vs| {
                Arc::new(VirtualServerRuntime::new(
                    vs,
                    &pools,
                    metrics.virtual_server(&vs.name),
                    config.log.access_log,
                ))
            })
            .collect();
        Proxy {
            pools,
            virtual_servers,
            drain_timeout: config.runtime.drain_timeout,
        }
    }

    /// Builds the proxy and binds every listen address. Fails, naming the
    /// address, before anything is served.
    pub fn bind(config: &Config, metrics: &Arc<Metrics>) -> io::Result<BoundProxy> {
        Proxy::build(config, metrics).bind_listeners()
    }

    fn bind_listeners(self) -> io::Result<BoundProxy> {
        let mut listeners = Vec::new();
        for vs in &self.virtual_servers {
            for &address in &vs.config.listen {
                let listener = bind_tcp(address, vs.config.backlog).map_err(|error| {
                    io::Error::new(
                        error.kind(),
                        format!(
                            "virtual server {}: cannot listen on {address}: {error}",
                            vs.config.name
                        ),
                    )
                })?;
                listeners.push((Arc::clone(vs), listener));
            }
        }
        Ok(BoundProxy {
            proxy: self,
            listeners,
        })
    }
}

/// A listening socket with address reuse and the configured backlog.
pub fn bind_tcp(address: SocketAddr, backlog: u32) -> io::Result<std::net::TcpListener> {
    let socket = Socket::new(
        Domain::for_address(address),
        Type::STREAM,
        Some(Protocol::TCP),
    )?;
    socket.set_reuse_address(true)?;
    if address.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&address.into())?;
    socket.listen(backlog.min(i32::MAX as u32) as i32)?;
    Ok(socket.into())
}

impl BoundProxy {
    /// The bound addresses, by virtual server name (port 0 resolved).
    pub fn local_addrs(&self) -> Vec<(String, SocketAddr)> {
        self.listeners
            .iter()
            .filter_map(|(vs, listener)| {
                Some((vs.config.name.clone(), listener.local_addr().ok()?))
            })
            .collect()
    }

    pub fn pools(&self) -> &[Arc<Pool>] {
        &self.proxy.pools
    }

    /// Serves until `shutdown` triggers, then stops accepting, lets
    /// in-flight requests finish (up to the drain timeout) and returns.
    pub async fn run(self, shutdown: ShutdownSignal) -> io::Result<()> {
        let drain = Arc::new(Drain::default());
        let mut background: Vec<JoinHandle<()>> = Vec::new();
        for pool in &self.proxy.pools {
            background.extend(pool.start(shutdown.clone()));
        }
        let mut acceptors = Vec::new();
        for (vs, listener) in self.listeners {
            let listener = TcpListener::from_std(listener)?;
            acceptors.push(tokio::spawn(accept_loop(
                listener,
                vs,
                Arc::clone(&drain),
                shutdown.clone(),
            )));
        }
        let mut stop = shutdown.clone();
        stop.triggered().await;
        for acceptor in acceptors {
            let _ = acceptor.await;
        }
        let open = drain.active();
        if open > 0 {
            tracing::info!(connections = open, timeout = ?self.proxy.drain_timeout, "draining client connections");
        }
        if tokio::time::timeout(self.proxy.drain_timeout, drain.wait_idle())
            .await
            .is_err()
        {
            tracing::warn!(
                connections = drain.active(),
                "drain timeout reached; closing remaining connections"
            );
        }
        for task in background {
            let _ = task.await;
        }
        Ok(())
    }
}

/// accept → admit → spawn the pipeline, until shutdown.
async fn accept_loop(
    listener: TcpListener,
    vs: Arc<VirtualServerRuntime>,
    drain: Arc<Drain>,
    mut shutdown: ShutdownSignal,
) {
    let max = vs.config.limits.max_connections;
    loop {
        let accepted = tokio::select! {
            biased;
            _ = shutdown.triggered() => return,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(pair) => pair,
            Err(error) => {
                // Out of file descriptors or similar: back off instead of spinning.
                tracing::warn!(virtual_server = %vs.config.name, %error, "accept failed");
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        // admit
        if vs.open.fetch_add(1, Ordering::AcqRel) >= max {
            vs.open.fetch_sub(1, Ordering::AcqRel);
            vs.metrics.connections_rejected.inc();
            tracing::debug!(virtual_server = %vs.config.name, client = %peer, "connection limit reached; closing");
            drop(stream);
            continue;
        }
        let _ = stream.set_nodelay(true);
        vs.metrics.connections_accepted.inc();
        vs.metrics.connections_open.inc();
        let guard = drain.enter();
        let vs = Arc::clone(&vs);
        let signal = shutdown.clone();
        tokio::spawn(async move {
            pipeline::serve_connection(stream, peer, Arc::clone(&vs), signal).await;
            vs.open.fetch_sub(1, Ordering::AcqRel);
            vs.metrics.connections_open.dec();
            drop(guard);
        });
    }
}
