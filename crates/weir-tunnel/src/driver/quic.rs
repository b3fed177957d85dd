//! The QUIC transport: TLS 1.3 with mutual authentication (rustls on aws-lc-rs, certificates
//! read by `weir-tls`), windows sized from the configured link, the congestion controller
//! (quinn's adapter of [`WanWindow`]), and the UDP endpoint.
//!
//! Window sizing: a flow's stream window is eight bandwidth-delay products (one in flight,
//! and room for the hole a lost packet leaves until its retransmission arrives, which at 5 %
//! loss is sometimes lost again, and again), the connection's window sixteen, with floors
//! for short paths. Memory is only used while data is actually in flight or held behind a
//! hole.

use std::any::Any;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quinn::congestion::{Controller, ControllerFactory};
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::{EndpointConfig, MtuDiscoveryConfig, TransportConfig, VarInt};
use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use socket2::{Domain, Protocol, Socket, Type};
use weir_config::{ConfigError, FileRef};
use weir_observe::TunnelMetrics;

use crate::config::{ClientSide, Congestion, LinkParams, ServerSide, Transport, TunnelConfig};
use crate::driver::fec_socket::FecSocket;
use crate::driver::tcp::{TcpDatagrams, TcpSettings};
use crate::sans_io::congestion::WanWindow;
use crate::sans_io::fec::{FecSettings, Timing};
use crate::sans_io::wire::ALPN;

/// Most flows open at once on one tunnel.
pub const MAX_FLOWS: u32 = 4096;

/// Stream windows the connection's receive window holds (see [`transport_config`]).
const FLOW_WINDOWS: u64 = 64;

/// Flows a near side may open before it is authenticated: the control stream and a few.
/// quinn sets up the state of every stream a peer may open when a connection is created,
/// before its handshake, so a far side that allowed [`MAX_FLOWS`] from the start would
/// commit about 390 KB to each Initial packet anyone sends; the full count is granted
/// once the handshake (client certificate included) is done (`server.rs`).
pub const HANDSHAKE_FLOWS: u32 = 4;

/// QUIC's packet size over the TCP transport (no path MTU applies to a byte stream).
const TCP_PACKET: u16 = 8192;

/// Socket buffer asked for (the kernel caps it at `net.core.rmem_max`/`wmem_max`).
const SOCKET_BUFFER: usize = 16 << 20;

/// Why the transport could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("TLS set-up: {0}")]
    Tls(String),
    #[error("cannot open the socket on {address}")]
    Socket {
        address: SocketAddr,
        source: std::io::Error,
    },
}

