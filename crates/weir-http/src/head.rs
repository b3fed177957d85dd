//! Request and response heads: strict parsing over `httparse` and the framing
//! rules that decide where a body ends.
//!
//! A parsed head owns its raw bytes and keeps every part as a `u32` span into
//! them, so parsing allocates only the span vector and forwarding can copy
//! header lines byte for byte.

use std::mem::MaybeUninit;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};

use crate::error::{ParseError, ParseErrorKind};
use crate::fields::{self, Declared, FieldKind, Fields, Header, StartLine, keep_alive_timeout};
use crate::message::{BodyFraming, ConnectionInfo, Method, Version};
use crate::target::{TargetForm, authority_port, parse_target, same_authority};

/// Header slots kept on the stack; larger `max_headers` limits use the heap.
const STACK_HEADERS: usize = 128;

/// Limits applied while parsing a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes in the whole head, request/status line included; past it → `HeadTooLarge` (431).
    pub max_head_bytes: usize,
    /// Header fields; past it → `TooManyHeaders` (431).
    pub max_headers: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_head_bytes: 16 * 1024,
            max_headers: 100,
        }
    }
}

/// The outcome of a parse attempt on a buffer.
#[derive(Debug)]
pub enum Parsed<T> {
    /// A whole head was found: the value and the number of bytes it used.
    Complete(T, usize),
    /// More bytes are needed (and the buffer is still within the limits).
    Partial,
}

/// A parsed, validated request head. Owns the raw head bytes; every accessor
/// borrows from them, so header names keep their original case.
#[derive(Debug, Clone)]
pub struct RequestHead {
    /// From the request line to the final CRLF (leading empty lines dropped).
    pub(crate) raw: Bytes,
    pub(crate) method: Method,
    pub(crate) method_span: (u32, u32),
    pub(crate) target_span: (u32, u32),
    pub(crate) target_form: TargetForm,
    pub(crate) path_span: (u32, u32),
    pub(crate) version: Version,
    pub(crate) headers: Vec<Header>,
    pub(crate) framing: BodyFraming,
    pub(crate) connection: ConnectionInfo,
    /// `Connection` lists field names besides close/keep-alive/upgrade.
    pub(crate) connection_names_fields: bool,
    pub(crate) expect_continue: bool,
    /// Some field name holds an underscore.
    pub(crate) underscore_names: bool,
    /// Index into `headers` of the `Host` field.
    pub(crate) host: Option<usize>,
}

/// A parsed, validated response head.
#[derive(Debug, Clone)]
pub struct ResponseHead {
    /// From the status line to the final CRLF.
    pub(crate) raw: Bytes,
    pub(crate) status: u16,
    pub(crate) reason_span: (u32, u32),
    pub(crate) version: Version,
    pub(crate) headers: Vec<Header>,
    pub(crate) framing: BodyFraming,
    pub(crate) connection: ConnectionInfo,
    pub(crate) connection_names_fields: bool,
    /// The request was HEAD: a `Content-Length` describes the GET body.
    pub(crate) head_request: bool,
    /// The fields announce a body (a non-zero length, or chunked) that the
    /// method or status rules out.
    pub(crate) announces_absent_body: bool,
}

/// The method, target and version of the request line at the start of `buf`, when it is
/// one (`METHOD SP target SP HTTP/...`: a token, then a target without spaces or controls),
/// whatever the rest of the head: what the access record of a head refused whole (417, 501,
/// 505, a bad field) can still name. The version is `Some` only when it reads `HTTP/x.y`
/// with one digit each side (a version weir does not speak is still one to report). Looks
/// at the first 8 KiB only.
pub fn request_line(buf: &[u8]) -> Option<RequestLine<'_>> {
    let end = buf.iter().take(8 * 1024).position(|&b| b == b'\n')?;
    let line = buf[..end].strip_suffix(b"\r").unwrap_or(&buf[..end]);
    let mut parts = line.split(|&b| b == b' ');
    let (method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
    let sound = parts.next().is_none()
        && !method.is_empty()
        && method.iter().all(|&b| crate::syntax::is_token_char(b))
        && !target.is_empty()
        && target.iter().all(u8::is_ascii_graphic)
        && version.starts_with(b"HTTP/");
    let digits = matches!(version, [b'H', b'T', b'T', b'P', b'/', major, b'.', minor]
        if major.is_ascii_digit() && minor.is_ascii_digit());
    sound.then_some(RequestLine {
        method,
        target,
        version: digits.then_some(version),
    })
}

