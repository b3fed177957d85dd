//! One wake-up fewer per TLS 1.3 handshake: the client's Finished is not worth waking for
//! on its own when the client speaks first afterwards.
//!
//! After weir's flight (ServerHello to Finished) a TLS 1.3 client sends its Finished
//! (58 bytes for a SHA-256 suite, 74 for SHA-384, after a 6-byte ChangeCipherSpec from
//! clients in middlebox-compatible mode) and then its first request. Most clients (curl,
//! OpenSSL's `s_time`, browsers) write the two separately, so they reach weir as two
//! events: weir woke up for the Finished, found nothing else to do, slept, and woke again
//! for the request. On a mostly idle proxy each of those wake-ups costs more than the work
//! it carries (`BENCHMARKING.md`, "TLS offload").
//!
//! While weir waits for the client's flight it raises the socket's `SO_RCVLOWAT` above the
//! largest Finished ([`HELD_BYTES`]): the kernel then wakes weir only once more bytes than
//! that are queued. The Finished and the request are read in one wake-up; every byte the
//! client sends still counts, so a client certificate flight or an HTTP/2 preface wakes weir
//! as before, and so do a FIN or a reset. After the handshake the mark goes back to one
//! byte, before anything else waits on the socket.
//!
//! Two things keep this safe:
//!
//! - It starts only once weir's whole flight is built, which rustls signals by deriving the
//!   server's application traffic secret ([`FlightProbe`]). A ClientHello that came in
//!   several segments, or a HelloRetryRequest, never meets a raised mark, so no part of a
//!   ClientHello can be held back. TLS 1.2 handshakes are never held.
//! - It is used only where the client speaks first after the handshake ([`FirstSpeaker`]):
//!   HTTP. A client of a server-first protocol (SMTP or IMAP over TLS) sends its Finished
//!   and waits, so a tcp virtual server never holds. A client that finishes and then stays
//!   silent (a browser's preconnect) is seen when it sends its request or closes; if that
//!   takes longer than the handshake timeout, the mark is lowered (which reports the queued
//!   Finished at once) and the handshake gets [`GRACE`] to complete before it is failed.

use std::cell::Cell;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use nix::libc;
use nix::{getsockopt_impl, setsockopt_impl, sockopt_impl};
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;
use tokio_rustls::rustls::KeyLog;
use tokio_rustls::server::{Accept, TlsStream};

/// Who sends first once the handshake is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FirstSpeaker {
    /// The client (HTTP/1.1 and HTTP/2): the client's Finished need not wake weir alone.
    Client,
    /// Either side (a tcp virtual server's protocol): every byte wakes weir.
    Either,
}

/// The receive low-water mark while the client's Finished is held back: one byte more than
/// the largest client Finished flight (ChangeCipherSpec 6 bytes, then a record of 5 header
/// bytes, a 4-byte handshake header, a 48-byte SHA-384 verify data, 1 content-type byte and
/// a 16-byte AEAD tag: 80 bytes).
pub const HELD_BYTES: libc::c_int = 81;

/// How long a held handshake gets, after its timeout, to finish with the bytes it has.
pub const GRACE: Duration = Duration::from_secs(1);

/// The secret rustls derives once a TLS 1.3 server's flight is complete.
const SERVER_FLIGHT_DONE: &str = "SERVER_TRAFFIC_SECRET_0";

thread_local! {
    /// Set while a handshake is polled on this thread, when its server flight is complete.
    static FLIGHT_DONE: Cell<bool> = const { Cell::new(false) };
}

sockopt_impl!(
    /// The receive low-water mark (`SO_RCVLOWAT`), which nix does not name.
    ReceiveLowWater,
    Both,
    libc::SOL_SOCKET,
    libc::SO_RCVLOWAT,
    libc::c_int
);

/// A key log that logs nothing: rustls asks it whether to log each secret as it derives
/// it, which tells a handshake being polled that weir's TLS 1.3 flight is complete.
#[derive(Debug)]
pub struct FlightProbe;

impl KeyLog for FlightProbe {
    fn log(&self, _label: &str, _client_random: &[u8], _secret: &[u8]) {}

