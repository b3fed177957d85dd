//! The forward stage's HTTP/2 half against an in-process h2c node that echoes
//! what it received: the rewritten head, a body sent in two parts, trailers
//! both ways, and a response of unknown length read as a chunked head.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::net::TcpListener;
use weir_config::UpstreamHttp2Codec;
use weir_http::{BodyFraming, ForwardRequest, Limits, Method, Parsed, RequestHead};
use weir_observe::Metrics;
use weir_upstream::{H2Node, H2Settings};

use super::*;

const WAIT: Duration = Duration::from_secs(5);

/// Answers each request with its body, `x-seen-*` fields telling what the
/// node received, and the request's trailers plus `grpc-status: 0`.
async fn echo_node() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(mut connection) = h2::server::handshake(tcp).await else {
                    return;
                };
                while let Some(Ok((request, mut respond))) = connection.accept().await {
                    tokio::spawn(async move {
                        let (parts, mut body) = request.into_parts();
                        let mut received = Vec::new();
                        while let Some(Ok(data)) = body.data().await {
                            let _ = body.flow_control().release_capacity(data.len());
                            received.extend_from_slice(&data);
                        }
                        let mut trailers = body.trailers().await.ok().flatten().unwrap_or_default();
                        trailers.insert("grpc-status", "0".parse().expect("value"));
                        let seen = |name: &str| {
                            parts
                                .headers
                                .get(name)
                                .cloned()
                                .unwrap_or_else(|| "-".parse().expect("value"))
                        };
                        let response = http::Response::builder()
                            .status(200)
                            .header(
                                "x-seen-authority",
                                parts.uri.authority().map_or("-", |a| a.as_str()),
                            )
                            .header("x-seen-te", seen("te"))
                            .header("x-seen-forwarded-for", seen("x-forwarded-for"))
                            .header("x-seen-connection", seen("connection"))
                            .body(())
                            .expect("response");
                        let Ok(mut send) = respond.send_response(response, false) else {
                            return;
                        };
                        let _ = send.send_data(Bytes::from(received), false);
                        let _ = send.send_trailers(trailers);
                    });
                }
            });
        }
    });
    address
}

fn node(address: SocketAddr, codec: UpstreamHttp2Codec) -> Arc<H2Node> {
    let metrics = Metrics::new();
    let settings = H2Settings {
        max_connections: 2,
        max_streams: 10,
        queue_length: 10,
        queue_timeout: WAIT,
        fair_queue: true,
        idle_timeout: Duration::from_secs(30),
        connect_timeout: WAIT,
        initial_stream_window: 1 << 20,
        initial_connection_window: 1 << 22,
        ping_interval: Duration::from_secs(10),
        ping_timeout: WAIT,
        tls: None,
        codec,
    };
    H2Node::new(
        address,
        settings,
        metrics.node("p", "n"),
        metrics.upstream_http2("p", "n"),
        metrics.pool("p"),
    )
}

fn head(raw: &str) -> RequestHead {
    match weir_http::parse_request(raw.as_bytes(), &Limits::default()).expect("valid") {
        Parsed::Complete(head, _) => head,
        Parsed::Partial => panic!("incomplete"),
    }
}

fn forward(framing: BodyFraming) -> ForwardRequest<'static> {
    ForwardRequest {
        framing,
        client_addr: Some("192.0.2.9".parse().expect("address")),
        proto: "https",
        via: Some("weir"),
        via_version: None,
        upgrade: false,
        strip_expect: true,
        owned_header: None,
        drop_underscore_names: false,
    }
}

#[tokio::test]
async fn a_streamed_body_and_trailers_reach_the_node_and_come_back() {
    for codec in [UpstreamHttp2Codec::H2, UpstreamHttp2Codec::Weir] {
        a_streamed_body_and_trailers_reach_the_node_and_come_back_on(codec).await;
    }
}