/// The QUIC transport parameters for a link, and for the FEC layer below QUIC when it
/// frames datagrams: eleven bytes less per packet (room for a repair's header), and loss declared only after twice a
/// block's worth of later packets were acknowledged (or the usual 9/8 of a round trip), so
/// that a datagram a repair rebuilds is not also retransmitted.
pub fn transport_config(link: &LinkParams, fec: &FecSettings) -> TransportConfig {
    let bdp = link.bdp().max(64 << 10);
    let stream_window = (8 * bdp).clamp(1 << 20, 512 << 20);
    // Flow control is per flow. A flow whose local end does not read (a server that takes
    // no upload, a client that takes no download) stops reading its stream, and its
    // stream's window of unread bytes counts against the connection's: a connection window
    // of a few stream windows let a few such flows stop every other flow, the control
    // stream too. The connection's receive window holds FLOW_WINDOWS whole stream windows,
    // so what stops a flow is its own window (what it holds is bounded by it, as a TCP
    // connection's by its socket buffer), up to that many stuck flows, and at most 1 GiB
    // in all (the bound the connection window always had): on a long fat link, where a
    // stream window is tens of MB, fewer stuck flows fill it, and memory stays bounded.
    let connection_window = stream_window.saturating_mul(FLOW_WINDOWS).min(1 << 30);
    let send_window = (16 * bdp).clamp(4 << 20, 1 << 30);
    let mut transport = TransportConfig::default();
    transport
        .max_concurrent_bidi_streams(VarInt::from_u32(MAX_FLOWS))
        .max_concurrent_uni_streams(VarInt::from_u32(0))
        .stream_receive_window(VarInt::from_u32(stream_window as u32))
        .receive_window(VarInt::from_u64(connection_window).unwrap_or(VarInt::MAX))
        .send_window(send_window)
        .initial_rtt(link.rtt)
        .keep_alive_interval(Some(link.keep_alive))
        .datagram_receive_buffer_size(None);
    // Idle timeouts above 2^62 ms do not exist; the config caps durations far below.
    if let Ok(idle) = quinn::IdleTimeout::try_from(link.idle_timeout) {
        transport.max_idle_timeout(Some(idle));
    }
    if link.transport == Transport::Tcp {
        // No path MTU over TCP, and no loss for QUIC to detect: large packets, no FEC. TCP's
        // BBR is the congestion controller; QUIC's window only has to stay out of its way,
        // also while TCP holds data back behind a hole (ten BDP; the socket's queue of about
        // one BDP is what pushes back).
        transport
            .initial_mtu(TCP_PACKET)
            .mtu_discovery_config(None)
            .congestion_controller_factory(Arc::new(WanFactory {
                bits_per_second: link.bandwidth,
                rtt: link.rtt * 8,
            }));
        return transport;
    }
    // Start at the path MTU (less IPv6 and UDP headers, and the FEC header), and probe up
    // to the IPv4 maximum.
    let header = if fec.frames() {
        crate::sans_io::fec::wire::MAX_OVERHEAD as u16
    } else {
        0
    };
    let initial = link.mtu.saturating_sub(48 + header).max(1200);
    let mut discovery = MtuDiscoveryConfig::default();
    discovery.upper_bound(link.mtu.saturating_sub(28 + header).max(initial));
    if fec.frames() {
        transport.packet_threshold((2 * fec.block_size() as u32).max(3));
    }
    transport
        .initial_mtu(initial)
        .mtu_discovery_config(Some(discovery));
    match link.congestion {
        Congestion::Wan => {
            transport.congestion_controller_factory(Arc::new(WanFactory {
                bits_per_second: link.bandwidth,
                rtt: link.rtt,
            }));
        }
        Congestion::Bbr => {
            let mut bbr = quinn::congestion::BbrConfig::default();
            bbr.initial_window(bdp);
            transport.congestion_controller_factory(Arc::new(bbr));
        }
        Congestion::Cubic => {
            transport
                .congestion_controller_factory(Arc::new(quinn::congestion::CubicConfig::default()));
        }
    }
    transport
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// A problem with a file the config names, reported like a config error (file, line, key).
fn file_error(config: &TunnelConfig, file: &FileRef, message: String) -> TransportError {
    TransportError::Config(ConfigError::single(
        &config.file_name,
        file.line,
        file.key.to_string(),
        message,
    ))
}

fn roots(config: &TunnelConfig, ca: &FileRef) -> Result<RootCertStore, TransportError> {
    weir_tls::certs::load_roots(ca).map_err(|problem| file_error(config, ca, problem.message))
}

fn identity(
    config: &TunnelConfig,
    cert: &FileRef,
    key: &FileRef,
) -> Result<
    (
        Vec<rustls::pki_types::CertificateDer<'static>>,
        rustls::pki_types::PrivateKeyDer<'static>,
    ),
    TransportError,
> {
    let chain = weir_tls::certs::read_chain(cert)
        .map_err(|problem| file_error(config, cert, problem.message))?;
    let key_der = weir_tls::certs::read_key(key)
        .map_err(|problem| file_error(config, key, problem.message))?;
    weir_tls::certs::certified_key(&provider(), chain.clone(), key_der.clone_key())
        .map_err(|message| file_error(config, key, message))?;
    Ok((chain, key_der))
}

/// The near side's QUIC client config: verifies the far side against `ca`, presents its own
/// certificate.
pub fn client_config(
    config: &TunnelConfig,
    side: &ClientSide,
) -> Result<quinn::ClientConfig, TransportError> {
    let roots = roots(config, &side.ca)?;
    let (chain, key) = identity(config, &side.cert, &side.key)?;
    let mut tls = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|error| TransportError::Tls(error.to_string()))?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(|error| TransportError::Tls(error.to_string()))?;
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let crypto =
        QuicClientConfig::try_from(tls).map_err(|error| TransportError::Tls(error.to_string()))?;
    let mut client = quinn::ClientConfig::new(Arc::new(crypto));
    client.transport_config(Arc::new(transport_config(&config.link, &config.fec)));
    Ok(client)
}

