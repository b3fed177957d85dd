//! An in-process HTTP/2 server (the `h2` crate) for `--h2` runs: h2c, or TLS with ALPN `h2`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite};

use super::TestCertificate;

#[derive(Default)]
pub struct Counts {
    pub connections: AtomicUsize,
    pub streams: AtomicUsize,
    pub in_flight: AtomicUsize,
    pub most_in_flight: AtomicUsize,
}

/// Serves 100-byte bodies after a short pause (so streams overlap); `tls`: ALPN h2 only.
pub fn start_server(tls: Option<&TestCertificate>) -> (SocketAddr, Arc<Counts>) {
    start_server_with(tls, None, Duration::from_millis(2))
}

/// [`start_server`] allowing at most `max_streams` concurrent streams per connection (its
/// SETTINGS), answering each after `pause`.
pub fn start_server_with(
    tls: Option<&TestCertificate>,
    max_streams: Option<u32>,
    pause: Duration,
) -> (SocketAddr, Arc<Counts>) {
    start(tls, (max_streams, None), pause)
}

/// An h2c [`start_server`] whose connections go away (a graceful GOAWAY) after `streams`
/// streams, as a server with a limit on requests per connection does: streams the client
/// opened meanwhile are not processed.
pub fn start_server_going_away(streams: usize) -> (SocketAddr, Arc<Counts>) {
    start(None, (None, Some(streams)), Duration::from_millis(2))
}

fn start(
    tls: Option<&TestCertificate>,
    (max_streams, goaway_after): (Option<u32>, Option<usize>),
    pause: Duration,
) -> (SocketAddr, Arc<Counts>) {
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
                        None => serve(tcp, counts, (max_streams, goaway_after), pause).await,
                        Some(acceptor) => {
                            if let Ok(tls) = acceptor.accept(tcp).await {
                                serve(tls, counts, (max_streams, goaway_after), pause).await;
                            }
                        }
                    }
                });
            }
        });
    });
    (address, counts)
}

async fn serve<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    io: S,
    counts: Arc<Counts>,
    (max_streams, goaway_after): (Option<u32>, Option<usize>),
    pause: Duration,
) {
    let mut builder = h2::server::Builder::new();
    if let Some(max) = max_streams {
        builder.max_concurrent_streams(max);
    }
    let Ok(mut connection) = builder.handshake(io).await else {
        return;
    };
    counts.connections.fetch_add(1, Ordering::SeqCst);
    let on_connection = Arc::new(AtomicUsize::new(0));
    let mut accepted = 0;
    while let Some(Ok((_request, mut respond))) = connection.accept().await {
        counts.streams.fetch_add(1, Ordering::SeqCst);
        accepted += 1;
        if goaway_after == Some(accepted) {
            connection.graceful_shutdown();
        }
        let now = on_connection.fetch_add(1, Ordering::SeqCst) + 1;
        counts.most_in_flight.fetch_max(now, Ordering::SeqCst);
        counts.in_flight.fetch_add(1, Ordering::SeqCst);
        let (counts, on_connection) = (Arc::clone(&counts), Arc::clone(&on_connection));
        tokio::spawn(async move {
            tokio::time::sleep(pause).await;
            // The stream stops counting before its answer goes out: once the client has the
            // answer it may open the next stream, which this connection's accept loop can see
            // before a decrement placed after the send would run.
            on_connection.fetch_sub(1, Ordering::SeqCst);
            counts.in_flight.fetch_sub(1, Ordering::SeqCst);
            let response = http::Response::builder()
                .status(200)
                .header("content-length", "100")
                .body(())
                .expect("response");
            if let Ok(mut body) = respond.send_response(response, false) {
                let _ = body.send_data(Bytes::from(vec![b'x'; 100]), true);
            }
        });
    }
}
