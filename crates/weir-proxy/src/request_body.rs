//! The request body: read (up to `request_buffer`) before a node is chosen,
//! so a slow client never holds an upstream connection while it uploads; the
//! rest, if any, streams to the node with backpressure.
//!
//! A body must keep up with three clocks ([`BodyClock`]): no pause longer than
//! `body_read`, the whole body within `body_total`, and an average of
//! `min_body_rate` bytes per second once `body_read` has passed. Writes to the
//! node may stall at most the pool's `timeouts.write`, and a node that answers
//! before the body is done (a 413, say) has its answer relayed (an early
//! success once the node stops reading, see [`stream_rest`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;
use weir_core::{Error, ErrorKind, Side};
use weir_http::{
    BodyFraming, ChunkedDecoder, Decoded, Limits, Method, Parsed, RequestHead, encode_chunk,
    encode_last_chunk, filter_trailers_but, parse_response,
};
use weir_tls::ClientStream;

use crate::MAX_REQUEST_TRAILER_BYTES;
use crate::answer::Failure;
use crate::client::Client;

mod h2;
use crate::route::VirtualServerRuntime;
pub(crate) use h2::{PumpWatch, spawn_h2_pump, stream_rest_h2};

/// The request body as far as it has been read.
#[derive(Debug)]
pub(crate) struct RequestBody {
    /// How the body is framed towards the node.
    pub framing: BodyFraming,
    /// Decoded body bytes read so far and not yet sent.
    pub buffered: BytesMut,
    /// Trailer lines to send after the last chunk (chunked framing only).
    pub trailers: Bytes,
    pub remaining: Remaining,
    /// Decoded body bytes received from the client in total.
    pub received: u64,
    /// The deadlines the rest of the body must meet.
    pub clock: BodyClock,
    /// Fields weir manages in the header section that the client must not send as
    /// trailers either ([`VirtualServerRuntime::managed_fields`]); taken only by a body that
    /// may end with trailers.
    pub managed_trailers: Option<Arc<[Box<[u8]>]>>,
}

/// Appends the trailer lines of a request body that may go on to `out`
/// ([`weir_http::filter_trailers`], and never one of `managed`, the fields weir manages in
/// the header section: [`RequestBody::managed_trailers`]).
pub(crate) fn keep_trailers(managed: Option<&[Box<[u8]>]>, lines: &[u8], out: &mut BytesMut) {
    filter_trailers_but(lines, out, managed.unwrap_or_default());
}

/// The deadlines and the size bound of one request body, from when its head was read.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BodyClock {
    started: Instant,
    /// Longest pause between reads; also the grace before the rate counts.
    stall: Duration,
    /// The whole body must be in by then; `None`: no such bound.
    total: Option<Instant>,
    /// Average bytes per second after the grace; 0 = no rate check.
    min_rate: u64,
    /// The most body bytes taken (`max_body_bytes`).
    pub(crate) max_body: u64,
}

impl BodyClock {
    /// The clock of a body: the virtual server's limits, except for a gRPC call
    /// (`call`), whose body is a stream of messages as long as the call lasts (a
    /// client-streaming or bidirectional call can send for hours, a message now and
    /// then): its time is bounded by the pause between reads (`body_read`) only, not
    /// by `body_total` nor `min_body_rate`, which are there for uploads that should
    /// end. `max_body_bytes` still bounds its bytes, as `client_max_body_size` does in
    /// nginx: a virtual server that carries long gRPC streams sets it higher. Such a call
    /// holds a stream to its node as long as it lasts, as the client chooses: a
    /// `concurrency_limits` rule bounds how many one client holds.
    pub(crate) fn new(vs: &VirtualServerRuntime, started: Instant, call: bool) -> BodyClock {
        let timeouts = &vs.config.timeouts;
        let limits = &vs.config.limits;
        BodyClock {
            started,
            stall: timeouts.body_read,
            total: (!call).then(|| started + timeouts.body_total),
            min_rate: if call { 0 } else { limits.min_body_rate },
            max_body: limits.max_body_bytes,
        }
    }

