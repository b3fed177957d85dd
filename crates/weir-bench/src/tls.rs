//! TLS for `https://` URLs: the client's rustls settings (aws-lc-rs provider, ALPN
//! `http/1.1`, versions, resumption on or off, verification against `--cacert` or off), the
//! handshake on a new connection, and the guard that fails a run which was told to do full
//! handshakes only and saw a resumed one.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::client::Resumption;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, aws_lc_rs};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    ClientConfig, DigitallySignedStruct, HandshakeKind, ProtocolVersion, RootCertStore,
    SignatureScheme,
};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

mod tickets;

pub use tickets::TicketStore;

/// Which TLS versions the client offers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TlsVersions {
    /// TLS 1.2 and 1.3 (the server picks; a rustls or modern server picks 1.3).
    #[default]
    Both,
    /// TLS 1.2 only.
    Tls12,
    /// TLS 1.3 only.
    Tls13,
}

impl TlsVersions {
    /// The versions as the report names them.
    pub fn names(self) -> Vec<&'static str> {
        match self {
            TlsVersions::Both => vec!["1.2", "1.3"],
            TlsVersions::Tls12 => vec!["1.2"],
            TlsVersions::Tls13 => vec!["1.3"],
        }
    }

    fn rustls(self) -> &'static [&'static rustls::SupportedProtocolVersion] {
        const BOTH: &[&rustls::SupportedProtocolVersion] =
            &[&rustls::version::TLS13, &rustls::version::TLS12];
        const TLS12: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS12];
        const TLS13: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS13];
        match self {
            TlsVersions::Both => BOTH,
            TlsVersions::Tls12 => TLS12,
            TlsVersions::Tls13 => TLS13,
        }
    }
}

/// What the command line asked of TLS (used only with `https://` URLs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// Offer resumption (tickets, TLS 1.2 session IDs). Off: every handshake must be full.
    pub resumption: bool,
    /// Which versions the client offers.
    pub versions: TlsVersions,
    /// Verify the server against this CA (PEM). `None`: no verification (the handshake
    /// signature is still checked, so the client does a real client's work).
    pub cacert: Option<PathBuf>,
    /// Server name sent (and verified) instead of the URL's host.
    pub sni: Option<String>,
}

impl Default for TlsSettings {
    /// Resumption on, TLS 1.2 and 1.3, no verification, the URL's host as SNI.
    fn default() -> TlsSettings {
        TlsSettings {
            resumption: true,
            versions: TlsVersions::Both,
            cacert: None,
            sni: None,
        }
    }
}

/// The client side of TLS for one run: settings and the rustls config every connection shares
/// (so TLS 1.3 tickets and TLS 1.2 sessions from one connection serve the next).
#[derive(Clone)]
pub struct TlsClient {
    /// What the command line asked of TLS.
    pub settings: TlsSettings,
    /// The ALPN protocol offered.
    pub alpn: &'static str,
    connector: TlsConnector,
}

/// One completed client handshake.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Handshake {
    /// Full, full with a HelloRetryRequest, or resumed.
    pub kind: HandshakeKind,
    /// The negotiated version; `None` if rustls did not report one.
    pub version: Option<ProtocolVersion>,
    /// From the start of the TCP connect to the end of the TLS handshake.
    pub took: Duration,
}

/// Handshakes as the client saw them (`ClientConnection::handshake_kind`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HandshakeCounts {
    /// Full handshakes, with or without a HelloRetryRequest.
    pub full: u64,
    /// Of `full`: those that needed a HelloRetryRequest (an extra round trip).
    pub full_with_hello_retry: u64,
    /// Resumed a session (TLS 1.3 PSK, or a TLS 1.2 ticket or session ID).
    pub resumed: u64,
    /// Handshakes that negotiated TLS 1.2.
    pub tls12: u64,
    /// Handshakes that negotiated TLS 1.3.
    pub tls13: u64,
}

/// Why the TLS client could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    /// The `--cacert` file cannot be read or holds no usable certificate.
    #[error("--cacert {path}: {reason}")]
    CaCert {
        /// The path as given.
        path: String,
        /// What is wrong with the file.
        reason: String,
    },
    /// The `--sni` value is not a DNS name or IP address.
    #[error("--sni {0:?} is not a valid server name")]
    Sni(String),
    /// rustls refused the configuration (shown in the message, so not a `source`).
    #[error("TLS settings: {0}")]
    Rustls(rustls::Error),
}

