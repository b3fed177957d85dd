//! What the tests share: an HTTP/2 WebSocket node on the `h2` crate, weir in
//! front of it (pool `protocol = "h2c"`), and the two kinds of client.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use h2::{RecvStream, SendStream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use weir_testkit::TestProxy;

pub use crate::client::{WAIT, accept_key, extended_connect, h2_client, open_h2};

/// How the node behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Node {
    /// Announces `SETTINGS_ENABLE_CONNECT_PROTOCOL`, answers 200 and echoes.
    Echo,
    /// Does not announce it (an HTTP/2 node without RFC 8441).
    NoExtendedConnect,
    /// Echoes the first piece, then resets the stream on the next one.
    ResetAfterFirst,
    /// Echoes the first piece, then closes the whole connection with GOAWAY
    /// on the next one (as a node that shuts down at once).
    GoAwayAfterFirst,
}

/// What the node saw of an extended CONNECT.
#[derive(Debug)]
pub struct Seen {
    pub method: http::Method,
    pub protocol: Option<String>,
    pub path: String,
    pub headers: http::HeaderMap,
}

/// A running node.
pub struct TestNode {
    pub addr: SocketAddr,
    /// Each request, as the node saw it.
    pub seen: mpsc::UnboundedReceiver<Seen>,
    /// Tunnel bytes the node received (an echo that never reached it would not count).
    received: Arc<AtomicUsize>,
}

impl TestNode {
    /// Tunnel bytes the node received so far.
    pub fn received(&self) -> usize {
        self.received.load(Ordering::Relaxed)
    }
}

/// An h2c WebSocket node: reports each request, answers an extended CONNECT
/// for `websocket` with `200` (choosing the first offered subprotocol),
/// echoes every DATA frame, and ends its side when the client's ends.
pub async fn node(kind: Node) -> TestNode {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    let (seen, requests) = mpsc::unbounded_channel();
    let received = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&received);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let seen = seen.clone();
            let counted = Arc::clone(&counted);
            tokio::spawn(async move {
                let mut builder = h2::server::Builder::new();
                if kind != Node::NoExtendedConnect {
                    builder.enable_connect_protocol();
                }
                let Ok(mut connection) = builder.handshake::<_, Bytes>(tcp).await else {
                    return;
                };
                // A stream asks for the connection to go away (`GoAwayAfterFirst`).
                let (go_away, mut gone) = mpsc::unbounded_channel();
                loop {
                    let accepted = tokio::select! {
                        accepted = connection.accept() => accepted,
                        Some(()) = gone.recv() => {
                            connection.abrupt_shutdown(h2::Reason::NO_ERROR);
                            continue;
                        }
                    };
                    let Some(Ok((request, respond))) = accepted else {
                        break;
                    };
                    let tunnel = Tunnel {
                        kind,
                        seen: seen.clone(),
                        received: Arc::clone(&counted),
                        go_away: go_away.clone(),
                    };
                    tokio::spawn(echo(request, respond, tunnel));
                }
            });
        }
    });
    TestNode {
        addr,
        seen: requests,
        received,
    }
}

/// What a stream of the node shares with the test and its connection.
struct Tunnel {
    kind: Node,
    seen: mpsc::UnboundedSender<Seen>,
    received: Arc<AtomicUsize>,
    go_away: mpsc::UnboundedSender<()>,
}

async fn echo(
    request: http::Request<RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    tunnel: Tunnel,
) {
    let Tunnel {
        kind,
        seen,
        received,
        go_away,
    } = tunnel;
    let (parts, mut body) = request.into_parts();
    let protocol = parts
        .extensions
        .get::<h2::ext::Protocol>()
        .map(|protocol| protocol.as_str().to_owned());
    let websocket =
        parts.method == http::Method::CONNECT && protocol.as_deref() == Some("websocket");
    let chosen = parts
        .headers
        .get("sec-websocket-protocol")
        .and_then(|offered| offered.to_str().ok())
        .and_then(|offered| offered.split(',').next())
        .map(|first| first.trim().to_owned());
    let _ = seen.send(Seen {
        method: parts.method,
        protocol,
        path: parts.uri.path().to_owned(),
        headers: parts.headers,
    });
    let mut response = http::Response::builder().status(if websocket { 200 } else { 400 });
    if let Some(chosen) = chosen {
        response = response.header("sec-websocket-protocol", chosen);
    }
    let response = response.header("x-node", "h2").body(()).expect("response");
    let Ok(mut send) = respond.send_response(response, !websocket) else {
        return;
    };
    if !websocket {
        return;
    }
    let mut pieces = 0;
    while let Some(Ok(data)) = body.data().await {
        received.fetch_add(data.len(), Ordering::Relaxed);
        if kind == Node::ResetAfterFirst && pieces == 1 {
            send.send_reset(h2::Reason::INTERNAL_ERROR);
            return;
        }
        if kind == Node::GoAwayAfterFirst && pieces == 1 {
            let _ = go_away.send(());
            // The stream is kept (no reset of its own) until the connection is gone.
            while let Some(Ok(_)) = body.data().await {}
            drop(send);
            return;
        }
        let length = data.len();
        if send_all(&mut send, data, false).await.is_err() {
            return;
        }
        let _ = body.flow_control().release_capacity(length);
        pieces += 1;
    }
    let _ = send.send_data(Bytes::new(), true);
}