    /// When the next bytes must have arrived, with `received` bytes in so far,
    /// and which limit that is.
    pub(crate) fn deadline(&self, received: u64, now: Instant) -> (Instant, &'static str) {
        let mut deadline = (now + self.stall, "request body stalled past body_read");
        if let Some(total) = self.total
            && total < deadline.0
        {
            deadline = (total, "request body not received within body_total");
        }
        if self.min_rate > 0 {
            // At the average rate, `received + 1` bytes are due this long after the grace.
            let due = Duration::from_secs_f64((received + 1) as f64 / self.min_rate as f64);
            let due = self.started + self.stall + due;
            if due < deadline.0 {
                deadline = (due, "request body slower than min_body_rate");
            }
        }
        deadline
    }
}

/// How streaming the rest of a body to the node ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Streamed {
    /// The whole body went to the node.
    Complete,
    /// The node answered (a final response head is in the buffer) before the
    /// body was done, and the rest of the body was not sent: the answer said it
    /// was not wanted, or the node stopped reading it.
    NodeAnswered,
}

/// What of the body is still with the client.
#[derive(Debug)]
pub(crate) enum Remaining {
    /// Nothing: the whole body is in `buffered`.
    Nothing,
    /// This many bytes of a Content-Length body.
    Length(u64),
    /// The rest of a chunked body.
    Chunked(ChunkedDecoder),
}

impl RequestBody {
    /// Appends the trailer lines that may go on to `out` ([`keep_trailers`]).
    pub(crate) fn keep_trailers(&self, lines: &[u8], out: &mut BytesMut) {
        keep_trailers(self.managed_trailers.as_deref(), lines, out);
    }

    /// True when the body has been read completely, so the request can be sent again.
    pub(crate) fn is_complete(&self) -> bool {
        matches!(self.remaining, Remaining::Nothing)
    }

    /// Appends the buffered part, framed for the node, to `out`; of one larger than `copied`
    /// only the framing before its data, returning the framing after it (a chunk's end, the
    /// last chunk and trailers): the data is then written from `buffered` itself, between
    /// the two, and not copied (`request_buffer` may hold a GiB).
    pub(crate) fn write_buffered_up_to(
        &self,
        out: &mut BytesMut,
        copied: usize,
    ) -> Option<BytesMut> {
        if self.buffered.len() <= copied {
            self.write_buffered(out);
            return None;
        }
        let mut after = BytesMut::new();
        if self.framing == BodyFraming::Chunked {
            weir_http::encode_chunk_header(self.buffered.len(), out);
            after.extend_from_slice(b"\r\n");
            if self.is_complete() {
                encode_last_chunk(&self.trailers, &mut after);
            }
        }
        Some(after)
    }

    /// Appends the buffered part (framed for the node) to `out`.
    pub(crate) fn write_buffered(&self, out: &mut BytesMut) {
        if self.framing == BodyFraming::Chunked {
            encode_chunk(&self.buffered, out);
            if self.is_complete() {
                encode_last_chunk(&self.trailers, out);
            }
        } else {
            out.extend_from_slice(&self.buffered);
        }
    }
}

/// A buffered body larger than this leaves the read buffer's tail an allocation of its
/// own ([`read_length`]); the size the buffer pool keeps (`buffers.rs`).
const SHARED_TAIL_LIMIT: usize = 64 * 1024;

fn too_large() -> Failure {
    Failure::from_error(Error::new(ErrorKind::BodyTooLarge, Side::Downstream))
}

/// The fields a request's trailers must not carry: those weir manages on the virtual
/// server ([`VirtualServerRuntime::managed_fields`]) and those the request's rules set,
/// add or remove (`edits`), which a node merging trailers into the header section would
/// otherwise take from the client.
fn managed_with(
    vs: &VirtualServerRuntime,
    edits: &weir_rules::HeaderEdits,
) -> Option<Arc<[Box<[u8]>]>> {
    if edits.is_empty() {
        return vs.managed_fields.clone();
    }
    let managed = vs
        .managed_fields
        .iter()
        .flat_map(|names| names.iter().cloned());
    let edited = edits
        .removed()
        .chain(edits.appended().map(|(name, _)| name))
        .map(Box::from);
    Some(managed.chain(edited).collect())
}

