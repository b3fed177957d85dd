//! A node's answer on a stream, whichever codec carries the node's
//! connections (`http2.codec`): the `h2` crate's response future and body, or
//! weir's own client's receiving half (`weir_upstream::http2::own::Recv`),
//! with heads in the form each gives them (the `http` crate's parts, or the
//! HTTP/1.1 `ResponseHead` weir's client already wrote), turned into one form
//! by `super::head_within` and `super::interim_head`.

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use h2::RecvStream;
use h2::client::ResponseFuture;
use weir_http::ResponseHead;
use weir_upstream::http2::NodeError;
use weir_upstream::http2::own::{self, Answer};

use crate::http2::RecvHalf;

/// The node's response to come.
#[derive(Debug)]
pub(crate) enum NodeResponse {
    H2(ResponseFuture),
    Own(own::Recv),
}

/// A final response head as the node's codec gave it.
#[derive(Debug)]
pub(crate) enum RawHead {
    H2(http::response::Parts),
    Own(ResponseHead),
}

/// An interim (1xx) head as the node's codec gave it: for weir's own client, its
/// status and HTTP/1.1 field lines.
#[derive(Debug)]
pub(crate) enum RawInterim {
    H2(http::Response<()>),
    Own(u16, Vec<u8>),
}

/// What the node answered next.
#[derive(Debug)]
pub(crate) enum RawAnswer {
    Interim(RawInterim),
    Final(RawHead, NodeBody),
}

impl NodeResponse {
    /// The node's next answer: an interim head, or the final one with its body
    /// (after which nothing more is asked).
    pub(crate) fn poll_answer(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<RawAnswer, NodeError>> {
        match self {
            NodeResponse::H2(response) => {
                // The `h2` crate's future passes over (and drops) the interim heads it
                // finds queued when polled, so they are taken first.
                match response.poll_informational(cx) {
                    Poll::Ready(Some(Ok(interim))) => {
                        return Poll::Ready(Ok(RawAnswer::Interim(RawInterim::H2(interim))));
                    }
                    Poll::Ready(Some(Err(error))) => return Poll::Ready(Err(error.into())),
                    Poll::Ready(None) | Poll::Pending => {}
                }
                Pin::new(response).poll(cx).map(|answered| {
                    let (parts, body) = answered?.into_parts();
                    Ok(RawAnswer::Final(RawHead::H2(parts), NodeBody::H2(body)))
                })
            }
            NodeResponse::Own(recv) => recv.poll_answer(cx).map(|answered| {
                Ok(match answered? {
                    Answer::Interim(status, lines) => {
                        RawAnswer::Interim(RawInterim::Own(status, lines))
                    }
                    Answer::Final(head, _) => {
                        RawAnswer::Final(RawHead::Own(head), NodeBody::Own(recv.share()))
                    }
                })
            }),
        }
    }

    /// The final answer, interim ones passed over.
    pub(crate) fn poll_final(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(RawHead, NodeBody), NodeError>> {
        loop {
            match self.poll_answer(cx) {
                Poll::Ready(Ok(RawAnswer::Interim(_))) => {}
                Poll::Ready(Ok(RawAnswer::Final(head, body))) => {
                    return Poll::Ready(Ok((head, body)));
                }
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// A node's response body.
#[derive(Debug)]
pub(crate) enum NodeBody {
    H2(RecvStream),
    Own(own::Recv),
}

impl NodeBody {
    /// The next piece of body (`None` at its end); its bytes go back to the node's
    /// window at once (the caller takes them).
    pub(crate) async fn data(&mut self) -> Option<Result<Bytes, NodeError>> {
        match self {
            NodeBody::H2(body) => {
                let data = body.data().await?;
                if let Ok(data) = &data {
                    let _ = body.flow_control().release_capacity(data.len());
                }
                Some(data.map_err(NodeError::from))
            }
            NodeBody::Own(body) => {
                let data = poll_fn(|cx| body.poll_data(cx)).await?;
                if let Ok(data) = &data {
                    body.release(data.len());
                }
                Some(data.map_err(NodeError::from))
            }
        }
    }

    /// Whether the node ended the stream and every byte was taken.
    pub(crate) fn is_end_stream(&self) -> bool {
        match self {
            NodeBody::H2(body) => body.is_end_stream(),
            NodeBody::Own(body) => body.is_end_stream(),
        }
    }

    /// The trailer section that ended the body, as HTTP/1.1 lines (`None`: there was
    /// none). Asked once the body has ended.
    pub(crate) async fn trailers(&mut self) -> Result<Option<BytesMut>, NodeError> {
        match self {
            NodeBody::H2(body) => Ok(body.trailers().await?.map(|map| {
                let mut lines = BytesMut::new();
                weir_http::http2::trailers_from_h2(&map, &mut lines);
                lines
            })),
            NodeBody::Own(body) => Ok(body.take_trailers().map(|lines| BytesMut::from(&lines[..]))),
        }
    }

    /// The body as a stream half, to carry a tunnel (a WebSocket).
    pub(crate) fn into_half(self) -> RecvHalf {
        match self {
            NodeBody::H2(body) => RecvHalf::H2(body),
            NodeBody::Own(body) => RecvHalf::Node(body),
        }
    }
}
