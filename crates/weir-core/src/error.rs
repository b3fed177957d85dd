//! One error shape for the data path: what went wrong, on which side, and
//! whether the request may safely be tried again.

use std::fmt;

/// Which side of the proxy an error came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The client (bad request, slow client, client went away).
    Downstream,
    /// A node (connect refused, timed out, bad response).
    Upstream,
    /// weir itself (queue full, no node available, configuration).
    Internal,
}

/// What went wrong. Each kind maps to exactly one HTTP answer in the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The client sent something that is not valid HTTP (→ 400).
    BadRequest,
    /// The request head is larger than allowed (→ 431).
    HeadTooLarge,
    /// The request body is larger than allowed (→ 413).
    BodyTooLarge,
    /// The method is not served by this virtual server: CONNECT or TRACE
    /// unless allowed (→ 405).
    MethodNotAllowed,
    /// The client took too long to send its head or body (→ 408).
    ClientTimeout,
    /// The client closed or reset the connection.
    ClientClosed,
    /// A connection to a node could not be opened (→ 502).
    ConnectFailed,
    /// Opening a connection to a node took too long (→ 502).
    ConnectTimeout,
    /// The node did not answer within the response timeout (→ 504).
    ResponseTimeout,
    /// The node closed the connection or sent something that is not valid HTTP (→ 502).
    BadResponse,
    /// Every allowed connection was busy and the queue was full (→ 503).
    QueueFull,
    /// The request waited in the queue past the queue timeout (→ 503).
    QueueTimeout,
    /// No node in the pool is available (→ 503).
    NoNodeAvailable,
    /// weir is shutting down (→ 503).
    ShuttingDown,
    /// The connection cannot serve this request although another one could: its TLS
    /// handshake passed client certificate checks a reload has changed since (→ 421,
    /// which a client may retry on a new connection, RFC 9110 §15.5.20).
    Misdirected,
    /// weir itself ran out of something to open a connection with: file descriptors,
    /// memory, local ports (→ 503). Not the node's failure: it counts against no node.
    OutOfResources,
    /// An I/O error not covered above.
    Io,
}

/// A data-path error.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    side: Side,
    retry_safe: bool,
    context: Option<Box<str>>,
    source: Option<std::io::Error>,
}

impl Error {
    /// An error of `kind` on `side`, not safe to retry, without context or source.
    pub fn new(kind: ErrorKind, side: Side) -> Self {
        Error {
            kind,
            side,
            retry_safe: false,
            context: None,
            source: None,
        }
    }

    /// An upstream error from an I/O error.
    pub fn upstream(kind: ErrorKind, source: std::io::Error) -> Self {
        Error {
            source: Some(source),
            ..Error::new(kind, Side::Upstream)
        }
    }

    /// An error from a failed connect to a node: [`ErrorKind::OutOfResources`] (weir's
    /// side, not retry-safe: another node would fail alike) when weir itself ran out of
    /// descriptors, memory or local ports, else `kind` on the node's side, retry-safe
    /// (nothing was sent).
    pub fn connect(kind: ErrorKind, source: std::io::Error) -> Self {
        if is_out_of_resources(&source) {
            Error {
                source: Some(source),
                ..Error::new(ErrorKind::OutOfResources, Side::Internal)
            }
        } else {
            Error::upstream(kind, source).retry_safe(true)
        }
    }

    /// A downstream error from an I/O error.
    pub fn downstream(kind: ErrorKind, source: std::io::Error) -> Self {
        Error {
            source: Some(source),
            ..Error::new(kind, Side::Downstream)
        }
    }

    /// Marks whether the request that failed may be sent again: decided once,
    /// where the error is made, from what the node can have seen of it (nothing
    /// before a connect or handshake completed; a request on a reused
    /// connection that the node had already closed, when the request is
    /// idempotent and fully buffered). The exchange loop only reads it.
    pub fn retry_safe(mut self, safe: bool) -> Self {
        self.retry_safe = safe;
        self
    }

    /// Adds a short human explanation, shown in logs.
    pub fn context(mut self, context: impl Into<Box<str>>) -> Self {
        self.context = Some(context.into());
        self
    }

    /// What went wrong, which decides the answer and the metric label.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// Which side of the proxy the error came from.
    pub fn side(&self) -> Side {
        self.side
    }

    /// Whether the failed request may be sent again (set where the error was made, see
    /// `retry_safe`).
    pub fn is_retry_safe(&self) -> bool {
        self.retry_safe
    }
}

/// Whether `error` says weir itself ran out of something (descriptors of the process or
/// the system, socket buffers, memory, local ports), not that the other end failed.
pub fn is_out_of_resources(error: &std::io::Error) -> bool {
    use rustix::io::Errno;
    Errno::from_io_error(error).is_some_and(|errno| {
        [
            Errno::MFILE,
            Errno::NFILE,
            Errno::NOBUFS,
            Errno::NOMEM,
            Errno::ADDRNOTAVAIL,
        ]
        .contains(&errno)
    })
}

impl ErrorKind {
    /// A stable, lower-case name for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::BadRequest => "bad_request",
            ErrorKind::HeadTooLarge => "head_too_large",
            ErrorKind::BodyTooLarge => "body_too_large",
            ErrorKind::MethodNotAllowed => "method_not_allowed",
            ErrorKind::ClientTimeout => "client_timeout",
            ErrorKind::ClientClosed => "client_closed",
            ErrorKind::ConnectFailed => "connect_failed",
            ErrorKind::ConnectTimeout => "connect_timeout",
            ErrorKind::ResponseTimeout => "response_timeout",
            ErrorKind::BadResponse => "bad_response",
            ErrorKind::QueueFull => "queue_full",
            ErrorKind::QueueTimeout => "queue_timeout",
            ErrorKind::NoNodeAvailable => "no_node_available",
            ErrorKind::ShuttingDown => "shutting_down",
            ErrorKind::Misdirected => "misdirected",
            ErrorKind::OutOfResources => "out_of_resources",
            ErrorKind::Io => "io",
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let side = match self.side {
            Side::Downstream => "client",
            Side::Upstream => "upstream",
            Side::Internal => "internal",
        };
        write!(f, "{side} {}", self.kind.as_str())?;
        if let Some(context) = &self.context {
            write!(f, ": {context}")?;
        }
        if let Some(source) = &self.source {
            write!(f, ": {source}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_ref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_side_kind_and_context() {
        let e = Error::upstream(
            ErrorKind::ConnectFailed,
            std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
        )
        .context("node 127.0.0.1:1");
        let text = e.to_string();
        assert!(
            text.starts_with("upstream connect_failed: node 127.0.0.1:1"),
            "{text}"
        );
        assert!(!e.is_retry_safe());
    }
}
