//! Connections to a node on weir's own HTTP/2 client (`weir_http::h2client`,
//! a pool's `http2.codec = "weir"`): the state a connection's task and its
//! streams share, and the two halves a request holds. The connection task
//! (`own/driver.rs`) owns the socket and feeds the codec; what the codec reads
//! for a stream (interim and final heads, body bytes, trailers, a reset) waits
//! in the stream's [`Slot`] until the request takes it, and what the request
//! sends goes into the codec at once, under the same lock, as far as the
//! node's windows allow, the connection task writing it out. The node-side
//! counterpart of the proxy's client connections on weir's own server codec;
//! design in `docs/design/http2.md` ("Step 2").

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use tokio::sync::Notify;
use weir_core::{Error, ErrorKind, Side};
use weir_http::ResponseHead;
use weir_http::frame::ErrorCode;
use weir_http::h2client::{ClientConnection, Refused};
use weir_http::h2server::StreamMap;
use weir_http::http2::NodeRequest;

mod driver;
mod error;

pub use error::StreamError;

pub(super) use driver::{Signals, drive};

/// What a connection's task and its streams share.
pub struct Shared {
    inner: Mutex<Inner>,
    /// Wakes the connection task: output to write.
    wake: Notify,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("own::Shared").finish_non_exhaustive()
    }
}

struct Inner {
    core: ClientConnection,
    slots: StreamMap<Slot>,
    /// The connection is over: every wait ends, every send fails.
    closed: bool,
    /// Bytes taken from the codec's output that the task has not written yet.
    unwritten: usize,
    /// A stream waits for the bytes waiting to be written to fall below
    /// [`MAX_UNWRITTEN`].
    send_blocked: bool,
}

/// Bytes the streams of one connection may have waiting for the socket: past
/// it, a request body waits for the node to read, whatever its windows allow.
const MAX_UNWRITTEN: usize = 256 * 1024;