/// What [`request_line`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestLine<'a> {
    /// The method token.
    pub method: &'a [u8],
    /// The target, as sent.
    pub target: &'a [u8],
    /// The version, when it reads `HTTP/x.y`.
    pub version: Option<&'a [u8]>,
}

/// Parses a request head at the start of `buf`. On `Complete(head, n)` the
/// caller removes `n` bytes from its buffer (the head owns a copy of them, or
/// a zero-copy split when called through [`RequestHead::split_from`]).
pub fn parse_request(buf: &[u8], limits: &Limits) -> Result<Parsed<RequestHead>, ParseError> {
    let found = match parse_request_in(buf, limits) {
        Err(error) => match later_minor_copy(buf, &error, StartLine::Request) {
            // The head's own copy carries the version as read: HTTP/1.1.
            Some(copy) => return parse_request(&copy, limits),
            None => return Err(error),
        },
        Ok(found) => found,
    };
    Ok(match found {
        Some(found) => {
            let mut head = found.head;
            head.raw = Bytes::copy_from_slice(&buf[found.start..found.end]);
            Parsed::Complete(head, found.end)
        }
        None => Parsed::Partial,
    })
}

/// Parses a response head. `request_method` decides whether a body can follow
/// (`HEAD` never has one; nor do 1xx, 204 and 304, nor a 2xx to CONNECT).
pub fn parse_response(
    buf: &[u8],
    limits: &Limits,
    request_method: Method,
) -> Result<Parsed<ResponseHead>, ParseError> {
    let found = match parse_response_in(buf, limits, request_method) {
        Err(error) => match later_minor_copy(buf, &error, StartLine::Status) {
            // The head's own copy carries the version as read: HTTP/1.1.
            Some(copy) => return parse_response(&copy, limits, request_method),
            None => return Err(error),
        },
        Ok(found) => found,
    };
    Ok(match found {
        Some(found) => {
            let mut head = found.head;
            head.raw = Bytes::copy_from_slice(&buf[found.start..found.end]);
            Parsed::Complete(head, found.end)
        }
        None => Parsed::Partial,
    })
}

impl RequestHead {
    /// Parses from the front of `buf` and, when complete, splits the head's
    /// bytes off `buf` without copying.
    pub fn split_from(
        buf: &mut BytesMut,
        limits: &Limits,
    ) -> Result<Option<RequestHead>, ParseError> {
        let parsed = match parse_request_in(buf, limits) {
            Err(error) => with_later_minor(buf, error, StartLine::Request, |buf| {
                parse_request_in(buf, limits)
            }),
            parsed => parsed,
        };
        let Some(found) = parsed? else {
            return Ok(None);
        };
        let mut head = found.head;
        head.raw = split_head(buf, found.start, found.end);
        Ok(Some(head))
    }

    /// The method; `Method::Other` for a token that is not a standard method.
    pub fn method(&self) -> Method {
        self.method
    }

    /// The method as sent (for `Method::Other`).
    pub fn method_bytes(&self) -> &[u8] {
        slice(&self.raw, self.method_span)
    }

    /// The request target as sent.
    pub fn target(&self) -> &[u8] {
        slice(&self.raw, self.target_span)
    }

    /// The path and query as sent: the whole target in origin form, what follows the
    /// authority in absolute form (empty, or starting with `?`, when the target has no
    /// path), `*` for an asterisk-form target, empty for a CONNECT authority.
    pub fn path_and_query(&self) -> &[u8] {
        match self.target_form {
            TargetForm::Absolute { .. } => {
                &self.raw[self.path_span.0 as usize..self.target_span.1 as usize]
            }
            TargetForm::Authority { .. } => b"",
            _ => self.target(),
        }
    }

