//! What a request to an HTTP/2 node holds, whichever codec carries the
//! node's connections (`http2.codec`): the request as each codec takes it,
//! the stream it opened, and the errors of both, asked the same questions
//! (was the request processed, is the connection lost, did the node reset
//! the stream and why).

use bytes::Bytes;
use h2::SendStream;
use h2::client::ResponseFuture;
use weir_http::frame::ErrorCode;
use weir_http::h2client::Refused;

use super::own;
pub use super::own::StreamError;

/// A request for a node, in the form its connection's codec takes.
#[derive(Debug)]
pub enum StreamRequest {
    /// For the `h2` crate.
    H2(http::Request<()>),
    /// For weir's own client: the head as written for an HTTP/1.1 node.
    Own(OwnRequest),
}

/// A request head for weir's own client (`weir_http::http2::NodeRequest`,
/// the scheme added from the pool's TLS).
#[derive(Debug, Clone)]
pub struct OwnRequest {
    /// The HTTP/1.1 head weir wrote for the node.
    pub written: Bytes,
    /// The client asked for trailers (`TE: trailers`).
    pub te_trailers: bool,
    /// `:protocol` of an extended CONNECT (RFC 8441).
    pub protocol: Option<&'static [u8]>,
}

/// A stream opened on a node's connection: the response to come and the
/// request body's sender.
#[derive(Debug)]
pub enum NodeStream {
    /// On the `h2` crate.
    H2 {
        /// The node's response head, to come.
        response: ResponseFuture,
        /// Where the rest of the request body goes.
        body: SendStream<Bytes>,
    },
    /// On weir's own client.
    Own {
        /// The node's answer and its body.
        recv: own::Recv,
        /// Where the rest of the request body goes.
        send: own::Send,
    },
}

/// A node stream's failure, from either codec.
#[derive(Debug)]
pub enum NodeError {
    /// The `h2` crate's.
    H2(h2::Error),
    /// weir's own client's.
    Own(StreamError),
}

impl NodeError {
    /// The node did not process the request (GOAWAY received, the stream above
    /// its last stream id, REFUSED_STREAM, no stream opened): any request may
    /// be sent again on another connection.
    pub fn refused(&self) -> bool {
        match self {
            NodeError::H2(error) => {
                (error.is_go_away() && error.is_remote())
                    || error.reason() == Some(h2::Reason::REFUSED_STREAM)
            }
            NodeError::Own(StreamError::Refused(_)) => true,
            NodeError::Own(StreamError::Reset { unprocessed, .. }) => *unprocessed,
            NodeError::Own(_) => false,
        }
    }

    /// The connection takes no new stream: it is drained. (A connection with
    /// no stream free just now is not.)
    pub fn ends_the_connection(&self) -> bool {
        match self {
            NodeError::H2(_) => true,
            NodeError::Own(StreamError::Refused(refused)) => *refused != Refused::Full,
            NodeError::Own(_) => true,
        }
    }

    /// The refusal came with the node's GOAWAY (counted as one).
    pub fn is_go_away(&self) -> bool {
        match self {
            NodeError::H2(error) => error.is_go_away(),
            NodeError::Own(StreamError::Refused(refused)) => *refused == Refused::GoingAway,
            NodeError::Own(StreamError::Reset {
                by_node,
                unprocessed,
                code,
            }) => *by_node && *unprocessed && *code != ErrorCode::REFUSED_STREAM,
            NodeError::Own(_) => false,
        }
    }

    /// The connection was lost under the stream (closed or broken without a
    /// GOAWAY).
    pub fn is_io(&self) -> bool {
        match self {
            NodeError::H2(error) => error.is_io(),
            NodeError::Own(error) => matches!(
                error,
                StreamError::Closed | StreamError::Refused(Refused::Failed)
            ),
        }
    }

    /// The code the node reset the stream with, if it did.
    pub fn node_reset(&self) -> Option<u32> {
        match self {
            NodeError::H2(error) if error.is_reset() && error.is_remote() => {
                error.reason().map(u32::from)
            }
            NodeError::H2(_) => None,
            NodeError::Own(StreamError::Reset {
                code,
                by_node: true,
                ..
            }) => Some(code.0),
            NodeError::Own(_) => None,
        }
    }

    /// The node's head broke the rules (a bad response, not a lost one).
    pub fn is_malformed(&self) -> bool {
        matches!(self, NodeError::Own(StreamError::Malformed(_)))
    }
}

impl std::fmt::Display for NodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NodeError::H2(error) => error.fmt(f),
            NodeError::Own(error) => error.fmt(f),
        }
    }
}

impl std::error::Error for NodeError {}

impl From<h2::Error> for NodeError {
    fn from(error: h2::Error) -> Self {
        NodeError::H2(error)
    }
}

impl From<StreamError> for NodeError {
    fn from(error: StreamError) -> Self {
        NodeError::Own(error)
    }
}