/// Reads the body's first `request_buffer` bytes (all of it, if it fits).
pub(crate) async fn read(
    client: &mut Client,
    vs: &VirtualServerRuntime,
    head: &RequestHead,
    edits: &weir_rules::HeaderEdits,
) -> Result<RequestBody, Failure> {
    // A gRPC call only over HTTP/2, which every gRPC stack speaks: over HTTP/1.1 the content
    // type is only a label a client chose, and must not lift the upload clocks nor buffering.
    let call = client.h2().is_some() && is_grpc(head.header("content-type"));
    let mut body = RequestBody {
        framing: head.framing(),
        buffered: BytesMut::new(),
        trailers: Bytes::new(),
        remaining: Remaining::Nothing,
        received: 0,
        clock: BodyClock::new(vs, Instant::now(), call),
        // Trailers come only after chunks, or after an HTTP/2 client's DATA.
        managed_trailers: match head.framing() {
            BodyFraming::Chunked => managed_with(vs, edits),
            BodyFraming::Length(_) if client.h2().is_some() => managed_with(vs, edits),
            _ => None,
        },
    };
    let read = match head.framing() {
        BodyFraming::None | BodyFraming::CloseDelimited => {
            body.framing = BodyFraming::None;
            Ok(())
        }
        BodyFraming::Length(length) => read_length(client, vs, head, &mut body, length).await,
        // A gRPC call's body is a stream of messages (client and bidirectional
        // streaming): it goes on as it comes, nothing waited for before the node.
        BodyFraming::Chunked if call => {
            body.remaining = Remaining::Chunked(ChunkedDecoder::new(MAX_REQUEST_TRAILER_BYTES));
            Ok(())
        }
        BodyFraming::Chunked => read_chunked(client, vs, head, &mut body).await,
    };
    match read {
        Ok(()) => Ok(body),
        Err(failure) => Err(failure.with_body(body.received)),
    }
}

/// Whether a `content-type` is gRPC's (`application/grpc`, `application/grpc+proto`, ...).
/// Asked of every request routed to an HTTP/1.1 pool and of every response,
/// so it compares in place instead of lowering a copy.
pub(crate) fn is_grpc(content_type: Option<&[u8]>) -> bool {
    media_type_is(content_type, b"application/grpc", b"+;")
}

/// Whether a `Content-Type` value starts with the media type `name` (ASCII case aside),
/// followed by nothing or one of the bytes in `after` (`;` before parameters, `+` before a
/// structured suffix). Compared in place; its last byte first, which rules out nearly
/// every other type at once.
pub(crate) fn media_type_is(content_type: Option<&[u8]>, name: &[u8], after: &[u8]) -> bool {
    content_type.is_some_and(|value| {
        value.len() >= name.len()
            && value[name.len() - 1].eq_ignore_ascii_case(&name[name.len() - 1])
            && value[..name.len()].eq_ignore_ascii_case(name)
            && value
                .get(name.len())
                .is_none_or(|next| after.contains(next))
    })
}

async fn read_length(
    client: &mut Client,
    vs: &VirtualServerRuntime,
    head: &RequestHead,
    body: &mut RequestBody,
    length: u64,
) -> Result<(), Failure> {
    let limits = &vs.config.limits;
    if length > body.clock.max_body {
        return Err(too_large());
    }
    continue_if_expected(client, vs, head).await?;
    let want = length.min(limits.request_buffer as u64) as usize;
    while client.read_buf.len() < want {
        let (deadline, late) = body
            .clock
            .deadline(client.read_buf.len() as u64, Instant::now());
        client.read_more(deadline, late).await?;
    }
    let take = (client.read_buf.len() as u64).min(length) as usize;
    body.buffered = client.read_buf.split_to(take);
    if body.buffered.len() > SHARED_TAIL_LIMIT {
        // The body takes the read buffer's allocation with it, and what follows it in the
        // buffer (little, often nothing) would share that allocation: kept by the connection
        // or a buffer pool as a small buffer, it would pin the whole body's memory after the
        // body is gone. It moves to an allocation of its own.
        client.read_buf = BytesMut::from(&client.read_buf[..]);
    }
    body.received = take as u64;
    if (take as u64) < length {
        body.remaining = Remaining::Length(length - take as u64);
    } else if let Some(stream) = client.h2() {
        // The whole body: an HTTP/2 stream must end here, or the request is malformed.
        let (deadline, late) = body.clock.deadline(length, Instant::now());
        // Boxed: only HTTP/2 requests wait here, and inline its timers would make every
        // request's future larger.
        let trailers = Box::pin(stream.length_ended(deadline, late))
            .await
            .map_err(Failure::from_error)?;
        // Only an HTTP/2 node can be given them: a length is how an HTTP/1.1 node is.
        if let Some(lines) = trailers {
            let mut kept = BytesMut::new();
            body.keep_trailers(&lines, &mut kept);
            body.trailers = kept.freeze();
        }
    }
    Ok(())
}

