//! One HTTP/2 request stream seen as the pipeline's client: read the request
//! body (flow-control capacity given back as the pipeline takes the data, so
//! a slow node slows the client down), send interim responses, the response
//! head, body data within the client's window (waiting for it: backpressure),
//! trailers, weir's own answers, and notice the client cancelling.
//!
//! The HTTP/1.1 connection's counterpart is `Client` (`client.rs`); the
//! pipeline stages call either through the same few operations
//! (`docs/design/http2.md`, "One pipeline, two codecs").

use std::future::poll_fn;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use h2::server::SendResponse;
use h2::{Reason, RecvStream, SendStream};
use tokio::time::Instant;
use weir_core::{Error, ErrorKind, Side};

use super::own;

mod halves;

pub(crate) use halves::{Head, RecvHalf, SendHalf};

/// Largest piece of body handed to the codec at once (it frames it in
/// DATA frames of the client's max frame size).
const MAX_CHUNK: usize = 64 * 1024;

/// Where a stream's response head goes.
#[derive(Debug)]
enum Respond {
    H2(SendResponse<Bytes>),
    Own(own::Send),
}

/// The client side of one stream.
#[derive(Debug)]
pub(crate) struct H2Stream {
    /// `None` once a pump took it ([`H2Stream::take_body`]).
    body: Option<RecvHalf>,
    respond: Respond,
    send: Option<SendHalf>,
    /// Body bytes handed to the codec for the client so far (a response cut short
    /// reports them).
    pub bytes_sent: u64,
    /// The request head says chunked: [`H2Stream::read_framed`] frames DATA as chunks.
    chunked: bool,
    /// The request body (and its trailers) has been handed out whole.
    body_done: bool,
    /// The response head went out (weir can no longer answer on its own).
    responded: bool,
    /// A WebSocket extended CONNECT (RFC 8441): the `Sec-WebSocket-Key`
    /// weir sent the node in the HTTP/1.1 upgrade it made of the stream.
    websocket_key: Option<String>,
    /// Set when weir closed the stream's connection because the client did not answer a
    /// PING in time ([`H2Stream::set_silence`]).
    silent: Option<Arc<AtomicBool>>,
}

impl H2Stream {
    /// Splits a stream the `h2` crate accepted into the request head parts and the stream.
    pub(crate) fn new(
        request: http::Request<RecvStream>,
        respond: SendResponse<Bytes>,
    ) -> (http::request::Parts, H2Stream) {
        let (parts, body) = request.into_parts();
        (
            parts,
            H2Stream::with(RecvHalf::H2(body), Respond::H2(respond)),
        )
    }

    /// A stream weir's own codec opened.
    pub(crate) fn own(shared: &Arc<own::Shared>, stream: u32) -> H2Stream {
        H2Stream::with(
            RecvHalf::Own(own::Recv::new(Arc::clone(shared), stream)),
            Respond::Own(own::Send::new(Arc::clone(shared), stream)),
        )
    }

    fn with(body: RecvHalf, respond: Respond) -> H2Stream {
        H2Stream {
            body: Some(body),
            respond,
            send: None,
            bytes_sent: 0,
            chunked: false,
            body_done: false,
            responded: false,
            websocket_key: None,
            silent: None,
        }
    }

    /// The connection's flag that says weir closed it for an unanswered PING.
    pub(crate) fn set_silence(&mut self, silent: Arc<AtomicBool>) {
        self.silent = Some(silent);
    }

    /// Whether weir closed the stream's connection because the client did not answer a
    /// PING within `ping_timeout`: a stream that then failed for the close went silent
    /// rather than being left by its client.
    pub(crate) fn went_silent(&self) -> bool {
        self.silent
            .as_ref()
            .is_some_and(|silent| silent.load(Ordering::Acquire))
    }

    /// How the pipeline reads this request's body: `chunked` when its head
    /// (from `weir_http::http2::request_from_h2`) says so.
    pub(crate) fn set_chunked(&mut self, chunked: bool) {
        self.chunked = chunked;
    }

    /// Marks the stream as a WebSocket extended CONNECT whose upgrade request
    /// to the node carries `key`.
    pub(crate) fn set_websocket_key(&mut self, key: String) {
        self.websocket_key = Some(key);
    }

    /// The `Sec-WebSocket-Key` of a WebSocket extended CONNECT; `None` for
    /// other streams.
    pub(crate) fn websocket_key(&self) -> Option<&str> {
        self.websocket_key.as_deref()
    }

    /// Both directions of a stream whose response head went out without
    /// ending it, for a tunnel that moves DATA frames itself; `None` when
    /// either is gone.
    pub(crate) fn take_tunnel(&mut self) -> Option<(RecvHalf, SendHalf)> {
        if self.body_done || self.send.is_none() {
            return None;
        }
        let body = self.body.take()?;
        let send = self.send.take()?;
        self.body_done = true;
        Some((body, send))
    }

