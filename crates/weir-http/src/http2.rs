//! The HTTP/2 adapter: conversions between the `http` crate's message parts
//! (what the `h2` codec hands out and takes) and weir's heads, as pure
//! functions. Design: `docs/design/http2.md`.
//!
//! An HTTP/2 message becomes a head by writing the HTTP/1.1 head it stands
//! for and parsing that with this crate's strict parser, so a request passes
//! exactly the checks an HTTP/1.1 request passes (target form, `Host`,
//! `Content-Length`, limits) and every later stage sees one type. The rules
//! of RFC 9113 §8 applied on the way:
//!
//! - connection-specific fields (`Connection`, `Keep-Alive`,
//!   `Proxy-Connection`, `Transfer-Encoding`, `Upgrade`, and `TE` other than
//!   `trailers`) make a received message malformed (§8.2.2), and are dropped
//!   from a message sent over HTTP/2;
//! - `:authority` becomes `Host`; a `Host` that differs from it is malformed
//!   (§8.3.1); going the other way `Host` becomes `:authority`;
//! - several `cookie` fields are joined with `"; "` (§8.2.3);
//! - a request body of unknown length (no `content-length`, the HEADERS frame
//!   did not end the stream) is framed as chunked, so HTTP/1.1 nodes get it
//!   chunked and DATA frames become chunks; a chunked body becomes DATA frames;
//! - trailers travel both ways: chunked trailer lines ↔ a trailing HEADERS
//!   frame, without fields that may not be trailers.

use bytes::{BufMut, BytesMut};
use http::header::{HeaderMap, HeaderName, HeaderValue};

mod hpack_heads;
mod node_heads;

pub use hpack_heads::{H2Request, RequestFields, encode_fields, encode_response_head};
pub(crate) use hpack_heads::{is_field_name, is_field_value};
pub use node_heads::{NodeHead, NodeRequest, ResponseFields, encode_request_head};

use crate::error::ParseError;
use crate::fields::FieldKind;
use crate::head::{Limits, RequestHead, ResponseHead};
use crate::message::Method;
use crate::syntax::{list_elements, trim_ows};
use crate::write::{
    ForwardRequest, ForwardResponse, HeaderEdit, SimpleResponse, Unedited,
    write_request_head_edited, write_response_head_edited, write_simple_response_edited,
};

/// Bounds on the head rebuilt from a node's HTTP/2 response (its size was
/// already bounded by the codec's header-list limit).
const NODE_LIMITS: Limits = Limits {
    max_head_bytes: 256 * 1024,
    max_headers: 1000,
};

/// Whether a field may not appear in an HTTP/2 message at all (RFC 9113 §8.2.2).
fn is_connection_specific(kind: FieldKind) -> bool {
    matches!(
        kind,
        FieldKind::Connection
            | FieldKind::KeepAlive
            | FieldKind::ProxyConnection
            | FieldKind::TransferEncoding
            | FieldKind::Upgrade
    )
}

/// `TE` is allowed in HTTP/2 only as `trailers`.
fn is_te_trailers(value: &[u8]) -> bool {
    trim_ows(value).eq_ignore_ascii_case(b"trailers")
}

/// RFC 9113 §8.3.1: a request with both `:authority` and `Host` whose `Host` names another
/// authority is malformed (the default port of `:scheme` written or not). Every request
/// passes this check, extended CONNECT (RFC 8441) too, whose head the caller builds.
pub fn host_agrees(parts: &http::request::Parts) -> Result<(), ParseError> {
    let Some(authority) = parts.uri.authority() else {
        return Ok(());
    };
    let default_port = match parts.uri.scheme_str() {
        Some("https") => 443,
        _ => 80,
    };
    let differs = parts
        .headers
        .get_all(http::header::HOST)
        .iter()
        .any(|value| {
            !crate::target::same_authority(
                value.as_bytes(),
                authority.as_str().as_bytes(),
                default_port,
            )
        });
    match differs {
        true => Err(ParseError::invalid("Host differs from :authority")),
        false => Ok(()),
    }
}