    /// The path part of the target (absolute-form targets reduced to their path), without the query.
    /// `*` for an asterisk-form target, empty for a CONNECT authority.
    pub fn path(&self) -> &[u8] {
        let path = slice(&self.raw, self.path_span);
        match self.target_form {
            TargetForm::Absolute { .. } if path.is_empty() => b"/",
            _ => path,
        }
    }

    /// The HTTP version of the request line.
    pub fn version(&self) -> Version {
        self.version
    }

    /// Header fields in order, names as sent.
    pub fn headers(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        fields_of(&self.raw, &self.headers)
    }

    /// The first header with this name (ASCII case-insensitive).
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        find_field(&self.raw, &self.headers, name)
    }

    /// `Max-Forwards` of an OPTIONS or TRACE request (RFC 9110 §7.6.2: the only methods
    /// it speaks for), when it holds a number; `None` otherwise (a field that is not
    /// one is passed on as it is). Saturates far above any hop count.
    pub fn max_forwards(&self) -> Option<u64> {
        if !matches!(self.method, Method::Options | Method::Trace) {
            return None;
        }
        let value = self.header("max-forwards")?.trim_ascii();
        if value.is_empty() || value.len() > 18 || !value.iter().all(u8::is_ascii_digit) {
            return None;
        }
        Some(
            value
                .iter()
                .fold(0, |total, digit| total * 10 + u64::from(digit - b'0')),
        )
    }

    /// The `Host` header value (or the authority of an absolute-form target, or a
    /// CONNECT's `host:port`). When both are present they are equal: a mismatch is
    /// rejected.
    pub fn host(&self) -> Option<&[u8]> {
        match (self.host, self.target_form) {
            (Some(index), _) => self
                .headers
                .get(index)
                .map(|field| slice(&self.raw, field.value)),
            (None, TargetForm::Absolute { authority } | TargetForm::Authority { authority }) => {
                Some(slice(&self.raw, authority))
            }
            (None, _) => None,
        }
    }

    /// How the request body is delimited.
    pub fn framing(&self) -> BodyFraming {
        self.framing
    }

    /// What the `Connection` header says.
    pub fn connection(&self) -> &ConnectionInfo {
        &self.connection
    }

    /// Whether the request carries `Expect: 100-continue`.
    pub fn expects_continue(&self) -> bool {
        self.expect_continue
    }

    /// Whether some field name holds `_` (`X_Forwarded_For`): CGI, WSGI and
    /// PHP back ends read it as the dashed name.
    pub fn has_underscore_names(&self) -> bool {
        self.underscore_names
    }

    /// Whether the client asked for a protocol switch: `Connection: upgrade`
    /// and an `Upgrade` field, in HTTP/1.1 (RFC 9110 §7.8: a server ignores `Upgrade` in
    /// an HTTP/1.0 request, and could not answer it with a 101).
    pub fn asks_to_upgrade(&self) -> bool {
        self.version == Version::Http11
            && self.connection.upgrade
            && self.header("upgrade").is_some()
    }

    /// Whether the client asked to keep the connection open after this request
    /// (HTTP/1.1 unless `close`; HTTP/1.0 only with `keep-alive`).
    pub fn keep_alive(&self) -> bool {
        keep_alive(self.version, &self.connection)
    }

    /// The raw head bytes as received.
    pub fn raw(&self) -> &Bytes {
        &self.raw
    }
}

impl ResponseHead {
    /// Parses from the front of `buf` and, when complete, splits the head's
    /// bytes off `buf` without copying.
    pub fn split_from(
        buf: &mut BytesMut,
        limits: &Limits,
        request_method: Method,
    ) -> Result<Option<ResponseHead>, ParseError> {
        let parsed = match parse_response_in(buf, limits, request_method) {
            Err(error) => with_later_minor(buf, error, StartLine::Status, |buf| {
                parse_response_in(buf, limits, request_method)
            }),
            parsed => parsed,
        };
        let Some(found) = parsed? else {
            return Ok(None);
        };
        let mut head = found.head;
        head.raw = split_head(buf, found.start, found.end);
        Ok(Some(head))
    }