    /// The request body as the HTTP/1.1 body its head stands for, appended to
    /// `buf`, so the body stages read DATA frames where they read chunks: the
    /// data as is for a length-framed body; each DATA frame as a chunk, and
    /// the end of the stream as the last chunk with the trailers, for a
    /// chunked one. Returns the bytes appended; 0 at the end of a body
    /// framed by its length (the stages then know it ended early). Waits
    /// until `deadline` at most (a `ClientTimeout` error with `late`).
    pub(crate) async fn read_framed(
        &mut self,
        buf: &mut BytesMut,
        deadline: Instant,
        late: &'static str,
    ) -> Result<usize, Error> {
        let Some(body) = self.body.as_mut().filter(|_| !self.body_done) else {
            return Ok(0);
        };
        let timed_out = || Error::new(ErrorKind::ClientTimeout, Side::Downstream).context(late);
        loop {
            let data = tokio::time::timeout_at(deadline, body.data())
                .await
                .map_err(|_| timed_out())?;
            match data {
                Some(Ok(data)) => {
                    body.release(data.len());
                    if data.is_empty() {
                        continue;
                    }
                    // DATA frames the codec holds already come along, as one chunk: a
                    // client's tiny frames would each cost a write to the node otherwise.
                    let data = gather_ready(body, data)?;
                    let before = buf.len();
                    if self.chunked {
                        weir_http::encode_chunk(&data, buf);
                    } else {
                        buf.extend_from_slice(&data);
                    }
                    return Ok(buf.len() - before);
                }
                Some(Err(error)) => return Err(error),
                None => break,
            }
        }
        self.body_done = true;
        if !self.chunked {
            return Ok(0);
        }
        let trailers = tokio::time::timeout_at(deadline, body.trailers())
            .await
            .map_err(|_| timed_out())??;
        let lines = trailers.unwrap_or_default();
        let before = buf.len();
        weir_http::encode_last_chunk(&lines, buf);
        Ok(buf.len() - before)
    }

    /// For a body framed by its `content-length` and read whole: waits (until `deadline`)
    /// for the stream's end, so that a request whose DATA goes on past its length, or whose
    /// stream never ends, is refused before it reaches a node (RFC 9113 §8.1.1: a malformed
    /// request is not forwarded). With most clients END_STREAM came with the last DATA.
    /// Returns the trailer lines that ended the stream, if it was they (RFC 9113 §8.1: a
    /// body with a length may have them too), for a node that can take them.
    pub(crate) async fn length_ended(
        &mut self,
        deadline: Instant,
        late: &'static str,
    ) -> Result<Option<BytesMut>, Error> {
        let Some(body) = self.body.as_mut().filter(|_| !self.body_done) else {
            return Ok(None);
        };
        let late_error = || Error::new(ErrorKind::ClientTimeout, Side::Downstream).context(late);
        while !body.is_end_stream() {
            let data = tokio::time::timeout_at(deadline, body.data())
                .await
                .map_err(|_| late_error())?;
            match data {
                None => break,
                Some(Ok(data)) if data.is_empty() => {}
                Some(Ok(_)) => {
                    return Err(Error::new(ErrorKind::BadRequest, Side::Downstream)
                        .context("DATA past the request's content-length"));
                }
                Some(Err(error)) => return Err(error),
            }
        }
        self.body_done = true;
        // Queued with the end of the stream when there are any: no wait.
        tokio::time::timeout_at(deadline, body.trailers())
            .await
            .map_err(|_| late_error())?
    }

    /// Ends when the client resets the stream (or its connection fails): it no longer
    /// wants the answer.
    pub(crate) async fn reset(&mut self) -> Error {
        match &mut self.respond {
            Respond::H2(respond) => {
                let context = match poll_fn(|cx| respond.poll_reset(cx)).await {
                    Ok(reason) => format!("the client reset the stream ({reason:?})"),
                    Err(error) => format!("the client's connection failed: {error}"),
                };
                Error::new(ErrorKind::ClientClosed, Side::Downstream).context(context)
            }
            Respond::Own(send) => poll_fn(|cx| send.poll_reset(cx)).await,
        }
    }

    /// The request body's stream, for a pump that moves it to an HTTP/2
    /// node on its own (full duplex); `None` once taken or read to its end.
    /// Afterwards [`H2Stream::read_framed`] reports the end at once.
    pub(crate) fn take_body(&mut self) -> Option<RecvHalf> {
        if self.body_done {
            return None;
        }
        self.body_done = true;
        self.body.take()
    }

