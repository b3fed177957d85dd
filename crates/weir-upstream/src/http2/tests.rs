//! The HTTP/2 node pool against an in-process h2c server: streams multiplexed
//! on one connection up to the stream cap, the queue counting streams (clients in turn),
//! the connection cap, replacement after GOAWAY, idle close. Each runs on both
//! codecs (`http2.codec`): the `h2` crate and weir's own client.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use weir_core::ErrorKind;
use weir_observe::Metrics;

use super::*;

thread_local! {
    /// The codec the running test's connections use (each test runs on its own
    /// current-thread runtime).
    static CODEC: std::cell::Cell<UpstreamHttp2Codec> =
        const { std::cell::Cell::new(UpstreamHttp2Codec::H2) };
}

/// Runs each scenario once per codec, as `<scenario>::h2` and `<scenario>::weir`.
macro_rules! on_both_codecs {
    ($($scenario:ident),* $(,)?) => {
        $(
            mod $scenario {
                #[tokio::test]
                async fn h2() {
                    super::CODEC.set(weir_config::UpstreamHttp2Codec::H2);
                    super::$scenario().await;
                }

                #[tokio::test]
                async fn weir() {
                    super::CODEC.set(weir_config::UpstreamHttp2Codec::Weir);
                    super::$scenario().await;
                }
            }
        )*
    };
}

on_both_codecs!(
    streams_share_one_connection_up_to_the_cap_then_queue,
    the_connection_cap_holds_and_a_full_queue_refuses,
    a_connection_that_got_goaway_is_replaced,
    idle_connections_close_after_the_idle_timeout,
    a_refused_connect_is_retry_safe_and_frees_its_slot,
    a_waiter_that_gives_up_loses_nothing,
    a_withdrawn_node_sends_its_waiters_elsewhere,
    an_extended_connect_waits_for_a_new_connections_settings,
    a_node_is_pinged_once_unless_an_interval_is_set,
    clients_take_turns_for_a_stream_and_a_full_queue_pushes_out_the_longest,
    a_burst_waits_for_the_connections_being_opened,
    waiters_a_new_connection_cannot_carry_open_their_own,
    a_burst_does_not_wait_for_the_nodes_ping_answer,
    new_settings_from_a_reload_keep_the_queue_and_a_raised_cap_serves_it,
    a_cap_lowered_by_a_reload_drains_connections_past_it_and_keeps_to_it,
    two_http2_sides_of_one_node_add_up_in_the_open_connections_gauge,
);

fn settings(max_connections: u32, max_streams: u32, queue: u32) -> H2Settings {
    H2Settings {
        max_connections,
        max_streams,
        queue_length: queue,
        queue_timeout: Duration::from_secs(5),
        fair_queue: true,
        idle_timeout: Duration::from_secs(30),
        connect_timeout: Duration::from_secs(2),
        initial_stream_window: 1 << 20,
        initial_connection_window: 1 << 22,
        ping_interval: Duration::from_secs(10),
        ping_timeout: Duration::from_secs(5),
        tls: None,
        codec: CODEC.get(),
    }
}

/// An h2c server. Each response waits for a permit of `gate`; after
/// `goaway_after` requests on a connection it sends GOAWAY (graceful).
struct Server {
    address: SocketAddr,
    connections: Arc<AtomicUsize>,
    requests: Arc<AtomicUsize>,
    gate: Arc<Semaphore>,
}

async fn server(goaway_after: Option<usize>) -> Server {
    server_allowing(goaway_after, None).await
}

