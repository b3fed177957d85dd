//! h2spec (installed by `scripts/test`) in strict mode against the HTTP/2
//! server driver, over h2c and over TLS with ALPN `h2` (weir-tls's
//! acceptor): every one of its 146 cases must pass, none skipped. The
//! handler reads each request body and answers with a body long enough for
//! the flow-control cases (h2spec skips 6.9.2/2 below 5 bytes).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::net::TcpListener;
use weir_observe::Http2Metrics;

use super::{ConnectionLimits, H2Stream, Head, Incoming, StreamHandler, Via, serve};

#[derive(Clone)]
struct Answer;

impl StreamHandler for Answer {
    async fn serve(&self, mut stream: H2Stream, _request: Incoming) {
        let wait = Duration::from_secs(5);
        while let Ok(Some(_)) = stream.read_body(wait).await {}
        let head = Head::Written(200, b"HTTP/1.1 200 OK\r\n\r\n");
        if stream.send_head(head, false).is_ok() {
            let body = Bytes::from_static(b"served by weir's HTTP/2 driver\n");
            let _ = stream.send_data(body, true, wait).await;
        }
    }
}

const TIMING: ConnectionLimits = ConnectionLimits {
    handshake: Duration::from_secs(5),
    idle: Duration::from_secs(60),
    max_streams: None,
    head: weir_http::Limits {
        max_head_bytes: 64 * 1024,
        max_headers: 100,
    },
};

/// Serves every connection of `listener`, through `tls` when given.
fn start(
    listener: TcpListener,
    tls: Option<Arc<weir_tls::Acceptor>>,
    codec: weir_config::Http2Codec,
) {
    let settings = weir_config::Http2 {
        codec,
        ..weir_config::Http2::default()
    };
    tokio::spawn(async move {
        let (_shutdown, signal) = weir_core::Shutdown::new();
        while let Ok((tcp, _)) = listener.accept().await {
            let (settings, signal, tls) = (settings.clone(), signal.clone(), tls.clone());
            tokio::spawn(async move {
                let metrics = Http2Metrics::default();
                match tls {
                    None => {
                        serve(
                            tcp,
                            Bytes::new(),
                            Via::H2c,
                            &settings,
                            TIMING,
                            (&metrics, &weir_observe::LogBudget::new()),
                            Answer,
                            signal,
                        )
                        .await;
                    }
                    Some(acceptor) => {
                        if let Ok((stream, _)) =
                            acceptor.accept(tcp, weir_tls::FirstSpeaker::Client).await
                        {
                            let via = Via::Alpn;
                            serve(
                                stream,
                                Bytes::new(),
                                via,
                                &settings,
                                TIMING,
                                (&metrics, &weir_observe::LogBudget::new()),
                                Answer,
                                signal,
                            )
                            .await;
                        }
                    }
                }
            });
        }
    });
}

/// The acceptor of an HTTPS virtual server offering only `h2`.
fn acceptor(pki: &weir_testkit::tls::Pki) -> Arc<weir_tls::Acceptor> {
    let (cert, key) = pki.server(
        "h2",
        &["localhost", "127.0.0.1"],
        weir_tls::KeyType::EcdsaP256,
    );
    let toml = format!(
        "[virtual_servers.s]\nlisten = \"127.0.0.1:1\"\nprotocol = \"https\"\npool = \"p\"\n\
         [virtual_servers.s.tls]\ncertificates = [{{ cert = \"{}\", key = \"{}\" }}]\n\
         alpn = [\"h2\"]\n[pools.p]\nnodes = [{{ address = \"127.0.0.1:2\" }}]\n",
        cert.display(),
        key.display()
    );
    let config = weir_config::parse_str(&toml, "h2spec.toml").expect("valid config");
    let tls = config.virtual_servers[0].tls.as_ref().expect("tls");
    Arc::new(weir_tls::Acceptor::new("s", tls, "h2spec.toml").expect("certificates load"))
}

/// h2spec over h2c and TLS against the driver on `codec`.
async fn h2spec_strict(codec: weir_config::Http2Codec) {
    let plain = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let plain_address = plain.local_addr().expect("address");
    start(plain, None, codec);
    let pki = weir_testkit::tls::Pki::new();
    let secure = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let secure_address = secure.local_addr().expect("address");
    start(secure, Some(acceptor(&pki)), codec);
    tokio::task::spawn_blocking(move || {
        weir_testkit::h2spec::run_strict(plain_address.port(), false);
        weir_testkit::h2spec::run_strict(secure_address.port(), true);
    })
    .await
    .expect("h2spec ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2spec_strict_passes_every_case_over_h2c_and_tls() {
    h2spec_strict(weir_config::Http2Codec::H2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2spec_strict_passes_every_case_on_weirs_codec() {
    h2spec_strict(weir_config::Http2Codec::Weir).await;
}