impl From<rustls::Error> for TlsSetupError {
    fn from(error: rustls::Error) -> Self {
        TlsSetupError::Rustls(error)
    }
}

/// A run told to do full handshakes only (resumption off) saw a resumed one: its figures are
/// not full-handshake figures, so it fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "TLS resumption was off, yet {resumed} of {total} handshakes resumed a session: \
     these are not full-handshake figures (the client offered no ticket, so the count or the \
     client is broken)"
)]
pub struct ResumptionViolation {
    /// Handshakes that resumed a session.
    pub resumed: u64,
    /// All handshakes of the run.
    pub total: u64,
}

impl TlsClient {
    /// The client of a run of `connections` connections (with resumption on, a TLS 1.3
    /// ticket can be kept for each).
    pub fn new(settings: TlsSettings, connections: usize) -> Result<TlsClient, TlsSetupError> {
        TlsClient::with_alpn(settings, connections, b"http/1.1")
    }

    /// The same, offering `alpn` (`h2` for HTTP/2 runs) instead of `http/1.1`.
    pub fn with_alpn(
        settings: TlsSettings,
        connections: usize,
        alpn: &[u8],
    ) -> Result<TlsClient, TlsSetupError> {
        if let Some(sni) = &settings.sni {
            ServerName::try_from(sni.clone()).map_err(|_| TlsSetupError::Sni(sni.clone()))?;
        }
        let provider = Arc::new(aws_lc_rs::default_provider());
        // aws-lc seeds its random generator on first use, from CPU jitter: tens of
        // milliseconds once per process, which the first handshake of the run would be
        // charged with. Drawn here, before the clock starts.
        let _ = provider.secure_random.fill(&mut [0u8; 32]);
        let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_protocol_versions(settings.versions.rustls())?;
        let mut config = match &settings.cacert {
            Some(path) => builder
                .with_root_certificates(root_store(path)?)
                .with_no_client_auth(),
            None => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(NoVerification(provider)))
                .with_no_client_auth(),
        };
        config.alpn_protocols = vec![alpn.to_vec()];
        config.resumption = if settings.resumption {
            Resumption::store(Arc::new(TicketStore::for_connections(connections)))
        } else {
            Resumption::disabled()
        };
        Ok(TlsClient {
            settings,
            alpn: if alpn == b"h2" { "h2" } else { "http/1.1" },
            connector: TlsConnector::from(Arc::new(config)),
        })
    }

    /// The name to send for a URL whose host is `host`: `--sni`, else the host.
    pub fn server_name(&self, host: &str) -> Result<ServerName<'static>, TlsSetupError> {
        let name = self.settings.sni.as_deref().unwrap_or(host);
        ServerName::try_from(name.to_owned()).map_err(|_| TlsSetupError::Sni(name.to_owned()))
    }

    /// Runs the handshake on a connection opened at `started`.
    pub async fn handshake(
        &self,
        tcp: TcpStream,
        name: ServerName<'static>,
        started: Instant,
    ) -> io::Result<(TlsStream<TcpStream>, Handshake)> {
        let stream = self.connector.connect(name, tcp).await?;
        let session = stream.get_ref().1;
        let handshake = Handshake {
            // A finished client handshake always has a kind; Full is the safe reading.
            kind: session.handshake_kind().unwrap_or(HandshakeKind::Full),
            version: session.protocol_version(),
            took: started.elapsed(),
        };
        Ok((stream, handshake))
    }
}

impl fmt::Debug for TlsClient {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("TlsClient")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl HandshakeCounts {
    /// Counts one completed handshake by kind and version.
    pub fn count(&mut self, handshake: &Handshake) {
        match handshake.kind {
            HandshakeKind::Resumed => self.resumed += 1,
            HandshakeKind::FullWithHelloRetryRequest => {
                self.full += 1;
                self.full_with_hello_retry += 1;
            }
            _ => self.full += 1,
        }
        match handshake.version {
            Some(ProtocolVersion::TLSv1_2) => self.tls12 += 1,
            Some(ProtocolVersion::TLSv1_3) => self.tls13 += 1,
            _ => {}
        }
    }

    /// All handshakes, full and resumed.
    pub fn total(&self) -> u64 {
        self.full + self.resumed
    }