/// [`server`], announcing `max_streams` in its SETTINGS when given.
async fn server_allowing(goaway_after: Option<usize>, max_streams: Option<u32>) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let requests = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(Semaphore::new(0));
    let (count, total, permits) = (
        Arc::clone(&connections),
        Arc::clone(&requests),
        Arc::clone(&gate),
    );
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            let (total, permits) = (Arc::clone(&total), Arc::clone(&permits));
            tokio::spawn(async move {
                let mut builder = h2::server::Builder::new();
                if let Some(max) = max_streams {
                    builder.max_concurrent_streams(max);
                }
                let Ok(mut connection) = builder.handshake::<_, Bytes>(tcp).await else {
                    return;
                };
                let mut served = 0;
                while let Some(Ok((_request, mut respond))) = connection.accept().await {
                    total.fetch_add(1, Ordering::SeqCst);
                    served += 1;
                    let permits = Arc::clone(&permits);
                    tokio::spawn(async move {
                        let _permit = permits.acquire().await;
                        let response = http::Response::new(());
                        if let Ok(mut body) = respond.send_response(response, false) {
                            let _ = body.send_data(Bytes::from_static(b"ok"), true);
                        }
                    });
                    if goaway_after == Some(served) {
                        connection.graceful_shutdown();
                    }
                }
            });
        }
    });
    Server {
        address,
        connections,
        requests,
        gate,
    }
}

fn node(address: SocketAddr, settings: H2Settings) -> (Arc<H2Node>, Arc<Metrics>) {
    let metrics = Metrics::new();
    let node = H2Node::new(
        address,
        settings,
        metrics.node("p", "n"),
        metrics.upstream_http2("p", "n"),
        metrics.pool("p"),
    );
    (node, metrics)
}

/// A GET of `/` in the form the running test's codec takes.
fn get() -> StreamRequest {
    match CODEC.get() {
        UpstreamHttp2Codec::H2 => {
            StreamRequest::H2(http::Request::get("http://node.test/").body(()).unwrap())
        }
        UpstreamHttp2Codec::Weir => StreamRequest::Own(OwnRequest {
            written: Bytes::from_static(b"GET / HTTP/1.1\r\nhost: node.test\r\n\r\n"),
            te_trailers: false,
            protocol: None,
        }),
    }
}

/// The response's status and whole body, whichever codec carried it.
async fn answer(stream: NodeStream) -> (u16, Bytes) {
    let mut all = Vec::new();
    match stream {
        NodeStream::H2 { response, .. } => {
            let response = response.await.expect("a response");
            let status = response.status().as_u16();
            let mut body = response.into_body();
            while let Some(data) = body.data().await {
                all.extend_from_slice(&data.expect("data"));
            }
            (status, Bytes::from(all))
        }
        NodeStream::Own { mut recv, .. } => {
            let status = loop {
                match std::future::poll_fn(|cx| recv.poll_answer(cx)).await {
                    Ok(own::Answer::Final(head, _)) => break head.status(),
                    Ok(own::Answer::Interim(..)) => {}
                    Err(error) => panic!("no response: {error}"),
                }
            };
            while let Some(data) = std::future::poll_fn(|cx| recv.poll_data(cx)).await {
                let data = data.expect("data");
                recv.release(data.len());
                all.extend_from_slice(&data);
            }
            (status, Bytes::from(all))
        }
    }
}

/// The final response's status; the stream stays open.
async fn answer_head(stream: &mut NodeStream) -> u16 {
    match stream {
        NodeStream::H2 { response, .. } => {
            let response = response.await.expect("a response");
            response.status().as_u16()
        }
        NodeStream::Own { recv, .. } => loop {
            match std::future::poll_fn(|cx| recv.poll_answer(cx)).await {
                Ok(own::Answer::Final(head, _)) => break head.status(),
                Ok(own::Answer::Interim(..)) => {}
                Err(error) => panic!("no response: {error}"),
            }
        },
    }
}

/// Sends a request and reads its whole response; the lease is dropped at the end.
async fn exchange(node: Arc<H2Node>) -> Result<Bytes, Error> {
    let sent = node.send(get(), true).await?;
    let (_, body) = answer(sent.stream).await;
    drop(sent.lease);
    Ok(body)
}

