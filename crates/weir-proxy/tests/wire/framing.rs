//! Message framing both ways: chunked and length-delimited bodies, re-framing,
//! HTTP/1.0 clients, bodiless responses, and `Expect: 100-continue`.

use weir_origin::{EchoReport, parse_echo_json};
use weir_testkit::client::{Connection, Response};
use weir_testkit::{TestOrigin, TestProxy, config};

use crate::support::{
    RecordingNode, chunked, parse_response, pattern, read_head, send_until_close,
};

/// Small buffers, so that "large" bodies are cheap.
const SMALL_BUFFERS: &str = "[virtual_servers.web.limits]\n\
    request_buffer = \"1KiB\"\n\
    response_buffer = \"1KiB\"";

fn echo(response: &Response) -> EchoReport {
    assert_eq!(response.status, 200, "{}", response.text());
    parse_echo_json(&response.body).expect("an /echo report")
}

async fn exchange(proxy: &TestProxy, raw: &[u8]) -> Response {
    let mut connection = Connection::open(proxy.addr).await.unwrap();
    connection.send(raw).await.unwrap();
    connection.response().await.unwrap()
}

/// Chunk extensions are dropped and trailers kept; the body arrives whole. A trailer by
/// the name of a field weir sets in the header section (the request id's) is dropped: a
/// node that merges trailers into the header section would take it for weir's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_request_with_extensions_and_trailers_reaches_the_node() {
    let mut node = RecordingNode::start(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").await;
    let proxy = TestProxy::start(&config(&[node.addr], "", "")).await;
    let response = exchange(
        &proxy,
        b"POST /upload HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n\
          5;name=value\r\nhello\r\n6 ; q=\"a;b\" ; flag\r\n world\r\n\
          0\r\nX-Checksum: 42\r\nx_request_id: forged\r\nX-Other: o\r\n\
          X-Request-Id: forged\r\n\r\n",
    )
    .await;
    assert_eq!((response.status, response.text().as_str()), (200, "ok"));
    let request = node.next().await;
    assert_eq!(request.body, b"hello world");
    assert_eq!(request.trailers, b"X-Checksum: 42\r\nX-Other: o\r\n");
    let head = request.head();
    assert!(head.contains("Transfer-Encoding: chunked\r\n"), "{head}");
    assert!(!head.contains("Content-Length"), "{head}");
    assert!(
        !request.raw.windows(4).any(|w| w == b"name"),
        "extensions dropped"
    );
    proxy.stop().await;
}

/// Trailers by the names a rule sets or removes on the forwarded head are dropped too: a node
/// that merges trailers into the header section would take the client's for the rule's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trailers_by_names_a_rule_edits_do_not_reach_the_node() {
    let mut node = RecordingNode::start(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").await;
    let rules = "[[virtual_servers.web.rules]]\n\
        request_headers = { set = { X-Client = \"${client_address}\" }, remove = [\"X-Debug\"] }";
    let proxy = TestProxy::start(&config(&[node.addr], "", rules)).await;
    let response = exchange(
        &proxy,
        b"POST /upload HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n\
          5\r\nhello\r\n0\r\nX-Client: 10.9.9.9\r\nX-Sum: 1\r\nx_debug: on\r\n\r\n",
    )
    .await;
    assert_eq!(response.status, 200);
    let request = node.next().await;
    assert_eq!(request.body, b"hello");
    assert_eq!(request.trailers, b"X-Sum: 1\r\n");
    proxy.stop().await;
}

/// The same through the built-in origin: the echo shows the decoded body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_request_with_trailers_is_echoed_intact() {
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(&[origin.addr], "", "")).await;
    let report = echo(
        &exchange(
            &proxy,
            b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n\
              5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Checksum: 42\r\n\r\n",
        )
        .await,
    );
    assert_eq!(report.body, "hello world");
    assert_eq!(report.header("transfer-encoding"), Some("chunked"));
    proxy.stop().await;
    origin.stop().await;
}

/// A chunked body that fits in `request_buffer` is sent with a length.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_chunked_request_is_reframed_with_a_length() {
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(&[origin.addr], "", SMALL_BUFFERS)).await;
    let mut raw = b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    raw.extend_from_slice(&chunked(b"hello world", 4));
    let report = echo(&exchange(&proxy, &raw).await);
    assert_eq!(report.body, "hello world");
    assert_eq!(report.header("content-length"), Some("11"));
    assert_eq!(report.header("transfer-encoding"), None);
    proxy.stop().await;
    origin.stop().await;
}

