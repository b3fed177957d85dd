//! Empty DATA frames from a node, kept from the codec's lifetime bound on them.
//!
//! The `h2` codec allows 100 empty DATA frames that do not end their stream over a
//! connection's whole life (`MAX_RECV_EMPTY_DATA_FRAMES`, a defence against CVE-2019-9518
//! that never decays), then closes the connection with `ENHANCE_YOUR_CALM`, failing every
//! stream in flight on it. An empty DATA frame is legal (a server's flush before its body),
//! and a node that sends one per response would have its shared, long-lived connection
//! killed every hundred responses, however many streams it carries at once.
//!
//! [`Watched`] reads the frame headers of what the node sends (a few compares per frame;
//! payloads are passed over) and takes the zero-length DATA frames that do not end their
//! stream out of the bytes the codec reads: they carry nothing, not even flow-control
//! credit, so the codec loses nothing by not seeing them. An empty frame with padding does
//! use flow control and must reach the codec; those are counted where the node's pool sees
//! them: a connection takes a new stream only while they and its open streams (each may
//! send one more) stay under [`RETIRE_AT`], and at [`RETIRE_AT`] it takes no more and closes
//! once its streams are done.

use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::watch;

use super::H2Node;

/// Padded empty DATA frames seen plus streams open on a connection up to which it takes
/// new streams: under the codec's bound of 100, with room for each open stream to send one
/// more.
pub(super) const RETIRE_AT: u32 = 90;

const FRAME_HEADER: usize = 9;
const DATA: u8 = 0x0;
const END_STREAM: u8 = 0x1;
const PADDED: u8 = 0x8;

/// Where the scanner is in the node's byte stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    /// At the start of a frame header.
    Header,
    /// The pad length of a padded DATA frame not ending its stream, of `length` bytes.
    PadLength { length: usize },
    /// In a payload, `left` bytes to pass.
    Payload { left: usize },
}

/// Reads the frames a node sends: takes out the zero-length DATA frames that do not end
/// their stream, and counts the padded ones whose payload is all padding (the codec counts
/// those).
#[derive(Debug)]
pub(super) struct Scanner {
    at: At,
    /// Padded empty DATA frames seen (the codec's count; the zero-length ones never reach it).
    pub(super) empty: u32,
    /// Zero-length ones taken out.
    pub(super) stripped: u64,
    /// Frames read whole (payload and all).
    pub(super) frames: u64,
}

impl Scanner {
    pub(super) fn new() -> Scanner {
        Scanner {
            at: At::Header,
            empty: 0,
            stripped: 0,
            frames: 0,
        }
    }

    /// Filters `bytes`, the next the node sent (after any bytes of a header cut short last
    /// time, which [`Scanner::filter`] gave back), in place: returns how many of them to
    /// pass on (moved to the front), and where a frame header cut short by the end of
    /// `bytes` begins (`bytes.len()` when none is): those bytes go in front of the next.
    pub(super) fn filter(&mut self, bytes: &mut [u8]) -> (usize, usize) {
        let (mut read, mut kept) = (0, 0);
        while read < bytes.len() {
            match self.at {
                At::Header => {
                    if bytes.len() - read < FRAME_HEADER {
                        return (kept, read);
                    }
                    let header = &bytes[read..read + FRAME_HEADER];
                    let length = usize::from(header[0]) << 16
                        | usize::from(header[1]) << 8
                        | usize::from(header[2]);
                    let (kind, flags) = (header[3], header[4]);
                    let counted = kind == DATA && flags & END_STREAM == 0;
                    let padded = flags & PADDED != 0;
                    if counted && !padded && length == 0 {
                        self.stripped += 1;
                        self.frames += 1;
                        read += FRAME_HEADER;
                        continue;
                    }
                    keep(bytes, read..read + FRAME_HEADER, kept);
                    read += FRAME_HEADER;
                    kept += FRAME_HEADER;
                    self.at = match (counted && padded, length) {
                        (_, 0) => {
                            self.frames += 1;
                            At::Header
                        }
                        (true, length) => At::PadLength { length },
                        (false, left) => At::Payload { left },
                    };
                }
                At::PadLength { length } => {
                    // All of the payload after the pad length byte is padding: nothing.
                    if usize::from(bytes[read]) + 1 == length {
                        self.empty = self.empty.saturating_add(1);
                    }
                    bytes[kept] = bytes[read];
                    read += 1;
                    kept += 1;
                    self.at = match length - 1 {
                        0 => {
                            self.frames += 1;
                            At::Header
                        }
                        left => At::Payload { left },
                    };
                }
                At::Payload { left } => {
                    let take = left.min(bytes.len() - read);
                    keep(bytes, read..read + take, kept);
                    read += take;
                    kept += take;
                    self.at = match left - take {
                        0 => {
                            self.frames += 1;
                            At::Header
                        }
                        left => At::Payload { left },
                    };
                }
            }
        }
        (kept, read)
    }
}