async fn wait_for(what: &str, condition: impl Fn() -> bool) {
    for _ in 0..500 {
        if condition() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

async fn streams_share_one_connection_up_to_the_cap_then_queue() {
    let server = server(None).await;
    let (node, _metrics) = node(server.address, settings(1, 2, 10));
    let tasks: Vec<_> = (0..3)
        .map(|_| tokio::spawn(exchange(Arc::clone(&node))))
        .collect();
    wait_for("two streams and one waiter", || {
        node.streams() == 2 && node.queued() == 1
    })
    .await;
    assert_eq!(node.open(), 1);
    assert_eq!(server.requests.load(Ordering::SeqCst), 2);
    server.gate.add_permits(3);
    for task in tasks {
        assert_eq!(&task.await.unwrap().expect("served")[..], b"ok");
    }
    assert_eq!(
        server.connections.load(Ordering::SeqCst),
        1,
        "one connection carried all"
    );
    wait_for("streams released", || node.streams() == 0).await;
}

async fn the_connection_cap_holds_and_a_full_queue_refuses() {
    let server = server(None).await;
    let (node, metrics) = node(server.address, settings(2, 1, 1));
    let first: Vec<_> = (0..3)
        .map(|_| tokio::spawn(exchange(Arc::clone(&node))))
        .collect();
    wait_for("two streams, one waiter", || {
        node.streams() == 2 && node.queued() == 1
    })
    .await;
    assert_eq!(node.open(), 2);
    let refused = node.checkout().await.expect_err("queue full");
    assert_eq!(refused.kind(), ErrorKind::QueueFull);
    server.gate.add_permits(3);
    for task in first {
        task.await.unwrap().expect("served");
    }
    assert_eq!(server.connections.load(Ordering::SeqCst), 2);
    let text = metrics.encode();
    assert!(
        text.contains("weir_queue_full_total{pool=\"p\"} 1"),
        "{text}"
    );
}

async fn a_connection_that_got_goaway_is_replaced() {
    let server = server(Some(1)).await;
    server.gate.add_permits(100);
    let (node, metrics) = node(server.address, settings(1, 10, 10));
    for round in 0..3 {
        assert_eq!(
            &exchange(Arc::clone(&node)).await.expect("served")[..],
            b"ok",
            "round {round}"
        );
        // The node said GOAWAY after the request: the connection ends and a new one serves the next.
        wait_for("the old connection gone", || node.open() == 0).await;
    }
    assert_eq!(server.connections.load(Ordering::SeqCst), 3);
    // Each GOAWAY is counted once, though none refused a stream.
    let text = metrics.encode();
    assert!(
        text.contains("weir_upstream_http2_goaways_total{pool=\"p\",node=\""),
        "{text}"
    );
    let goaways = text
        .lines()
        .find(|line| line.starts_with("weir_upstream_http2_goaways_total{"))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|count| count.parse::<u64>().ok());
    assert_eq!(goaways, Some(3), "{text}");
}

async fn idle_connections_close_after_the_idle_timeout() {
    let server = server(None).await;
    server.gate.add_permits(100);
    let mut settings = settings(4, 10, 10);
    settings.idle_timeout = Duration::from_millis(50);
    let (node, _metrics) = node(server.address, settings);
    exchange(Arc::clone(&node)).await.expect("served");
    assert_eq!(node.open(), 1);
    assert_eq!(
        node.close_expired(Instant::now()),
        0,
        "not idle long enough"
    );
    tokio::time::sleep(Duration::from_millis(80)).await;
    assert_eq!(node.close_expired(Instant::now()), 1);
    assert_eq!(node.open(), 0);
}

async fn a_refused_connect_is_retry_safe_and_frees_its_slot() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    drop(listener);
    let (node, _metrics) = node(address, settings(1, 10, 10));
    let error = node.checkout().await.expect_err("refused");
    assert_eq!(error.kind(), ErrorKind::ConnectFailed);
    assert!(error.is_retry_safe());
    assert_eq!(node.open(), 0);
}

async fn a_waiter_that_gives_up_loses_nothing() {
    let server = server(None).await;
    let mut settings = settings(1, 1, 10);
    settings.queue_timeout = Duration::from_millis(50);
    let (node, _metrics) = node(server.address, settings);
    let busy = tokio::spawn(exchange(Arc::clone(&node)));
    wait_for("one stream", || node.streams() == 1).await;
    let error = node.checkout().await.expect_err("queue timeout");
    assert_eq!(error.kind(), ErrorKind::QueueTimeout);
    assert_eq!(node.queued(), 0);
    server.gate.add_permits(10);
    busy.await.unwrap().expect("served");
    // The stream slot is free again.
    exchange(Arc::clone(&node)).await.expect("served");
}

