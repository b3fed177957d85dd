//! The HTTP/2 server driver over an in-memory connection: a request served
//! through the `h2` client, and each flood sent as raw frames answered with
//! GOAWAY `ENHANCE_YOUR_CALM` and counted under its kind.

use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use weir_config::{Http2, Http2Codec};
use weir_observe::{Flood, Http2Metrics};
use weir_testkit::h2flood::{GET_BLOCK, POST_BLOCK, frame};

use super::flood::{EMPTY_DATA_RETIRE_AT, PREFACE};
use super::{ConnectionLimits, H2Stream, Head, Incoming, StreamHandler, Via, serve};

/// Answers every request with its path as the body.
#[derive(Clone)]
struct Echo;

impl StreamHandler for Echo {
    async fn serve(&self, mut stream: H2Stream, request: Incoming) {
        let body = Bytes::from(path_of(&request));
        let head = Head::Written(200, b"HTTP/1.1 200 OK\r\n\r\n");
        if stream.send_head(head, false).is_ok() {
            let _ = stream.send_data(body, true, Duration::from_secs(5)).await;
        }
    }
}

/// The request's path, whichever codec read it.
fn path_of(request: &Incoming) -> String {
    match request {
        Incoming::Parts(parts) => parts.uri.path().to_owned(),
        Incoming::Own(Ok(request)) => String::from_utf8_lossy(request.head.path()).into_owned(),
        Incoming::Own(Err(refused)) => format!("refused: {}", refused.error.reason),
    }
}

