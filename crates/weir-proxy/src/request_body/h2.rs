//! The request body to an HTTP/2 node: the rest of it streamed as DATA
//! frames within the node's window after the buffered part, inline for an
//! HTTP/1.1 client, or in a task of its own for an HTTP/2 client (full
//! duplex: the response flows while the client still sends, as gRPC's
//! streaming calls need).

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::sync::oneshot;
use tokio::time::Instant;
use weir_core::{Error, ErrorKind, Side};
use weir_http::Decoded;

use super::{BodyClock, Remaining, RequestBody};
use crate::answer::Failure;
use crate::client::Client;
use crate::http2::{self, H2Stream, RecvHalf, SendHalf};

/// Streams the rest of the body to an HTTP/2 node: DATA frames within the
/// node's flow-control window (a slow node slows the client down, as with
/// HTTP/1.1), then the trailers or an empty frame that ends the stream.
pub(crate) async fn stream_rest_h2(
    client: &mut Client,
    body: &mut RequestBody,
    node: &mut SendHalf,
    write_stall: Duration,
) -> Result<(), Failure> {
    let clock = body.clock;
    let max_body = clock.max_body;
    match std::mem::replace(&mut body.remaining, Remaining::Nothing) {
        Remaining::Nothing => end_h2(node, &body.trailers, write_stall).await,
        Remaining::Length(mut left) => {
            while left > 0 {
                if client.read_buf.is_empty() {
                    let (deadline, late) = clock.deadline(body.received, Instant::now());
                    client.read_more(deadline, late).await?;
                }
                let take = (client.read_buf.len() as u64).min(left) as usize;
                let piece = client.read_buf.split_to(take).freeze();
                left -= take as u64;
                body.received += take as u64;
                http2::upstream::send_body(node, piece, left == 0, write_stall).await?;
            }
            Ok(())
        }
        Remaining::Chunked(mut decoder) => loop {
            match decoder
                .decode(&mut client.read_buf)
                .map_err(Failure::parse)?
            {
                Decoded::Data(data) => {
                    body.received += data.len() as u64;
                    // What came and what the chunk still announces, before any is sent.
                    if super::announced_too_much(body.received, &decoder, max_body) {
                        // Nothing went to the client yet: it gets its 413.
                        return Err(Failure::from_error(Error::new(
                            ErrorKind::BodyTooLarge,
                            Side::Downstream,
                        )));
                    }
                    http2::upstream::send_body(node, data, false, write_stall).await?;
                }
                Decoded::NeedMore => {
                    if super::announced_too_much(body.received, &decoder, max_body) {
                        return Err(Failure::from_error(Error::new(
                            ErrorKind::BodyTooLarge,
                            Side::Downstream,
                        )));
                    }
                    let (deadline, late) = clock.deadline(body.received, Instant::now());
                    client.read_more(deadline, late).await?;
                }
                Decoded::Done { trailers } => {
                    let mut kept = BytesMut::new();
                    body.keep_trailers(&trailers, &mut kept);
                    return end_h2(node, &kept, write_stall).await;
                }
            }
        },
    }
}

/// Full duplex from an HTTP/2 client to an HTTP/2 node: the rest of the
/// body moves in a task of its own, so the node's response (a gRPC stream)
/// flows to the client while the client is still sending. Takes the
/// client's request stream and what was read of it; the body's limits and
/// clocks still apply, and a client that fails them, resets or goes away
/// has the node's stream reset (CANCEL) and the returned [`PumpWatch`] told
/// why, so the request ends with the client's error (413 past
/// `max_body_bytes`), not with the reset node's. `Err`: the client is not an
/// HTTP/2 stream, or its body was already taken.
pub(crate) fn spawn_h2_pump(
    client: &mut Client,
    body: &mut RequestBody,
    node: SendHalf,
    write_stall: Duration,
) -> Result<PumpWatch, SendHalf> {
    let Some(source) = client.h2().and_then(H2Stream::take_body) else {
        return Err(node);
    };
    let (ended, watch) = oneshot::channel();
    let pump = Pump {
        read: client.read_buf.split(),
        remaining: std::mem::replace(&mut body.remaining, Remaining::Nothing),
        received: body.received,
        clock: body.clock,
        max_body: body.clock.max_body,
        write_stall,
        managed: body.managed_trailers.clone(),
    };
    tokio::spawn(pump.run(source, node, ended));
    Ok(PumpWatch(Some(watch)))
}

/// How a body handed to [`spawn_h2_pump`] ends, for the request's own task: whether it is
/// still on its way to the node, and the error that stopped it early if one did (the node's
/// stream was reset for it).
#[derive(Debug)]
pub(crate) struct PumpWatch(Option<oneshot::Receiver<Result<(), Error>>>);

impl PumpWatch {
    /// Whether the body may still be on its way (the pump has not been heard to end).
    pub(crate) fn flowing(&self) -> bool {
        self.0.is_some()
    }

    /// Waits for the body to end: `Ok` once all of it went to the node (or the pump is
    /// gone), the error that stopped it otherwise. Never ready once it has been told.
    pub(crate) async fn ended(&mut self) -> Result<(), Error> {
        let Some(ending) = self.0.as_mut() else {
            return std::future::pending().await;
        };
        let ended = ending.await;
        self.0 = None;
        ended.unwrap_or(Ok(()))
    }

