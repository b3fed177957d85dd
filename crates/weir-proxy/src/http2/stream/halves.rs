//! The two halves of an HTTP/2 stream whichever codec carries it (the `h2`
//! crate's `RecvStream` and `SendStream`, or weir's `own::Recv` and
//! `own::Send`), and a response head in either form: what the pipeline, the
//! tunnels and the body pumps hold (`docs/design/http2.md`, "Step 5").

use std::future::poll_fn;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use h2::{Reason, RecvStream, SendStream};
use weir_core::{Error, ErrorKind, Side};
use weir_http::frame::ErrorCode;

use super::{client_gone, send_with_capacity};
use crate::http2::own;

/// A response head for a stream.
pub(crate) enum Head<'a> {
    /// Written by weir in HTTP/1.1 form (`weir_http::http2::write_*_for_h2`),
    /// with its status: what weir's own codec encodes as it is.
    Written(u16, &'a [u8]),
    /// In the `http` crate's form.
    Map(http::Response<()>),
}

impl Head<'_> {
    /// The head for the `h2` crate.
    pub(super) fn into_map(self) -> Result<http::Response<()>, Error> {
        match self {
            Head::Map(map) => Ok(map),
            Head::Written(status, written) => weir_http::http2::written_head_to_h2(status, written)
                .map_err(|error| {
                    Error::new(ErrorKind::Io, Side::Internal)
                        .context(format!("head not representable in HTTP/2: {error}"))
                }),
        }
    }

    /// The head for weir's codec: its status and HTTP/1.1 form.
    pub(super) fn send_own(self, send: &own::Send, end: bool) -> Result<(), Error> {
        match self {
            Head::Written(status, written) => send.send_head(status, written, end),
            Head::Map(map) => {
                let mut written = BytesMut::with_capacity(128);
                own::written_head(&map, &mut written);
                send.send_head(map.status().as_u16(), &written, end)
            }
        }
    }
}

/// The receiving half of an HTTP/2 stream, of either codec.
#[derive(Debug)]
pub(crate) enum RecvHalf {
    H2(RecvStream),
    Own(own::Recv),
    /// A stream to a node on weir's own client (a WebSocket's tunnel).
    Node(weir_upstream::http2::own::Recv),
}

impl RecvHalf {
    /// The next piece of body, `None` at its end.
    pub(crate) fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, Error>>> {
        match self {
            RecvHalf::H2(recv) => recv
                .poll_data(cx)
                .map(|data| data.map(|data| data.map_err(|error| client_gone(&error)))),
            RecvHalf::Own(recv) => recv.poll_data(cx),
            RecvHalf::Node(recv) => recv
                .poll_data(cx)
                .map(|data| data.map(|data| data.map_err(node_gone))),
        }
    }

    pub(crate) async fn data(&mut self) -> Option<Result<Bytes, Error>> {
        poll_fn(|cx| self.poll_data(cx)).await
    }

    /// Bytes taken: the sender's window reopens by as many.
    pub(crate) fn release(&mut self, len: usize) {
        match self {
            RecvHalf::H2(recv) => {
                let _ = recv.flow_control().release_capacity(len);
            }
            RecvHalf::Own(recv) => recv.release(len),
            RecvHalf::Node(recv) => recv.release(len),
        }
    }

    /// The trailer section that ended the body, as HTTP/1.1 lines (`None`: there
    /// was none). Call once the body has ended.
    pub(crate) async fn trailers(&mut self) -> Result<Option<BytesMut>, Error> {
        match self {
            RecvHalf::H2(recv) => {
                let trailers = recv.trailers().await.map_err(|error| client_gone(&error))?;
                Ok(trailers.map(|map| {
                    let mut lines = BytesMut::new();
                    weir_http::http2::trailers_from_h2(&map, &mut lines);
                    lines
                }))
            }
            RecvHalf::Own(recv) => Ok(recv.take_trailers().map(|lines| BytesMut::from(&lines[..]))),
            RecvHalf::Node(recv) => {
                Ok(recv.take_trailers().map(|lines| BytesMut::from(&lines[..])))
            }
        }
    }

