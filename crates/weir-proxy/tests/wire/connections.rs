//! Client connections: keep-alive and `Connection` tokens, pipelining,
//! the header-read and idle timeouts, and protocol upgrades.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use weir_testkit::client::Connection;
use weir_testkit::{TestOrigin, TestProxy, config};

use crate::support::{PATIENCE, parse_response, read_head, read_until_close, send_until_close};

const SHORT_TIMEOUTS: &str = "[virtual_servers.web.timeouts]\n\
    header_read = \"200ms\"\n\
    idle = \"200ms\"";

/// `Connection: close` from the client: the answer says so and the proxy closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_close_closes_after_the_response() {
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(&[origin.addr], "", "")).await;
    let reply = send_until_close(
        proxy.addr,
        b"GET /bytes/5 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(reply.closed);
    let response = parse_response(&reply.bytes);
    assert_eq!(response.status, 200);
    assert_eq!(response.header("connection"), Some("close"));
    assert_eq!(response.rest, b"01234", "nothing after the body");
    proxy.stop().await;
    origin.stop().await;
}

/// HTTP/1.0 with `Connection: keep-alive` stays open, and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http10_keep_alive_stays_open() {
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(&[origin.addr], "", "")).await;
    let mut connection = Connection::open(proxy.addr).await.unwrap();
    for _ in 0..3 {
        connection
            .send(b"GET /bytes/5 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            .await
            .unwrap();
        let head = read_head(&mut connection.stream).await;
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(head.contains("\r\nConnection: keep-alive\r\n"), "{head}");
        assert!(head.contains("\r\nContent-Length: 5\r\n"), "{head}");
        let mut body = [0u8; 5];
        connection.stream.read_exact(&mut body).await.unwrap();
        assert_eq!(&body, b"01234");
    }
    // Without keep-alive the next one closes.
    connection
        .send(b"GET /bytes/5 HTTP/1.0\r\n\r\n")
        .await
        .unwrap();
    let reply = read_until_close(&mut connection.stream).await;
    assert!(reply.closed);
    assert_eq!(parse_response(&reply.bytes).rest, b"01234");
    proxy.stop().await;
    origin.stop().await;
}

/// `max_requests_per_connection = 2`: the second answer says close, then the proxy closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_requests_per_connection_closes_after_the_last() {
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(
        &[origin.addr],
        "",
        "[virtual_servers.web.limits]\nmax_requests_per_connection = 2",
    ))
    .await;
    let mut connection = Connection::open(proxy.addr).await.unwrap();
    connection
        .send(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    let first = connection.response().await.unwrap();
    assert_eq!(first.status, 200);
    assert_eq!(first.header("connection"), None);
    connection
        .send(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    let second = connection.response().await.unwrap();
    assert_eq!(second.status, 200);
    assert_eq!(second.header("connection"), Some("close"));
    assert!(connection.is_closed(PATIENCE).await);
    assert_eq!(origin.stats.requests(), 2);
    proxy.stop().await;
    origin.stop().await;
}

/// weir ends a kept-alive connection itself (here at `max_requests_per_connection`) while the
/// client, which could not know, has already pipelined its next request: the last answer
/// still arrives whole, then a FIN. Closing with that request unread would make the kernel
/// reset the connection and drop what the client had not read yet (RFC 9112 §9.6: close in
/// stages, reading what still comes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_pipelined_behind_the_last_one_does_not_reset_its_answer() {
    const SIZE: usize = 16 << 20;
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(
        &[origin.addr],
        "",
        "[virtual_servers.web.limits]\nmax_requests_per_connection = 1",
    ))
    .await;
    // A small receive window keeps weir writing the answer when the next request comes.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(16 * 1024).unwrap();
    let mut stream = socket.connect(proxy.addr).await.unwrap();
    stream
        .write_all(format!("GET /bytes/{SIZE} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    let mut received = Vec::with_capacity(SIZE + 1024);
    let read = tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut received))
        .await
        .expect("the answer and the close in time");
    let head_end = received
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head")
        + 4;
    let head = String::from_utf8_lossy(&received[..head_end]).into_owned();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase().contains("connection: close"),
        "{head}"
    );
    assert!(
        read.is_ok(),
        "{read:?} after {} of {SIZE} body bytes",
        received.len() - head_end
    );
    assert_eq!(received.len() - head_end, SIZE);
    assert_eq!(origin.stats.requests(), 1);
    proxy.stop().await;
    origin.stop().await;
}