    /// The status code, 100 to 599.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The reason phrase as sent (possibly empty).
    pub fn reason(&self) -> &[u8] {
        slice(&self.raw, self.reason_span)
    }

    /// The HTTP version of the status line.
    pub fn version(&self) -> Version {
        self.version
    }

    /// Header fields in order, names as sent.
    pub fn headers(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        fields_of(&self.raw, &self.headers)
    }

    /// The first header with this name (ASCII case-insensitive).
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        find_field(&self.raw, &self.headers, name)
    }

    /// How the response body is delimited (for the request it answers).
    pub fn framing(&self) -> BodyFraming {
        self.framing
    }

    /// What the `Connection` header says.
    pub fn connection(&self) -> &ConnectionInfo {
        &self.connection
    }

    /// Whether the node will keep the connection open after this response
    /// (never after a close-delimited body).
    pub fn keep_alive(&self) -> bool {
        self.framing != BodyFraming::CloseDelimited && keep_alive(self.version, &self.connection)
    }

    /// How long the node says it keeps the connection open between requests: the
    /// `timeout` parameter of its `Keep-Alive` field (`Keep-Alive: timeout=5, max=100`, as
    /// Apache httpd sends; the field dates from RFC 2068 §19.7.1.1, RFC 9112 Appendix C.2.2
    /// recalls it). `None` when it says nothing (or nothing readable).
    pub fn keep_alive_timeout(&self) -> Option<Duration> {
        self.headers
            .iter()
            .filter(|field| field.kind == FieldKind::KeepAlive)
            .find_map(|field| keep_alive_timeout(slice(&self.raw, field.value)))
    }

    /// Whether the node announced a body that this response cannot have (a
    /// length or chunked coding on a response to HEAD, or on 1xx, 204, 304).
    /// A node that gets this wrong may send the body anyway, a little later:
    /// its connection must not carry the next request at once.
    pub fn announces_absent_body(&self) -> bool {
        self.announces_absent_body
    }

    /// 1xx: an interim response; the final one follows.
    pub fn is_interim(&self) -> bool {
        (100..200).contains(&self.status)
    }

    /// The raw head bytes as received.
    pub fn raw(&self) -> &Bytes {
        &self.raw
    }
}

/// A head found in a buffer: `raw` still empty, and where its bytes lie.
struct Found<T> {
    head: T,
    /// First byte of the start line (after any empty lines).
    start: usize,
    /// One past the final CRLF: the bytes the parse used.
    end: usize,
}

/// A copy of `buf` with its later HTTP/1 minor version read as HTTP/1.1 (see
/// [`with_later_minor`]), for the parsers that take a slice; `None` for any other error.
fn later_minor_copy(buf: &[u8], error: &ParseError, start_line: StartLine) -> Option<BytesMut> {
    let at = later_minor_at(buf, error, start_line)?;
    let mut copy = BytesMut::from(buf);
    copy[at] = b'1';
    Some(copy)
}

/// For a head refused for its version `HTTP/1.2` to `HTTP/1.9`: `parse` again with the
/// version read as `HTTP/1.1`, as RFC 9112 §2.3 says to process it. The rewrite stays in
/// `buf` only when the head is whole (it is split off next); a partial or refused head
/// leaves `buf` as it was. Only on the error path: the usual head pays nothing for it.
fn with_later_minor<T>(
    buf: &mut BytesMut,
    error: ParseError,
    start_line: StartLine,
    parse: impl Fn(&[u8]) -> Result<Option<T>, ParseError>,
) -> Result<Option<T>, ParseError> {
    let Some(at) = later_minor_at(buf, &error, start_line) else {
        return Err(error);
    };
    let digit = buf[at];
    buf[at] = b'1';
    let parsed = parse(buf);
    if !matches!(parsed, Ok(Some(_))) {
        buf[at] = digit;
    }
    parsed
}

