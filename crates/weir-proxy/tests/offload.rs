//! TCP connection offload end to end: caps, queue, reuse, slow clients.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::AsyncReadExt;
use weir_origin::OriginOptions;
use weir_testkit::client::{self, Connection};
use weir_testkit::{TestOrigin, TestProxy, config};

/// The offload shape at small scale: 300 keep-alive clients, each sending
/// several requests, through a pool capped at 8 connections: the origin
/// never sees more than 8, the clients see no error, connections are reused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_clients_share_a_capped_pool() {
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(
        &[origin.addr],
        "[pools.web.connections]\nmax_connections = 8\nqueue_length = 1000\nqueue_timeout = \"10s\"",
        "",
    ))
    .await;
    let errors = Arc::new(AtomicU64::new(0));
    let served = Arc::new(AtomicU64::new(0));
    let mut clients = Vec::new();
    for _ in 0..300 {
        let (errors, served, addr) = (Arc::clone(&errors), Arc::clone(&served), proxy.addr);
        clients.push(tokio::spawn(async move {
            let Ok(mut connection) = Connection::open(addr).await else {
                errors.fetch_add(1, Ordering::Relaxed);
                return;
            };
            for _ in 0..5 {
                let sent = connection
                    .send(b"GET /delay/2 HTTP/1.1\r\nHost: t\r\n\r\n")
                    .await;
                match (sent, connection.response().await) {
                    (Ok(()), Ok(response)) if response.status == 200 => {
                        served.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    for client in clients {
        client.await.unwrap();
    }
    assert_eq!(errors.load(Ordering::Relaxed), 0);
    assert_eq!(served.load(Ordering::Relaxed), 1500);
    assert!(
        origin.stats.connections_peak() <= 8,
        "origin saw {} connections",
        origin.stats.connections_peak()
    );
    assert!(origin.stats.connections_accepted() <= 8);
    assert_eq!(origin.stats.requests(), 1500);
    let metrics = proxy.metrics.encode();
    assert!(metrics.contains("weir_reuse_ratio"), "{metrics}");
    proxy.stop().await;
    origin.stop().await;
}

/// Past the queue timeout a waiting request gets 503 with Retry-After, never a hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_timeout_answers_503_with_retry_after() {
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(
        &[origin.addr],
        "[pools.web.connections]\nmax_connections = 1\nqueue_length = 10\nqueue_timeout = \"100ms\"",
        "",
    ))
    .await;
    // Hold the only connection with a slow request.
    let slow = tokio::spawn(client::get(proxy.addr, "/delay/1000"));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let response = client::get(proxy.addr, "/").await.unwrap();
    assert_eq!(response.status, 503);
    assert_eq!(response.header("retry-after"), Some("1"));
    assert_eq!(slow.await.unwrap().unwrap().status, 200);
    assert_eq!(origin.stats.connections_accepted(), 1);
    proxy.stop().await;
}

/// A full queue answers 503 at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_queue_answers_503_at_once() {
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(
        &[origin.addr],
        "[pools.web.connections]\nmax_connections = 1\nqueue_length = 1\nqueue_timeout = \"5s\"",
        "",
    ))
    .await;
    let slow = tokio::spawn(client::get(proxy.addr, "/delay/800"));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let queued = tokio::spawn(client::get(proxy.addr, "/"));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = std::time::Instant::now();
    let rejected = client::get(proxy.addr, "/").await.unwrap();
    assert_eq!(rejected.status, 503);
    assert!(started.elapsed() < Duration::from_millis(500));
    assert_eq!(slow.await.unwrap().unwrap().status, 200);
    assert_eq!(queued.await.unwrap().unwrap().status, 200);
    proxy.stop().await;
}

/// A client that reads its response slowly does not hold the upstream
/// connection: the response is buffered and the connection goes back to the
/// pool while the client is still reading.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_reader_does_not_hold_the_upstream_connection() {
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(
        &[origin.addr],
        "[pools.web.connections]\nmax_connections = 1\nqueue_length = 10\nqueue_timeout = \"2s\"",
        "[virtual_servers.web.limits]\nresponse_buffer = \"1MiB\"",
    ))
    .await;
    // 512 KiB: more than the socket buffers take while the client does not read.
    let mut slow = Connection::open(proxy.addr).await.unwrap();
    slow.send(b"GET /bytes/524288 HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The single upstream connection must be free for someone else now.
    let other = tokio::time::timeout(Duration::from_secs(1), client::get(proxy.addr, "/"))
        .await
        .expect("the upstream connection is back in the pool")
        .unwrap();
    assert_eq!(other.status, 200);
    assert_eq!(origin.stats.connections_accepted(), 1);
    // The slow client still gets all of its response.
    let mut total = 0usize;
    let mut buf = vec![0u8; 64 * 1024];
    while total < 524_288 {
        let n = slow.stream.read(&mut buf).await.unwrap();
        assert!(n > 0);
        total += n;
    }
    proxy.stop().await;
}

/// The upstream connection is reused across clients and requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_connections_are_reused_across_clients() {
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(&[origin.addr], "", "")).await;
    for _ in 0..20 {
        assert_eq!(client::get(proxy.addr, "/").await.unwrap().status, 200);
    }
    assert_eq!(origin.stats.connections_accepted(), 1);
    assert_eq!(origin.stats.requests(), 20);
    proxy.stop().await;
}

