//! The driver for one admin connection: read a head (weir-http's codec) and its body,
//! answer, repeat while kept alive.

use std::io;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout, timeout_at};
use weir_core::ShutdownSignal;

use crate::AdminState;
use crate::http::{self, Request, Response};
use crate::reclaim::Waiting;
use crate::routes;

/// How long, and how many bytes, to read and discard after answering an error before
/// closing, so the client sees the response rather than a reset.
const LINGER_TIME: Duration = Duration::from_secs(1);
const LINGER_BYTES: usize = 64 * 1024;

/// Why reading the next request stopped without one.
enum ReadOutcome {
    Request(Request),
    /// The client closed, went idle past the keep-alive timeout, or shutdown began while idle.
    Closed,
    /// The request was rejected: answer with this response and close. The request's head,
    /// when it was read (a HEAD request's refusal has no body either).
    Reject(Response, Option<Request>),
}

/// Serves requests on `stream` until the client or the server closes it.
/// While it waits for a request it is among `waiting`, which the listener asks to close
/// when it is full ([`crate::reclaim`]).
pub(crate) async fn serve_connection(
    mut stream: TcpStream,
    state: &AdminState,
    (mut shutdown, waiting): (ShutdownSignal, &Waiting),
    local: SocketAddr,
) {
    let mut buf = BytesMut::with_capacity(1024);
    let mut served = false;
    let peer = stream.peer_addr().ok();
    loop {
        let first = !served;
        let reading = read_request(
            &mut stream,
            &mut buf,
            (state, (local, peer), first),
            (&mut shutdown, waiting),
        );
        let outcome = match reading.await {
            Ok(outcome) => outcome,
            Err(error) => {
                tracing::debug!(%error, "admin connection read failed");
                return;
            }
        };
        served = true;
        let (request, response, close) = match outcome {
            ReadOutcome::Request(request) => {
                let response = routes::respond(&request, state, local).await;
                let close = !request.keep_alive || shutdown.is_triggered();
                (Some(request), response, close)
            }
            ReadOutcome::Closed => return,
            // What is left of the request (its body) was not read: the connection ends.
            ReadOutcome::Reject(response, head) => (head, response, true),
        };
        let bytes = http::encode_response(&response, request.as_ref(), close, SystemTime::now());
        match timeout(state.limits.write_timeout, stream.write_all(&bytes)).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                tracing::debug!(%error, "admin connection write failed");
                return;
            }
            Err(_elapsed) => {
                tracing::debug!("admin connection write timed out");
                return;
            }
        }
        if close {
            linger_close(stream).await;
            return;
        }
    }
}

/// Reads until `buf` starts with a complete request head, which is removed from `buf`,
/// then its body (up to [`crate::Limits::max_body_bytes`]).
async fn read_request(
    stream: &mut TcpStream,
    buf: &mut BytesMut,
    (state, (local, peer), first): (&AdminState, (SocketAddr, Option<SocketAddr>), bool),
    (shutdown, waiting): (&mut ShutdownSignal, &Waiting),
) -> io::Result<ReadOutcome> {
    let limits = &state.limits;
    let head_limits = weir_http::Limits {
        max_head_bytes: limits.max_head_bytes,
        max_headers: 64,
    };
    // Until the first byte, the keep-alive timeout applies (the head timeout on a new
    // connection: one that sends nothing holds a slot no longer); from then, the head
    // timeout.
    let wait = match first {
        true => limits.header_read_timeout,
        false => limits.keep_alive_timeout,
    };
    let mut deadline = Instant::now() + wait;
    let mut head_started = !buf.is_empty();
    if head_started {
        deadline = Instant::now() + limits.header_read_timeout;
    }
    // Among the connections the listener may ask to close until a request begins.
    let mut place = (!head_started).then(|| waiting.enter());
    let head = loop {
        match weir_http::RequestHead::split_from(buf, &head_limits) {
            Ok(Some(head)) => break head,
            Ok(None) => {}
            Err(error) => {
                tracing::debug!(%error, "admin request rejected");
                let status = error.status();
                return Ok(ReadOutcome::Reject(
                    Response::error(
                        status,
                        weir_http::reason_phrase(status).to_ascii_lowercase(),
                    ),
                    None,
                ));
            }
        }
        // A connection that has sent nothing of a request (kept alive between two, or new
        // and silent) gives its slot back when the listener is full and it is among the
        // oldest waiting ([`crate::reclaim`]). One in the middle of a head keeps it,
        // within the head timeout.
        let read = tokio::select! {
            // Bytes already there are read first: a request that has come is not dropped.
            biased;
            read = timeout_at(deadline, read_more(stream, buf)) => read,
            () = shutdown.triggered(), if !head_started => return Ok(ReadOutcome::Closed),
            () = async {
                match &place {
                    Some(place) => place.asked().await,
                    None => std::future::pending().await,
                }
            } => {
                tracing::debug!(first, "admin listener full: a connection waiting for a request closed");
                return Ok(ReadOutcome::Closed);
            }
        };
        let count = match read {
            Ok(result) => result?,
            Err(_elapsed) if head_started => {
                tracing::debug!("admin request head timed out");
                return Ok(ReadOutcome::Reject(
                    Response::error(408, "request timeout"),
                    None,
                ));
            }
            Err(_elapsed) => return Ok(ReadOutcome::Closed),
        };
        if count == 0 {
            if head_started {
                tracing::debug!("admin client closed mid-request");
            }
            return Ok(ReadOutcome::Closed);
        }
        if !head_started {
            head_started = true;
            place = None;
            deadline = Instant::now() + limits.header_read_timeout;
        }
    };
    // Refused from its head (no token, say): answered without reading the body.
    let refused = |response: Response| {
        let request = Request::new(&head, Vec::new(), peer);
        routes::audit(&request, response.status);
        ReadOutcome::Reject(response, Some(request))
    };
    if !matches!(head.framing(), weir_http::BodyFraming::None)
        && let Some(refusal) = routes::refusal(&Request::new(&head, Vec::new(), peer), state, local)
    {
        return Ok(refused(refusal));
    }
    // A body may take its time over a slow link, as long as it keeps coming: no read may
    // wait longer than `body_read_timeout`, and the whole body is bounded by `body_timeout`.
    let body_deadline = Instant::now() + limits.body_timeout;
    let reading = read_body(
        stream,
        buf,
        &head,
        (limits.max_body_bytes, limits.body_read_timeout),
    );
    match timeout_at(body_deadline, reading).await {
        Ok(Ok(Ok(body))) => Ok(ReadOutcome::Request(Request::new(&head, body, peer))),
        Ok(Ok(Err(response))) => Ok(refused(response)),
        Ok(Err(error)) if error.kind() == io::ErrorKind::TimedOut => {
            tracing::debug!("admin request body stalled");
            Ok(refused(Response::error(408, "request timeout")))
        }
        Ok(Err(error)) => Err(error),
        Err(_elapsed) => {
            tracing::debug!("admin request body took too long");
            Ok(refused(Response::error(408, "request timeout")))
        }
    }
}