async fn a_withdrawn_node_sends_its_waiters_elsewhere() {
    let server = server(None).await;
    let (node, _metrics) = node(server.address, settings(1, 1, 10));
    let busy = tokio::spawn(exchange(Arc::clone(&node)));
    wait_for("one stream", || node.streams() == 1).await;
    let waiters: Vec<_> = (0..2)
        .map(|_| tokio::spawn(exchange(Arc::clone(&node))))
        .collect();
    wait_for("two waiters", || node.queued() == 2).await;
    node.set_taking_requests(false);
    assert_eq!(node.queued(), 0);
    for waiter in waiters {
        let error = tokio::time::timeout(Duration::from_secs(1), waiter)
            .await
            .expect("told at once")
            .unwrap()
            .expect_err("sent elsewhere");
        assert_eq!(error.kind(), ErrorKind::NoNodeAvailable);
        assert!(error.is_retry_safe());
    }
    let later = node.checkout().await.expect_err("takes no requests");
    assert_eq!(later.kind(), ErrorKind::NoNodeAvailable);
    // The stream in flight finishes.
    server.gate.add_permits(10);
    busy.await.unwrap().expect("served");
    node.set_taking_requests(true);
    exchange(Arc::clone(&node)).await.expect("served again");
}

/// An h2c server that announces `SETTINGS_ENABLE_CONNECT_PROTOCOL` when
/// `extended` and answers every stream `200`, counting the streams.
async fn connect_server(extended: bool) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let streams = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&streams);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let counted = Arc::clone(&counted);
            tokio::spawn(async move {
                let mut builder = h2::server::Builder::new();
                if extended {
                    builder.enable_connect_protocol();
                }
                let Ok(mut connection) = builder.handshake::<_, Bytes>(tcp).await else {
                    return;
                };
                while let Some(Ok((_request, mut respond))) = connection.accept().await {
                    counted.fetch_add(1, Ordering::SeqCst);
                    let _ = respond.send_response(http::Response::new(()), false);
                }
            });
        }
    });
    (address, streams)
}

fn websocket_connect() -> StreamRequest {
    match CODEC.get() {
        UpstreamHttp2Codec::H2 => StreamRequest::H2(
            http::Request::builder()
                .method(http::Method::CONNECT)
                .uri("http://node.test/chat")
                .extension(h2::ext::Protocol::from_static("websocket"))
                .body(())
                .unwrap(),
        ),
        UpstreamHttp2Codec::Weir => StreamRequest::Own(OwnRequest {
            written: Bytes::from_static(
                b"GET /chat HTTP/1.1\r\nhost: node.test\r\nsec-websocket-version: 13\r\n\r\n",
            ),
            te_trailers: false,
            protocol: Some(b"websocket"),
        }),
    }
}

async fn an_extended_connect_waits_for_a_new_connections_settings() {
    let settle = Duration::from_secs(2);
    // The first request opens the connection: its settings are awaited, not guessed.
    let (address, streams) = connect_server(true).await;
    let (extended, _metrics) = node(address, settings(1, 10, 10));
    let sent = extended
        .send_extended_connect(websocket_connect(), settle, Flow::Shared)
        .await
        .unwrap()
        .expect("the node announced extended CONNECT");
    let mut stream = sent.stream;
    assert_eq!(answer_head(&mut stream).await, 200);
    assert_eq!(streams.load(Ordering::SeqCst), 1);
    assert_eq!(
        extended.streams(),
        1,
        "the tunnel's stream is held by its lease"
    );
    drop(sent.lease);
    assert_eq!(extended.streams(), 0);

    // A node without the setting is told apart, nothing is sent, the slot is free.
    let (address, streams) = connect_server(false).await;
    let (plain, _metrics) = node(address, settings(1, 10, 10));
    let refused = plain
        .send_extended_connect(websocket_connect(), settle, Flow::Shared)
        .await
        .unwrap();
    assert!(refused.is_none(), "no extended CONNECT to this node");
    assert_eq!(
        streams.load(Ordering::SeqCst),
        0,
        "nothing reached the node"
    );
    assert_eq!(plain.streams(), 0);
    assert_eq!(plain.open(), 1, "the connection stays for other requests");
}

