//! The PROXY protocol: accepted from trusted clients, data from anyone else, sent to nodes.

use std::net::SocketAddr;
use std::time::Duration;

use weir_proxy_protocol::{Parsed, parse, write_v1, write_v2};
use weir_testkit::{TestOrigin, TestProxy, client, config};

use crate::support::{Node, exchange, metric, tcp_config};

fn addr(text: &str) -> SocketAddr {
    text.parse().unwrap()
}

fn header(version: u8, source: &str, destination: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let write = if version == 1 { write_v1 } else { write_v2 };
    write(addr(source), addr(destination), &mut out);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_header_is_taken_and_its_client_sent_on_to_the_node() {
    let node = Node::start("n", Duration::ZERO).await;
    for (accept, send) in [(1, 2), (2, 1)] {
        let proxy = TestProxy::start(&tcp_config(
            &[node.addr],
            &format!("proxy_protocol = \"v{send}\""),
            "[virtual_servers.l4.proxy_protocol]\ntrusted = [\"127.0.0.0/8\"]",
        ))
        .await;
        let mut bytes = header(accept, "192.0.2.7:51000", "198.51.100.1:443");
        bytes.extend_from_slice(b"payload");
        exchange(proxy.addr, &bytes).await;
        // The node sees weir's header naming the original client and destination, then the data.
        let received = node.last_received();
        let Ok(Parsed::Complete { header, consumed }) = parse(&received) else {
            panic!("no PROXY header at the node: {received:?}");
        };
        assert_eq!(header.source(), Some(addr("192.0.2.7:51000")));
        assert_eq!(
            header.addresses.unwrap().destination,
            addr("198.51.100.1:443")
        );
        assert_eq!(&received[consumed..], b"payload");
        let text = proxy.metrics.encode();
        assert_eq!(
            metric(
                &text,
                "weir_proxy_protocol_headers_total{virtual_server=\"l4\",result=\"accepted\"}"
            ),
            1
        );
        proxy.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_an_untrusted_client_a_header_is_data() {
    let node = Node::start("n", Duration::ZERO).await;
    let proxy = TestProxy::start(&tcp_config(
        &[node.addr],
        "",
        "[virtual_servers.l4.proxy_protocol]\ntrusted = [\"10.0.0.0/8\"]",
    ))
    .await;
    let bytes = header(1, "192.0.2.7:1", "198.51.100.1:2");
    assert_eq!(
        exchange(proxy.addr, &bytes).await,
        format!("n {}", bytes.len())
    );
    assert_eq!(node.last_received(), bytes);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_or_malformed_header_from_a_trusted_client_closes_and_counts() {
    let node = Node::start("n", Duration::ZERO).await;
    let proxy = TestProxy::start(&tcp_config(
        &[node.addr],
        "",
        "[virtual_servers.l4.proxy_protocol]\ntrusted = [\"127.0.0.0/8\"]\ntimeout = \"300ms\"",
    ))
    .await;
    assert_eq!(exchange(proxy.addr, b"GET / HTTP/1.1\r\n\r\n").await, "");
    assert_eq!(
        exchange(proxy.addr, b"PROXY TCP4 1.2.3.4 5.6.7.8 1 99999\r\n").await,
        ""
    );
    let mut v2 = header(2, "192.0.2.7:1", "198.51.100.1:2");
    v2[12] = 0x11;
    assert_eq!(exchange(proxy.addr, &v2).await, "");
    // A truncated header, then silence: closed at the timeout.
    let mut stream = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut stream, b"PROXY TCP4 1.2")
        .await
        .unwrap();
    assert_eq!(crate::support::read_all(&mut stream).await, "");
    // A truncated header, then the client's FIN: closed at once (the timeout is long here),
    // not waited on in a loop.
    let mut stream = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut stream, b"PROXY TCP4 1.2.3.4 5.6.7.8 1111 2222\r")
        .await
        .unwrap();
    tokio::io::AsyncWriteExt::shutdown(&mut stream)
        .await
        .unwrap();
    let mut rest = Vec::new();
    let read = tokio::io::AsyncReadExt::read_to_end(&mut stream, &mut rest);
    assert!(
        tokio::time::timeout(Duration::from_millis(250), read)
            .await
            .is_ok(),
        "a truncated header and a FIN were not closed at once"
    );
    let text = proxy.metrics.encode();
    let count = |result: &str| {
        metric(
            &text,
            &format!(
                "weir_proxy_protocol_headers_total{{virtual_server=\"l4\",result=\"{result}\"}}"
            ),
        )
    };
    assert_eq!(
        (
            count("missing"),
            count("malformed"),
            count("timeout"),
            count("closed")
        ),
        (1, 2, 1, 1)
    );
    assert!(
        node.received.lock().unwrap().is_empty(),
        "a refused client reached the node"
    );
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_http_the_carried_client_is_the_forwarded_one() {
    let origin = TestOrigin::start("o").await;
    let trusted = TestProxy::start(&config(
        &[origin.addr],
        "",
        "[virtual_servers.web.proxy_protocol]\ntrusted = [\"127.0.0.1/32\"]",
    ))
    .await;
    let mut request = header(2, "203.0.113.9:4000", "198.51.100.1:80");
    request.extend_from_slice(b"GET /echo HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    let raw = client::raw_exchange(trusted.addr, &request).await.unwrap();
    let text = String::from_utf8_lossy(&raw);
    assert_eq!(client::first_status(&raw), 200, "{text}");
    assert!(
        text.contains("203.0.113.9"),
        "X-Forwarded-For lacks the carried client: {text}"
    );
    // Untrusted: the header is data, and not HTTP.
    let untrusted = TestProxy::start(&config(
        &[origin.addr],
        "",
        "[virtual_servers.web.proxy_protocol]\ntrusted = [\"192.0.2.0/24\"]",
    ))
    .await;
    let raw = client::raw_exchange(untrusted.addr, &request)
        .await
        .unwrap();
    assert_eq!(client::first_status(&raw), 400);
    trusted.stop().await;
    untrusted.stop().await;
    origin.stop().await;
}