/// A chunked body larger than `request_buffer` streams to the node chunked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_chunked_request_streams_chunked() {
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(&[origin.addr], "", SMALL_BUFFERS)).await;
    let body = pattern(5000);
    let mut raw = b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    raw.extend_from_slice(&chunked(&body, 700));
    let report = echo(&exchange(&proxy, &raw).await);
    assert_eq!(report.body_length, 5000);
    assert_eq!(report.body.as_bytes(), &body[..]);
    assert_eq!(report.header("transfer-encoding"), Some("chunked"));
    assert_eq!(report.header("content-length"), None);
    proxy.stop().await;
    origin.stop().await;
}

/// A Content-Length body larger than `request_buffer` streams with its length.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_length_request_streams_whole() {
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(&[origin.addr], "", SMALL_BUFFERS)).await;
    let body = pattern(100_000);
    let mut connection = Connection::open(proxy.addr).await.unwrap();
    connection
        .send(b"PUT /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n")
        .await
        .unwrap();
    for piece in body.chunks(10_000) {
        connection.send(piece).await.unwrap();
    }
    let report = echo(&connection.response().await.unwrap());
    assert_eq!(report.body.as_bytes(), &body[..]);
    assert_eq!(report.header("content-length"), Some("100000"));
    proxy.stop().await;
    origin.stop().await;
}

/// A chunked response that fits in `response_buffer` reaches the client with a length.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_chunked_response_is_reframed_with_a_length() {
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(&[origin.addr], "", SMALL_BUFFERS)).await;
    let response = exchange(
        &proxy,
        b"GET /bytes/1000?chunked=1 HTTP/1.1\r\nHost: t\r\n\r\n",
    )
    .await;
    assert_eq!(response.status, 200);
    assert_eq!(response.header("content-length"), Some("1000"));
    assert_eq!(response.header("transfer-encoding"), None);
    assert_eq!(response.body, pattern(1000));
    proxy.stop().await;
    origin.stop().await;
}

/// A chunked response larger than `response_buffer` streams chunked, intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_chunked_response_streams_chunked() {
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(&[origin.addr], "", SMALL_BUFFERS)).await;
    let mut connection = Connection::open(proxy.addr).await.unwrap();
    for _ in 0..2 {
        connection
            .send(b"GET /bytes/300000?chunked=1 HTTP/1.1\r\nHost: t\r\n\r\n")
            .await
            .unwrap();
        let response = connection.response().await.unwrap();
        assert_eq!(response.status, 200);
        assert_eq!(response.header("transfer-encoding"), Some("chunked"));
        assert_eq!(response.header("content-length"), None);
        assert_eq!(response.body, pattern(300_000));
    }
    proxy.stop().await;
    origin.stop().await;
}

/// 1 MiB with a length and 1 MiB chunked, byte for byte, on one connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_mebibyte_response_arrives_intact() {
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(&[origin.addr], "", "")).await;
    let mut connection = Connection::open(proxy.addr).await.unwrap();
    for target in ["/bytes/1048576", "/bytes/1048576?chunked=1"] {
        connection
            .send(format!("GET {target} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let response = connection.response().await.unwrap();
        assert_eq!(response.status, 200);
        assert_eq!(response.body.len(), 1 << 20, "{target}");
        assert!(response.body == pattern(1 << 20), "{target}: body differs");
    }
    proxy.stop().await;
    origin.stop().await;
}

/// HTTP/1.0 clients never see chunked coding: a large chunked response is
/// close-delimited, and the connection closes after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http10_client_gets_a_close_delimited_body() {
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(&[origin.addr], "", SMALL_BUFFERS)).await;
    for request in [
        &b"GET /bytes/100000?chunked=1 HTTP/1.0\r\n\r\n"[..],
        b"GET /bytes/100000?chunked=1 HTTP/1.0\r\nHost: t\r\nConnection: keep-alive\r\n\r\n",
    ] {
        let reply = send_until_close(proxy.addr, request).await;
        assert!(reply.closed);
        // HTTP/1.1 is the version weir speaks (RFC 9112 §2.3); Connection says it closes
        assert!(reply.bytes.starts_with(b"HTTP/1.1 200 OK\r\n"));
        let response = parse_response(&reply.bytes);
        assert_eq!(response.header("transfer-encoding"), None);
        assert_eq!(response.header("content-length"), None);
        assert_eq!(response.header("connection"), Some("close"));
        assert_eq!(response.header("connection"), Some("close"));
        assert!(response.rest == pattern(100_000), "body differs");
    }
    proxy.stop().await;
    origin.stop().await;
}

