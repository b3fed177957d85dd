//! WebSocket tunnels with an HTTP/2 side (RFC 8441), after the switch: an
//! HTTP/2 client to an HTTP/1.1 node (the node's `101` checked against the
//! key weir sent and answered `200` on the stream), and either client version
//! to an HTTP/2 node (`upgrade.rs` answers the client). Bytes are relayed
//! both ways by one [`pipe`] per direction between a byte stream and DATA
//! frames, or DATA frames and DATA frames, each within its flow control (a
//! stream's window reopens only as the other side takes the bytes; a side is
//! read only as the other's window allows). Design: `docs/design/http2.md`
//! ("WebSocket").

use std::future::poll_fn;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use h2::Reason;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::time::Instant;
use weir_core::{Error, ErrorKind, Side};
use weir_http::ResponseHead;

use super::stream::{H2Stream, RecvHalf, SendHalf};
use super::websocket;
use crate::answer::Failure;

/// Bytes read at once from a byte-stream end (an HTTP/1.1 connection).
const TUNNEL_BUFFER: usize = 16 * 1024;

/// One end of a tunnel: a byte stream (an HTTP/1.1 connection), or an
/// HTTP/2 stream's two halves. `early`: bytes that arrived from this end
/// before the tunnel began, sent to the other end first.
pub(crate) enum TunnelEnd<'a, S> {
    /// An HTTP/1.1 connection to the client or the node.
    Bytes { io: &'a mut S, early: Bytes },
    /// An HTTP/2 stream: DATA frames in, DATA frames out.
    Stream {
        recv: RecvHalf,
        send: &'a mut SendHalf,
    },
}

/// Answers the client's extended CONNECT with `200` when the node's `101`
/// (`node_head`) accepted the key weir sent, then relays until both sides
/// have ended, one fails, or nothing moves for `idle`. `early`: what the
/// node sent after its head. Returns the bytes sent to the client.
pub(crate) async fn relay_websocket<N>(
    stream: &mut H2Stream,
    node_head: &ResponseHead,
    early: Bytes,
    node: &mut N,
    (idle, to_client): (Duration, &AtomicU64),
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
    stream.send_head(super::Head::Map(accepted), false)?;
    let (recv, mut send) = take_tunnel(stream)?;
    let client: TunnelEnd<'_, N> = TunnelEnd::Stream {
        recv,
        send: &mut send,
    };
    let node = TunnelEnd::Bytes { io: node, early };
    Ok(relay(client, node, idle, to_client).await)
}

/// The client's stream halves for a tunnel, once its head is sent.
pub(crate) fn take_tunnel(stream: &mut H2Stream) -> Result<(RecvHalf, SendHalf), Failure> {
    stream.take_tunnel().ok_or_else(|| {
        Failure::silent(
            Error::new(ErrorKind::ClientClosed, Side::Downstream)
                .context("stream closed before the WebSocket tunnel"),
        )
    })
}

/// Relays between `client` and `node` until both directions have ended
/// (each end passed on: END_STREAM or a FIN), a side fails or resets (the
/// HTTP/2 ends are reset with `CONNECT_ERROR`, RFC 9113 §8.5, the byte
/// streams closed), or nothing moves for `idle` (reset with `CANCEL`).
/// Returns the bytes sent to the client, which `to_client` counts as they go (for a
/// tunnel cut from outside, whose relay is dropped before it returns).
pub(crate) async fn relay<C, N>(
    client: TunnelEnd<'_, C>,
    node: TunnelEnd<'_, N>,
    idle: Duration,
    to_client: &AtomicU64,
) -> u64
where
    C: AsyncRead + AsyncWrite + Unpin,
    N: AsyncRead + AsyncWrite + Unpin,
{
    let clock = Clock::new();
    let (client_from, mut client_to, client_early) = halves(client);
    let (node_from, mut node_to, node_early) = halves(node);
    let both = async {
        tokio::try_join!(
            pipe(
                client_from,
                node_to.as_sink(),
                client_early,
                &clock,
                None,
                idle
            ),
            pipe(
                node_from,
                client_to.as_sink(),
                node_early,
                &clock,
                Some(to_client),
                idle
            ),
        )
    };
    // Settled: bytes that came while the process was stopped past the idle timer go on.
    let activity = || clock.last_activity.load(Ordering::Relaxed);
    let ended = weir_core::timeout::until_idle_settled(both, || clock.idle_for(idle), activity)
        .await
        .map_or(Err(End::Idle), |both| both.map(drop));
    let reason = match ended {
        Ok(()) => None,
        // The other side learns that the tunnel broke, as from a TCP reset (RFC 9113 §8.5).
        Err(End::Broken) => Some(Reason::CONNECT_ERROR),
        Err(End::Idle) => {
            tracing::debug!(?idle, "WebSocket tunnel idle; closing");
            Some(Reason::CANCEL)
        }
    };
    if let Some(reason) = reason {
        client_to.reset(reason);
        node_to.reset(reason);
    }
    to_client.load(Ordering::Relaxed)
}

