//! The respond stage: the response goes to the client. A body that fits in
//! `response_buffer` is read whole first, so the upstream connection returns
//! to the pool as soon as the node is done — not when a slow client is.
//! Larger bodies stream with backpressure, and so does the rest of a body the
//! node pauses in for [`NODE_PAUSE`] (a progressive answer: flushed HTML, a long
//! poll's events): what came so far goes on at once. Trailers lose the fields that may
//! not travel in them (`weir_http::filter_trailers`).

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::AsyncReadExt;
use tokio::time::Instant;
use weir_core::{Error, ErrorKind, Side};
use weir_http::{
    BodyFraming, ChunkedDecoder, Decoded, ForwardResponse, HeaderEdit, ResponseHead, Version,
    encode_chunk, encode_last_chunk, filter_trailers,
};
use weir_upstream::node::InFlight;

use crate::answer::Failure;
use crate::client::{Client, Downstream};
use crate::exchange::{Exchange, NodeLink};
use crate::http2;
use crate::request_body::PumpWatch;
use crate::route::VirtualServerRuntime;
use crate::traffic::Edits;
use crate::{MAX_TRAILER_BYTES, VIA};

/// How long the node may pause in a body that is being read ahead of the client
/// before what it has sent goes on: a node that pauses is sending progressively
/// (it is not done, so the read-ahead frees nothing), and its client should see
/// each part as it comes. Pauses between a fast node's segments are far shorter.
pub(crate) const NODE_PAUSE: Duration = Duration::from_millis(50);

/// What was sent to the client.
#[derive(Debug)]
pub(crate) struct Sent {
    pub status: u16,
    pub bytes: u64,
    /// Whether the client connection may carry another request.
    pub keep_alive: bool,
    /// What the cache did, for the access log (`None`: the route does not cache).
    pub cache: Option<&'static str>,
    /// `grpc-status` from the trailers (or the head of a trailers-only response).
    pub grpc_status: Option<u32>,
}

/// How long a connection whose node announced a body it cannot have (HEAD,
/// 204, 304) must stay quiet before it carries another request.
const LATE_BODY_GRACE: Duration = Duration::from_millis(50);

/// How the body is read from the node.
enum Source {
    Length(u64),
    Chunked(ChunkedDecoder),
    UntilClose,
}

/// The node's side of a response being relayed.
pub(crate) struct Upstream {
    /// Until the node is done: then released to the pool or closed (an
    /// HTTP/2 stream: its slot freed).
    lease: Option<NodeLink>,
    in_flight: Option<InFlight>,
    /// `None` for a response without a body.
    source: Option<Source>,
    /// The connection may carry another request once this body is read.
    reusable: bool,
    /// ... but only after [`LATE_BODY_GRACE`] without a stray byte.
    quarantine: bool,
    /// Longest wait for the node's next bytes.
    stall: Duration,
    /// The whole body was read ([`Upstream::next_chunk_within`]).
    ended: bool,
    /// The trailer lines that may be forwarded, once a chunked body has ended
    /// ([`Upstream::take_trailers`]).
    trailers: Bytes,
}

/// The body read ahead of the client.
struct Buffered {
    body: BytesMut,
    trailers: Bytes,
    /// The node's whole body is in `body`.
    complete: bool,
}

