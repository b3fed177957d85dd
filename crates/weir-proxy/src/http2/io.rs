//! The byte stream under the HTTP/2 codec: the client connection, with the
//! bytes already read while detecting the protocol put back in front, and the
//! [`FrameWatch`] looking at everything the client sends.
//!
//! Once the watcher finds a flood, the stream stops handing the client's
//! bytes to the codec (reads stay pending), so the codec can still write its
//! GOAWAY but reads nothing more; the driver is woken through [`Tripwire`].

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::futures::Notified;
use tokio::sync::{Notify, oneshot};
use weir_observe::Flood;

use super::flood::FrameWatch;

/// Room made for each read while waiting for the preface.
const PREFACE_READ: usize = 64;
/// How long a refused connection is drained before it is closed.
const LINGER: Duration = Duration::from_millis(500);

/// What [`Tripwire::poll_outside`] found.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Outside {
    /// The watcher found a flood: the connection ends now.
    Flood(Flood),
    /// The connection is worn out: it goes away gracefully.
    WornOut,
}

/// Where the driver's waiter stands (see [`Tripwire::poll_outside`]).
#[derive(Debug, Default)]
pub(crate) struct Watch {
    /// In the wake-up's list with the driver task's waker.
    joined: bool,
    /// Made anew after the connection wore out.
    rewound: bool,
}

/// Shared between the stream and the driver: the flood found, and a wake-up.
#[derive(Debug, Default)]
pub(crate) struct Tripwire {
    flood: Mutex<Option<Flood>>,
    /// What the watcher suspected when the stream last read (see [`FrameWatch::suspect`]).
    suspect: Mutex<Option<Flood>>,
    /// The connection should end gracefully (see [`FrameWatch::worn_out`]).
    worn_out: std::sync::atomic::AtomicBool,
    /// The highest stream id the driver was handed.
    last_accepted: std::sync::atomic::AtomicU32,
    /// Streams the codec reset as malformed above the last one handed over, not yet
    /// reported (see [`FrameWatch::sent`]): refused requests unless handed over after all.
    refused: Mutex<Vec<u32>>,
    notify: Notify,
}

impl Tripwire {
    pub(crate) fn suspect(&self) -> Option<Flood> {
        *self.suspect.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn flood(&self) -> Option<Flood> {
        *self.flood.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A waiter on what [`Tripwire::poll_outside`] watches for, made before its first look
    /// at the flags: pinned by the driver for the connection's life.
    pub(crate) fn waiter(&self) -> Notified<'_> {
        self.notify.notified()
    }

    /// Ready with a flood once one was found, or, while `worn_out_too`, once the connection
    /// is worn out. The driver polls this on every turn of its loop (each request): the
    /// `waiter` joins the wake-up's list once and stays in it, and later polls read the
    /// flags, where a fresh future for each on each turn joined and left the list under
    /// its lock, about 500 user-space instructions per HTTP/2 request (`bench/insns
    /// --modes h2`).
    pub(crate) fn poll_outside<'a>(
        &'a self,
        waiter: &mut Pin<&mut Notified<'a>>,
        watch: &mut Watch,
        worn_out_too: bool,
        cx: &mut Context<'_>,
    ) -> Poll<Outside> {
        use std::sync::atomic::Ordering;
        // Worn out since the waiter joined: the wear woke it, so it joins again, anew.
        if watch.joined && !watch.rewound && self.worn_out.load(Ordering::Acquire) {
            watch.joined = false;
        }
        while !watch.joined {
            // Wearing out wakes (and so uses up) the waiter once: a new one, for a flood
            // after it.
            if !watch.rewound && self.worn_out.load(Ordering::Acquire) {
                watch.rewound = true;
                waiter.set(self.notify.notified());
            }
            // Joined before the flags are read below: a trip between the two wakes the task.
            match waiter.as_mut().poll(cx) {
                Poll::Pending => watch.joined = true,
                // Woken since it was made: by the wear (a new waiter, above), or by a trip,
                // which the flags below show.
                Poll::Ready(()) if !watch.rewound && self.worn_out.load(Ordering::Acquire) => {}
                Poll::Ready(()) => break,
            }
        }
        if let Some(flood) = self.flood() {
            return Poll::Ready(Outside::Flood(flood));
        }
        if worn_out_too && self.worn_out.load(Ordering::Acquire) {
            return Poll::Ready(Outside::WornOut);
        }
        Poll::Pending
    }