/// A small response to an HTTP/1.0 client gets a length; without
/// `keep-alive` the connection closes after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http10_client_gets_a_length_and_a_close() {
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(&[origin.addr], "", SMALL_BUFFERS)).await;
    let reply = send_until_close(
        proxy.addr,
        b"GET /bytes/10?chunked=1 HTTP/1.0\r\nHost: t\r\n\r\n",
    )
    .await;
    assert!(reply.closed);
    let response = parse_response(&reply.bytes);
    assert!(reply.bytes.starts_with(b"HTTP/1.1 200 OK\r\n"));
    assert_eq!(response.header("content-length"), Some("10"));
    assert_eq!(response.header("transfer-encoding"), None);
    assert_eq!(response.header("connection"), Some("close"));
    assert_eq!(response.rest, pattern(10));
    proxy.stop().await;
    origin.stop().await;
}

/// HTTP/1.0 requests may come without Host; the node still gets a valid HTTP/1.1 request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http10_request_without_host_is_served() {
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(&[origin.addr], "", "")).await;
    let reply = send_until_close(proxy.addr, b"GET /echo HTTP/1.0\r\n\r\n").await;
    let response = parse_response(&reply.bytes);
    assert_eq!(response.status, 200, "{}", reply.text());
    let report = parse_echo_json(&response.rest).expect("an /echo report");
    assert_eq!(report.version, "HTTP/1.1");
    assert_eq!(report.header_values("host").count(), 1);
    proxy.stop().await;
    origin.stop().await;
}

/// HEAD: the node's Content-Length, no body, and the connection carries on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_gets_the_length_and_no_body() {
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(&[origin.addr], "", "")).await;
    let mut connection = Connection::open(proxy.addr).await.unwrap();
    connection
        .send(b"HEAD /bytes/500 HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    let head = read_head(&mut connection.stream).await;
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(head.contains("\r\nContent-Length: 500\r\n"), "{head}");
    assert!(!head.contains("Transfer-Encoding"), "{head}");
    // A body would be read here as the start of the next response.
    connection
        .send(b"GET /bytes/3 HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    let next = connection.response().await.unwrap();
    assert_eq!((next.status, next.body.as_slice()), (200, &b"012"[..]));
    assert_eq!(origin.stats.requests(), 2);
    proxy.stop().await;
    origin.stop().await;
}

/// 204 and 304 carry no body and no framing headers; the connection carries on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_content_and_not_modified_have_no_body() {
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(&[origin.addr], "", "")).await;
    let mut connection = Connection::open(proxy.addr).await.unwrap();
    for status in [204, 304] {
        connection
            .send(format!("GET /status/{status} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let head = read_head(&mut connection.stream).await;
        assert!(head.starts_with(&format!("HTTP/1.1 {status} ")), "{head}");
        assert!(!head.contains("Transfer-Encoding"), "{head}");
        if status == 204 {
            assert!(!head.contains("Content-Length"), "{head}");
        }
    }
    connection
        .send(b"GET /bytes/3 HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    let next = connection.response().await.unwrap();
    assert_eq!((next.status, next.body.as_slice()), (200, &b"012"[..]));
    proxy.stop().await;
    origin.stop().await;
}

/// The client waits for `100 Continue` before sending its body; the node
/// never sees the Expect header (weir answered it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expect_continue_is_answered_before_the_body() {
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(&[origin.addr], "", "")).await;
    let mut connection = Connection::open(proxy.addr).await.unwrap();
    let requests: [(&[u8], &[u8]); 2] = [
        (
            b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n",
            b"hello",
        ),
        (
            b"PUT /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nExpect: 100-Continue\r\n\r\n",
            b"5\r\nhello\r\n0\r\n\r\n",
        ),
    ];
    for (head, body) in requests {
        connection.send(head).await.unwrap();
        let interim = read_head(&mut connection.stream).await;
        assert_eq!(interim, "HTTP/1.1 100 Continue\r\n\r\n");
        connection.send(body).await.unwrap();
        let report = echo(&connection.response().await.unwrap());
        assert_eq!(report.body, "hello");
        assert_eq!(report.header("expect"), None);
    }
    proxy.stop().await;
    origin.stop().await;
}

