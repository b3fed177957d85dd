//! Client connections on weir's own HTTP/2 codec (`weir_http::h2server`):
//! the state the connection's task and its streams' tasks share, and the
//! halves a stream's task holds. The connection task (`own/driver.rs`) owns
//! the socket and feeds the codec; what the codec reads for a stream waits
//! in the stream's [`Slot`] until its task takes it, and what a stream's
//! task sends goes into the codec at once, under the same lock, as far as
//! the client's windows allow, the connection task writing it out. Design:
//! `docs/design/http2.md` ("Step 5").

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use tokio::sync::Notify;
use weir_core::{Error, ErrorKind, Side};
use weir_http::frame::ErrorCode;
use weir_http::h2server::{ServerConnection, StreamMap};

mod driver;

pub(crate) use driver::serve;

/// What a connection's tasks share.
pub(crate) struct Shared {
    inner: Mutex<Inner>,
    /// Wakes the connection task: output to write, or a stream to clean up.
    pub(super) wake: Notify,
}

pub(super) struct Inner {
    pub(super) core: ServerConnection,
    pub(super) slots: Slots,
    /// The connection is over: every wait ends, every send fails.
    closed: bool,
    /// Bytes taken from the codec's output that the connection task has not
    /// written yet.
    pub(super) unwritten: usize,
    /// A stream waits for the bytes waiting to be written to fall below
    /// [`MAX_UNWRITTEN`].
    pub(super) send_blocked: bool,
}

/// Bytes the streams of one connection may have waiting for the socket: past
/// it, a stream's body waits for the client to read, whatever its windows
/// allow (a client that opens large windows and reads slowly holds no more).
const MAX_UNWRITTEN: usize = 256 * 1024;

/// One open stream's side of the connection.
#[derive(Default)]
struct Slot {
    /// Body bytes received and not yet taken, in order.
    received: VecDeque<Bytes>,
    /// The client ended its side (after `received`).
    ended: bool,
    /// The trailer section that ended it, as HTTP/1.1 lines.
    trailers: Option<Vec<u8>>,
    /// The stream was reset: by the client (`true`) or by the codec.
    reset: Option<(ErrorCode, bool)>,
    /// weir ended its side (END_STREAM or a reset sent).
    done: bool,
    /// The receiving half is still held.
    receiving: bool,
    /// Sending halves still held.
    senders: u32,
    /// Woken on anything that happens to the stream.
    wakers: weir_core::wait::Wakers,
}

impl Slot {
    fn wake(&mut self) {
        self.wakers.wake();
    }

    fn join(&mut self, cx: &Context<'_>) {
        self.wakers.join(cx);
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").finish_non_exhaustive()
    }
}

impl Shared {
    pub(super) fn new(core: ServerConnection) -> Arc<Shared> {
        Arc::new(Shared {
            inner: Mutex::new(Inner {
                core,
                slots: Slots(StreamMap::default()),
                closed: false,
                unwritten: 0,
                send_blocked: false,
            }),
            wake: Notify::new(),
        })
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A half of `stream` dropped: `half` marks it so on the slot and returns the body
    /// bytes nobody will read, given back to the client's windows. The connection task is
    /// woken only when it has work: the codec's output grew (a WINDOW_UPDATE, a reset), or
    /// the last stream went (a connection going away may close); every stream's end woke
    /// it for nothing before.
    fn drop_half(&self, stream: u32, half: impl FnOnce(&mut Slot) -> usize) {
        let mut guard = self.lock();
        let inner = &mut *guard;
        let Some(slot) = inner.slots.get_mut(stream) else {
            return;
        };
        let unread = half(slot);
        let before = inner.core.output().len();
        if unread > 0 && !inner.closed {
            inner.core.release(stream, unread as u32);
        }
        inner.let_go(stream);
        let wake = inner.core.output().len() != before || inner.slots.0.is_empty();
        drop(guard);
        if wake {
            self.wake.notify_one();
        }
    }
}

/// The open streams' slots, by id.
pub(super) struct Slots(StreamMap<Slot>);

impl Slots {
    /// A stream the codec opened, given to a task: its two halves.
    pub(super) fn open(&mut self, stream: u32, ended: bool) {
        self.0.insert(
            stream,
            Slot {
                ended,
                receiving: true,
                senders: 1,
                ..Slot::default()
            },
        );
    }