/// Reads the body `head` announces, whole, up to `max` bytes, each read waiting at most
/// `gap` (then an error of kind `TimedOut`). `Err(response)` rejects it (too large, bad
/// chunked framing).
async fn read_body(
    stream: &mut TcpStream,
    buf: &mut BytesMut,
    head: &weir_http::RequestHead,
    (max, gap): (usize, Duration),
) -> io::Result<Result<Vec<u8>, Response>> {
    let too_large = || Response::error(413, format!("request body too large: at most {max} bytes"));
    // The head passed: a client that waits for leave to send its body (curl does for
    // bodies over 1 MiB) gets it before the first read for it, unless some of the body is
    // already here (RFC 9110, section 10.1.1). A body refused for its length is refused
    // before any read.
    let mut waits =
        head.expects_continue() && head.version() == weir_http::Version::Http11 && buf.is_empty();
    let mut read = async |stream: &mut TcpStream, buf: &mut BytesMut| {
        let waiting = std::mem::take(&mut waits);
        let step = async {
            if waiting {
                stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await?;
            }
            read_more(stream, buf).await
        };
        match timeout(gap, step).await {
            Ok(read) => read,
            Err(_elapsed) => Err(io::ErrorKind::TimedOut.into()),
        }
    };
    match head.framing() {
        weir_http::BodyFraming::None | weir_http::BodyFraming::CloseDelimited => Ok(Ok(Vec::new())),
        weir_http::BodyFraming::Length(length) => {
            let Ok(length) = usize::try_from(length) else {
                return Ok(Err(too_large()));
            };
            if length > max {
                return Ok(Err(too_large()));
            }
            while buf.len() < length {
                if read(stream, buf).await? == 0 {
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
            }
            Ok(Ok(buf.split_to(length).to_vec()))
        }
        weir_http::BodyFraming::Chunked => {
            let mut decoder = weir_http::ChunkedDecoder::new(8 * 1024);
            let mut body = Vec::new();
            loop {
                match decoder.decode(buf) {
                    Ok(weir_http::Decoded::Data(data)) => {
                        if body.len() + data.len() > max {
                            return Ok(Err(too_large()));
                        }
                        body.extend_from_slice(&data);
                    }
                    Ok(weir_http::Decoded::Done { .. }) => return Ok(Ok(body)),
                    Ok(weir_http::Decoded::NeedMore) => {
                        if read(stream, buf).await? == 0 {
                            return Err(io::ErrorKind::UnexpectedEof.into());
                        }
                    }
                    Err(error) => {
                        return Ok(Err(Response::error(error.status(), "bad chunked body")));
                    }
                }
            }
        }
    }
}

async fn read_more(stream: &mut TcpStream, buf: &mut BytesMut) -> io::Result<usize> {
    buf.reserve(4096);
    stream.read_buf(buf).await
}

/// Closes our side, then reads and discards what the client still sends, briefly.
async fn linger_close(mut stream: TcpStream) {
    if stream.shutdown().await.is_err() {
        return;
    }
    let drain = async {
        let mut chunk = [0u8; 4096];
        let mut discarded = 0;
        while discarded < LINGER_BYTES {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(count) => discarded += count,
            }
        }
    };
    let _ = timeout(LINGER_TIME, drain).await;
}
