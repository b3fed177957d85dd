//! TLS for tests: a throw-away PKI written to a temporary directory, and
//! rustls clients that can be told what to offer (resumption, versions,
//! signature schemes, a client certificate).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
pub use tokio_rustls::client::TlsStream;
use weir_tls::rustls::client::Resumption;
use weir_tls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use weir_tls::rustls::crypto::aws_lc_rs;
use weir_tls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use weir_tls::rustls::{self, ClientConfig, DigitallySignedStruct, HandshakeKind, SignatureScheme};
use weir_tls::{KeyType, TestCa};

use crate::client::Response;

/// A CA and the files of the certificates it issued, in a temporary
/// directory removed on drop.
pub struct Pki {
    /// The temporary directory holding `ca.pem` and the issued files.
    pub dir: PathBuf,
    /// The CA that issues the certificates.
    pub ca: TestCa,
}

impl Default for Pki {
    fn default() -> Self {
        Pki::new()
    }
}

impl Pki {
    /// A fresh CA in a fresh temporary directory, with `ca.pem` written; panics on failure (test
    /// set-up).
    pub fn new() -> Pki {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "weir-pki-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let ca = TestCa::new("weir test CA").expect("CA");
        std::fs::write(dir.join("ca.pem"), &ca.certificate().cert_pem).expect("write CA");
        Pki { dir, ca }
    }

    /// The path of `name` inside the directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The CA certificate file.
    pub fn ca_path(&self) -> PathBuf {
        self.path("ca.pem")
    }

    /// Issues a server certificate for `names`, writes `STEM.pem` and
    /// `STEM.key`, and returns their paths.
    pub fn server(&self, stem: &str, names: &[&str], key_type: KeyType) -> (PathBuf, PathBuf) {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let issued = self.ca.server(&names, key_type, 30).expect("issue");
        self.write(stem, &issued.cert_pem, &issued.key_pem)
    }

    /// A TLS acceptor with a certificate for `names` from this CA, offering `alpn` (none:
    /// weir's default), for a test's own TLS server (a node that plays one part).
    pub fn acceptor(&self, names: &[&str], alpn: &[&str]) -> Arc<weir_tls::Acceptor> {
        let (cert, key) = self.server("acceptor", names, KeyType::EcdsaP256);
        let alpn: Vec<String> = alpn.iter().map(|p| format!("\"{p}\"")).collect();
        let alpn = match alpn.is_empty() {
            true => String::new(),
            false => format!("alpn = [{}]\n", alpn.join(", ")),
        };
        let toml = format!(
            "[virtual_servers.s]\nlisten = \"127.0.0.1:1\"\nprotocol = \"https\"\npool = \"p\"\n\
             [virtual_servers.s.tls]\ncertificates = [{{ cert = \"{}\", key = \"{}\" }}]\n{alpn}\
             [pools.p]\nnodes = [{{ address = \"127.0.0.1:2\" }}]\n",
            cert.display().to_string().replace('\\', "\\\\"),
            key.display().to_string().replace('\\', "\\\\"),
        );
        let config = weir_config::parse_str(&toml, "acceptor.toml").expect("valid config");
        let tls = config.virtual_servers[0].tls.as_ref().expect("tls");
        Arc::new(weir_tls::Acceptor::new("s", tls, "acceptor.toml").expect("keys load"))
    }

    /// Issues a client certificate `CN=common_name`; returns the file paths.
    pub fn client(&self, stem: &str, common_name: &str) -> (PathBuf, PathBuf) {
        let issued = self
            .ca
            .client(common_name, KeyType::EcdsaP256, 30)
            .expect("issue");
        self.write(stem, &issued.cert_pem, &issued.key_pem)
    }

    /// A revocation list of the CA revoking the certificate files `revoked`, written as
    /// `STEM.crl`; returns its path.
    pub fn crl(&self, stem: &str, revoked: &[&std::path::Path]) -> PathBuf {
        let pems: Vec<String> = revoked
            .iter()
            .map(|path| std::fs::read_to_string(path).expect("read cert"))
            .collect();
        let pems: Vec<&str> = pems.iter().map(String::as_str).collect();
        let crl = self.ca.crl(&pems).expect("sign CRL");
        let path = self.path(&format!("{stem}.crl"));
        std::fs::write(&path, crl).expect("write CRL");
        path
    }

    fn write(&self, stem: &str, cert: &str, key: &str) -> (PathBuf, PathBuf) {
        let cert_path = self.path(&format!("{stem}.pem"));
        let key_path = self.path(&format!("{stem}.key"));
        std::fs::write(&cert_path, cert).expect("write cert");
        std::fs::write(&key_path, key).expect("write key");
        (cert_path, key_path)
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What a test client offers.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Verify the server against this CA file; `None` accepts any certificate.
    pub ca: Option<PathBuf>,
    /// Remember sessions and offer them again.
    pub resumption: bool,
    /// Offer TLS 1.2 only.
    pub tls12_only: bool,
    /// Offer TLS 1.3 only.
    pub tls13_only: bool,
    /// Offer only RSA signature schemes (so an ECDSA certificate cannot be used).
    pub rsa_only: bool,
    /// Present this client certificate (cert, key files).
    pub client_cert: Option<(PathBuf, PathBuf)>,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            ca: None,
            resumption: true,
            tls12_only: false,
            tls13_only: false,
            rsa_only: false,
            client_cert: None,
        }
    }
}

