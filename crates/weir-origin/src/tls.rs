//! HTTPS: the origin's rustls server settings (aws-lc-rs, TLS 1.2 and 1.3, ALPN `http/1.1`,
//! resumption by stateless tickets and a session cache unless turned off). The handshake an
//! accepted connection goes through is in `server.rs`.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use rustls::ServerConfig;
use rustls::crypto::aws_lc_rs;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{NoServerSessionStorage, ServerSessionMemoryCache};

/// TLS 1.2 sessions kept for resumption by session ID (TLS 1.3 and TLS 1.2 clients that
/// support tickets resume by stateless tickets instead, which need no cache).
const SESSION_CACHE: usize = 4096;

/// An origin's TLS settings, ready to accept with. Compared by identity.
#[derive(Clone)]
pub struct OriginTls {
    config: Arc<ServerConfig>,
    resumption: bool,
}

/// Why TLS settings could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file cannot be read or parsed.
    #[error("cannot read {path}: {reason}")]
    Pem {
        /// The file as named.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The certificate file holds no certificate.
    #[error("{path} holds no certificate")]
    NoCertificate {
        /// The file as named.
        path: String,
    },
    /// rustls refused the certificate, the key or the settings (shown in the message, so
    /// not a `source`).
    #[error("invalid certificate or key: {0}")]
    Rustls(rustls::Error),
}

impl From<rustls::Error> for TlsError {
    fn from(error: rustls::Error) -> Self {
        TlsError::Rustls(error)
    }
}

impl OriginTls {
    /// Settings serving `certificates` (leaf first, then its chain) with `key`. With
    /// `resumption`, TLS 1.3 clients get two stateless tickets after each full handshake
    /// and TLS 1.2 clients a ticket or a session ID; without, no ticket is sent and no
    /// session kept, so every handshake is full.
    pub fn new(
        certificates: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
        resumption: bool,
    ) -> Result<OriginTls, TlsError> {
        let provider = Arc::new(aws_lc_rs::default_provider());
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
            .with_no_client_auth()
            .with_single_cert(certificates, key)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        if resumption {
            config.ticketer = aws_lc_rs::Ticketer::new()?;
            config.session_storage = ServerSessionMemoryCache::new(SESSION_CACHE);
        } else {
            config.session_storage = Arc::new(NoServerSessionStorage {});
            config.send_tls13_tickets = 0;
        }
        Ok(OriginTls {
            config: Arc::new(config),
            resumption,
        })
    }

    /// Settings from a PEM certificate chain file and a PEM private key file (PKCS #8,
    /// PKCS #1 or SEC1).
    pub fn from_pem_files(
        certificate: &Path,
        key: &Path,
        resumption: bool,
    ) -> Result<OriginTls, TlsError> {
        let pem_error = |path: &Path, error: rustls::pki_types::pem::Error| TlsError::Pem {
            path: path.display().to_string(),
            reason: error.to_string(),
        };
        let certificates = CertificateDer::pem_file_iter(certificate)
            .and_then(|certificates| certificates.collect::<Result<Vec<_>, _>>())
            .map_err(|error| pem_error(certificate, error))?;
        if certificates.is_empty() {
            return Err(TlsError::NoCertificate {
                path: certificate.display().to_string(),
            });
        }
        let key = PrivateKeyDer::from_pem_file(key).map_err(|error| pem_error(key, error))?;
        OriginTls::new(certificates, key, resumption)
    }

    /// Whether clients may resume sessions.
    pub fn resumption(&self) -> bool {
        self.resumption
    }

    /// The rustls server settings.
    pub fn config(&self) -> &Arc<ServerConfig> {
        &self.config
    }
}

impl PartialEq for OriginTls {
    fn eq(&self, other: &OriginTls) -> bool {
        Arc::ptr_eq(&self.config, &other.config)
    }
}

impl Eq for OriginTls {}

impl fmt::Debug for OriginTls {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("OriginTls")
            .field("resumption", &self.resumption)
            .finish_non_exhaustive()
    }
}
