//! The forward stage for a WebSocket to an HTTP/2 node (RFC 8441): the
//! upgrade, from either client version, goes as an extended CONNECT
//! (`:protocol websocket`) on a stream of the node's shared connections,
//! when the node announced `SETTINGS_ENABLE_CONNECT_PROTOCOL`; else 501.
//! The stream stays open both ways; `upgrade.rs` carries the tunnel once the
//! node answers 2xx. Design: `docs/design/http2.md` ("WebSocket").

use std::sync::Arc;

use tokio::time::Instant;
use weir_config::UpstreamHttp2Codec;
use weir_core::{Error, ErrorKind, Side};
use weir_http::BodyFraming;
use weir_upstream::http2::StreamRequest;
use weir_upstream::{H2Node, Pool};

use super::{Attempt, Exchange, NodeLink, forward_request};
use crate::answer::Failure;
use crate::client::Client;
use crate::http2::{self, websocket};
use crate::route::VirtualServerRuntime;

/// One try: a tunnel place on the node (`max_tunnels`, as for HTTP/1.1
/// nodes: the stream is held for the tunnel's life), the extended CONNECT,
/// the node's response head.
pub(super) async fn attempt(
    client: &mut Client,
    vs: &VirtualServerRuntime,
    pool: &Arc<Pool>,
    (index, node): (usize, &Arc<H2Node>),
    on: Attempt<'_>,
) -> Result<Exchange, Failure> {
    let Attempt {
        head,
        forwarding,
        upstream,
        ..
    } = on;
    if !websocket::asks_for_websocket(head) {
        return Err(Failure::not_implemented(
            "a protocol switch other than WebSocket to an HTTP/2 node",
        ));
    }
    // An HTTP/1.1 client's 101 answers its key; an HTTP/2 client has none to answer.
    let has_key = head
        .header("sec-websocket-key")
        .is_some_and(|key| !key.trim_ascii().is_empty());
    if !client.is_h2() && !has_key {
        return Err(bad_request("WebSocket upgrade without Sec-WebSocket-Key"));
    }
    // The handshake is a GET without content (RFC 6455 §4.1); the stream carries only the
    // tunnel. `Content-Length: 0` says there is none (RFC 9110 §8.6), as the HTTP/1.1 path
    // to a node takes it.
    if !matches!(head.framing(), BodyFraming::None | BodyFraming::Length(0)) {
        return Err(bad_request("WebSocket upgrade with a body"));
    }
    let tunnel = pool.connections[index].reserve_tunnel()?;
    let in_flight = pool.nodes[index].start_request();
    let forward = forward_request(client, vs, forwarding, BodyFraming::None);
    let scheme = if client.stream.is_tls() {
        "https"
    } else {
        "http"
    };
    let request = match node.codec() {
        UpstreamHttp2Codec::H2 => {
            let converted = weir_http::http2::request_to_h2_edited(
                head,
                &forward,
                upstream.path,
                &upstream.edits,
                scheme,
            );
            let request = converted.map_err(|error| {
                Failure::from_error(
                    Error::new(ErrorKind::BadRequest, Side::Downstream)
                        .context(format!("not representable in HTTP/2: {}", error.reason)),
                )
            })?;
            StreamRequest::H2(websocket::extended_connect(request))
        }
        UpstreamHttp2Codec::Weir => {
            let written =
                http2::upstream::written_request(head, &forward, upstream.path, &upstream.edits);
            StreamRequest::Own(websocket::extended_connect_written(written))
        }
    };
    let sent_at = Instant::now();
    // A new connection's settings take a round trip: as long as a connect may.
    let settle = pool.config.timeouts.connect;
    let Some(sent) = node
        .send_extended_connect(request, settle, upstream.flow())
        .await?
    else {
        return Err(not_announced(pool, node));
    };
    let (response, upload) = http2::upstream::halves(sent.stream);
    // (`requests_forwarded` is counted by the node's HTTP/2 side as the stream is sent.)
    let timeout = pool.config.timeouts.response;
    let reading = http2::upstream::Reading {
        method: head.method(),
        limits: &vs.head_limits,
        // A tunnel's opening is not sent twice.
        replay: false,
    };
    let response = http2::upstream::response_head(response, reading, timeout).await?;
    Ok(Exchange {
        lease: NodeLink::Http2 {
            body: response.body,
            upload: Some(upload),
            pump: None,
            ahead: Vec::new(),
            lease: sent.lease,
        },
        in_flight,
        node: index,
        response: response.head,
        sent_at,
        tunnel: Some(tunnel),
        body_cut: false,
    })
}

fn bad_request(context: &'static str) -> Failure {
    Failure::from_error(Error::new(ErrorKind::BadRequest, Side::Downstream).context(context))
}

/// 501, logged as a failure with the pool, node and fix: the node is not
/// at fault (no passive-health failure), it cannot take a WebSocket.
fn not_announced(pool: &Pool, node: &H2Node) -> Failure {
    Failure {
        status: Some(501),
        error: Error::new(ErrorKind::Io, Side::Internal).context(format!(
            "WebSocket to HTTP/2 node {} of pool {}: the node does not announce \
             SETTINGS_ENABLE_CONNECT_PROTOCOL (RFC 8441); enable it there or use protocol = \"http1\"",
            node.address(),
            pool.name
        )),
        detail: None,
    }
}