    /// Whether the sender ended its side and every byte was taken.
    pub(crate) fn is_end_stream(&self) -> bool {
        match self {
            RecvHalf::H2(recv) => recv.is_end_stream(),
            RecvHalf::Own(recv) => recv.is_end_stream(),
            RecvHalf::Node(recv) => recv.is_end_stream(),
        }
    }
}

/// The sending half of an HTTP/2 stream, of either codec.
#[derive(Debug)]
pub(crate) enum SendHalf {
    H2(SendStream<Bytes>),
    Own(own::Send),
    /// A stream to a node on weir's own client.
    Node(weir_upstream::http2::own::Send),
}

impl SendHalf {
    /// Sends `data` as the peer's windows allow, waiting at most `timeout` for
    /// each opening; `end_of_stream` ends the stream with the last piece.
    /// `sent` grows by the bytes handed to the codec, whether or not all went.
    pub(crate) async fn send_data(
        &mut self,
        data: Bytes,
        end_of_stream: bool,
        timeout: Duration,
        sent: &mut u64,
    ) -> Result<(), Error> {
        match self {
            SendHalf::H2(send) => {
                send_with_capacity(send, data, end_of_stream, timeout, sent).await
            }
            SendHalf::Own(send) => send.send_data(data, end_of_stream, timeout, sent).await,
            SendHalf::Node(send) => send.send_data(data, end_of_stream, timeout, sent).await,
        }
    }

    /// Ends the stream with an empty DATA frame.
    pub(crate) fn send_end(&mut self) -> Result<(), Error> {
        match self {
            SendHalf::H2(send) => send
                .send_data(Bytes::new(), true)
                .map_err(|error| client_gone(&error)),
            SendHalf::Own(send) => send.send_end(),
            SendHalf::Node(send) => send.send_end(),
        }
    }

    /// Trailer lines (HTTP/1.1 form), which end the stream.
    pub(crate) fn send_trailers(&mut self, lines: &[u8]) -> Result<(), Error> {
        match self {
            SendHalf::H2(send) => {
                let map = weir_http::http2::trailers_to_h2(lines).map_err(|error| {
                    Error::new(ErrorKind::BadResponse, Side::Upstream)
                        .context(format!("trailers not representable in HTTP/2: {error}"))
                })?;
                send.send_trailers(map).map_err(|error| client_gone(&error))
            }
            SendHalf::Own(send) => send.send_trailers(lines),
            SendHalf::Node(send) => send.send_trailers(lines),
        }
    }

    /// Resets the stream with `reason`.
    pub(crate) fn send_reset(&mut self, reason: Reason) {
        match self {
            SendHalf::H2(send) => send.send_reset(reason),
            SendHalf::Own(send) => send.send_reset(ErrorCode(u32::from(reason))),
            SendHalf::Node(send) => send.send_reset(ErrorCode(u32::from(reason))),
        }
    }

    /// Ready once the peer reset the stream or its connection is gone.
    pub(crate) fn poll_reset(&mut self, cx: &mut Context<'_>) -> Poll<Error> {
        match self {
            SendHalf::H2(send) => send.poll_reset(cx).map(|reset| match reset {
                Ok(reason) => Error::new(ErrorKind::ClientClosed, Side::Downstream)
                    .context(format!("the client reset the stream ({reason:?})")),
                Err(error) => client_gone(&error),
            }),
            SendHalf::Own(send) => send.poll_reset(cx),
            SendHalf::Node(send) => send.poll_reset(cx).map(node_gone),
        }
    }
}

/// A node's stream on weir's own client failing, kept as the source as the response
/// body's errors are (`upstream::from_node`), so a reset the node sent can be passed on.
fn node_gone(error: weir_upstream::http2::StreamError) -> Error {
    crate::http2::upstream::from_node(error.into(), "HTTP/2 stream to the node")
}
