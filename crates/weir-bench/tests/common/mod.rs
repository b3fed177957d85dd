//! Shared by the integration tests: an in-process origin and a plan builder.

#![allow(dead_code)]

pub mod h2;
pub mod schema;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use weir_bench::{ConnectionMode, L4Mode, Plan, Settings, Stop, TlsSettings, UrlOrder};
use weir_core::Shutdown;
use weir_origin::{Origin, OriginOptions, OriginStats, OriginTls};

/// `weir origin` on its own runtime, on a free loopback port.
pub struct TestOrigin {
    pub address: SocketAddr,
    pub stats: Arc<OriginStats>,
    shutdown: Shutdown,
    runtime: tokio::runtime::Runtime,
}

impl TestOrigin {
    pub fn start() -> TestOrigin {
        TestOrigin::with_options(OriginOptions::default())
    }

    /// `weir origin` with `options` (name and listen address are the test's).
    pub fn with_options(options: OriginOptions) -> TestOrigin {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let origin = runtime
            .block_on(Origin::bind(OriginOptions {
                name: "bench-test".to_owned(),
                listen: "127.0.0.1:0".parse().expect("address"),
                ..options
            }))
            .expect("bind a loopback port");
        let address = origin.local_addr();
        let stats = origin.stats();
        let (shutdown, signal) = Shutdown::new();
        runtime.spawn(origin.run(signal));
        TestOrigin {
            address,
            stats,
            shutdown,
            runtime,
        }
    }

    /// An HTTPS origin with a fresh self-signed certificate; resumption as told.
    pub fn https(resumption: bool) -> (TestOrigin, TestCertificate) {
        let certificate = TestCertificate::new();
        let tls = OriginTls::new(
            vec![certificate.der.clone()],
            certificate.key.clone_key(),
            resumption,
        )
        .expect("TLS settings");
        let origin = TestOrigin::with_options(OriginOptions {
            tls: Some(tls),
            ..OriginOptions::default()
        });
        (origin, certificate)
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    pub fn https_url(&self, path: &str) -> String {
        format!("https://{}{path}", self.address)
    }

    /// The `tcp://` URL of an echo origin.
    pub fn tcp_url(&self) -> String {
        format!("tcp://{}", self.address)
    }

    /// Waits (up to 10 s) until `condition` holds of the origin's counters, which are updated
    /// just after the client sees the answer.
    pub fn eventually(&self, what: &str, condition: impl Fn(&OriginStats) -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !condition(&self.stats) {
            assert!(
                std::time::Instant::now() < deadline,
                "timed out waiting for {what}: {:?}",
                self.stats.snapshot()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    pub fn stop(self) {
        self.shutdown.trigger();
        self.runtime.shutdown_timeout(Duration::from_secs(1));
    }
}

/// A self-signed ECDSA P-256 certificate for `localhost` and `127.0.0.1`, its key, and its
/// PEM in a temporary file (for `--cacert`), removed on drop.
pub struct TestCertificate {
    pub der: rustls::pki_types::CertificateDer<'static>,
    pub key: rustls::pki_types::PrivateKeyDer<'static>,
    pub pem_path: std::path::PathBuf,
}

impl TestCertificate {
    pub fn new() -> TestCertificate {
        use std::sync::atomic::{AtomicU32, Ordering};
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let certified = rcgen::generate_simple_self_signed(vec![
            "localhost".to_owned(),
            "127.0.0.1".to_owned(),
        ])
        .expect("rcgen makes a certificate");
        let pem_path = std::env::temp_dir().join(format!(
            "weir-bench-test-{}-{}.pem",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::write(&pem_path, certified.cert.pem()).expect("write the CA file");
        let key =
            rustls::pki_types::PrivatePkcs8KeyDer::from(certified.signing_key.serialize_der());
        TestCertificate {
            der: certified.cert.der().clone(),
            key: key.into(),
            pem_path,
        }
    }
}

impl Drop for TestCertificate {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.pem_path);
    }
}

/// A plan with test defaults: 4 connections, 2 threads, keep-alive, closed loop, 5 s timeout.
pub fn settings(urls: Vec<String>, stop: Stop) -> Settings {
    Settings {
        urls,
        method: "GET".to_owned(),
        headers: Vec::new(),
        body: Vec::new(),
        order: UrlOrder::Sequential,
        connections: 4,
        threads: Some(2),
        stop,
        rate: None,
        mode: ConnectionMode::KeepAlive,
        timeout: Duration::from_secs(5),
        progress: false,
        l4_mode: L4Mode::RequestResponse,
        l4_size: None,
        tls: TlsSettings::default(),
        http2_streams: None,
    }
}

pub fn plan(settings: Settings) -> Plan {
    Plan::new(settings).expect("valid test plan")
}