/// weir's answer to a HEAD whose head it refuses whole (431: more fields than
/// `max_headers`) has no body (RFC 9110 §9.3.2), only its head.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_head_request_gets_no_body() {
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(&[origin.addr], "", "")).await;
    let mut request = String::from("HEAD / HTTP/1.1\r\nHost: t\r\n");
    for field in 0..150 {
        request.push_str(&format!("X-Field-{field}: v\r\n"));
    }
    request.push_str("\r\n");
    let reply = send_until_close(proxy.addr, request.as_bytes()).await;
    let text = String::from_utf8_lossy(&reply.bytes).into_owned();
    assert!(text.starts_with("HTTP/1.1 431"), "{text}");
    assert!(
        text.ends_with("\r\n\r\n"),
        "a body after the head: {text:?}"
    );
    proxy.stop().await;
    origin.stop().await;
}

/// Pipelined requests in one write are answered in order; a third after a
/// `Connection: close` one is never read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_are_answered_in_order() {
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(&[origin.addr], "", "")).await;
    let reply = send_until_close(
        proxy.addr,
        b"GET /bytes/1 HTTP/1.1\r\nHost: t\r\n\r\n\
          POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nhi\
          GET /bytes/2 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n\
          GET /bytes/3 HTTP/1.1\r\nHost: t\r\n\r\n",
    )
    .await;
    assert!(reply.closed);
    let first = parse_response(&reply.bytes);
    assert_eq!(first.status, 200);
    assert_eq!(&first.rest[..1], b"0");
    let second = parse_response(&first.rest[1..]);
    let length: usize = second.header("content-length").unwrap().parse().unwrap();
    let report = weir_origin::parse_echo_json(&second.rest[..length]).unwrap();
    assert_eq!(report.body, "hi");
    let third = parse_response(&second.rest[length..]);
    assert_eq!(third.header("connection"), Some("close"));
    assert_eq!(third.rest, b"01");
    assert_eq!(origin.stats.requests(), 3);
    proxy.stop().await;
    origin.stop().await;
}

/// Half a head and then nothing: 408 after `header_read`, then a close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_head_gets_408() {
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(&[origin.addr], "", SHORT_TIMEOUTS)).await;
    for prefix in [&b""[..], b"GET / HTTP/1.1\r\nHost: t\r\n\r\n"] {
        let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
        stream.write_all(prefix).await.unwrap();
        if !prefix.is_empty() {
            let response = read_head(&mut stream).await;
            assert!(response.starts_with("HTTP/1.1 200"), "{response}");
            let mut body = vec![0u8; "hello from weir origin a\n".len()];
            stream.read_exact(&mut body).await.unwrap();
        }
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: t\r\nX-Half: ")
            .await
            .unwrap();
        let reply = read_until_close(&mut stream).await;
        assert!(reply.closed);
        let response = parse_response(&reply.bytes);
        assert_eq!(response.status, 408, "{}", reply.text());
        assert_eq!(response.header("connection"), Some("close"));
    }
    assert_eq!(origin.stats.requests(), 1);
    proxy.stop().await;
    origin.stop().await;
}

/// An idle kept-alive connection is closed after `idle`, without a word.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_keep_alive_connection_is_closed_quietly() {
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(&[origin.addr], "", SHORT_TIMEOUTS)).await;
    let mut connection = Connection::open(proxy.addr).await.unwrap();
    connection
        .send(b"GET /bytes/2 HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(connection.response().await.unwrap().body, b"01");
    let reply = read_until_close(&mut connection.stream).await;
    assert!(reply.closed, "still open after idle");
    assert_eq!(reply.text(), "", "no bytes on an idle close");
    proxy.stop().await;
    origin.stop().await;
}

