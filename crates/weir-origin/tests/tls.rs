//! HTTPS: the origin serves the same routes over TLS (rustls client, certificate made by
//! rcgen), counts full and resumed handshakes, and sends no tickets when resumption is off.

mod common;

use std::sync::Arc;

use common::{PATIENCE, eventually, start};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{ClientConfig, HandshakeKind, RootCertStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use weir_origin::{OriginOptions, OriginTls};

/// A self-signed ECDSA P-256 certificate for `localhost` and `127.0.0.1`.
fn certificate() -> (CertificateDer<'static>, PrivateKeyDer<'static>) {
    let certified =
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .expect("rcgen makes a certificate");
    let key = PrivatePkcs8KeyDer::from(certified.signing_key.serialize_der());
    (certified.cert.der().clone(), key.into())
}

fn client_config(trusted: &CertificateDer<'static>) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    roots.add(trusted.clone()).expect("a valid root");
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("default versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

async fn connect(
    address: std::net::SocketAddr,
    config: &Arc<ClientConfig>,
) -> TlsStream<TcpStream> {
    let tcp = TcpStream::connect(address).await.expect("connect");
    let name = ServerName::try_from("localhost").expect("a DNS name");
    tokio::time::timeout(
        PATIENCE,
        TlsConnector::from(Arc::clone(config)).connect(name, tcp),
    )
    .await
    .expect("handshake in time")
    .expect("handshake succeeds")
}

/// Sends `GET target` with `Connection: close` and reads the whole answer.
async fn get_and_close(stream: &mut TlsStream<TcpStream>, target: &str) -> String {
    let request = format!("GET {target} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut response = Vec::new();
    // The origin ends with close_notify, so the read ends cleanly.
    tokio::time::timeout(PATIENCE, stream.read_to_end(&mut response))
        .await
        .expect("response in time")
        .expect("read");
    String::from_utf8(response).expect("text response")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_serves_requests_and_counts_handshakes() {
    let (certificate, key) = certificate();
    let tls = OriginTls::new(vec![certificate.clone()], key, true).expect("TLS settings");
    let origin = start(
        "secure",
        OriginOptions {
            tls: Some(tls),
            ..OriginOptions::default()
        },
    )
    .await;
    let config = client_config(&certificate);

    // Keep-alive: two requests on one TLS connection.
    let mut stream = connect(origin.address, &config).await;
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    assert_eq!(
        stream.get_ref().1.handshake_kind(),
        Some(HandshakeKind::Full)
    );
    stream
        .write_all(b"GET /bytes/5 HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .expect("write");
    let mut first = vec![0; 4096];
    let read = stream.read(&mut first).await.expect("read");
    let first = String::from_utf8_lossy(&first[..read]).into_owned();
    assert!(first.starts_with("HTTP/1.1 200 OK\r\n"), "{first}");
    assert!(first.contains("X-Origin: secure\r\n"), "{first}");
    let second = get_and_close(&mut stream, "/healthz").await;
    assert!(second.ends_with("\r\n\r\nok"), "{second}");

    // A new connection resumes the session from the ticket the first one got.
    let mut resumed = connect(origin.address, &config).await;
    assert_eq!(
        resumed.get_ref().1.handshake_kind(),
        Some(HandshakeKind::Resumed)
    );
    let answer = get_and_close(&mut resumed, "/").await;
    assert!(answer.contains("hello from weir origin secure"), "{answer}");

    // A plain-text request on the TLS port fails the handshake and is counted.
    let mut plain = TcpStream::connect(origin.address).await.expect("connect");
    plain
        .write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .expect("write");
    let mut sink = Vec::new();
    let _ = tokio::time::timeout(PATIENCE, plain.read_to_end(&mut sink)).await;

    let stats = Arc::clone(&origin.stats);
    eventually("three requests and a failed handshake", || {
        stats.requests() == 3 && stats.tls_handshake_failures() == 1
    })
    .await;
    let snapshot = origin.stats.snapshot();
    assert_eq!(snapshot.tls_handshakes_full, 1);
    assert_eq!(snapshot.tls_handshakes_resumed, 1);
    assert_eq!(snapshot.connections_accepted, 3);
    origin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_resumption_every_handshake_is_full() {
    let (certificate, key) = certificate();
    let tls = OriginTls::new(vec![certificate.clone()], key, false).expect("TLS settings");
    assert!(!tls.resumption());
    let origin = start(
        "no-resume",
        OriginOptions {
            tls: Some(tls),
            ..OriginOptions::default()
        },
    )
    .await;
    let config = client_config(&certificate);
    for _ in 0..3 {
        let mut stream = connect(origin.address, &config).await;
        assert_eq!(
            stream.get_ref().1.handshake_kind(),
            Some(HandshakeKind::Full)
        );
        let answer = get_and_close(&mut stream, "/status/204").await;
        assert!(answer.starts_with("HTTP/1.1 204"), "{answer}");
    }
    let stats = Arc::clone(&origin.stats);
    eventually("three requests", || stats.requests() == 3).await;
    assert_eq!(origin.stats.tls_handshakes_full(), 3);
    assert_eq!(origin.stats.tls_handshakes_resumed(), 0);
    origin.stop().await;
}

#[test]
fn pem_files_load_and_bad_ones_are_reported() {
    let certified =
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("certificate");
    let directory = std::env::temp_dir().join(format!("weir-origin-tls-{}", std::process::id()));
    std::fs::create_dir_all(&directory).expect("temp dir");
    let (cert_path, key_path) = (directory.join("cert.pem"), directory.join("key.pem"));
    std::fs::write(&cert_path, certified.cert.pem()).expect("write cert");
    std::fs::write(&key_path, certified.signing_key.serialize_pem()).expect("write key");
    let tls = OriginTls::from_pem_files(&cert_path, &key_path, true).expect("PEM files load");
    assert!(tls.resumption());
    // The key file holds no certificate; a missing file names itself.
    let error = OriginTls::from_pem_files(&key_path, &key_path, true).expect_err("no cert");
    assert!(error.to_string().contains("no certificate"), "{error}");
    let missing = directory.join("missing.pem");
    let error = OriginTls::from_pem_files(&missing, &key_path, true).expect_err("missing");
    assert!(error.to_string().contains("missing.pem"), "{error}");
    let _ = std::fs::remove_dir_all(&directory);
}
