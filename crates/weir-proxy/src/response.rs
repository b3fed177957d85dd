//! The respond stage: the response goes to the client. A body that fits in
//! `response_buffer` is read whole first, so the upstream connection returns
//! to the pool as soon as the node is done — not when a slow client is.
//! Larger bodies stream with backpressure.

use bytes::BytesMut;
use tokio::io::AsyncReadExt;
use tokio::time::Instant;
use weir_core::{Error, ErrorKind, Side};
use weir_http::{
    BodyFraming, ChunkedDecoder, Decoded, ForwardResponse, Version, encode_chunk, encode_last_chunk,
};

use crate::answer::Failure;
use crate::client::Client;
use crate::exchange::Exchange;
use crate::route::VirtualServerRuntime;
use crate::{MAX_TRAILER_BYTES, VIA};

/// What was sent to the client.
#[derive(Debug)]
pub(crate) struct Sent {
    pub status: u16,
    pub bytes: u64,
    /// Whether the client connection may carry another request.
    pub keep_alive: bool,
}

/// How the body is read from the node.
enum Source {
    Length(u64),
    Chunked(ChunkedDecoder),
    UntilClose,
}

/// Sends the response in `exchange` to the client and returns the upstream
/// connection to the pool when the node is done with it.
pub(crate) async fn respond(
    client: &mut Client,
    vs: &VirtualServerRuntime,
    exchange: Exchange,
    client_version: Version,
    keep_alive: bool,
    response_timeout: std::time::Duration,
) -> Result<Sent, Failure> {
    let Exchange {
        mut lease,
        response,
        in_flight,
        ..
    } = exchange;
    let mut in_flight = Some(in_flight);
    let status = response.status();
    let limit = vs.config.limits.response_buffer;
    let write_timeout = vs.config.timeouts.write;
    let upstream_keep_alive = response.keep_alive();
    let mut source = match response.framing() {
        BodyFraming::None => None,
        BodyFraming::Length(n) => Some(Source::Length(n)),
        BodyFraming::Chunked => Some(Source::Chunked(ChunkedDecoder::new(MAX_TRAILER_BYTES))),
        BodyFraming::CloseDelimited => Some(Source::UntilClose),
    };

    // Buffer as much of the body as fits: all of it, for most responses.
    let mut body = BytesMut::new();
    let mut trailers = bytes::Bytes::new();
    let mut complete = source.is_none();
    while let Some(current) = source.as_mut() {
        match fill(&mut client.upstream_in, current, &mut body, &mut trailers)? {
            true => {
                complete = true;
                break;
            }
            false if body.len() >= limit => break,
            false => {}
        }
        let deadline = Instant::now() + response_timeout;
        let read = read_upstream(&mut lease, &mut client.upstream_in, deadline).await?;
        if read == 0 {
            if matches!(current, Source::UntilClose) {
                complete = true;
                break;
            }
            return Err(Failure::from_error(
                Error::new(ErrorKind::BadResponse, Side::Upstream)
                    .context("node closed the connection in the middle of a body"),
            ));
        }
    }

    // The node is done: give the connection back before the client is served.
    let reusable = complete
        && upstream_keep_alive
        && !matches!(source, Some(Source::UntilClose))
        && client.upstream_in.is_empty();
    let mut lease = Some(lease);
    if reusable {
        if let Some(lease) = lease.take() {
            lease.release();
        }
    } else if complete {
        lease = None; // closes it
    }
    if complete {
        // The node's part is over: it no longer counts as load on it.
        drop(in_flight.take());
    }

    // Framing towards the client.
    let client_framing = match response.framing() {
        BodyFraming::None => BodyFraming::None,
        _ if complete && trailers.is_empty() => BodyFraming::Length(body.len() as u64),
        BodyFraming::Length(n) => BodyFraming::Length(n),
        _ if client_version == Version::Http11 => BodyFraming::Chunked,
        _ => BodyFraming::CloseDelimited,
    };
    let keep_alive = keep_alive && client_framing != BodyFraming::CloseDelimited;
    client.write_buf.clear();
    weir_http::write_response_head(
        &response,
        &ForwardResponse {
            framing: client_framing,
            version: client_version,
            keep_alive,
            via: Some(VIA),
            upgrade: false,
            set_headers: &vs.config.response_headers,
        },
        &mut client.write_buf,
    );
    let mut sent_body = body.len() as u64;
    let head_len = client.write_buf.len() as u64;
    if client_framing == BodyFraming::Chunked {
        encode_chunk(&body, &mut client.write_buf);
        if complete {
            encode_last_chunk(&trailers, &mut client.write_buf);
        }
        client.flush(write_timeout).await?;
    } else {
        client.send(&body, write_timeout).await?;
    }
    let sent = |bytes| Sent {
        status,
        bytes,
        keep_alive,
    };
    let Some(mut lease) = lease else {
        return Ok(sent(head_len + sent_body));
    };
    let Some(mut source) = source else {
        lease.release();
        return Ok(sent(head_len + sent_body));
    };

    // Stream the rest: read a buffer's worth, write it, repeat.
    loop {
        body.clear();
        let done = fill(
            &mut client.upstream_in,
            &mut source,
            &mut body,
            &mut trailers,
        )?;
        if !body.is_empty() {
            sent_body += body.len() as u64;
            if client_framing == BodyFraming::Chunked {
                encode_chunk(&body, &mut client.write_buf);
                client.flush(write_timeout).await?;
            } else {
                client.send(&body, write_timeout).await?;
            }
        }
        if done {
            break;
        }
        let deadline = Instant::now() + response_timeout;
        let read = read_upstream(&mut lease, &mut client.upstream_in, deadline)
            .await
            .map_err(|failure| Failure::silent(failure.error))?;
        if read == 0 {
            if matches!(source, Source::UntilClose) {
                break;
            }
            return Err(Failure::silent(
                Error::new(ErrorKind::BadResponse, Side::Upstream)
                    .context("node closed the connection in the middle of a body"),
            ));
        }
    }
    if client_framing == BodyFraming::Chunked {
        encode_last_chunk(&trailers, &mut client.write_buf);
        client.flush(write_timeout).await?;
    }
    if upstream_keep_alive && !matches!(source, Source::UntilClose) && client.upstream_in.is_empty()
    {
        lease.release();
    }
    Ok(sent(head_len + sent_body))
}

/// Moves decoded body bytes from `input` to `body`. Returns true when the body ended.
fn fill(
    input: &mut BytesMut,
    source: &mut Source,
    body: &mut BytesMut,
    trailers: &mut bytes::Bytes,
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
                    *trailers = found;
                    return Ok(true);
                }
            }
        },
    }
}

async fn read_upstream(
    lease: &mut weir_upstream::Lease,
    buf: &mut BytesMut,
    deadline: Instant,
) -> Result<usize, Failure> {
    buf.reserve(16 * 1024);
    match tokio::time::timeout_at(deadline, lease.stream().read_buf(buf)).await {
        Ok(Ok(n)) => Ok(n),
        Ok(Err(error)) => Err(Failure::from_error(
            Error::upstream(ErrorKind::BadResponse, error).context("reading the response body"),
        )),
        Err(_) => Err(Failure::from_error(
            Error::new(ErrorKind::ResponseTimeout, Side::Upstream).context("response body stalled"),
        )),
    }
}
