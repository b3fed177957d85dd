//! Answers from the cache: a [`Hit`]'s head and body to the client. The
//! stored chunks are sent as they are (shared with the store, never copied
//! into a buffer, except a small body joining its head in one write): head
//! and chunks go out in vectored writes. A body still arriving is followed at
//! this client's own pace. An HTTP/2 stream gets the same head as HEADERS
//! and the same chunks as DATA.

use std::time::Duration;

use bytes::BytesMut;
use weir_cache::{BodyAborted, BodyReader, Framing, Hit, HitBody};
use weir_core::{Error, ErrorKind, Side};
use weir_http::{Version, encode_chunk, encode_last_chunk};

use super::Content;
use crate::answer::Failure;
use crate::client::Client;
use crate::response::Sent;
use crate::route::VirtualServerRuntime;
use crate::traffic::Edits;

/// Sends `hit` to the client, with the request's response `edits` (its rules' edits, its
/// request id) on the head.
pub(super) async fn hit(
    client: &mut Client,
    (vs, content): (&VirtualServerRuntime, &Content),
    hit: &Hit,
    version: Version,
    keep_alive: bool,
    edits: &Edits<'_>,
) -> Result<Sent, Failure> {
    if client.is_h2() {
        let status = status_field(content, hit);
        return hit_h2(client, vs, hit, (status.as_slice(), edits)).await;
    }
    let (framing, keep_alive) = write_head(client, (vs, content), hit, version, keep_alive, edits);
    let head_bytes = client.write_buf.len() as u64;
    let timeout = vs.config.timeouts.write;
    // A failure from here on cut the answer short (the access record says so).
    let cache = Some(hit.cache_status().as_str());
    let cut_at = |failure: Failure, sent: u64| {
        failure
            .after(hit.status(), head_bytes + sent)
            .in_cache(cache)
    };
    let cut = |failure: Failure| cut_at(failure, 0);
    let body_bytes = match hit.body() {
        HitBody::Empty => 0,
        HitBody::Whole(rope) => send_stored(client, rope.chunks(), timeout)
            .await
            .map_err(cut)?,
        HitBody::Part(chunks) => send_stored(client, &chunks, timeout).await.map_err(cut)?,
        HitBody::Growing(reader) => follow(client, reader, framing, timeout)
            .await
            .map_err(|(failure, sent)| cut_at(failure, sent))?,
    };
    if !client.write_buf.is_empty() {
        client.flush(timeout).await.map_err(cut)?;
    }
    Ok(sent(hit, head_bytes + body_bytes, keep_alive))
}

/// Answers `hit` on an HTTP/1.1 connection without waiting, when its whole
/// body is stored and small (at most [`COPY_BELOW`] bytes): head and body go
/// into `write_buf` and out in one write that does not wait. `None` (nothing
/// written) for any other hit, which [`hit`] sends. The answer's bytes that
/// the socket did not take stay in `write_buf`: `Sent` with `false` says the
/// caller must flush them.
pub(super) fn hit_now(
    client: &mut Client,
    (vs, content): (&VirtualServerRuntime, &Content),
    hit: &Hit,
    version: Version,
    keep_alive: bool,
    edits: &Edits<'_>,
) -> Option<(Sent, bool)> {
    if client.is_h2() {
        return None;
    }
    let body = hit.body();
    let chunks: &[bytes::Bytes] = match &body {
        HitBody::Empty => &[],
        HitBody::Whole(rope) if rope.len() <= COPY_BELOW as u64 => rope.chunks(),
        _ => return None,
    };
    let (_, keep_alive) = write_head(client, (vs, content), hit, version, keep_alive, edits);
    let bytes = client.write_buf.len() as u64 + append_stored(client, chunks);
    let written = client.write_now();
    Some((sent(hit, bytes, keep_alive), written))
}

/// Writes `hit`'s HTTP/1.1 head into `write_buf` (cleared first), with the
/// request's response `edits`. Returns the body's framing, and whether the
/// connection may still be kept after it.
fn write_head(
    client: &mut Client,
    (vs, content): (&VirtualServerRuntime, &Content),
    hit: &Hit,
    version: Version,
    keep_alive: bool,
    edits: &Edits<'_>,
) -> (Framing, bool) {
    // The stored head carries this hop's `Via` entry as the relay wrote it
    // (`relay.rs`), in the version the node answered in.
    let status = status_field(content, hit);
    client.answering = hit.status();
    client.write_buf.clear();
    let framing = hit.write_http1_head(
        &mut client.write_buf,
        (version == Version::Http10, keep_alive),
        status.as_slice(),
        &vs.config.response_headers,
        edits.as_edit(),
    );
    client.open_ended = framing == Framing::Close;
    (framing, keep_alive && framing != Framing::Close)
}

/// The debug header with the hit's cache status, when configured.
fn status_field<'a>(content: &'a Content, hit: &Hit) -> Option<(&'a str, &'static str)> {
    content
        .status_header()
        .map(|name| (name, hit.cache_status().as_str()))
}

/// What was sent for `hit`: `bytes` of head and body.
fn sent(hit: &Hit, bytes: u64, keep_alive: bool) -> Sent {
    Sent {
        grpc_status: None,
        status: hit.status(),
        bytes,
        keep_alive,
        cache: Some(hit.cache_status().as_str()),
    }
}