/// The next frame from `read`: its header and payload; `None` at the end.
async fn read_frame(read: &mut (impl tokio::io::AsyncRead + Unpin)) -> Option<([u8; 9], Vec<u8>)> {
    use tokio::io::AsyncReadExt;
    let mut header = [0u8; 9];
    read.read_exact(&mut header).await.ok()?;
    let length =
        usize::from(header[0]) << 16 | usize::from(header[1]) << 8 | usize::from(header[2]);
    let mut payload = vec![0u8; length];
    read.read_exact(&mut payload).await.ok()?;
    Some((header, payload))
}

/// A relay in front of `target` that counts the PING frames (not ACKs) the pool sends.
async fn ping_counter(target: SocketAddr) -> (SocketAddr, Arc<AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let pings = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&pings);
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = tokio::net::TcpStream::connect(target).await else {
                return;
            };
            let counted = Arc::clone(&counted);
            tokio::spawn(async move {
                let (mut client_read, mut client_write) = client.into_split();
                let (mut server_read, mut server_write) = server.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
                });
                // The preface, then frames: read whole, counted, passed on.
                let mut preface = [0u8; 24];
                if client_read.read_exact(&mut preface).await.is_err()
                    || server_write.write_all(&preface).await.is_err()
                {
                    return;
                }
                while let Some((header, payload)) = read_frame(&mut client_read).await {
                    if header[3] == 0x6 && header[4] & 0x1 == 0 {
                        counted.fetch_add(1, Ordering::SeqCst);
                    }
                    if server_write.write_all(&header).await.is_err()
                        || server_write.write_all(&payload).await.is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    (address, pings)
}

/// By default a node gets one PING, when its connection opens (the answer tells its
/// SETTINGS are applied), and no more however long a call lasts: gRPC servers in Go
/// close a connection pinged more often than every 5 minutes while they send nothing.
/// With `ping_interval` set, the PINGs follow it.
async fn a_node_is_pinged_once_unless_an_interval_is_set() {
    let server = server(None).await;
    for (interval, at_least, at_most) in
        // Every 100 ms for two seconds: the first PING and about twenty more, not one every
        // other interval (fifteen or so).
        [(Duration::ZERO, 1, 1), (Duration::from_millis(100), 18, 24)]
    {
        let (relay, pings) = ping_counter(server.address).await;
        let mut settings = settings(1, 10, 10);
        settings.ping_interval = interval;
        let (node, _metrics) = node(relay, settings);
        // A long call: the node answers it only after two seconds of silence.
        let call = tokio::spawn(exchange(Arc::clone(&node)));
        tokio::time::sleep(Duration::from_millis(2000)).await;
        server.gate.add_permits(1);
        call.await.unwrap().expect("served");
        let sent = pings.load(Ordering::SeqCst);
        assert!(
            (at_least..=at_most).contains(&sent),
            "{sent} PINGs with ping_interval {interval:?}"
        );
    }
}

async fn clients_take_turns_for_a_stream_and_a_full_queue_pushes_out_the_longest() {
    let server = server(None).await;
    let (node, metrics) = node(server.address, settings(1, 1, 4));
    let held = node.checkout().await.expect("a stream");
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for (who, name) in [
        (1, "a1"),
        (1, "a2"),
        (1, "a3"),
        (1, "a4"),
        (2, "b1"),
        (3, "c1"),
    ] {
        let flow = Flow::client(std::net::IpAddr::from([192, 0, 2, who]));
        let before = node.next_id.load(Ordering::SeqCst);
        let (node_, order) = (Arc::clone(&node), Arc::clone(&order));
        let task = tokio::spawn(async move {
            let lease = node_
                .checkout_watching(flow, std::future::pending)
                .await
                .map_err(|error| error.kind())?;
            order.lock().unwrap().push(name);
            tokio::time::sleep(Duration::from_millis(2)).await;
            drop(lease);
            Ok::<_, ErrorKind>(())
        });
        wait_for("queued", || node.next_id.load(Ordering::SeqCst) > before).await;
        tasks.push(task);
    }
    // b and c each took the place of a's newest.
    assert_eq!(node.queued(), 4);
    drop(held);
    let outcomes: Vec<_> = futures_outcomes(tasks).await;
    assert_eq!(
        outcomes,
        [
            Ok(()),
            Ok(()),
            Err(ErrorKind::QueueFull),
            Err(ErrorKind::QueueFull),
            Ok(()),
            Ok(())
        ]
    );
    assert_eq!(*order.lock().unwrap(), ["a1", "b1", "c1", "a2"]);
    let text = metrics.encode();
    assert!(
        text.contains("weir_queue_full_total{pool=\"p\"} 2"),
        "{text}"
    );
}

