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
use weir_config::{Config, ConfigError};
use weir_core::ShutdownSignal;
use weir_observe::Metrics;
use weir_upstream::Pool;

use crate::drain::{Admission, Drain};
use crate::pipeline;
use crate::route::VirtualServerRuntime;
use crate::tls::TlsTermination;

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

/// Why a proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A file the config names (a certificate, a CA) is unusable.
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// A listen address could not be bound.
    #[error("{0}")]
    Io(#[from] io::Error),
}

impl Proxy {
    /// Builds pools and virtual servers from a validated config, reading the
    /// certificate, key and CA files it names. Binds nothing, so it can run
    /// before any port is taken (and from `weir check`).
    pub fn build(config: &Config, metrics: &Arc<Metrics>) -> Result<Proxy, ConfigError> {
        let file_name = config.file_name();
        let mut pools: Vec<Arc<Pool>> = Vec::with_capacity(config.pools.len());
        for pool in &config.pools {
            let tls = match &pool.tls {
                Some(tls) => Some(weir_tls::Connector::new(tls, &file_name)?),
                None => None,
            };
            pools.push(Pool::new(pool, metrics, tls));
        }
        let mut virtual_servers = Vec::with_capacity(config.virtual_servers.len());
        for vs in &config.virtual_servers {
            let tls = match &vs.tls {
                Some(tls) => Some(Arc::new(TlsTermination::new(
                    &vs.name, tls, &file_name, metrics,
                )?)),
                None => None,
            };
            virtual_servers.push(Arc::new(VirtualServerRuntime::new(
                vs,
                &pools,
                metrics.virtual_server(&vs.name),
                config.log.access_log,
                tls,
            )));
        }
        Ok(Proxy {
            pools,
            virtual_servers,
            drain_timeout: config.runtime.drain_timeout,
        })
    }

    /// Builds the proxy and binds every listen address. Fails, naming the
    /// file or the address, before anything is served.
    pub fn bind(config: &Config, metrics: &Arc<Metrics>) -> Result<BoundProxy, StartError> {
        Ok(Proxy::build(config, metrics)?.bind_listeners()?)
    }

    /// TLS termination of every HTTPS virtual server (for certificate reload).
    pub fn tls_terminations(&self) -> Vec<Arc<TlsTermination>> {
        self.virtual_servers
            .iter()
            .filter_map(|vs| vs.tls.clone())
            .collect()
    }

    /// Binds every listen address. Fails, naming the address, before
    /// anything is served.
    pub fn bind_listeners(self) -> io::Result<BoundProxy> {
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

    /// TLS termination of every HTTPS virtual server (for certificate reload).
    pub fn tls_terminations(&self) -> Vec<Arc<TlsTermination>> {
        self.proxy.tls_terminations()
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
        let admission = Admission {
            vs: Arc::clone(&vs),
            _drain: drain.enter(),
        };
        tokio::spawn(pipeline::serve_connection(
            stream,
            peer,
            admission,
            shutdown.clone(),
        ));
    }
}