/// A body that is too large gets the final 413 instead of `100 Continue`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expect_continue_with_too_large_a_body_gets_413() {
    let origin = TestOrigin::start("a").await;
    let proxy = TestProxy::start(&config(
        &[origin.addr],
        "",
        "[virtual_servers.web.limits]\nmax_body_bytes = 100",
    ))
    .await;
    let reply = send_until_close(
        proxy.addr,
        b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 101\r\nExpect: 100-continue\r\n\r\n",
    )
    .await;
    assert!(reply.closed);
    assert!(
        reply.bytes.starts_with(b"HTTP/1.1 413 "),
        "{}",
        reply.text()
    );
    assert_eq!(origin.stats.requests(), 0);
    proxy.stop().await;
    origin.stop().await;
}

/// A proxy to `origin` taking bodies up to 4 KiB, buffering the first 1 KiB.
async fn proxy_with_4kib_bodies(origin: &TestOrigin) -> TestProxy {
    TestProxy::start(&config(
        &[origin.addr],
        "",
        "[virtual_servers.web.limits]\nmax_body_bytes = \"4KiB\"\nrequest_buffer = \"1KiB\"",
    ))
    .await
}

/// A chunked body that passes `max_body_bytes` while it streams to the node (past the
/// buffered part) still gets a 413: nothing of the answer went out yet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_chunked_body_past_the_limit_gets_413() {
    let origin = TestOrigin::start("a").await;
    let proxy = proxy_with_4kib_bodies(&origin).await;
    let mut request =
        b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..8 {
        request.extend_from_slice(b"400\r\n");
        request.extend_from_slice(&[b'x'; 1024]);
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"0\r\n\r\n");
    let reply = send_until_close(proxy.addr, &request).await;
    assert!(
        reply.bytes.starts_with(b"HTTP/1.1 413 "),
        "{}",
        reply.text()
    );
    proxy.stop().await;
    origin.stop().await;
}

/// A chunk whose size line alone declares more than `max_body_bytes` leaves gets its 413
/// at that line, without waiting for the rest of the chunk (the client here never sends
/// it): as the first chunk, with or without its first bytes, nothing reaches the node;
/// after a buffered first part, while streaming.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_declared_past_the_limit_gets_413_at_once() {
    let origin = TestOrigin::start("a").await;
    let proxy = proxy_with_4kib_bodies(&origin).await;
    let head = &b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"[..];
    let mut streamed = head.to_vec();
    streamed.extend_from_slice(b"400\r\n");
    streamed.extend_from_slice(&[b'x'; 1024]);
    streamed.extend_from_slice(b"\r\nC01\r\nxx");
    // The chunk's first bytes often come with its size line: more than request_buffer here.
    let mut with_data = [head, b"2000\r\n"].concat();
    with_data.extend_from_slice(&[b'x'; 2000]);
    for (name, request) in [
        ("first chunk", [head, b"1001\r\nxx"].concat()),
        ("first chunk with data", with_data),
        ("streamed", streamed),
    ] {
        let mut connection = Connection::open(proxy.addr).await.unwrap();
        connection.send(&request).await.unwrap();
        let answer = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            read_head(&mut connection.stream),
        )
        .await
        .unwrap_or_else(|_| panic!("{name}: no answer before the chunk arrived"));
        assert!(answer.starts_with("HTTP/1.1 413 "), "{name}: {answer}");
        if name.starts_with("first chunk") {
            // Time for a request weir had sent to be read.
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            assert_eq!(origin.stats.requests(), 0, "{name}");
        }
    }
    proxy.stop().await;
    origin.stop().await;
}