async fn futures_outcomes(
    tasks: Vec<tokio::task::JoinHandle<Result<(), ErrorKind>>>,
) -> Vec<Result<(), ErrorKind>> {
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.unwrap());
    }
    outcomes
}

/// A burst of requests with no connection open yet waits for the connections being opened
/// (each carries `max_streams`) instead of opening one each: 30 requests at 10 streams a
/// connection take 3 connections, not the cap's 8.
async fn a_burst_waits_for_the_connections_being_opened() {
    let server = server(None).await;
    let (node, _metrics) = node(server.address, settings(8, 10, 100));
    let tasks: Vec<_> = (0..30)
        .map(|_| tokio::spawn(exchange(Arc::clone(&node))))
        .collect();
    wait_for("30 streams", || node.streams() == 30).await;
    assert_eq!(node.open(), 3);
    assert_eq!(server.connections.load(Ordering::SeqCst), 3);
    server.gate.add_permits(30);
    for task in tasks {
        assert_eq!(&task.await.unwrap().expect("served")[..], b"ok");
    }
}

/// A node that allows fewer streams than `max_streams`: the requests a new connection has
/// no room for open connections of their own (under the cap) rather than wait.
async fn waiters_a_new_connection_cannot_carry_open_their_own() {
    let server = server_allowing(None, Some(2)).await;
    let (node, _metrics) = node(server.address, settings(8, 10, 100));
    let tasks: Vec<_> = (0..6)
        .map(|_| tokio::spawn(exchange(Arc::clone(&node))))
        .collect();
    wait_for("three connections", || {
        server.connections.load(Ordering::SeqCst) >= 3
    })
    .await;
    server.gate.add_permits(6);
    for task in tasks {
        assert_eq!(&task.await.unwrap().expect("served")[..], b"ok");
    }
}

/// A raw h2c server that sends its SETTINGS and answers each request `200` with no body
/// 100 ms after it came, but never answers a PING; counts its connections.
async fn no_ping_server() -> (SocketAddr, Arc<AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&connections);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let (mut read, write) = tcp.into_split();
                let write = Arc::new(tokio::sync::Mutex::new(write));
                let mut preface = [0u8; 24];
                if read.read_exact(&mut preface).await.is_err() {
                    return;
                }
                // SETTINGS: MAX_CONCURRENT_STREAMS 100.
                let settings = [0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 100];
                if write.lock().await.write_all(&settings).await.is_err() {
                    return;
                }
                while let Some((header, _)) = read_frame(&mut read).await {
                    match header[3] {
                        // SETTINGS (not an ACK): acknowledged.
                        4 if header[4] & 1 == 0 => {
                            let ack = [0, 0, 0, 4, 1, 0, 0, 0, 0];
                            let _ = write.lock().await.write_all(&ack).await;
                        }
                        // HEADERS: `:status 200` (HPACK static index 8) ending the stream,
                        // 100 ms later.
                        1 => {
                            let mut frame = vec![0, 0, 1, 1, 0x5];
                            frame.extend_from_slice(&header[5..9]);
                            frame.push(0x88);
                            let write = Arc::clone(&write);
                            tokio::spawn(async move {
                                tokio::time::sleep(Duration::from_millis(100)).await;
                                let _ = write.lock().await.write_all(&frame).await;
                            });
                        }
                        // PING and the rest: no answer.
                        _ => {}
                    }
                }
            });
        }
    });
    (address, connections)
}