/// The request head an HTTP/2 request stands for. `end_of_stream`: the
/// HEADERS frame ended the stream (no body). The head is HTTP/1.1, with
/// `Host` from `:authority`, joined cookies, and `Transfer-Encoding: chunked`
/// when a body of unknown length follows.
///
/// Extended CONNECT (RFC 8441, a `:protocol`) is the caller's to translate:
/// it is not visible in the `http` parts.
pub fn request_from_h2(
    parts: &http::request::Parts,
    end_of_stream: bool,
    limits: &Limits,
) -> Result<RequestHead, ParseError> {
    let mut out = BytesMut::with_capacity(256);
    let authority = parts.uri.authority().map(|a| a.as_str().as_bytes());
    out.put_slice(parts.method.as_str().as_bytes());
    out.put_u8(b' ');
    if parts.method == http::Method::CONNECT {
        if parts
            .uri
            .path_and_query()
            .is_some_and(|p| p.as_str() != "/")
        {
            return Err(ParseError::invalid("CONNECT with a :path"));
        }
        out.put_slice(authority.ok_or(ParseError::invalid("CONNECT without :authority"))?);
    } else {
        let path = parts
            .uri
            .path_and_query()
            .map(|p| p.as_str())
            .filter(|p| !p.is_empty())
            .ok_or(ParseError::invalid("missing :path"))?;
        out.put_slice(path.as_bytes());
    }
    out.put_slice(b" HTTP/1.1\r\n");
    // RFC 9113 §8.3.1: a valid :scheme (RFC 3986 §3.1: a letter, then letters, digits,
    // `+`, `-` and `.`); the h2 crate passes some invalid ones on (empty, a digit first).
    if let Some(scheme) = parts.uri.scheme_str()
        && !is_uri_scheme(scheme.as_bytes())
    {
        return Err(ParseError::invalid("invalid :scheme"));
    }
    host_agrees(parts)?;
    let has_host = parts.headers.contains_key(http::header::HOST);
    if let Some(authority) = authority {
        put_field(&mut out, b"host", authority);
    } else if has_host {
        for value in parts.headers.get_all(http::header::HOST) {
            // RFC 9113 §8.3.1: present, the authority (here in Host) must not be empty.
            if value.is_empty() {
                return Err(ParseError::invalid("empty Host in HTTP/2"));
            }
            put_field(&mut out, b"host", value.as_bytes());
        }
    }
    let mut cookies: Option<BytesMut> = None;
    for (name, value) in &parts.headers {
        let name_bytes = name.as_str().as_bytes();
        // RFC 9113 §8.2.1: a value that starts or ends with whitespace is malformed (in
        // HTTP/1.1 the space would be read as part of the field's syntax).
        if padded(value.as_bytes()) {
            return Err(ParseError::invalid(
                "field value with leading or trailing whitespace in HTTP/2",
            ));
        }
        match FieldKind::of(name_bytes) {
            FieldKind::Host => continue,
            kind if is_connection_specific(kind) => {
                return Err(ParseError::invalid("connection-specific field in HTTP/2"));
            }
            FieldKind::Te if !is_te_trailers(value.as_bytes()) => {
                return Err(ParseError::invalid("TE other than trailers in HTTP/2"));
            }
            _ if name == http::header::COOKIE => {
                let joined = cookies.get_or_insert_with(BytesMut::new);
                if !joined.is_empty() {
                    joined.put_slice(b"; ");
                }
                joined.put_slice(value.as_bytes());
            }
            _ => put_field(&mut out, name_bytes, value.as_bytes()),
        }
    }
    if let Some(cookies) = cookies {
        put_field(&mut out, b"cookie", &cookies);
    }
    let connect = parts.method == http::Method::CONNECT;
    if !end_of_stream && !connect && !parts.headers.contains_key(http::header::CONTENT_LENGTH) {
        put_field(&mut out, b"transfer-encoding", b"chunked");
    }
    out.put_slice(b"\r\n");
    // Split off rather than copied: the head keeps the bytes just written.
    match RequestHead::split_from(&mut out, limits)? {
        Some(head) if out.is_empty() => Ok(head),
        _ => Err(ParseError::invalid("HTTP/2 request does not form a head")),
    }
}

/// RFC 3986 §3.1: `scheme = ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )`.
fn is_uri_scheme(scheme: &[u8]) -> bool {
    scheme.first().is_some_and(u8::is_ascii_alphabetic)
        && scheme
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
}

