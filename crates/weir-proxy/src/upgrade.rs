//! Tunnels: after a `101 Switching Protocols` (WebSocket) or a 2xx to an
//! allowed CONNECT, bytes flow both ways untouched until both sides have
//! closed, or until neither has sent anything for `timeouts.tunnel_idle`.
//!
//! The upstream connection leaves its node's request slots for a tunnel place
//! (`max_tunnels`), so long-lived tunnels never starve ordinary requests, and
//! it is never reused afterwards.
//!
//! An HTTP/2 client's WebSocket (an extended CONNECT, RFC 8441, made an
//! HTTP/1.1 upgrade for the node) gets a `200` on its stream instead of the
//! `101`, and its DATA frames carry the tunnel (`http2/tunnel.rs`). To an
//! HTTP/2 node the WebSocket is an extended CONNECT stream (see
//! `exchange/h2_websocket.rs`): on its 2xx an HTTP/1.1 client gets a `101`
//! that answers its own key, an HTTP/2 client a `200`, and the node's
//! stream carries the tunnel; its stream slot and tunnel place are held
//! until the tunnel ends.
//!
//! The head that switches carries the traffic rules' response edits, the request
//! id and a persistence cookie like any response, except that they never remove,
//! replace or add the handshake's own fields (`Sec-WebSocket-*`): the client checks
//! those against its request, so an edit there would only break the switch.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;
use weir_core::{Error, ErrorKind, Side};
use weir_http::{BodyFraming, ForwardResponse, HeaderEdit, Parsed, RequestHead, ResponseHead};
use weir_tls::{ClientStream, ServerStream};
use weir_upstream::Tunnel;

use crate::VIA;
use crate::answer::Failure;
use crate::client::{Client, Downstream};
use crate::exchange::{Exchange, NodeLink};
use crate::http2::{self, TunnelEnd, websocket};
use crate::response::Sent;
use crate::route::VirtualServerRuntime;
use crate::traffic::Edits;

/// Bytes moved per read in each direction.
const TUNNEL_BUFFER: usize = 16 * 1024;

/// Relays a switched protocol (101) or an established CONNECT (2xx).
pub(crate) async fn tunnel(
    client: &mut Client,
    vs: &VirtualServerRuntime,
    exchange: Exchange,
    head: &RequestHead,
    edits: &Edits<'_>,
) -> Result<Sent, Failure> {
    let Exchange {
        lease,
        response,
        in_flight,
        tunnel,
        ..
    } = exchange;
    // A tunnel is not request load on the node, but it is load: counted as a tunnel for
    // as long as it lasts.
    let _tunnel_load = in_flight.into_tunnel();
    let Some(permit) = tunnel else {
        // The exchange takes a place for every request that may switch.
        return Err(Failure::from_error(
            Error::new(ErrorKind::BadResponse, Side::Upstream)
                .context("protocol switch without a tunnel place"),
        ));
    };
    match lease {
        NodeLink::Http1(lease) => {
            let tunnel = lease.into_tunnel(permit);
            // `tunnel` drops at the end: the connection is closed, its tunnel place freed.
            to_http1_node(client, vs, head, &response, tunnel, edits).await
        }
        NodeLink::Http2 {
            lease: stream_lease,
            body,
            upload: Some(upload),
            ..
        } => {
            let mut upload = upload;
            let node = TunnelEnd::Stream {
                recv: body.into_half(),
                send: &mut upload,
            };
            let sent = to_h2_node(client, vs, head, &response, node, edits).await;
            // The stream slot and the tunnel place are held until here.
            drop((stream_lease, permit));
            sent
        }
        NodeLink::Http2 { .. } => Err(Failure::from_error(
            Error::new(ErrorKind::BadResponse, Side::Upstream)
                .context("protocol switch on an HTTP/2 stream"),
        )),
    }
}

