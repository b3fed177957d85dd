//! Wire tests of the origin's routes and response framing.

mod common;

use common::{pattern, start};
use weir_origin::{OriginOptions, parse_echo_json, parse_stats_json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_healthz_and_not_found() {
    let origin = start("alpha", OriginOptions::default()).await;
    let mut client = origin.client().await;
    let hello = client.get("/").await;
    assert_eq!(hello.status, 200);
    assert_eq!(hello.text(), "hello from weir origin alpha\n");
    assert_eq!(hello.header("x-origin"), Some("alpha"));
    assert!(
        hello
            .header("date")
            .is_some_and(|date| date.ends_with(" GMT"))
    );
    let health = client.get("/healthz").await;
    assert_eq!((health.status, health.text()), (200, "ok"));
    let missing = client.get("/missing").await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.header("x-origin"), Some("alpha"));
    origin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_have_the_asked_length_and_pattern() {
    let origin = start("alpha", OriginOptions::default()).await;
    let mut client = origin.client().await;
    for length in [0usize, 1, 100, 32 * 1024, 32 * 1024 + 1, 65_536, 300_000] {
        let response = client.get(&format!("/bytes/{length}")).await;
        assert_eq!(response.status, 200);
        assert_eq!(
            response.header("content-length"),
            Some(length.to_string().as_str())
        );
        assert_eq!(response.body.len(), length);
        assert!(
            response.body == pattern(length),
            "pattern of /bytes/{length}"
        );
    }
    let query = client.get("/?bytes=7").await;
    assert_eq!(query.body, pattern(7));
    origin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_response_framing() {
    let origin = start("alpha", OriginOptions::default()).await;
    let mut client = origin.client().await;
    for length in [0usize, 10, 100_000, 200_003] {
        let response = client.get(&format!("/bytes/{length}?chunked=1")).await;
        assert_eq!(response.status, 200);
        assert_eq!(response.header("transfer-encoding"), Some("chunked"));
        assert_eq!(response.header("content-length"), None);
        assert_eq!(response.chunks.iter().sum::<usize>(), length);
        assert!(response.chunks.iter().all(|&size| size > 0));
        assert!(
            response.body == pattern(length),
            "pattern of chunked /bytes/{length}"
        );
        if length > 64 * 1024 {
            assert!(
                response.chunks.len() > 1,
                "large bodies come in several chunks"
            );
        }
    }
    // Text bodies can be chunked too, and the connection stays in step afterwards.
    let status = client.get("/status/201?chunked=1").await;
    assert_eq!((status.status, status.text()), (201, "201 Created\n"));
    assert_eq!(status.chunks, [12]);
    assert_eq!(client.get("/healthz").await.text(), "ok");
    origin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_sends_get_headers_without_body() {
    let origin = start("alpha", OriginOptions::default()).await;
    let mut client = origin.client().await;
    client
        .send(b"HEAD /bytes/1000 HTTP/1.1\r\nHost: t\r\n\r\nHEAD /bytes/5?chunked=1 HTTP/1.1\r\nHost: t\r\n\r\n")
        .await;
    let head = client.read_response(true).await;
    assert_eq!(head.status, 200);
    assert_eq!(head.header("content-length"), Some("1000"));
    let chunked = client.read_response(true).await;
    assert_eq!(chunked.header("content-length"), Some("5"));
    // Had any body bytes followed, this response would not parse.
    assert_eq!(
        client.get("/").await.text(),
        "hello from weir origin alpha\n"
    );
    client.send(b"HEAD / HTTP/1.1\r\nHost: t\r\n\r\n").await;
    let hello = client.read_response(true).await;
    assert_eq!(hello.header("content-length"), Some("29"));
    origin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_codes_and_bodiless_statuses() {
    let origin = start("alpha", OriginOptions::default()).await;
    let mut client = origin.client().await;
    let teapot = client.get("/status/418").await;
    assert_eq!((teapot.status, teapot.text()), (418, "418 \n"));
    let unavailable = client.get("/status/503").await;
    assert_eq!(
        (unavailable.status, unavailable.text()),
        (503, "503 Service Unavailable\n")
    );
    for code in [204, 304] {
        client.send(format!("GET /status/{code} HTTP/1.1\r\nHost: t\r\n\r\nGET /healthz HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes()).await;
        let bodiless = client.response().await;
        assert_eq!(bodiless.status, code);
        assert_eq!(bodiless.header("content-length"), None);
        assert_eq!(bodiless.header("transfer-encoding"), None);
        // The next response starts right after the head: no body bytes came between.
        assert_eq!(client.response().await.text(), "ok");
    }
    let combined = client.get("/bytes/3?status=202").await;
    assert_eq!((combined.status, combined.body.len()), (202, 3));
    origin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delays_by_path_and_query() {
    let origin = start("alpha", OriginOptions::default()).await;
    let mut client = origin.client().await;
    let started = std::time::Instant::now();
    let delayed = client.get("/delay/50").await;
    assert_eq!((delayed.status, delayed.text()), (200, "delayed 50 ms\n"));
    let bytes = client.get("/bytes/100?delay=50").await;
    assert_eq!(bytes.body.len(), 100);
    // A lower bound only: sleeping never ends early.
    assert!(started.elapsed() >= std::time::Duration::from_millis(100));
    origin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_preserves_header_order_and_case() {
    let origin = start("alpha", OriginOptions::default()).await;
    let mut client = origin.client().await;
    client
        .send(b"POST /echo?x=1 HTTP/1.1\r\nHost: t\r\nX-Forwarded-For: 10.0.0.1\r\nx-lower-case: a\r\nX-UPPER: B\r\nContent-Length: 5\r\n\r\nhello")
        .await;
    let response = client.response().await;
    assert_eq!(response.status, 200);
    assert_eq!(response.header("content-type"), Some("application/json"));
    let report = parse_echo_json(&response.body).expect("echo JSON");
    assert_eq!(report.origin, "alpha");
    assert_eq!(report.method, "POST");
    assert_eq!(report.target, "/echo?x=1");
    assert_eq!(report.version, "HTTP/1.1");
    let names: Vec<&str> = report
        .headers
        .iter()
        .map(|(name, _)| name.as_str())
        .collect();
    assert_eq!(
        names,
        [
            "Host",
            "X-Forwarded-For",
            "x-lower-case",
            "X-UPPER",
            "Content-Length"
        ]
    );
    assert_eq!(report.header("x-forwarded-for"), Some("10.0.0.1"));
    assert_eq!(report.body, "hello");
    assert_eq!(report.body_length, 5);
    assert_eq!(report.peer, client.stream.local_addr().unwrap());
    origin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_request_body_then_next_request() {
    let origin = start("alpha", OriginOptions::default()).await;
    let mut client = origin.client().await;
    // Sent in pieces that split the chunk framing, with the next request pipelined behind it.
    let request: &[u8] = b"PUT /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n\
        5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n\
        POST /healthz HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n\
        GET /bytes/3 HTTP/1.1\r\nHost: t\r\n\r\n";
    for piece in request.chunks(7) {
        client.send(piece).await;
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    let echo = parse_echo_json(&client.response().await.body).expect("echo JSON");
    assert_eq!(echo.body, "hello world");
    assert_eq!(echo.body_length, 11);
    assert_eq!(client.response().await.text(), "ok");
    assert_eq!(client.response().await.body, pattern(3));
    origin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_length_body_is_discarded_and_expect_continue_answered() {
    let origin = start("alpha", OriginOptions::default()).await;
    let mut client = origin.client().await;
    client
        .send(b"POST /healthz HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\nExpect: 100-continue\r\n\r\n")
        .await;
    let interim = client.response().await;
    assert_eq!(interim.status, 100);
    client.send(b"0123456789").await;
    assert_eq!(client.response().await.text(), "ok");
    let big = vec![b'z'; 200_000];
    client
        .send(
            format!(
                "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
                big.len()
            )
            .as_bytes(),
        )
        .await;
    client.send(&big).await;
    assert_eq!(client.response().await.status, 200);
    assert_eq!(client.get("/healthz").await.text(), "ok");
    origin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_route_reports_counters() {
    let origin = start("stats-node", OriginOptions::default()).await;
    let mut client = origin.client().await;
    client.get("/").await;
    let response = client.get("/stats").await;
    let snapshot = parse_stats_json(&response.body).expect("stats JSON");
    assert_eq!(snapshot.name, "stats-node");
    assert_eq!(snapshot.requests, 2);
    assert_eq!(snapshot.connections_accepted, 1);
    assert_eq!(snapshot.connections_open, 1);
    assert_eq!(snapshot.connections_peak, 1);
    assert_eq!(snapshot.connections_refused, 0);
    origin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_400_and_close() {
    let origin = start("alpha", OriginOptions::default()).await;
    let cases: [(&[u8], u16); 7] = [
        (b"GET / HTTP/1.1\r\nBad Header: x\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\r\n", 501),
        (b"GET /bytes/ten HTTP/1.1\r\nHost: t\r\n\r\n", 400),
        (b"GET /status/700 HTTP/1.1\r\nHost: t\r\n\r\n", 400),
    ];
    for (request, status) in cases {
        let mut client = origin.client().await;
        client.send(request).await;
        let response = client.response().await;
        assert_eq!(
            response.status,
            status,
            "{:?}",
            String::from_utf8_lossy(request)
        );
        assert_eq!(response.header("connection"), Some("close"));
        assert_eq!(response.header("x-origin"), Some("alpha"));
        client.expect_closed().await;
    }
    let mut client = origin.client().await;
    client
        .send(format!("GET /{} HTTP/1.1\r\n", "a".repeat(70_000)).as_bytes())
        .await;
    assert_eq!(client.response().await.status, 431);
    client.expect_closed().await;
    origin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absolute_form_targets_route_by_path() {
    let origin = start("alpha", OriginOptions::default()).await;
    let mut client = origin.client().await;
    let response = client.get("http://example.com/bytes/4").await;
    assert_eq!(response.body, pattern(4));
    origin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bind_refuses_a_name_that_is_not_a_header_value() {
    let options = OriginOptions::new("bad\r\nname", "127.0.0.1:0".parse().unwrap());
    let error = weir_origin::Origin::bind(options)
        .await
        .expect_err("invalid name");
    assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput);
}
