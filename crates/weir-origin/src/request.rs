//! Sans-IO request heads: turns buffered bytes into a [`RequestHead`] that says how long the
//! head is, how the body is framed and whether the client wants the connection kept.
//!
//! Independent of `weir-http` on purpose: the origin is the cross-check of what the proxy
//! writes (see the crate documentation).

use std::mem::MaybeUninit;
use std::ops::Range;

/// A head longer than this is refused with 431.
pub(crate) const MAX_HEAD_BYTES: usize = 64 * 1024;
/// More header fields than this are refused with 431.
pub(crate) const MAX_HEADERS: usize = 100;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Version {
    Http10,
    Http11,
}

/// How the request body is delimited (RFC 9112 §6.3, without the close-delimited case,
/// which requests never have).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyFraming {
    None,
    Length(u64),
    Chunked,
}

/// What the connection needs to know about one parsed request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RequestHead {
    /// Bytes of the head, including the blank line that ends it.
    pub head_len: usize,
    /// Where the request target lies in the parsed buffer.
    pub target: Range<usize>,
    pub version: Version,
    pub is_head_method: bool,
    pub framing: BodyFraming,
    /// The client asked (or, for HTTP/1.0, did not ask otherwise) to close after this exchange.
    pub wants_close: bool,
    /// `Expect: 100-continue` was sent.
    pub expects_continue: bool,
}

/// Why a request head was refused; the connection answers [`RequestError::status`] and closes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum RequestError {
    #[error("malformed request head: {0}")]
    Malformed(httparse::Error),
    #[error("request head longer than {MAX_HEAD_BYTES} bytes")]
    HeadTooLarge,
    #[error("more than {MAX_HEADERS} header fields")]
    TooManyHeaders,
    #[error("HTTP/1.1 request without a Host header")]
    MissingHost,
    #[error("more than one Host header")]
    DuplicateHost,
    #[error("invalid Content-Length")]
    InvalidContentLength,
    #[error("Transfer-Encoding other than a single `chunked`")]
    UnsupportedTransferEncoding,
    #[error("Transfer-Encoding in an HTTP/1.0 request")]
    TransferEncodingInHttp10,
    #[error("both Transfer-Encoding and Content-Length")]
    ConflictingFraming,
}

impl RequestError {
    /// The status code this error is answered with.
    pub(crate) fn status(self) -> u16 {
        match self {
            RequestError::HeadTooLarge | RequestError::TooManyHeaders => 431,
            RequestError::UnsupportedTransferEncoding => 501,
            _ => 400,
        }
    }
}

/// Parses the head at the start of `buffer`: `Ok(None)` while it is incomplete.
pub(crate) fn parse_head(buffer: &[u8]) -> Result<Option<RequestHead>, RequestError> {
    let mut headers = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut []);
    let parsed = httparse::ParserConfig::default().parse_request_with_uninit_headers(
        &mut request,
        buffer,
        &mut headers,
    );
    let head_len = match parsed {
        Ok(httparse::Status::Complete(head_len)) => head_len,
        Ok(httparse::Status::Partial) if buffer.len() > MAX_HEAD_BYTES => {
            return Err(RequestError::HeadTooLarge);
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(RequestError::TooManyHeaders),
        Err(error) => return Err(RequestError::Malformed(error)),
    };
    if head_len > MAX_HEAD_BYTES {
        return Err(RequestError::HeadTooLarge);
    }
    // A complete parse always fills method, path and version; treat their absence as malformed
    // rather than trusting that here.
    let (Some(method), Some(target), Some(minor)) = (request.method, request.path, request.version)
    else {
        return Err(RequestError::Malformed(httparse::Error::Token));
    };
    let version = match minor {
        0 => Version::Http10,
        1 => Version::Http11,
        _ => return Err(RequestError::Malformed(httparse::Error::Version)),
    };
    let fields = scan_fields(request.headers)?;
    let framing = match (fields.transfer_encodings, fields.content_length) {
        (0, None) => BodyFraming::None,
        (0, Some(length)) => BodyFraming::Length(length),
        (_, Some(_)) => return Err(RequestError::ConflictingFraming),
        _ if version == Version::Http10 => return Err(RequestError::TransferEncodingInHttp10),
        (1, None) if fields.chunked => BodyFraming::Chunked,
        _ => return Err(RequestError::UnsupportedTransferEncoding),
    };
    match fields.hosts {
        0 if version == Version::Http11 => return Err(RequestError::MissingHost),
        0 | 1 => {}
        _ => return Err(RequestError::DuplicateHost),
    }
    let wants_close = match version {
        Version::Http11 => fields.connection_close,
        Version::Http10 => fields.connection_close || !fields.connection_keep_alive,
    };
    Ok(Some(RequestHead {
        head_len,
        target: offset_of(buffer, target.as_bytes())
            ..offset_of(buffer, target.as_bytes()) + target.len(),
        version,
        is_head_method: method == "HEAD",
        framing,
        wants_close,
        expects_continue: fields.expects_continue,
    }))
}

/// What the header fields say about framing and connection management.
#[derive(Debug, Default)]
struct Fields {
    hosts: u32,
    content_length: Option<u64>,
    transfer_encodings: u32,
    chunked: bool,
    connection_close: bool,
    connection_keep_alive: bool,
    expects_continue: bool,
}

