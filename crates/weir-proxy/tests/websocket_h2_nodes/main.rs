//! WebSocket to HTTP/2 nodes (RFC 8441) through weir: a pool with
//! `protocol = "h2c"` whose node (the `h2` crate's server) announces
//! `SETTINGS_ENABLE_CONNECT_PROTOCOL` gets an extended CONNECT stream, from
//! an HTTP/1.1 client's `Upgrade: websocket` (weir answers the client's key
//! with its own `101`) or an HTTP/2 client's extended CONNECT; frames then
//! flow both ways until each side ends. A node that does not announce the
//! setting gets the client a 501; a node's reset, or its connection going
//! away, ends the client's tunnel;
//! a plain CONNECT is not carried to an HTTP/2 node (501); one cut at the drain timeout is
//! logged with its 200 and its bytes.

#[path = "../websocket/client.rs"]
mod client;
mod support;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use support::{Node, WAIT};

const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http1_websocket_reaches_an_h2_node_both_ways() {
    let mut node = support::node(Node::Echo).await;
    let proxy = support::proxy(node.addr, "").await;
    let (mut tcp, head) = support::upgrade_http1(&proxy, "/chat?room=1", KEY).await;
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    assert_eq!(
        support::field(&head, "sec-websocket-accept"),
        Some(support::accept_key(KEY).as_str()),
        "{head}"
    );
    assert_eq!(
        support::field(&head, "sec-websocket-protocol"),
        Some("chat")
    );
    assert_eq!(support::field(&head, "upgrade"), Some("websocket"));
    assert_eq!(support::field(&head, "via"), Some("2 weir"), "{head}");
    // What the node saw: an extended CONNECT, without the client's key.
    let request = node.seen.recv().await.expect("the node's request");
    assert_eq!(request.method, http::Method::CONNECT);
    assert_eq!(request.protocol.as_deref(), Some("websocket"));
    assert_eq!(request.path, "/chat");
    assert!(!request.headers.contains_key("sec-websocket-key"));
    assert!(!request.headers.contains_key("upgrade"));
    assert_eq!(request.headers["sec-websocket-version"], "13");
    assert_eq!(request.headers["sec-websocket-protocol"], "chat, superchat");
    assert_eq!(request.headers["origin"], "http://ws.test");
    assert_eq!(request.headers["x-forwarded-for"], "127.0.0.1");
    // Frames both ways, each echoed before the next is sent.
    let mut sent = 0;
    for message in ["hello", "over", "http/2"] {
        let frame = support::text_frame(message);
        tcp.write_all(&frame).await.expect("sent");
        assert_eq!(support::read_exact(&mut tcp, frame.len()).await, frame);
        sent += frame.len();
    }
    assert_eq!(node.received(), sent, "the echo came from the node");
    // More than any window in one direction, while the other reads.
    let big = vec![b'x'; 300 * 1024];
    let (mut reader, mut writer) = tcp.into_split();
    let sending = tokio::spawn(async move {
        writer.write_all(&big).await.expect("sent");
        // The client's FIN ends its side: the node's END_STREAM comes back.
        writer.shutdown().await.expect("shut down");
    });
    let mut echoed = Vec::new();
    tokio::time::timeout(WAIT, reader.read_to_end(&mut echoed))
        .await
        .expect("the echo and the end in time")
        .expect("read");
    assert_eq!(echoed.len(), 300 * 1024, "all echoed, then the end");
    sending.await.expect("sent all");
    assert_eq!(node.received(), sent + 300 * 1024);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_websocket_reaches_an_h2_node_both_ways() {
    let mut node = support::node(Node::Echo).await;
    let proxy = support::proxy(node.addr, "").await;
    let mut sender = support::h2_client(&proxy).await;
    let request = support::extended_connect(&proxy, "/live");
    let (response, mut upload) = support::open_h2(&mut sender, request).await;
    assert_eq!(response.status(), 200, "{response:?}");
    assert_eq!(response.headers()["sec-websocket-protocol"], "chat");
    let request = node.seen.recv().await.expect("the node's request");
    assert_eq!(request.method, http::Method::CONNECT);
    assert_eq!(request.protocol.as_deref(), Some("websocket"));
    assert_eq!(request.path, "/live");
    assert!(!request.headers.contains_key("sec-websocket-key"));
    assert_eq!(request.headers["sec-websocket-protocol"], "chat");
    assert_eq!(request.headers["via"], "2 weir");
    let mut download = response.into_body();
    let mut sent = 0;
    for message in ["hello", "stream", "to stream"] {
        let frame = support::text_frame(message);
        upload
            .send_data(Bytes::from(frame.clone()), false)
            .expect("sent");
        assert_eq!(support::read_h2(&mut download, frame.len()).await, frame);
        sent += frame.len();
    }
    assert_eq!(node.received(), sent, "the echo came from the node");
    let big = Bytes::from(vec![b'y'; 300 * 1024]);
    let sending = tokio::spawn(async move {
        support::send_all(&mut upload, big, true)
            .await
            .expect("sent, then ended");
    });
    let echoed = support::read_h2(&mut download, usize::MAX).await;
    assert_eq!(echoed.len(), 300 * 1024, "all echoed, then END_STREAM");
    assert!(download.is_end_stream());
    sending.await.expect("sent all");
    assert_eq!(node.received(), sent + 300 * 1024);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_extended_connect_gets_a_501() {
    let node = support::node(Node::NoExtendedConnect).await;
    let proxy = support::proxy(node.addr, "").await;
    let (_tcp, head) = support::upgrade_http1(&proxy, "/chat", KEY).await;
    assert!(head.starts_with("HTTP/1.1 501 "), "{head}");
    let mut sender = support::h2_client(&proxy).await;
    let request = support::extended_connect(&proxy, "/chat");
    let (response, _upload) = support::open_h2(&mut sender, request).await;
    assert_eq!(response.status(), 501);
    // The node itself is fine: ordinary requests still reach it.
    let get = http::Request::get(format!("http://127.0.0.1:{}/", proxy.addr.port()))
        .body(())
        .expect("request");
    let (response, _) = sender.send_request(get, true).expect("sent");
    let response = tokio::time::timeout(WAIT, response)
        .await
        .expect("in time")
        .expect("an answer");
    assert_eq!(response.headers()["x-node"], "h2", "{response:?}");
    // Counted once, and only what was sent.
    let forwarded = &proxy.pools[0].nodes[0].metrics.requests_forwarded;
    assert_eq!(forwarded.get(), 1, "the GET alone reached the node");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_weir_could_not_answer_is_refused_before_the_node() {
    let node = support::node(Node::Echo).await;
    let proxy = support::proxy(node.addr, "").await;
    // No key: weir could not compute the 101's accept.
    let no_key = "GET /chat HTTP/1.1\r\nHost: ws.test\r\nConnection: Upgrade\r\n\
                  Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\r\n";
    let (_tcp, head) = support::send_http1(&proxy, no_key).await;
    assert!(head.starts_with("HTTP/1.1 400 "), "{head}");
    // A body: the handshake has none, and the stream carries only the tunnel.
    let with_body = format!(
        "GET /chat HTTP/1.1\r\nHost: ws.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\nContent-Length: 5\r\n\r\nhello"
    );
    let (_tcp, head) = support::send_http1(&proxy, &with_body).await;
    assert!(head.starts_with("HTTP/1.1 400 "), "{head}");
    let forwarded = &proxy.pools[0].nodes[0].metrics.requests_forwarded;
    assert_eq!(forwarded.get(), 0, "nothing reached the node");
    // `Content-Length: 0` is no body (RFC 9110 §8.6): the upgrade goes through, as it
    // does to an HTTP/1.1 node.
    let empty = format!(
        "GET /chat HTTP/1.1\r\nHost: ws.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\nContent-Length: 0\r\n\r\n"
    );
    let (_tcp, head) = support::send_http1(&proxy, &empty).await;
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_reset_ends_the_clients_tunnel() {
    let node = support::node(Node::ResetAfterFirst).await;
    let proxy = support::proxy(node.addr, "").await;
    // HTTP/1.1: the connection closes.
    let (mut tcp, head) = support::upgrade_http1(&proxy, "/chat", KEY).await;
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    let frame = support::text_frame("first");
    tcp.write_all(&frame).await.expect("sent");
    assert_eq!(support::read_exact(&mut tcp, frame.len()).await, frame);
    tcp.write_all(&support::text_frame("second"))
        .await
        .expect("sent");
    let mut rest = Vec::new();
    let ended = tokio::time::timeout(WAIT, tcp.read_to_end(&mut rest))
        .await
        .expect("the tunnel ends in time");
    assert!(
        rest.is_empty(),
        "nothing after the reset: {rest:?} {ended:?}"
    );
    // HTTP/2: the stream is reset.
    h2_tunnel_echoes_once_then_is_reset(&proxy).await;
    proxy.stop().await;
}

/// Opens an HTTP/2 client's WebSocket to a node that echoes one piece and then ends the
/// tunnel on the next (a reset stream or a GOAWAY): the first piece comes back, then the
/// client's stream is reset with CONNECT_ERROR.
async fn h2_tunnel_echoes_once_then_is_reset(proxy: &weir_testkit::TestProxy) {
    let mut sender = support::h2_client(proxy).await;
    let request = support::extended_connect(proxy, "/chat");
    let (response, mut upload) = support::open_h2(&mut sender, request).await;
    assert_eq!(response.status(), 200, "a tunnel (on a new connection)");
    let mut download = response.into_body();
    let frame = support::text_frame("first");
    upload
        .send_data(Bytes::from(frame.clone()), false)
        .expect("sent");
    assert_eq!(support::read_h2(&mut download, frame.len()).await, frame);
    let _ = upload.send_data(Bytes::from(support::text_frame("second")), false);
    let next = tokio::time::timeout(WAIT, download.data())
        .await
        .expect("the reset in time");
    let error = next.expect("an end").expect_err("a reset, not data");
    assert_eq!(error.reason(), Some(h2::Reason::CONNECT_ERROR), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_going_away_ends_the_clients_tunnel_and_a_new_one_opens() {
    let node = support::node(Node::GoAwayAfterFirst).await;
    let proxy = support::proxy(node.addr, "").await;
    // The second tunnel opens on a new connection after the first one's GOAWAY.
    for _ in 0..2 {
        h2_tunnel_echoes_once_then_is_reset(&proxy).await;
    }
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_tunnel_to_an_h2_node_is_closed() {
    let node = support::node(Node::Echo).await;
    let vs = "[virtual_servers.web.timeouts]\ntunnel_idle = \"300ms\"\n";
    let proxy = support::proxy(node.addr, vs).await;
    let mut sender = support::h2_client(&proxy).await;
    let request = support::extended_connect(&proxy, "/quiet");
    let (response, _upload) = support::open_h2(&mut sender, request).await;
    assert_eq!(response.status(), 200);
    let mut download = response.into_body();
    let next = tokio::time::timeout(WAIT, download.data())
        .await
        .expect("closed in time");
    let error = next.expect("an end").expect_err("a reset");
    assert_eq!(error.reason(), Some(h2::Reason::CANCEL), "{error}");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_connect_is_not_carried_to_an_h2_node() {
    let node = support::node(Node::Echo).await;
    let proxy = support::proxy(node.addr, "[virtual_servers.web.http]\nconnect = true\n").await;
    // HTTP/1.1 CONNECT, allowed by the virtual server: the node cannot take it.
    let mut tcp = tokio::net::TcpStream::connect(proxy.addr)
        .await
        .expect("connect");
    tcp.write_all(b"CONNECT ws.test:443 HTTP/1.1\r\nHost: ws.test:443\r\n\r\n")
        .await
        .expect("sent");
    let mut answer = vec![0u8; 64];
    let read = tokio::time::timeout(WAIT, tcp.read(&mut answer))
        .await
        .expect("in time")
        .expect("read");
    let answer = String::from_utf8_lossy(&answer[..read]);
    assert!(answer.starts_with("HTTP/1.1 501 "), "{answer}");
    // HTTP/2 CONNECT: weir is no forward proxy.
    let mut sender = support::h2_client(&proxy).await;
    let connect = http::Request::builder()
        .method(http::Method::CONNECT)
        .uri("ws.test:443")
        .body(())
        .expect("request");
    let (response, _upload) = support::open_h2(&mut sender, connect).await;
    assert_eq!(response.status(), 501);
    proxy.stop().await;
}

/// An HTTP/2 client's WebSocket to an h2c node, cut at the drain timeout, is logged with
/// the 200 it was given and what its tunnel carried (it was logged as a 503 with none).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_websocket_cut_at_the_drain_timeout_keeps_its_status_and_bytes() {
    let node = support::node(Node::Echo).await;
    let log = std::env::temp_dir().join(format!("weir-ws-h2-drain-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let toml = format!(
        "[runtime]\ndrain_timeout = \"300ms\"\n\
         [log]\naccess_log = true\naccess_log_format = \"json\"\naccess_log_file = \"{}\"\n\
         level = \"warn\"\n\
         [pools.web]\nprotocol = \"h2c\"\nnodes = [{{ address = \"{}\" }}]\n\
         [virtual_servers.web]\nlisten = [\"127.0.0.1:0\"]\npool = \"web\"\n\
         [virtual_servers.web.http2]\ncleartext = true\n",
        log.display(),
        node.addr
    );
    let proxy = weir_testkit::TestProxy::start(&toml).await;
    let mut sender = support::h2_client(&proxy).await;
    let request = support::extended_connect(&proxy, "/live");
    let (response, mut upload) = support::open_h2(&mut sender, request).await;
    assert_eq!(response.status(), 200, "{response:?}");
    let mut download = response.into_body();
    let frame = support::text_frame("hello before the drain");
    upload
        .send_data(Bytes::from(frame.clone()), false)
        .expect("sent");
    assert_eq!(support::read_h2(&mut download, frame.len()).await, frame);
    proxy.trigger_shutdown();
    let live = std::sync::Arc::clone(&proxy.live);
    proxy.join().await;
    live.flush_access_log();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    let records: Vec<&str> = text.lines().collect();
    assert_eq!(records.len(), 1, "{text}");
    for field in [r#""status":200"#, r#""error":"shutting_down""#] {
        assert!(records[0].contains(field), "{field}: {text}");
    }
    let sent: usize = records[0]
        .split("\"bytes_sent\":")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .and_then(|number| number.parse().ok())
        .expect("bytes_sent");
    assert!(sent >= frame.len(), "{text}");
    drop((upload, download, sender));
}
