//! Why a stream of weir's own client failed, or did not open.

use weir_http::frame::ErrorCode;
use weir_http::h2client::Refused;

/// Why a stream of weir's own client failed, or did not open.
#[derive(Debug, Clone)]
pub enum StreamError {
    /// No stream opened: the connection takes no new one, and why.
    Refused(Refused),
    /// The request has no HTTP/2 form (the stream was reset at once).
    Unrepresentable(String),
    /// Reset, by the node or by weir.
    Reset {
        /// The RST_STREAM's code (or the GOAWAY's, for a stream it refused).
        code: ErrorCode,
        /// The node reset it.
        by_node: bool,
        /// The node did not process the request (RFC 9113 §8.7).
        unprocessed: bool,
    },
    /// The node's head broke HTTP/2's rules or HTTP/1.1's (the stream was reset).
    Malformed(String),
    /// The connection ended under the stream.
    Closed,
}

impl std::fmt::Display for StreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StreamError::Refused(Refused::GoingAway) => f.write_str("connection going away"),
            StreamError::Refused(Refused::Full) => f.write_str("no stream free on the connection"),
            StreamError::Refused(Refused::Exhausted) => f.write_str("stream ids used up"),
            StreamError::Refused(Refused::Failed) => f.write_str("connection failed"),
            StreamError::Unrepresentable(why) => write!(f, "not representable in HTTP/2: {why}"),
            StreamError::Reset {
                code,
                by_node: true,
                ..
            } => write!(f, "stream reset by the node ({code:?})"),
            StreamError::Reset { code, .. } => write!(f, "stream reset by weir ({code:?})"),
            StreamError::Malformed(why) => write!(f, "malformed response: {why}"),
            StreamError::Closed => f.write_str("connection closed"),
        }
    }
}

impl std::error::Error for StreamError {}