/// Where the minor digit of a later HTTP/1 version sits, for a head refused for its version.
fn later_minor_at(buf: &[u8], error: &ParseError, start_line: StartLine) -> Option<usize> {
    (error.kind == ParseErrorKind::UnsupportedVersion)
        .then(|| fields::later_minor_version(buf, start_line))
        .flatten()
}

fn parse_request_in(buf: &[u8], limits: &Limits) -> Result<Option<Found<RequestHead>>, ParseError> {
    let window = window(buf, limits);
    let mut stack = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; STACK_HEADERS];
    let mut heap = Vec::new();
    // Requests are parsed under the virtual server's limit (100 fields by
    // default), within the stack's slots: no second try to plan for here.
    let slots = if limits.max_headers <= STACK_HEADERS {
        &mut stack[..limits.max_headers]
    } else {
        heap_slots(&mut heap, limits)
    };
    let mut request = httparse::Request::new(&mut []);
    let end = match request.parse_with_uninit_headers(window, slots) {
        Ok(httparse::Status::Complete(end)) => end,
        Ok(httparse::Status::Partial) => return partial(buf, limits, StartLine::Request),
        Err(error) => return Err(fields::rejection(window, error, StartLine::Request)),
    };
    let (Some(method_token), Some(target), Some(minor)) =
        (request.method, request.path, request.version)
    else {
        return Err(ParseError::invalid("incomplete request line"));
    };
    let start = leading_empty_lines(window);
    fields::check_line_endings(&window[..end])?;
    let head = &window[start..end];

    // The request line is `method SP target SP version` with single spaces
    // (httparse's strict default), so its parts are found by position; the
    // method may be one of httparse's static strings, not a slice of `head`.
    let method_span = (0, method_token.len() as u32);
    let target_start = method_span.1 + 1;
    let target_span = (target_start, target_start + target.len() as u32);
    let method = Method::from_bytes(method_token.as_bytes());
    let version = if minor == 0 {
        Version::Http10
    } else {
        Version::Http11
    };
    let target = parse_target(slice(head, target_span), target_start, method)?;

    let fields = Fields::scan(head.as_ptr() as usize, head.len(), request.headers)?;
    match (version, fields.host_count) {
        (_, 2..) => return Err(ParseError::invalid("more than one Host")),
        (Version::Http11, 0) => return Err(ParseError::invalid("HTTP/1.1 request without Host")),
        _ => {}
    }
    // RFC 9112 §3.2: Host is the target's authority where the target has one, and rules,
    // routes and the node must all read the same host.
    if let Some(index) = fields.host {
        let host = fields
            .headers
            .get(index)
            .map(|field| slice(head, field.value));
        let authority_and_port = match target.form {
            // `http://` or `https://` before the authority: its default port.
            TargetForm::Absolute { authority } => Some((
                authority,
                match authority.0 - target_span.0 {
                    8 => 443,
                    _ => 80,
                },
                "Host differs from the absolute-form authority",
            )),
            // A CONNECT's target always names its port; a Host without one names the
            // same host.
            TargetForm::Authority { authority } => Some((
                authority,
                authority_port(slice(head, authority)),
                "Host differs from the CONNECT target",
            )),
            TargetForm::Origin | TargetForm::Asterisk => None,
        };
        if let Some((authority, default_port, message)) = authority_and_port {
            let same = |host: &[u8]| same_authority(host, slice(head, authority), default_port);
            if !host.is_some_and(same) {
                return Err(ParseError::invalid(message));
            }
        }
    }
    let framing = match fields.declared_body(version)? {
        Declared::Chunked => BodyFraming::Chunked,
        Declared::Length(length) => BodyFraming::Length(length),
        Declared::Nothing => BodyFraming::None,
    };
    // RFC 9110 §9.3.6: a CONNECT request has no content; in HTTP/1.1 what follows its
    // head is the tunnel's. Framed as a body, those bytes would reach a node that reads
    // them as a request of their own (smuggled past every rule).
    if method == Method::Connect && !matches!(framing, BodyFraming::None | BodyFraming::Length(0)) {
        return Err(ParseError::invalid("CONNECT request with content"));
    }
    if fields.expect_other {
        return Err(ParseError {
            kind: ParseErrorKind::UnsupportedExpectation,
            reason: "expectation other than 100-continue",
        });
    }
    Ok(Some(Found {
        head: RequestHead {
            raw: Bytes::new(),
            method,
            method_span,
            target_span,
            target_form: target.form,
            path_span: target.path,
            version,
            headers: fields.headers,
            framing,
            connection: fields.connection,
            connection_names_fields: fields.connection_names_fields,
            // RFC 9110 §10.1.1: ignore 100-continue from HTTP/1.0 clients.
            expect_continue: fields.expect_continue && version == Version::Http11,
            underscore_names: fields.underscore_names,
            host: fields.host,
        },
        start,
        end,
    }))
}

