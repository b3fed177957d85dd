//! One connection's driver: reads request heads and bodies, answers them in order (batching the
//! answers to pipelined requests into one write) and closes when asked, on bad input, when idle
//! or at shutdown. The states are written down in `LIFECYCLE.md` beside this crate.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::{Instant, timeout, timeout_at};
use tracing::debug;
use weir_core::ShutdownSignal;

use crate::body::BodyDecoder;
use crate::echo::EchoReport;
use crate::request::{self, BodyFraming, RequestHead, Version};
use crate::response::{
    ConnectionHeader, DateCache, LAST_CHUNK, PATTERN_BLOCK, PATTERN_BLOCK_BYTES, ResponseFraming,
    ResponseHead, is_bodiless, reason, write_chunk, write_chunk_size,
};
use crate::routes::{self, Content, Plan};
use crate::shared::Shared;
use crate::stats::OpenConnection;

/// Spare room made in the input buffer before each read.
const READ_RESERVE: usize = 16 * 1024;
/// Pending output is written once it reaches this size, even mid-batch.
const FLUSH_AT: usize = 32 * 1024;
/// `/bytes` bodies up to this size are copied behind the head and sent in the same write.
const INLINE_BODY_MAX: u64 = 32 * 1024;
/// `/echo` keeps at most this much request body; more is answered with 413.
const MAX_ECHO_BODY: u64 = 16 * 1024 * 1024;
/// Buffers that grew past this for one large message are shrunk back afterwards.
const KEEP_BUFFER: usize = 256 * 1024;
/// After sending FIN, read and drop what the client still sends for at most this long...
const LINGER_TIME: Duration = Duration::from_secs(1);
/// ...or this many bytes.
const LINGER_BYTES: usize = 256 * 1024;
const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";
const TEXT: &str = "text/plain; charset=utf-8";
const JSON: &str = "application/json";
const OCTETS: &str = "application/octet-stream";

/// Serves one accepted connection until it closes; errors end it with one debug line.
/// Generic over the stream, so plain TCP and TLS each get their own compiled copy and plain
/// TCP pays nothing for TLS.
pub(crate) async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    stream: S,
    peer: SocketAddr,
    shared: Arc<Shared>,
    shutdown: ShutdownSignal,
    open: OpenConnection,
) {
    let mut connection = Connection::new(stream, peer, shared, shutdown, open);
    if let Err(error) = connection.run().await {
        debug!(%peer, %error, "origin connection ended by an error");
    }
}

/// The result of waiting for a request head.
enum HeadEvent {
    Request(RequestHead),
    /// Malformed or oversized: answer this status and close.
    Rejected(u16),
    /// The client closed, went idle too long, or shutdown began between requests.
    Closed,
}

/// The result of reading a request body.
enum BodyEvent {
    Complete,
    Rejected(u16),
    Closed,
}