    /// Adds `other`'s counts (another thread's or slice's) to these.
    pub fn merge(&mut self, other: &HandshakeCounts) {
        self.full += other.full;
        self.full_with_hello_retry += other.full_with_hello_retry;
        self.resumed += other.resumed;
        self.tls12 += other.tls12;
        self.tls13 += other.tls13;
    }
}

/// The guard: with resumption off, any resumed handshake fails the run.
pub fn check_resumption(
    resumption: bool,
    counts: &HandshakeCounts,
) -> Result<(), ResumptionViolation> {
    if resumption || counts.resumed == 0 {
        return Ok(());
    }
    Err(ResumptionViolation {
        resumed: counts.resumed,
        total: counts.total(),
    })
}

fn root_store(path: &std::path::Path) -> Result<RootCertStore, TlsSetupError> {
    let failure = |reason: String| TlsSetupError::CaCert {
        path: path.display().to_string(),
        reason,
    };
    let certificates = CertificateDer::pem_file_iter(path)
        .and_then(|certificates| certificates.collect::<Result<Vec<_>, _>>())
        .map_err(|error| failure(error.to_string()))?;
    let mut roots = RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(certificates);
    if added == 0 {
        return Err(failure("no usable CA certificate in it".to_owned()));
    }
    Ok(roots)
}

/// No certificate verification (a load generator's default), but the handshake signature is
/// verified with the provider's algorithms, so the client does a real client's crypto.
#[derive(Debug)]
struct NoVerification(Arc<CryptoProvider>);

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        certificate: &CertificateDer<'_>,
        signature: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            certificate,
            signature,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        certificate: &CertificateDer<'_>,
        signature: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            certificate,
            signature,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resumption_guard() {
        let counts = |full, resumed| HandshakeCounts {
            full,
            resumed,
            ..HandshakeCounts::default()
        };
        // Resumption on: anything goes.
        assert_eq!(check_resumption(true, &counts(1, 99)), Ok(()));
        // Off, all full: fine.
        assert_eq!(check_resumption(false, &counts(100, 0)), Ok(()));
        // Off, one resumed: a loud failure that says how many.
        let violation = check_resumption(false, &counts(99, 1)).expect_err("must fail");
        assert_eq!(
            violation,
            ResumptionViolation {
                resumed: 1,
                total: 100
            }
        );
        let message = violation.to_string();
        assert!(message.contains("resumption was off"), "{message}");
        assert!(message.contains("1 of 100"), "{message}");
    }

    #[test]
    fn counts_by_kind_and_version() {
        let mut counts = HandshakeCounts::default();
        let handshake = |kind, version| Handshake {
            kind,
            version: Some(version),
            took: Duration::from_millis(1),
        };
        counts.count(&handshake(HandshakeKind::Full, ProtocolVersion::TLSv1_3));
        counts.count(&handshake(
            HandshakeKind::FullWithHelloRetryRequest,
            ProtocolVersion::TLSv1_3,
        ));
        counts.count(&handshake(HandshakeKind::Resumed, ProtocolVersion::TLSv1_2));
        let mut merged = HandshakeCounts::default();
        merged.merge(&counts);
        merged.merge(&counts);
        assert_eq!(
            merged,
            HandshakeCounts {
                full: 4,
                full_with_hello_retry: 2,
                resumed: 2,
                tls12: 2,
                tls13: 4,
            }
        );
        assert_eq!(merged.total(), 6);
    }

    #[test]
    fn settings_make_clients() {
        assert!(TlsClient::new(TlsSettings::default(), 1).is_ok());
        let bad_sni = TlsSettings {
            sni: Some("not a name!".into()),
            ..TlsSettings::default()
        };
        assert!(matches!(
            TlsClient::new(bad_sni, 1),
            Err(TlsSetupError::Sni(_))
        ));
        let missing = TlsSettings {
            cacert: Some("/nonexistent/ca.pem".into()),
            ..TlsSettings::default()
        };
        let error = TlsClient::new(missing, 1).expect_err("missing CA file");
        assert!(error.to_string().contains("/nonexistent/ca.pem"), "{error}");
        let client = TlsClient::new(
            TlsSettings {
                sni: Some("example.test".into()),
                versions: TlsVersions::Tls13,
                ..TlsSettings::default()
            },
            1,
        )
        .expect("valid");
        assert_eq!(
            client.server_name("127.0.0.1").expect("name"),
            ServerName::try_from("example.test").expect("name")
        );
        assert_eq!(TlsVersions::Both.names(), ["1.2", "1.3"]);
    }
}