/// The response head a node's HTTP/2 response stands for, as an HTTP/1.1
/// head: framed by its `content-length`, else chunked when a body follows.
pub fn response_from_h2(
    parts: &http::response::Parts,
    end_of_stream: bool,
    request_method: Method,
) -> Result<ResponseHead, ParseError> {
    response_from_h2_within(parts, end_of_stream, request_method, &NODE_LIMITS)
}

/// [`response_from_h2`] within `limits` (a virtual server's `max_header_bytes` and
/// `max_headers`, which bound its nodes' response heads whatever their protocol).
pub fn response_from_h2_within(
    parts: &http::response::Parts,
    end_of_stream: bool,
    request_method: Method,
    limits: &Limits,
) -> Result<ResponseHead, ParseError> {
    let mut out = BytesMut::with_capacity(256);
    out.put_slice(b"HTTP/1.1 ");
    out.put_slice(parts.status.as_str().as_bytes());
    out.put_slice(b" \r\n");
    for (name, value) in &parts.headers {
        let kind = FieldKind::of(name.as_str().as_bytes());
        if is_connection_specific(kind) || kind == FieldKind::Te {
            return Err(ParseError::invalid("connection-specific field in HTTP/2"));
        }
        // Malformed (RFC 9113 §8.2.1), so not forwarded (§8.1.1), as for a client's request.
        if padded(value.as_bytes()) {
            return Err(ParseError::invalid(
                "field value with leading or trailing whitespace in HTTP/2",
            ));
        }
        put_field(&mut out, name.as_str().as_bytes(), value.as_bytes());
    }
    let bodiless = request_method == Method::Head
        || parts.status.is_informational()
        || parts.status == http::StatusCode::NO_CONTENT
        || parts.status == http::StatusCode::NOT_MODIFIED;
    if !bodiless && !parts.headers.contains_key(http::header::CONTENT_LENGTH) {
        if end_of_stream {
            put_field(&mut out, b"content-length", b"0");
        } else {
            put_field(&mut out, b"transfer-encoding", b"chunked");
        }
    }
    out.put_slice(b"\r\n");
    match ResponseHead::split_from(&mut out, limits, request_method)? {
        Some(head) if out.is_empty() => Ok(head),
        _ => Err(ParseError::invalid("HTTP/2 response does not form a head")),
    }
}

/// A request for an HTTP/2 node: the head rewritten exactly as for an
/// HTTP/1.1 node (`forward`: forwarding headers, `Via`, owned headers), then
/// put in HTTP/2 form (`Host` → `:authority`, connection-specific fields
/// dropped, `TE: trailers` kept). `forward.framing` decides `content-length`.
pub fn request_to_h2(
    head: &RequestHead,
    forward: &ForwardRequest<'_>,
    scheme: &str,
) -> Result<http::Request<()>, ParseError> {
    request_to_h2_edited(head, forward, None, &Unedited, scheme)
}

/// Whether the client asked for trailers (`TE: trailers`). `TE` is
/// hop-by-hop, so the writer drops it; `trailers` still means something to an
/// HTTP/2 node (gRPC requires it), which gets `te: trailers` back.
pub fn asks_for_trailers(head: &RequestHead) -> bool {
    head.headers()
        .filter(|(name, _)| name.eq_ignore_ascii_case(b"te"))
        .any(|(_, value)| list_elements(value).any(|t| t.eq_ignore_ascii_case(b"trailers")))
}