    /// Whether the response head went out.
    pub(crate) fn responded(&self) -> bool {
        self.responded
    }

    /// Whether the response head went out and its body is still open.
    pub(crate) fn is_sending(&self) -> bool {
        self.send.is_some()
    }

    /// Whether the request's HEADERS ended the stream (no body follows).
    pub(crate) fn request_ended(&self) -> bool {
        self.body.as_ref().is_none_or(RecvHalf::is_end_stream)
    }

    /// The next piece of the request body, `None` at its end. Its bytes are
    /// given back to the client's window at once: the pipeline bounds what it
    /// holds itself (`request_buffer`), and stops asking while the node is slow.
    /// (The pipeline reads with `read_framed`; the driver's tests use this.)
    #[cfg(test)]
    pub(crate) async fn read_body(&mut self, timeout: Duration) -> Result<Option<Bytes>, Error> {
        let Some(body) = self.body.as_mut() else {
            return Ok(None);
        };
        match tokio::time::timeout(timeout, body.data()).await {
            Ok(None) => Ok(None),
            Ok(Some(Ok(data))) => {
                body.release(data.len());
                Ok(Some(data))
            }
            Ok(Some(Err(error))) => Err(error),
            Err(_) => Err(Error::new(ErrorKind::ClientTimeout, Side::Downstream)
                .context("request body not received in time")),
        }
    }

    /// The request's trailer lines, once the body is read (`None`: there were none).
    #[cfg(test)]
    pub(crate) async fn trailers(&mut self, timeout: Duration) -> Result<Option<BytesMut>, Error> {
        let Some(body) = self.body.as_mut() else {
            return Ok(None);
        };
        match tokio::time::timeout(timeout, body.trailers()).await {
            Ok(trailers) => trailers,
            Err(_) => Err(Error::new(ErrorKind::ClientTimeout, Side::Downstream)
                .context("request trailers not received in time")),
        }
    }

    /// An interim (1xx) response, such as 100 Continue or 103 Early Hints.
    pub(crate) fn send_interim(&mut self, head: Head<'_>) -> Result<(), Error> {
        match &mut self.respond {
            Respond::H2(respond) => respond
                .send_informational(head.into_map()?)
                .map_err(|error| client_gone(&error)),
            Respond::Own(send) => head.send_own(send, false),
        }
    }

    /// The response head; `end_of_stream` when no body follows.
    pub(crate) fn send_head(&mut self, head: Head<'_>, end_of_stream: bool) -> Result<(), Error> {
        let send = match &mut self.respond {
            Respond::H2(respond) => {
                // A head the `h2` crate cannot take has not gone: weir may still answer.
                let head = head.into_map()?;
                self.responded = true;
                SendHalf::H2(
                    respond
                        .send_response(head, end_of_stream)
                        .map_err(|error| client_gone(&error))?,
                )
            }
            Respond::Own(send) => {
                // A head cut short still went (the stream is reset): no answer can follow.
                self.responded = true;
                head.send_own(send, end_of_stream)?;
                SendHalf::Own(send.share())
            }
        };
        if !end_of_stream {
            self.send = Some(send);
        }
        Ok(())
    }

    /// Response body data, sent as the client's flow-control window allows:
    /// waits (at most `timeout` per window update) while the client reads slowly.
    pub(crate) async fn send_data(
        &mut self,
        data: Bytes,
        end_of_stream: bool,
        timeout: Duration,
    ) -> Result<(), Error> {
        let send = self.send.as_mut().ok_or_else(head_not_sent)?;
        let mut sent = 0;
        let result = send
            .send_data(data, end_of_stream, timeout, &mut sent)
            .await;
        // What the codec took, when the stream ends before the whole piece went out too.
        self.bytes_sent += sent;
        result?;
        if end_of_stream {
            self.send = None;
        }
        Ok(())
    }

    /// Trailer lines (HTTP/1.1 form), which end the stream.
    pub(crate) fn send_trailers(&mut self, lines: &[u8]) -> Result<(), Error> {
        let mut send = self.send.take().ok_or_else(head_not_sent)?;
        send.send_trailers(lines)
    }

    /// Ends a gRPC call whose answer was cut short with trailers that carry a status
    /// (`grpc-status`, `grpc-message`) rather than a reset, which gRPC clients read as
    /// INTERNAL, a fault of the server's. Whether the trailers went (the stream was still
    /// open to send them).
    pub(crate) fn finish_grpc(&mut self, status: u32, message: &str) -> bool {
        let Some(mut send) = self.send.take() else {
            return false;
        };
        let mut lines = format!("grpc-status: {status}\r\n").into_bytes();
        if http::HeaderValue::from_str(message).is_ok() {
            lines.extend_from_slice(format!("grpc-message: {message}\r\n").as_bytes());
        }
        match send.send_trailers(&lines) {
            Ok(()) => true,
            Err(_) => {
                send.send_reset(Reason::INTERNAL_ERROR);
                false
            }
        }
    }