/// Interim 103 responses pass to HTTP/1.1 clients before the final one, with weir's `Via`
/// entry after the node's as on the final answer; a rule that takes `Via` off the response
/// takes it off the interim too (weir's entry and the node's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_hints_pass_through() {
    let node = RecordingNode::start(
        b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\nVia: 1.1 app\r\n\r\n\
          HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    )
    .await;
    let rule = "[[virtual_servers.web.rules]]\nmatch = { path_prefix = \"/hidden\" }\n\
                response_headers = { remove = [\"Via\"] }\n";
    let proxy = TestProxy::start(&config(&[node.addr], "", rule)).await;
    for (path, via) in [("/", "Via: 1.1 app, 1.1 weir\r\n"), ("/hidden", "")] {
        let mut connection = Connection::open(proxy.addr).await.unwrap();
        let sent = format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n");
        connection.send(sent.as_bytes()).await.unwrap();
        let interim = read_head(&mut connection.stream).await;
        assert_eq!(
            interim,
            format!("HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n{via}\r\n")
        );
        let response = connection.response().await.unwrap();
        assert_eq!((response.status, response.text().as_str()), (200, "ok"));
    }
    proxy.stop().await;
}

/// Response trailers reach an HTTP/1.1 client (so the body stays chunked).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_trailers_pass_through() {
    let node = RecordingNode::start(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2;x=y\r\nok\r\n0\r\nX-Sum: 9\r\n\r\n",
    )
    .await;
    let proxy = TestProxy::start(&config(&[node.addr], "", "")).await;
    let reply = send_until_close(
        proxy.addr,
        b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    )
    .await;
    let response = parse_response(&reply.bytes);
    assert_eq!(response.header("transfer-encoding"), Some("chunked"));
    assert_eq!(response.rest, b"2\r\nok\r\n0\r\nX-Sum: 9\r\n\r\n");
    proxy.stop().await;
}

/// With compression on, a response that could be compressed but goes out as the node sent
/// it (the client accepts no coding, or the cache passes it) keeps its `Trailer` field and
/// its trailers: only a compressed or stored body drops them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_trailers_pass_an_uncompressed_answer_with_compression_on() {
    // A text body long enough to be worth compressing.
    let mut answer = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nCache-Control: no-store\r\n\
          Trailer: X-Sum\r\nTransfer-Encoding: chunked\r\n\r\n7d0\r\n"
        .to_vec();
    answer.extend_from_slice(&b"hello world "[..].repeat(200)[..2000]);
    answer.extend_from_slice(b"\r\n0\r\nX-Sum: 9\r\n\r\n");
    let node = RecordingNode::start(Box::leak(answer.into_boxed_slice())).await;
    for tables in [
        "[virtual_servers.web.compression]\n",
        "[virtual_servers.web.compression]\n[virtual_servers.web.cache]\n",
    ] {
        let proxy = TestProxy::start(&config(&[node.addr], "", tables)).await;
        let reply = send_until_close(
            proxy.addr,
            b"GET / HTTP/1.1\r\nHost: t\r\nTE: trailers\r\nConnection: close\r\n\r\n",
        )
        .await;
        let response = parse_response(&reply.bytes);
        assert_eq!(response.status, 200, "{tables}");
        assert_eq!(response.header("trailer"), Some("X-Sum"), "{tables}");
        assert!(
            response.rest.ends_with(b"\r\n0\r\nX-Sum: 9\r\n\r\n"),
            "{tables}: {:?}",
            String::from_utf8_lossy(&response.rest)
        );
        // A HEAD's answer announces them as its GET's does.
        let reply = send_until_close(
            proxy.addr,
            b"HEAD / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
        )
        .await;
        let response = parse_response(&reply.bytes);
        assert_eq!(response.header("trailer"), Some("X-Sum"), "{tables}: HEAD");
        proxy.stop().await;
    }
}

/// A node answer that breaks the framing rules is a 502, never passed on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_node_answers_are_bad_gateway() {
    for answer in [
        &b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\nok"[..],
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nX: a\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nok\r\n0\r\n\r\n",
        b"HTTP/1.1 999 Nope\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/2.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
    ] {
        let node = RecordingNode::start(answer).await;
        let proxy = TestProxy::start(&config(&[node.addr], "retries = 0", "")).await;
        let reply = send_until_close(
            proxy.addr,
            b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
        )
        .await;
        assert_eq!(
            parse_response(&reply.bytes).status,
            502,
            "{:?} gave {:?}",
            String::from_utf8_lossy(answer),
            reply.text()
        );
        proxy.stop().await;
    }
}

