//! TLS from weir to the nodes of a pool: verification against a CA file or
//! the system roots (or none, when configured off), SNI, an optional client
//! certificate, and session resumption.
//!
//! One connector per pool, and connections are pooled per pool and node, so
//! connections made with different TLS settings are never shared.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::client::{Resumption, WebPkiServerVerifier};
use tokio_rustls::rustls::crypto::{
    CryptoProvider, verify_tls12_signature, verify_tls13_signature,
};
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tokio_rustls::rustls::{
    self, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use weir_config::{ConfigError, FileRef, UpstreamTls};

use crate::certs::{self, FileProblem};
use crate::provider;

/// Server names remembered per node for resumption (rustls keeps a few tickets for each);
/// a node is one server, but its connections may be made under another name after a
/// reload.
const NAMES_PER_NODE: usize = 4;

/// Nodes whose sessions are remembered at once; past it the memory starts afresh (a pool
/// whose DNS names keep moving must not grow it without end).
const NODES_REMEMBERED: usize = 1024;

/// Makes TLS connections to the nodes of one pool.
#[derive(Clone)]
pub struct Connector {
    /// The pool's settings; each node's connections use a copy with the node's own
    /// session memory ([`Connector::config_for`]).
    config: Arc<ClientConfig>,
    /// Per node, `config` with its own session memory. rustls files sessions by server
    /// name, and the nodes of a pool usually share one (`server_name`, or one IP on
    /// several ports): one memory for the pool offered each node the others' tickets,
    /// which no node can resume, so nothing ever resumed.
    per_node: Arc<Mutex<HashMap<SocketAddr, Arc<ClientConfig>>>>,
    /// The pool's `server_name`, sent to every node.
    server_name: Option<ServerName<'static>>,
    /// Without one: the DNS name the node was given by ([`Connector::for_host`]), as
    /// nginx's `proxy_ssl_name` defaults to the host of `proxy_pass`.
    node_name: Option<ServerName<'static>>,
    verify: bool,
    resumption: bool,
    /// A hash of the bytes of the files it was built from (CA, client certificate and
    /// key): a reload that re-read the same paths with new contents makes another one.
    files: u64,
}

/// [`Connector::files`] of `settings`: the files as they read now (one that cannot be
/// read hashes as empty; building the connector has read them all already).
fn files_hash(settings: &UpstreamTls) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    let client = settings.client_certificate.iter().flat_map(|(c, k)| [c, k]);
    for file in settings.ca.iter().chain(client) {
        file.read().unwrap_or_default().hash(&mut hasher);
    }
    hasher.finish()
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connector")
            .field("server_name", &self.server_name)
            .field("verify", &self.verify)
            .finish_non_exhaustive()
    }
}

impl Connector {
    /// Builds the connector, reading the CA and client certificate files.
    pub fn new(settings: &UpstreamTls, file_name: &str) -> Result<Connector, ConfigError> {
        Connector::build(settings).map_err(|problem| {
            ConfigError::single(
                file_name,
                problem.file.line,
                problem.file.key.to_string(),
                problem.message,
            )
        })
    }