/// The tunnel to an HTTP/1.1 node that switched (`response`): the client
/// gets the node's head (an HTTP/2 client, a `200` on its stream), then the
/// two relay.
async fn to_http1_node(
    client: &mut Client,
    vs: &VirtualServerRuntime,
    head: &RequestHead,
    response: &ResponseHead,
    mut tunnel: Tunnel,
    edits: &Edits<'_>,
) -> Result<Sent, Failure> {
    let tally = client.tunnel_tally();
    let status = response.status();
    if let Downstream::Http2 { stream, .. } = &mut client.stream {
        // A WebSocket extended CONNECT (RFC 8441): the stream carries the tunnel.
        let early = client.upstream_in.split().freeze();
        let idle = vs.config.timeouts.tunnel_idle;
        let upstream = tunnel.stream();
        // The stream's answer to an extended CONNECT is a 200 (RFC 8441 §5).
        client.answering = 200;
        let counted = (idle, &*tally);
        let to_client = http2::relay_websocket(stream, response, early, upstream, counted).await?;
        return Ok(h2_tunnel_ended(to_client));
    }
    client.write_buf.clear();
    weir_http::write_response_head_edited(
        response,
        &ForwardResponse {
            framing: BodyFraming::None,
            version: head.version(),
            keep_alive: true,
            via: Some(VIA),
            via_version: None,
            upgrade: status == 101,
            set_headers: &vs.config.response_headers,
        },
        &Switching(edits),
        &mut client.write_buf,
    );
    client.answering = status;
    // Whatever the node sent after its head belongs to the tunnel.
    let early = client.upstream_in.split();
    client.write_buf.extend_from_slice(&early);
    let head_bytes = client.write_buf.len() as u64;
    client.flush(vs.config.timeouts.write).await?;
    let upstream = tunnel.stream();
    if !client.read_buf.is_empty() {
        let pending = client.read_buf.split();
        let written = async {
            upstream.write_all(&pending).await?;
            upstream.flush().await
        };
        tokio::time::timeout(vs.config.timeouts.tunnel_idle, written)
            .await
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))
            .and_then(|written| written)
            .map_err(|error| {
                Failure::silent(
                    Error::upstream(ErrorKind::Io, error).context("switching protocols"),
                )
            })?;
    }
    let Downstream::Http1(stream) = &mut client.stream else {
        // HTTP/2 clients were served above.
        return Err(Failure::silent(
            Error::new(ErrorKind::Io, Side::Internal).context("tunnel on an HTTP/2 stream"),
        ));
    };
    let to_client = relay(stream, upstream, vs.config.timeouts.tunnel_idle, &tally).await;
    Ok(Sent {
        status,
        bytes: head_bytes + to_client,
        keep_alive: false,
        cache: None,
        grpc_status: None,
    })
}

/// The tunnel to an HTTP/2 node whose extended CONNECT stream (`node`)
/// answered 2xx (`response`): an HTTP/2 client gets `200` on its stream, an
/// HTTP/1.1 client a `101` that answers its own `Sec-WebSocket-Key` (with
/// the rules' edits, as any switch), then the two relay.
async fn to_h2_node(
    client: &mut Client,
    vs: &VirtualServerRuntime,
    head: &RequestHead,
    response: &ResponseHead,
    node: TunnelEnd<'_, ClientStream>,
    edits: &Edits<'_>,
) -> Result<Sent, Failure> {
    let tally = client.tunnel_tally();
    let idle = vs.config.timeouts.tunnel_idle;
    if let Downstream::Http2 { stream, .. } = &mut client.stream {
        let opened = websocket::stream_opened(response).ok_or_else(|| {
            Failure::from_error(
                Error::new(ErrorKind::BadResponse, Side::Upstream)
                    .context("the node's WebSocket fields are not valid HTTP/2"),
            )
        })?;
        stream.send_head(http2::Head::Map(opened), false)?;
        // The stream's answer to an extended CONNECT is a 200 (RFC 8441 §5).
        client.answering = 200;
        let (recv, mut send) = http2::take_tunnel(stream)?;
        let client: TunnelEnd<'_, ServerStream> = TunnelEnd::Stream {
            recv,
            send: &mut send,
        };
        let to_client = http2::relay(client, node, idle, &tally).await;
        return Ok(h2_tunnel_ended(to_client));
    }
    // Checked before the request was sent (`exchange/h2_websocket.rs`).
    let key = head.header("sec-websocket-key").unwrap_or_default();
    let mut switch = BytesMut::new();
    websocket::switching_protocols(response, key.trim_ascii(), &mut switch);
    let switched = match weir_http::parse_response(&switch, &vs.head_limits, head.method()) {
        Ok(Parsed::Complete(switched, _)) => switched,
        Ok(Parsed::Partial) | Err(_) => {
            return Err(Failure::from_error(
                Error::new(ErrorKind::BadResponse, Side::Upstream)
                    .context("the node's WebSocket answer does not make a valid 101"),
            ));
        }
    };
    client.write_buf.clear();
    weir_http::write_response_head_edited(
        &switched,
        &ForwardResponse {
            framing: BodyFraming::None,
            version: head.version(),
            keep_alive: true,
            via: Some(VIA),
            via_version: Some("2"),
            upgrade: true,
            set_headers: &vs.config.response_headers,
        },
        &Switching(edits),
        &mut client.write_buf,
    );
    let head_bytes = client.write_buf.len() as u64;
    client.answering = 101;
    client.flush(vs.config.timeouts.write).await?;
    // What the client sent after its head belongs to the tunnel.
    let early = client.read_buf.split().freeze();
    let Downstream::Http1(stream) = &mut client.stream else {
        return Err(Failure::silent(
            Error::new(ErrorKind::Io, Side::Internal).context("tunnel on an HTTP/2 stream"),
        ));
    };
    let client = TunnelEnd::Bytes { io: stream, early };
    let to_client = http2::relay(client, node, idle, &tally).await;
    Ok(Sent {
        status: 101,
        bytes: head_bytes + to_client,
        keep_alive: false,
        cache: None,
        grpc_status: None,
    })
}