/// What a client sending `request` received in its first second from a node that answers
/// as `answer` writes (after reading the request head), through a virtual server with
/// `vs_extra`.
async fn first_second<F, A>(answer: F, vs_extra: &str, request: &[u8]) -> Vec<u8>
where
    F: FnOnce(tokio::net::TcpStream) -> A + Send + 'static,
    A: std::future::Future<Output = ()> + Send,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let node = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let node_addr = node.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut stream, _) = node.accept().await.unwrap();
        let mut head = [0u8; 1024];
        let _ = stream.read(&mut head).await;
        answer(stream).await;
    });
    let proxy = TestProxy::start(&config(&[node_addr], "", vs_extra)).await;
    let mut client = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    client.write_all(request).await.unwrap();
    let mut seen = Vec::new();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), async {
        let mut chunk = [0u8; 4096];
        loop {
            let n = client.read(&mut chunk).await.unwrap();
            assert!(n > 0, "closed early");
            seen.extend_from_slice(&chunk[..n]);
        }
    })
    .await;
    proxy.stop().await;
    seen
}

/// The node's answer on `stream`: `first`, then 2 s later `rest`.
async fn in_two_parts(mut stream: tokio::net::TcpStream, first: &[u8], rest: &[u8]) {
    use tokio::io::AsyncWriteExt;
    let _ = stream.write_all(first).await;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let _ = stream.write_all(rest).await;
}

/// Whether the client saw `marker` (in `first`) within 1 s, the node pausing 2 s after `first`.
async fn seen_before_the_node_goes_on(
    first: &'static [u8],
    rest: &'static [u8],
    marker: &str,
) -> bool {
    let request = b"GET /progress HTTP/1.1\r\nHost: t\r\n\r\n";
    let seen = first_second(move |stream| in_two_parts(stream, first, rest), "", request).await;
    String::from_utf8_lossy(&seen).contains(marker)
}

/// Server-sent events reach the client as the node sends them, not once the response
/// buffer fills or the stream ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_sent_events_are_not_held_in_the_response_buffer() {
    let first = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\
                  Transfer-Encoding: chunked\r\n\r\n9\r\ndata: 1\n\n\r\n";
    let rest = b"9\r\ndata: 2\n\n\r\n0\r\n\r\n";
    assert!(
        seen_before_the_node_goes_on(first, rest, "data: 1").await,
        "the first event did not arrive within 1 s"
    );
}

/// Any answer the node sends in parts with pauses between (flushed HTML, chunked or with
/// a length) reaches the client part by part: a pause ends the read-ahead of the
/// response buffer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progressive_answers_are_not_held_in_the_response_buffer() {
    let cases: [(&[u8], &[u8]); 2] = [
        (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\
              Transfer-Encoding: chunked\r\n\r\n8\r\n<p>1</p>\r\n",
            b"8\r\n<p>2</p>\r\n0\r\n\r\n",
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 16\r\n\r\n<p>1</p>",
            b"<p>2</p>",
        ),
    ];
    for (first, rest) in cases {
        assert!(
            seen_before_the_node_goes_on(first, rest, "<p>1</p>").await,
            "{:?} was held",
            String::from_utf8_lossy(first)
        );
    }
}

/// With compression on, an event stream's events still reach the client as the node sends
/// them: when the node pauses, the encoder's held input is flushed (decodable at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_events_are_flushed_when_the_node_pauses() {
    let first = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\
                  Transfer-Encoding: chunked\r\n\r\n9\r\ndata: 1\n\n\r\n";
    let rest = b"9\r\ndata: 2\n\n\r\n0\r\n\r\n";
    let compression = "[virtual_servers.web.compression]\nalgorithms = [\"gzip\"]\nmin_size = 1";
    let request = b"GET /events HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip\r\n\r\n";
    let seen = first_second(
        move |stream| in_two_parts(stream, first, rest),
        compression,
        request,
    )
    .await;
    let text = String::from_utf8_lossy(&seen).to_ascii_lowercase();
    assert!(text.contains("content-encoding: gzip"), "{text}");
    let events = inflated_so_far(&seen);
    assert!(events.contains("data: 1"), "inflated so far: {events:?}");
}