    /// Body bytes for `stream`. Returns the bytes to give back at once, which
    /// nobody will read.
    pub(super) fn data(&mut self, stream: u32, data: &[u8], end: bool) -> u32 {
        match self.0.get_mut(&stream) {
            Some(slot) if slot.receiving => {
                if !data.is_empty() {
                    slot.received.push_back(Bytes::copy_from_slice(data));
                }
                slot.ended |= end;
                slot.wake();
                0
            }
            _ => data.len() as u32,
        }
    }

    pub(super) fn trailers(&mut self, stream: u32, lines: Vec<u8>) {
        if let Some(slot) = self.0.get_mut(&stream) {
            slot.trailers = Some(lines);
            slot.ended = true;
            slot.wake();
        }
    }

    pub(super) fn reset(&mut self, stream: u32, error: ErrorCode, by_client: bool) {
        if let Some(slot) = self.0.get_mut(&stream) {
            slot.reset = Some((error, by_client));
            slot.done = true;
            slot.wake();
        }
    }

    /// The client's windows grew, or its socket took bytes: every stream
    /// waiting to send looks again.
    pub(super) fn windows_opened(&mut self) {
        for slot in self.0.values_mut() {
            slot.wake();
        }
    }

    fn get(&self, stream: u32) -> Option<&Slot> {
        self.0.get(&stream)
    }

    fn get_mut(&mut self, stream: u32) -> Option<&mut Slot> {
        self.0.get_mut(&stream)
    }
}

impl Inner {
    /// A stream refused before a task took it (`REFUSED_STREAM`).
    pub(super) fn refuse(&mut self, stream: u32) {
        self.slots.0.remove(&stream);
        self.core.reset(stream, ErrorCode::REFUSED_STREAM);
    }

    /// The connection is over: every stream's wait ends.
    pub(super) fn close(&mut self) {
        self.closed = true;
        for slot in self.slots.0.values_mut() {
            slot.wake();
        }
    }

    /// Streams whose task still holds a half.
    pub(super) fn streams(&self) -> usize {
        self.slots.0.len()
    }

    /// A stream given up by one of its halves: once neither is held, what weir
    /// has not ended is reset (CANCEL), and a request still coming after a
    /// whole answer is stopped (NO_ERROR, RFC 9113 §8.1).
    fn let_go(&mut self, stream: u32) {
        let Some(slot) = self.slots.get(stream) else {
            return;
        };
        if slot.receiving || slot.senders > 0 {
            return;
        }
        let (done, ended) = (slot.done, slot.ended);
        self.slots.0.remove(&stream);
        if self.closed {
            return;
        }
        if !done {
            self.core.reset(stream, ErrorCode::CANCEL);
        } else if !ended {
            self.core.reset(stream, ErrorCode::NO_ERROR);
        }
    }
}

fn closed_error() -> Error {
    Error::new(ErrorKind::ClientClosed, Side::Downstream).context("HTTP/2 connection closed")
}

/// Why a stream's wait ended without data: reset by the client, by the codec
/// for the client's fault (a malformed request: RFC 9113 §8.1.1), or the
/// connection gone.
fn reset_error(error: ErrorCode, by_client: bool) -> Error {
    if !by_client && error == ErrorCode::PROTOCOL_ERROR {
        return Error::new(ErrorKind::BadRequest, Side::Downstream)
            .context("malformed HTTP/2 request: its body broke the stream's rules");
    }
    let who = if by_client { "the client" } else { "weir" };
    Error::new(ErrorKind::ClientClosed, Side::Downstream)
        .context(format!("HTTP/2 stream reset by {who} ({error:?})"))
}

/// A stream's receiving half: the request body.
#[derive(Debug)]
pub(crate) struct Recv {
    shared: Arc<Shared>,
    stream: u32,
}

impl Recv {
    pub(super) fn new(shared: Arc<Shared>, stream: u32) -> Recv {
        Recv { shared, stream }
    }

    /// The next piece of body (`None` at its end).
    pub(crate) fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, Error>>> {
        let mut guard = self.shared.lock();
        let inner = &mut *guard;
        let closed = inner.closed;
        let Some(slot) = inner.slots.get_mut(self.stream) else {
            return Poll::Ready(None);
        };
        if let Some(data) = slot.received.pop_front() {
            return Poll::Ready(Some(Ok(data)));
        }
        if slot.ended {
            return Poll::Ready(None);
        }
        if let Some((error, by_client)) = slot.reset {
            return Poll::Ready(Some(Err(reset_error(error, by_client))));
        }
        if closed {
            return Poll::Ready(Some(Err(closed_error())));
        }
        slot.join(cx);
        Poll::Pending
    }