/// Sends `data` within the peer's window.
pub async fn send_all(
    send: &mut SendStream<Bytes>,
    mut data: Bytes,
    end_of_stream: bool,
) -> Result<(), h2::Error> {
    if data.is_empty() && end_of_stream {
        send.send_data(data, true)?;
        return Ok(());
    }
    while !data.is_empty() {
        send.reserve_capacity(data.len().min(64 * 1024));
        let granted = std::future::poll_fn(|cx| send.poll_capacity(cx)).await;
        let granted = match granted {
            Some(granted) => granted?,
            None => return Ok(()),
        };
        let piece = data.split_to(granted.min(data.len()));
        send.send_data(piece, end_of_stream && data.is_empty())?;
    }
    Ok(())
}

/// weir with one h2c pool of `node`, cleartext HTTP/2 from clients, and
/// `vs_extra` for the virtual server.
pub async fn proxy(node: SocketAddr, vs_extra: &str) -> TestProxy {
    let vs = format!("[virtual_servers.web.http2]\ncleartext = true\n{vs_extra}");
    TestProxy::start(&weir_testkit::config(&[node], "protocol = \"h2c\"", &vs)).await
}

/// Reads DATA until `length` bytes came (or the stream ended).
pub async fn read_h2(download: &mut RecvStream, length: usize) -> Vec<u8> {
    let mut received = Vec::new();
    while received.len() < length {
        let data = tokio::time::timeout(WAIT, download.data())
            .await
            .expect("data in time");
        let Some(data) = data else { break };
        let data = data.expect("no error");
        let _ = download.flow_control().release_capacity(data.len());
        received.extend_from_slice(&data);
    }
    received
}

/// An HTTP/1.1 WebSocket upgrade with `key`: the connection and the response
/// head weir sent (through its blank line).
pub async fn upgrade_http1(proxy: &TestProxy, path: &str, key: &str) -> (TcpStream, String) {
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: ws.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\
         Sec-WebSocket-Protocol: chat, superchat\r\nOrigin: http://ws.test\r\n\r\n"
    );
    send_http1(proxy, &request).await
}

/// Sends raw HTTP/1.1 `request` bytes: the connection and the response head
/// weir sent (through its blank line).
pub async fn send_http1(proxy: &TestProxy, request: &str) -> (TcpStream, String) {
    let mut tcp = TcpStream::connect(proxy.addr).await.expect("connect");
    tcp.write_all(request.as_bytes()).await.expect("sent");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let read = tokio::time::timeout(WAIT, tcp.read(&mut byte))
            .await
            .expect("the head in time")
            .expect("read");
        assert_eq!(
            read,
            1,
            "head cut short: {}",
            String::from_utf8_lossy(&head)
        );
        head.push(byte[0]);
    }
    (tcp, String::from_utf8_lossy(&head).into_owned())
}

/// Reads exactly `length` bytes from the connection.
pub async fn read_exact(tcp: &mut TcpStream, length: usize) -> Vec<u8> {
    let mut buf = vec![0u8; length];
    tokio::time::timeout(WAIT, tcp.read_exact(&mut buf))
        .await
        .expect("the echo in time")
        .expect("read");
    buf
}

/// The value of field `name` in an HTTP/1.1 head.
pub fn field<'h>(head: &'h str, name: &str) -> Option<&'h str> {
    head.lines().find_map(|line| {
        let (field, value) = line.split_once(':')?;
        field.eq_ignore_ascii_case(name).then(|| value.trim())
    })
}

/// A client's WebSocket text frame (RFC 6455 §5.2: FIN, opcode 1, masked),
/// for payloads under 126 bytes. The node echoes frames as bytes.
pub fn text_frame(text: &str) -> Vec<u8> {
    let payload = text.as_bytes();
    assert!(payload.len() < 126, "a short frame");
    let mask = [0x12, 0x34, 0x56, 0x78];
    let mut frame = vec![0x81, 0x80 | payload.len() as u8];
    frame.extend_from_slice(&mask);
    frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    frame
}