/// Slowloris: a head trickled one byte every 50 ms gets 408 once
/// `header_read` has passed since its first byte, however steady the trickle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trickled_head_does_not_extend_header_read() {
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(&[origin.addr], "", SHORT_TIMEOUTS)).await;
    // As the first request of a connection, and as the second one.
    for warm in [false, true] {
        let stream = TcpStream::connect(proxy.addr).await.unwrap();
        let (mut reader, mut writer) = stream.into_split();
        if warm {
            writer
                .write_all(b"GET /bytes/1 HTTP/1.1\r\nHost: t\r\n\r\n")
                .await
                .unwrap();
            let mut first = Vec::new();
            while !first.ends_with(b"\r\n\r\n0") {
                let mut byte = [0u8; 1];
                assert_eq!(reader.read(&mut byte).await.unwrap(), 1);
                first.push(byte[0]);
            }
        }
        // 100 bytes at 50 ms each would take 5 s: twenty-five times header_read.
        let head = format!("GET / HTTP/1.1\r\nHost: t\r\nX-Slow: {}", "a".repeat(100));
        let trickle = tokio::spawn(async move {
            let mut sent = 0usize;
            for byte in head.as_bytes() {
                if writer.write_all(&[*byte]).await.is_err() {
                    break;
                }
                sent += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            sent
        });
        let mut reply = Vec::new();
        let _ = tokio::time::timeout(PATIENCE, reader.read_to_end(&mut reply)).await;
        let sent = trickle.await.unwrap();
        assert_eq!(parse_response(&reply).status, 408);
        assert!(sent < 100, "the trickle was never cut off");
    }
    assert_eq!(origin.stats.requests(), 1);
    proxy.stop().await;
    origin.stop().await;
}

/// A node that answers any request with `101 Switching Protocols`, sends a
/// greeting in the new protocol, then echoes every byte back.
async fn upgrading_node() -> (std::net::SocketAddr, tokio::task::JoinHandle<String>) {
    upgrading_node_with(
        b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\nhello",
    )
    .await
}

/// A WebSocket upgrade of `/chat` sent through `proxy`: the connection and the head of
/// its answer.
async fn upgrade_through(proxy: std::net::SocketAddr) -> (TcpStream, String) {
    let mut stream = TcpStream::connect(proxy).await.unwrap();
    stream
        .write_all(
            b"GET /chat HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
        )
        .await
        .unwrap();
    let head = read_head(&mut stream).await;
    (stream, head)
}

/// [`upgrading_node`] answering with `switch` (head and greeting).
async fn upgrading_node_with(
    switch: &'static [u8],
) -> (std::net::SocketAddr, tokio::task::JoinHandle<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let head = read_head(&mut stream).await;
        stream.write_all(switch).await.unwrap();
        let (mut reader, mut writer) = stream.split();
        let _ = tokio::io::copy(&mut reader, &mut writer).await;
        head
    });
    (addr, task)
}

/// An open tunnel is seen on its node for as long as it lasts: a tunnel (what
/// `least_connections` and the admin API count), and an open connection
/// (`weir_upstream_connections_open`), though it holds no request slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_tunnel_counts_on_its_node() {
    let (node, _echo) = upgrading_node().await;
    let proxy = TestProxy::start(&config(&[node], "", "")).await;
    let counts = |proxy: &TestProxy| {
        let model = proxy.live.current();
        let (pool, state) = (&model.pools[0], &model.pools[0].nodes[0]);
        (
            state.tunnels(),
            state.in_flight(),
            pool.connections[0].open() + pool.connections[0].tunnelled(),
        )
    };
    let (mut stream, head) = upgrade_through(proxy.addr).await;
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    let mut greeting = [0u8; 5];
    stream.read_exact(&mut greeting).await.unwrap();
    assert_eq!(
        counts(&proxy),
        (1, 0, 1),
        "(tunnels, in flight, connections open)"
    );
    let metrics = proxy.metrics.encode();
    for gauge in ["weir_upstream_connections_open", "weir_node_tunnels_open"] {
        assert!(
            metrics.contains(&format!("{gauge}{{pool=\"web\",node=\"{node}\"}} 1")),
            "{metrics}"
        );
    }
    drop(stream);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while counts(&proxy) != (0, 0, 0) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{:?}",
            counts(&proxy)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        proxy.metrics.encode().contains(&format!(
            "weir_node_tunnels_open{{pool=\"web\",node=\"{node}\"}} 0"
        )),
        "the gauge goes back down when the tunnel closes"
    );
    proxy.stop().await;
}