    /// The driver was handed stream `id` (client streams come in increasing order).
    /// Returns how many requests the codec refused before it: the streams reset as
    /// malformed below `id` can no longer be handed over, and `id` itself, if it was
    /// reset, is the pipeline's to count.
    pub(crate) fn accepted(&self, id: u32) -> u32 {
        use std::sync::atomic::Ordering;
        self.last_accepted.fetch_max(id, Ordering::AcqRel);
        let mut refused = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        if refused.is_empty() {
            return 0;
        }
        let mut below = 0;
        refused.retain(|&stream| {
            below += u32::from(stream < id);
            stream > id
        });
        below
    }

    /// Takes the count of requests the codec refused and that were not handed over (a
    /// stream it both reset and handed over is handed over in the same turn of the
    /// driver, so one still kept at its next tick, or at the connection's end, never is).
    pub(crate) fn take_refused(&self) -> u32 {
        let mut refused = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        let count = refused.len() as u32;
        refused.clear();
        count
    }

    fn note_written(&self, watch: &mut FrameWatch, bytes: &[u8]) {
        use std::sync::atomic::Ordering;
        if watch.sent(bytes, self.last_accepted.load(Ordering::Acquire)) > 0 {
            self.refused
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend(watch.take_refused());
        }
    }

    fn wear_out(&self) {
        use std::sync::atomic::Ordering;
        if !self.worn_out.swap(true, Ordering::AcqRel) {
            self.notify.notify_waiters();
        }
    }

    fn trip(&self, flood: Flood) {
        *self.flood.lock().unwrap_or_else(|p| p.into_inner()) = Some(flood);
        self.notify.notify_waiters();
    }
}

/// How long a connection the codec ended gracefully is read from at most (what the client
/// still sends dropped) before it is closed: the client closes first, having read every
/// answer. A client still reading the last answers sends WINDOW_UPDATEs as it goes, and on
/// a slow link the megabytes queued in the sockets' buffers take seconds (nginx lingers
/// 30 s at most after an HTTP/2 close, too).
const LINGER_AFTER_GOAWAY: Duration = Duration::from_secs(30);
/// ... and the client may stay quiet this long before the close: one that sends nothing
/// has read all it wanted, or is gone. A client sends a WINDOW_UPDATE only once it has
/// read half its window (nghttp2's, curl's), so a large window read slowly can leave
/// seconds between two: nginx waits 5 s between reads too (`lingering_timeout`).
const LINGER_QUIET: Duration = Duration::from_secs(5);
/// ... and at most this much of what it sends is read away.
const LINGER_BYTES: usize = 16 * 1024 * 1024;
/// ... read this much at a time.
const LINGER_READ: usize = 4096;
/// How long a close_notify and FIN may take to leave.
const CLOSE_TIME: Duration = Duration::from_secs(1);

/// A client stream watched for floods.
#[derive(Debug)]
pub(crate) struct Watched<S> {
    /// Present until the codec drops the stream, which then goes back through `back`.
    inner: Option<S>,
    /// Bytes read before the codec took over (h2c detection), served first.
    rewind: Bytes,
    watch: FrameWatch,
    tripwire: Arc<Tripwire>,
    /// Where the stream goes when the codec drops it: the driver closes a connection that
    /// ended gracefully itself ([`close_lingering`]).
    back: Option<oneshot::Sender<S>>,
}

impl<S> Watched<S> {
    pub(crate) fn new(
        inner: S,
        rewind: Bytes,
        (watch, tripwire): (FrameWatch, Arc<Tripwire>),
        back: oneshot::Sender<S>,
    ) -> Self {
        Watched {
            inner: Some(inner),
            rewind,
            watch,
            tripwire,
            back: Some(back),
        }
    }

    fn inner(&mut self) -> &mut S {
        self.inner.as_mut().expect("present until dropped")
    }