/// The node's SETTINGS are applied once the codec has read them, without waiting for the
/// answer to a PING: a burst is carried at once by one connection to a node that answers
/// PINGs late (or, here, never), not one request at a time.
async fn a_burst_does_not_wait_for_the_nodes_ping_answer() {
    let (address, connections) = no_ping_server().await;
    let mut settings = settings(4, 100, 100);
    settings.ping_timeout = Duration::from_secs(30);
    let (node, _metrics) = node(address, settings);
    let started = std::time::Instant::now();
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let node = Arc::clone(&node);
            tokio::spawn(async move {
                let sent = node.send(get(), true).await?;
                let (status, _) = answer(sent.stream).await;
                Ok::<_, Error>(status)
            })
        })
        .collect();
    for task in tasks {
        let status = task.await.unwrap().expect("sent");
        assert_eq!(status, 200);
    }
    // One at a time, 20 answers of 100 ms would take 2 s.
    let took = started.elapsed();
    assert!(took < Duration::from_millis(1000), "{took:?}");
    assert_eq!(connections.load(Ordering::SeqCst), 1);
}

async fn new_settings_from_a_reload_keep_the_queue_and_a_raised_cap_serves_it() {
    let server = server(None).await;
    let (node, _metrics) = node(server.address, settings(1, 2, 10));
    let tasks: Vec<_> = (0..4)
        .map(|_| tokio::spawn(exchange(Arc::clone(&node))))
        .collect();
    wait_for("two streams and two waiters", || {
        node.streams() == 2 && node.queued() == 2
    })
    .await;
    // Another queue length only: the waiters stay where they are.
    node.update(settings(1, 2, 20));
    assert_eq!(node.queued(), 2);
    assert_eq!(node.open(), 1);
    // A raised cap: the waiters open a connection at once.
    node.update(settings(2, 2, 20));
    wait_for("four streams on two connections", || {
        node.streams() == 4 && node.queued() == 0
    })
    .await;
    assert_eq!(node.open(), 2);
    server.gate.add_permits(4);
    for task in tasks {
        assert_eq!(&task.await.unwrap().expect("served")[..], b"ok");
    }
    assert_eq!(server.connections.load(Ordering::SeqCst), 2);
}

async fn a_cap_lowered_by_a_reload_drains_connections_past_it_and_keeps_to_it() {
    let server = server(None).await;
    let (node, metrics) = node(server.address, settings(2, 1, 10));
    let busy: Vec<_> = (0..2)
        .map(|_| tokio::spawn(exchange(Arc::clone(&node))))
        .collect();
    wait_for("two connections busy", || node.streams() == 2).await;
    node.update(settings(1, 1, 10));
    let waiting: Vec<_> = (0..2)
        .map(|_| tokio::spawn(exchange(Arc::clone(&node))))
        .collect();
    wait_for("two waiters", || node.queued() == 2).await;
    // The connection past the cap closes when its stream ends, and gives its slot to no
    // waiter: the other connection carries them.
    server.gate.add_permits(4);
    for task in busy.into_iter().chain(waiting) {
        task.await.unwrap().expect("served");
    }
    wait_for("one connection left", || node.open() == 1).await;
    assert_eq!(
        server.connections.load(Ordering::SeqCst),
        2,
        "no connection opened past the lowered cap"
    );
    let text = metrics.encode();
    assert!(
        text.contains("weir_upstream_connections_open{pool=\"p\",node=\"n\"} 1"),
        "{text}"
    );
}

async fn two_http2_sides_of_one_node_add_up_in_the_open_connections_gauge() {
    let server = server(None).await;
    server.gate.add_permits(10);
    let metrics = Metrics::new();
    let side = || {
        H2Node::new(
            server.address,
            settings(1, 1, 10),
            metrics.node("p", "n"),
            metrics.upstream_http2("p", "n"),
            metrics.pool("p"),
        )
    };
    let (old, new) = (side(), side());
    exchange(Arc::clone(&old)).await.expect("served");
    exchange(Arc::clone(&new)).await.expect("served");
    let gauge = |metrics: &Metrics| {
        let text = metrics.encode();
        text.lines()
            .find(|line| line.starts_with("weir_upstream_connections_open{pool=\"p\",node=\"n\"}"))
            .map(|line| line.rsplit(' ').next().unwrap().to_string())
            .unwrap_or_default()
    };
    assert_eq!(gauge(&metrics), "2");
    // The retired side's connection closes: the other's still counts.
    old.close_idle();
    assert_eq!(gauge(&metrics), "1");
    drop(old);
    assert_eq!(gauge(&metrics), "1");
    new.close_idle();
    assert_eq!(gauge(&metrics), "0");
}

