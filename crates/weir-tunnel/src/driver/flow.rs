//! One flow: a local TCP connection spliced to a QUIC stream through the codec, the same on
//! both sides. `encode` reads TCP and sends blocks; `decode` receives blocks and writes TCP.
//!
//! Closing: a TCP end-of-file finishes the QUIC send stream, and a finished stream shuts the
//! other TCP connection's write side down, so half-closes cross the tunnel and each end sees
//! a clean close. A TCP error resets the stream; a reset stream closes the TCP connection.
//! A flow stays active until the peer has acknowledged the end of its stream, and a stopping
//! tunnel end waits for its active flows ([`drain`]) before it closes the connection. Every
//! state of a flow, near and far side: `LIFECYCLE.md`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{ReadHalf, WriteHalf};
use weir_observe::TunnelMetrics;

use super::session::{Resolved, Session, code};
use crate::sans_io::codec::{FlowDecoder, FlowEncoder, Piece};
use crate::sans_io::control::Control;
use crate::sans_io::dedup::ChunkId;
use crate::sans_io::wire::take_record;

/// Bytes read from TCP per call, and the most encoded bytes gathered before a write.
const READ_SIZE: usize = 256 << 10;

/// After a clean end, how long a flow waits for the peer to acknowledge the end of its
/// stream before it counts as done anyway.
const END_ACK_WAIT: Duration = Duration::from_secs(10);

/// How a pump ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// End of stream, passed on.
    Clean,
    /// An error or reset: the whole flow is torn down.
    Broken,
}

/// Runs a flow to its end in both directions. `prefix` is written before the first block
/// (the near side's open header); `received` holds bytes already read from the stream.
///
/// When either direction breaks, the other is abandoned, the QUIC stream is reset and
/// stopped, and the TCP connection is closed with a reset (`SO_LINGER` 0) so that the
/// application sees a failure, never a clean end of a truncated transfer.
pub async fn run(
    session: Arc<Session>,
    mut tcp: TcpStream,
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    prefix: Option<BytesMut>,
    received: BytesMut,
) {
    let stream = u64::from(send.id());
    let _ = tcp.set_nodelay(true);
    session.metrics.flows.inc();
    session.metrics.flows_active.inc();
    session.open_pins(stream);
    let outcome = {
        let (read, write) = tcp.split();
        let encoding = encode(&session, stream, read, &mut send, prefix);
        let decoding = decode(&session, stream, &mut recv, write, received);
        first_failure(encoding, decoding).await
    };
    if outcome == End::Clean {
        // `finish` only queued the end of the stream. The flow is done once the peer has
        // acknowledged it (with everything before it), so that a stop which drains the
        // active flows and then closes the connection cannot cut the last bytes off.
        let _ = tokio::time::timeout(END_ACK_WAIT, send.stopped()).await;
    }
    session.encoder_done(stream);
    session.metrics.flows_active.dec();
    if outcome == End::Broken {
        session.metrics.flows_failed.inc();
        let _ = send.reset(code::TCP_ERROR.into());
        let _ = recv.stop(code::TCP_ERROR.into());
        let _ = socket2::SockRef::from(&tcp).set_linger(Some(Duration::ZERO));
    }
}

/// Both futures to completion, unless one breaks: then the other is dropped at once.
async fn first_failure(first: impl Future<Output = End>, second: impl Future<Output = End>) -> End {
    tokio::pin!(first, second);
    let (mut first_end, mut second_end) = (None, None);
    loop {
        tokio::select! {
            end = &mut first, if first_end.is_none() => first_end = Some(end),
            end = &mut second, if second_end.is_none() => second_end = Some(end),
        }
        match (first_end, second_end) {
            (Some(End::Broken), _) | (_, Some(End::Broken)) => return End::Broken,
            (Some(End::Clean), Some(End::Clean)) => return End::Clean,
            _ => {}
        }
    }
}

