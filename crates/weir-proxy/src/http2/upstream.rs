//! The forward stage's HTTP/2 half: a request head and its buffered body to
//! an HTTP/2 node (`weir_upstream::H2Node`), the rest of the body within the
//! node's window, and the node's response turned into a `ResponseHead` with
//! its body read as DATA frames. The head is rewritten exactly as for an
//! HTTP/1.1 node (`weir_http::http2::request_to_h2`), so forwarding headers,
//! `Via` and the client-subject header do not depend on the node's protocol.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use h2::client::ResponseFuture;
use h2::{RecvStream, SendStream};
use http::HeaderMap;
use weir_core::{Error, ErrorKind, Side};
use weir_http::{
    BodyFraming, ForwardRequest, HeaderEdit, Limits, Method, RequestHead, ResponseHead,
};
use weir_upstream::{Flow, H2Node, StreamLease};

use super::stream::send_with_capacity;

/// A final answer that came before the request body was all sent, if one did.
pub(crate) type Early = Option<Result<http::Response<RecvStream>, h2::Error>>;

/// A request on its way to an HTTP/2 node.
#[derive(Debug)]
pub(crate) struct H2Request {
    /// The stream slot; hold it until the response body is read.
    pub lease: StreamLease,
    pub response: ResponseFuture,
    /// The request body's sender, while more of the body is to come (or, after an
    /// `early` answer, the stream's sending side, kept open until the answer is read).
    pub body: Option<SendStream<Bytes>>,
    /// The node's final answer when it came before the body was all sent. A whole answer
    /// (its stream ended with the head, or a failure) means the node may stop reading (a
    /// 413 of its own, say: RFC 9113 §8.1), and what is left of the body is not sent; a
    /// head alone (a handler that flushes its head first, or echoes as it reads) is not
    /// a refusal, and the body goes on ([`ends_the_upload`]).
    pub early: Option<Result<http::Response<RecvStream>, h2::Error>>,
    /// The start of an `early` head's body, read while the request body still went
    /// ([`send_reading_ahead`]); relayed before the rest of it.
    pub ahead: Vec<Bytes>,
    /// Interim answers (103 Early Hints, ...) that came while the request body went, to
    /// relay before the rest ([`send_until_answered`]); past
    /// [`crate::MAX_INTERIM_RESPONSES`] of them the upload stopped, and the
    /// exchange answers 502.
    pub interims: Vec<http::Response<()>>,
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
    answer: &mut RecvStream,
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
                    let _ = answer.flow_control().release_capacity(data.len());
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
/// Interim answers that come meanwhile go to `interims`: the `h2` codec's response future
/// passes over (and drops) any it finds queued when it is polled, so they are taken first.
pub(crate) async fn send_until_answered<E>(
    mut sending: Pin<&mut impl Future<Output = Result<(), E>>>,
    response: &mut ResponseFuture,
    (early, interims): (&mut Early, &mut Vec<http::Response<()>>),
    ahead: &mut Vec<Bytes>,
) -> Upload<E> {
    if early.is_none() {
        let answer = std::future::poll_fn(|cx| {
            use std::task::Poll;
            while let Poll::Ready(Some(Ok(interim))) = response.poll_informational(cx) {
                interims.push(interim);
                if interims.len() as u32 > crate::MAX_INTERIM_RESPONSES {
                    return Poll::Ready(None);
                }
            }
            Pin::new(&mut *response).poll(cx).map(Some)
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
fn early_body(
    early: &mut Option<Result<http::Response<RecvStream>, h2::Error>>,
) -> Option<&mut RecvStream> {
    match early {
        Some(Ok(response)) => Some(response.body_mut()),
        _ => None,
    }
}

/// Whether an answer that came while the request body was going ends the upload: a
/// failure, or a response whose stream ended with its head. A head with more to come
/// does not: the node may still be reading the body, and waits for it.
pub(crate) fn ends_the_upload(answered: &Result<http::Response<RecvStream>, h2::Error>) -> bool {
    match answered {
        Ok(response) => response.body().is_end_stream(),
        Err(_) => true,
    }
}

/// A node's HTTP/2 response: its head (as an HTTP/1.1 head: framed by its
/// length, or chunked when unknown) and its body.
#[derive(Debug)]
pub(crate) struct H2Response {
    pub head: ResponseHead,
    pub body: RecvStream,
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
    let mut response = sent.response;
    let mut early = None;
    let mut body = (!no_body).then_some(sent.body);
    let mut ahead = Vec::new();
    let mut interims = Vec::new();
    let all_sent = match body.as_mut() {
        None => false,
        Some(stream) => {
            let mut counted = 0;
            let sending = send_with_capacity(stream, buffered, complete, timeout, &mut counted);
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

/// A request head in HTTP/2 form, and how its body is framed.
pub(crate) struct ConvertedRequest {
    request: http::Request<()>,
    framing: BodyFraming,
}

/// The head rewritten for the node as for HTTP/1.1, then put in HTTP/2 form.
pub(crate) fn convert_request(
    (head, path, edits): (&RequestHead, Option<&[u8]>, &(dyn HeaderEdit + Sync)),
    forward: &ForwardRequest<'_>,
    scheme: &str,
) -> Result<ConvertedRequest, Error> {
    let converted = weir_http::http2::request_to_h2_edited(head, forward, path, edits, scheme);
    let request = converted.map_err(|error| {
        Error::new(ErrorKind::BadRequest, Side::Downstream)
            .context(format!("not representable in HTTP/2: {error}"))
    })?;
    Ok(ConvertedRequest {
        request,
        framing: forward.framing,
    })
}

/// More of the request body, within the node's flow-control window.
pub(crate) async fn send_body(
    stream: &mut SendStream<Bytes>,
    data: Bytes,
    end_of_stream: bool,
    timeout: Duration,
) -> Result<(), Error> {
    send_with_capacity(stream, data, end_of_stream, timeout, &mut 0)
        .await
        .map_err(|error| node_error(error, "sending the request body"))
}

/// Request trailers (gRPC client streaming ends with none, but HTTP may carry them).
pub(crate) fn send_trailers(
    stream: &mut SendStream<Bytes>,
    trailers: HeaderMap,
) -> Result<(), Error> {
    stream
        .send_trailers(trailers)
        .map_err(|error| upstream(format!("sending request trailers: {error}")))
}

/// Waits for the response head (at most `timeout`) and converts it.
pub(crate) async fn response_head(
    response: ResponseFuture,
    reading: Reading<'_>,
    timeout: Duration,
) -> Result<H2Response, Error> {
    let response = awaited(
        weir_core::timeout::timeout_settled(timeout, response).await,
        reading.replay,
    )?;
    final_head(response, reading)
}

/// What waiting for a response head gave, as weir's error when it gave none: a stream
/// the node refused is safe to send again; past the wait it is a response timeout.
fn awaited<T>(
    waited: Result<Result<T, h2::Error>, weir_core::timeout::Elapsed>,
    replay: bool,
) -> Result<T, Error> {
    match waited {
        Ok(Ok(got)) => Ok(got),
        Ok(Err(error)) => {
            // Refused unprocessed; or the connection lost (closed or broken without a
            // GOAWAY) under a request that may be sent again.
            let again = weir_upstream::http2::refused(&error) || (replay && error.is_io());
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
    response: &mut ResponseFuture,
    reading: Reading<'_>,
    deadline: Option<tokio::time::Instant>,
) -> Result<Answer, Error> {
    let next = std::future::poll_fn(|cx| {
        use std::task::Poll;
        match response.poll_informational(cx) {
            Poll::Ready(Some(interim)) => return Poll::Ready(interim.map(Err)),
            Poll::Ready(None) | Poll::Pending => {}
        }
        std::pin::Pin::new(&mut *response)
            .poll(cx)
            .map(|r| r.map(Ok))
    });
    let waited = match deadline {
        Some(deadline) => weir_core::timeout::timeout_at_settled(deadline, next).await,
        None => Ok(next.await),
    };
    match awaited(waited, reading.replay)? {
        Ok(response) => final_head(response, reading).map(Answer::Final),
        Err(interim) => interim_head(interim, reading).map(Answer::Interim),
    }
}

/// An interim answer's head in HTTP/1.1 form.
pub(crate) fn interim_head(
    interim: http::Response<()>,
    Reading { method, limits, .. }: Reading<'_>,
) -> Result<ResponseHead, Error> {
    // HTTP/2 has no 101 (RFC 9113 §8.6): a node that sends one answered badly, and an
    // HTTP/1.1 client given it would take its connection for switched.
    if interim.status() == http::StatusCode::SWITCHING_PROTOCOLS {
        return Err(bad_head("101 Switching Protocols from an HTTP/2 node"));
    }
    let (parts, ()) = interim.into_parts();
    weir_http::http2::response_from_h2_within(&parts, false, method, limits)
        .map_err(|error| bad_head(error.reason))
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
    answered: Result<http::Response<RecvStream>, h2::Error>,
    reading: Reading<'_>,
    read_ahead: bool,
) -> Result<H2Response, Error> {
    let response = awaited(Ok(answered), reading.replay)?;
    let (parts, body) = response.into_parts();
    let ended = body.is_end_stream() && !read_ahead;
    head_within(parts, body, ended, reading)
}

/// The final response's head in HTTP/1.1 form, and its body.
/// A head past `limits` (the virtual server's `max_header_bytes` and `max_headers`, as for
/// an HTTP/1.1 node's) is a bad response (502).
fn final_head(
    response: http::Response<RecvStream>,
    reading: Reading<'_>,
) -> Result<H2Response, Error> {
    let (parts, body) = response.into_parts();
    let ended = body.is_end_stream();
    head_within(parts, body, ended, reading)
}

/// The head of a response whose body `ended` (none follows) or not.
fn head_within(
    parts: http::response::Parts,
    body: RecvStream,
    ended: bool,
    Reading { method, limits, .. }: Reading<'_>,
) -> Result<H2Response, Error> {
    let head = weir_http::http2::response_from_h2_within(&parts, ended, method, limits)
        .map_err(|error| bad_head(error.reason))?;
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
    body: &mut RecvStream,
    timeout: Duration,
) -> Result<Option<Bytes>, Error> {
    match tokio::time::timeout(timeout, body.data()).await {
        Ok(None) => Ok(None),
        Ok(Some(Ok(data))) => {
            let _ = body.flow_control().release_capacity(data.len());
            Ok(Some(data))
        }
        Ok(Some(Err(error))) => Err(from_node(error, "HTTP/2 response body")),
        Err(_) => Err(Error::new(ErrorKind::ResponseTimeout, Side::Upstream)
            .context("HTTP/2 node stalled in the response body")),
    }
}

/// The response's trailers, once its body is read (`None`: there were none).
pub(crate) async fn read_trailers(
    body: &mut RecvStream,
    timeout: Duration,
) -> Result<Option<HeaderMap>, Error> {
    match tokio::time::timeout(timeout, body.trailers()).await {
        Ok(Ok(trailers)) => Ok(trailers),
        Ok(Err(error)) => Err(from_node(error, "HTTP/2 response trailers")),
        Err(_) => Err(Error::new(ErrorKind::ResponseTimeout, Side::Upstream)
            .context("HTTP/2 node stalled before its trailers")),
    }
}

/// The node's stream failing while weir reads `what`: the codec's error is kept as the
/// source, so that a reset the node sent can be passed on ([`node_reset`]).
fn from_node(error: h2::Error, what: &'static str) -> Error {
    Error::upstream(ErrorKind::Io, std::io::Error::other(error)).context(what)
}

/// The reason a node gave when it reset the stream whose reading failed with `error`.
pub(crate) fn node_reset(error: &Error) -> Option<h2::Reason> {
    let io = std::error::Error::source(error)?.downcast_ref::<std::io::Error>()?;
    let h2 = io.get_ref()?.downcast_ref::<h2::Error>()?;
    if h2.is_reset() && h2.is_remote() {
        h2.reason()
    } else {
        None
    }
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
