//! Errors → answers: the one place that decides which status a failure gets.

use weir_core::{Error, ErrorKind, Side};
use weir_http::{ParseError, ParseErrorKind, Version};

/// A request that ends early: what to tell the client (if anything) and why.
#[derive(Debug)]
pub(crate) struct Failure {
    /// The status to answer with; `None` when the client is gone or the
    /// response was already started (then the connection is just closed).
    pub status: Option<u16>,
    pub error: Error,
    /// What the access record says beyond the error. Boxed: a failure is rare, and every
    /// `Result` of the request path carries the size of this struct (`bench/insns`: 50
    /// instructions more per cache hit unboxed).
    pub detail: Option<Box<Detail>>,
}

/// The access record's part of a failure.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Detail {
    /// The answer the client had already been given part of (its head went out).
    pub answered: Option<Answered>,
    /// The node the request reached, when it reached one.
    pub node: Option<std::net::SocketAddr>,
    /// What the cache did, when the answer cut short came through it (`X-Cache`'s value).
    pub cache: Option<&'static str>,
    /// Body bytes read from the client before the request failed (its head aside).
    pub body_received: u64,
    /// Of an HTTP/2 request refused before it formed a head: (a gRPC call, a HEAD), so
    /// that weir's answer still takes the form the request asks (trailers-only, no body).
    pub refused: Option<(bool, bool)>,
}

/// A response that started: its status and the bytes sent of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Answered {
    pub status: u16,
    pub bytes: u64,
}

impl Failure {
    /// A failure with the standard answer for its kind.
    pub(crate) fn from_error(error: Error) -> Failure {
        Failure {
            status: status_for(error.kind()),
            error,
            detail: None,
        }
    }

    /// A request the client sent badly.
    pub(crate) fn parse(error: ParseError) -> Failure {
        let kind = match error.kind {
            ParseErrorKind::HeadTooLarge | ParseErrorKind::TooManyHeaders => {
                ErrorKind::HeadTooLarge
            }
            _ => ErrorKind::BadRequest,
        };
        Failure {
            status: Some(error.status()),
            error: Error::new(kind, Side::Downstream).context(error.reason),
            detail: None,
        }
    }

    /// The node sent something that is not valid HTTP.
    pub(crate) fn bad_response(error: ParseError) -> Failure {
        Failure::from_error(
            Error::new(ErrorKind::BadResponse, Side::Upstream).context(error.reason),
        )
    }

    /// A node's head that failed to go out on an HTTP/2 stream: one HTTP/2 cannot carry
    /// (the stream says so with an internal error) is the node's fault, a bad response
    /// (`what`: which head); any other failure (the client gone) is the stream's own.
    pub(crate) fn node_head_on_stream(error: Error, what: &'static str) -> Failure {
        if error.side() == Side::Internal {
            Failure::from_error(Error::new(ErrorKind::BadResponse, Side::Upstream).context(what))
        } else {
            Failure::from_error(error)
        }
    }

    /// A request weir does not carry (501), such as CONNECT over HTTP/2.
    pub(crate) fn not_implemented(what: &'static str) -> Failure {
        Failure {
            status: Some(501),
            error: Error::new(ErrorKind::MethodNotAllowed, Side::Downstream)
                .context(format!("{what} is not implemented")),
            detail: None,
        }
    }

    /// Close without an answer (client gone, or the response already started).
    pub(crate) fn silent(error: Error) -> Failure {
        Failure {
            status: None,
            error,
            detail: None,
        }
    }

    /// This failure, after the client was given `status` and `bytes` of the answer (kept
    /// if an inner stage said so already): it can only end the connection now.
    pub(crate) fn after(self, status: u16, bytes: u64) -> Failure {
        let mut detail = self.detail.unwrap_or_default();
        detail.answered = detail.answered.or(Some(Answered { status, bytes }));
        Failure {
            status: None,
            error: self.error,
            detail: Some(detail),
        }
    }

    /// This failure, of a request that reached `node` (kept if already set).
    pub(crate) fn at_node(mut self, node: std::net::SocketAddr) -> Failure {
        let detail = self.detail.get_or_insert_with(Box::default);
        detail.node = detail.node.or(Some(node));
        self
    }

    /// This failure, of a request whose body had `received` bytes read when it failed (kept
    /// if an inner stage said more already): `weir_client_bytes_received_total` counts them.
    pub(crate) fn with_body(mut self, received: u64) -> Failure {
        if received > 0 {
            let detail = self.detail.get_or_insert_with(Box::default);
            detail.body_received = detail.body_received.max(received);
        }
        self
    }

    /// This failure, at `node` ([`Failure::at_node`]) after `received` body bytes
    /// ([`Failure::with_body`]).
    pub(crate) fn at_node_after(self, node: std::net::SocketAddr, received: u64) -> Failure {
        self.at_node(node).with_body(received)
    }

    /// This failure, of an HTTP/2 request refused before it formed a head, that was a
    /// gRPC call (`grpc`) or a HEAD (`head`) ([`Detail::refused`]).
    pub(crate) fn of_refused(mut self, grpc: bool, head: bool) -> Failure {
        if grpc || head {
            self.detail.get_or_insert_with(Box::default).refused = Some((grpc, head));
        }
        self
    }

    /// Body bytes read from the client before the request failed.
    pub(crate) fn body_received(&self) -> u64 {
        self.detail
            .as_ref()
            .map_or(0, |detail| detail.body_received)
    }

    /// This failure, of an answer the cache gave as `cache` (kept if already set).
    pub(crate) fn in_cache(mut self, cache: Option<&'static str>) -> Failure {
        if cache.is_some() {
            let detail = self.detail.get_or_insert_with(Box::default);
            detail.cache = detail.cache.or(cache);
        }
        self
    }

