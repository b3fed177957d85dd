//! The far side (`weir tunnel server`): accepts tunnel connections from near sides that
//! present a certificate its CA signed, and for each flow stream connects to the service's
//! real server and splices the two.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::net::TcpStream;

use super::places::{Place, Places};
use super::{flow, quic};
use crate::TunnelError;
use crate::config::{ServerSide, TunnelConfig};
use crate::driver::session::{Session, code};
use crate::metrics::Metrics;
use crate::sans_io::wire::{decode_open, take_record};

/// How long a new connection has to open its control stream, and a new flow to send its
/// open header.
const OPEN_TIMEOUT: Duration = Duration::from_secs(10);

/// Handshakes in progress at once; past it new ones are refused. A tunnel has a few near
/// sides, each with one connection: this bounds what strangers' Initial packets can hold.
const MAX_HANDSHAKES: usize = 256;

/// Past this many handshakes in progress, a peer whose address is not validated yet is
/// asked to prove it first (a Retry, one round trip), so spoofed Initials commit nothing.
const RETRY_PAST: usize = 16;

/// Handshakes one source address may have in progress: a near side makes one connection at
/// a time, so one address cannot take the slots every near side needs.
const HANDSHAKES_PER_ADDRESS: usize = 4;

/// How long a handshake may take before it is given up (its slot freed): a few round trips
/// of the longest WAN, where the connection's idle timeout would hold a stranger's stalled
/// handshake for as long as an established connection may stay quiet.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The far side, bound and ready to run.
pub struct Server {
    config: TunnelConfig,
    side: ServerSide,
    endpoint: quinn::Endpoint,
    metrics: Arc<Metrics>,
}

impl Server {
    /// Checks the config's certificates and keys as [`Server::bind`] does, binding
    /// nothing (`weir tunnel server --check` beside a running far side).
    pub fn check(config: &TunnelConfig) -> Result<(), TunnelError> {
        Self::prepare(config).map(drop)
    }

    /// This side's table, its QUIC server config and its endpoint config: everything
    /// [`Server::bind`] reads from files before it binds.
    fn prepare(
        config: &TunnelConfig,
    ) -> Result<(ServerSide, quinn::ServerConfig, quinn::EndpointConfig), TunnelError> {
        let side = config
            .server
            .clone()
            .ok_or(TunnelError::Role("a [server] table"))?;
        let server_config = quic::server_config(config, &side)?;
        let endpoint_config = quic::reset_key(&side).map_err(|source| TunnelError::Bind {
            address: side.listen,
            source,
        })?;
        Ok((side, server_config, endpoint_config))
    }

    /// Checks the certificates and binds the UDP socket.
    pub fn bind(config: TunnelConfig, metrics: Arc<Metrics>) -> Result<Server, TunnelError> {
        let (side, server_config, endpoint_config) = Self::prepare(&config)?;
        let endpoint = quic::endpoint(
            quic::Bind::Far(side.listen),
            endpoint_config,
            Some(server_config),
            &config,
            metrics.handles().clone(),
        )?;
        Ok(Server {
            config,
            side,
            endpoint,
            metrics,
        })
    }

    /// The UDP address the far side listens on.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.endpoint.local_addr()
    }

    /// Runs until `shutdown` completes.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let services: Arc<HashMap<String, String>> = Arc::new(
            self.config
                .services
                .iter()
                .filter_map(|service| Some((service.name.clone(), service.connect.clone()?)))
                .collect(),
        );
        let config = Arc::new(self.config);
        let endpoint = self.endpoint.clone();
        let connect_timeout = self.side.connect_timeout;
        let metrics = Arc::clone(&self.metrics);
        let handshakes = Places::new(MAX_HANDSHAKES, HANDSHAKES_PER_ADDRESS);
        let connections = Arc::new(tokio::sync::Semaphore::new(
            self.side.max_connections as usize,
        ));
        let accepting = async move {
            while let Some(incoming) = endpoint.accept().await {
                let from = incoming.remote_address().ip();
                let Some(handshake) = handshakes.take(from) else {
                    tracing::debug!(remote = %incoming.remote_address(), "tunnel handshake refused: too many in progress");
                    incoming.refuse();
                    continue;
                };
                let busy = handshakes.held() > RETRY_PAST;
                if busy && !incoming.remote_address_validated() && incoming.may_retry() {
                    drop(handshake);
                    let _ = incoming.retry();
                    continue;
                }
                tokio::spawn(serve_connection(
                    (incoming, handshake),
                    Arc::clone(&connections),
                    Arc::clone(&config),
                    Arc::clone(&services),
                    connect_timeout,
                    Arc::clone(&metrics),
                ));
            }
        };
        tokio::select! {
            () = accepting => {}
            () = shutdown => {}
        }
        // No new connections; open flows finish (bounded) before the connection closes.
        flow::drain(self.metrics.handles(), self.side.drain_timeout).await;
        self.endpoint
            .close(code::SHUTDOWN.into(), b"weir tunnel server stopping");
        let _ = tokio::time::timeout(Duration::from_secs(2), self.endpoint.wait_idle()).await;
    }
}