fn settings(codec: Http2Codec) -> Http2 {
    Http2 {
        cleartext: true,
        max_concurrent_streams: 100,
        max_header_list_size: 64 * 1024,
        header_table_size: 4096,
        initial_stream_window: 256 * 1024,
        initial_connection_window: 1024 * 1024,
        max_frame_size: 16 * 1024,
        ping_interval: Duration::from_secs(30),
        ping_timeout: Duration::from_secs(10),
        codec,
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

/// Starts the driver on one end of an in-memory connection; returns the other end.
fn start(metrics: &Http2Metrics, codec: Http2Codec) -> (DuplexStream, weir_core::Shutdown) {
    start_with(metrics, TIMING, codec)
}

/// [`start`] with other per-connection limits.
fn start_with(
    metrics: &Http2Metrics,
    timing: ConnectionLimits,
    codec: Http2Codec,
) -> (DuplexStream, weir_core::Shutdown) {
    let (client, server) = tokio::io::duplex(1 << 20);
    let shutdown = spawn_driver(server, settings(codec), timing, metrics.clone(), Echo);
    (client, shutdown)
}

/// Serves `server`, one end of an in-memory connection, with `handler` until it closes;
/// the shutdown that ends it.
fn spawn_driver<H: StreamHandler>(
    server: DuplexStream,
    settings: Http2,
    timing: ConnectionLimits,
    metrics: Http2Metrics,
    handler: H,
) -> weir_core::Shutdown {
    let (shutdown, signal) = weir_core::Shutdown::new();
    tokio::spawn(async move {
        serve(
            server,
            Bytes::new(),
            Via::H2c,
            &settings,
            timing,
            (&metrics, &weir_observe::LogBudget::new()),
            handler,
            signal,
        )
        .await;
    });
    shutdown
}

/// Reads frames until a GOAWAY; returns its error code (`None`: closed without one).
async fn goaway_code(client: &mut DuplexStream) -> Option<u32> {
    let mut buffer = Vec::new();
    let read_all = async {
        let mut chunk = [0u8; 16 * 1024];
        loop {
            let mut at = 0;
            while buffer.len() >= at + 9 {
                let length = usize::from(buffer[at]) << 16
                    | usize::from(buffer[at + 1]) << 8
                    | usize::from(buffer[at + 2]);
                if buffer.len() < at + 9 + length {
                    break;
                }
                if buffer[at + 3] == 0x7 && length >= 8 {
                    let code = &buffer[at + 13..at + 17];
                    return Some(u32::from_be_bytes(code.try_into().expect("4 bytes")));
                }
                at += 9 + length;
            }
            match client.read(&mut chunk).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read_all)
        .await
        .expect("the server answers in time")
}

async fn a_request_is_served_over_h2c(codec: Http2Codec) {
    let metrics = Http2Metrics::default();
    let (client, _shutdown) = start(&metrics, codec);
    let (mut sender, connection) = h2::client::handshake(client).await.expect("handshake");
    tokio::spawn(connection);
    let request = http::Request::get("http://a.example/hello")
        .body(())
        .unwrap();
    let (response, _) = sender.send_request(request, true).expect("sent");
    let response = response.await.expect("a response");
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let data = body.data().await.expect("a body").expect("data");
    assert_eq!(&data[..], b"/hello");
    assert_eq!(metrics.streams.get(), 1);
    assert_eq!(metrics.connections_h2c.get(), 1);
}

/// Opens the connection with raw frames, sends `flood` until the server
/// answers, and checks the GOAWAY and the count.
async fn assert_flood(
    codec: Http2Codec,
    opening: Vec<u8>,
    flood: impl Fn(u32) -> Vec<u8>,
    kind: Flood,
) {
    let metrics = Http2Metrics::default();
    let (mut client, _shutdown) = start(&metrics, codec);
    let mut bytes = Vec::from(PREFACE);
    bytes.extend(frame(0x4, 0, 0, &[]));
    bytes.extend(opening);
    client.write_all(&bytes).await.expect("preface");
    let writer = async {
        for n in 0..5000u32 {
            if client.write_all(&flood(n)).await.is_err() {
                break;
            }
        }
    };
    // The duplex pipe is large enough for the whole flood; the server reads it at its pace.
    tokio::time::timeout(Duration::from_secs(10), writer)
        .await
        .expect("flood written");
    assert_eq!(
        goaway_code(&mut client).await,
        Some(0xb),
        "{kind:?}: ENHANCE_YOUR_CALM"
    );
    for other in Flood::ALL {
        let expected = u64::from(other == kind);
        assert_eq!(
            metrics.flood(other).get(),
            expected,
            "{kind:?}: count of {other:?}"
        );
    }
}

async fn floods_get_goaway_and_are_counted(codec: Http2Codec) {
    let ping = |_| frame(0x6, 0, 0, &[0; 8]);
    assert_flood(codec, Vec::new(), ping, Flood::Ping).await;
    let settings = |_| frame(0x4, 0, 0, &[0, 3, 0, 0, 0, 100]);
    assert_flood(codec, Vec::new(), settings, Flood::Settings).await;
    let window_update = |_| frame(0x8, 0, 0, &[0, 0, 0, 1]);
    assert_flood(codec, Vec::new(), window_update, Flood::WindowUpdate).await;
    let priority = |n: u32| frame(0x2, 0, 2 * n + 1, &[0, 0, 0, 0, 16]);
    assert_flood(codec, Vec::new(), priority, Flood::IgnoredFrames).await;
    let unknown = |_| frame(0xfa, 0, 0, b"extension");
    assert_flood(codec, Vec::new(), unknown, Flood::IgnoredFrames).await;
    // Empty DATA frames on an open stream.
    let open = frame(0x1, 0x4, 1, POST_BLOCK);
    let empty = |_| frame(0x0, 0, 1, &[]);
    assert_flood(codec, open, empty, Flood::EmptyFrames).await;
    // A header block that never ends.
    let open = frame(0x1, 0, 1, GET_BLOCK);
    let continuation = |_| frame(0x9, 0, 1, &[0x84]);
    assert_flood(codec, open, continuation, Flood::Continuation).await;
    // Rapid reset: each stream opened and cancelled at once.
    let rapid_reset = |n: u32| {
        let stream = 2 * n + 1;
        let mut bytes = frame(0x1, 0x5, stream, GET_BLOCK);
        bytes.extend(frame(0x3, 0, stream, &[0, 0, 0, 8]));
        bytes
    };
    assert_flood(codec, Vec::new(), rapid_reset, Flood::RapidReset).await;
}

/// A client that wears its connection out (empty DATA frames, under the flood's rate) is
/// sent a graceful GOAWAY, and a flood after that is still caught, answered and counted:
/// the wear used up the driver's waiter (`Tripwire::poll_outside`), which joins again.
/// (The driver's next tick is 5 s away with these settings.)
async fn a_flood_after_the_connection_wore_out_is_still_caught(codec: Http2Codec) {
    let metrics = Http2Metrics::default();
    let (mut client, _shutdown) = start(&metrics, codec);
    let mut bytes = Vec::from(PREFACE);
    bytes.extend(frame(0x4, 0, 0, &[]));
    bytes.extend(frame(0x1, 0x4, 1, POST_BLOCK));
    for _ in 0..EMPTY_DATA_RETIRE_AT + 5 {
        bytes.extend(frame(0x0, 0, 1, &[]));
    }
    client.write_all(&bytes).await.expect("written");
    assert_eq!(
        goaway_code(&mut client).await,
        Some(0),
        "worn out: a graceful GOAWAY"
    );
    assert_eq!(metrics.flood(Flood::EmptyFrames).get(), 0);
    // One write, past the PING budget's burst, then nothing more.
    let pings: Vec<u8> = (0..200).flat_map(|_| frame(0x6, 0, 0, &[0; 8])).collect();
    client.write_all(&pings).await.expect("pings written");
    let caught = tokio::time::timeout(Duration::from_secs(3), goaway_code(&mut client)).await;
    assert_eq!(
        caught.ok().flatten(),
        Some(0xb),
        "the flood: ENHANCE_YOUR_CALM at once"
    );
    assert_eq!(metrics.flood(Flood::Ping).get(), 1);
}

async fn ordinary_traffic_is_not_a_flood(codec: Http2Codec) {
    let metrics = Http2Metrics::default();
    let (client, _shutdown) = start(&metrics, codec);
    let (mut sender, connection) = h2::client::handshake(client).await.expect("handshake");
    tokio::spawn(connection);
    for n in 0..300 {
        let request = http::Request::get(format!("http://a.example/{n}"))
            .body(())
            .unwrap();
        sender = sender.ready().await.expect("ready");
        let (response, _) = sender.send_request(request, true).expect("sent");
        let response = response.await.expect("a response");
        assert_eq!(response.status(), 200);
    }
    assert_eq!(metrics.streams.get(), 300);
    for kind in Flood::ALL {
        assert_eq!(metrics.flood(kind).get(), 0, "{kind:?}");
    }
}

async fn shutdown_sends_goaway_and_lets_streams_finish(codec: Http2Codec) {
    let metrics = Http2Metrics::default();
    let (client, shutdown) = start(&metrics, codec);
    let (mut sender, connection) = h2::client::handshake(client).await.expect("handshake");
    let connection = tokio::spawn(connection);
    let request = http::Request::get("http://a.example/x").body(()).unwrap();
    let (response, _) = sender.send_request(request, true).expect("sent");
    assert_eq!(response.await.expect("a response").status(), 200);
    shutdown.trigger();
    // The server's GOAWAY ends the connection without an error.
    let ended = tokio::time::timeout(Duration::from_secs(5), connection)
        .await
        .expect("closed in time")
        .expect("task");
    assert!(ended.is_ok(), "{ended:?}");
}

/// `max_requests_per_connection` on HTTP/2: the connection serves that many
/// streams, then sends GOAWAY (no error) and closes once they are done; a
/// stream opened past the limit is refused (`REFUSED_STREAM`: unprocessed,
/// so the client may send it again on a new connection).
async fn a_connection_serves_at_most_max_streams_then_goes_away(codec: Http2Codec) {
    let metrics = Http2Metrics::default();
    let timing = ConnectionLimits {
        max_streams: Some(2),
        ..TIMING
    };
    let (client, _shutdown) = start_with(&metrics, timing, codec);
    let (mut sender, connection) = h2::client::handshake(client).await.expect("handshake");
    let connection = tokio::spawn(connection);
    // Three streams at once, before the server can say anything.
    let mut responses = Vec::new();
    for n in 0..3 {
        let request = http::Request::get(format!("http://a.example/{n}"))
            .body(())
            .unwrap();
        match sender.send_request(request, true) {
            Ok((response, _)) => responses.push(response),
            Err(error) => panic!("stream {n} not sent: {error}"),
        }
    }
    let mut served = 0;
    for response in responses {
        let outcome = tokio::time::timeout(Duration::from_secs(5), response)
            .await
            .expect("an outcome in time");
        match outcome {
            Ok(response) => {
                assert_eq!(response.status(), 200);
                served += 1;
            }
            Err(error) => assert_eq!(error.reason(), Some(h2::Reason::REFUSED_STREAM), "{error}"),
        }
    }
    assert_eq!(served, 2);
    // GOAWAY without an error, then the connection ends once the streams are done.
    let ended = tokio::time::timeout(Duration::from_secs(5), connection)
        .await
        .expect("closed in time")
        .expect("task");
    assert!(ended.is_ok(), "{ended:?}");
}

#[test]
fn the_preface_is_recognised_from_its_first_bytes() {
    assert_eq!(super::starts_with_preface(b""), None);
    assert_eq!(super::starts_with_preface(b"PRI * HT"), None);
    assert_eq!(super::starts_with_preface(PREFACE), Some(true));
    assert_eq!(
        super::starts_with_preface(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0"),
        Some(true)
    );
    assert_eq!(
        super::starts_with_preface(b"GET / HTTP/1.1\r\n"),
        Some(false)
    );
    assert_eq!(super::starts_with_preface(b"PRIX"), Some(false));
}

async fn a_wrong_preface_closes_the_connection_without_an_answer(codec: Http2Codec) {
    let metrics = Http2Metrics::default();
    let (mut client, _shutdown) = start(&metrics, codec);
    client
        .write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .expect("written");
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut answer));
    assert_eq!(read.await.expect("closed in time").expect("clean close"), 0);
    // Counted once the server stopped draining what the client still sends.
    drop(client);
    for _ in 0..200 {
        if metrics.protocol_errors.get() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(metrics.protocol_errors.get(), 1);
    assert_eq!(metrics.streams.get(), 0);
}

/// Serves each request through [`H2Stream`]: reads the body and trailers,
/// answers 100-continue style with an interim 103, then echoes the body in
/// 1 KiB pieces and sends the request's trailers back with a count.
#[derive(Clone)]
struct Relay;

impl StreamHandler for Relay {
    async fn serve(&self, mut stream: H2Stream, _request: Incoming) {
        let wait = Duration::from_secs(5);
        let mut body = Vec::new();
        while let Ok(Some(data)) = stream.read_body(wait).await {
            body.extend_from_slice(&data);
        }
        let mut trailers = stream
            .trailers(wait)
            .await
            .ok()
            .flatten()
            .unwrap_or_default();
        let hints = http::Response::builder().status(103).body(()).unwrap();
        stream.send_interim(Head::Map(hints)).expect("interim");
        let head = Head::Written(200, b"HTTP/1.1 200 OK\r\n\r\n");
        stream.send_head(head, false).expect("head");
        for piece in body.chunks(1024) {
            let piece = Bytes::copy_from_slice(piece);
            stream.send_data(piece, false, wait).await.expect("data");
        }
        trailers.extend_from_slice(format!("x-bytes: {}\r\n", body.len()).as_bytes());
        stream.send_trailers(&trailers).expect("trailers");
    }
}

async fn a_stream_relays_body_and_trailers_within_the_clients_window(codec: Http2Codec) {
    let (client, server) = tokio::io::duplex(1 << 16);
    let metrics = Http2Metrics::default();
    let _shutdown = spawn_driver(server, settings(codec), TIMING, metrics, Relay);
    // A small client window: the 300 KiB response must wait for it to open.
    let (mut sender, connection) = h2::client::Builder::new()
        .initial_window_size(16 * 1024)
        .handshake::<_, Bytes>(client)
        .await
        .expect("handshake");
    tokio::spawn(connection);
    let request = http::Request::post("http://a.example/echo")
        .body(())
        .unwrap();
    let (response, mut body) = sender.send_request(request, false).expect("sent");
    let payload = Bytes::from(vec![7u8; 300 * 1024]);
    body.reserve_capacity(payload.len());
    body.send_data(payload.clone(), false).expect("body");
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", "0".parse().unwrap());
    body.send_trailers(trailers).expect("trailers");
    let response = response.await.expect("a response");
    assert_eq!(response.status(), 200);
    let mut received = response.into_body();
    let mut echoed = Vec::new();
    while let Some(data) = received.data().await {
        let data = data.expect("data");
        let _ = received.flow_control().release_capacity(data.len());
        echoed.extend_from_slice(&data);
    }
    assert_eq!(echoed.len(), payload.len());
    assert!(echoed == payload);
    let trailers = received.trailers().await.expect("trailers").expect("some");
    assert_eq!(trailers["grpc-status"], "0");
    assert_eq!(trailers["x-bytes"], "307200");
}

/// Holds every request without answering (a slow node, say).
#[derive(Clone)]
struct Stall;

impl StreamHandler for Stall {
    async fn serve(&self, _stream: H2Stream, _request: Incoming) {
        tokio::time::sleep(Duration::from_secs(30)).await;
    }
}

/// Streams the client reset are closed for the codec but still at work in
/// weir: past `max_concurrent_streams` and a quarter more of them, new streams are
/// refused, so a client cannot pile up work by resetting (rapid reset below its
/// flood bound).
async fn streams_still_at_work_count_against_the_concurrency_limit(codec: Http2Codec) {
    let (client, server) = tokio::io::duplex(1 << 20);
    let limited = Http2 {
        max_concurrent_streams: 8,
        ..settings(codec)
    };
    let _shutdown = spawn_driver(server, limited, TIMING, Http2Metrics::default(), Stall);
    let (mut sender, connection) = h2::client::handshake(client).await.expect("handshake");
    tokio::spawn(connection);
    let request = || {
        http::Request::builder()
            .uri("http://weir.test/")
            .body(())
            .expect("valid request")
    };
    for n in 0..10 {
        sender = sender.ready().await.expect("ready");
        let (mut response, _) = sender.send_request(request(), true).expect("sent");
        if n >= 8 {
            // Admitted (the handler stalls): no refusal comes.
            let answered = tokio::time::timeout(Duration::from_millis(200), &mut response).await;
            assert!(answered.is_err(), "stream {n}: {answered:?}");
        }
        // Dropping the response resets the stream (CANCEL).
        drop(response);
    }
    sender = sender.ready().await.expect("ready");
    let (response, _) = sender.send_request(request(), true).expect("sent");
    let refused = tokio::time::timeout(Duration::from_secs(5), response)
        .await
        .expect("answered at once")
        .expect_err("refused");
    assert_eq!(refused.reason(), Some(h2::Reason::REFUSED_STREAM));
}

/// Sends 4 MiB on every stream, counting what the codec took.
#[derive(Clone)]
struct Large(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl StreamHandler for Large {
    async fn serve(&self, mut stream: H2Stream, _request: Incoming) {
        let head = Head::Written(200, b"HTTP/1.1 200 OK\r\n\r\n");
        if stream.send_head(head, false).is_err() {
            return;
        }
        let piece = Bytes::from(vec![b'x'; 64 * 1024]);
        for _ in 0..64 {
            if stream
                .send_data(piece.clone(), false, Duration::from_secs(30))
                .await
                .is_err()
            {
                return;
            }
            self.0
                .store(stream.bytes_sent, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// A client that opens the largest windows and then reads nothing holds little of weir's
/// memory: what waits for its socket is bounded (weir's codec: 256 KiB per connection; the
/// `h2` crate: 256 KiB per stream), not by the 2 GiB its windows allow.
async fn a_client_that_does_not_read_holds_a_bounded_output(codec: Http2Codec) {
    let (mut client, server) = tokio::io::duplex(64 * 1024);
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let handler = Large(std::sync::Arc::clone(&sent));
    let metrics = Http2Metrics::default();
    let _shutdown = spawn_driver(server, settings(codec), TIMING, metrics, handler);
    let mut bytes = Vec::from(PREFACE);
    // SETTINGS_INITIAL_WINDOW_SIZE = 2^31 - 1, and the connection's window as large.
    bytes.extend(frame(0x4, 0, 0, &[0, 4, 0x7f, 0xff, 0xff, 0xff]));
    bytes.extend(frame(0x8, 0, 0, &[0x7f, 0xff, 0, 0]));
    bytes.extend(frame(0x1, 0x5, 1, GET_BLOCK));
    client.write_all(&bytes).await.expect("written");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let taken = sent.load(std::sync::atomic::Ordering::Relaxed);
    assert!(taken >= 64 * 1024, "the answer started: {taken}");
    assert!(
        taken <= 1024 * 1024,
        "{taken} bytes taken for a client that reads nothing"
    );
}

/// Each case above, on each codec.
macro_rules! on_both_codecs {
    ($($case:ident),* $(,)?) => {
        mod h2_crate {
            $(
                #[tokio::test]
                async fn $case() {
                    super::$case(weir_config::Http2Codec::H2).await;
                }
            )*
        }
        mod weir_codec {
            $(
                #[tokio::test]
                async fn $case() {
                    super::$case(weir_config::Http2Codec::Weir).await;
                }
            )*
        }
    };
}

on_both_codecs!(
    a_request_is_served_over_h2c,
    floods_get_goaway_and_are_counted,
    a_flood_after_the_connection_wore_out_is_still_caught,
    ordinary_traffic_is_not_a_flood,
    shutdown_sends_goaway_and_lets_streams_finish,
    a_connection_serves_at_most_max_streams_then_goes_away,
    a_wrong_preface_closes_the_connection_without_an_answer,
    a_stream_relays_body_and_trailers_within_the_clients_window,
    streams_still_at_work_count_against_the_concurrency_limit,
    a_client_that_does_not_read_holds_a_bounded_output,
);