    fn build(settings: &UpstreamTls) -> Result<Connector, FileProblem> {
        let provider = provider::provider(None, weir_config::defaults::TLS_GROUPS);
        let versions = provider::versions(&settings.versions);
        let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_protocol_versions(&versions)
            .map_err(|error| FileProblem {
                file: settings_ref(settings),
                message: format!("no usable TLS version: {error}"),
            })?;
        let verifier: Arc<dyn ServerCertVerifier> = if settings.verify {
            let roots = match &settings.ca {
                Some(ca) => certs::load_roots(ca)?,
                None => system_roots(),
            };
            WebPkiServerVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&provider))
                .build()
                .map_err(|error| FileProblem {
                    file: settings_ref(settings),
                    message: format!("cannot verify node certificates: {error}"),
                })?
        } else {
            Arc::new(NoVerification(Arc::clone(&provider)))
        };
        let builder = builder
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let mut config = match &settings.client_certificate {
            Some((cert, key)) => {
                let certified = certs::load_certified_key(&provider, cert, key)?;
                builder
                    .with_client_auth_cert(certified.cert.clone(), certs::read_key(key)?)
                    .map_err(|error| FileProblem {
                        file: key.clone(),
                        message: format!("unusable client certificate: {error}"),
                    })?
            }
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        config.resumption = Resumption::disabled();
        let server_name = match &settings.server_name {
            Some(name) => {
                Some(
                    ServerName::try_from(name.clone()).map_err(|error| FileProblem {
                        file: settings_ref(settings),
                        message: format!("invalid server_name \"{name}\": {error}"),
                    })?,
                )
            }
            None => None,
        };
        Ok(Connector {
            config: Arc::new(config),
            per_node: Arc::default(),
            server_name,
            node_name: None,
            verify: settings.verify,
            resumption: settings.session_resumption,
            files: files_hash(settings),
        })
    }

    /// Whether `other` was built from the same file contents as this one (the settings
    /// themselves are compared by the caller): connections made with one may serve the
    /// other.
    pub fn same_files(&self, other: &Connector) -> bool {
        self.files == other.files
    }

    /// The same connector offering other ALPN protocols (`h2` for a pool
    /// that speaks HTTP/2 to its nodes). Sessions are remembered apart.
    pub fn with_alpn(&self, protocols: &[&[u8]]) -> Connector {
        let mut config = (*self.config).clone();
        config.alpn_protocols = protocols.iter().map(|p| p.to_vec()).collect();
        Connector {
            config: Arc::new(config),
            per_node: Arc::default(),
            server_name: self.server_name.clone(),
            node_name: self.node_name.clone(),
            verify: self.verify,
            resumption: self.resumption,
            files: self.files,
        }
    }

    /// This connector for a node given by the DNS name `host`: without a `server_name`
    /// setting, `host` is sent as SNI and verified, where a node given by address gets
    /// its IP address. Sessions are remembered with this connector's (per node).
    pub fn for_host(&self, host: Option<&str>) -> Connector {
        let node_name = host.and_then(|host| ServerName::try_from(host.to_owned()).ok());
        Connector {
            node_name,
            ..self.clone()
        }
    }

    /// The name a connection to `node` sends as SNI and verifies the certificate
    /// against: the pool's `server_name`, else the node's DNS name, else its IP address.
    pub fn name_for(&self, node: SocketAddr) -> ServerName<'static> {
        self.server_name
            .clone()
            .or_else(|| self.node_name.clone())
            .unwrap_or_else(|| ServerName::IpAddress(node.ip().into()))
    }

    /// Runs the handshake on a connected socket to `node`.
    pub async fn connect(
        &self,
        tcp: TcpStream,
        node: SocketAddr,
    ) -> io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let name = self.name_for(node);
        TlsConnector::from(self.config_for(node))
            .connect(name, tcp)
            .await
    }

    /// The client settings for connections to `node`: the pool's, with the node's own
    /// session memory when resumption is on.
    fn config_for(&self, node: SocketAddr) -> Arc<ClientConfig> {
        if !self.resumption {
            return Arc::clone(&self.config);
        }
        let mut per_node = self
            .per_node
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(config) = per_node.get(&node) {
            return Arc::clone(config);
        }
        if per_node.len() >= NODES_REMEMBERED {
            per_node.clear();
        }
        let mut config = (*self.config).clone();
        config.resumption = Resumption::in_memory_sessions(NAMES_PER_NODE);
        let config = Arc::new(config);
        per_node.insert(node, Arc::clone(&config));
        config
    }
}

fn settings_ref(settings: &UpstreamTls) -> FileRef {
    settings.ca.clone().unwrap_or_else(|| FileRef {
        path: Default::default(),
        key: weir_config::KeyPath::root(),
        line: None,
    })
}

/// The operating system's trusted roots; unreadable ones are skipped with a warning.
fn system_roots() -> RootCertStore {
    let found = rustls_native_certs::load_native_certs();
    for error in &found.errors {
        tracing::warn!(%error, "could not read some system CA certificates");
    }
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(found.certs);
    roots
}

/// `verify = false`: any certificate is accepted, but the handshake
/// signatures are still checked (so the session keys are the node's).
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
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Also used by tools that connect without verifying (`weir bench`-like clients in tests).
pub fn insecure_verifier(provider: Arc<CryptoProvider>) -> Arc<dyn ServerCertVerifier> {
    Arc::new(NoVerification(provider))
}