/// TCP → blocks → stream.
async fn encode(
    session: &Session,
    stream: u64,
    mut read: ReadHalf<'_>,
    send: &mut quinn::SendStream,
    prefix: Option<BytesMut>,
) -> End {
    let mut encoder = FlowEncoder::new(session.settings).with_block_limit(session.block_limit);
    let mut input = vec![0u8; READ_SIZE];
    let mut wire = prefix.unwrap_or_default();
    // The open header goes at once, so that the far side connects before the client has
    // said anything: in IMAP, SMTP, SSH or MySQL the server speaks first.
    if !wire.is_empty() {
        if send.write_all(&wire).await.is_err() {
            return End::Broken;
        }
        wire.clear();
    }
    let stopped = send.stopped();
    tokio::pin!(stopped);
    loop {
        let count = tokio::select! {
            result = read.read(&mut input) => match result {
                Ok(count) => count,
                Err(error) => {
                    tracing::debug!(stream, %error, "tunnel flow: TCP read failed");
                    return End::Broken;
                }
            },
            // The peer stopped reading (its end of the flow is gone).
            _ = &mut stopped => return End::Broken,
        };
        let end = count == 0;
        // A read that did not fill the buffer drained the socket: send what is held.
        let flush = count < input.len();
        session.metrics.stream_read_bytes.inc_by(count as u64);
        let chunked = encoder.chunk(&input[..count], flush);
        // Past the connection's budget of pins, chunks go as literals (see
        // `SESSION_PIN_LIMIT`): more bytes on the link, no more memory.
        let known = if session.settings.dedup.is_some() && !session.pins_full() {
            session.known(chunked.ids().copied())
        } else {
            Vec::new()
        };
        for block in encoder.emit(chunked, &known) {
            session.pin(stream, block.refs).await;
            let before = wire.len();
            block.block.encode(&mut wire);
            let compression_saved = block.block.compressed.map_or(0, |raw| {
                u64::from(raw).saturating_sub(block.block.payload.len() as u64)
            });
            session
                .metrics
                .encoded_sent_bytes
                .inc_by((wire.len() - before) as u64);
            session
                .metrics
                .compression_saved_bytes
                .inc_by(compression_saved);
            session
                .metrics
                .dedup_saved_bytes
                .inc_by(block.deduplicated_bytes);
            if wire.len() >= READ_SIZE {
                if send.write_all(&wire).await.is_err() {
                    return End::Broken;
                }
                wire.clear();
            }
        }
        if !wire.is_empty() {
            if send.write_all(&wire).await.is_err() {
                return End::Broken;
            }
            wire.clear();
        }
        if end {
            return match send.finish() {
                Ok(()) => End::Clean,
                Err(_) => End::Broken,
            };
        }
    }
}

/// Stream → blocks → TCP.
async fn decode(
    session: &Session,
    stream: u64,
    recv: &mut quinn::RecvStream,
    mut write: WriteHalf<'_>,
    mut buffer: BytesMut,
) -> End {
    let _done = DoneGuard { session, stream };
    let Ok(mut decoder) = FlowDecoder::new(session.max_chunk) else {
        return End::Broken;
    };
    loop {
        loop {
            let held = buffer.len();
            let record = match take_record(&mut buffer) {
                Ok(Some(record)) => record,
                Ok(None) => break,
                Err(error) => return protocol_error(recv, stream, &error.to_string()),
            };
            // The record with its length, as the sending end counts it.
            session
                .metrics
                .encoded_received_bytes
                .inc_by((held - buffer.len()) as u64);
            let pieces = match decoder.decode(record) {
                Ok(pieces) => pieces,
                Err(error) => return protocol_error(recv, stream, &error.to_string()),
            };
            let had_refs = pieces
                .iter()
                .any(|piece| matches!(piece, Piece::Ref { .. }));
            let stream_in = Incoming {
                recv: &mut *recv,
                spill: &mut buffer,
            };
            match deliver(session, stream, pieces, &mut write, stream_in).await {
                Ok(()) => {}
                Err(Failure::Tcp | Failure::Stream) => return End::Broken,
                Err(Failure::Protocol(message)) => return protocol_error(recv, stream, &message),
            }
            if had_refs {
                session.send(Control::Resolved {
                    stream,
                    refs: decoder.refs(),
                });
            }
        }
        match recv.read_chunk(READ_SIZE, true).await {
            Ok(Some(chunk)) => buffer.extend_from_slice(&chunk.bytes),
            Ok(None) => {
                if !buffer.is_empty() {
                    return protocol_error(recv, stream, "stream ended inside a record");
                }
                let _ = write.shutdown().await;
                return End::Clean;
            }
            Err(error) => {
                tracing::debug!(stream, %error, "tunnel flow: stream reset or lost");
                return End::Broken;
            }
        }
    }
}