/// How a relay ended, other than both directions closing in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// A side failed or reset: the other is told with a reset or a close.
    Broken,
    /// Nothing moved either way for the idle timeout.
    Idle,
}

/// When bytes last moved.
struct Clock {
    started: Instant,
    /// Milliseconds from `started` to the last transfer.
    last_activity: AtomicU64,
}

impl Clock {
    fn new() -> Clock {
        Clock {
            started: Instant::now(),
            last_activity: AtomicU64::new(0),
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

/// Where a direction reads: a byte stream's read half, or a stream's DATA.
enum Source<R> {
    Read(R),
    Recv(RecvHalf),
}

/// Where the other direction writes to an end.
enum Writer<'a, W> {
    Write(W),
    Send(&'a mut SendHalf),
}

/// Where a direction writes, borrowed from its [`Writer`].
enum Sink<'w, W> {
    Write(&'w mut W),
    Send(&'w mut SendHalf),
}

impl<W> Writer<'_, W> {
    fn as_sink(&mut self) -> Sink<'_, W> {
        match self {
            Writer::Write(write) => Sink::Write(write),
            Writer::Send(send) => Sink::Send(send),
        }
    }

    /// Tells an HTTP/2 end the tunnel broke; a byte stream closes when dropped.
    fn reset(&mut self, reason: Reason) {
        if let Writer::Send(send) = self {
            send.send_reset(reason);
        }
    }
}

type Halves<'a, S> = (
    Source<ReadHalf<&'a mut S>>,
    Writer<'a, WriteHalf<&'a mut S>>,
    Bytes,
);

/// An end as what the other end's direction reads and writes.
fn halves<S: AsyncRead + AsyncWrite + Unpin>(end: TunnelEnd<'_, S>) -> Halves<'_, S> {
    match end {
        TunnelEnd::Bytes { io, early } => {
            let (read, write) = tokio::io::split(io);
            (Source::Read(read), Writer::Write(write), early)
        }
        TunnelEnd::Stream { recv, send } => (Source::Recv(recv), Writer::Send(send), Bytes::new()),
    }
}

impl<R: AsyncRead + Unpin> Source<R> {
    /// The next piece (`None` at the end) and how much of it goes back to
    /// the sender's flow-control window once written.
    async fn next(&mut self, buf: &mut BytesMut) -> Result<Option<(Bytes, usize)>, End> {
        match self {
            Source::Read(read) => {
                buf.reserve(TUNNEL_BUFFER);
                match read.read_buf(buf).await {
                    Ok(0) => Ok(None),
                    Ok(_) => Ok(Some((buf.split().freeze(), 0))),
                    Err(_) => Err(End::Broken),
                }
            }
            Source::Recv(recv) => match recv.data().await {
                None => Ok(None),
                Some(Ok(data)) => {
                    let length = data.len();
                    Ok(Some((data, length)))
                }
                // A reset of the stream, or its connection gone (the node's GOAWAY and close).
                Some(Err(_)) => Err(End::Broken),
            },
        }
    }

    fn release(&mut self, length: usize) {
        if let Source::Recv(recv) = self
            && length > 0
        {
            recv.release(length);
        }
    }
}

/// One direction: `early` first, then each piece read from `from` written to
/// `to` (as DATA within the peer's window, waiting at most `idle` for it),
/// and only then given back to `from`'s window; the end of `from` becomes
/// END_STREAM or a FIN. A reset of `to`'s stream ends this at once.
async fn pipe<R, W>(
    mut from: Source<R>,
    mut to: Sink<'_, W>,
    early: Bytes,
    clock: &Clock,
    counted: Option<&AtomicU64>,
    idle: Duration,
) -> Result<(), End>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut piece = (early, 0);
    let mut buf = BytesMut::new();
    loop {
        let (data, release) = piece;
        if !data.is_empty() {
            let length = data.len() as u64;
            clock.touch();
            match &mut to {
                Sink::Send(send) => send
                    .send_data(data, false, idle, &mut 0)
                    .await
                    .map_err(|_| End::Broken)?,
                Sink::Write(write) => {
                    let written = async {
                        write.write_all(&data).await?;
                        write.flush().await
                    };
                    written.await.map_err(|_| End::Broken)?;
                }
            }
            from.release(release);
            if let Some(counted) = counted {
                counted.fetch_add(length, Ordering::Relaxed);
            }
            clock.touch();
        }
        let next = from.next(&mut buf);
        let next = match &mut to {
            Sink::Send(send) => tokio::select! {
                next = next => next?,
                _ = poll_fn(|cx| send.poll_reset(cx)) => return Err(End::Broken),
            },
            Sink::Write(_) => next.await?,
        };
        match next {
            Some(next) => piece = next,
            None => break,
        }
    }
    match to {
        Sink::Send(send) => send.send_end().map_err(|_| End::Broken),
        // Pass the end on (a FIN; on TLS a close_notify first).
        Sink::Write(write) => write.shutdown().await.map_err(|_| End::Broken),
    }
}