fn parse_response_in(
    buf: &[u8],
    limits: &Limits,
    request_method: Method,
) -> Result<Option<Found<ResponseHead>>, ParseError> {
    let window = window(buf, limits);
    let mut stack = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; STACK_HEADERS];
    let mut heap = Vec::new();
    let (slots, larger) = header_slots(&mut stack, limits.max_headers);
    let mut response = httparse::Response::new(&mut []);
    let config = httparse::ParserConfig::default();
    let mut parsed = config.parse_response_with_uninit_headers(&mut response, window, slots);
    if larger && parsed == Err(httparse::Error::TooManyHeaders) {
        response = httparse::Response::new(&mut []);
        let slots = heap_slots(&mut heap, limits);
        parsed = config.parse_response_with_uninit_headers(&mut response, window, slots);
    }
    let end = match parsed {
        Ok(httparse::Status::Complete(end)) => end,
        Ok(httparse::Status::Partial) => return partial(buf, limits, StartLine::Status),
        Err(error) => return Err(fields::rejection(window, error, StartLine::Status)),
    };
    let (Some(minor), Some(status)) = (response.version, response.code) else {
        return Err(ParseError::invalid("incomplete status line"));
    };
    if !(100..=599).contains(&status) {
        return Err(ParseError::invalid("status code out of range"));
    }
    let start = leading_empty_lines(window);
    fields::check_line_endings(&window[..end])?;
    let head = &window[start..end];
    let version = if minor == 0 {
        Version::Http10
    } else {
        Version::Http11
    };

    // `HTTP/1.x SSS[ reason]CRLF`: the reason starts at byte 13, if there is one.
    let line_end = memchr::memchr(b'\r', head).unwrap_or(head.len()) as u32;
    let reason_span = (13.min(line_end), line_end);

    let fields = Fields::scan(head.as_ptr() as usize, head.len(), response.headers)?;
    let no_body = request_method == Method::Head
        || (100..200).contains(&status)
        || status == 204
        || status == 304
        || (request_method == Method::Connect && (200..300).contains(&status));
    let declared = if no_body {
        fields.declared_without_body(version)?
    } else {
        fields.declared_body(version)?
    };
    let announces_absent_body =
        no_body && matches!(declared, Declared::Chunked | Declared::Length(1..));
    let framing = match declared {
        _ if no_body => BodyFraming::None,
        Declared::Chunked => BodyFraming::Chunked,
        Declared::Length(length) => BodyFraming::Length(length),
        Declared::Nothing => BodyFraming::CloseDelimited,
    };
    Ok(Some(Found {
        head: ResponseHead {
            raw: Bytes::new(),
            status,
            reason_span,
            version,
            headers: fields.headers,
            framing,
            connection: fields.connection,
            connection_names_fields: fields.connection_names_fields,
            head_request: request_method == Method::Head,
            announces_absent_body,
        },
        start,
        end,
    }))
}