    /// Shows newly read bytes to the watcher; false once a flood was found.
    fn admit(&mut self, bytes: &[u8]) -> bool {
        if self.watch.verdict().is_some() {
            return false;
        }
        let now = Instant::now();
        match self.watch.received(bytes, now) {
            None => {
                let suspect = self.watch.suspect(now);
                let mut slot = self
                    .tripwire
                    .suspect
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                if *slot != suspect {
                    *slot = suspect;
                }
                drop(slot);
                if self.watch.worn_out() {
                    self.tripwire.wear_out();
                }
                true
            }
            Some(flood) => {
                self.tripwire.trip(flood);
                false
            }
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.watch.verdict().is_some() {
            // Nothing more from this client; the driver closes the connection.
            return Poll::Pending;
        }
        if !this.rewind.is_empty() {
            let take = this.rewind.len().min(buf.remaining());
            let piece = this.rewind.split_to(take);
            if !this.admit(&piece) {
                return Poll::Pending;
            }
            buf.put_slice(&piece);
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        match Pin::new(this.inner()).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if this.admit(&buf.filled()[before..]) {
                    Poll::Ready(Ok(()))
                } else {
                    buf.set_filled(before);
                    Poll::Pending
                }
            }
            other => other,
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(this.inner()).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = written {
            this.tripwire
                .note_written(&mut this.watch, &buf[..n.min(buf.len())]);
        }
        written
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(this.inner()).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = written {
            let mut left = n;
            for slice in bufs {
                let take = left.min(slice.len());
                this.tripwire.note_written(&mut this.watch, &slice[..take]);
                left -= take;
                if left == 0 {
                    break;
                }
            }
        }
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.as_ref().is_some_and(S::is_write_vectored)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(self.get_mut().inner()).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(self.get_mut().inner()).poll_shutdown(cx)
    }
}

impl<S> Drop for Watched<S> {
    fn drop(&mut self) {
        if let (Some(inner), Some(back)) = (self.inner.take(), self.back.take()) {
            // Nobody waiting (a connection that did not end gracefully): it closes here.
            let _ = back.send(inner);
        }
    }
}

/// Closes a connection the codec ended gracefully (its GOAWAY sent, every stream done):
/// our side shut first (a TLS close_notify, then the FIN, after what is still queued), then
/// what the client still sends (WINDOW_UPDATEs, a PING's answer) read and dropped until it
/// closes, for a bounded time. Closed with those unread, the socket would reset the
/// connection, and the client's system throw away the end of the last answers it has not
/// read yet (RFC 9112 §9.6 asks the same staged close of HTTP/1.1).
pub(crate) async fn close_lingering<S>(returned: oneshot::Receiver<S>)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let Ok(mut io) = returned.await else {
        return;
    };
    if !matches!(
        tokio::time::timeout(CLOSE_TIME, io.shutdown()).await,
        Ok(Ok(()))
    ) {
        return;
    }
    discard_until_closed(&mut io, (LINGER_QUIET, LINGER_AFTER_GOAWAY)).await;
}

/// Reads and drops what the client sends until it closes, stays quiet for `quiet`, or
/// `time` or [`LINGER_BYTES`] run out.
///
/// The scratch buffer is on the heap, made when the lingering starts: an array here
/// would be part of every future that can linger (the connection's whole HTTP/2 future
/// among them, see `serve` in `server.rs`), 4 KiB held by each connection for its life.
async fn discard_until_closed<S: AsyncRead + Unpin>(
    io: &mut S,
    (quiet, time): (Duration, Duration),
) {
    let end = tokio::time::Instant::now() + time;
    let mut scratch = vec![0u8; LINGER_READ];
    let mut discarded = 0;
    while discarded < LINGER_BYTES {
        let deadline = end.min(tokio::time::Instant::now() + quiet);
        match tokio::time::timeout_at(deadline, io.read(&mut scratch)).await {
            Ok(Ok(n)) if n > 0 => discarded += n,
            _ => break,
        }
    }
}

/// Whether `bytes` (the start of a connection) can still be, or is, the
/// HTTP/2 preface: `Some(true)` it is, `Some(false)` it cannot be, `None`
/// too short to tell.
pub(crate) fn starts_with_preface(bytes: &[u8]) -> Option<bool> {
    let preface = super::flood::PREFACE;
    let n = bytes.len().min(preface.len());
    if bytes[..n] != preface[..n] {
        Some(false)
    } else if n == preface.len() {
        Some(true)
    } else {
        None
    }
}

/// Makes sure the connection starts with the HTTP/2 preface: reads until
/// `rewind` (bytes already read) holds it, within `timeout`. Returns the
/// bytes to replay to the codec, or `None` when the client sent something
/// else or too little; then the connection is closed without a reset
/// (our side shut first, what the client still sends read and dropped
/// briefly), as RFC 9113 §3.4 asks.
pub(crate) async fn read_preface<S>(io: &mut S, rewind: Bytes, timeout: Duration) -> Option<Bytes>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut buffer = BytesMut::from(&rewind[..]);
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match starts_with_preface(&buffer) {
            Some(true) => return Some(buffer.freeze()),
            Some(false) => break,
            None => {}
        }
        buffer.reserve(PREFACE_READ);
        match tokio::time::timeout_at(deadline, io.read_buf(&mut buffer)).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => break,
        }
    }
    let _ = io.shutdown().await;
    discard_until_closed(io, (LINGER, LINGER)).await;
    None
}
