//! WebSocket over HTTP/2 (RFC 8441) through weir to an HTTP/1.1 node: a raw
//! `h2` client sends an extended CONNECT (`:protocol websocket`), weir makes
//! it the HTTP/1.1 upgrade the node expects (its own `Sec-WebSocket-Key`,
//! the node's `Sec-WebSocket-Accept` checked), answers `200` on the stream,
//! then DATA frames and the node's bytes flow both ways until each side
//! closes. A node that does not switch properly gets the client a 502, and
//! a virtual server that does not allow WebSocket answers 405.

use std::net::SocketAddr;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use weir_testkit::TestProxy;

#[path = "websocket/client.rs"]
mod client;

use client::{WAIT, accept_key, extended_connect, h2_client, open_h2};

/// How the node answers an upgrade.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// `101` with the right `Sec-WebSocket-Accept`, then an echo.
    Switch,
    /// `101` with an accept for another key.
    WrongAccept,
}

/// A WebSocket node over HTTP/1.1: hands each request head it reads to
/// `heads`, answers as `answer` says, and after a switch echoes every byte
/// until the client's side ends, then ends its own and reports `echoed N`.
async fn websocket_node(answer: Answer) -> (SocketAddr, mpsc::UnboundedReceiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    let (heads, received) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(switch_and_echo(stream, answer, heads.clone()));
        }
    });
    (addr, received)
}

async fn switch_and_echo(
    mut stream: TcpStream,
    answer: Answer,
    heads: mpsc::UnboundedSender<String>,
) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte).await {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let key = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("sec-websocket-key")
                .then(|| value.trim().to_owned())
        })
        .unwrap_or_default();
    let _ = heads.send(head);
    let key = match answer {
        Answer::Switch => key,
        Answer::WrongAccept => "c29tZSBvdGhlciBrZXkhIQ==".to_owned(),
    };
    let switch = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Accept: {}\r\n\r\n",
        accept_key(&key)
    );
    if stream.write_all(switch.as_bytes()).await.is_err() {
        return;
    }
    let (mut reader, mut writer) = stream.split();
    let echoed = tokio::io::copy(&mut reader, &mut writer).await;
    let _ = writer.shutdown().await;
    // What the node itself echoed: an echo that never reached it would not count.
    let _ = heads.send(format!("echoed {}", echoed.unwrap_or(0)));
}

async fn proxy(node: SocketAddr, vs_extra: &str) -> TestProxy {
    let vs = format!("[virtual_servers.web.http2]\ncleartext = true\n{vs_extra}");
    TestProxy::start(&weir_testkit::config(&[node], "", &vs)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_over_http2_reaches_an_http1_node_both_ways() {
    let (node, mut heads) = websocket_node(Answer::Switch).await;
    let proxy = proxy(node, "").await;
    let mut sender = h2_client(&proxy).await;
    let (response, mut upload) =
        open_h2(&mut sender, extended_connect(&proxy, "/chat?room=1")).await;
    assert_eq!(response.status(), 200, "{response:?}");
    // What the node was sent: an HTTP/1.1 upgrade with weir's key; Via names HTTP/2.
    let head = heads.recv().await.expect("the node's request");
    assert!(head.starts_with("GET /chat?room=1 HTTP/1.1\r\n"), "{head}");
    let lower = head.to_ascii_lowercase();
    for expected in [
        "\r\nupgrade: websocket\r\n",
        "\r\nconnection: upgrade\r\n",
        "\r\nsec-websocket-version: 13\r\n",
        "\r\nsec-websocket-protocol: chat\r\n",
        "\r\nsec-websocket-key: ",
        "\r\nvia: 2 weir\r\n",
    ] {
        assert!(lower.contains(expected), "{expected:?} in {head}");
    }
    // Bytes both ways, each answered before the next is sent.
    let mut download = response.into_body();
    for message in ["hello", "over", "http/2"] {
        upload.send_data(Bytes::from(message), false).expect("sent");
        let mut echoed = Vec::new();
        while echoed.len() < message.len() {
            let data = tokio::time::timeout(WAIT, download.data())
                .await
                .expect("the echo in time")
                .expect("data")
                .expect("no error");
            let _ = download.flow_control().release_capacity(data.len());
            echoed.extend_from_slice(&data);
        }
        assert_eq!(echoed, message.as_bytes());
    }
    // More than a window's worth in one direction: flow control both ways.
    let big = Bytes::from(vec![b'x'; 300 * 1024]);
    let length = big.len();
    let sending = tokio::spawn(async move {
        let mut rest = big;
        while !rest.is_empty() {
            upload.reserve_capacity(rest.len().min(64 * 1024));
            let granted = std::future::poll_fn(|cx| upload.poll_capacity(cx))
                .await
                .expect("capacity")
                .expect("no error");
            let piece = rest.split_to(granted.min(rest.len()));
            upload.send_data(piece, false).expect("sent");
        }
        // The client closes its side: the node sees a FIN and closes its own.
        upload.send_data(Bytes::new(), true).expect("ended");
    });
    let mut received = 0;
    while let Some(data) = tokio::time::timeout(WAIT, download.data())
        .await
        .expect("the echo in time")
    {
        let data = data.expect("no error");
        let _ = download.flow_control().release_capacity(data.len());
        received += data.len();
    }
    assert_eq!(received, length, "all echoed, then END_STREAM");
    sending.await.expect("sent all");
    let echoed = tokio::time::timeout(WAIT, heads.recv())
        .await
        .expect("the node's count in time");
    let messages = "hello".len() + "over".len() + "http/2".len();
    assert_eq!(echoed, Some(format!("echoed {}", messages + length)));
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_does_not_accept_the_key_gets_a_502() {
    let (node, _heads) = websocket_node(Answer::WrongAccept).await;
    let proxy = proxy(node, "").await;
    let mut sender = h2_client(&proxy).await;
    let (response, _upload) = open_h2(&mut sender, extended_connect(&proxy, "/chat")).await;
    assert_eq!(response.status(), 502);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_over_http2_is_refused_where_upgrades_are_not_allowed() {
    let (node, _heads) = websocket_node(Answer::Switch).await;
    let proxy = proxy(node, "[virtual_servers.web.http]\nupgrades = []").await;
    let mut sender = h2_client(&proxy).await;
    let (response, _upload) = open_h2(&mut sender, extended_connect(&proxy, "/chat")).await;
    assert_eq!(response.status(), 405);
    // A plain CONNECT is still not carried over HTTP/2.
    let connect = http::Request::builder()
        .method(http::Method::CONNECT)
        .uri("127.0.0.1:1")
        .body(())
        .expect("request");
    let (response, _upload) = open_h2(&mut sender, connect).await;
    assert_eq!(response.status(), 501);
    proxy.stop().await;
}