/// One open stream's side of the connection.
#[derive(Default)]
struct Slot {
    /// Interim (1xx) heads not yet taken: status and HTTP/1.1 field lines.
    interims: VecDeque<(u16, Vec<u8>)>,
    /// The final head, until taken, and whether the stream ended with it.
    head: Option<(ResponseHead, bool)>,
    /// The final head was taken: what follows is body.
    answered: bool,
    /// Body bytes received and not yet taken, in order.
    received: VecDeque<Bytes>,
    /// The node ended its side (after `received`).
    ended: bool,
    /// The trailer section that ended it, as HTTP/1.1 lines.
    trailers: Option<Vec<u8>>,
    /// Why the stream failed (a reset either way, a malformed head).
    failed: Option<StreamError>,
    /// weir ended its side (END_STREAM or a reset sent).
    done: bool,
    /// Receiving handles still held.
    receivers: u32,
    /// Sending handles still held.
    senders: u32,
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

impl Shared {
    pub(super) fn new(core: ClientConnection) -> Arc<Shared> {
        Arc::new(Shared {
            inner: Mutex::new(Inner {
                core,
                slots: StreamMap::default(),
                closed: false,
                unwritten: 0,
                send_blocked: false,
            }),
            wake: Notify::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every statement leaves the state whole; a panic elsewhere cannot break it.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Streams the node takes at once, as its SETTINGS say (`u32::MAX` before
    /// they come, or when it set no limit).
    pub(super) fn max_concurrent_streams(&self) -> u32 {
        self.lock().core.max_concurrent_streams()
    }

    /// Whether the node announced extended CONNECT (RFC 8441).
    pub(super) fn enables_connect_protocol(&self) -> bool {
        self.lock().core.enables_connect_protocol()
    }

    /// Opens a stream for `request` and sends its head (`end_stream`: no body
    /// follows); its two halves, or why it did not open.
    pub(super) fn open(
        self: &Arc<Self>,
        request: &NodeRequest<'_>,
        end_stream: bool,
    ) -> Result<(Recv, Send), StreamError> {
        let mut guard = self.lock();
        let inner = &mut *guard;
        if inner.closed {
            return Err(StreamError::Refused(Refused::Failed));
        }
        let stream = match inner.core.send_request(request, end_stream) {
            Err(refused) => return Err(StreamError::Refused(refused)),
            Ok(Err(error)) => {
                drop(guard);
                self.wake.notify_one();
                return Err(StreamError::Unrepresentable(error.reason.to_string()));
            }
            Ok(Ok(stream)) => stream,
        };
        inner.slots.insert(
            stream,
            Slot {
                done: end_stream,
                receivers: 1,
                senders: 1,
                ..Slot::default()
            },
        );
        drop(guard);
        self.wake.notify_one();
        let shared = Arc::clone(self);
        Ok((
            Recv {
                shared: Arc::clone(&shared),
                stream,
            },
            Send { shared, stream },
        ))
    }

    /// A handle of `stream` dropped (`half` marks it so on the slot and returns
    /// the body bytes nobody will read, given back to the node's windows). Once
    /// neither half is held, a stream not yet closed both ways is reset (CANCEL).
    fn drop_half(&self, stream: u32, half: impl FnOnce(&mut Slot) -> usize) {
        let mut guard = self.lock();
        let inner = &mut *guard;
        let Some(slot) = inner.slots.get_mut(&stream) else {
            return;
        };
        let unread = half(slot);
        let held = slot.receivers > 0 || slot.senders > 0;
        if !held {
            inner.slots.remove(&stream);
        }
        if inner.closed {
            return;
        }
        let before = inner.core.output().len();
        if unread > 0 {
            inner.core.release(stream, unread as u32);
        }
        if !held {
            // The codec resets only a stream it still holds open either way.
            inner.core.reset(stream, ErrorCode::CANCEL);
        }
        let wake = inner.core.output().len() != before;
        drop(guard);
        if wake {
            self.wake.notify_one();
        }
    }
}

/// A stream's receiving half: the node's answer (interim heads, the final
/// head, the body and its trailers).
#[derive(Debug)]
pub struct Recv {
    shared: Arc<Shared>,
    stream: u32,
}

/// What a node answered on a stream next.
#[derive(Debug)]
pub enum Answer {
    /// An interim (1xx) head: its status and HTTP/1.1 field lines.
    Interim(u16, Vec<u8>),
    /// The final head, framed for HTTP/1.1, and whether the stream ended with it.
    Final(ResponseHead, bool),
}

impl Recv {
    /// Another handle on the same half (the head's and the body's).
    pub fn share(&self) -> Recv {
        if let Some(slot) = self.shared.lock().slots.get_mut(&self.stream) {
            slot.receivers += 1;
        }
        Recv {
            shared: Arc::clone(&self.shared),
            stream: self.stream,
        }
    }

    /// The node's next head: interim ones first, in order, then the final one.
    pub fn poll_answer(&mut self, cx: &mut Context<'_>) -> Poll<Result<Answer, StreamError>> {
        let mut guard = self.shared.lock();
        let inner = &mut *guard;
        let closed = inner.closed;
        let Some(slot) = inner.slots.get_mut(&self.stream) else {
            return Poll::Ready(Err(StreamError::Closed));
        };
        if let Some((status, lines)) = slot.interims.pop_front() {
            return Poll::Ready(Ok(Answer::Interim(status, lines)));
        }
        if let Some((head, ended)) = slot.head.take() {
            slot.answered = true;
            return Poll::Ready(Ok(Answer::Final(head, ended)));
        }
        if let Some(failed) = &slot.failed {
            return Poll::Ready(Err(failed.clone()));
        }
        if closed {
            return Poll::Ready(Err(StreamError::Closed));
        }
        slot.join(cx);
        Poll::Pending
    }

    /// The next piece of body (`None` at its end); hand its bytes back with
    /// [`Recv::release`] once taken.
    pub fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, StreamError>>> {
        let mut guard = self.shared.lock();
        let inner = &mut *guard;
        let closed = inner.closed;
        let Some(slot) = inner.slots.get_mut(&self.stream) else {
            return Poll::Ready(None);
        };
        if let Some(data) = slot.received.pop_front() {
            return Poll::Ready(Some(Ok(data)));
        }
        if slot.ended {
            return Poll::Ready(None);
        }
        if let Some(failed) = &slot.failed {
            return Poll::Ready(Some(Err(failed.clone())));
        }
        if closed {
            return Poll::Ready(Some(Err(StreamError::Closed)));
        }
        slot.join(cx);
        Poll::Pending
    }

    /// Bytes taken: the node may send as many more.
    pub fn release(&mut self, len: usize) {
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
    pub fn take_trailers(&mut self) -> Option<Vec<u8>> {
        self.shared
            .lock()
            .slots
            .get_mut(&self.stream)?
            .trailers
            .take()
    }

    /// Whether the node has ended its side and everything was taken: every byte,
    /// and the trailers if it sent any.
    pub fn is_end_stream(&self) -> bool {
        let inner = self.shared.lock();
        inner.slots.get(&self.stream).is_none_or(|slot| {
            slot.answered
                && slot.ended
                && slot.received.is_empty()
                && slot.head.is_none()
                && slot.trailers.is_none()
        })
    }
}

impl Drop for Recv {
    fn drop(&mut self) {
        self.shared.drop_half(self.stream, |slot| {
            slot.receivers = slot.receivers.saturating_sub(1);
            if slot.receivers > 0 {
                return 0;
            }
            slot.received.drain(..).map(|data| data.len()).sum()
        });
    }
}

/// A stream's sending half: the request body, its trailers, a reset.
#[derive(Debug)]
pub struct Send {
    shared: Arc<Shared>,
    stream: u32,
}

impl Send {
    /// Sends what the node's windows take of `data` now, or waits for them to
    /// open; returns the bytes that went.
    fn poll_send(
        &self,
        cx: &mut Context<'_>,
        data: &[u8],
        end: bool,
    ) -> Poll<Result<usize, Error>> {
        let mut guard = self.shared.lock();
        let inner = &mut *guard;
        if inner.closed {
            return Poll::Ready(Err(gone("its connection closed")));
        }
        let Some(slot) = inner.slots.get(&self.stream) else {
            return Poll::Ready(Err(gone("it was closed")));
        };
        if let Some(failed) = &slot.failed {
            return Poll::Ready(Err(gone(&failed.to_string())));
        }
        if !inner.core.is_sendable(self.stream) {
            return Poll::Ready(Err(gone("the node closed it")));
        }
        let buffered = inner.unwritten + inner.core.output().len();
        let empty_end = data.is_empty() && end;
        if !empty_end && (inner.core.send_capacity(self.stream) == 0 || buffered >= MAX_UNWRITTEN) {
            inner.send_blocked |= buffered >= MAX_UNWRITTEN;
            if let Some(slot) = inner.slots.get_mut(&self.stream) {
                slot.join(cx);
            }
            return Poll::Pending;
        }
        let Ok(sent) = inner.core.send_data(self.stream, data, end) else {
            return Poll::Ready(Err(gone("it was closed")));
        };
        if end
            && sent == data.len()
            && let Some(slot) = inner.slots.get_mut(&self.stream)
        {
            slot.done = true;
        }
        drop(guard);
        self.shared.wake.notify_one();
        Poll::Ready(Ok(sent))
    }

    /// Sends `data` as the node's windows allow (`end`: the request ends with
    /// it), waiting at most `timeout` each time they are shut; `sent` grows by
    /// what went. Errors say "client" for the peer sent to, as the `h2`
    /// crate's path does (`ErrorKind::ClientTimeout` for a window that stayed shut).
    pub async fn send_data(
        &self,
        mut data: Bytes,
        end: bool,
        timeout: Duration,
        sent: &mut u64,
    ) -> Result<(), Error> {
        if data.is_empty() && !end {
            return Ok(());
        }
        loop {
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
            if data.is_empty() {
                return Ok(());
            }
        }
    }

    /// Ends the request with an empty DATA frame.
    pub fn send_end(&self) -> Result<(), Error> {
        let waker = std::task::Waker::noop();
        match self.poll_send(&mut Context::from_waker(waker), &[], true) {
            Poll::Ready(sent) => sent.map(drop),
            Poll::Pending => Err(gone("it could not be ended")),
        }
    }

    /// Ends the request with a trailer section (HTTP/1.1 lines).
    pub fn send_trailers(&self, lines: &[u8]) -> Result<(), Error> {
        let mut guard = self.shared.lock();
        let inner = &mut *guard;
        if inner.closed {
            return Err(gone("its connection closed"));
        }
        inner
            .core
            .send_trailers(self.stream, lines)
            .map_err(|_| gone("it was closed"))?;
        if let Some(slot) = inner.slots.get_mut(&self.stream) {
            slot.done = true;
        }
        drop(guard);
        self.shared.wake.notify_one();
        Ok(())
    }

    /// Resets the stream (the request was given up), if it is still open.
    pub fn send_reset(&self, error: ErrorCode) {
        let mut guard = self.shared.lock();
        let inner = &mut *guard;
        if inner.closed {
            return;
        }
        if let Some(slot) = inner.slots.get_mut(&self.stream) {
            slot.done = true;
            slot.failed.get_or_insert(StreamError::Reset {
                code: error,
                by_node: false,
                unprocessed: false,
            });
            slot.wake();
        }
        inner.core.reset(self.stream, error);
        drop(guard);
        self.shared.wake.notify_one();
    }
}

impl Send {
    /// Ready once the stream failed (reset either way) or its connection is gone.
    pub fn poll_reset(&self, cx: &mut Context<'_>) -> Poll<StreamError> {
        let mut guard = self.shared.lock();
        let inner = &mut *guard;
        let closed = inner.closed;
        let Some(slot) = inner.slots.get_mut(&self.stream) else {
            return Poll::Ready(StreamError::Closed);
        };
        if let Some(failed) = &slot.failed {
            return Poll::Ready(failed.clone());
        }
        if closed {
            return Poll::Ready(StreamError::Closed);
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

/// A send to a stream that cannot take it any more, on the peer's side.
fn gone(why: &str) -> Error {
    Error::new(ErrorKind::ClientClosed, Side::Downstream)
        .context(format!("HTTP/2 stream to the node: {why}"))
}