    fn will_log(&self, label: &str) -> bool {
        if label == SERVER_FLIGHT_DONE {
            FLIGHT_DONE.with(|done| done.set(true));
        }
        false
    }
}

fn set_low_water(tcp: &TcpStream, bytes: libc::c_int) -> io::Result<()> {
    nix::sys::socket::setsockopt(tcp, ReceiveLowWater, &bytes).map_err(io::Error::from)
}

/// A handshake in progress that holds back the client's Finished once weir's flight is out.
pub struct Handshake {
    accept: Accept<TcpStream>,
    hold: bool,
    held: bool,
    /// The handshake's place under `max_handshakes`, given back once it is held: the
    /// expensive part is done, and a client that finished and waits (a preconnect) must
    /// not keep new clients out, as it did not before the hold.
    permit: Option<OwnedSemaphorePermit>,
}

impl Handshake {
    /// Drives `accept`, holding `permit` until it ends or is held; holds the Finished
    /// when the client speaks first.
    pub fn new(
        accept: Accept<TcpStream>,
        first: FirstSpeaker,
        permit: OwnedSemaphorePermit,
    ) -> Handshake {
        Handshake {
            accept,
            hold: first == FirstSpeaker::Client,
            held: false,
            permit: Some(permit),
        }
    }

    /// Whether the low-water mark is raised now.
    pub fn is_held(&self) -> bool {
        self.held
    }

    /// Lowers the low-water mark while the handshake is still in progress; the kernel then
    /// reports a queued Finished at once.
    pub fn release(&mut self) -> io::Result<()> {
        if self.held {
            self.held = false;
            if let Some(tcp) = self.accept.get_ref() {
                set_low_water(tcp, 1)?;
            }
        }
        Ok(())
    }

    /// Lowers the mark on the finished connection, before anything waits on it.
    pub fn finish(&self, stream: TlsStream<TcpStream>) -> io::Result<TlsStream<TcpStream>> {
        if self.held {
            set_low_water(stream.get_ref().0, 1)?;
        }
        Ok(stream)
    }
}

impl Future for Handshake {
    type Output = io::Result<TlsStream<TcpStream>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if !this.hold {
            return Pin::new(&mut this.accept).poll(cx);
        }
        FLIGHT_DONE.with(|done| done.set(false));
        let polled = Pin::new(&mut this.accept).poll(cx);
        if polled.is_pending()
            && FLIGHT_DONE.with(Cell::take)
            && let Some(tcp) = this.accept.get_ref()
        {
            // Without the mark the handshake goes on as before: a failure costs a wake-up.
            this.held = set_low_water(tcp, HELD_BYTES).is_ok();
            if this.held {
                this.permit = None;
            }
            // Once is enough: a handshake that was released is not held again.
            this.hold = false;
        }
        polled
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio_rustls::rustls::crypto::{CryptoProvider, aws_lc_rs};
    use tokio_rustls::rustls::pki_types::ServerName;
    use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
    use tokio_rustls::rustls::sign::CertifiedKey;
    use tokio_rustls::rustls::{
        ClientConfig, ClientConnection, RootCertStore, ServerConfig, ServerConnection,
        SupportedProtocolVersion, version,
    };

    use super::*;
    use crate::certs::{self, KeyType};

    #[derive(Debug)]
    struct Fixed(Arc<CertifiedKey>);

