//! The forward stage's HTTP/2 half: a request head and its buffered body to
//! an HTTP/2 node (`weir_upstream::H2Node`), the rest of the body within the
//! node's window, and the node's response turned into a `ResponseHead` with
//! its body read as DATA frames. The head is rewritten exactly as for an
//! HTTP/1.1 node (`weir_http::write_request_head_edited`), so forwarding headers,
//! `Via` and the client-subject header do not depend on the node's protocol;
//! the node's codec (`http2.codec`: the `h2` crate, or weir's own client) then
//! takes it in its form, and its answers come through the same types
//! (`node.rs`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use weir_config::UpstreamHttp2Codec;
use weir_core::{Error, ErrorKind, Side};
use weir_http::{
    BodyFraming, ForwardRequest, HeaderEdit, Limits, Method, RequestHead, ResponseHead,
};
use weir_upstream::http2::{NodeError, NodeStream, OwnRequest, StreamRequest};
use weir_upstream::{Flow, H2Node, StreamLease};

use super::SendHalf;

mod node;

pub(crate) use node::{NodeBody, NodeResponse, RawAnswer, RawHead, RawInterim};

/// A final answer that came before the request body was all sent, if one did.
pub(crate) type Early = Option<Result<(RawHead, NodeBody), NodeError>>;

/// A request on its way to an HTTP/2 node.
#[derive(Debug)]
pub(crate) struct H2Request {
    pub response: NodeResponse,
    /// The request body's sender, while more of the body is to come (or, after an
    /// `early` answer, the stream's sending side, kept open until the answer is read).
    pub body: Option<SendHalf>,
    /// The node's final answer when it came before the body was all sent. A whole answer
    /// (its stream ended with the head, or a failure) means the node may stop reading (a
    /// 413 of its own, say: RFC 9113 §8.1), and what is left of the body is not sent; a
    /// head alone (a handler that flushes its head first, or echoes as it reads) is not
    /// a refusal, and the body goes on ([`ends_the_upload`]).
    pub early: Early,
    /// The start of an `early` head's body, read while the request body still went
    /// ([`send_reading_ahead`]); relayed before the rest of it.
    pub ahead: Vec<Bytes>,
    /// Interim answers (103 Early Hints, ...) that came while the request body went, to
    /// relay before the rest ([`send_until_answered`]); past
    /// [`crate::MAX_INTERIM_RESPONSES`] of them the upload stopped, and the
    /// exchange answers 502.
    pub interims: Vec<RawInterim>,
    /// The stream slot; hold it until the response body is read (dropped last: the
    /// stream's halves go first, so its connection counts it closed before the slot
    /// is offered to another request).
    pub lease: StreamLease,
}

/// Bytes of an early answer's body read ahead while the request body still goes: room for
/// a node to finish a whole answer (whose end then ends the upload), or to echo that much
/// of the body as it reads it, without weir reading the answer yet.
const READ_AHEAD: usize = 64 * 1024;

/// Once [`READ_AHEAD`] bytes of the answer are in, how long the request body may still take
/// before the answer is relayed: a node writing a large answer without reading the body (it
/// has all it needs) would otherwise wait for weir to read, and weir for its window.
const FULL_READ_AHEAD_GRACE: Duration = Duration::from_millis(250);

/// Whether an early answer's read-ahead is full: the upload has had its chance, and the
/// answer goes first.
pub(crate) fn read_ahead_full(ahead: &[Bytes]) -> bool {
    ahead.iter().map(Bytes::len).sum::<usize>() >= READ_AHEAD
}

/// How a request body sent after the node's head ended.
pub(crate) enum Upload<E> {
    /// The body's sending ended (all of it, or with its error).
    Sent(Result<(), E>),
    /// The answer ended (or failed) first, or outgrew the read-ahead while the body did
    /// not finish: the answer is relayed, and what is left of the body stays with the
    /// client.
    Answered,
}

