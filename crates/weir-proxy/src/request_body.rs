//! The request body: read (up to `request_buffer`) before a node is chosen,
//! so a slow client never holds an upstream connection while it uploads; the
//! rest, if any, streams to the node with backpressure.

use bytes::{Bytes, BytesMut};
use tokio::io::AsyncWriteExt;
use weir_core::{Error, ErrorKind, Side};
use weir_http::{
    BodyFraming, ChunkedDecoder, Decoded, RequestHead, encode_chunk, encode_last_chunk,
};

use crate::MAX_TRAILER_BYTES;
use crate::answer::Failure;
use crate::client::Client;
use crate::route::VirtualServerRuntime;

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
    /// True when the body has been read completely, so the request can be sent again.
    pub(crate) fn is_complete(&self) -> bool {
        matches!(self.remaining, Remaining::Nothing)
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

fn too_large() -> Failure {
    Failure::from_error(Error::new(ErrorKind::BodyTooLarge, Side::Downstream))
}

/// Reads the body's first `request_buffer` bytes (all of it, if it fits).
pub(crate) async fn read(
    client: &mut Client,
    vs: &VirtualServerRuntime,
    head: &RequestHead,
) -> Result<RequestBody, Failure> {
    let limits = &vs.config.limits;
    let timeout = vs.config.timeouts.body_read;
    let mut body = RequestBody {
        framing: head.framing(),
        buffered: BytesMut::new(),
        trailers: Bytes::new(),
        remaining: Remaining::Nothing,
        received: 0,
    };
    match head.framing() {
        BodyFraming::None | BodyFraming::CloseDelimited => {
            body.framing = BodyFraming::None;
        }
        BodyFraming::Length(length) => {
            if length > limits.max_body_bytes {
                return Err(too_large());
            }
            continue_if_expected(client, vs, head).await?;
            let want = length.min(limits.request_buffer as u64) as usize;
            while client.read_buf.len() < want {
                client.read_more(timeout).await?;
            }
            let take = (client.read_buf.len() as u64).min(length) as usize;
            body.buffered = client.read_buf.split_to(take);
            body.received = take as u64;
            if (take as u64) < length {
                body.remaining = Remaining::Length(length - take as u64);
            }
        }
        BodyFraming::Chunked => {
            continue_if_expected(client, vs, head).await?;
            let mut decoder = ChunkedDecoder::new(MAX_TRAILER_BYTES);
            loop {
                match decoder
                    .decode(&mut client.read_buf)
                    .map_err(Failure::parse)?
                {
                    Decoded::Data(data) => {
                        body.received += data.len() as u64;
                        if body.received > limits.max_body_bytes {
                            return Err(too_large());
                        }
                        body.buffered.extend_from_slice(&data);
                        if body.buffered.len() >= limits.request_buffer {
                            body.remaining = Remaining::Chunked(decoder);
                            break;
                        }
                    }
                    Decoded::NeedMore => {
                        client.read_more(timeout).await?;
                    }
                    Decoded::Done { trailers } => {
                        if trailers.is_empty() {
                            // The whole body is here: send it with a length.
                            body.framing = BodyFraming::Length(body.buffered.len() as u64);
                        } else {
                            body.trailers = trailers;
                        }
                        break;
                    }
                }
            }
        }
    }
    Ok(body)
}

/// Answers `Expect: 100-continue` ourselves: the body is read by weir, not the node.
async fn continue_if_expected(
    client: &mut Client,
    vs: &VirtualServerRuntime,
    head: &RequestHead,
) -> Result<(), Failure> {
    if head.expects_continue()
        && client.read_buf.is_empty()
        && head.version() == weir_http::Version::Http11
    {
        client
            .send(b"HTTP/1.1 100 Continue\r\n\r\n", vs.config.timeouts.write)
            .await?;
    }
    Ok(())
}

/// Streams the rest of the body from the client to the node.
pub(crate) async fn stream_rest<W: AsyncWriteExt + Unpin>(
    client: &mut Client,
    vs: &VirtualServerRuntime,
    body: &mut RequestBody,
    node: &mut W,
) -> Result<(), Failure> {
    stream_rest_unflushed(client, vs, body, node).await?;
    // A no-op on plain TCP; on TLS it pushes the last records out.
    node.flush().await.map_err(|error| {
        Failure::from_error(
            Error::upstream(ErrorKind::BadResponse, error)
                .context("node stopped reading the request body"),
        )
    })
}

async fn stream_rest_unflushed<W: AsyncWriteExt + Unpin>(
    client: &mut Client,
    vs: &VirtualServerRuntime,
    body: &mut RequestBody,
    node: &mut W,
) -> Result<(), Failure> {
    let timeout = vs.config.timeouts.body_read;
    let max_body = vs.config.limits.max_body_bytes;
    let upstream_error = |error: std::io::Error| {
        Failure::from_error(
            Error::upstream(ErrorKind::BadResponse, error)
                .context("node stopped reading the request body"),
        )
    };
    match std::mem::replace(&mut body.remaining, Remaining::Nothing) {
        Remaining::Nothing => Ok(()),
        Remaining::Length(mut left) => {
            while left > 0 {
                if client.read_buf.is_empty() {
                    client.read_more(timeout).await?;
                }
                let take = (client.read_buf.len() as u64).min(left) as usize;
                let piece = client.read_buf.split_to(take);
                node.write_all(&piece).await.map_err(upstream_error)?;
                left -= take as u64;
                body.received += take as u64;
            }
            Ok(())
        }
        Remaining::Chunked(mut decoder) => {
            let mut frame = BytesMut::new();
            loop {
                match decoder
                    .decode(&mut client.read_buf)
                    .map_err(Failure::parse)?
                {
                    Decoded::Data(data) => {
                        body.received += data.len() as u64;
                        if body.received > max_body {
                            return Err(Failure::silent(Error::new(
                                ErrorKind::BodyTooLarge,
                                Side::Downstream,
                            )));
                        }
                        frame.clear();
                        encode_chunk(&data, &mut frame);
                        node.write_all(&frame).await.map_err(upstream_error)?;
                    }
                    Decoded::NeedMore => {
                        client.read_more(timeout).await?;
                    }
                    Decoded::Done { trailers } => {
                        frame.clear();
                        encode_last_chunk(&trailers, &mut frame);
                        node.write_all(&frame).await.map_err(upstream_error)?;
                        return Ok(());
                    }
                }
            }
        }
    }
}