    impl ResolvesServerCert for Fixed {
        fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
            Some(Arc::clone(&self.0))
        }
    }

    fn provider(
        groups: &[&'static dyn tokio_rustls::rustls::crypto::SupportedKxGroup],
    ) -> Arc<CryptoProvider> {
        let mut provider = aws_lc_rs::default_provider();
        provider.kx_groups = groups.to_vec();
        Arc::new(provider)
    }

    /// A client and a server (with the probe) that agree on `versions`; the client offers
    /// `client_groups` in that order (a key share for the first only).
    fn pair(
        versions: &[&'static SupportedProtocolVersion],
        client_groups: &[&'static dyn tokio_rustls::rustls::crypto::SupportedKxGroup],
    ) -> (ClientConnection, ServerConnection) {
        let generated =
            certs::self_signed(&["probe.test".to_owned()], KeyType::EcdsaP256, 1).unwrap();
        let server_provider = provider(&[aws_lc_rs::kx_group::X25519]);
        let key = certs::generated_key(&server_provider, &generated).unwrap();
        let mut server = ServerConfig::builder_with_provider(server_provider)
            .with_protocol_versions(versions)
            .unwrap()
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(Fixed(key)));
        server.key_log = Arc::new(FlightProbe);
        let mut roots = RootCertStore::empty();
        roots.add(generated.cert_der.clone()).unwrap();
        let client = ClientConfig::builder_with_provider(provider(client_groups))
            .with_protocol_versions(versions)
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let name = ServerName::try_from("probe.test").unwrap();
        (
            ClientConnection::new(Arc::new(client), name).unwrap(),
            ServerConnection::new(Arc::new(server)).unwrap(),
        )
    }

    fn take_output(
        connection: &mut impl std::ops::DerefMut<
            Target = tokio_rustls::rustls::ConnectionCommon<impl Sized>,
        >,
    ) -> Vec<u8> {
        let mut bytes = Vec::new();
        while connection.wants_write() {
            connection.write_tls(&mut bytes).unwrap();
        }
        bytes
    }

    /// Feeds `bytes` to the server as one poll of a handshake would; whether the probe fired.
    fn server_reads(server: &mut ServerConnection, mut bytes: &[u8]) -> bool {
        FLIGHT_DONE.with(|done| done.set(false));
        while !bytes.is_empty() {
            server.read_tls(&mut bytes).unwrap();
            server.process_new_packets().unwrap();
        }
        FLIGHT_DONE.with(Cell::take)
    }

    #[test]
    fn the_probe_fires_once_the_whole_client_hello_is_answered() {
        let (mut client, mut server) = pair(&[&version::TLS13], &[aws_lc_rs::kx_group::X25519]);
        let hello = take_output(&mut client);
        assert!(hello.len() > 100);
        // A ClientHello in two segments: nothing is answered after the first.
        assert!(!server_reads(&mut server, &hello[..60]));
        assert!(!server.wants_write());
        assert!(server_reads(&mut server, &hello[60..]));
        assert!(server.wants_write(), "the flight is built");
        // The client's Finished completes the handshake; the probe stays quiet after it.
        let flight = take_output(&mut server);
        client.read_tls(&mut &flight[..]).unwrap();
        client.process_new_packets().unwrap();
        let finished = take_output(&mut client);
        assert!(
            finished.len() < HELD_BYTES as usize,
            "the Finished ({} bytes) stays under the mark",
            finished.len()
        );
        assert!(!server_reads(&mut server, &finished));
        assert!(!server.is_handshaking());
    }

    #[test]
    fn a_hello_retry_request_is_not_a_complete_flight() {
        // The client's key share is for P-256; the server takes X25519 only.
        let (mut client, mut server) = pair(
            &[&version::TLS13],
            &[aws_lc_rs::kx_group::SECP256R1, aws_lc_rs::kx_group::X25519],
        );
        let hello = take_output(&mut client);
        assert!(!server_reads(&mut server, &hello), "a HelloRetryRequest");
        let retry = take_output(&mut server);
        client.read_tls(&mut &retry[..]).unwrap();
        client.process_new_packets().unwrap();
        let second = take_output(&mut client);
        assert!(
            server_reads(&mut server, &second),
            "the flight after the second hello"
        );
    }

    #[test]
    fn tls_1_2_is_never_held() {
        let (mut client, mut server) = pair(&[&version::TLS12], &[aws_lc_rs::kx_group::X25519]);
        let hello = take_output(&mut client);
        assert!(!server_reads(&mut server, &hello));
        let flight = take_output(&mut server);
        client.read_tls(&mut &flight[..]).unwrap();
        client.process_new_packets().unwrap();
        let finished = take_output(&mut client);
        assert!(!server_reads(&mut server, &finished));
        assert!(!server.is_handshaking());
    }
}