/// [`request_to_h2`] with a traffic rule's rewritten `path` (when given) and
/// header `edits` applied, as `write_request_head_edited` applies them for
/// HTTP/1.1.
pub fn request_to_h2_edited<E: HeaderEdit + ?Sized>(
    head: &RequestHead,
    forward: &ForwardRequest<'_>,
    path: Option<&[u8]>,
    edits: &E,
    scheme: &str,
) -> Result<http::Request<()>, ParseError> {
    let mut out = BytesMut::with_capacity(head.raw().len() + 160);
    write_request_head_edited(head, forward, path, edits, &mut out);
    let forwarded = RequestHead::split_from(&mut out, &NODE_LIMITS)?
        .ok_or(ParseError::invalid("forwarded head incomplete"))?;
    let authority = forwarded.host().unwrap_or_default();
    let mut uri = http::uri::Builder::new();
    // An HTTP/1.0 request without `Host` has no authority to convey, and an intermediary
    // must not make one up (RFC 9113 §8.3.1): its URI is the path alone, and the request
    // is marked as forwarded from HTTP/1.x, for which the `h2` crate sends `:scheme`
    // (`http`) and `:path` without `:authority`.
    let no_authority = authority.is_empty() && head.method() != Method::Connect;
    if head.method() == Method::Connect {
        uri = uri.authority(authority);
    } else if no_authority {
        uri = uri.path_and_query(forwarded.target());
    } else {
        uri = uri
            .scheme(scheme)
            .authority(authority)
            .path_and_query(forwarded.target());
    }
    let uri = uri
        .build()
        .map_err(|_| ParseError::invalid("target not representable in HTTP/2"))?;
    let method = http::Method::from_bytes(head.method_bytes())
        .map_err(|_| ParseError::invalid("method not representable in HTTP/2"))?;
    let mut request = http::Request::new(());
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    *request.version_mut() = match no_authority {
        true => http::Version::HTTP_10,
        false => http::Version::HTTP_2,
    };
    *request.headers_mut() = h2_fields(forwarded.headers(), |kind, value| match kind {
        FieldKind::Host => false,
        FieldKind::Te => is_te_trailers(value),
        kind => !is_connection_specific(kind),
    })?;
    if asks_for_trailers(head) {
        request
            .headers_mut()
            .insert(http::header::TE, HeaderValue::from_static("trailers"));
    }
    Ok(request)
}

/// A response for an HTTP/2 client: the head rewritten exactly as for an
/// HTTP/1.1 client (`forward`: `Via`, headers weir sets; its version and
/// keep-alive are ignored), then put in HTTP/2 form.
pub fn response_to_h2(
    head: &ResponseHead,
    forward: &ForwardResponse<'_>,
) -> Result<http::Response<()>, ParseError> {
    response_to_h2_edited(head, forward, &Unedited).map(|(response, _)| response)
}

/// [`response_to_h2`] with `edits` applied (a traffic rule's response header
/// edits), exactly as `write_response_head_edited` applies them for HTTP/1.1;
/// with the size of the head in that HTTP/1.1 form (what the access log counts).
pub fn response_to_h2_edited<E: HeaderEdit + ?Sized>(
    head: &ResponseHead,
    forward: &ForwardResponse<'_>,
    edits: &E,
) -> Result<(http::Response<()>, usize), ParseError> {
    let mut out = BytesMut::with_capacity(head.raw().len() + 96);
    write_response_head_for_h2(head, forward, edits, &mut out);
    written_fields_to_h2(head.status(), &out).map(|response| (response, out.len()))
}

/// Writes a node's response head as an HTTP/2 stream carries it, in HTTP/1.1
/// form (`response_to_h2_edited`'s first half): the fields weir's own codec
/// encodes straight into a header block (`hpack_heads::encode_response_head`).
pub fn write_response_head_for_h2<E: HeaderEdit + ?Sized>(
    head: &ResponseHead,
    forward: &ForwardResponse<'_>,
    edits: &E,
    out: &mut BytesMut,
) {
    let forward = ForwardResponse {
        version: crate::Version::Http11,
        keep_alive: true,
        upgrade: false,
        ..*forward
    };
    write_response_head_edited(head, &forward, edits, out);
}

/// Writes one of weir's own answers' head as an HTTP/2 stream carries it, in
/// HTTP/1.1 form (`simple_response_to_h2`'s first half).
pub fn write_simple_head_for_h2<E: HeaderEdit + ?Sized>(
    answer: &SimpleResponse,
    extra_headers: &[(&str, &str)],
    edits: &E,
    body: &[u8],
    out: &mut BytesMut,
) {
    // Written as the answer to a HEAD: the body's length without the body.
    let answer = SimpleResponse {
        version: crate::Version::Http11,
        keep_alive: true,
        head_request: true,
        ..*answer
    };
    write_simple_response_edited(&answer, extra_headers, edits, body, out);
}

/// A head written by one of the two writers above (`status` its status) as
/// the `http` crate's response, for the `h2` crate.
pub fn written_head_to_h2(status: u16, written: &[u8]) -> Result<http::Response<()>, ParseError> {
    written_fields_to_h2(status, written)
}