/// An origin that refuses connections past its cap (like an overloaded
/// Apache) still serves everyone through weir when weir's cap is below it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capped_origin_is_shielded() {
    let origin = TestOrigin::with_options(OriginOptions {
        max_connections: Some(4),
        ..OriginOptions::new("a", "127.0.0.1:0".parse().unwrap())
    })
    .await;
    let proxy = TestProxy::start(&config(
        &[origin.addr],
        "[pools.web.connections]\nmax_connections = 4",
        "",
    ))
    .await;
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let addr = proxy.addr;
        tasks.push(tokio::spawn(async move {
            client::get(addr, "/delay/5").await.map(|r| r.status)
        }));
    }
    for task in tasks {
        assert_eq!(task.await.unwrap().unwrap(), 200);
    }
    assert_eq!(origin.stats.connections_refused(), 0);
    assert!(origin.stats.connections_peak() <= 4);
    proxy.stop().await;
}

/// Client connections weir has accepted so far.
fn accepted(proxy: &TestProxy) -> u64 {
    let text = proxy.metrics.encode();
    let prefix = "weir_client_connections_accepted_total{virtual_server=\"web\"} ";
    text.lines()
        .find_map(|line| line.strip_prefix(prefix))
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no {prefix} in\n{text}"))
}

/// A client that connects and sends nothing waits in the kernel (the listener
/// defers the accept), not in weir: nothing is accepted until its request
/// arrives, and then it is served at once. With `defer_accept = false` the
/// silent connection is accepted as soon as it connects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_connection_waits_in_the_kernel_until_it_sends() {
    use tokio::io::AsyncWriteExt;
    let origin = TestOrigin::start("a").await;
    for (vs_extra, accepted_while_silent) in [("", 0), ("defer_accept = false", 1)] {
        let proxy = TestProxy::start(&config(&[origin.addr], "", vs_extra)).await;
        let mut stream = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(accepted(&proxy), accepted_while_silent, "{vs_extra:?}");
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut reply = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut reply))
            .await
            .expect("answered at once")
            .unwrap();
        assert!(reply.starts_with(b"HTTP/1.1 200"), "{vs_extra:?}");
        assert_eq!(accepted(&proxy), 1, "{vs_extra:?}");
        proxy.stop().await;
    }
    origin.stop().await;
}

/// The pool of the queue tests: one connection per node, a long queue.
const ONE_SLOT: &str =
    "[pools.web.connections]\nmax_connections = 1\nqueue_length = 10\nqueue_timeout = \"10s\"";

/// Holds the node's only connection with a slow request, queues a second one
/// from a client that closes its connection while it waits, and returns how
/// many requests the node saw once the slow one was answered.
async fn requests_behind_a_client_that_left(pool_extra: &str) -> (u64, String) {
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(
        &[origin.addr],
        &format!("{ONE_SLOT}\n{pool_extra}"),
        "",
    ))
    .await;
    let slow = tokio::spawn(client::get(proxy.addr, "/delay/600"));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut leaving = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut leaving, b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(leaving);
    assert_eq!(slow.await.unwrap().unwrap().status, 200);
    // A request still queued would reach the node now.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let seen = origin.stats.requests();
    let metrics = proxy.metrics.encode();
    proxy.stop().await;
    origin.stop().await;
    (seen, metrics)
}

/// A client that closes its connection while its request waits for a node's
/// connection takes the request out of the queue: it is never sent, and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_client_left_the_queue_is_never_sent() {
    let (seen, metrics) = requests_behind_a_client_that_left("").await;
    assert_eq!(seen, 1, "only the slow request reached the node");
    assert!(
        metrics.contains("weir_queue_abandoned_total{pool=\"web\"} 1\n"),
        "{metrics}"
    );
}

/// With `leave_queue_on_close = false` (clients that half-close after their
/// request) the queued request is still sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_closing_client_can_keep_its_place_in_the_queue() {
    let (seen, metrics) = requests_behind_a_client_that_left("leave_queue_on_close = false").await;
    assert_eq!(seen, 2, "the queued request was sent");
    assert!(
        metrics.contains("weir_queue_abandoned_total{pool=\"web\"} 0\n"),
        "{metrics}"
    );
}