/// Sends the response in `exchange` to the client and returns the upstream
/// connection to the pool when the node is done with it. `extra` is a field
/// added to the head (the cache status header).
pub(crate) async fn respond(
    client: &mut Client,
    vs: &VirtualServerRuntime,
    exchange: Exchange,
    client_version: Version,
    keep_alive: bool,
    response_timeout: Duration,
    (edits, extra): (&Edits<'_>, Option<(&str, &str)>),
) -> Result<Sent, Failure> {
    let body_cut = exchange.body_cut;
    let from_h2_node = matches!(exchange.lease, NodeLink::Http2 { .. });
    let (mut upstream, response) = Upstream::of(exchange, response_timeout);
    // Buffer as much of the body as fits: all of it, for most responses.
    // A gRPC response is a stream of messages, and server-sent events a stream of events:
    // each goes on as it comes.
    let content_type = response.header("content-type");
    let streamed = crate::request_body::is_grpc(content_type) || is_event_stream(content_type);
    let limit = match streamed {
        true => 0,
        false => vs.config.limits.response_buffer,
    };
    let buffered = buffer(client, &mut upstream, limit).await?;
    // An HTTP/2 node's stream may go on past a body with a length, to trailers (RFC 9113
    // §8.1): an HTTP/2 client gets them after its body, once they come. Anyone else gets
    // the body by its length, at once.
    let trailers_to_come = buffered.complete && client.is_h2() && upstream.h2_continues();
    if buffered.complete && !trailers_to_come {
        // The node is done: give the connection back before the client is served.
        upstream.finish(&client.upstream_in);
    }
    let framing = client_framing(&response, &buffered, client_version);
    client.open_ended = framing == BodyFraming::CloseDelimited;
    // After a cut request body the client is still sending: close after this answer.
    let keep_alive = keep_alive && framing != BodyFraming::CloseDelimited && !body_cut;
    let head = Head {
        response: &response,
        framing,
        version: client_version,
        keep_alive,
        edits,
        extra,
        from_h2_node,
    };
    let head_bytes = write_head(client, vs, &head)?;
    let status = response.status();
    client.answering = status;
    // From here the client has (part of) the answer: a failure says how much.
    let cut = |failure: Failure| failure.after(status, head_bytes);
    let write_timeout = vs.config.timeouts.write;
    let Buffered {
        body: mut buffered_body,
        trailers,
        complete,
    } = buffered;
    let mut body_bytes = buffered_body.len() as u64;
    let last = complete && trailers.is_empty() && !trailers_to_come;
    if last && !keep_alive && !client.is_h2() && buffered_body.len() <= LAST_WRITE_MAX {
        // The whole answer is here and the connection ends after it: its
        // bytes, the close_notify and the FIN leave together.
        if framing == BodyFraming::Chunked {
            encode_chunk(&buffered_body, &mut client.write_buf);
            encode_last_chunk(&[], &mut client.write_buf);
        } else {
            client.write_buf.extend_from_slice(&buffered_body);
        }
        client.send_last(write_timeout).await.map_err(cut)?;
    } else {
        // On an HTTP/2 stream a piece goes out as the client's window allows: cut short,
        // the part that went out is in the record.
        let h2_before = client.h2().map_or(0, |stream| stream.bytes_sent);
        if let Err(failure) =
            send_piece(client, framing, &mut buffered_body, last, write_timeout).await
        {
            let h2_sent = client
                .h2()
                .map_or(0, |stream| stream.bytes_sent - h2_before);
            return Err(failure.after(status, head_bytes + h2_sent));
        }
    }
    let mut grpc_status = grpc_status_of(response.header("grpc-status"));
    if !complete {
        let before = head_bytes + body_bytes;
        let (sent, found) = stream_rest(client, &mut upstream, framing, write_timeout)
            .await
            .map_err(|(failure, sent)| failure.after(status, before + sent))?;
        body_bytes += sent;
        grpc_status = grpc_status.or(found);
    } else {
        let trailers = match trailers_to_come {
            true => {
                // Boxed: few answers wait here, and inline its timers would make every
                // answer's future larger.
                let found = Box::pin(upstream.h2_trailers())
                    .await
                    .map_err(|failure| failure.after(status, head_bytes + body_bytes))?;
                upstream.finish(&client.upstream_in);
                found
            }
            false => trailers,
        };
        grpc_status = grpc_status.or_else(|| grpc_status_in(&trailers));
        if !last {
            send_end(client, framing, &trailers, write_timeout)
                .await
                .map_err(|failure| failure.after(status, head_bytes + body_bytes))?;
        }
    }
    Ok(Sent {
        status,
        bytes: head_bytes + body_bytes,
        keep_alive,
        cache: None,
        grpc_status,
    })
}

/// Whether `content_type` is `text/event-stream` (server-sent events), parameters aside.
pub(crate) fn is_event_stream(content_type: Option<&[u8]>) -> bool {
    crate::request_body::media_type_is(content_type, b"text/event-stream", b"; ")
}

/// A `grpc-status` value: a decimal number.
fn grpc_status_of(value: Option<&[u8]>) -> Option<u32> {
    std::str::from_utf8(value?).ok()?.trim().parse().ok()
}

/// `grpc-status` among trailer lines (`name: value\r\n` each).
fn grpc_status_in(lines: &[u8]) -> Option<u32> {
    lines.split(|&b| b == b'\n').find_map(|line| {
        let colon = line.iter().position(|&b| b == b':')?;
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        let value = value.strip_suffix(b"\r").unwrap_or(value);
        name.eq_ignore_ascii_case(b"grpc-status")
            .then(|| grpc_status_of(Some(value)))
            .flatten()
    })
}

impl Source {
    fn of(response: &ResponseHead) -> Option<Source> {
        match response.framing() {
            BodyFraming::None => None,
            BodyFraming::Length(n) => Some(Source::Length(n)),
            BodyFraming::Chunked => Some(Source::Chunked(ChunkedDecoder::new(MAX_TRAILER_BYTES))),
            BodyFraming::CloseDelimited => Some(Source::UntilClose),
        }
    }
}

impl Upstream {
    /// The node's side of `exchange`, and the response head.
    pub(crate) fn of(exchange: Exchange, stall: Duration) -> (Upstream, ResponseHead) {
        let Exchange {
            mut lease,
            response,
            in_flight,
            body_cut,
            ..
        } = exchange;
        if let NodeLink::Http1(lease) = &mut lease {
            lease.node_keeps_idle_for(response.keep_alive_timeout());
        }
        let upstream = Upstream {
            lease: Some(lease),
            in_flight: Some(in_flight),
            source: Source::of(&response),
            reusable: response.keep_alive() && !body_cut,
            quarantine: response.announces_absent_body(),
            stall,
            ended: false,
            trailers: Bytes::new(),
        };
        (upstream, response)
    }

    /// Whether the response has no body to read (HEAD, 204, 304).
    pub(crate) fn is_bodyless(&self) -> bool {
        self.source.is_none()
    }

    /// The next piece of the decoded body, read from `input` (and the node):
    /// `Some(None)` at its end, when the connection has gone back to the pool
    /// (or been closed); `None` when `pause` passes with nothing from the node
    /// (see [`Upstream::read_within`]). Trailers are kept for [`Upstream::take_trailers`].
    pub(crate) async fn next_chunk_within(
        &mut self,
        input: &mut BytesMut,
        pause: Option<Duration>,
    ) -> Result<Option<Option<Bytes>>, Failure> {
        let mut body = BytesMut::new();
        let mut trailers = Bytes::new();
        while !self.ended {
            let Some(source) = self.source.as_mut() else {
                self.ended = true;
                break;
            };
            self.ended = fill(input, source, &mut body, &mut trailers)?;
            if !trailers.is_empty() {
                self.trailers = std::mem::take(&mut trailers);
            }
            if !self.ended && body.is_empty() {
                match self.read_within(input, pause).await? {
                    Some(0) => self.ended = true,
                    Some(_) => {}
                    None => return Ok(None),
                }
            }
            if self.ended {
                self.finish(input);
            }
            if !body.is_empty() {
                return Ok(Some(Some(body.freeze())));
            }
        }
        self.finish(input);
        Ok(Some(None))
    }

    /// The trailer lines of a chunked body that has ended (hop-by-hop and framing
    /// fields left out, `weir_http::filter_trailers`); empty when it had none.
    pub(crate) fn take_trailers(&mut self) -> Bytes {
        std::mem::take(&mut self.trailers)
    }

    /// Whether an HTTP/2 node's stream has not ended with the body its head announced: what
    /// follows is the stream's end, with trailers or an empty DATA frame
    /// ([`Upstream::h2_trailers`]).
    pub(crate) fn h2_continues(&self) -> bool {
        matches!(&self.lease, Some(NodeLink::Http2 { body, .. }) if !body.is_end_stream())
    }

    /// The rest of an HTTP/2 node's stream after a body with a length: empty DATA frames,
    /// then its trailers (the fields that may be forwarded) or none. Waits up to the stall
    /// timeout for each; DATA past the length is a bad response.
    pub(crate) async fn h2_trailers(&mut self) -> Result<Bytes, Failure> {
        let Some(NodeLink::Http2 { body, lease, .. }) = self.lease.as_mut() else {
            return Ok(Bytes::new());
        };
        let lease = &*lease;
        // The trailers come after the last DATA frame is read: the h2 crate gives them only
        // once `data` has said the body ended.
        let suspect = |error: Error| {
            http2::upstream::suspect_on_timeout(lease, &error);
            error
        };
        while let Some(data) = http2::upstream::read_body(body, self.stall)
            .await
            .map_err(suspect)?
        {
            if !data.is_empty() {
                return Err(Failure::from_error(
                    Error::new(ErrorKind::BadResponse, Side::Upstream)
                        .context("HTTP/2 node sent DATA past its content-length"),
                ));
            }
        }
        let mut kept = BytesMut::new();
        if let Some(lines) = http2::upstream::read_trailers(body, self.stall)
            .await
            .map_err(suspect)?
        {
            filter_trailers(&lines, &mut kept);
        }
        Ok(kept.freeze())
    }

    /// The node's part is over: release the connection when it is clean
    /// (nothing read past the response, framing that leaves it open), else
    /// close it; the request no longer counts as load on the node.
    pub(crate) fn finish(&mut self, unread: &BytesMut) {
        let clean =
            self.reusable && unread.is_empty() && !matches!(self.source, Some(Source::UntilClose));
        match self.lease.take() {
            Some(NodeLink::Http1(lease)) if clean && self.quarantine => {
                lease.release_after(LATE_BODY_GRACE);
            }
            Some(NodeLink::Http1(lease)) if clean => lease.release(),
            _ => {}
        }
        self.in_flight = None;
    }

    /// Reads more of the response. `Ok(0)` is the end of a close-delimited body.
    async fn read(&mut self, buf: &mut BytesMut) -> Result<usize, Failure> {
        let read = self.read_within(buf, None).await?;
        Ok(read.expect("no pause to end the read"))
    }

    /// [`Upstream::read`], or `Ok(None)` when `pause` (shorter than the stall
    /// timeout) passes with nothing read. Both reads below are cancel-safe: what
    /// arrived is in `buf`.
    async fn read_within(
        &mut self,
        buf: &mut BytesMut,
        pause: Option<Duration>,
    ) -> Result<Option<usize>, Failure> {
        let pause = pause.filter(|pause| *pause < self.stall);
        let lease = match self.lease.as_mut() {
            None => return Ok(Some(0)),
            Some(NodeLink::Http1(lease)) => lease,
            Some(NodeLink::Http2 {
                body,
                pump,
                ahead,
                lease,
                ..
            }) => {
                let chunked = matches!(self.source, Some(Source::Chunked(_)));
                // What was read ahead while the request body still went comes first.
                if !ahead.is_empty() {
                    let before = buf.len();
                    for data in ahead.drain(..) {
                        match chunked {
                            true if !data.is_empty() => encode_chunk(&data, buf),
                            true => {}
                            false => buf.extend_from_slice(&data),
                        }
                    }
                    return Ok(Some(buf.len() - before));
                }
                let stall = self.stall;
                let read = async {
                    read_h2(body, chunked, buf, stall).await.map_err(|failure| {
                        http2::upstream::suspect_on_timeout(lease, &failure.error);
                        match pump.as_mut().and_then(PumpWatch::failure) {
                            // The node's stream was reset because the client's body failed
                            // (past `max_body_bytes`, say): the client's fault, not the node's.
                            Some(error) => Failure::from_error(error),
                            None => failure,
                        }
                    })
                };
                return match pause {
                    None => read.await.map(Some),
                    Some(pause) => match tokio::time::timeout(pause, read).await {
                        Ok(read) => read.map(Some),
                        Err(_) => Ok(None),
                    },
                };
            }
        };
        buf.reserve(16 * 1024);
        let deadline = Instant::now() + pause.unwrap_or(self.stall);
        let read = match tokio::time::timeout_at(deadline, lease.stream().read_buf(buf)).await {
            Ok(Ok(n)) => n,
            Ok(Err(error)) => {
                return Err(Failure::from_error(
                    Error::upstream(ErrorKind::BadResponse, error)
                        .context("reading the response body"),
                ));
            }
            Err(_) if pause.is_some() => return Ok(None),
            Err(_) => {
                return Err(Failure::from_error(
                    Error::new(ErrorKind::ResponseTimeout, Side::Upstream)
                        .context("response body stalled"),
                ));
            }
        };
        if read == 0 && !matches!(self.source, Some(Source::UntilClose)) {
            return Err(Failure::from_error(
                Error::new(ErrorKind::BadResponse, Side::Upstream)
                    .context("node closed the connection in the middle of a body"),
            ));
        }
        Ok(Some(read))
    }
}

/// Reads more of an HTTP/2 node's response as the HTTP/1.1 body its head
/// stands for (`weir_http::http2::response_from_h2`): DATA as is for a
/// length, or as chunks, the end of the stream as the last chunk with the
/// trailers. Returns the bytes appended to `buf`.
async fn read_h2(
    body: &mut http2::upstream::NodeBody,
    chunked: bool,
    buf: &mut BytesMut,
    stall: Duration,
) -> Result<usize, Failure> {
    let before = buf.len();
    loop {
        match http2::upstream::read_body(body, stall).await? {
            Some(data) if data.is_empty() => continue,
            Some(data) if chunked => encode_chunk(&data, buf),
            Some(data) => buf.extend_from_slice(&data),
            None if chunked => {
                let lines = http2::upstream::read_trailers(body, stall).await?;
                encode_last_chunk(lines.as_deref().unwrap_or_default(), buf);
            }
            None => {
                return Err(Failure::from_error(
                    Error::new(ErrorKind::BadResponse, Side::Upstream)
                        .context("HTTP/2 node ended the stream in the middle of a body"),
                ));
            }
        }
        return Ok(buf.len() - before);
    }
}

/// The largest body a closing answer sends in one last write
/// ([`Client::send_last`]); a larger one is written as before.
const LAST_WRITE_MAX: usize = 16 * 1024;

/// Reads the body ahead of the client, up to `limit` bytes (or all of it).
async fn buffer(
    client: &mut Client,
    upstream: &mut Upstream,
    limit: usize,
) -> Result<Buffered, Failure> {
    let mut buffered = Buffered {
        body: BytesMut::new(),
        trailers: Bytes::new(),
        complete: upstream.source.is_none(),
    };
    while let Some(source) = upstream.source.as_mut() {
        let input = &mut client.upstream_in;
        if fill(input, source, &mut buffered.body, &mut buffered.trailers)? {
            buffered.complete = true;
            break;
        }
        if buffered.body.len() >= limit {
            break;
        }
        // With part of the body at hand, a pause of the node ends the read-ahead.
        let pause = (!buffered.body.is_empty()).then_some(NODE_PAUSE);
        match upstream.read_within(&mut client.upstream_in, pause).await? {
            Some(0) => {
                buffered.complete = true;
                break;
            }
            Some(_) => {}
            None => break,
        }
    }
    Ok(buffered)
}

/// Framing towards the client: a length when the whole body is known, else
/// the node's length, else chunked (HTTP/1.1) or until close (HTTP/1.0).
fn client_framing(response: &ResponseHead, buffered: &Buffered, version: Version) -> BodyFraming {
    match response.framing() {
        BodyFraming::None => BodyFraming::None,
        _ if buffered.complete && buffered.trailers.is_empty() => {
            BodyFraming::Length(buffered.body.len() as u64)
        }
        BodyFraming::Length(n) => BodyFraming::Length(n),
        _ if version == Version::Http11 => BodyFraming::Chunked,
        _ => BodyFraming::CloseDelimited,
    }
}

/// The response head as it goes to the client.
struct Head<'a> {
    response: &'a ResponseHead,
    framing: BodyFraming,
    version: Version,
    keep_alive: bool,
    /// A traffic rule's response header edits.
    edits: &'a Edits<'a>,
    /// One more field for the client (the cache's `X-Cache`), after the rest.
    extra: Option<(&'a str, &'a str)>,
    /// The node answered over HTTP/2 (`Via` says `2`).
    from_h2_node: bool,
}