/// A compressed event stream whose node never pauses for long (an event every 20 ms) still
/// reaches the client event by event: each event is flushed through the encoder as it comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_events_go_on_one_by_one() {
    let events = |mut stream: tokio::net::TcpStream| async move {
        use tokio::io::AsyncWriteExt;
        let _ = stream
            .write_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\
                  Transfer-Encoding: chunked\r\n\r\n",
            )
            .await;
        for n in 0..100 {
            let event = format!("data: {n:02}\n\n");
            let chunk = format!("{:x}\r\n{event}\r\n", event.len());
            if stream.write_all(chunk.as_bytes()).await.is_err() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let _ = stream.write_all(b"0\r\n\r\n").await;
    };
    let compression = "[virtual_servers.web.compression]\nalgorithms = [\"gzip\"]";
    let request = b"GET /events HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip\r\n\r\n";
    let seen = first_second(events, compression, request).await;
    let text = String::from_utf8_lossy(&seen).to_ascii_lowercase();
    assert!(text.contains("content-encoding: gzip"), "{text}");
    let events = inflated_so_far(&seen);
    assert!(
        events.contains("data: 05"),
        "inflated in the first second: {events:?}"
    );
}

/// A chunked, gzip-coded HTTP/1.1 answer as far as it came (head and whole chunks):
/// its body inflated as far as it goes.
fn inflated_so_far(seen: &[u8]) -> String {
    use std::io::Write;
    let start = seen
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head")
        + 4;
    let mut body = &seen[start..];
    let mut gzip = Vec::new();
    while let Some(line_end) = body.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&body[..line_end]).unwrap();
        let size = usize::from_str_radix(size, 16).unwrap();
        let data = &body[line_end + 2..];
        if size == 0 || data.len() < size + 2 {
            break;
        }
        gzip.extend_from_slice(&data[..size]);
        body = &data[size + 2..];
    }
    let mut inflated = flate2::write::GzDecoder::new(Vec::new());
    inflated.write_all(&gzip).unwrap();
    inflated.flush().unwrap();
    String::from_utf8_lossy(inflated.get_ref()).into_owned()
}

/// A buffered body larger than what is copied behind the head (64 KiB) is written to the
/// node from its own buffer, after the head and its framing: with a length, chunked with
/// trailers, and buffered in part with the rest streamed after it, each arrives whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_buffered_bodies_reach_the_node_whole() {
    let mut node = RecordingNode::start(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").await;
    let proxy = TestProxy::start(&config(
        &[node.addr],
        "",
        "[virtual_servers.web.limits]\nrequest_buffer = \"1MiB\"\nmax_body_bytes = \"4MiB\"",
    ))
    .await;
    // With a length, all of it buffered; then more than request_buffer, buffered in part.
    for size in [300_000, 1_500_000] {
        let body = pattern(size);
        let mut raw =
            format!("PUT /l HTTP/1.1\r\nHost: t\r\nContent-Length: {size}\r\n\r\n").into_bytes();
        raw.extend_from_slice(&body);
        let response = exchange(&proxy, &raw).await;
        assert_eq!(response.status, 200);
        let request = node.next().await;
        assert_eq!(request.body.len(), size);
        assert!(
            request.body == body,
            "the body of {size} bytes changed on the way"
        );
        assert!(
            request
                .head()
                .contains(&format!("Content-Length: {size}\r\n")),
            "{}",
            request.head()
        );
    }
    // Chunked, all of it buffered, with trailers: it keeps its chunks and trailers.
    let body = pattern(300_000);
    let mut raw = b"POST /c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    let framed = chunked(&body, 7000);
    // `chunked` ends with the last chunk and an empty trailer section: trailers go there.
    raw.extend_from_slice(&framed[..framed.len() - 2]);
    raw.extend_from_slice(b"X-Checksum: 42\r\n\r\n");
    let response = exchange(&proxy, &raw).await;
    assert_eq!(response.status, 200);
    let request = node.next().await;
    assert!(request.body == body, "the chunked body changed on the way");
    assert_eq!(request.trailers, b"X-Checksum: 42\r\n");
    assert!(request.head().contains("Transfer-Encoding: chunked\r\n"));
    proxy.stop().await;
}

