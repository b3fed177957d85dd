//! The small value types every part of the codec shares: versions, methods,
//! body framing and what the `Connection` header says. A leaf module: it
//! imports nothing from the rest of the crate.

/// The HTTP versions weir speaks on HTTP/1 connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// HTTP/1.0.
    Http10,
    /// HTTP/1.1.
    Http11,
}

/// A request method; the standard ones by name, the rest as [`Method::Other`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// `GET`.
    Get,
    /// `HEAD`: answered without a body.
    Head,
    /// `POST`.
    Post,
    /// `PUT`.
    Put,
    /// `DELETE`.
    Delete,
    /// `OPTIONS`.
    Options,
    /// `TRACE`.
    Trace,
    /// `CONNECT`: asks for a tunnel to the authority in the target.
    Connect,
    /// `PATCH`.
    Patch,
    /// Any other valid token; see [`crate::RequestHead::method_bytes`].
    Other,
}

impl Method {
    /// RFC 9110 §9.2.2: may be sent again without changing the outcome.
    pub fn is_idempotent(self) -> bool {
        matches!(
            self,
            Method::Get
                | Method::Head
                | Method::Put
                | Method::Delete
                | Method::Options
                | Method::Trace
        )
    }

    /// The method named by `token` (case-sensitive, as methods are).
    pub fn from_bytes(token: &[u8]) -> Method {
        match token {
            b"GET" => Method::Get,
            b"HEAD" => Method::Head,
            b"POST" => Method::Post,
            b"PUT" => Method::Put,
            b"DELETE" => Method::Delete,
            b"OPTIONS" => Method::Options,
            b"TRACE" => Method::Trace,
            b"CONNECT" => Method::Connect,
            b"PATCH" => Method::Patch,
            _ => Method::Other,
        }
    }
}

/// How a message body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    /// No body.
    None,
    /// Exactly this many bytes (`Content-Length`).
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Until the connection closes (responses only).
    CloseDelimited,
}

/// What the `Connection` header (and the version) say about the connection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnectionInfo {
    /// `close` token present.
    pub close: bool,
    /// `keep-alive` token present.
    pub keep_alive: bool,
    /// `upgrade` token present.
    pub upgrade: bool,
}