async fn read_chunked(
    client: &mut Client,
    vs: &VirtualServerRuntime,
    head: &RequestHead,
    body: &mut RequestBody,
) -> Result<(), Failure> {
    let limits = &vs.config.limits;
    continue_if_expected(client, vs, head).await?;
    let mut decoder = ChunkedDecoder::new(MAX_REQUEST_TRAILER_BYTES);
    loop {
        match decoder
            .decode(&mut client.read_buf)
            .map_err(Failure::parse)?
        {
            Decoded::Data(data) => {
                body.received += data.len() as u64;
                // What came, and what the chunk still announces: past the bound, the 413
                // comes before any of it is buffered (and so before the node is asked).
                if announced_too_much(body.received, &decoder, body.clock.max_body) {
                    return Err(too_large());
                }
                body.buffered.extend_from_slice(&data);
                if body.buffered.len() >= limits.request_buffer {
                    body.remaining = Remaining::Chunked(decoder);
                    return Ok(());
                }
            }
            Decoded::NeedMore => {
                if announced_too_much(body.received, &decoder, body.clock.max_body) {
                    return Err(too_large());
                }
                let (deadline, late) = body.clock.deadline(body.received, Instant::now());
                client.read_more(deadline, late).await?;
            }
            Decoded::Done { trailers } => {
                let mut kept = BytesMut::new();
                body.keep_trailers(&trailers, &mut kept);
                if kept.is_empty() {
                    // The whole body is here: send it with a length.
                    body.framing = BodyFraming::Length(body.buffered.len() as u64);
                } else {
                    body.trailers = kept.freeze();
                }
                return Ok(());
            }
        }
    }
}

/// Whether the chunk being read declares more than `max_body_bytes` leaves: the 413 is
/// answered at its chunk-size line, as for a `Content-Length` past the bound, not after
/// the bound's worth of it was read (and sent on).
fn announced_too_much(received: u64, decoder: &ChunkedDecoder, max_body: u64) -> bool {
    received.saturating_add(decoder.announced()) > max_body
}

/// Answers `Expect: 100-continue` ourselves: the body is read by weir, not the node.
async fn continue_if_expected(
    client: &mut Client,
    vs: &VirtualServerRuntime,
    head: &RequestHead,
) -> Result<(), Failure> {
    if !(head.expects_continue() && client.read_buf.is_empty()) {
        return Ok(());
    }
    if let Some(stream) = client.h2() {
        stream.send_interim(crate::http2::Head::Written(
            100,
            b"HTTP/1.1 100 Continue\r\n\r\n",
        ))?;
        return Ok(());
    }
    if head.version() == weir_http::Version::Http11 {
        client
            .send(b"HTTP/1.1 100 Continue\r\n\r\n", vs.config.timeouts.write)
            .await?;
    }
    Ok(())
}