/// A node that answers an HTTP/2 WebSocket's upgrade with a 2xx but no
/// switch gets a 502: a 2xx would tell the client its tunnel is open (RFC
/// 8441 §5). Other statuses go to the client as they are.
pub(crate) fn h2_websocket_answered(
    client: &Client,
    tunnelled: bool,
    status: u16,
) -> Result<(), Failure> {
    if client.is_h2_websocket() && !tunnelled && (200..300).contains(&status) {
        return Err(Failure::from_error(
            Error::new(ErrorKind::BadResponse, Side::Upstream)
                .context("the node answered a WebSocket upgrade without switching"),
        ));
    }
    Ok(())
}

/// A response's edits on the head that switches protocols: everything but the
/// handshake's own fields.
struct Switching<'a>(&'a Edits<'a>);

/// Whether `name` is one of the WebSocket handshake's fields (RFC 6455 §11.3).
fn handshake_field(name: &[u8]) -> bool {
    const PREFIX: &[u8] = b"sec-websocket-";
    name.len() >= PREFIX.len() && name[..PREFIX.len()].eq_ignore_ascii_case(PREFIX)
}

impl HeaderEdit for Switching<'_> {
    fn drops(&self, name: &[u8]) -> bool {
        !handshake_field(name) && self.0.drops(name)
    }

    fn write_added(&self, out: &mut BytesMut) {
        self.0.write_fields(out, |name| !handshake_field(name));
    }
}

/// Copies both ways until both directions have ended (each end is passed on
/// as a shutdown of the other side's write half), an error, or `idle` with no
/// byte either way. Returns the bytes sent to the client.
async fn relay<C, N>(client: &mut C, node: &mut N, idle: Duration, to_client: &AtomicU64) -> u64
where
    C: AsyncRead + AsyncWrite + Unpin,
    N: AsyncRead + AsyncWrite + Unpin,
{
    let started = Instant::now();
    let last_activity = AtomicU64::new(0);
    let (mut client_read, mut client_write) = tokio::io::split(client);
    let (mut node_read, mut node_write) = tokio::io::split(node);
    let both = async {
        tokio::join!(
            copy(
                &mut client_read,
                &mut node_write,
                started,
                &last_activity,
                None
            ),
            copy(
                &mut node_read,
                &mut client_write,
                started,
                &last_activity,
                Some(to_client)
            ),
        )
    };
    let watchdog = || async {
        loop {
            let last = started + Duration::from_millis(last_activity.load(Ordering::Relaxed));
            let deadline = last + idle;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    };
    // Settled: bytes that came while the process was stopped past the idle timer go on.
    let activity = || last_activity.load(Ordering::Relaxed);
    if weir_core::timeout::until_idle_settled(both, watchdog, activity)
        .await
        .is_none()
    {
        tracing::debug!(?idle, "tunnel idle; closing");
    }
    to_client.load(Ordering::Relaxed)
}

/// One direction of a tunnel; records the time of each transfer and counts bytes.
async fn copy<R, W>(
    from: &mut R,
    to: &mut W,
    started: Instant,
    last_activity: &AtomicU64,
    counted: Option<&AtomicU64>,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; TUNNEL_BUFFER];
    loop {
        let read = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let since = started.elapsed().as_millis() as u64;
        last_activity.store(since, Ordering::Relaxed);
        if to.write_all(&buf[..read]).await.is_err() || to.flush().await.is_err() {
            return;
        }
        if let Some(counted) = counted {
            counted.fetch_add(read as u64, Ordering::Relaxed);
        }
        last_activity.store(started.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
    // Pass the end on (a FIN; on TLS a close_notify first).
    let _ = to.shutdown().await;
}

/// What an HTTP/2 client's tunnel (opened with a `200` on its stream) sent it, once over.
fn h2_tunnel_ended(to_client: u64) -> Sent {
    Sent {
        status: 200,
        bytes: to_client,
        keep_alive: false,
        cache: None,
        grpc_status: None,
    }
}