    /// Bytes taken: the client may send as many more.
    pub(crate) fn release(&mut self, len: usize) {
        if len == 0 {
            return;
        }
        let mut guard = self.shared.lock();
        let inner = &mut *guard;
        if inner.closed {
            return;
        }
        let before = inner.core.output().len();
        inner.core.release(self.stream, len as u32);
        // A WINDOW_UPDATE went out (once half a window is taken): the writer has work.
        let grew = inner.core.output().len() != before;
        drop(guard);
        if grew {
            self.shared.wake.notify_one();
        }
    }

    /// The trailer lines that ended the body (once it has ended), if any.
    pub(crate) fn take_trailers(&mut self) -> Option<Vec<u8>> {
        let mut guard = self.shared.lock();
        let inner = &mut *guard;
        inner.slots.get_mut(self.stream)?.trailers.take()
    }

    /// Whether the client has ended its side and every byte was taken.
    pub(crate) fn is_end_stream(&self) -> bool {
        let inner = self.shared.lock();
        inner
            .slots
            .get(self.stream)
            .is_none_or(|slot| slot.ended && slot.received.is_empty())
    }
}

impl Drop for Recv {
    fn drop(&mut self) {
        self.shared.drop_half(self.stream, |slot| {
            slot.receiving = false;
            slot.received.drain(..).map(|data| data.len()).sum()
        });
    }
}

/// A stream's sending half: heads, body, trailers, a reset.
#[derive(Debug)]
pub(crate) struct Send {
    shared: Arc<Shared>,
    stream: u32,
}

impl Send {
    pub(super) fn new(shared: Arc<Shared>, stream: u32) -> Send {
        Send { shared, stream }
    }

    /// Another handle on the same half (the head's and the body's).
    pub(crate) fn share(&self) -> Send {
        let mut guard = self.shared.lock();
        let inner = &mut *guard;
        if let Some(slot) = inner.slots.get_mut(self.stream) {
            slot.senders += 1;
        }
        Send {
            shared: Arc::clone(&self.shared),
            stream: self.stream,
        }
    }

    /// Runs `send` on the codec for this stream, then wakes the writer.
    fn with_core<T>(
        &self,
        send: impl FnOnce(&mut ServerConnection, u32) -> Result<T, Error>,
        ends: bool,
    ) -> Result<T, Error> {
        let mut guard = self.shared.lock();
        let inner = &mut *guard;
        if inner.closed {
            return Err(closed_error());
        }
        if let Some((error, by_client)) = inner.slots.get(self.stream).and_then(|s| s.reset) {
            return Err(reset_error(error, by_client));
        }
        let sent = send(&mut inner.core, self.stream)?;
        if ends && let Some(slot) = inner.slots.get_mut(self.stream) {
            slot.done = true;
        }
        drop(guard);
        self.shared.wake.notify_one();
        Ok(sent)
    }

    /// A head weir wrote in HTTP/1.1 form (`status` its status): a final one,
    /// or an interim one (1xx), which leaves the stream open.
    pub(crate) fn send_head(&self, status: u16, written: &[u8], end: bool) -> Result<(), Error> {
        self.with_core(
            |core, stream| match core.send_head(stream, status, written, end) {
                Ok(Ok(())) => Ok(()),
                Ok(Err(error)) => {
                    core.reset(stream, ErrorCode::INTERNAL_ERROR);
                    Err(Error::new(ErrorKind::Io, Side::Internal).context(format!(
                        "head not representable in HTTP/2: {}",
                        error.reason
                    )))
                }
                Err(_) => Err(gone()),
            },
            end,
        )
    }

    /// Trailer lines, which end the stream.
    pub(crate) fn send_trailers(&self, lines: &[u8]) -> Result<(), Error> {
        self.with_core(
            |core, stream| core.send_trailers(stream, lines).map_err(|_| gone()),
            true,
        )
    }

    /// Ends the stream with an empty DATA frame.
    pub(crate) fn send_end(&self) -> Result<(), Error> {
        self.with_core(
            |core, stream| {
                core.send_data(stream, &[], true)
                    .map(drop)
                    .map_err(|_| gone())
            },
            true,
        )
    }

