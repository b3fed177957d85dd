//! The near side (`weir tunnel client`): accepts TCP on each service's listener and carries
//! every flow as one stream of a single long-lived QUIC connection to the far side, which it
//! keeps up: when the connection ends (the far side restarted, the path broke), it connects
//! again with backoff, and new flows wait for it up to `connect_timeout`.

use std::future::Future;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::{flow, quic};
use crate::TunnelError;
use crate::config::{ClientSide, Service, TunnelConfig};
use crate::driver::session::{Session, code};
use crate::metrics::Metrics;
use crate::sans_io::wire::encode_open;

/// The first wait before connecting again; doubled per failure up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// A connection that lasted less than this counts as a failure for the backoff.
const STABLE_CONNECTION: Duration = Duration::from_secs(1);

/// The near side, bound and ready to run.
pub struct Client {
    config: TunnelConfig,
    side: ClientSide,
    endpoint: quinn::Endpoint,
    listeners: Vec<(Service, TcpListener)>,
    metrics: Arc<Metrics>,
}

impl Client {
    /// Checks the config's certificates and keys as [`Client::bind`] does, binding
    /// nothing (`weir tunnel client --check` beside a running near side).
    pub fn check(config: &TunnelConfig) -> Result<(), TunnelError> {
        Self::prepare(config).map(drop)
    }

    /// This side's table and its QUIC client config: everything [`Client::bind`] reads
    /// from files before it binds.
    fn prepare(config: &TunnelConfig) -> Result<(ClientSide, quinn::ClientConfig), TunnelError> {
        let side = config
            .client
            .clone()
            .ok_or(TunnelError::Role("a [client] table"))?;
        let client_config = quic::client_config(config, &side)?;
        Ok((side, client_config))
    }

    /// Checks the certificates and binds every listener, so that a bad config or a port in
    /// use fails before anything runs.
    pub async fn bind(config: TunnelConfig, metrics: Arc<Metrics>) -> Result<Client, TunnelError> {
        let (side, client_config) = Self::prepare(&config)?;
        let mut listeners = Vec::with_capacity(config.services.len());
        for service in &config.services {
            let Some(address) = service.listen else {
                continue;
            };
            let listener = TcpListener::bind(address)
                .await
                .map_err(|source| TunnelError::Bind { address, source })?;
            listeners.push((service.clone(), listener));
        }
        let local: SocketAddr = match resolve(&side.server).await {
            Some(SocketAddr::V6(_)) => (Ipv6Addr::UNSPECIFIED, 0).into(),
            _ => (Ipv4Addr::UNSPECIFIED, 0).into(),
        };
        let mut endpoint = quic::endpoint(
            quic::Bind::Near(local),
            quic::client_endpoint_config(),
            None,
            &config,
            metrics.handles().clone(),
        )?;
        endpoint.set_default_client_config(client_config);
        Ok(Client {
            config,
            side,
            endpoint,
            listeners,
            metrics,
        })
    }

    /// The addresses the service listeners are bound to, by service name.
    pub fn listen_addresses(&self) -> Vec<(String, SocketAddr)> {
        self.listeners
            .iter()
            .filter_map(|(service, listener)| {
                Some((service.name.clone(), listener.local_addr().ok()?))
            })
            .collect()
    }

    /// Runs until `shutdown` completes.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let (current, sessions) = watch::channel::<Option<Arc<Session>>>(None);
        let keeper = tokio::spawn(keep_connected(
            self.endpoint.clone(),
            self.side.clone(),
            self.config.clone(),
            Arc::clone(&self.metrics),
            current,
        ));
        let mut acceptors = Vec::new();
        for (service, listener) in self.listeners {
            acceptors.push(tokio::spawn(accept_flows(
                service,
                listener,
                sessions.clone(),
                self.side.connect_timeout,
                Arc::clone(&self.metrics),
            )));
        }
        shutdown.await;
        for acceptor in &acceptors {
            acceptor.abort();
        }
        // No new flows; those open finish (bounded) before the connection closes.
        flow::drain(self.metrics.handles(), self.side.drain_timeout).await;
        keeper.abort();
        self.endpoint
            .close(code::SHUTDOWN.into(), b"weir tunnel client stopping");
        let _ = tokio::time::timeout(Duration::from_secs(2), self.endpoint.wait_idle()).await;
    }
}