/// One of weir's own answers (`write_simple_response_edited`'s fields: the
/// status, `extra_headers`, the body's length and `edits`' added fields) as an
/// HTTP/2 response head; the body, if any, goes in DATA frames after it.
pub fn simple_response_to_h2<E: HeaderEdit + ?Sized>(
    answer: &SimpleResponse,
    extra_headers: &[(&str, &str)],
    edits: &E,
    body: &[u8],
) -> Result<http::Response<()>, ParseError> {
    let mut out = BytesMut::with_capacity(256);
    write_simple_head_for_h2(answer, extra_headers, edits, body, &mut out);
    written_fields_to_h2(answer.status, &out)
}

/// A complete HTTP/1.1 response head that weir wrote itself (a cache hit's
/// head, one the cache's relay wrote: one writer for both protocols) as an
/// HTTP/2 response head: status and fields, without the connection-specific
/// ones (`Connection`, `Transfer-Encoding` …). The body, if any, goes in DATA
/// frames after it. Like `written_fields_to_h2`, whose lines it takes as
/// written, it does not parse the head again: it checks the status line weir
/// wrote (`HTTP/1.x NNN `) and that the head is complete.
pub fn response_head_to_h2(written: &[u8]) -> Result<http::Response<()>, ParseError> {
    written_head_to_h2(written_status(written)?, written)
}

/// The status of a complete HTTP/1.1 response head weir wrote itself
/// (`HTTP/1.x NNN ` … and the empty line), checked as
/// [`response_head_to_h2`] takes it.
pub fn written_status(written: &[u8]) -> Result<u16, ParseError> {
    let status = match written {
        [
            b'H',
            b'T',
            b'T',
            b'P',
            b'/',
            b'1',
            b'.',
            b'0' | b'1',
            b' ',
            digits @ ..,
        ] if digits.len() > 3
            && digits[3] == b' '
            && digits[..3].iter().all(u8::is_ascii_digit) =>
        {
            digits[..3]
                .iter()
                .fold(0u16, |n, d| n * 10 + u16::from(d - b'0'))
        }
        _ => return Err(ParseError::invalid("written head without a status line")),
    };
    if !written.ends_with(b"\r\n\r\n") {
        return Err(ParseError::invalid("written head incomplete"));
    }
    Ok(status)
}

/// An HTTP/1.1 response head weir has just written (one writer for both
/// protocols, so both apply the same rules) in HTTP/2 form: `status` and the
/// fields, each line taken as written, without the connection-specific ones.
///
/// The lines are not parsed again as a head: the writer wrote them from a
/// parsed node head, weir's own fields and configured edits (which may not
/// set framing fields), and `HeaderName`/`HeaderValue` still refuse what an
/// HTTP/2 field cannot hold. (Parsing them again cost as much as the map.)
fn written_fields_to_h2(status: u16, written: &[u8]) -> Result<http::Response<()>, ParseError> {
    let status = http::StatusCode::from_u16(status)
        .map_err(|_| ParseError::invalid("status not representable in HTTP/2"))?;
    let mut map = HeaderMap::with_capacity(memchr::memchr_iter(b'\n', written).count());
    // The status line first, then a field a line up to the empty line.
    let lines = memchr::memchr(b'\n', written).map_or(&[][..], |end| &written[end + 1..]);
    for field in written_fields(lines) {
        let (name, value) = field?;
        map.append(header_name(name)?, header_value(value)?);
    }
    let mut response = http::Response::new(());
    *response.status_mut() = status;
    *response.version_mut() = http::Version::HTTP_2;
    *response.headers_mut() = map;
    Ok(response)
}

/// The fields of HTTP/1.1 lines weir wrote (each ending in CRLF, up to an
/// empty line or the end) that an HTTP/2 message carries: names as written,
/// values without their edge whitespace, the connection-specific fields and
/// `TE` left out.
fn written_fields(lines: &[u8]) -> impl Iterator<Item = Result<(&[u8], &[u8]), ParseError>> {
    let mut rest = lines;
    std::iter::from_fn(move || {
        loop {
            let line = match memchr::memchr(b'\n', rest) {
                Some(end) => {
                    let line = &rest[..end];
                    rest = &rest[end + 1..];
                    line
                }
                None => std::mem::take(&mut rest),
            };
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.is_empty() {
                rest = &[];
                return None;
            }
            let Some(colon) = memchr::memchr(b':', line) else {
                rest = &[];
                return Some(Err(ParseError::invalid("written field without colon")));
            };
            let (name, value) = (&line[..colon], trim_ows(&line[colon + 1..]));
            let kind = FieldKind::of(name);
            if kind != FieldKind::Te && !is_connection_specific(kind) {
                return Some(Ok((name, value)));
            }
        }
    })
}