/// Moves `bytes[range]` to `to` (no earlier than it): nothing to do until a frame was taken
/// out, and most reads take none out.
fn keep(bytes: &mut [u8], range: std::ops::Range<usize>, to: usize) {
    if range.start != to {
        bytes.copy_within(range, to);
    }
}

/// A node connection's stream, its incoming frames filtered (see the module's notes).
#[derive(Debug)]
pub(super) struct Watched<S> {
    inner: S,
    scanner: Scanner,
    /// The start of a frame header cut short by the end of the last read.
    held: [u8; FRAME_HEADER],
    held_len: usize,
    /// Filtered bytes a small read had no room for, given first on the next.
    pending: Vec<u8>,
    node: Weak<H2Node>,
    id: u64,
    /// The padded empty frames' count, where the node's pool reads it.
    shared: Arc<AtomicU32>,
    retired: bool,
    /// Set, and the node's pool told, once the codec has processed the node's first frame:
    /// its SETTINGS (RFC 9113 §3.4), so the codec knows how many streams the node allows
    /// (`connection::Settled`).
    settled: Arc<watch::Sender<bool>>,
}

impl<S> Watched<S> {
    /// Connection `id` of `node`, counting into `shared`.
    pub(super) fn new(
        inner: S,
        (node, id): (Weak<H2Node>, u64),
        (shared, settled): (Arc<AtomicU32>, Arc<watch::Sender<bool>>),
    ) -> Watched<S> {
        Watched {
            inner,
            scanner: Scanner::new(),
            held: [0; FRAME_HEADER],
            held_len: 0,
            pending: Vec::new(),
            node,
            id,
            shared,
            retired: false,
            settled,
        }
    }

    /// Once the node's first frame has been read whole and the codec asks for more bytes
    /// (so it has processed that frame: it reads on only when the frames it holds are
    /// done), the node's SETTINGS are applied: the pool may give the connection as many
    /// streams as the node allows.
    fn note_settings(&mut self) {
        if self.scanner.frames > 0 && !*self.settled.borrow() {
            super::settle(&self.settled, &self.node, self.id);
        }
    }

    /// Counts what the filter saw; retires the connection at [`RETIRE_AT`].
    fn count(&mut self, seen: u32) {
        if self.scanner.empty == seen {
            return;
        }
        self.shared.store(self.scanner.empty, Ordering::Relaxed);
        if !self.retired
            && self.scanner.empty >= RETIRE_AT
            && let Some(node) = self.node.upgrade()
        {
            self.retired = true;
            tracing::debug!(
                node = %node.address,
                empty_data_frames = self.scanner.empty,
                "HTTP/2 connection to the node retired before the codec's bound on empty DATA frames"
            );
            node.drain(self.id, false);
        }
    }
}