/// Where a response body comes from.
#[derive(Debug, Clone, Copy)]
enum BodySource {
    Hello,
    Static(&'static [u8]),
    /// Text built in the scratch buffer.
    Text,
    /// JSON built in the scratch buffer.
    Json,
    /// N bytes of the body pattern.
    Pattern(u64),
}

struct Connection<S> {
    stream: S,
    peer: SocketAddr,
    shared: Arc<Shared>,
    shutdown: ShutdownSignal,
    idle_timeout: Duration,
    input: BytesMut,
    output: Vec<u8>,
    /// Bodies built per response (text with numbers, JSON).
    scratch: Vec<u8>,
    /// A copy of the current `/echo` request head and its decoded body.
    echo_head: Vec<u8>,
    echo_body: Vec<u8>,
    date: DateCache,
    /// `per_connection_memory` bytes, held and touched for the connection's life.
    _ballast: Vec<u8>,
    /// Counts this connection as open until it drops.
    _open: OpenConnection,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Connection<S> {
    fn new(
        stream: S,
        peer: SocketAddr,
        shared: Arc<Shared>,
        shutdown: ShutdownSignal,
        open: OpenConnection,
    ) -> Connection<S> {
        Connection {
            stream,
            peer,
            idle_timeout: shared.options.idle_timeout,
            _ballast: shared.ballast(),
            shared,
            shutdown,
            input: BytesMut::with_capacity(READ_RESERVE),
            output: Vec::with_capacity(READ_RESERVE),
            scratch: Vec::new(),
            echo_head: Vec::new(),
            echo_body: Vec::new(),
            date: DateCache::new(),
            _open: open,
        }
    }

    /// The request loop: head → body → (delay) → response, until something closes it.
    async fn run(&mut self) -> io::Result<()> {
        loop {
            let head = match self.read_head().await? {
                HeadEvent::Request(head) => head,
                HeadEvent::Rejected(status) => return self.reject(status).await,
                HeadEvent::Closed => return self.close_idle().await,
            };
            self.shared.stats.count_request();
            let plan = routes::plan(&self.input[head.target.clone()]);
            let echo = matches!(
                plan,
                Ok(Plan {
                    content: Content::Echo,
                    ..
                })
            );
            if echo {
                self.echo_head.clear();
                self.echo_head
                    .extend_from_slice(&self.input[..head.head_len]);
            }
            self.input.advance(head.head_len);
            match self.read_body(&head, echo).await? {
                BodyEvent::Complete => {}
                BodyEvent::Rejected(status) => return self.reject(status).await,
                BodyEvent::Closed => return Ok(()),
            }
            let plan = match plan {
                Ok(plan) => plan,
                Err(error) => {
                    debug!(peer = %self.peer, %error, "origin refused a request target");
                    return self.reject(400).await;
                }
            };
            if plan.delay_ms > 0 {
                self.flush().await?;
                tokio::time::sleep(Duration::from_millis(plan.delay_ms)).await;
            }
            // A 1xx sent as a final answer leaves the framing of what follows undefined: close.
            let close = head.wants_close
                || !self.shared.options.keep_alive
                || self.shutdown.is_triggered()
                || plan.status < 200;
            self.respond(&head, &plan, close).await?;
            self.trim_buffers();
            if close {
                // A client that asked to close and sent nothing more needs no lingering.
                let linger = !head.wants_close || !self.input.is_empty();
                return self.close(linger).await;
            }
        }
    }

    /// Waits until the input holds a complete head. Pending output is written before each
    /// read, so answers to pipelined requests go out together.
    async fn read_head(&mut self) -> io::Result<HeadEvent> {
        loop {
            if !self.input.is_empty() {
                match request::parse_head(&self.input) {
                    Ok(Some(head)) => return Ok(HeadEvent::Request(head)),
                    Ok(None) => {}
                    Err(error) => {
                        debug!(peer = %self.peer, %error, "origin refused a request head");
                        return Ok(HeadEvent::Rejected(error.status()));
                    }
                }
            }
            self.flush().await?;
            let between_requests = self.input.is_empty();
            if between_requests && self.shutdown.is_triggered() {
                return Ok(HeadEvent::Closed);
            }
            self.input.reserve(READ_RESERVE);
            let read = timeout(self.idle_timeout, self.stream.read_buf(&mut self.input));
            let read = if between_requests {
                tokio::select! {
                    read = read => read,
                    () = self.shutdown.triggered() => return Ok(HeadEvent::Closed),
                }
            } else {
                read.await
            };
            match read {
                Err(_elapsed) => {
                    debug!(peer = %self.peer, "origin closed an idle connection");
                    return Ok(HeadEvent::Closed);
                }
                Ok(Ok(0)) => return Ok(HeadEvent::Closed),
                Ok(Ok(_)) => {}
                Ok(Err(error)) => return Err(error),
            }
        }
    }

    /// Reads exactly one body, keeping it in `echo_body` when `keep` is set.
    async fn read_body(&mut self, head: &RequestHead, keep: bool) -> io::Result<BodyEvent> {
        self.echo_body.clear();
        let mut decoder = match head.framing {
            BodyFraming::None => return Ok(BodyEvent::Complete),
            BodyFraming::Length(length) if keep && length > MAX_ECHO_BODY => {
                return Ok(BodyEvent::Rejected(413));
            }
            BodyFraming::Length(length) => BodyDecoder::length(length),
            BodyFraming::Chunked => BodyDecoder::chunked(),
        };
        let mut continue_sent = !(head.expects_continue && head.version == Version::Http11);
        loop {
            let sink = if keep {
                Some(&mut self.echo_body)
            } else {
                None
            };
            match decoder.decode(&self.input, sink) {
                Ok(consumed) => self.input.advance(consumed),
                Err(error) => {
                    debug!(peer = %self.peer, %error, "origin refused a request body");
                    return Ok(BodyEvent::Rejected(400));
                }
            }
            if decoder.is_done() {
                return Ok(BodyEvent::Complete);
            }
            if self.echo_body.len() as u64 > MAX_ECHO_BODY {
                return Ok(BodyEvent::Rejected(413));
            }
            if !continue_sent {
                self.output.extend_from_slice(CONTINUE);
                continue_sent = true;
            }
            self.flush().await?;
            if self.fill().await? == 0 {
                return Ok(BodyEvent::Closed);
            }
        }
    }

    /// Writes the response head and body into the output (large bodies go straight out).
    async fn respond(&mut self, head: &RequestHead, plan: &Plan, close: bool) -> io::Result<()> {
        let source = self.prepare_body(plan);
        let length = match source {
            BodySource::Hello => self.shared.hello.len() as u64,
            BodySource::Static(bytes) => bytes.len() as u64,
            BodySource::Text | BodySource::Json => self.scratch.len() as u64,
            BodySource::Pattern(length) => length,
        };
        let bodiless = is_bodiless(plan.status);
        // HTTP/1.0 clients cannot read chunked bodies; HEAD answers carry the GET's length.
        let chunked = plan.chunked && head.version == Version::Http11 && !head.is_head_method;
        let framing = if bodiless {
            ResponseFraming::Bodiless
        } else if chunked {
            ResponseFraming::Chunked
        } else {
            ResponseFraming::Length(length)
        };
        let connection = if close {
            ConnectionHeader::Close
        } else if head.version == Version::Http10 {
            ConnectionHeader::KeepAlive
        } else {
            ConnectionHeader::Omitted
        };
        let content_type = match source {
            BodySource::Json => JSON,
            BodySource::Pattern(_) => OCTETS,
            _ => TEXT,
        };
        ResponseHead {
            status: plan.status,
            content_type,
            framing,
            connection,
            max_age: plan.max_age,
        }
        .write(
            &mut self.output,
            &self.shared.fixed_headers,
            self.date.current(),
        );
        if bodiless || head.is_head_method {
            return Ok(());
        }
        let body: &[u8] = match source {
            BodySource::Pattern(length) => return self.write_pattern(length, chunked).await,
            BodySource::Hello => &self.shared.hello,
            BodySource::Static(bytes) => bytes,
            BodySource::Text | BodySource::Json => &self.scratch,
        };
        if chunked {
            write_chunk(&mut self.output, body);
            self.output.extend_from_slice(LAST_CHUNK);
        } else {
            self.output.extend_from_slice(body);
        }
        if self.output.len() >= FLUSH_AT {
            self.flush().await?;
        }
        Ok(())
    }

    /// Builds per-response bodies in `scratch` and says where the body comes from.
    fn prepare_body(&mut self, plan: &Plan) -> BodySource {
        self.scratch.clear();
        match plan.content {
            Content::Hello => BodySource::Hello,
            Content::Health => BodySource::Static(b"ok"),
            Content::NotFound => BodySource::Static(b"not found\n"),
            Content::Bytes(length) => BodySource::Pattern(length),
            Content::Delay => {
                let mut digits = itoa::Buffer::new();
                self.scratch.extend_from_slice(b"delayed ");
                self.scratch
                    .extend_from_slice(digits.format(plan.delay_ms).as_bytes());
                self.scratch.extend_from_slice(b" ms\n");
                BodySource::Text
            }
            Content::Status => {
                let mut digits = itoa::Buffer::new();
                self.scratch
                    .extend_from_slice(digits.format(plan.status).as_bytes());
                self.scratch.push(b' ');
                self.scratch
                    .extend_from_slice(reason(plan.status).as_bytes());
                self.scratch.push(b'\n');
                BodySource::Text
            }
            Content::Echo => {
                let report = EchoReport::new(
                    &self.shared.options.name,
                    self.peer,
                    &self.echo_head,
                    &self.echo_body,
                );
                self.write_json(&report);
                BodySource::Json
            }
            Content::Stats => {
                let snapshot = self.shared.stats.snapshot();
                self.write_json(&snapshot);
                BodySource::Json
            }
        }
    }

    fn write_json(&mut self, value: &impl serde::Serialize) {
        // Serialising plain structs of strings and numbers into a Vec cannot fail; should it
        // ever, the client gets an empty JSON object rather than a broken one.
        if serde_json::to_writer(&mut self.scratch, value).is_err() {
            self.scratch.clear();
            self.scratch.extend_from_slice(b"{}");
        }
    }

    /// Appends or sends `length` bytes of the body pattern from the shared static block.
    async fn write_pattern(&mut self, length: u64, chunked: bool) -> io::Result<()> {
        if length <= INLINE_BODY_MAX {
            let body = &PATTERN_BLOCK[..length as usize];
            if chunked {
                write_chunk(&mut self.output, body);
                self.output.extend_from_slice(LAST_CHUNK);
            } else {
                self.output.extend_from_slice(body);
            }
            if self.output.len() >= FLUSH_AT {
                self.flush().await?;
            }
            return Ok(());
        }
        let mut sent = 0u64;
        while sent < length {
            // Start where the pattern left off; the block is a whole number of patterns.
            let start = (sent % crate::BODY_PATTERN.len() as u64) as usize;
            let piece = usize::try_from(length - sent)
                .map_or(PATTERN_BLOCK_BYTES - start, |left| {
                    left.min(PATTERN_BLOCK_BYTES - start)
                });
            let bytes = &PATTERN_BLOCK[start..start + piece];
            if chunked {
                write_chunk_size(&mut self.output, piece);
                self.output.extend_from_slice(bytes);
                self.output.extend_from_slice(b"\r\n");
                self.flush().await?;
            } else if sent == 0 {
                // The first piece goes out with the head in one write.
                self.output.extend_from_slice(bytes);
                self.flush().await?;
            } else {
                self.write_with_timeout(bytes).await?;
            }
            sent += piece as u64;
        }
        if chunked {
            self.output.extend_from_slice(LAST_CHUNK);
        }
        Ok(())
    }

    /// Answers `status` with a short text body and closes.
    async fn reject(&mut self, status: u16) -> io::Result<()> {
        let mut digits = itoa::Buffer::new();
        let code = digits.format(status).as_bytes();
        let text = reason(status).as_bytes();
        ResponseHead {
            status,
            content_type: TEXT,
            framing: ResponseFraming::Length((code.len() + 1 + text.len() + 1) as u64),
            connection: ConnectionHeader::Close,
            max_age: None,
        }
        .write(
            &mut self.output,
            &self.shared.fixed_headers,
            self.date.current(),
        );
        self.output.extend_from_slice(code);
        self.output.push(b' ');
        self.output.extend_from_slice(text);
        self.output.push(b'\n');
        self.close(true).await
    }

    /// Closes between requests: the client is gone, idle, or shutdown began. A FIN to a client
    /// that already closed fails harmlessly, so that failure is not reported.
    async fn close_idle(&mut self) -> io::Result<()> {
        self.flush().await?;
        let _ = self.stream.shutdown().await;
        Ok(())
    }

    /// Sends what is pending and FIN. With `linger`, then reads and drops what the client still
    /// sends until it closes (bounded in time and bytes, cut short by shutdown), so unread input
    /// does not turn the close into a reset that could destroy the last response before the
    /// client reads it.
    async fn close(&mut self, linger: bool) -> io::Result<()> {
        self.flush().await?;
        self.stream.shutdown().await?;
        if !linger {
            return Ok(());
        }
        let deadline = Instant::now() + LINGER_TIME;
        let mut drained = 0;
        while drained <= LINGER_BYTES {
            self.input.clear();
            self.input.reserve(READ_RESERVE);
            let read = tokio::select! {
                read = timeout_at(deadline, self.stream.read_buf(&mut self.input)) => read,
                () = self.shutdown.triggered() => break,
            };
            match read {
                Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
                Ok(Ok(read)) => drained += read,
            }
        }
        Ok(())
    }

    /// Reads more input; 0 means the client closed.
    async fn fill(&mut self) -> io::Result<usize> {
        self.input.reserve(READ_RESERVE);
        timeout(self.idle_timeout, self.stream.read_buf(&mut self.input))
            .await
            .unwrap_or_else(|_elapsed| Err(timed_out("read")))
    }

    /// Writes all pending output.
    async fn flush(&mut self) -> io::Result<()> {
        if self.output.is_empty() {
            return Ok(());
        }
        let written = timeout(self.idle_timeout, self.stream.write_all(&self.output)).await;
        self.output.clear();
        written.unwrap_or_else(|_elapsed| Err(timed_out("write")))
    }

    async fn write_with_timeout(&mut self, bytes: &[u8]) -> io::Result<()> {
        timeout(self.idle_timeout, self.stream.write_all(bytes))
            .await
            .unwrap_or_else(|_elapsed| Err(timed_out("write")))
    }

    /// Gives back memory that one large message made a buffer take.
    fn trim_buffers(&mut self) {
        if self.output.is_empty() && self.output.capacity() > KEEP_BUFFER {
            self.output = Vec::with_capacity(READ_RESERVE);
        }
        if self.input.is_empty() && self.input.capacity() > KEEP_BUFFER {
            self.input = BytesMut::with_capacity(READ_RESERVE);
        }
        for buffer in [&mut self.scratch, &mut self.echo_head, &mut self.echo_body] {
            if buffer.capacity() > KEEP_BUFFER {
                *buffer = Vec::new();
            }
        }
    }
}

fn timed_out(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, format!("{what} timed out"))
}