/// Drives `sending` (the request body) once the node's head has come, reading the answer's
/// body (`answer`) ahead into `ahead` meanwhile, up to [`READ_AHEAD`] bytes: a node that
/// flushes its head first and then reads the body, or one that echoes as it reads, gets the
/// body; one whose whole answer came (RFC 9113 §8.1: it need not read the rest) ends the
/// upload, without waiting for a window that will not open; and so does one whose answer
/// outgrew the read-ahead while the body did not finish within [`FULL_READ_AHEAD_GRACE`].
pub(crate) async fn send_reading_ahead<E>(
    mut sending: Pin<&mut impl Future<Output = Result<(), E>>>,
    answer: &mut NodeBody,
    ahead: &mut Vec<Bytes>,
) -> Upload<E> {
    let mut read: usize = ahead.iter().map(Bytes::len).sum();
    loop {
        if answer.is_end_stream() {
            return Upload::Answered;
        }
        if read >= READ_AHEAD {
            return match tokio::time::timeout(FULL_READ_AHEAD_GRACE, sending.as_mut()).await {
                Ok(sent) => Upload::Sent(sent),
                Err(_) => Upload::Answered,
            };
        }
        tokio::select! {
            biased;
            sent = sending.as_mut() => return Upload::Sent(sent),
            data = answer.data() => match data {
                Some(Ok(data)) => {
                    read += data.len();
                    if !data.is_empty() {
                        ahead.push(data);
                    }
                }
                // Ended, or failed: what the relay will read (or fail on) next.
                None | Some(Err(_)) => return Upload::Answered,
            },
        }
    }
}

/// Drives `sending` (the request body) until it ends or the node's answer stops it: before
/// an answer, waiting for one on `response` (kept in `early`); after a head that does not
/// end the upload ([`ends_the_upload`]), reading its body ahead ([`send_reading_ahead`]).
///
/// Interim answers that come meanwhile go to `interims`, to be relayed before the rest.
pub(crate) async fn send_until_answered<E>(
    mut sending: Pin<&mut impl Future<Output = Result<(), E>>>,
    response: &mut NodeResponse,
    (early, interims): (&mut Early, &mut Vec<RawInterim>),
    ahead: &mut Vec<Bytes>,
) -> Upload<E> {
    if early.is_none() {
        let answer = std::future::poll_fn(|cx| {
            use std::task::Poll;
            loop {
                match response.poll_answer(cx) {
                    Poll::Ready(Ok(RawAnswer::Interim(interim))) => {
                        interims.push(interim);
                        if interims.len() as u32 > crate::MAX_INTERIM_RESPONSES {
                            return Poll::Ready(None);
                        }
                    }
                    Poll::Ready(Ok(RawAnswer::Final(head, body))) => {
                        return Poll::Ready(Some(Ok((head, body))));
                    }
                    Poll::Ready(Err(error)) => return Poll::Ready(Some(Err(error))),
                    Poll::Pending => return Poll::Pending,
                }
            }
        });
        tokio::select! {
            biased;
            answered = answer => match answered {
                Some(answered) => *early = Some(answered),
                // Too many interim answers: the exchange fails on them.
                None => return Upload::Answered,
            },
            sent = sending.as_mut() => return Upload::Sent(sent),
        }
        if early.as_ref().is_some_and(ends_the_upload) {
            return Upload::Answered;
        }
    }
    match early_body(early) {
        Some(answer) => send_reading_ahead(sending, answer, ahead).await,
        None => Upload::Answered,
    }
}

/// The body of an early answer that did not end the upload, to read ahead from.
fn early_body(early: &mut Early) -> Option<&mut NodeBody> {
    match early {
        Some(Ok((_, body))) => Some(body),
        _ => None,
    }
}

/// Whether an answer that came while the request body was going ends the upload: a
/// failure, or a response whose stream ended with its head. A head with more to come
/// does not: the node may still be reading the body, and waits for it.
pub(crate) fn ends_the_upload(answered: &Result<(RawHead, NodeBody), NodeError>) -> bool {
    match answered {
        Ok((_, body)) => body.is_end_stream(),
        Err(_) => true,
    }
}