/// Writes the response head into `write_buf` (HTTP/1.1), or sends it on the
/// stream (HTTP/2, converted by `weir_http::http2::response_to_h2`); returns
/// its size (the body's framing counted for HTTP/1.1 only).
fn write_head(
    client: &mut Client,
    vs: &VirtualServerRuntime,
    head: &Head<'_>,
) -> Result<u64, Failure> {
    let forward = ForwardResponse {
        framing: head.framing,
        version: head.version,
        keep_alive: head.keep_alive,
        via: Some(VIA),
        via_version: head.from_h2_node.then_some("2"),
        upgrade: false,
        set_headers: &vs.config.response_headers,
    };
    let edits = WithExtra {
        edits: head.edits,
        extra: head.extra,
    };
    if let Downstream::Http2 { stream, .. } = &mut client.stream {
        // Counted as the head weir sends, in its HTTP/1.1 form (docs/logging.md).
        client.write_buf.clear();
        weir_http::http2::write_response_head_for_h2(
            head.response,
            &forward,
            &edits,
            &mut client.write_buf,
        );
        let bodiless = matches!(head.framing, BodyFraming::None | BodyFraming::Length(0));
        let written = http2::Head::Written(head.response.status(), &client.write_buf);
        let sent = stream.send_head(written, bodiless);
        let size = client.write_buf.len() as u64;
        client.write_buf.clear();
        sent.map_err(|error| {
            Failure::node_head_on_stream(error, "head not representable in HTTP/2")
        })?;
        return Ok(size);
    }
    client.write_buf.clear();
    weir_http::write_response_head_edited(head.response, &forward, &edits, &mut client.write_buf);
    Ok(client.write_buf.len() as u64)
}