/// A node that sends interim responses without end while it reads a streamed request body
/// gets the bound of interim responses there too: ten are relayed, then 502, while the
/// client is still sending (before, weir kept and parsed them all until the body ended:
/// CPU and memory growing with the node's flood).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interim_responses_without_end_during_the_body_are_bounded() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let node_addr = listener.local_addr().unwrap();
    let node = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let (mut read, mut write) = stream.into_split();
        // Floods 102s from the moment the request starts, and reads the body meanwhile.
        let flood = tokio::spawn(async move {
            let burst = b"HTTP/1.1 102 Processing\r\n\r\n".repeat(16);
            while write.write_all(&burst).await.is_ok() {
                tokio::task::yield_now().await;
            }
        });
        let mut chunk = vec![0u8; 64 * 1024];
        while read.read(&mut chunk).await.unwrap_or(0) > 0 {}
        flood.abort();
    });
    let proxy = TestProxy::start(&config(&[node_addr], "", SMALL_BUFFERS)).await;
    let connection = Connection::open(proxy.addr).await.unwrap();
    let (mut read, mut write) = connection.stream.into_split();
    // 2 MiB sent over about a second.
    let total = 2 * 1024 * 1024;
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let done = Arc::clone(&done);
        tokio::spawn(async move {
            let head =
                format!("POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: {total}\r\n\r\n");
            let _ = write.write_all(head.as_bytes()).await;
            let piece = vec![b'x'; 32 * 1024];
            for _ in 0..total / piece.len() {
                if write.write_all(&piece).await.is_err() {
                    return;
                }
                tokio::time::sleep(std::time::Duration::from_millis(15)).await;
            }
            done.store(true, Ordering::SeqCst);
        })
    };
    let mut reply = Vec::new();
    let answered_while_sending = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        let mut chunk = vec![0u8; 4096];
        loop {
            match read.read(&mut chunk).await {
                Ok(n) if n > 0 => reply.extend_from_slice(&chunk[..n]),
                _ => return false,
            }
            if reply.windows(13).any(|w| w == b"HTTP/1.1 502 ") {
                return !done.load(Ordering::SeqCst);
            }
        }
    })
    .await
    .unwrap_or(false);
    let reply = String::from_utf8_lossy(&reply).into_owned();
    assert!(answered_while_sending, "{reply:.600}");
    assert_eq!(reply.matches("HTTP/1.1 102 ").count(), 10, "{reply:.600}");
    writer.abort();
    node.abort();
    proxy.stop().await;
}

/// The chunks of a chunked body as `raw` (a recorded request) carries them: their sizes.
fn chunk_sizes(raw: &[u8]) -> Vec<usize> {
    let mut at = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head")
        + 4;
    let mut sizes = Vec::new();
    loop {
        let line_end = at + raw[at..].windows(2).position(|w| w == b"\r\n").unwrap();
        let size = usize::from_str_radix(std::str::from_utf8(&raw[at..line_end]).unwrap(), 16)
            .expect("a chunk size");
        if size == 0 {
            return sizes;
        }
        sizes.push(size);
        at = line_end + 2 + size + 2;
    }
}

/// A body in tiny chunks goes to the node in few large ones: the chunks read together
/// are written as one (a write, and a segment, per client chunk cost the proxy a hundred
/// times the CPU of the same bytes in large chunks). The bytes arrive unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiny_chunks_read_together_reach_the_node_as_one() {
    let mut node = RecordingNode::start(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").await;
    let proxy = TestProxy::start(&config(&[node.addr], "", SMALL_BUFFERS)).await;
    let data = pattern(20_000);
    let mut raw =
        b"POST /upload HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    raw.extend_from_slice(&chunked(&data, 1));
    let response = exchange(&proxy, &raw).await;
    assert_eq!((response.status, response.text().as_str()), (200, "ok"));
    let request = node.next().await;
    assert_eq!(request.body, data);
    let sizes = chunk_sizes(&request.raw);
    assert!(
        sizes.len() <= 64,
        "{} chunks for 20,000 one-byte chunks: {:?}",
        sizes.len(),
        &sizes[..sizes.len().min(20)]
    );
    proxy.stop().await;
}