/// Chunked trailer lines (as [`crate::Decoded::Done`] gives them) as an
/// HTTP/2 trailer section, without fields that may not be trailers.
pub fn trailers_to_h2(lines: &[u8]) -> Result<HeaderMap, ParseError> {
    let mut map = HeaderMap::new();
    for line in lines.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            continue;
        }
        let colon =
            memchr::memchr(b':', line).ok_or(ParseError::invalid("trailer without colon"))?;
        let (name, value) = (&line[..colon], trim_ows(&line[colon + 1..]));
        if !may_be_trailer(name) {
            continue;
        }
        map.append(header_name(name)?, header_value(value)?);
    }
    Ok(map)
}

/// An HTTP/2 trailer section as chunked trailer lines (each ending in CRLF,
/// for [`crate::encode_last_chunk`]), without fields that may not be trailers. A value's
/// edge whitespace (malformed in HTTP/2, RFC 9113 §8.2.1, and by then too late to refuse:
/// the head went on) is left out, as an HTTP/1.1 reader would leave it out.
pub fn trailers_from_h2(map: &HeaderMap, out: &mut BytesMut) {
    for (name, value) in map {
        if may_be_trailer(name.as_str().as_bytes()) {
            put_field(out, name.as_str().as_bytes(), trim_ows(value.as_bytes()));
        }
    }
}

/// The lines of an HTTP/1.1 trailer section (each ending in CRLF) whose
/// fields may be trailers, for a HEADERS frame that ends a stream.
pub(crate) fn trailer_lines(lines: &[u8]) -> Vec<u8> {
    let mut kept = Vec::with_capacity(lines.len());
    for line in lines.split_inclusive(|&b| b == b'\n') {
        let name = line.split(|&b| b == b':').next().unwrap_or_default();
        if may_be_trailer(name) {
            kept.extend_from_slice(line);
        }
    }
    kept
}

/// RFC 9110 §6.5.1: framing, routing, connection and authentication fields
/// are never trailers.
pub(crate) fn may_be_trailer(name: &[u8]) -> bool {
    let kind = FieldKind::of(name);
    let forbidden = [
        &b"content-type"[..],
        b"content-encoding",
        b"authorization",
        b"set-cookie",
        b"cookie",
        b"trailer",
    ];
    kind == FieldKind::Other && !forbidden.iter().any(|f| name.eq_ignore_ascii_case(f))
}

/// Copies fields `keep` accepts into a header map, names lower-cased.
/// A `Connection` field's listed names were already dropped by the writer.
/// The map is sized for the fields once instead of growing as they come.
/// (Values stay copies: sharing the head's bytes instead made every value an
/// atomic reference count, and the conversion slower.)
fn h2_fields<'a>(
    fields: impl Iterator<Item = (&'a [u8], &'a [u8])>,
    keep: impl Fn(FieldKind, &[u8]) -> bool,
) -> Result<HeaderMap, ParseError> {
    let mut map = HeaderMap::with_capacity(fields.size_hint().0);
    for (name, value) in fields {
        if keep(FieldKind::of(name), value) {
            map.append(header_name(name)?, header_value(value)?);
        }
    }
    Ok(map)
}

fn header_name(name: &[u8]) -> Result<HeaderName, ParseError> {
    HeaderName::from_bytes(name).map_err(|_| ParseError::invalid("field name not representable"))
}

fn header_value(value: &[u8]) -> Result<HeaderValue, ParseError> {
    HeaderValue::from_bytes(value).map_err(|_| ParseError::invalid("field value not representable"))
}

/// Whether a field value starts or ends with whitespace, which HTTP/2 forbids (RFC 9113
/// §8.2.1): over HTTP/1.1 the space would read as part of the field's syntax.
fn padded(value: &[u8]) -> bool {
    [value.first(), value.last()]
        .into_iter()
        .flatten()
        .any(|&b| b == b' ' || b == b'\t')
}

fn put_field(out: &mut BytesMut, name: &[u8], value: &[u8]) {
    out.put_slice(name);
    out.put_slice(b": ");
    out.put_slice(value);
    out.put_slice(b"\r\n");
}

#[cfg(test)]
mod tests;