/// The rules' edits plus one more field written after them (the cache's
/// `X-Cache`), so both protocols' head writers add it the same way.
struct WithExtra<'a> {
    edits: &'a Edits<'a>,
    extra: Option<(&'a str, &'a str)>,
}

impl HeaderEdit for WithExtra<'_> {
    fn drops(&self, name: &[u8]) -> bool {
        self.edits.drops(name)
    }

    fn write_added(&self, out: &mut BytesMut) {
        self.edits.write_added(out);
        if let Some((name, value)) = self.extra {
            for piece in [name.as_bytes(), b": ", value.as_bytes(), b"\r\n"] {
                out.extend_from_slice(piece);
            }
        }
    }
}

/// Sends a piece of body (after anything in `write_buf`), chunk-framed if
/// need be; on an HTTP/2 stream as DATA, `last` ending the stream. `piece`
/// is emptied or left as is: the caller clears it.
async fn send_piece(
    client: &mut Client,
    framing: BodyFraming,
    piece: &mut BytesMut,
    last: bool,
    timeout: Duration,
) -> Result<(), Failure> {
    if let Some(stream) = client.h2() {
        if piece.is_empty() && !last {
            return Ok(());
        }
        if !stream.is_sending() {
            // The head ended the stream (no body).
            return Ok(());
        }
        stream
            .send_data(piece.split().freeze(), last, timeout)
            .await?;
        return Ok(());
    }
    if framing == BodyFraming::Chunked {
        encode_chunk(piece, &mut client.write_buf);
        if last {
            encode_last_chunk(&[], &mut client.write_buf);
        }
        client.flush(timeout).await
    } else {
        client.send(piece, timeout).await
    }
}