    /// The error that stopped the body, if it has (taken: asked once).
    pub(crate) fn failure(&mut self) -> Option<Error> {
        let ended = self.0.as_mut()?.try_recv();
        match ended {
            Err(oneshot::error::TryRecvError::Empty) => None,
            Err(oneshot::error::TryRecvError::Closed) => {
                self.0 = None;
                None
            }
            Ok(ended) => {
                self.0 = None;
                ended.err()
            }
        }
    }
}

/// The state of a body handed to [`spawn_h2_pump`].
struct Pump {
    /// Bytes read from the client before (framed as the head says).
    read: BytesMut,
    remaining: Remaining,
    received: u64,
    clock: BodyClock,
    max_body: u64,
    write_stall: Duration,
    /// [`RequestBody::managed_trailers`].
    managed: Option<Arc<[Box<[u8]>]>>,
}

impl Pump {
    /// The trailer lines that may go on, in `out`.
    fn keep_trailers(&self, lines: &[u8], out: &mut BytesMut) {
        super::keep_trailers(self.managed.as_deref(), lines, out);
    }

    async fn run(
        mut self,
        mut source: RecvHalf,
        mut node: SendHalf,
        mut ended: oneshot::Sender<Result<(), Error>>,
    ) {
        // The request's task drops its watch when the request ends: its client went (a
        // reset, a FIN), or the node's answer is over. The body then stops, and the node's
        // stream is reset, rather than held open while the pump waits for the client or
        // for the node's window (up to `timeouts.write`).
        let pumped = tokio::select! {
            biased;
            pumped = self.pump(&mut source, &mut node) => pumped,
            () = ended.closed() => {
                tracing::debug!("request over before its body: the node's stream is reset");
                node.send_reset(h2::Reason::CANCEL);
                return;
            }
        };
        match pumped {
            // All of it went: the node's answer is awaited from now (`attempt_h2`).
            Ok(()) => {
                let _ = ended.send(Ok(()));
            }
            Err(error) => {
                tracing::debug!(%error, "request body to the HTTP/2 node ended early");
                // Told before the reset, so the request's task never takes the node's
                // reset for the cause.
                let _ = ended.send(Err(error));
                node.send_reset(h2::Reason::CANCEL);
            }
        }
    }

    async fn pump(&mut self, source: &mut RecvHalf, node: &mut SendHalf) -> Result<(), Error> {
        // What was read before: whole chunks (or raw bytes for a length).
        match std::mem::replace(&mut self.remaining, Remaining::Nothing) {
            Remaining::Nothing => return Ok(()),
            Remaining::Length(left) => {
                let take = (self.read.len() as u64).min(left) as usize;
                let early = self.read.split_to(take).freeze();
                self.forward(node, early).await?;
            }
            Remaining::Chunked(mut decoder) => loop {
                match decoder.decode(&mut self.read) {
                    Ok(Decoded::Data(data)) => self.forward(node, data).await?,
                    Ok(Decoded::NeedMore) => break,
                    Ok(Decoded::Done { trailers }) => {
                        let mut kept = BytesMut::new();
                        self.keep_trailers(&trailers, &mut kept);
                        return end_h2(node, &kept, self.write_stall)
                            .await
                            .map_err(|failure| failure.error);
                    }
                    Err(error) => {
                        return Err(Error::new(ErrorKind::BadRequest, Side::Downstream)
                            .context(error.reason));
                    }
                }
            },
        }
        // Then the DATA frames themselves.
        loop {
            let (deadline, late) = self.clock.deadline(self.received, Instant::now());
            let data = tokio::time::timeout_at(deadline, source.data())
                .await
                .map_err(|_| {
                    Error::new(ErrorKind::ClientTimeout, Side::Downstream).context(late)
                })?;
            match data {
                Some(Ok(data)) => {
                    source.release(data.len());
                    self.forward(node, data).await?;
                }
                Some(Err(error)) => return Err(error),
                None => break,
            }
        }
        let trailers = tokio::time::timeout(self.write_stall, source.trailers())
            .await
            .ok()
            .and_then(Result::ok)
            .flatten();
        match trailers {
            Some(lines) => {
                // The same fields stay out as from an HTTP/1.1 client's chunked trailers.
                let mut kept = BytesMut::new();
                self.keep_trailers(&lines, &mut kept);
                end_h2(node, &kept, self.write_stall)
                    .await
                    .map_err(|failure| failure.error)
            }
            None => http2::upstream::send_body(node, Bytes::new(), true, self.write_stall).await,
        }
    }

    /// Sends a piece of body to the node, within `max_body_bytes`.
    async fn forward(&mut self, node: &mut SendHalf, data: Bytes) -> Result<(), Error> {
        self.received += data.len() as u64;
        if self.received > self.max_body {
            return Err(Error::new(ErrorKind::BodyTooLarge, Side::Downstream));
        }
        if data.is_empty() {
            return Ok(());
        }
        http2::upstream::send_body(node, data, false, self.write_stall).await
    }
}

/// Ends a request stream to an HTTP/2 node: with its trailers, or an empty DATA frame.
async fn end_h2(
    node: &mut SendHalf,
    trailers: &[u8],
    write_stall: Duration,
) -> Result<(), Failure> {
    if trailers.is_empty() {
        http2::upstream::send_body(node, Bytes::new(), true, write_stall).await?;
    } else {
        // Trailers with no HTTP/2 form are the client's fault, whichever codec goes on.
        weir_http::http2::trailers_to_h2(trailers).map_err(Failure::parse)?;
        http2::upstream::send_trailers(node, trailers)?;
    }
    Ok(())
}
