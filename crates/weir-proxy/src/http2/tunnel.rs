//! WebSocket over HTTP/2 (RFC 8441) to an HTTP/1.1 node, after the switch:
//! the node's `101` checked against the key weir sent and answered `200` on
//! the stream, then bytes relayed both ways between the stream's DATA frames
//! and the node's connection, each direction within its flow control (the
//! client's window reopens only as the node takes the bytes; the node is
//! read only as the client's window allows). Design: `docs/design/http2.md`
//! ("WebSocket").

use std::future::poll_fn;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use h2::{Reason, RecvStream, SendStream};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;
use weir_core::{Error, ErrorKind, Side};
use weir_http::ResponseHead;

use super::stream::{H2Stream, send_with_capacity};
use super::websocket;
use crate::answer::Failure;

/// Bytes read from the node at once.
const TUNNEL_BUFFER: usize = 16 * 1024;

/// Answers the client's extended CONNECT with `200` when the node's `101`
/// (`node_head`) accepted the key weir sent, then relays until both sides
/// have ended, one fails, or nothing moves for `idle`. `early`: what the
/// node sent after its head. Returns the bytes sent to the client.
pub(crate) async fn relay_websocket<N>(
    stream: &mut H2Stream,
    node_head: &ResponseHead,
    early: Bytes,
    node: &mut N,
    idle: Duration,
) -> Result<u64, Failure>
where
    N: AsyncRead + AsyncWrite + Unpin,
{
    let accepted = stream
        .websocket_key()
        .and_then(|key| websocket::stream_accepted(node_head, key));
    let Some(accepted) = accepted else {
        return Err(Failure::from_error(
            Error::new(ErrorKind::BadResponse, Side::Upstream)
                .context("the node's 101 does not accept the WebSocket key weir sent"),
        ));
    };
    stream.send_head(accepted, false)?;
    let Some((body, mut send)) = stream.take_tunnel() else {
        return Err(Failure::silent(
            Error::new(ErrorKind::ClientClosed, Side::Downstream)
                .context("stream closed before the WebSocket tunnel"),
        ));
    };
    let clock = Clock::new();
    let ended = relay(body, &mut send, early, node, &clock, idle).await;
    match ended {
        Ok(()) => {}
        // The client learns that the tunnel broke, as from a TCP reset (RFC 9113 §8.5).
        Err(End::Broken) => send.send_reset(Reason::CONNECT_ERROR),
        Err(End::Idle) => {
            tracing::debug!(?idle, "WebSocket tunnel idle; closing");
            send.send_reset(Reason::CANCEL);
        }
    }
    Ok(clock.to_client.load(Ordering::Relaxed))
}

/// How a relay ended, other than both directions closing in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// A side failed or reset: the other is told with a reset or a close.
    Broken,
    /// Nothing moved either way for the idle timeout.
    Idle,
}

/// When bytes last moved, and how many went to the client.
struct Clock {
    started: Instant,
    /// Milliseconds from `started` to the last transfer.
    last_activity: AtomicU64,
    to_client: AtomicU64,
}

impl Clock {
    fn new() -> Clock {
        Clock {
            started: Instant::now(),
            last_activity: AtomicU64::new(0),
            to_client: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let since = self.started.elapsed().as_millis() as u64;
        self.last_activity.store(since, Ordering::Relaxed);
    }

    /// Resolves once nothing has moved for `idle`.
    async fn idle_for(&self, idle: Duration) {
        loop {
            let last = Duration::from_millis(self.last_activity.load(Ordering::Relaxed));
            let deadline = self.started + last + idle;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// Both directions at once; the first failure ends both.
async fn relay<N>(
    body: RecvStream,
    send: &mut SendStream<Bytes>,
    early: Bytes,
    node: &mut N,
    clock: &Clock,
    idle: Duration,
) -> Result<(), End>
where
    N: AsyncRead + AsyncWrite + Unpin,
{
    let (node_read, node_write) = tokio::io::split(node);
    let both = async {
        tokio::try_join!(
            upward(body, node_write, clock),
            downward(node_read, send, early, clock, idle),
        )
    };
    tokio::select! {
        both = both => both.map(drop),
        () = clock.idle_for(idle) => Err(End::Idle),
    }
}

/// Client → node: each DATA frame written to the node, and only then given
/// back to the client's window; the end of the stream becomes a FIN.
async fn upward<W>(mut body: RecvStream, mut node: W, clock: &Clock) -> Result<(), End>
where
    W: AsyncWrite + Unpin,
{
    while let Some(data) = body.data().await {
        let data = data.map_err(|_| End::Broken)?;
        clock.touch();
        node.write_all(&data).await.map_err(|_| End::Broken)?;
        let _ = body.flow_control().release_capacity(data.len());
        clock.touch();
    }
    node.shutdown().await.map_err(|_| End::Broken)
}

/// Node → client: what the node sends, as DATA within the client's window
/// (waiting for it, at most `idle`); the node's FIN becomes END_STREAM. A
/// client that resets the stream ends this at once.
async fn downward<R>(
    mut node: R,
    send: &mut SendStream<Bytes>,
    early: Bytes,
    clock: &Clock,
    idle: Duration,
) -> Result<(), End>
where
    R: AsyncRead + Unpin,
{
    let mut data = early;
    let mut buf = BytesMut::new();
    loop {
        if !data.is_empty() {
            let length = data.len() as u64;
            clock.touch();
            send_with_capacity(send, data, false, idle)
                .await
                .map_err(|_| End::Broken)?;
            clock.to_client.fetch_add(length, Ordering::Relaxed);
            clock.touch();
        }
        buf.reserve(TUNNEL_BUFFER);
        let read = tokio::select! {
            read = node.read_buf(&mut buf) => read,
            _ = poll_fn(|cx| send.poll_reset(cx)) => return Err(End::Broken),
        };
        match read {
            Ok(0) => break,
            Ok(_) => data = buf.split().freeze(),
            Err(_) => return Err(End::Broken),
        }
    }
    send.send_data(Bytes::new(), true).map_err(|_| End::Broken)
}
