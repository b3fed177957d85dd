//! End-to-end: `weir bench --h2` against an in-process HTTP/2 server (the `h2` crate), as h2c
//! with prior knowledge and over TLS with ALPN `h2`. The server counts connections, streams
//! and the most streams it saw in flight at once on one connection: the report's counts agree
//! with them, and `--streams` really puts that many requests on a connection at once.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use common::{TestCertificate, plan, settings};
use tokio::io::{AsyncRead, AsyncWrite};
use weir_bench::{ConnectionMode, Plan, PlanError, Stop};

#[derive(Default)]
struct Counts {
    connections: AtomicUsize,
    streams: AtomicUsize,
    in_flight: AtomicUsize,
    most_in_flight: AtomicUsize,
}

/// Serves 100-byte bodies after a short pause (so streams overlap); `tls`: ALPN h2 only.
fn start_server(tls: Option<&TestCertificate>) -> (SocketAddr, Arc<Counts>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let address = listener.local_addr().expect("address");
    let counts = Arc::new(Counts::default());
    let acceptor = tls.map(|certificate| {
        let mut config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(vec![certificate.der.clone()], certificate.key.clone_key())
            .expect("certificate");
        config.alpn_protocols = vec![b"h2".to_vec()];
        tokio_rustls::TlsAcceptor::from(Arc::new(config))
    });
    let server_counts = Arc::clone(&counts);
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
            while let Ok((tcp, _)) = listener.accept().await {
                let counts = Arc::clone(&server_counts);
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    match acceptor {
                        None => serve(tcp, counts).await,
                        Some(acceptor) => {
                            if let Ok(tls) = acceptor.accept(tcp).await {
                                serve(tls, counts).await;
                            }
                        }
                    }
                });
            }
        });
    });
    (address, counts)
}

async fn serve<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(io: S, counts: Arc<Counts>) {
    let Ok(mut connection) = h2::server::handshake(io).await else {
        return;
    };
    counts.connections.fetch_add(1, Ordering::SeqCst);
    let on_connection = Arc::new(AtomicUsize::new(0));
    while let Some(Ok((_request, mut respond))) = connection.accept().await {
        counts.streams.fetch_add(1, Ordering::SeqCst);
        let now = on_connection.fetch_add(1, Ordering::SeqCst) + 1;
        counts.most_in_flight.fetch_max(now, Ordering::SeqCst);
        counts.in_flight.fetch_add(1, Ordering::SeqCst);
        let (counts, on_connection) = (Arc::clone(&counts), Arc::clone(&on_connection));
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(2)).await;
            let response = http::Response::builder()
                .status(200)
                .header("content-length", "100")
                .body(())
                .expect("response");
            if let Ok(mut body) = respond.send_response(response, false) {
                let _ = body.send_data(Bytes::from(vec![b'x'; 100]), true);
            }
            on_connection.fetch_sub(1, Ordering::SeqCst);
            counts.in_flight.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

#[test]
fn h2c_streams_share_each_connection() {
    let (address, counts) = start_server(None);
    let mut run = settings(vec![format!("http://{address}/")], Stop::Count(800));
    run.connections = 2;
    run.http2_streams = Some(8);
    let report = weir_bench::run(&plan(run)).expect("run");
    assert_eq!(report.requests.completed, 800, "{:?}", report.errors);
    assert_eq!(report.errors.total, 0);
    assert_eq!(report.requests.successful, 800);
    assert_eq!(report.connections_opened, 2);
    assert_eq!(report.bytes_received, 800 * 100);
    assert_eq!(report.settings.protocol, "http2");
    assert_eq!(report.settings.streams, Some(8));
    assert_eq!(counts.connections.load(Ordering::SeqCst), 2);
    assert_eq!(counts.streams.load(Ordering::SeqCst), 800);
    assert_eq!(
        counts.most_in_flight.load(Ordering::SeqCst),
        8,
        "8 streams at once"
    );
}

#[test]
fn h2_over_tls_negotiates_alpn() {
    let certificate = TestCertificate::new();
    let (address, counts) = start_server(Some(&certificate));
    let mut run = settings(
        vec![format!("https://127.0.0.1:{}/", address.port())],
        Stop::Count(300),
    );
    run.connections = 3;
    run.http2_streams = Some(4);
    let report = weir_bench::run(&plan(run)).expect("run");
    assert_eq!(report.requests.completed, 300, "{:?}", report.errors);
    assert_eq!(report.errors.total, 0);
    assert_eq!(report.connections_opened, 3);
    let tls = report.tls.as_ref().expect("a TLS section");
    assert_eq!(tls.handshakes_total, 3);
    assert_eq!(
        report.settings.tls.as_ref().expect("tls settings").alpn,
        ["h2"]
    );
    assert_eq!(counts.connections.load(Ordering::SeqCst), 3);
    assert_eq!(counts.streams.load(Ordering::SeqCst), 300);
}

#[test]
fn a_server_without_h2_is_a_tls_error_not_a_hang() {
    // An HTTP/1.1-only HTTPS server: ALPN does not choose h2.
    let (origin, _certificate) = common::TestOrigin::https(true);
    let mut run = settings(vec![origin.https_url("/")], Stop::Count(5));
    run.connections = 1;
    run.http2_streams = Some(2);
    let report = weir_bench::run(&plan(run)).expect("run");
    assert_eq!(report.requests.completed, 0);
    assert!(report.errors.tls > 0, "{:?}", report.errors);
    origin.stop();
}

#[test]
fn h2_plans_refuse_what_does_not_apply() {
    let mut run = settings(vec!["http://127.0.0.1:1/".into()], Stop::Count(1));
    run.http2_streams = Some(0);
    assert!(matches!(
        Plan::new(run.clone()),
        Err(PlanError::Zero("--streams"))
    ));
    run.http2_streams = Some(4);
    run.mode = ConnectionMode::Close;
    assert!(matches!(
        Plan::new(run.clone()),
        Err(PlanError::CloseWithH2)
    ));
    run.mode = ConnectionMode::KeepAlive;
    run.headers = vec!["Connection: close".into()];
    assert!(matches!(Plan::new(run), Err(PlanError::H2Header(_))));
    let mut run = settings(vec!["tcp://127.0.0.1:1".into()], Stop::Count(1));
    run.http2_streams = Some(4);
    assert!(matches!(Plan::new(run), Err(PlanError::HttpOnly("--h2"))));
}