/// Ends the body: the last chunk with the trailers (HTTP/1.1 chunked), or
/// the trailers (a HEADERS frame) or an empty DATA frame ending the stream (HTTP/2).
pub(crate) async fn send_end(
    client: &mut Client,
    framing: BodyFraming,
    trailers: &[u8],
    timeout: Duration,
) -> Result<(), Failure> {
    if let Some(stream) = client.h2() {
        if !stream.is_sending() {
            return Ok(());
        }
        if trailers.is_empty() {
            stream.finish(true);
            return Ok(());
        }
        stream.send_trailers(trailers)?;
        return Ok(());
    }
    if framing == BodyFraming::Chunked {
        encode_last_chunk(trailers, &mut client.write_buf);
        client.flush(timeout).await?;
    }
    Ok(())
}

/// Streams the rest of a body too large to buffer: read a buffer's worth,
/// write it, repeat. Returns the body bytes sent and the trailers'
/// `grpc-status`. Once the client has the head, a failure can only close
/// the connection.
/// A failure comes with the body bytes sent before it.
async fn stream_rest(
    client: &mut Client,
    upstream: &mut Upstream,
    framing: BodyFraming,
    write_timeout: Duration,
) -> Result<(u64, Option<u32>), (Failure, u64)> {
    let mut body = BytesMut::new();
    let mut trailers = Bytes::new();
    let mut sent = 0;
    while let Some(source) = upstream.source.as_mut() {
        body.clear();
        let silent = |failure: Failure| (Failure::silent(failure.error), sent);
        let done =
            fill(&mut client.upstream_in, source, &mut body, &mut trailers).map_err(silent)?;
        if !body.is_empty() {
            let piece = body.len() as u64;
            send_piece(client, framing, &mut body, false, write_timeout)
                .await
                .map_err(|failure| (failure, sent))?;
            sent += piece;
        }
        if done
            || upstream
                .read(&mut client.upstream_in)
                .await
                .map_err(|failure| (Failure::silent(failure.error), sent))?
                == 0
        {
            break;
        }
    }
    // An HTTP/2 node's trailers after a body with a length, for an HTTP/2 client.
    if trailers.is_empty() && client.is_h2() && upstream.h2_continues() {
        trailers = Box::pin(upstream.h2_trailers())
            .await
            .map_err(|failure| (Failure::silent(failure.error), sent))?;
    }
    upstream.finish(&client.upstream_in);
    send_end(client, framing, &trailers, write_timeout)
        .await
        .map_err(|failure| (failure, sent))?;
    Ok((sent, grpc_status_in(&trailers)))
}