/// With a cache on the virtual server, a WebSocket upgrade still goes to the node every
/// time: never answered with a stored object of its URL, and never held as a waiter behind
/// another upgrade of the URL whose tunnel is open (which waited `coalesce_timeout`, 10 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrades_pass_a_cache() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let node = listener.local_addr().unwrap();
    // Plain requests get a cacheable answer; upgrades switch and echo.
    let serving = tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                loop {
                    let head = read_head(&mut stream).await;
                    if head.to_ascii_lowercase().contains("upgrade: websocket") {
                        stream
                            .write_all(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
                            .await
                            .unwrap();
                        let (mut reader, mut writer) = stream.split();
                        let _ = tokio::io::copy(&mut reader, &mut writer).await;
                        return;
                    }
                    let answer = b"HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\nContent-Length: 6\r\n\r\ncached";
                    if stream.write_all(answer).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let proxy = TestProxy::start(&config(
        &[node],
        "",
        "[virtual_servers.web.cache]\nstatus_header = \"X-Cache\"",
    ))
    .await;
    // Two tunnels of the URL open before anything is stored for it (the second one waited
    // on the first as on a fill), then a third once a plain GET stored an answer.
    let mut open = Vec::new();
    for round in 0..3 {
        if round == 2 {
            let mut plain = Connection::open(proxy.addr).await.unwrap();
            plain
                .send(b"GET /live HTTP/1.1\r\nHost: t\r\n\r\n")
                .await
                .unwrap();
            assert_eq!(plain.response().await.unwrap().status, 200);
        }
        let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
        stream
            .write_all(b"GET /live HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
            .await
            .unwrap();
        let head = tokio::time::timeout(Duration::from_secs(3), read_head(&mut stream))
            .await
            .expect("the switch within 3 s, with another tunnel of the URL open");
        assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
        stream.write_all(b"ping").await.unwrap();
        let mut back = [0u8; 4];
        stream.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"ping");
        open.push(stream);
    }
    drop(open);
    proxy.stop().await;
    serving.abort();
}

/// weir's own answers to HEAD have no body (RFC 9110 §9.3.2): a 502 for a node that
/// cannot be reached, and the cache's 504 for `only-if-cached`, which keeps the connection:
/// a body there was read as the start of the next answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weirs_own_answers_to_head_have_no_body() {
    let dead = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = dead.local_addr().unwrap();
    drop(dead);
    let proxy = TestProxy::start(&config(&[address], "", "")).await;
    let reply = send_until_close(
        proxy.addr,
        b"HEAD / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    )
    .await;
    let response = parse_response(&reply.bytes);
    assert_eq!(response.status, 502);
    assert!(
        response.rest.is_empty(),
        "{:?}",
        String::from_utf8_lossy(&response.rest)
    );
    proxy.stop().await;

    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(
        &[origin.addr],
        "",
        "[virtual_servers.web.cache]\nstatus_header = \"X-Cache\"",
    ))
    .await;
    let reply = send_until_close(
        proxy.addr,
        b"HEAD /bytes/5 HTTP/1.1\r\nHost: t\r\nCache-Control: only-if-cached\r\n\r\n\
          GET /bytes/3 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    )
    .await;
    let first = parse_response(&reply.bytes);
    assert_eq!(first.status, 504);
    let second = parse_response(&first.rest);
    assert_eq!(second.status, 200);
    assert_eq!(second.rest, b"012");
    proxy.stop().await;
    origin.stop().await;
}

/// weir's own 502, 503 and 504 keep an HTTP/1.1 connection whose request was read whole
/// (the node failed, not the client), as nginx does: the requests after it on the
/// connection are served, and a client behind a TLS handshake does not pay a new one for
/// each request while a pool is down. A request whose body is still coming closes it: the
/// rest of the body is in flight and would be read as the next request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weirs_own_gateway_errors_keep_a_connection_read_whole() {
    let dead = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = dead.local_addr().unwrap();
    drop(dead);
    let limits = "[virtual_servers.web.limits]\nrequest_buffer = \"1KiB\"";
    let proxy = TestProxy::start(&config(&[address], "", limits)).await;
    let reply = send_until_close(
        proxy.addr,
        b"GET / HTTP/1.1\r\nHost: t\r\n\r\n\
          POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello\
          HEAD / HTTP/1.1\r\nHost: t\r\n\r\n\
          GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(reply.closed && !reply.reset, "{}", reply.text());
    let mut rest = reply.bytes.as_slice();
    // (kept, a HEAD): each answer's body is skipped by its length, a HEAD's has none.
    for (kept, head) in [(true, false), (true, false), (true, true), (false, false)] {
        let response = parse_response(rest);
        assert!(
            matches!(response.status, 502 | 503),
            "{}",
            String::from_utf8_lossy(rest)
        );
        let connection = response.header("connection");
        assert_eq!(connection, (!kept).then_some("close"), "{}", reply.text());
        let length: usize = response.header("content-length").unwrap().parse().unwrap();
        let body = if head { 0 } else { length };
        rest = &rest[rest.len() - response.rest.len() + body..];
    }
    assert!(rest.is_empty(), "{}", reply.text());

    // A body longer than the request buffer, half sent: the answer closes the connection.
    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    stream
        .write_all(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n")
        .await
        .unwrap();
    stream.write_all(&[b'x'; 4096]).await.unwrap();
    let reply = read_until_close(&mut stream).await;
    assert!(reply.closed, "{}", reply.text());
    let response = parse_response(&reply.bytes);
    assert!(matches!(response.status, 502 | 503), "{}", reply.text());
    assert_eq!(response.header("connection"), Some("close"));
    proxy.stop().await;
}

/// A connection kept after weir's own 504 gets its whole idle time from that answer, as after
/// any other: counted from the accept, it closed as soon as the 504 went out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_idle_time_after_a_kept_gateway_timeout_counts_from_it() {
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(
        &[origin.addr],
        "retries = 0\n[pools.web.timeouts]\nresponse = \"1500ms\"",
        "[virtual_servers.web.timeouts]\nidle = \"1s\"",
    ))
    .await;
    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    stream
        .write_all(b"GET /delay/3000 HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    let head = read_head(&mut stream).await;
    assert!(head.starts_with("HTTP/1.1 504 "), "{head}");
    assert!(!head.contains("Connection: close"), "{head}");
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("Content-Length: "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    stream
        .write_all(b"GET /bytes/3 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let reply = read_until_close(&mut stream).await;
    let response = parse_response(&reply.bytes);
    assert_eq!(response.status, 200, "{}", reply.text());
    assert_eq!(response.rest, b"012");
    proxy.stop().await;
    origin.stop().await;
}

/// After a 101, bytes flow both ways through the proxy until a side closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_tunnels_bytes_both_ways() {
    let (node, received) = upgrading_node().await;
    let proxy = TestProxy::start(&config(&[node], "", "")).await;
    let (mut stream, head) = upgrade_through(proxy.addr).await;
    assert!(
        head.starts_with("HTTP/1.1 101 Switching Protocols\r\n"),
        "{head}"
    );
    assert!(head.contains("\r\nUpgrade: websocket\r\n"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("\r\nconnection: upgrade\r\n"),
        "{head}"
    );
    let mut greeting = [0u8; 5];
    stream.read_exact(&mut greeting).await.unwrap();
    assert_eq!(&greeting, b"hello");
    for message in [
        &b"ping"[..],
        &[0u8, 1, 2, 255, b'\r', b'\n'],
        &[7u8; 100_000],
    ] {
        stream.write_all(message).await.unwrap();
        let mut back = vec![0u8; message.len()];
        tokio::time::timeout(PATIENCE, stream.read_exact(&mut back))
            .await
            .expect("echo in time")
            .unwrap();
        assert!(back == message, "echo differs");
    }
    stream.shutdown().await.unwrap();
    let reply = read_until_close(&mut stream).await;
    assert!(reply.closed && reply.bytes.is_empty());
    let forwarded = received.await.unwrap();
    assert!(
        forwarded.contains("\r\nUpgrade: websocket\r\n"),
        "{forwarded}"
    );
    assert!(
        forwarded
            .to_ascii_lowercase()
            .contains("\r\nconnection: upgrade\r\n"),
        "{forwarded}"
    );
    proxy.stop().await;
}

/// The traffic rules' response edits and the request id reach the head that
/// switches protocols; the handshake's own fields stay as the node sent them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_head_carries_the_rules_response_edits() {
    let (node, _received) = upgrading_node_with(
        b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
          Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\nX-Internal: node-7\r\n\r\nhello",
    )
    .await;
    let rules = r#"
[virtual_servers.web.request_id]
to_client = true

[[virtual_servers.web.rules]]
match = { path = "/chat" }
response_headers = { set = { X-Tag = "ws", Sec-WebSocket-Protocol = "forged" }, remove = ["X-Internal", "Sec-WebSocket-Accept"] }
"#;
    let proxy = TestProxy::start(&config(&[node], "", rules)).await;
    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    stream
        .write_all(
            b"GET /chat HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
              X-Request-Id: ws-1\r\n\r\n",
        )
        .await
        .unwrap();
    let head = read_head(&mut stream).await;
    assert!(
        head.starts_with("HTTP/1.1 101 Switching Protocols\r\n"),
        "{head}"
    );
    assert!(head.contains("\r\nX-Tag: ws\r\n"), "{head}");
    assert!(head.contains("\r\nX-Request-Id: ws-1\r\n"), "{head}");
    assert!(!head.contains("X-Internal"), "{head}");
    assert!(
        head.contains("\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"),
        "{head}"
    );
    assert!(!head.contains("Sec-WebSocket-Protocol"), "{head}");
    assert!(head.contains("\r\nUpgrade: websocket\r\n"), "{head}");
    // the tunnel still works after the edited head
    let mut greeting = [0u8; 5];
    stream.read_exact(&mut greeting).await.unwrap();
    assert_eq!(&greeting, b"hello");
    stream.write_all(b"ping").await.unwrap();
    let mut back = [0u8; 4];
    tokio::time::timeout(PATIENCE, stream.read_exact(&mut back))
        .await
        .expect("echo in time")
        .unwrap();
    assert_eq!(&back, b"ping");
    proxy.stop().await;
}

/// A node may only switch protocols when the client asked to: a 101 to a
/// plain request is a bad gateway, not a tunnel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unrequested_switch_is_a_bad_gateway() {
    let (node, _received) = upgrading_node().await;
    let proxy = TestProxy::start(&config(&[node], "", "")).await;
    let reply = send_until_close(
        proxy.addr,
        b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(reply.closed);
    let response = parse_response(&reply.bytes);
    assert_eq!(response.status, 502, "{}", reply.text());
    assert!(!reply.text().contains("hello"), "{}", reply.text());
    proxy.stop().await;
}

/// A body that stops arriving: 408 after `body_read`, and the node sees nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_body_gets_408() {
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(
        &[origin.addr],
        "",
        "[virtual_servers.web.timeouts]\nbody_read = \"200ms\"",
    ))
    .await;
    let reply = send_until_close(
        proxy.addr,
        b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nabc",
    )
    .await;
    assert!(reply.closed);
    assert_eq!(parse_response(&reply.bytes).status, 408, "{}", reply.text());
    assert_eq!(origin.stats.requests(), 0);
    proxy.stop().await;
    origin.stop().await;
}