/// A node's HTTP/2 response: its head (as an HTTP/1.1 head: framed by its
/// length, or chunked when unknown) and its body.
#[derive(Debug)]
pub(crate) struct H2Response {
    pub head: ResponseHead,
    pub body: NodeBody,
}

/// Sends a request (its head from [`convert_request`]) and the `buffered` start
/// of its body on a stream of `node`; `complete`: the buffered part is the whole body.
/// A stream the node refused unprocessed is retried inside (`H2Node::send`);
/// other failures keep their retry-safety for the pipeline's retry rule.
/// It waits in the node's queue in `flow` (its client's); `left`, ready when the client
/// has gone, ends that wait, and the sending of the buffered body (which may wait for the
/// node's window for up to `timeout`) from [`crate::WATCH_CLIENT_AFTER`] on: the node's
/// stream is then reset (CANCEL) rather than held for a request nobody waits for.
pub(crate) async fn send_request<L>(
    node: &Arc<H2Node>,
    request: ConvertedRequest,
    (buffered, complete): (Bytes, bool),
    timeout: Duration,
    flow: Flow,
    mut left: Pin<&mut L>,
) -> Result<H2Request, Error>
where
    L: Future<Output = Error>,
{
    let ConvertedRequest { request, framing } = request;
    let no_body = complete && buffered.is_empty() && framing == BodyFraming::None;
    let sent = node
        .send_watching(request, no_body, flow, || left.as_mut())
        .await?;
    let (mut response, upload) = halves(sent.stream);
    let mut early = None;
    let mut body = (!no_body).then_some(upload);
    let mut ahead = Vec::new();
    let mut interims = Vec::new();
    let all_sent = match body.as_mut() {
        None => false,
        Some(stream) => {
            let mut counted = 0;
            let sending = stream.send_data(buffered, complete, timeout, &mut counted);
            tokio::pin!(sending);
            let upload = send_until_answered(
                sending,
                &mut response,
                (&mut early, &mut interims),
                &mut ahead,
            );
            let sent = crate::unless_left(upload, left.as_mut())
                .await
                .map_err(|_| {
                    Error::new(ErrorKind::ClientClosed, Side::Downstream)
                        .context("the client went while its request body went to the node")
                })?;
            match sent {
                Upload::Sent(Ok(())) => true,
                // After the node's head, a stream it stopped (reset once its answer was
                // whole) ends the upload; the answer stands. A window that stayed shut past
                // `timeouts.write` is a stall, not an answer: it fails (504) below.
                Upload::Sent(Err(error))
                    if early.is_some() && error.kind() != ErrorKind::ClientTimeout =>
                {
                    false
                }
                Upload::Sent(Err(error)) => {
                    return Err(node_error(error, "sending the request body"));
                }
                Upload::Answered => false,
            }
        }
    };
    if complete && all_sent {
        body = None;
    }
    Ok(H2Request {
        lease: sent.lease,
        response,
        body,
        early,
        ahead,
        interims,
    })
}

/// The response to come and the request body's sender of a stream, of either codec.
pub(crate) fn halves(stream: NodeStream) -> (NodeResponse, SendHalf) {
    match stream {
        NodeStream::H2 { response, body } => (NodeResponse::H2(response), SendHalf::H2(body)),
        NodeStream::Own { recv, send } => (NodeResponse::Own(recv), SendHalf::Node(send)),
    }
}

/// A request head in the form the node's codec takes, and how its body is framed.
pub(crate) struct ConvertedRequest {
    request: StreamRequest,
    framing: BodyFraming,
}

