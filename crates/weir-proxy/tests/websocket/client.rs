//! The WebSocket clients' side that `http2_websocket.rs` (HTTP/2 clients to HTTP/1.1 nodes)
//! and `websocket_h2_nodes/` (either client to HTTP/2 nodes) share: an h2c connection that
//! may send extended CONNECT, the extended CONNECT itself, opening it, and the
//! `Sec-WebSocket-Accept` a key must get.

use std::time::Duration;

use bytes::Bytes;
use h2::{RecvStream, SendStream};
use tokio::net::TcpStream;
use weir_testkit::TestProxy;

/// How long any step may take before the test fails.
pub const WAIT: Duration = Duration::from_secs(10);

/// An h2c connection to weir, once weir's SETTINGS (with
/// `SETTINGS_ENABLE_CONNECT_PROTOCOL`) have been read.
pub async fn h2_client(proxy: &TestProxy) -> h2::client::SendRequest<Bytes> {
    let tcp = TcpStream::connect(proxy.addr).await.expect("connect");
    let (sender, connection) = h2::client::handshake(tcp).await.expect("handshake");
    tokio::spawn(connection);
    let mut sender = sender.ready().await.expect("ready");
    let announced = async {
        while !sender.is_extended_connect_protocol_enabled() {
            tokio::time::sleep(Duration::from_millis(5)).await;
            sender = sender.clone().ready().await.expect("ready");
        }
        sender
    };
    tokio::time::timeout(WAIT, announced)
        .await
        .expect("weir announces SETTINGS_ENABLE_CONNECT_PROTOCOL")
}

/// An HTTP/2 client's extended CONNECT for WebSocket to `path`.
pub fn extended_connect(proxy: &TestProxy, path: &str) -> http::Request<()> {
    http::Request::builder()
        .method(http::Method::CONNECT)
        .uri(format!("http://127.0.0.1:{}{path}", proxy.addr.port()))
        .extension(h2::ext::Protocol::from_static("websocket"))
        .header("sec-websocket-version", "13")
        .header("sec-websocket-protocol", "chat")
        .body(())
        .expect("request")
}

/// Sends a request that keeps its stream open and waits for the answer: the status, and
/// the two halves of the stream when it opened.
pub async fn open_h2(
    sender: &mut h2::client::SendRequest<Bytes>,
    request: http::Request<()>,
) -> (http::Response<RecvStream>, SendStream<Bytes>) {
    let (response, upload) = sender.send_request(request, false).expect("sent");
    let response = tokio::time::timeout(WAIT, response)
        .await
        .expect("the answer in time")
        .expect("an answer");
    (response, upload)
}

/// `Sec-WebSocket-Accept` for `key` (RFC 6455 §4.2.2), written here
/// independently of weir's own.
pub fn accept_key(key: &str) -> String {
    let mut context = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA1_FOR_LEGACY_USE_ONLY);
    context.update(key.as_bytes());
    context.update(b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11");
    let digest = context.finish();
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in digest.as_ref().chunks(3) {
        let mut group = [0u8; 3];
        group[..chunk.len()].copy_from_slice(chunk);
        let n = u32::from(group[0]) << 16 | u32::from(group[1]) << 8 | u32::from(group[2]);
        for i in 0..4 {
            match i <= chunk.len() {
                true => out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize])),
                false => out.push('='),
            }
        }
    }
    out
}