    /// What the cache did, for the access record.
    pub(crate) fn cache(&self) -> Option<&'static str> {
        self.detail.as_ref().and_then(|detail| detail.cache)
    }

    /// The answer the client had been given part of, if any.
    pub(crate) fn answered(&self) -> Option<Answered> {
        self.detail.as_ref().and_then(|detail| detail.answered)
    }

    /// The node the request reached, if any.
    pub(crate) fn node(&self) -> Option<std::net::SocketAddr> {
        self.detail.as_ref().and_then(|detail| detail.node)
    }

    /// The status the access record and the metrics report for a failed request: the
    /// answer's, when one was given or started; else 499 for a client that went away or
    /// went silent (the convention of nginx's logs); else 500 (a failure of weir's own,
    /// nothing sent).
    pub(crate) fn logged_status(&self) -> u16 {
        match (self.status, self.answered()) {
            (Some(status), _) => status,
            (None, Some(answered)) => answered.status,
            (None, None) => match self.error.kind() {
                ErrorKind::ClientClosed | ErrorKind::ClientTimeout => 499,
                // Cut at the drain timeout after interim answers only.
                ErrorKind::ShuttingDown => 503,
                _ => 500,
            },
        }
    }
}

impl From<Error> for Failure {
    fn from(error: Error) -> Failure {
        Failure::from_error(error)
    }
}

/// A request's bytes as access-record text.
pub(crate) fn lossy(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).unwrap_or("<non-utf8>")
}

/// The version as access records write it (an HTTP/2 stream's client says
/// so through [`Client::version_label`](crate::client::Client::version_label)).
pub(crate) fn version_str(version: Version) -> &'static str {
    match version {
        Version::Http10 => "HTTP/1.0",
        Version::Http11 => "HTTP/1.1",
    }
}

/// The status a failure of this kind is answered with.
pub(crate) fn status_for(kind: ErrorKind) -> Option<u16> {
    Some(match kind {
        ErrorKind::BadRequest => 400,
        ErrorKind::HeadTooLarge => 431,
        ErrorKind::BodyTooLarge => 413,
        ErrorKind::MethodNotAllowed => 405,
        ErrorKind::ClientTimeout => 408,
        ErrorKind::ClientClosed => return None,
        ErrorKind::ConnectFailed | ErrorKind::ConnectTimeout | ErrorKind::BadResponse => 502,
        ErrorKind::ResponseTimeout => 504,
        ErrorKind::Misdirected => 421,
        ErrorKind::QueueFull
        | ErrorKind::QueueTimeout
        | ErrorKind::NoNodeAvailable
        | ErrorKind::ShuttingDown
        | ErrorKind::OutOfResources => 503,
        ErrorKind::Io => 502,
    })
}

/// The gRPC status a gRPC client infers from an HTTP status that comes
/// without one (gRPC's HTTP-to-gRPC mapping): weir's own answers to gRPC
/// requests carry it in `grpc-status`, so every client reads the same code.
pub(crate) fn grpc_status_for(status: u16) -> u32 {
    match status {
        400 => 13,                   // INTERNAL
        401 => 16,                   // UNAUTHENTICATED
        403 => 7,                    // PERMISSION_DENIED
        404 => 12,                   // UNIMPLEMENTED
        429 | 502 | 503 | 504 => 14, // UNAVAILABLE
        _ => 2,                      // UNKNOWN
    }
}

/// The fields of weir's own answer with `status` to a gRPC request, which
/// make it a trailers-only gRPC response (sent without a body): the
/// content type, [`grpc_status_for`] and the short reason as the message.
pub(crate) fn grpc_fields(status: u16) -> [(&'static str, &'static str); 3] {
    let code = match grpc_status_for(status) {
        13 => "13",
        16 => "16",
        7 => "7",
        12 => "12",
        14 => "14",
        _ => "2",
    };
    let message = std::str::from_utf8(body_for(status)).unwrap_or_default();
    [
        ("content-type", "application/grpc"),
        ("grpc-status", code),
        ("grpc-message", message.trim_end()),
    ]
}

/// Extra headers that go with a status weir generates.
pub(crate) fn headers_for(status: u16) -> &'static [(&'static str, &'static str)] {
    match status {
        503 => &[("Retry-After", "1")],
        405 => &[("Allow", "GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH")],
        _ => &[],
    }
}

/// The short body of a generated answer.
pub(crate) fn body_for(status: u16) -> &'static [u8] {
    match status {
        400 => b"bad request\n",
        401 => b"unauthorized\n",
        403 => b"forbidden\n",
        404 => b"not found\n",
        410 => b"gone\n",
        429 => b"too many requests\n",
        408 => b"request timeout\n",
        405 => b"method not allowed\n",
        413 => b"request body too large\n",
        417 => b"expectation failed\n",
        431 => b"request header fields too large\n",
        501 => b"not implemented\n",
        502 => b"bad gateway\n",
        503 => b"service unavailable\n",
        504 => b"gateway timeout\n",
        505 => b"http version not supported\n",
        _ => b"error\n",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_kinds_map_to_gateway_statuses() {
        assert_eq!(status_for(ErrorKind::ConnectFailed), Some(502));
        assert_eq!(status_for(ErrorKind::ResponseTimeout), Some(504));
        assert_eq!(status_for(ErrorKind::QueueTimeout), Some(503));
        assert_eq!(status_for(ErrorKind::ClientClosed), None);
        assert_eq!(headers_for(503), &[("Retry-After", "1")]);
    }
}