/// The head rewritten for the node as for HTTP/1.1; for the `h2` crate then put in the
/// `http` crate's form (`scheme` the client's), for weir's own client taken as written.
pub(crate) fn convert_request(
    (head, path, edits): (&RequestHead, Option<&[u8]>, &(dyn HeaderEdit + Sync)),
    forward: &ForwardRequest<'_>,
    (scheme, codec): (&str, UpstreamHttp2Codec),
) -> Result<ConvertedRequest, Error> {
    let request = match codec {
        UpstreamHttp2Codec::H2 => {
            let converted =
                weir_http::http2::request_to_h2_edited(head, forward, path, edits, scheme);
            StreamRequest::H2(converted.map_err(|error| {
                Error::new(ErrorKind::BadRequest, Side::Downstream)
                    .context(format!("not representable in HTTP/2: {error}"))
            })?)
        }
        UpstreamHttp2Codec::Weir => StreamRequest::Own(written_request(head, forward, path, edits)),
    };
    Ok(ConvertedRequest {
        request,
        framing: forward.framing,
    })
}

/// The head as written for an HTTP/1.1 node, for weir's own client to encode.
pub(crate) fn written_request(
    head: &RequestHead,
    forward: &ForwardRequest<'_>,
    path: Option<&[u8]>,
    edits: &(dyn HeaderEdit + Sync),
) -> OwnRequest {
    let mut written = BytesMut::with_capacity(head.raw().len() + 160);
    weir_http::write_request_head_edited(head, forward, path, edits, &mut written);
    OwnRequest {
        written: written.freeze(),
        te_trailers: weir_http::http2::asks_for_trailers(head),
        protocol: None,
    }
}

/// More of the request body, within the node's flow-control window.
pub(crate) async fn send_body(
    stream: &mut SendHalf,
    data: Bytes,
    end_of_stream: bool,
    timeout: Duration,
) -> Result<(), Error> {
    stream
        .send_data(data, end_of_stream, timeout, &mut 0)
        .await
        .map_err(|error| node_error(error, "sending the request body"))
}

/// Request trailers, HTTP/1.1 lines (gRPC client streaming ends with none, but HTTP
/// may carry them).
pub(crate) fn send_trailers(stream: &mut SendHalf, lines: &[u8]) -> Result<(), Error> {
    stream
        .send_trailers(lines)
        .map_err(|error| upstream(format!("sending request trailers: {error}")))
}

/// Waits for the final response head (at most `timeout`; interim ones are passed
/// over) and converts it.
pub(crate) async fn response_head(
    mut response: NodeResponse,
    reading: Reading<'_>,
    timeout: Duration,
) -> Result<H2Response, Error> {
    let answer = std::future::poll_fn(|cx| response.poll_final(cx));
    let (head, body) = awaited(
        weir_core::timeout::timeout_settled(timeout, answer).await,
        reading.replay,
    )?;
    final_head(head, body, reading)
}

/// What waiting for a response head gave, as weir's error when it gave none: a stream
/// the node refused is safe to send again; past the wait it is a response timeout.
fn awaited<T>(
    waited: Result<Result<T, NodeError>, weir_core::timeout::Elapsed>,
    replay: bool,
) -> Result<T, Error> {
    match waited {
        Ok(Ok(got)) => Ok(got),
        Ok(Err(error)) if error.is_malformed() => Err(bad_head(&error.to_string())),
        Ok(Err(error)) => {
            // Refused unprocessed; or the connection lost (closed or broken without a
            // GOAWAY) under a request that may be sent again.
            let again = error.refused() || (replay && error.is_io());
            Err(upstream(format!("HTTP/2 response: {error}")).retry_safe(again))
        }
        Err(_) => Err(Error::new(ErrorKind::ResponseTimeout, Side::Upstream)
            .context("no response head from the HTTP/2 node in time")),
    }
}

/// What an HTTP/2 node answered next ([`next_answer`]).
pub(crate) enum Answer {
    /// An interim response (1xx, say 103 Early Hints); the final one follows.
    Interim(ResponseHead),
    Final(H2Response),
}