/// A raw h2c node for weir's own client: it answers the first two streams opened on a
/// connection together, the first with a field name in upper case (malformed in HTTP/2,
/// RFC 9113 §8.2.1), the second properly, then any later stream at once, and answers PINGs.
async fn upper_case_node() -> (SocketAddr, Arc<AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use weir_http::frame;
    use weir_http::hpack::{Encoder, Indexing};
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&connections);
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut preface = [0u8; 24];
                if tcp.read_exact(&mut preface).await.is_err() {
                    return;
                }
                let mut out = Vec::new();
                frame::write_settings(&mut out, &[]);
                let _ = tcp.write_all(&out).await;
                let mut encoder = Encoder::new();
                let mut opened = Vec::new();
                let mut answered = false;
                while let Some((header, payload)) = read_frame(&mut tcp).await {
                    let stream = u32::from_be_bytes([header[5], header[6], header[7], header[8]])
                        & 0x7fff_ffff;
                    let mut out = Vec::new();
                    match header[3] {
                        0x1 => opened.push(stream),
                        0x4 if header[4] & 0x1 == 0 => frame::write_settings_ack(&mut out),
                        0x6 if header[4] & 0x1 == 0 => {
                            frame::write_ping(&mut out, true, payload[..8].try_into().unwrap());
                        }
                        _ => {}
                    }
                    // The first two together, any later one at once.
                    let ready = match answered {
                        false if opened.len() == 2 => vec![(opened[0], true), (opened[1], false)],
                        true => opened.iter().map(|&stream| (stream, false)).collect(),
                        false => Vec::new(),
                    };
                    if !ready.is_empty() {
                        answered = true;
                        for (stream, upper) in ready {
                            let mut block = Vec::new();
                            let mut fields = encoder.block(&mut block);
                            fields.status(200);
                            fields.field(b"content-length", b"0", Indexing::NotIndexed);
                            if upper {
                                fields.field(b"X-Upper", b"1", Indexing::NotIndexed);
                            }
                            frame::write_headers(&mut out, stream, &block, true, 16_384);
                        }
                        opened.clear();
                    }
                    if tcp.write_all(&out).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (address, connections)
}

/// weir's own client turns a malformed response head into its stream's failure alone (a
/// bad response), where the `h2` crate's decoder fails the whole connection, every stream
/// on it with it: the other stream is answered and the connection stays.
#[tokio::test]
async fn a_malformed_head_fails_its_stream_only_on_weirs_client() {
    CODEC.set(UpstreamHttp2Codec::Weir);
    let (address, connections) = upper_case_node().await;
    let mut settings = settings(1, 10, 10);
    settings.ping_timeout = Duration::from_secs(30);
    let (node, _metrics) = node(address, settings);
    // The first request opens the connection; the second waits for the node's settings.
    let first = node.send(get(), true).await.expect("sent");
    let second = node.send(get(), true).await.expect("sent");
    let NodeStream::Own { recv: mut bad, .. } = first.stream else {
        panic!("weir's client");
    };
    let answered = std::future::poll_fn(|cx| bad.poll_answer(cx)).await;
    assert!(
        matches!(answered, Err(StreamError::Malformed(_))),
        "{answered:?}"
    );
    let (status, _) = answer(second.stream).await;
    assert_eq!(status, 200);
    drop((bad, first.lease, second.lease));
    exchange(Arc::clone(&node))
        .await
        .expect("the connection still serves");
    assert_eq!(connections.load(Ordering::SeqCst), 1);
    assert_eq!(node.open(), 1);
}