async fn serve_connection(
    (incoming, handshake): (quinn::Incoming, Place),
    connections: Arc<tokio::sync::Semaphore>,
    config: Arc<TunnelConfig>,
    services: Arc<HashMap<String, String>>,
    connect_timeout: Duration,
    metrics: Arc<Metrics>,
) {
    let remote = incoming.remote_address();
    // Dropping the connecting future (at the timeout) closes the connection.
    let connection = match tokio::time::timeout(HANDSHAKE_TIMEOUT, incoming).await {
        Ok(Ok(connection)) => connection,
        Ok(Err(error)) => {
            tracing::warn!(%remote, %error, "tunnel handshake failed");
            return;
        }
        Err(_) => {
            tracing::warn!(%remote, "tunnel handshake not done within 10 s; given up");
            return;
        }
    };
    drop(handshake);
    // Authenticated, but each connection may hold a dedup store: at most max_connections.
    let Ok(_serving) = connections.try_acquire_owned() else {
        tracing::warn!(
            %remote,
            max_connections = config.server.as_ref().map_or(0, |side| side.max_connections),
            "tunnel connection refused: the far side serves its max_connections already"
        );
        connection.close(code::BUSY.into(), b"too many tunnel connections");
        return;
    };
    // Authenticated (its certificate verified in the handshake): now it may open every flow.
    connection.set_max_concurrent_bi_streams(quinn::VarInt::from_u32(quic::MAX_FLOWS));
    let control = match tokio::time::timeout(OPEN_TIMEOUT, connection.accept_bi()).await {
        Ok(Ok(control)) => control,
        _ => {
            connection.close(code::PROTOCOL.into(), b"no control stream");
            return;
        }
    };
    metrics.connection_opened(&connection);
    tracing::info!(%remote, "tunnel connection accepted");
    let session = Session::start(
        connection.clone(),
        control,
        &config,
        metrics.handles().clone(),
    );
    loop {
        match connection.accept_bi().await {
            Ok((send, recv)) => {
                tokio::spawn(serve_flow(
                    Arc::clone(&session),
                    send,
                    recv,
                    Arc::clone(&services),
                    connect_timeout,
                ));
            }
            Err(error) => {
                tracing::info!(%remote, %error, "tunnel connection ended");
                break;
            }
        }
    }
    metrics.connection_closed(&connection, true);
}

/// Reads the open header, connects to the service and runs the flow.
async fn serve_flow(
    session: Arc<Session>,
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    services: Arc<HashMap<String, String>>,
    connect_timeout: Duration,
) {
    let refused = |send: &mut quinn::SendStream, recv: &mut quinn::RecvStream, why: u32| {
        let _ = send.reset(why.into());
        let _ = recv.stop(why.into());
        session.metrics.flows_failed.inc();
    };
    let Ok(Some((service, leftover))) = tokio::time::timeout(OPEN_TIMEOUT, read_open(&mut recv))
        .await
        .unwrap_or(Ok(None))
    else {
        refused(&mut send, &mut recv, code::PROTOCOL);
        return;
    };
    let Some(target) = services.get(&service) else {
        tracing::warn!(%service, "flow for an unknown service refused");
        refused(&mut send, &mut recv, code::UNKNOWN_SERVICE);
        return;
    };
    let tcp = match tokio::time::timeout(connect_timeout, TcpStream::connect(target.as_str())).await
    {
        Ok(Ok(tcp)) => tcp,
        Ok(Err(error)) => {
            tracing::warn!(%service, %target, %error, "cannot connect to the service");
            refused(&mut send, &mut recv, code::CONNECT_FAILED);
            return;
        }
        Err(_) => {
            tracing::warn!(%service, %target, "connecting to the service timed out");
            refused(&mut send, &mut recv, code::CONNECT_FAILED);
            return;
        }
    };
    flow::run(session, tcp, send, recv, None, leftover).await;
}

/// The service name from the first record, and any bytes read after it.
async fn read_open(recv: &mut quinn::RecvStream) -> Result<Option<(String, BytesMut)>, String> {
    let mut buffer = BytesMut::new();
    loop {
        if let Some(record) = take_record(&mut buffer).map_err(|error| error.to_string())? {
            let service = decode_open(record).map_err(|error| error.to_string())?;
            return Ok(Some((service, buffer)));
        }
        match recv.read_chunk(64 << 10, true).await {
            Ok(Some(chunk)) => buffer.extend_from_slice(&chunk.bytes),
            Ok(None) | Err(_) => return Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use super::*;

    /// One address gets a few handshakes at once, all addresses together a bounded number;
    /// a place comes back when its handshake ends.
    #[test]
    fn handshakes_are_bounded_per_address_and_in_all() {
        let handshakes = Places::new(MAX_HANDSHAKES, HANDSHAKES_PER_ADDRESS);
        let address = |n: u32| IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + n));
        let mine: Vec<Place> = (0..HANDSHAKES_PER_ADDRESS)
            .map(|_| handshakes.take(address(1)).expect("a place"))
            .collect();
        assert!(handshakes.take(address(1)).is_none(), "one address, full");
        assert!(handshakes.held() <= RETRY_PAST, "not busy yet");
        let others: Vec<Place> = (2..).map_while(|n| handshakes.take(address(n))).collect();
        assert_eq!(mine.len() + others.len(), MAX_HANDSHAKES);
        assert!(handshakes.held() > RETRY_PAST, "busy");
        drop(mine);
        assert!(handshakes.take(address(1)).is_some(), "given back");
        drop(others);
        assert_eq!(handshakes.held(), 0);
    }
}