/// The node's next answer to the request: an interim response, or the final one (which
/// consumes nothing: the caller stops asking then). By `deadline`, if one is set.
pub(crate) async fn next_answer(
    response: &mut NodeResponse,
    reading: Reading<'_>,
    deadline: Option<tokio::time::Instant>,
) -> Result<Answer, Error> {
    let next = std::future::poll_fn(|cx| response.poll_answer(cx));
    let waited = match deadline {
        Some(deadline) => weir_core::timeout::timeout_at_settled(deadline, next).await,
        None => Ok(next.await),
    };
    match awaited(waited, reading.replay)? {
        RawAnswer::Final(head, body) => final_head(head, body, reading).map(Answer::Final),
        RawAnswer::Interim(interim) => interim_head(interim, reading).map(Answer::Interim),
    }
}

/// An interim answer's head in HTTP/1.1 form.
pub(crate) fn interim_head(
    interim: RawInterim,
    Reading { method, limits, .. }: Reading<'_>,
) -> Result<ResponseHead, Error> {
    match interim {
        RawInterim::H2(interim) => {
            // HTTP/2 has no 101 (RFC 9113 §8.6): a node that sends one answered badly, and
            // an HTTP/1.1 client given it would take its connection for switched (weir's
            // own client refuses it as malformed).
            if interim.status() == http::StatusCode::SWITCHING_PROTOCOLS {
                return Err(bad_head("101 Switching Protocols from an HTTP/2 node"));
            }
            let (parts, ()) = interim.into_parts();
            weir_http::http2::response_from_h2_within(&parts, false, method, limits)
                .map_err(|error| bad_head(error.reason))
        }
        RawInterim::Own(status, lines) => {
            let mut head = BytesMut::with_capacity(lines.len() + 32);
            head.extend_from_slice(format!("HTTP/1.1 {status} \r\n").as_bytes());
            head.extend_from_slice(&lines);
            head.extend_from_slice(b"\r\n");
            match ResponseHead::split_from(&mut head, limits, method) {
                Ok(Some(head)) => Ok(head),
                Ok(None) => Err(bad_head("interim head incomplete")),
                Err(error) => Err(bad_head(error.reason)),
            }
        }
    }
}

/// How the answer to a request is read: its method (a HEAD's answer has no body), the
/// virtual server's head limits (`max_headers`, `max_header_bytes`: a head past them is a
/// bad response, 502), and whether the request may be sent again should the node's
/// connection be lost before it answers (a reused connection, an idempotent request
/// whose body was sent whole: the node cannot have acted on it twice).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reading<'a> {
    pub method: Method,
    pub limits: &'a Limits,
    pub replay: bool,
}

/// A final answer the node sent before the request body was all sent, as
/// [`next_answer`] gives one. `read_ahead`: some of its body was read already
/// ([`send_reading_ahead`]), so it has one even if its stream has ended since.
pub(crate) fn early_answer(
    answered: Result<(RawHead, NodeBody), NodeError>,
    reading: Reading<'_>,
    read_ahead: bool,
) -> Result<H2Response, Error> {
    let (head, body) = awaited(Ok(answered), reading.replay)?;
    let ended = body.is_end_stream() && !read_ahead;
    head_within(head, body, ended, reading)
}

/// The final response's head in HTTP/1.1 form, and its body.
/// A head past `limits` (the virtual server's `max_header_bytes` and `max_headers`, as for
/// an HTTP/1.1 node's) is a bad response (502).
fn final_head(head: RawHead, body: NodeBody, reading: Reading<'_>) -> Result<H2Response, Error> {
    let ended = body.is_end_stream();
    head_within(head, body, ended, reading)
}