    /// Resets the stream with `reason` (a node's own reset, passed on), if it is still open.
    pub(crate) fn finish_reset(&mut self, reason: Reason) {
        if let Some(mut send) = self.send.take() {
            send.send_reset(reason);
        }
    }

    /// Ends the stream: with the body sent, an empty end; after a failure
    /// mid-response, a reset (`INTERNAL_ERROR`) so the client knows the
    /// response is incomplete.
    pub(crate) fn finish(&mut self, complete: bool) {
        if let Some(mut send) = self.send.take() {
            if complete {
                let _ = send.send_end();
            } else {
                send.send_reset(Reason::INTERNAL_ERROR);
            }
        }
    }
}

fn head_not_sent() -> Error {
    Error::new(ErrorKind::Io, Side::Internal).context("response body before its head")
}

/// `first`, and the DATA frames of the stream the codec has already received after it, up
/// to [`crate::request_body::COALESCE_CHUNKS_UP_TO`] bytes (or `first` alone when none has
/// come). Never waits: the codec is polled without a waker of this task's, which the next
/// wait on the body registers again.
fn gather_ready(body: &mut RecvHalf, first: Bytes) -> Result<Bytes, Error> {
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    let mut gathered: Option<BytesMut> = None;
    let mut size = first.len();
    while size < crate::request_body::COALESCE_CHUNKS_UP_TO {
        match body.poll_data(&mut context) {
            std::task::Poll::Ready(Some(Ok(next))) => {
                body.release(next.len());
                size += next.len();
                gathered
                    .get_or_insert_with(|| BytesMut::from(&first[..]))
                    .extend_from_slice(&next);
            }
            std::task::Poll::Ready(Some(Err(error))) => return Err(error),
            // The end of the stream, or nothing yet: the next read sees it.
            std::task::Poll::Ready(None) | std::task::Poll::Pending => break,
        }
    }
    Ok(gathered.map_or(first, BytesMut::freeze))
}

/// A codec error on a stream: the client reset it or the connection ended; or the codec
/// itself reset it with PROTOCOL_ERROR because the request was malformed (DATA that
/// disagrees with its `content-length`, RFC 9113 §8.1.1), which is the client's bad
/// request, not its leaving.
pub(crate) fn client_gone(error: &h2::Error) -> Error {
    if error.is_library() && error.reason() == Some(Reason::PROTOCOL_ERROR) {
        return Error::new(ErrorKind::BadRequest, Side::Downstream)
            .context(format!("malformed HTTP/2 request: {error}"));
    }
    Error::new(ErrorKind::ClientClosed, Side::Downstream).context(format!("HTTP/2 stream: {error}"))
}

/// Sends `data` on a stream as its peer's flow-control window allows, in
/// pieces of at most [`MAX_CHUNK`], waiting at most `timeout` for each window
/// update; `end_of_stream` ends the stream with the last piece. Errors are
/// the peer's side: it stopped reading, reset the stream, or went away.
/// `sent` grows by the bytes handed to the codec, whether or not all of them were.
pub(crate) async fn send_with_capacity(
    send: &mut SendStream<Bytes>,
    mut data: Bytes,
    end_of_stream: bool,
    timeout: Duration,
    sent: &mut u64,
) -> Result<(), Error> {
    if data.is_empty() {
        if end_of_stream {
            send.send_data(data, true)
                .map_err(|error| client_gone(&error))?;
        }
        return Ok(());
    }
    while !data.is_empty() {
        send.reserve_capacity(data.len().min(MAX_CHUNK));
        let granted = tokio::time::timeout(timeout, poll_fn(|cx| send.poll_capacity(cx)))
            .await
            .map_err(|_| {
                Error::new(ErrorKind::ClientTimeout, Side::Downstream)
                    .context("the peer did not open its flow-control window in time")
            })?;
        let capacity = match granted {
            Some(Ok(capacity)) => capacity,
            Some(Err(error)) => return Err(client_gone(&error)),
            None => {
                return Err(Error::new(ErrorKind::ClientClosed, Side::Downstream)
                    .context("stream closed while sending"));
            }
        };
        if capacity == 0 {
            continue;
        }
        let piece = data.split_to(capacity.min(data.len()));
        let last = end_of_stream && data.is_empty();
        let len = piece.len() as u64;
        send.send_data(piece, last)
            .map_err(|error| client_gone(&error))?;
        *sent += len;
    }
    Ok(())
}