/// Streams the rest of the body from the client to the node, while watching
/// the node for an early answer. `answer` receives whatever the node sends
/// meanwhile; on [`Streamed::NodeAnswered`] it holds a final response head.
///
/// An early answer that still wants the body (a 2xx or 3xx that keeps the
/// connection, RFC 9112 §9.5: only a server that is closing is spared the
/// rest) waits in `answer` while the rest of the body goes on, as long as
/// what the node sends meanwhile fits `limits.response_buffer`; past it (a
/// node that answers as it reads, such as an echo) the body ends there, the
/// node's side is shut so that its answer ends too, and the answer is
/// relayed, as for any other early answer (an error, or one that closes).
/// A node that answered so and then stops reading for
/// [`HELD_ANSWER_PATIENCE`] is taken at its word: its side is shut and the
/// answer relayed, rather than the client waiting for the pool's write timeout.
/// If the node stops reading the body, an answer it sent first (say a 413
/// before its close) is still relayed.
pub(crate) async fn stream_rest(
    client: &mut Client,
    vs: &VirtualServerRuntime,
    head: &RequestHead,
    body: &mut RequestBody,
    node: &mut ClientStream,
    write_stall: Duration,
    answer: &mut BytesMut,
) -> Result<Streamed, Failure> {
    let (mut node_read, mut node_write) = tokio::io::split(node);
    let limits = &vs.head_limits;
    let hold = vs.config.limits.response_buffer.max(4096);
    let blocked = Blocked::new();
    {
        let pump = async {
            let writes = NodeWrites {
                stall: write_stall,
                blocked: &blocked,
            };
            pump(client, body, &mut node_write, writes).await?;
            // A no-op on plain TCP; on TLS it pushes the last records out.
            writes.step(node_write.flush()).await
        };
        tokio::pin!(pump);
        // Set once the node answered early and still wants the body.
        let mut holding = false;
        let mut scan = EarlyAnswer::default();
        let check = tokio::time::sleep(HELD_ANSWER_PATIENCE);
        tokio::pin!(check);
        loop {
            answer.reserve(4096);
            tokio::select! {
                biased;
                read = node_read.read_buf(answer) => match read {
                    Ok(n) if n > 0 => {
                        if !holding {
                            match scan.look(answer, limits, head.method()) {
                                None => {}
                                Some(true) => {
                                    holding = true;
                                    check.as_mut().reset(Instant::now() + HELD_ANSWER_CHECK);
                                }
                                Some(false) => return Ok(Streamed::NodeAnswered),
                            }
                        }
                        if holding && answer.len() >= hold {
                            break;
                        }
                    }
                    // What the node sent, and its end or failure, are for the response stage.
                    _ if holding => return Ok(Streamed::NodeAnswered),
                    Ok(_) => return Err(node_failed("node closed the connection during the request body")),
                    Err(error) => {
                        return Err(Failure::from_error(
                            Error::upstream(ErrorKind::BadResponse, error)
                                .context("node failed during the request body"),
                        ));
                    }
                },
                pumped = &mut pump => {
                    return match pumped {
                        Ok(()) => Ok(Streamed::Complete),
                        Err(failure) if failure.error.side() == Side::Upstream => {
                            if holding || answered_before(&mut node_read, answer, (&mut scan, limits), head.method()).await {
                                Ok(Streamed::NodeAnswered)
                            } else {
                                Err(failure)
                            }
                        }
                        Err(failure) => Err(failure),
                    };
                }
                () = &mut check, if holding => {
                    let now = Instant::now();
                    if blocked.longer_than(now, HELD_ANSWER_PATIENCE) {
                        break;
                    }
                    check.as_mut().reset(now + HELD_ANSWER_CHECK);
                }
            }
        }
    }
    // A node that answers as it reads (an echo) and has sent more than weir holds, or
    // that answered and stopped reading: the answer must move now, and weir relays one
    // way at a time, so the rest of the body stays with the client (as for an answer that
    // does not want it). The node is told that no more is coming, so that its answer ends
    // rather than waits for the rest (on TLS the alert may find no room: bounded).
    let _ =
        weir_core::timeout::timeout(write_stall.min(ANSWER_AFTER_CUT), node_write.shutdown()).await;
    Ok(Streamed::NodeAnswered)
}

/// How long a node that answered early (a 2xx or 3xx that keeps the
/// connection) may leave a write of the body waiting before weir relays its
/// answer and stops the body there. A node reading at its own pace keeps it
/// going; one that never reads again would hold the client until the pool's
/// write timeout for an answer already given.
const HELD_ANSWER_PATIENCE: Duration = Duration::from_secs(2);

/// How often a held answer's body writes are looked at.
const HELD_ANSWER_CHECK: Duration = Duration::from_millis(250);

/// How long a node that stopped reading the body is given for the answer it
/// may have sent before (usually already in the socket).
const ANSWER_AFTER_CUT: Duration = Duration::from_millis(200);

/// Whether a node that stopped reading the body had sent a final response
/// head first: what is left to read of it, within [`ANSWER_AFTER_CUT`].
async fn answered_before<R: AsyncReadExt + Unpin>(
    node: &mut R,
    answer: &mut BytesMut,
    (scan, limits): (&mut EarlyAnswer, &Limits),
    method: Method,
) -> bool {
    let deadline = Instant::now() + ANSWER_AFTER_CUT;
    loop {
        if scan.look(answer, limits, method).is_some() {
            return true;
        }
        answer.reserve(4096);
        match tokio::time::timeout_at(deadline, node.read_buf(answer)).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => return false,
        }
    }
}

