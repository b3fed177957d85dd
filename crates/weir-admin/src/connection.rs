//! The driver for one admin connection: read a head, answer, repeat while kept alive.

use std::io;
use std::time::{Duration, SystemTime};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout, timeout_at};
use weir_core::ShutdownSignal;

use crate::AdminState;
use crate::http::{self, Request, Response};
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
    /// The request was rejected: answer with this response and close.
    Reject(Response),
}

/// Serves requests on `stream` until the client or the server closes it.
pub(crate) async fn serve_connection(
    mut stream: TcpStream,
    state: &AdminState,
    mut shutdown: ShutdownSignal,
) {
    let mut buf = Vec::with_capacity(1024);
    loop {
        let outcome = match read_request(&mut stream, &mut buf, state, &mut shutdown).await {
            Ok(outcome) => outcome,
            Err(error) => {
                tracing::debug!(%error, "admin connection read failed");
                return;
            }
        };
        let (request, response) = match outcome {
            ReadOutcome::Request(request) => {
                let response = routes::respond(&request, state);
                (Some(request), response)
            }
            ReadOutcome::Closed => return,
            ReadOutcome::Reject(response) => (None, response),
        };
        let close =
            request.as_ref().is_none_or(|r| !r.keep_alive || r.has_body) || shutdown.is_triggered();
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

/// Reads until `buf` starts with a complete request head, which is removed from `buf`.
async fn read_request(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    state: &AdminState,
    shutdown: &mut ShutdownSignal,
) -> io::Result<ReadOutcome> {
    let limits = &state.limits;
    // Until the first byte, the keep-alive timeout applies; from then, the head timeout.
    let mut deadline = Instant::now() + limits.keep_alive_timeout;
    let mut head_started = !buf.is_empty();
    if head_started {
        deadline = Instant::now() + limits.header_read_timeout;
    }
    let mut chunk = [0u8; 4096];
    loop {
        match http::parse_request(buf, limits.max_head_bytes) {
            Ok(Some((request, head_len))) => {
                buf.drain(..head_len);
                return Ok(ReadOutcome::Request(request));
            }
            Ok(None) => {}
            Err(error) => {
                tracing::debug!(?error, "admin request rejected");
                return Ok(ReadOutcome::Reject(http::error_response(error)));
            }
        }
        let read = tokio::select! {
            read = timeout_at(deadline, stream.read(&mut chunk)) => read,
            () = shutdown.triggered(), if !head_started => return Ok(ReadOutcome::Closed),
        };
        let count = match read {
            Ok(result) => result?,
            Err(_elapsed) if head_started => {
                tracing::debug!("admin request head timed out");
                return Ok(ReadOutcome::Reject(Response::text(
                    408,
                    "request timeout\n",
                )));
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
            deadline = Instant::now() + limits.header_read_timeout;
        }
        buf.extend_from_slice(&chunk[..count]);
    }
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