/// The far side's QUIC server config: requires a client certificate that verifies against
/// `ca`.
pub fn server_config(
    config: &TunnelConfig,
    side: &ServerSide,
) -> Result<quinn::ServerConfig, TransportError> {
    let roots = roots(config, &side.ca)?;
    let (chain, key) = identity(config, &side.cert, &side.key)?;
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
        .build()
        .map_err(|error| TransportError::Tls(error.to_string()))?;
    let mut tls = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|error| TransportError::Tls(error.to_string()))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(|error| TransportError::Tls(error.to_string()))?;
    tls.alpn_protocols = vec![ALPN.to_vec()];
    tls.max_early_data_size = 0;
    let crypto =
        QuicServerConfig::try_from(tls).map_err(|error| TransportError::Tls(error.to_string()))?;
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    let mut transport = transport_config(&config.link, &config.fec);
    transport.max_concurrent_bidi_streams(VarInt::from_u32(HANDSHAKE_FLOWS));
    server.transport_config(Arc::new(transport));
    server.migration(true);
    Ok(server)
}

/// The far side's stateless-reset key, derived from its private key: a restarted far side
/// answers packets of the connection it forgot with a reset the near side accepts, so the
/// near side reconnects at once instead of waiting for the idle timeout.
pub fn reset_key(side: &ServerSide) -> Result<EndpointConfig, std::io::Error> {
    let key = std::fs::read(&side.key.path)?;
    let derived = blake3::derive_key("weir-tunnel 2024 stateless reset key", &key);
    let hmac = aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, &derived);
    let mut endpoint = EndpointConfig::new(Arc::new(hmac));
    endpoint.grease_quic_bit(false);
    // quinn drops a short-header packet whose connection ID its generator did not sign
    // before it would answer with a reset, and its default generator signs with a key
    // made at random per process: a restarted far side ignored the forgotten connection's
    // packets and the near side waited for its idle timeout. The signing key is derived
    // from the private key too, so the restarted side knows the IDs and resets them.
    let cid_key = blake3::derive_key("weir-tunnel 2026 connection id key", &key);
    let cid_key = u64::from_le_bytes(cid_key[..8].try_into().unwrap_or_default());
    endpoint.cid_generator(move || {
        Box::new(quinn_proto::HashedConnectionIdGenerator::from_key(cid_key))
    });
    Ok(endpoint)
}

/// The near side's endpoint config: QUIC-bit greasing off, so that every QUIC packet's
/// first byte tells it apart from the FEC layer's frames.
pub fn client_endpoint_config() -> EndpointConfig {
    let mut endpoint = EndpointConfig::default();
    endpoint.grease_quic_bit(false);
    endpoint
}

/// Where an endpoint's packets go: the near side's local address, or the far side's
/// listening address.
#[derive(Debug, Clone, Copy)]
pub enum Bind {
    Near(SocketAddr),
    Far(SocketAddr),
}