enum Failure {
    Tcp,
    /// The stream was reset or the connection lost.
    Stream,
    Protocol(String),
}

/// The flow's stream, and where what is read from it while a chunk is fetched goes.
struct Incoming<'a> {
    recv: &'a mut quinn::RecvStream,
    spill: &'a mut BytesMut,
}

/// How much a flow may read ahead of its decoder while it waits for a fetched chunk.
const MAX_SPILL: usize = 64 << 20;

impl Incoming<'_> {
    /// Fetches the chunk of reference `index`, reading the stream meanwhile. A flow that
    /// stopped reading while it waited would leave its data unread in QUIC, and enough
    /// such flows take the whole connection window: the control stream that carries the
    /// chunk could then send nothing, and the connection froze for good. What is read is
    /// bounded by what the peer can send during one fetch (and by [`MAX_SPILL`]).
    async fn fetch(
        &mut self,
        session: &Session,
        stream: u64,
        index: u64,
    ) -> Result<Bytes, Failure> {
        let fetch = session.fetch(stream, index);
        tokio::pin!(fetch);
        let mut ended = false;
        loop {
            tokio::select! {
                biased;
                answer = &mut fetch => {
                    return answer.ok_or_else(|| {
                        Failure::Protocol(format!("reference {index} missing at both ends"))
                    });
                }
                chunk = self.recv.read_chunk(READ_SIZE, true), if !ended && self.spill.len() < MAX_SPILL => {
                    match chunk {
                        Ok(Some(chunk)) => self.spill.extend_from_slice(&chunk.bytes),
                        // The decoder reads the end again and checks it itself.
                        Ok(None) => ended = true,
                        // Now, not later: after a reset quinn reads as a finished stream,
                        // and the decoder would take a cut flow for a clean end.
                        Err(error) => {
                            tracing::debug!(stream, %error, "tunnel flow: stream reset or lost");
                            return Err(Failure::Stream);
                        }
                    }
                }
            }
        }
    }
}

/// Stores new chunks and resolves references (one pass under the store lock, so this end's
/// insertions are reported in the order they happened), then writes the bytes in order,
/// fetching any chunk a reference missed.
async fn deliver(
    session: &Session,
    stream: u64,
    pieces: Vec<Piece>,
    write: &mut WriteHalf<'_>,
    mut incoming: Incoming<'_>,
) -> Result<(), Failure> {
    let resolved = session.resolve(pieces);
    for piece in resolved {
        let bytes = match piece {
            Resolved::Bytes(bytes) => bytes,
            Resolved::Missing { index, id, len } => {
                let bytes = incoming.fetch(session, stream, index).await?;
                if bytes.len() != len as usize || ChunkId::of(&bytes) != id {
                    return Err(Failure::Protocol(format!(
                        "the chunk sent for reference {index} does not match it"
                    )));
                }
                bytes
            }
        };
        if write.write_all(&bytes).await.is_err() {
            return Err(Failure::Tcp);
        }
        session
            .metrics
            .stream_written_bytes
            .inc_by(bytes.len() as u64);
    }
    Ok(())
}

fn protocol_error(recv: &mut quinn::RecvStream, stream: u64, message: &str) -> End {
    tracing::warn!(
        stream,
        message,
        "tunnel flow: protocol error; closing the flow"
    );
    let _ = recv.stop(code::PROTOCOL.into());
    End::Broken
}

/// Tells the peer this end finished decoding a flow, however it ended.
struct DoneGuard<'a> {
    session: &'a Session,
    stream: u64,
}

impl Drop for DoneGuard<'_> {
    fn drop(&mut self) {
        self.session.send(Control::Done {
            stream: self.stream,
        });
    }
}

/// Waits until no flow is active any more, or `timeout` has passed.
pub async fn drain(metrics: &TunnelMetrics, timeout: Duration) {
    let deadline = tokio::time::Instant::now() + timeout;
    while metrics.flows_active.get() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
