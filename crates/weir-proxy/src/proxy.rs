//! The proxy as a whole: built from a config (the first model), bound (every listen
//! address, or the sockets a binary upgrade handed over), then run until shutdown and
//! drained.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use weir_config::{Config, ConfigError};
use weir_core::ShutdownSignal;
use weir_observe::Metrics;
use weir_upstream::Pool;

use crate::drain::Drain;
use crate::listener::{Bound, adopt, bind_tcp};
use crate::live::Live;
use crate::stage::{Purpose, listen_error};
use crate::tls::TlsTermination;

/// After the drain timeout, how long the connections told to end get to log it.
const CUT_GRACE: std::time::Duration = std::time::Duration::from_millis(200);

/// The proxy built from a config: the first model, no sockets yet.
#[derive(Debug)]
pub struct Proxy {
    live: Arc<Live>,
}

/// A proxy whose listeners are bound.
#[derive(Debug)]
pub struct BoundProxy {
    live: Arc<Live>,
    listeners: Vec<Bound>,
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
    /// Builds the first model from a validated config, reading the certificate, key and
    /// CA files it names. Binds nothing, so it can run before any port is taken (and from
    /// `weir check`).
    pub fn build(config: &Config, metrics: &Arc<Metrics>) -> Result<Proxy, ConfigError> {
        Ok(Proxy {
            live: Live::build(config.clone(), metrics, Purpose::Serve)?,
        })
    }

    /// What [`Proxy::build`] checks, as a dry run (`weir check`): every file the config
    /// names is read, node names are resolved, and nothing is created or bound.
    pub fn check(config: &Config) -> Result<(), ConfigError> {
        Live::build(config.clone(), &Metrics::new(), Purpose::DryRun).map(drop)
    }

    /// Builds the proxy and binds every listen address. Fails, naming the
    /// file or the address, before anything is served.
    pub fn bind(config: &Config, metrics: &Arc<Metrics>) -> Result<BoundProxy, StartError> {
        Ok(Proxy::build(config, metrics)?.bind_listeners()?)
    }

    /// TLS termination of every HTTPS virtual server (for certificate reload).
    pub fn tls_terminations(&self) -> Vec<Arc<TlsTermination>> {
        self.live.current().tls_terminations()
    }

    /// The first model, as built.
    pub fn current(&self) -> Arc<crate::Model> {
        self.live.current()
    }

    /// Binds every listen address. Fails, naming the address, before
    /// anything is served.
    pub fn bind_listeners(self) -> io::Result<BoundProxy> {
        self.bind_listeners_inheriting(&mut HashMap::new())
    }

    /// Binds every listen address, taking the sockets in `inherited` (handed over by the
    /// process this one upgrades) for the addresses they were bound to instead of binding
    /// them again. Those used are removed from `inherited`.
    pub fn bind_listeners_inheriting(
        self,
        inherited: &mut HashMap<SocketAddr, OwnedFd>,
    ) -> io::Result<BoundProxy> {
        let config = Arc::clone(&self.live.current().config);
        let mut listeners = Vec::new();
        for (address, name, options) in weir_config::diff::listeners(&config) {
            let socket = match inherited.remove(&address) {
                Some(fd) => adopt(fd, options.backlog),
                None => bind_tcp(address, options.backlog),
            }
            .map_err(|error| {
                io::Error::new(
                    error.kind(),
                    listen_error(&config, name, address, &error).to_string(),
                )
            })?;
            listeners.push(Bound {
                address,
                virtual_server: name.to_owned(),
                options,
                socket,
            });
        }
        Ok(BoundProxy {
            live: self.live,
            listeners,
        })
    }
}

impl BoundProxy {
    /// The bound addresses, by virtual server name (port 0 resolved).
    pub fn local_addrs(&self) -> Vec<(String, SocketAddr)> {
        self.listeners
            .iter()
            .filter_map(|bound| {
                Some((
                    bound.virtual_server.clone(),
                    bound.socket.local_addr().ok()?,
                ))
            })
            .collect()
    }

    /// The pools of the current model.
    pub fn pools(&self) -> Vec<Arc<Pool>> {
        self.live.current().pools.clone()
    }

    /// TLS termination of every HTTPS virtual server (for certificate reload).
    pub fn tls_terminations(&self) -> Vec<Arc<TlsTermination>> {
        self.live.current().tls_terminations()
    }

    /// The handle that reloads, reports and hands over the running proxy.
    pub fn live(&self) -> Arc<Live> {
        Arc::clone(&self.live)
    }

    /// Serves until `shutdown` triggers, then stops accepting, lets
    /// in-flight requests finish (up to the drain timeout) and returns.
    pub async fn run(self, shutdown: ShutdownSignal) -> io::Result<()> {
        let drain = Arc::new(Drain::default());
        drain.open_lot(crate::park::Lot::open(
            shutdown.clone(),
            crate::park::Resume {
                parked: crate::pipeline::spawn_resumed,
                rested: crate::pipeline::spawn_rested,
            },
        )?);
        self.live
            .start(self.listeners, shutdown.clone(), Arc::clone(&drain))?;
        let stop = shutdown.clone();
        stop.triggered().await;
        let (accept_loops, pool_tasks) = self.live.stopped();
        for task in accept_loops {
            let _ = task.await;
        }
        let drain_timeout = self.live.current().config.runtime.drain_timeout;
        let open = drain.active();
        if open > 0 {
            tracing::info!(connections = open, timeout = ?drain_timeout, "draining client connections");
        }
        if tokio::time::timeout(drain_timeout, drain.wait_idle())
            .await
            .is_err()
        {
            tracing::warn!(
                connections = drain.active(),
                "drain timeout reached; closing remaining connections"
            );
            // Those that can say so end now and log it; the rest close with the process.
            drain.cut();
            let _ = tokio::time::timeout(CUT_GRACE, drain.wait_idle()).await;
        }
        for task in pool_tasks {
            let _ = task.await;
        }
        self.live.current().report_left_out();
        Ok(())
    }
}