fn scan_fields(headers: &[httparse::Header<'_>]) -> Result<Fields, RequestError> {
    let mut fields = Fields::default();
    for header in headers {
        let name = header.name;
        if name.eq_ignore_ascii_case("host") {
            fields.hosts += 1;
        } else if name.eq_ignore_ascii_case("content-length") {
            let length = parse_content_length(header.value)?;
            if fields
                .content_length
                .is_some_and(|previous| previous != length)
            {
                return Err(RequestError::InvalidContentLength);
            }
            fields.content_length = Some(length);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            fields.transfer_encodings += 1;
            fields.chunked = trim(header.value).eq_ignore_ascii_case(b"chunked");
        } else if name.eq_ignore_ascii_case("connection") {
            for token in header.value.split(|&byte| byte == b',') {
                let token = trim(token);
                fields.connection_close |= token.eq_ignore_ascii_case(b"close");
                fields.connection_keep_alive |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if name.eq_ignore_ascii_case("expect") {
            fields.expects_continue |= trim(header.value).eq_ignore_ascii_case(b"100-continue");
        }
    }
    Ok(fields)
}

/// Digits only (no sign, no list), at most 18 of them so the value fits in a u64.
fn parse_content_length(value: &[u8]) -> Result<u64, RequestError> {
    let value = trim(value);
    if value.is_empty() || value.len() > 18 || !value.iter().all(u8::is_ascii_digit) {
        return Err(RequestError::InvalidContentLength);
    }
    Ok(value
        .iter()
        .fold(0u64, |length, digit| length * 10 + u64::from(digit - b'0')))
}

fn trim(mut bytes: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = bytes {
        bytes = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = bytes {
        bytes = rest;
    }
    bytes
}

/// Where `part`, a sub-slice of `buffer`, starts in it.
fn offset_of(buffer: &[u8], part: &[u8]) -> usize {
    part.as_ptr() as usize - buffer.as_ptr() as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Option<RequestHead>, RequestError> {
        parse_head(text.as_bytes())
    }

    fn head(text: &str) -> RequestHead {
        parse(text).expect("valid head").expect("complete head")
    }

    #[test]
    fn simple_get() {
        let text = "GET /bytes/10?x=1 HTTP/1.1\r\nHost: a\r\n\r\nGET";
        let parsed = head(text);
        assert_eq!(parsed.head_len, text.len() - 3);
        assert_eq!(&text[parsed.target.clone()], "/bytes/10?x=1");
        assert_eq!(parsed.version, Version::Http11);
        assert_eq!(parsed.framing, BodyFraming::None);
        assert!(!parsed.wants_close);
        assert!(!parsed.is_head_method);
    }

    #[test]
    fn partial_head_waits_for_more() {
        assert_eq!(parse("GET / HTTP/1.1\r\nHost: a\r\n"), Ok(None));
    }

    #[test]
    fn connection_management() {
        assert!(head("GET / HTTP/1.1\r\nHost: a\r\nConnection: Close\r\n\r\n").wants_close);
        assert!(head("GET / HTTP/1.0\r\n\r\n").wants_close);
        assert!(!head("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").wants_close);
        assert!(
            !head("GET / HTTP/1.1\r\nHost: a\r\nConnection: te, keep-alive\r\n\r\n").wants_close
        );
    }

    #[test]
    fn framing() {
        let length = head("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 12\r\n\r\n");
        assert_eq!(length.framing, BodyFraming::Length(12));
        let chunked = head("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n");
        assert_eq!(chunked.framing, BodyFraming::Chunked);
        let repeated =
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n";
        assert_eq!(head(repeated).framing, BodyFraming::Length(3));
    }

    #[test]
    fn refuses_ambiguous_framing() {
        let cases = [
            (
                "Content-Length: 3\r\nContent-Length: 4",
                RequestError::InvalidContentLength,
            ),
            ("Content-Length: +3", RequestError::InvalidContentLength),
            ("Content-Length: 3, 3", RequestError::InvalidContentLength),
            (
                "Content-Length: 3\r\nTransfer-Encoding: chunked",
                RequestError::ConflictingFraming,
            ),
            (
                "Transfer-Encoding: gzip, chunked",
                RequestError::UnsupportedTransferEncoding,
            ),
            (
                "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked",
                RequestError::UnsupportedTransferEncoding,
            ),
        ];
        for (fields, expected) in cases {
            let text = format!("POST / HTTP/1.1\r\nHost: a\r\n{fields}\r\n\r\n");
            assert_eq!(parse(&text), Err(expected), "{fields}");
        }
        assert_eq!(
            parse("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"),
            Err(RequestError::TransferEncodingInHttp10)
        );
    }

    #[test]
    fn host_rules() {
        assert_eq!(
            parse("GET / HTTP/1.1\r\n\r\n"),
            Err(RequestError::MissingHost)
        );
        assert_eq!(
            parse("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"),
            Err(RequestError::DuplicateHost)
        );
        assert!(parse("GET / HTTP/1.0\r\n\r\n").is_ok());
    }

    #[test]
    fn malformed_and_oversized() {
        assert!(matches!(
            parse("GET / HTTP/1.1\r\nBad Header: x\r\n\r\n"),
            Err(RequestError::Malformed(_))
        ));
        assert!(matches!(
            parse("PRI * HTTP/2.0\r\n\r\n"),
            Err(RequestError::Malformed(_))
        ));
        let long = format!("GET /{} HTTP/1.1\r\n", "a".repeat(MAX_HEAD_BYTES));
        assert_eq!(parse(&long), Err(RequestError::HeadTooLarge));
        let many: String = (0..=MAX_HEADERS).map(|i| format!("X-{i}: v\r\n")).collect();
        let text = format!("GET / HTTP/1.1\r\nHost: a\r\n{many}\r\n");
        assert_eq!(parse(&text), Err(RequestError::TooManyHeaders));
        assert_eq!(RequestError::TooManyHeaders.status(), 431);
    }
}