/// The head of a response whose body `ended` (none follows) or not. weir's own client
/// framed it already (by the stream's end as the head came: an answer whose body was read
/// ahead did not end with its head); it is held to the virtual server's limits here.
fn head_within(
    head: RawHead,
    body: NodeBody,
    ended: bool,
    Reading { method, limits, .. }: Reading<'_>,
) -> Result<H2Response, Error> {
    let head = match head {
        RawHead::H2(parts) => {
            weir_http::http2::response_from_h2_within(&parts, ended, method, limits)
                .map_err(|error| bad_head(error.reason))?
        }
        RawHead::Own(head) => {
            if head.raw().len() > limits.max_head_bytes {
                return Err(bad_head("response head larger than max_header_bytes"));
            }
            if head.headers().count() > limits.max_headers {
                return Err(bad_head("more response header fields than max_headers"));
            }
            head
        }
    };
    Ok(H2Response { head, body })
}

fn bad_head(reason: &str) -> Error {
    Error::new(ErrorKind::BadResponse, Side::Upstream).context(format!("HTTP/2 response: {reason}"))
}

/// Tells `lease`'s connection that a stream on it timed out, when `error` says the node
/// kept it waiting ([`StreamLease::suspect`]): the connection is PINGed, or drained.
pub(crate) fn suspect_on_timeout(lease: &StreamLease, error: &Error) {
    if error.kind() == ErrorKind::ResponseTimeout && error.side() == Side::Upstream {
        lease.suspect();
    }
}

/// The next piece of the response body (`None` at its end); its bytes go
/// back to the node's window as the pipeline takes them.
pub(crate) async fn read_body(
    body: &mut NodeBody,
    timeout: Duration,
) -> Result<Option<Bytes>, Error> {
    match tokio::time::timeout(timeout, body.data()).await {
        Ok(None) => Ok(None),
        Ok(Some(Ok(data))) => Ok(Some(data)),
        Ok(Some(Err(error))) => Err(from_node(error, "HTTP/2 response body")),
        Err(_) => Err(Error::new(ErrorKind::ResponseTimeout, Side::Upstream)
            .context("HTTP/2 node stalled in the response body")),
    }
}

/// The response's trailers as HTTP/1.1 lines, once its body is read (`None`: there
/// were none).
pub(crate) async fn read_trailers(
    body: &mut NodeBody,
    timeout: Duration,
) -> Result<Option<BytesMut>, Error> {
    match tokio::time::timeout(timeout, body.trailers()).await {
        Ok(Ok(trailers)) => Ok(trailers),
        Ok(Err(error)) => Err(from_node(error, "HTTP/2 response trailers")),
        Err(_) => Err(Error::new(ErrorKind::ResponseTimeout, Side::Upstream)
            .context("HTTP/2 node stalled before its trailers")),
    }
}

/// The node's stream failing while weir reads `what`: the codec's error is kept as the
/// source, so that a reset the node sent can be passed on ([`node_reset`]).
pub(crate) fn from_node(error: NodeError, what: &'static str) -> Error {
    Error::upstream(ErrorKind::Io, std::io::Error::other(error)).context(what)
}

/// The reason a node gave when it reset the stream whose reading failed with `error`.
pub(crate) fn node_reset(error: &Error) -> Option<h2::Reason> {
    let io = std::error::Error::source(error)?.downcast_ref::<std::io::Error>()?;
    let node = io.get_ref()?.downcast_ref::<NodeError>()?;
    node.node_reset().map(h2::Reason::from)
}

fn upstream(context: String) -> Error {
    Error::new(ErrorKind::Io, Side::Upstream).context(context)
}

/// An error from sending on the node's stream, said to be on the upstream side.
fn node_error(error: Error, doing: &str) -> Error {
    match error.kind() {
        // The stream's sender says "client" for whichever peer it sends to.
        ErrorKind::ClientTimeout => Error::new(ErrorKind::ResponseTimeout, Side::Upstream).context(
            format!("{doing}: the node did not open its flow-control window within timeouts.write"),
        ),
        _ => Error::new(ErrorKind::Io, Side::Upstream).context(format!("{doing}: {error}")),
    }
}

#[cfg(test)]
mod tests;