    /// Resets the stream, if weir has not ended it yet.
    pub(crate) fn send_reset(&self, error: ErrorCode) {
        let mut guard = self.shared.lock();
        let inner = &mut *guard;
        let Some(slot) = inner.slots.get_mut(self.stream) else {
            return;
        };
        if slot.done || inner.closed {
            return;
        }
        slot.done = true;
        inner.core.reset(self.stream, error);
        drop(guard);
        self.shared.wake.notify_one();
    }

    /// Sends what the client's windows take of `data` now, or waits for them
    /// to open; returns the bytes that went.
    fn poll_send(
        &self,
        cx: &mut Context<'_>,
        data: &[u8],
        end: bool,
    ) -> Poll<Result<usize, Error>> {
        let mut guard = self.shared.lock();
        let inner = &mut *guard;
        if inner.closed {
            return Poll::Ready(Err(closed_error()));
        }
        let Some(slot) = inner.slots.get(self.stream) else {
            return Poll::Ready(Err(gone()));
        };
        if let Some((error, by_client)) = slot.reset {
            return Poll::Ready(Err(reset_error(error, by_client)));
        }
        if !inner.core.is_sendable(self.stream) {
            return Poll::Ready(Err(gone()));
        }
        let buffered = inner.unwritten + inner.core.output().len();
        if inner.core.send_capacity(self.stream) == 0 || buffered >= MAX_UNWRITTEN {
            inner.send_blocked |= buffered >= MAX_UNWRITTEN;
            if let Some(slot) = inner.slots.get_mut(self.stream) {
                slot.join(cx);
            }
            return Poll::Pending;
        }
        let sent = match inner.core.send_data(self.stream, data, end) {
            Ok(sent) => sent,
            Err(_) => return Poll::Ready(Err(gone())),
        };
        if end
            && sent == data.len()
            && let Some(slot) = inner.slots.get_mut(self.stream)
        {
            slot.done = true;
        }
        drop(guard);
        self.shared.wake.notify_one();
        Poll::Ready(Ok(sent))
    }

    /// Sends `data` as the client's windows allow, waiting at most `timeout`
    /// each time they are shut; `sent` grows by what went.
    pub(crate) async fn send_data(
        &self,
        mut data: Bytes,
        end: bool,
        timeout: Duration,
        sent: &mut u64,
    ) -> Result<(), Error> {
        if data.is_empty() {
            return if end { self.send_end() } else { Ok(()) };
        }
        while !data.is_empty() {
            let went = tokio::time::timeout(
                timeout,
                std::future::poll_fn(|cx| self.poll_send(cx, &data, end)),
            )
            .await
            .map_err(|_| {
                Error::new(ErrorKind::ClientTimeout, Side::Downstream)
                    .context("the peer did not open its flow-control window in time")
            })??;
            data.advance(went);
            *sent += went as u64;
        }
        Ok(())
    }

    /// Ready once the stream was reset (or its connection is gone): the
    /// client no longer wants the answer.
    pub(crate) fn poll_reset(&self, cx: &mut Context<'_>) -> Poll<Error> {
        let mut guard = self.shared.lock();
        let inner = &mut *guard;
        let closed = inner.closed;
        let Some(slot) = inner.slots.get_mut(self.stream) else {
            return Poll::Ready(closed_error());
        };
        if let Some((error, by_client)) = slot.reset {
            return Poll::Ready(reset_error(error, by_client));
        }
        if closed {
            return Poll::Ready(closed_error());
        }
        slot.join(cx);
        Poll::Pending
    }
}

impl Drop for Send {
    fn drop(&mut self) {
        self.shared.drop_half(self.stream, |slot| {
            slot.senders = slot.senders.saturating_sub(1);
            0
        });
    }
}

fn gone() -> Error {
    Error::new(ErrorKind::ClientClosed, Side::Downstream).context("HTTP/2 stream closed")
}

/// Writes a head in the `http` crate's form as weir's HTTP/1.1 writer would
/// (a status line, then its fields), for the codec to encode.
pub(crate) fn written_head(response: &http::Response<()>, out: &mut BytesMut) {
    let status = response.status();
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.extend_from_slice(b" \r\n");
    for (name, value) in response.headers() {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
}