/// Reads what a node sends before the end of the request body, as it grows: the interim
/// responses passed over so far are not parsed again, and past
/// [`crate::MAX_INTERIM_RESPONSES`] of them the node has answered, badly (the
/// response stage reads the same bytes and answers 502). Without that bound a node
/// sending 1xx responses without end while it read the body made weir keep them all and
/// parse them all again at each read.
#[derive(Debug, Default)]
struct EarlyAnswer {
    /// Bytes of the interim responses passed over.
    passed: usize,
    interims: u32,
}

impl EarlyAnswer {
    /// What the answer in `buf` says: `None` while it holds no final head yet (interim
    /// responses are passed over); `Some(true)` for a final head that still wants the body
    /// (2xx or 3xx, the connection kept); `Some(false)` for any other (or for bytes that
    /// are no response at all, or too many interim ones, which the response stage answers
    /// 502 for).
    fn look(&mut self, buf: &[u8], limits: &Limits, method: Method) -> Option<bool> {
        loop {
            match parse_response(&buf[self.passed..], limits, method) {
                Ok(Parsed::Complete(response, used))
                    if response.is_interim() && response.status() != 101 =>
                {
                    self.passed += used;
                    self.interims += 1;
                    if self.interims > crate::MAX_INTERIM_RESPONSES {
                        return Some(false);
                    }
                }
                Ok(Parsed::Complete(response, _)) => {
                    // (A 101 switches protocols: what follows is not the body.)
                    let success = (200..400).contains(&response.status());
                    return Some(success && response.keep_alive());
                }
                Err(_) => return Some(false),
                Ok(Parsed::Partial) => return None,
            }
        }
    }
}

#[cfg(test)]
fn early_answer(buf: &[u8], limits: &Limits, method: Method) -> Option<bool> {
    EarlyAnswer::default().look(buf, limits, method)
}

fn node_failed(context: &'static str) -> Failure {
    Failure::from_error(Error::new(ErrorKind::BadResponse, Side::Upstream).context(context))
}

/// How writes of the body to the node are bounded and watched.
#[derive(Clone, Copy)]
struct NodeWrites<'a> {
    /// How long one write may stall (the pool's `timeouts.write`).
    stall: Duration,
    /// Whether a write waits, and since when.
    blocked: &'a Blocked,
}

/// Since when a write to the node has waited, if one does (an atomic only
/// because the request's future must be `Send`; one task uses it).
struct Blocked {
    base: Instant,
    /// Microseconds from `base` to the start of the waiting write, plus one;
    /// 0 while no write waits.
    since: AtomicU64,
}

impl Blocked {
    fn new() -> Self {
        Self {
            base: Instant::now(),
            since: AtomicU64::new(0),
        }
    }

    fn start(&self) {
        let micros = self.base.elapsed().as_micros() as u64;
        self.since.store(micros + 1, Ordering::Relaxed);
    }

    fn end(&self) {
        self.since.store(0, Ordering::Relaxed);
    }

    /// Whether a write has waited longer than `patience` at `now`.
    fn longer_than(&self, now: Instant, patience: Duration) -> bool {
        match self.since.load(Ordering::Relaxed) {
            0 => false,
            since => {
                let started = self.base + Duration::from_micros(since - 1);
                now.saturating_duration_since(started) >= patience
            }
        }
    }
}

impl NodeWrites<'_> {
    /// One write to the node, which may stall at most `stall`.
    async fn step(
        self,
        write: impl std::future::Future<Output = std::io::Result<()>>,
    ) -> Result<(), Failure> {
        self.blocked.start();
        let written = weir_core::timeout::timeout(self.stall, write).await;
        self.blocked.end();
        match written {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => Err(Failure::from_error(
                Error::upstream(ErrorKind::BadResponse, error)
                    .context("node stopped reading the request body"),
            )),
            Err(_) => Err(Failure::from_error(
                Error::new(ErrorKind::ResponseTimeout, Side::Upstream)
                    .context("node stopped reading the request body (timeouts.write)"),
            )),
        }
    }

    /// [`NodeWrites::step`], ended early by an HTTP/2 client's reset of its stream: a
    /// node that reads slowly would otherwise hold its connection (and the clients queued
    /// for it) until the write ends or `stall` passes, though nobody waits for the answer.
    /// An HTTP/1.1 client's close is seen at the next read of its body.
    async fn step_for(
        self,
        client: &mut Client,
        write: impl std::future::Future<Output = std::io::Result<()>>,
    ) -> Result<(), Failure> {
        if client.h2().is_none() {
            return self.step(write).await;
        }
        tokio::select! {
            biased;
            written = self.step(write) => written,
            error = client.stream.left(false) => Err(Failure::from_error(error)),
        }
    }
}

