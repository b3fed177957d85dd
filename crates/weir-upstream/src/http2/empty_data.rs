//! Empty DATA frames from a node, counted so that its connection is retired before the
//! codec's bound closes it under its streams.
//!
//! The `h2` codec allows 100 empty DATA frames that do not end their stream over a
//! connection's whole life (`MAX_RECV_EMPTY_DATA_FRAMES`, a defence against CVE-2019-9518
//! that never decays), then closes the connection with `ENHANCE_YOUR_CALM`, failing every
//! stream in flight on it. An empty DATA frame is legal (a server's flush before its body),
//! and a node that sends one per response would have its shared, long-lived connection
//! killed every hundred responses. [`Watched`] reads the frame headers of what the node
//! sends (a few compares per frame; payloads are skipped) and keeps the count where the
//! node's pool sees it: a connection takes a new stream only while the empty frames seen
//! plus its open streams (each may send one more) stay under [`RETIRE_AT`], and at
//! [`RETIRE_AT`] it is taken out of service: those in flight finish, the next request
//! opens a fresh connection.

use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::H2Node;

/// Empty DATA frames seen plus streams open on a connection past which it takes no new
/// stream: under the codec's bound of 100, with room for each open stream to send one more
/// (a node that sends one per response; one that sends several per stream can still pass
/// the bound with many streams open).
pub(super) const RETIRE_AT: u32 = 90;

const FRAME_HEADER: usize = 9;
const DATA: u8 = 0x0;
const END_STREAM: u8 = 0x1;
const PADDED: u8 = 0x8;

/// Where the scanner is in the node's byte stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    /// In a frame header, `have` bytes of it read.
    Header { have: usize },
    /// The pad length of a padded DATA frame not ending its stream, of `length` bytes.
    PadLength { length: usize },
    /// In a payload, `left` bytes to skip.
    Payload { left: usize },
}

/// Counts the empty DATA frames not ending their stream (the codec's count: the payload
/// after padding is removed) in the bytes a node sends.
#[derive(Debug)]
pub(super) struct Scanner {
    at: At,
    header: [u8; FRAME_HEADER],
    /// Empty DATA frames seen.
    pub(super) empty: u32,
}

impl Scanner {
    pub(super) fn new() -> Scanner {
        Scanner {
            at: At::Header { have: 0 },
            header: [0; FRAME_HEADER],
            empty: 0,
        }
    }

    /// Reads `bytes`, the next the node sent.
    pub(super) fn scan(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            match self.at {
                At::Header { have } => {
                    let take = (FRAME_HEADER - have).min(bytes.len());
                    self.header[have..have + take].copy_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    if have + take < FRAME_HEADER {
                        self.at = At::Header { have: have + take };
                        continue;
                    }
                    let length = usize::from(self.header[0]) << 16
                        | usize::from(self.header[1]) << 8
                        | usize::from(self.header[2]);
                    let (kind, flags) = (self.header[3], self.header[4]);
                    let counted = kind == DATA && flags & END_STREAM == 0;
                    self.at = match (counted, flags & PADDED != 0) {
                        (true, true) if length > 0 => At::PadLength { length },
                        (true, false) if length == 0 => {
                            self.empty = self.empty.saturating_add(1);
                            At::Header { have: 0 }
                        }
                        _ if length == 0 => At::Header { have: 0 },
                        _ => At::Payload { left: length },
                    };
                }
                At::PadLength { length } => {
                    // All of the payload after the pad length byte is padding: nothing.
                    if usize::from(bytes[0]) + 1 == length {
                        self.empty = self.empty.saturating_add(1);
                    }
                    bytes = &bytes[1..];
                    self.at = match length - 1 {
                        0 => At::Header { have: 0 },
                        left => At::Payload { left },
                    };
                }
                At::Payload { left } => {
                    let take = left.min(bytes.len());
                    bytes = &bytes[take..];
                    self.at = match left - take {
                        0 => At::Header { have: 0 },
                        left => At::Payload { left },
                    };
                }
            }
        }
    }
}

/// A node connection's stream, its incoming frames scanned (see the module's notes).
#[derive(Debug)]
pub(super) struct Watched<S> {
    inner: S,
    scanner: Scanner,
    node: Weak<H2Node>,
    id: u64,
    /// The count, where the node's pool reads it.
    shared: Arc<AtomicU32>,
    retired: bool,
}

impl<S> Watched<S> {
    /// Connection `id` of `node`, counting into `shared`.
    pub(super) fn new(
        inner: S,
        (node, id): (Weak<H2Node>, u64),
        shared: Arc<AtomicU32>,
    ) -> Watched<S> {
        Watched {
            inner,
            scanner: Scanner::new(),
            node,
            id,
            shared,
            retired: false,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if polled.is_ready() && !self.retired {
            let this = &mut *self;
            let seen = this.scanner.empty;
            this.scanner.scan(&buf.filled()[before..]);
            if this.scanner.empty > seen {
                this.shared.store(this.scanner.empty, Ordering::Relaxed);
            }
            if this.scanner.empty >= RETIRE_AT
                && let Some(node) = this.node.upgrade()
            {
                this.retired = true;
                tracing::debug!(
                    node = %node.address,
                    empty_data_frames = this.scanner.empty,
                    "HTTP/2 connection to the node retired before the codec's bound on empty DATA frames"
                );
                node.drain(this.id, false);
            }
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

    #[test]
    fn counts_what_the_codec_counts_however_the_bytes_are_cut() {
        let mut stream = Vec::new();
        stream.extend(frame(0x4, 0, &[0, 3, 0, 0, 0, 100])); // SETTINGS
        stream.extend(frame(0x1, 0x4, &[0x88])); // HEADERS :status 200
        stream.extend(frame(DATA, 0, &[])); // counted
        stream.extend(frame(DATA, 0, b"body")); // data
        stream.extend(frame(DATA, PADDED, &[3, 0, 0, 0])); // padding only: counted
        stream.extend(frame(DATA, PADDED, &[1, b'x', 0])); // one byte of data
        stream.extend(frame(DATA, END_STREAM, &[])); // ends its stream: not counted
        stream.extend(frame(DATA, END_STREAM | PADDED, &[0])); // ends its stream
        stream.extend(frame(0x6, 0, &[0; 8])); // PING, 8 bytes of zeros
        stream.extend(frame(DATA, 0, &[])); // counted
        for cut in 1..stream.len() {
            let mut scanner = Scanner::new();
            for piece in stream.chunks(cut) {
                scanner.scan(piece);
            }
            assert_eq!(scanner.empty, 3, "in pieces of {cut}");
            assert_eq!(scanner.at, At::Header { have: 0 });
        }
    }
}