/// Moves decoded body bytes from `input` to `body`. Returns true when the
/// body ended; `trailers` then holds the trailer lines that may be forwarded.
fn fill(
    input: &mut BytesMut,
    source: &mut Source,
    body: &mut BytesMut,
    trailers: &mut Bytes,
) -> Result<bool, Failure> {
    match source {
        Source::Length(left) => {
            let take = (input.len() as u64).min(*left) as usize;
            if body.is_empty() {
                // Zero-copy in the common case: the whole body in one read.
                *body = input.split_to(take);
            } else {
                body.extend_from_slice(&input.split_to(take));
            }
            *left -= take as u64;
            Ok(*left == 0)
        }
        Source::UntilClose => {
            body.extend_from_slice(&input.split());
            Ok(false)
        }
        Source::Chunked(decoder) => loop {
            match decoder.decode(input).map_err(Failure::bad_response)? {
                Decoded::Data(data) => body.extend_from_slice(&data),
                Decoded::NeedMore => return Ok(false),
                Decoded::Done { trailers: found } => {
                    let mut kept = BytesMut::new();
                    filter_trailers(&found, &mut kept);
                    *trailers = kept.freeze();
                    return Ok(true);
                }
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_streams_are_told_apart() {
        for yes in ["text/event-stream", "Text/Event-Stream; charset=utf-8"] {
            assert!(is_event_stream(Some(yes.as_bytes())), "{yes}");
        }
        for no in [
            "text/html",
            "text/event-streams",
            "text/plain; charset=utf-8",
            "",
            "x",
        ] {
            assert!(!is_event_stream(Some(no.as_bytes())), "{no}");
        }
        assert!(!is_event_stream(None));
    }

    #[test]
    fn grpc_status_is_read_from_trailer_lines_or_a_head_value() {
        assert_eq!(grpc_status_in(b"grpc-status: 0\r\n"), Some(0));
        assert_eq!(
            grpc_status_in(b"x-a: 1\r\nGrpc-Status:14\r\ngrpc-message: gone\r\n"),
            Some(14)
        );
        assert_eq!(grpc_status_in(b"x-a: 1\r\n"), None);
        assert_eq!(grpc_status_in(b"grpc-status: ok\r\n"), None);
        assert_eq!(grpc_status_of(Some(b" 5 ")), Some(5));
        assert_eq!(grpc_status_of(None), None);
    }
}