impl<S: AsyncRead + Unpin> Watched<S> {
    /// Reads and filters into `buf`, which has room for more than a frame header.
    fn fill(&mut self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = self;
        loop {
            let start = buf.filled().len();
            buf.put_slice(&this.held[..this.held_len]);
            let read_from = buf.filled().len();
            match Pin::new(&mut this.inner).poll_read(cx, buf) {
                Poll::Ready(Ok(())) if buf.filled().len() == read_from => {
                    // The end: what was held goes on as it is (the codec sees it cut short).
                    this.held_len = 0;
                    return Poll::Ready(Ok(()));
                }
                Poll::Ready(Ok(())) => {}
                other => {
                    // Nothing new: the held bytes stay held.
                    buf.set_filled(start);
                    return other;
                }
            }
            let seen = this.scanner.empty;
            let end = buf.filled().len();
            let (kept, cut) = this.scanner.filter(&mut buf.filled_mut()[start..end]);
            this.held_len = end - start - cut;
            this.held[..this.held_len].copy_from_slice(&buf.filled()[start + cut..end]);
            buf.set_filled(start + kept);
            this.count(seen);
            if kept > 0 {
                return Poll::Ready(Ok(()));
            }
            // All of it was taken out or held: read on (an empty read would say the end).
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        this.note_settings();
        if !this.pending.is_empty() {
            let take = this.pending.len().min(buf.remaining());
            buf.put_slice(&this.pending[..take]);
            this.pending.drain(..take);
            return Poll::Ready(Ok(()));
        }
        if buf.remaining() > FRAME_HEADER {
            return this.fill(cx, buf);
        }
        // Too little room to filter in (the codec reads with far more): through a scratch
        // buffer, what does not fit kept for the next read.
        let mut scratch = [0u8; 256];
        let mut small = ReadBuf::new(&mut scratch);
        let polled = this.fill(cx, &mut small);
        if let Poll::Ready(Ok(())) = polled {
            let filled = small.filled();
            let take = filled.len().min(buf.remaining());
            buf.put_slice(&filled[..take]);
            this.pending.extend_from_slice(&filled[take..]);
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, flags: u8, payload: &[u8]) -> Vec<u8> {
        let length = payload.len();
        let mut out = vec![
            (length >> 16) as u8,
            (length >> 8) as u8,
            length as u8,
            kind,
            flags,
            0,
            0,
            0,
            1,
        ];
        out.extend_from_slice(payload);
        out
    }

    /// A node's frames: what the codec must see, and the whole stream with the empty
    /// zero-length DATA frames the filter takes out.
    fn frames() -> (Vec<u8>, Vec<u8>) {
        let (mut codec, mut node) = (Vec::new(), Vec::new());
        let mut both = |bytes: Vec<u8>, kept: bool| {
            if kept {
                codec.extend_from_slice(&bytes);
            }
            node.extend(bytes);
        };
        both(frame(0x4, 0, &[0, 3, 0, 0, 0, 100]), true); // SETTINGS
        both(frame(0x1, 0x4, &[0x88]), true); // HEADERS :status 200
        both(frame(DATA, 0, &[]), false); // empty: taken out
        both(frame(DATA, 0, b"body"), true);
        both(frame(DATA, PADDED, &[3, 0, 0, 0]), true); // padding only: counted
        both(frame(DATA, PADDED, &[1, b'x', 0]), true); // one byte of data
        both(frame(DATA, END_STREAM, &[]), true); // ends its stream
        both(frame(DATA, END_STREAM | PADDED, &[0]), true);
        both(frame(0x6, 0, &[0; 8]), true); // PING, 8 bytes of zeros
        both(frame(DATA, 0, &[]), false);
        both(frame(DATA, 0, &[]), false);
        both(frame(0x0, 0, &[0; 9]), true); // nine bytes of data that look like a header
        (codec, node)
    }

    #[test]
    fn takes_out_empty_frames_and_counts_padded_ones_however_the_bytes_are_cut() {
        let (codec, node) = frames();
        for cut in 1..=node.len() {
            let mut scanner = Scanner::new();
            let (mut out, mut held) = (Vec::new(), Vec::new());
            for piece in node.chunks(cut) {
                let mut bytes = held.clone();
                bytes.extend_from_slice(piece);
                let (kept, rest) = scanner.filter(&mut bytes);
                held = bytes[rest..].to_vec();
                out.extend_from_slice(&bytes[..kept]);
            }
            assert!(held.is_empty(), "in pieces of {cut}");
            assert_eq!(out, codec, "in pieces of {cut}");
            assert_eq!(
                (scanner.empty, scanner.stripped),
                (1, 3),
                "in pieces of {cut}"
            );
        }
    }

    #[tokio::test]
    async fn the_codec_reads_the_frames_without_the_empty_ones() {
        use tokio::io::AsyncReadExt;
        let (codec, node) = frames();
        for cut in [1, 5, 9, 10, 64] {
            let (mut near, far) = tokio::io::duplex(64);
            let counted = Arc::new(AtomicU32::new(0));
            let mut watched = Watched::new(
                far,
                (Weak::new(), 1),
                (Arc::clone(&counted), Arc::new(watch::channel(false).0)),
            );
            let bytes = node.clone();
            let writer = tokio::spawn(async move {
                use tokio::io::AsyncWriteExt;
                for piece in bytes.chunks(cut) {
                    near.write_all(piece).await.unwrap();
                    tokio::task::yield_now().await;
                }
            });
            let mut read = vec![0u8; codec.len()];
            watched.read_exact(&mut read).await.unwrap();
            assert_eq!(read, codec, "written in pieces of {cut}");
            writer.await.unwrap();
            let mut rest = Vec::new();
            watched.read_to_end(&mut rest).await.unwrap();
            assert!(rest.is_empty(), "{rest:?}");
            assert_eq!(counted.load(Ordering::Relaxed), 1);
        }
    }
}