/// Chunks of a request body read together go to the node as one chunk of at most about
/// this many bytes (a chunk this large alone goes as it came).
pub(crate) const COALESCE_CHUNKS_UP_TO: usize = 64 * 1024;

/// `pending` as one chunk in `frame` (emptied first), and `pending` emptied.
fn chunk_of(pending: &mut BytesMut, frame: &mut BytesMut) {
    frame.clear();
    encode_chunk(pending, frame);
    pending.clear();
}

/// Moves the rest of the body from the client to the node, piece by piece.
async fn pump<W: AsyncWriteExt + Unpin>(
    client: &mut Client,
    body: &mut RequestBody,
    node: &mut W,
    writes: NodeWrites<'_>,
) -> Result<(), Failure> {
    let clock = body.clock;
    let max_body = clock.max_body;
    match std::mem::replace(&mut body.remaining, Remaining::Nothing) {
        Remaining::Nothing => Ok(()),
        Remaining::Length(mut left) => {
            while left > 0 {
                if client.read_buf.is_empty() {
                    let (deadline, late) = clock.deadline(body.received, Instant::now());
                    client.read_more(deadline, late).await?;
                }
                let take = (client.read_buf.len() as u64).min(left) as usize;
                let piece = client.read_buf.split_to(take);
                writes.step_for(client, node.write_all(&piece)).await?;
                left -= take as u64;
                body.received += take as u64;
            }
            Ok(())
        }
        Remaining::Chunked(mut decoder) => {
            // The data of every chunk already read goes to the node as one chunk, in one
            // write: a client's tiny chunks cost a node write (and a segment) each
            // otherwise. Written whenever the client's bytes run out, so nothing waits.
            let mut pending = BytesMut::new();
            let mut frame = BytesMut::new();
            loop {
                match decoder
                    .decode(&mut client.read_buf)
                    .map_err(Failure::parse)?
                {
                    Decoded::Data(data) => {
                        body.received += data.len() as u64;
                        // What came and what the chunk still announces, before any is sent.
                        if announced_too_much(body.received, &decoder, max_body) {
                            // Nothing went to the client yet: it gets its 413.
                            return Err(Failure::from_error(Error::new(
                                ErrorKind::BodyTooLarge,
                                Side::Downstream,
                            )));
                        }
                        if pending.is_empty() && data.len() >= COALESCE_CHUNKS_UP_TO {
                            frame.clear();
                            encode_chunk(&data, &mut frame);
                            writes.step_for(client, node.write_all(&frame)).await?;
                            continue;
                        }
                        pending.extend_from_slice(&data);
                        if pending.len() >= COALESCE_CHUNKS_UP_TO {
                            chunk_of(&mut pending, &mut frame);
                            writes.step_for(client, node.write_all(&frame)).await?;
                        }
                    }
                    Decoded::NeedMore => {
                        if announced_too_much(body.received, &decoder, max_body) {
                            return Err(too_large());
                        }
                        if !pending.is_empty() {
                            chunk_of(&mut pending, &mut frame);
                            writes.step_for(client, node.write_all(&frame)).await?;
                        }
                        let (deadline, late) = clock.deadline(body.received, Instant::now());
                        client.read_more(deadline, late).await?;
                    }
                    Decoded::Done { trailers } => {
                        let mut kept = BytesMut::new();
                        body.keep_trailers(&trailers, &mut kept);
                        frame.clear();
                        encode_chunk(&pending, &mut frame);
                        encode_last_chunk(&kept, &mut frame);
                        return writes.step_for(client, node.write_all(&frame)).await;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock(min_rate: u64) -> BodyClock {
        let started = Instant::now();
        BodyClock {
            started,
            stall: Duration::from_secs(10),
            total: Some(started + Duration::from_secs(60)),
            min_rate,
            max_body: 1 << 20,
        }
    }

    #[test]
    fn grpc_content_types_are_told_from_others() {
        for grpc in [
            &b"application/grpc"[..],
            b"Application/GRPC",
            b"application/grpc+proto",
            b"application/grpc;charset=utf-8",
        ] {
            assert!(is_grpc(Some(grpc)), "{}", String::from_utf8_lossy(grpc));
        }
        for other in [
            &b"application/grpc-web"[..],
            b"application/grpc-web+proto",
            b"application/grpcx",
            b"application/json",
            b"application/grp",
            b"",
        ] {
            assert!(!is_grpc(Some(other)), "{}", String::from_utf8_lossy(other));
        }
        assert!(!is_grpc(None));
    }

    #[test]
    fn a_pause_is_bounded_by_body_read() {
        let clock = clock(0);
        let (deadline, why) = clock.deadline(0, clock.started);
        assert_eq!(deadline, clock.started + Duration::from_secs(10));
        assert!(why.contains("body_read"));
    }

    #[test]
    fn the_whole_body_is_bounded_by_body_total() {
        let clock = clock(0);
        let now = clock.started + Duration::from_secs(55);
        let (deadline, why) = clock.deadline(1 << 30, now);
        assert_eq!(Some(deadline), clock.total);
        assert!(why.contains("body_total"));
    }

    #[test]
    fn a_slow_body_falls_behind_the_minimum_rate() {
        // 1000 B/s after a 10 s grace: 5000 bytes are due by 15 s.
        let clock = clock(1000);
        let now = clock.started + Duration::from_secs(14);
        let (deadline, why) = clock.deadline(4999, now);
        assert_eq!(deadline, clock.started + Duration::from_secs(15));
        assert!(why.contains("min_body_rate"));
        // A client ahead of the rate only has the pause limit.
        let (deadline, _) = clock.deadline(100_000, now);
        assert_eq!(deadline, now + Duration::from_secs(10));
    }

    #[test]
    fn interim_responses_are_not_an_early_answer() {
        let limits = Limits::default();
        let continued = b"HTTP/1.1 100 Continue\r\n\r\n";
        assert_eq!(early_answer(continued, &limits, Method::Post), None);
        let answered =
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 413 Too Large\r\nContent-Length: 0\r\n\r\n";
        assert_eq!(early_answer(answered, &limits, Method::Post), Some(false));
        let partial = b"HTTP/1.1 413 Too";
        assert_eq!(early_answer(partial, &limits, Method::Post), None);
        let garbage = b"garbage\r\n\r\n";
        assert_eq!(early_answer(garbage, &limits, Method::Post), Some(false));
    }

    /// A node that sends interim responses without end while it reads the body has
    /// answered, badly, past the bound: its 1xx responses are not all kept and parsed.
    #[test]
    fn interim_responses_without_end_are_an_answer() {
        let limits = Limits::default();
        let mut scan = EarlyAnswer::default();
        let mut buf = Vec::new();
        for _ in 0..crate::MAX_INTERIM_RESPONSES {
            buf.extend_from_slice(b"HTTP/1.1 102 Processing\r\n\r\n");
            assert_eq!(scan.look(&buf, &limits, Method::Post), None);
        }
        // Only what came since is read again.
        assert_eq!(scan.passed, buf.len());
        buf.extend_from_slice(b"HTTP/1.1 102 Processing\r\n\r\n");
        assert_eq!(scan.look(&buf, &limits, Method::Post), Some(false));
    }

    /// RFC 9112 §9.5: only an answer from a server that is closing (or an error) spares
    /// the rest of the body; a 2xx that keeps the connection still gets all of it.
    #[test]
    fn an_early_success_that_keeps_the_connection_still_wants_the_body() {
        let limits = Limits::default();
        let early = |head: &[u8]| early_answer(head, &limits, Method::Post);
        assert_eq!(
            early(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"),
            Some(true)
        );
        assert_eq!(
            early(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nearly"),
            Some(true)
        );
        let closing = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\n";
        assert_eq!(early(closing), Some(false));
        // Its end is the connection's: the node is closing.
        assert_eq!(early(b"HTTP/1.1 200 OK\r\n\r\n"), Some(false));
        let error = b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n";
        assert_eq!(early(error), Some(false));
    }
}