async fn a_streamed_body_and_trailers_reach_the_node_and_come_back_on(codec: UpstreamHttp2Codec) {
    let node = node(echo_node().await, codec);
    let head = head(
        "POST /svc/Echo HTTP/1.1\r\nHost: api.example\r\nTE: trailers\r\n\
         Connection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n",
    );
    let mut sent = send_request(
        &node,
        convert_request(
            (&head, None, &weir_http::Unedited),
            &forward(BodyFraming::Chunked),
            ("http", node.codec()),
        )
        .expect("converted"),
        (Bytes::from_static(b"first part, "), false),
        WAIT,
        weir_upstream::Flow::Shared,
        std::pin::pin!(std::future::pending()),
    )
    .await
    .expect("sent");
    let body = sent.body.as_mut().expect("more body to come");
    send_body(body, Bytes::from(vec![b'x'; 200_000]), false, WAIT)
        .await
        .expect("the rest, past the initial window");
    send_trailers(body, b"x-checksum: abc\r\n").expect("trailers");
    let limits = Limits::default();
    let mut response = response_head(sent.response, reading(Method::Post, &limits), WAIT)
        .await
        .expect("a response");
    assert_eq!(response.head.status(), 200);
    assert_eq!(
        response.head.framing(),
        BodyFraming::Chunked,
        "length unknown"
    );
    assert_eq!(
        response.head.header("x-seen-authority"),
        Some(&b"api.example"[..])
    );
    assert_eq!(response.head.header("x-seen-te"), Some(&b"trailers"[..]));
    assert_eq!(
        response.head.header("x-seen-forwarded-for"),
        Some(&b"192.0.2.9"[..])
    );
    assert_eq!(response.head.header("x-seen-connection"), Some(&b"-"[..]));
    let mut echoed = Vec::new();
    while let Some(data) = read_body(&mut response.body, WAIT).await.expect("body") {
        echoed.extend_from_slice(&data);
    }
    assert_eq!(echoed.len(), 12 + 200_000);
    assert!(echoed.starts_with(b"first part, xxx"));
    let trailers = read_trailers(&mut response.body, WAIT)
        .await
        .expect("trailers")
        .expect("some");
    let trailers = String::from_utf8_lossy(&trailers).to_ascii_lowercase();
    assert!(trailers.contains("grpc-status: 0\r\n"), "{trailers}");
    assert!(trailers.contains("x-checksum: abc\r\n"), "{trailers}");
    drop(response);
    drop(sent.body);
    drop(sent.lease);
    assert_eq!(node.streams(), 0, "the stream slot is free again");
}

#[tokio::test]
async fn a_bodiless_request_ends_its_stream_with_the_head() {
    for codec in [UpstreamHttp2Codec::H2, UpstreamHttp2Codec::Weir] {
        a_bodiless_request_ends_its_stream_with_the_head_on(codec).await;
    }
}

async fn a_bodiless_request_ends_its_stream_with_the_head_on(codec: UpstreamHttp2Codec) {
    let node = node(echo_node().await, codec);
    let head = head("GET /a HTTP/1.1\r\nHost: n\r\n\r\n");
    let sent = send_request(
        &node,
        convert_request(
            (&head, None, &weir_http::Unedited),
            &forward(BodyFraming::None),
            ("http", node.codec()),
        )
        .expect("converted"),
        (Bytes::new(), true),
        WAIT,
        weir_upstream::Flow::Shared,
        std::pin::pin!(std::future::pending()),
    )
    .await
    .expect("sent");
    assert!(sent.body.is_none());
    let limits = Limits::default();
    let mut response = response_head(sent.response, reading(Method::Get, &limits), WAIT)
        .await
        .expect("a response");
    assert_eq!(response.head.status(), 200);
    assert_eq!(
        read_body(&mut response.body, WAIT).await.expect("end"),
        None
    );
}

/// How the tests read an answer: no replay.
fn reading(method: Method, limits: &Limits) -> Reading<'_> {
    Reading {
        method,
        limits,
        replay: false,
    }
}