/// A client that closes its connection while the node works on its request (past the first
/// moments, when weir starts watching it) ends the request: the node's connection is closed
/// instead of carrying an answer nobody reads, and the request counts as the client's 499.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_while_the_node_works_frees_the_node_connection() {
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(&[origin.addr], "", "")).await;
    let mut leaving = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(
        &mut leaving,
        b"GET /delay/1500 HTTP/1.1\r\nHost: t\r\n\r\n",
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(leaving);
    // Well before the node would answer.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let metrics = proxy.metrics.encode();
    let open = format!(
        "weir_upstream_connections_open{{pool=\"web\",node=\"{}\"}} 0\n",
        origin.addr
    );
    assert!(metrics.contains(&open), "{metrics}");
    assert!(
        metrics.contains("weir_requests_total{virtual_server=\"web\",class=\"4xx\"} 1\n"),
        "{metrics}"
    );
    proxy.stop().await;
    origin.stop().await;
}

/// A client that waits in the queue with its request and a second, pipelined one
/// keeps its place: bytes unread are no sign that it left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipelining_client_keeps_its_place_in_the_queue() {
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(&[origin.addr], ONE_SLOT, "")).await;
    let slow = tokio::spawn(client::get(proxy.addr, "/delay/400"));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut connection = Connection::open(proxy.addr).await.unwrap();
    connection
        .send(b"GET / HTTP/1.1\r\nHost: t\r\n\r\nGET / HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(connection.response().await.unwrap().status, 200);
    assert_eq!(connection.response().await.unwrap().status, 200);
    assert_eq!(slow.await.unwrap().unwrap().status, 200);
    assert_eq!(origin.stats.requests(), 3);
    proxy.stop().await;
    origin.stop().await;
}

/// A GET of `path` from a socket bound to `source`, on a connection of its own, with
/// `extra` header lines; its status line's code once the whole answer is read.
async fn get_from(source: [u8; 4], proxy: std::net::SocketAddr, path: &str, extra: &str) -> u16 {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind((source, 0).into()).unwrap();
    let mut stream = socket.connect(proxy).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: t\r\n{extra}Connection: close\r\n\r\n");
    tokio::io::AsyncWriteExt::write_all(&mut stream, request.as_bytes())
        .await
        .unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    let text = String::from_utf8_lossy(&answer);
    text.get(9..12)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0)
}

/// Waits until the proxy's metrics hold `line`.
async fn wait_for_metric(proxy: &TestProxy, line: &str) {
    for _ in 0..300 {
        if proxy.metrics.encode().contains(line) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never saw {line}: {}", proxy.metrics.encode());
}

/// The node's queue takes clients in turn: a client with one request waiting is served
/// after one of a busier client's, not after all of them. With `fair_queue = false` it
/// waits for all of them. Behind a trusted proxy the clients are those its header names.
/// The node has one connection, so answers end in the order the queue served them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_light_client_is_not_held_behind_a_heavy_clients_queue() {
    /// Two clients by their connection's source address, or (`behind_proxy`) both from
    /// 127.0.0.1 and told apart by `X-Forwarded-For`.
    async fn served_before_the_light_one(pool_extra: &str, behind_proxy: bool) -> usize {
        let origin = TestOrigin::start("a").await;
        let vs_extra = match behind_proxy {
            true => {
                "[virtual_servers.web.client_address]\nheader = \"X-Forwarded-For\"\n\
                 trusted_proxies = [\"127.0.0.1/32\"]"
            }
            false => "",
        };
        let proxy = TestProxy::start(&config(
            &[origin.addr],
            &format!("{ONE_SLOT}\n{pool_extra}"),
            vs_extra,
        ))
        .await;
        let finished = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut requests = Vec::new();
        // The heavy client's first request holds the node's only connection; five more queue.
        for n in 0..7 {
            let (source, who) = match n {
                6 => ([127, 0, 0, 3], "light"),
                _ => ([127, 0, 0, 2], "heavy"),
            };
            let (source, extra) = match behind_proxy {
                true => {
                    let forwarded = format!("X-Forwarded-For: 10.{}.0.1\r\n", source[3]);
                    ([127, 0, 0, 1], forwarded)
                }
                false => (source, String::new()),
            };
            let (finished, address) = (Arc::clone(&finished), proxy.addr);
            let path = if n == 0 { "/delay/300" } else { "/delay/40" };
            requests.push(tokio::spawn(async move {
                let status = get_from(source, address, path, &extra).await;
                finished.lock().unwrap().push(who);
                status
            }));
            if n > 0 {
                wait_for_metric(&proxy, &format!("weir_queue_length{{pool=\"web\"}} {n}\n")).await;
            } else {
                while origin.stats.requests() == 0 {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        }
        for request in requests {
            assert_eq!(request.await.unwrap(), 200);
        }
        assert_eq!(origin.stats.requests(), 7);
        proxy.stop().await;
        origin.stop().await;
        let order = finished.lock().unwrap().clone();
        order.iter().position(|who| *who == "light").unwrap()
    }
    // The request on the node, then one heavy one from the queue, then the light one.
    assert_eq!(served_before_the_light_one("", false).await, 2);
    assert_eq!(served_before_the_light_one("", true).await, 2);
    assert_eq!(
        served_before_the_light_one("fair_queue = false", false).await,
        6
    );
}