/// A quinn endpoint for `config`'s transport: UDP with the FEC layer below QUIC, or TCP
/// connections (`crate::driver::tcp`).
pub fn endpoint(
    bind: Bind,
    endpoint_config: EndpointConfig,
    server_config: Option<quinn::ServerConfig>,
    config: &TunnelConfig,
    metrics: TunnelMetrics,
) -> Result<quinn::Endpoint, TransportError> {
    let (Bind::Near(address) | Bind::Far(address)) = bind;
    let error = |source| TransportError::Socket { address, source };
    let link = &config.link;
    let socket: Arc<dyn quinn::AsyncUdpSocket> = match (link.transport, bind) {
        (Transport::Quic, _) => {
            let timing = Timing::for_link(link.bandwidth, link.rtt, link.mtu);
            FecSocket::wrap(udp_socket(address)?, config.fec, timing, metrics).map_err(error)?
        }
        (Transport::Tcp, Bind::Near(_)) => TcpDatagrams::connecting(address, tcp_settings(link)),
        (Transport::Tcp, Bind::Far(_)) => {
            let listener = std::net::TcpListener::bind(address).map_err(error)?;
            listener.set_nonblocking(true).map_err(error)?;
            let listener = tokio::net::TcpListener::from_std(listener).map_err(error)?;
            TcpDatagrams::listen(listener, tcp_settings(link)).map_err(error)?
        }
    };
    quinn::Endpoint::new_with_abstract_socket(
        endpoint_config,
        server_config,
        socket,
        Arc::new(quinn::TokioRuntime),
    )
    .map_err(error)
}

/// About a bandwidth-delay product of QUIC data queued per TCP connection (1 MiB at least).
fn tcp_settings(link: &LinkParams) -> TcpSettings {
    TcpSettings {
        buffer: (link.bdp() as usize).clamp(1 << 20, 256 << 20),
        idle: link.idle_timeout,
    }
}

/// A UDP socket bound to `address` with large buffers, for an endpoint.
pub fn udp_socket(address: SocketAddr) -> Result<UdpSocket, TransportError> {
    let error = |source| TransportError::Socket { address, source };
    let socket = Socket::new(
        Domain::for_address(address),
        Type::DGRAM,
        Some(Protocol::UDP),
    )
    .map_err(error)?;
    // Best effort: the kernel caps the sizes.
    let _ = socket.set_recv_buffer_size(SOCKET_BUFFER);
    let _ = socket.set_send_buffer_size(SOCKET_BUFFER);
    socket.bind(&address.into()).map_err(error)?;
    Ok(socket.into())
}

/// quinn's view of the loss-tolerant window ([`WanWindow`], `congestion = "wan"`).
#[derive(Debug, Clone)]
pub struct Wan {
    state: WanWindow,
}

/// Builds a [`Wan`] controller per connection.
#[derive(Debug, Clone, Copy)]
pub struct WanFactory {
    pub bits_per_second: u64,
    pub rtt: Duration,
}

impl Controller for Wan {
    fn on_ack(
        &mut self,
        _now: Instant,
        _sent: Instant,
        bytes: u64,
        _app_limited: bool,
        rtt: &quinn_proto::RttEstimator,
    ) {
        self.state.on_ack(bytes, rtt.get(), rtt.min());
    }

    fn on_congestion_event(
        &mut self,
        now: Instant,
        sent: Instant,
        is_persistent_congestion: bool,
        _lost_bytes: u64,
    ) {
        self.state.on_loss(now, sent, is_persistent_congestion);
    }

    fn on_mtu_update(&mut self, new_mtu: u16) {
        self.state.on_mtu_update(new_mtu);
    }

    fn window(&self) -> u64 {
        self.state.window()
    }

    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(self.clone())
    }

    fn initial_window(&self) -> u64 {
        self.state.target()
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

impl ControllerFactory for WanFactory {
    fn build(self: Arc<Self>, _now: Instant, current_mtu: u16) -> Box<dyn Controller> {
        Box::new(Wan {
            state: WanWindow::new(self.bits_per_second, self.rtt, current_mtu),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn windows_follow_the_bandwidth_delay_product() {
        // Just check it builds for the extremes the config allows.
        for (bandwidth, rtt) in [(64_000, 1), (51_840_000, 500), (10_000_000_000, 5000)] {
            let link = LinkParams {
                bandwidth,
                rtt: Duration::from_millis(rtt),
                ..LinkParams::default()
            };
            let _ = transport_config(&link, &FecSettings::default());
        }
        let link = LinkParams {
            bandwidth: 51_840_000,
            rtt: Duration::from_millis(500),
            ..LinkParams::default()
        };
        assert_eq!(link.bdp(), 3_240_000);
    }
}