/// Connects, publishes the session, waits for the connection to end, and again.
async fn keep_connected(
    endpoint: quinn::Endpoint,
    side: ClientSide,
    config: TunnelConfig,
    metrics: Arc<Metrics>,
    current: watch::Sender<Option<Arc<Session>>>,
) {
    let mut backoff = FIRST_BACKOFF;
    loop {
        match connect(&endpoint, &side, &config, &metrics).await {
            Ok(session) => {
                let up_since = tokio::time::Instant::now();
                let connection = session.connection.clone();
                current.send_replace(Some(Arc::clone(&session)));
                // Connected once the far side's hello says it accepted this end: under
                // TLS 1.3 the near side finishes its handshake before the far side has
                // checked its certificate, so a refused certificate ends the connection
                // before the hello.
                let greeted = tokio::select! {
                    () = session.greeted() => true,
                    _ = connection.closed() => false,
                };
                drop(session);
                if greeted {
                    // Counted (and announced) only now: a refused near side is not connected.
                    metrics.connection_established();
                    tracing::info!(server = %side.server, "tunnel connected");
                }
                let reason = connection.closed().await;
                current.send_replace(None);
                metrics.connection_closed(&connection, greeted);
                let busy = matches!(
                    &reason,
                    quinn::ConnectionError::ApplicationClosed(close)
                        if close.error_code == quinn::VarInt::from_u32(code::BUSY)
                );
                if busy {
                    tracing::warn!(server = %side.server, retry_in = ?backoff, "the tunnel's far side serves its max_connections already");
                } else if !greeted {
                    tracing::warn!(server = %side.server, %reason, retry_in = ?backoff, "the tunnel's far side closed the connection before its hello (certificate refused?)");
                } else if up_since.elapsed() >= STABLE_CONNECTION {
                    backoff = FIRST_BACKOFF;
                    tracing::warn!(server = %side.server, %reason, "tunnel connection ended; reconnecting");
                    continue;
                } else {
                    // Ended as it began: back off as for a failure.
                    tracing::warn!(server = %side.server, %reason, retry_in = ?backoff, "tunnel connection ended at once");
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
            Err(error) => {
                tracing::warn!(server = %side.server, %error, retry_in = ?backoff, "cannot connect the tunnel");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

async fn connect(
    endpoint: &quinn::Endpoint,
    side: &ClientSide,
    config: &TunnelConfig,
    metrics: &Arc<Metrics>,
) -> Result<Arc<Session>, String> {
    let address = resolve(&side.server)
        .await
        .ok_or_else(|| format!("cannot resolve {}", side.server))?;
    let connecting = endpoint
        .connect(address, &side.server_name)
        .map_err(|error| error.to_string())?;
    let connection = tokio::time::timeout(side.connect_timeout, connecting)
        .await
        .map_err(|_| "handshake timed out".to_owned())?
        .map_err(|error| error.to_string())?;
    let control = connection
        .open_bi()
        .await
        .map_err(|error| error.to_string())?;
    metrics.link_opened(&connection);
    Ok(Session::start(
        connection,
        control,
        config,
        metrics.handles().clone(),
    ))
}

async fn resolve(address: &str) -> Option<SocketAddr> {
    tokio::net::lookup_host(address).await.ok()?.next()
}

async fn accept_flows(
    service: Service,
    listener: TcpListener,
    sessions: watch::Receiver<Option<Arc<Session>>>,
    wait: Duration,
    metrics: Arc<Metrics>,
) {
    let mut failures = weir_observe::AcceptFailures::new(format!("service {}", service.name));
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of descriptors and the like: pause rather than spin.
                failures.failed(&error);
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        failures.accepted();
        tracing::debug!(service = %service.name, %peer, "flow accepted");
        tokio::spawn(open_flow(
            service.name.clone(),
            tcp,
            sessions.clone(),
            wait,
            Arc::clone(&metrics),
        ));
    }
}

/// Waits for the tunnel, opens the flow's stream and runs the flow.
async fn open_flow(
    service: String,
    tcp: TcpStream,
    mut sessions: watch::Receiver<Option<Arc<Session>>>,
    wait: Duration,
    metrics: Arc<Metrics>,
) {
    let session = tokio::time::timeout(wait, sessions.wait_for(Option::is_some))
        .await
        .ok()
        .and_then(Result::ok)
        .and_then(|session| session.clone());
    let Some(session) = session else {
        tracing::warn!(%service, "no tunnel within the connect timeout: closing the flow");
        metrics.handles().flows_failed.inc();
        refuse(tcp);
        return;
    };
    let (send, recv) = match session.connection.open_bi().await {
        Ok(streams) => streams,
        Err(error) => {
            tracing::warn!(%service, %error, "cannot open a tunnel stream: closing the flow");
            metrics.handles().flows_failed.inc();
            refuse(tcp);
            return;
        }
    };
    flow::run(
        session,
        tcp,
        send,
        recv,
        Some(encode_open(&service)),
        Default::default(),
    )
    .await;
}

/// Closes a TCP connection with a reset, so the application sees a failure.
pub fn refuse(tcp: TcpStream) {
    let _ = socket2::SockRef::from(&tcp).set_linger(Some(Duration::ZERO));
    drop(tcp);
}