/// Sends `hit` on an HTTP/2 stream: the head the HTTP/1.1 writer makes, as
/// HEADERS (connection-specific fields dropped), then the stored chunks as
/// DATA as the client's window allows. The pipeline ends the stream.
async fn hit_h2(
    client: &mut Client,
    vs: &VirtualServerRuntime,
    hit: &Hit,
    (extra, edits): (&[(&str, &str)], &Edits<'_>),
) -> Result<Sent, Failure> {
    let mut head = BytesMut::with_capacity(512);
    let set = &vs.config.response_headers;
    hit.write_http1_head(&mut head, (false, true), extra, set, edits.as_edit());
    let timeout = vs.config.timeouts.write;
    let body = hit.body();
    send_h2_head(client, &head, matches!(body, HitBody::Empty))?;
    client.answering = hit.status();
    let Some(stream) = client.h2() else {
        return Err(not_a_stream());
    };
    let (status, head_bytes) = (hit.status(), head.len() as u64);
    let cache = Some(hit.cache_status().as_str());
    let mut body_bytes = 0;
    let chunks = match body {
        HitBody::Empty => Vec::new(),
        HitBody::Whole(rope) => rope.chunks().to_vec(),
        HitBody::Part(chunks) => chunks,
        HitBody::Growing(mut reader) => loop {
            match reader.next().await {
                Ok(Some(chunk)) => {
                    let size = chunk.len() as u64;
                    stream.send_data(chunk, false, timeout).await.map_err(|e| {
                        Failure::silent(e)
                            .after(status, head_bytes + body_bytes)
                            .in_cache(cache)
                    })?;
                    body_bytes += size;
                }
                Ok(None) => break Vec::new(),
                Err(BodyAborted) => {
                    return Err(broken_off()
                        .after(status, head_bytes + body_bytes)
                        .in_cache(cache));
                }
            }
        },
    };
    for chunk in chunks {
        let size = chunk.len() as u64;
        stream.send_data(chunk, false, timeout).await.map_err(|e| {
            Failure::silent(e)
                .after(status, head_bytes + body_bytes)
                .in_cache(cache)
        })?;
        body_bytes += size;
    }
    // The stream ends with its answer; the connection is the HTTP/2 driver's.
    Ok(sent(hit, head_bytes + body_bytes, false))
}

/// Sends a head weir wrote in HTTP/1.1 form (a stored one, or one the relay
/// wrote) on an HTTP/2 stream as HEADERS, without the connection-specific
/// fields; `bodiless` ends the stream with it.
pub(super) fn send_h2_head(
    client: &mut Client,
    written: &[u8],
    bodiless: bool,
) -> Result<(), Failure> {
    let status = weir_http::http2::written_status(written).map_err(|error| {
        Failure::silent(
            Error::new(ErrorKind::Io, Side::Internal)
                .context(format!("head not representable in HTTP/2: {error}")),
        )
    })?;
    let stream = client.h2().ok_or_else(not_a_stream)?;
    stream
        .send_head(crate::http2::Head::Written(status, written), bodiless)
        .map_err(Failure::silent)
}

pub(super) fn not_a_stream() -> Failure {
    Failure::silent(Error::new(ErrorKind::Io, Side::Internal).context("HTTP/2 answer on HTTP/1.1"))
}

fn broken_off() -> Failure {
    Failure::silent(
        Error::new(ErrorKind::BadResponse, Side::Upstream)
            .context("the node's body broke off while it was being stored"),
    )
}

/// A stored body up to this many bytes joins its head in `write_buf` (one
/// small copy, one write); a larger one is written from the store's chunks
/// with vectored writes, head and chunks together, no copy.
const COPY_BELOW: usize = 4096;

/// Sends a stored body after the head in `write_buf`: one of at most
/// [`COPY_BELOW`] bytes is copied after the head (the caller flushes both), a
/// larger one is written from the store's chunks.
async fn send_stored(
    client: &mut Client,
    chunks: &[bytes::Bytes],
    timeout: Duration,
) -> Result<u64, Failure> {
    let size: usize = chunks.iter().map(bytes::Bytes::len).sum();
    if size <= COPY_BELOW {
        return Ok(append_stored(client, chunks));
    }
    // Boxed: the vectored writer's slices would otherwise sit in every hit's future.
    Box::pin(client.send_vectored(chunks, timeout)).await?;
    Ok(size as u64)
}

/// Copies a small stored body after the head in `write_buf`; returns its size.
fn append_stored(client: &mut Client, chunks: &[bytes::Bytes]) -> u64 {
    for chunk in chunks {
        client.write_buf.extend_from_slice(chunk);
    }
    chunks.iter().map(|chunk| chunk.len() as u64).sum()
}

/// Follows a body still arriving from the node, framed as the head said.
/// On failure, the body bytes that went out before it.
async fn follow(
    client: &mut Client,
    mut reader: BodyReader,
    framing: Framing,
    timeout: Duration,
) -> Result<u64, (Failure, u64)> {
    let mut sent = 0;
    // The head waits in `write_buf` for the first chunk: one write for both.
    loop {
        let chunk = match reader.next().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => break,
            Err(BodyAborted) => return Err((broken_off(), sent)),
        };
        let size = chunk.len() as u64;
        let written = match framing {
            Framing::Chunked => {
                encode_chunk(&chunk, &mut client.write_buf);
                client.flush(timeout).await
            }
            Framing::Length(_) | Framing::Close => client.send(&chunk, timeout).await,
        };
        written.map_err(|failure| (failure, sent))?;
        sent += size;
    }
    if framing == Framing::Chunked {
        encode_last_chunk(&[], &mut client.write_buf);
    }
    Ok(sent)
}