/// The most bytes a head may have: `max_head_bytes`, and never more than u32
/// offsets can address.
fn head_limit(limits: &Limits) -> usize {
    limits.max_head_bytes.min(u32::MAX as usize)
}

/// The part of `buf` a head may occupy, so an oversized head is never parsed
/// past the limit.
fn window<'b>(buf: &'b [u8], limits: &Limits) -> &'b [u8] {
    &buf[..buf.len().min(head_limit(limits))]
}

/// An incomplete head: wait for more, unless the buffer already holds the
/// limit's worth of bytes without a complete head in them.
fn partial<T>(buf: &[u8], limits: &Limits, line: StartLine) -> Result<Option<T>, ParseError> {
    let limit = head_limit(limits);
    if !buf.is_empty() && buf.len() >= limit {
        // Not even the request line ended within the limit: its target is too long.
        if line == StartLine::Request && memchr::memchr(b'\n', &buf[..limit]).is_none() {
            return Err(ParseError {
                kind: ParseErrorKind::TargetTooLong,
                reason: "request line larger than max_header_bytes",
            });
        }
        return Err(ParseError {
            kind: ParseErrorKind::HeadTooLarge,
            reason: "head larger than max_header_bytes",
        });
    }
    Ok(None)
}

/// The slots a response parse tries first: the stack's, `max_headers` of them
/// at most, and whether the limit allows more (then a head with more fields
/// than the stack holds is parsed again in [`heap_slots`]). Most heads have a
/// few dozen fields, so a limit above the stack's (the 1000 for heads rebuilt
/// from HTTP/2, written for each response to an HTTP/2 client) no longer costs
/// every parse a heap vector of that many slots.
fn header_slots<'s, 'b>(
    stack: &'s mut [MaybeUninit<httparse::Header<'b>>; STACK_HEADERS],
    max_headers: usize,
) -> (&'s mut [MaybeUninit<httparse::Header<'b>>], bool) {
    let on_stack = max_headers.min(STACK_HEADERS);
    (&mut stack[..on_stack], max_headers > STACK_HEADERS)
}

/// `max_headers` slots on the heap, for a head with more fields than the stack holds.
fn heap_slots<'s, 'b>(
    heap: &'s mut Vec<MaybeUninit<httparse::Header<'b>>>,
    limits: &Limits,
) -> &'s mut [MaybeUninit<httparse::Header<'b>>] {
    heap.resize(limits.max_headers, MaybeUninit::uninit());
    &mut heap[..]
}

/// httparse skips empty lines before the start line; they are not part of the head.
fn leading_empty_lines(window: &[u8]) -> usize {
    window
        .iter()
        .take_while(|&&b| b == b'\r' || b == b'\n')
        .count()
}

/// Drops `start` bytes of empty lines and splits the head off without copying.
fn split_head(buf: &mut BytesMut, start: usize, end: usize) -> Bytes {
    if start > 0 {
        buf.advance(start);
    }
    buf.split_to(end - start).freeze()
}

fn keep_alive(version: Version, connection: &ConnectionInfo) -> bool {
    match version {
        Version::Http11 => !connection.close,
        Version::Http10 => connection.keep_alive && !connection.close,
    }
}

#[inline]
pub(crate) fn slice(raw: &[u8], span: (u32, u32)) -> &[u8] {
    // Spans are made by the parser from this same buffer; `get` keeps a
    // corrupted span from panicking.
    raw.get(span.0 as usize..span.1 as usize)
        .unwrap_or_default()
}

fn fields_of<'a>(
    raw: &'a [u8],
    headers: &'a [Header],
) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
    headers
        .iter()
        .map(move |field| (slice(raw, field.name), slice(raw, field.value)))
}

fn find_field<'a>(raw: &'a [u8], headers: &[Header], name: &str) -> Option<&'a [u8]> {
    headers
        .iter()
        .find(|field| slice(raw, field.name).eq_ignore_ascii_case(name.as_bytes()))
        .map(|field| slice(raw, field.value))
}

#[cfg(test)]
mod tests;