impl ClientOptions {
    /// The default options offering TLS 1.3 only, then TLS 1.2 only: a test run once per
    /// version.
    pub fn each_version() -> [ClientOptions; 2] {
        [
            ClientOptions {
                tls13_only: true,
                ..ClientOptions::default()
            },
            ClientOptions {
                tls12_only: true,
                ..ClientOptions::default()
            },
        ]
    }
}

/// Builds a client config. Keep and reuse it across connections for resumption.
pub fn client_config(options: &ClientOptions) -> Arc<ClientConfig> {
    let provider = Arc::new(aws_lc_rs::default_provider());
    let versions: Vec<&'static rustls::SupportedProtocolVersion> = if options.tls12_only {
        vec![&rustls::version::TLS12]
    } else if options.tls13_only {
        vec![&rustls::version::TLS13]
    } else {
        vec![&rustls::version::TLS12, &rustls::version::TLS13]
    };
    let inner: Arc<dyn ServerCertVerifier> = match &options.ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in read_certs(ca) {
                roots.add(cert).expect("CA parses");
            }
            rustls::client::WebPkiServerVerifier::builder_with_provider(
                Arc::new(roots),
                Arc::clone(&provider),
            )
            .build()
            .expect("verifier")
        }
        None => weir_tls::connector::insecure_verifier(Arc::clone(&provider)),
    };
    let verifier = Arc::new(Schemes {
        inner,
        rsa_only: options.rsa_only,
    });
    let builder = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&versions)
        .expect("versions")
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let mut config = match &options.client_cert {
        Some((cert, key)) => builder
            .with_client_auth_cert(read_certs(cert), read_key(key))
            .expect("client cert"),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config.resumption = if options.resumption {
        Resumption::in_memory_sessions(64)
    } else {
        Resumption::disabled()
    };
    Arc::new(config)
}

fn read_certs(path: &Path) -> Vec<CertificateDer<'static>> {
    use rustls::pki_types::pem::PemObject;
    CertificateDer::pem_file_iter(path)
        .expect("cert file")
        .collect::<Result<_, _>>()
        .expect("certs parse")
}

fn read_key(path: &Path) -> PrivateKeyDer<'static> {
    use rustls::pki_types::pem::PemObject;
    PrivateKeyDer::from_pem_file(path).expect("key parses")
}

/// The first certificate of a PEM file, to compare with what a server sent.
pub fn leaf(path: &Path) -> CertificateDer<'static> {
    read_certs(path).remove(0)
}

/// Opens a TLS connection to `addr` naming `sni`.
pub async fn connect(
    addr: SocketAddr,
    sni: &str,
    config: &Arc<ClientConfig>,
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from(sni.to_owned())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    tokio::time::timeout(
        Duration::from_secs(10),
        TlsConnector::from(Arc::clone(config)).connect(name, tcp),
    )
    .await
    .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "handshake timed out"))?
}

/// How the client saw the handshake.
pub fn was_resumed(stream: &TlsStream<TcpStream>) -> bool {
    stream.get_ref().1.handshake_kind() == Some(HandshakeKind::Resumed)
}

/// The certificate the server presented.
pub fn peer_leaf(stream: &TlsStream<TcpStream>) -> CertificateDer<'static> {
    stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first())
        .expect("server sent a certificate")
        .clone()
        .into_owned()
}

/// Sends `GET path` on an open TLS connection and reads one response.
pub async fn get(stream: &mut TlsStream<TcpStream>, path: &str) -> anyhow::Result<Response> {
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes())
        .await?;
    stream.flush().await?;
    let mut buffer = bytes::BytesMut::new();
    tokio::time::timeout(
        Duration::from_secs(10),
        crate::client::read_response(stream, &mut buffer, false),
    )
    .await
    .map_err(|_| anyhow::anyhow!("no response within 10 s"))?
}

/// Wraps a verifier to narrow the signature schemes offered.
#[derive(Debug)]
struct Schemes {
    inner: Arc<dyn ServerCertVerifier>,
    rsa_only: bool,
}

impl ServerCertVerifier for Schemes {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        let schemes = self.inner.supported_verify_schemes();
        if !self.rsa_only {
            return schemes;
        }
        schemes
            .into_iter()
            .filter(|scheme| {
                matches!(
                    scheme,
                    SignatureScheme::RSA_PSS_SHA256
                        | SignatureScheme::RSA_PSS_SHA384
                        | SignatureScheme::RSA_PSS_SHA512
                        | SignatureScheme::RSA_PKCS1_SHA256
                        | SignatureScheme::RSA_PKCS1_SHA384
                        | SignatureScheme::RSA_PKCS1_SHA512
                )
            })
            .collect()
    }
}
