//! Writers for forwarded heads and for weir's own short responses.
//!
//! Forwarded heads copy the received header lines byte for byte (original
//! name case and spacing), a whole run of consecutive kept lines per copy,
//! and then append the headers weir owns: framing, `Connection`,
//! `X-Forwarded-*` and `Via`.

use std::fmt::Write as _;
use std::net::IpAddr;

use bytes::BytesMut;

use crate::fields::{FieldKind, Header};
use crate::head::{RequestHead, ResponseHead, slice};
use crate::message::{BodyFraming, Method, Version};
use crate::syntax::{FieldNames, same_field_name};
use crate::target::TargetForm;

/// How to rewrite a request head for the node.
#[derive(Debug, Clone, Copy)]
pub struct ForwardRequest<'a> {
    /// How the body will be framed on the upstream connection; decides the
    /// `Content-Length` / `Transfer-Encoding` written (the client's are dropped).
    pub framing: BodyFraming,
    /// Append the client address to `X-Forwarded-For` and set `X-Forwarded-Proto`
    /// (`None`: leave both alone).
    pub client_addr: Option<IpAddr>,
    /// `http` or `https`, for `X-Forwarded-Proto`.
    pub proto: &'a str,
    /// Add `Via: 1.1 <via>` (appended to any existing Via).
    pub via: Option<&'a str>,
    /// The protocol version that `Via` names when the head's own version does
    /// not tell it: `Some("2")` for a request weir received over HTTP/2 (its
    /// head says HTTP/1.1, RFC 9110 §7.6.3); `None`: the head's version.
    pub via_version: Option<&'a str>,
    /// Keep `Upgrade` and `Connection: upgrade` (a protocol switch is being proxied).
    pub upgrade: bool,
    /// Drop `Expect: 100-continue` (weir answered it itself).
    pub strip_expect: bool,
    /// A header weir owns (such as the verified client-certificate subject):
    /// every field of this name the client sent is dropped, in any spelling
    /// (case, and `_` for `-`), and the value, if any, is written instead.
    pub owned_header: Option<(&'a str, Option<&'a str>)>,
    /// Drop fields whose names hold `_` (see [`RequestHead::has_underscore_names`]).
    pub drop_underscore_names: bool,
}

/// How to rewrite a response head for the client.
#[derive(Debug, Clone, Copy)]
pub struct ForwardResponse<'a> {
    /// How the body will be framed to the client (never `Chunked` to an
    /// HTTP/1.0 client).
    pub framing: BodyFraming,
    /// The client's HTTP version; the status line is written in it.
    pub version: Version,
    /// Whether weir keeps the client connection open after this response
    /// (writes `Connection: close`, or `Connection: keep-alive` for HTTP/1.0).
    pub keep_alive: bool,
    /// Add `Via: 1.1 <via>` (appended to any existing `Via`).
    pub via: Option<&'a str>,
    /// The protocol version that `Via` names when the head's own version does
    /// not tell it: `Some("2")` for a response weir received over HTTP/2;
    /// `None`: the head's version.
    pub via_version: Option<&'a str>,
    /// Keep `Upgrade`/`Connection: upgrade` (a 101 being proxied).
    pub upgrade: bool,
    /// Headers weir sets on every response (`Strict-Transport-Security`,
    /// say): the node's fields of these names are dropped and these written.
    /// Names must not be framing or connection fields.
    pub set_headers: &'a [(String, String)],
}

#[cfg(test)]
impl ForwardResponse<'_> {
    /// An HTTP/1.1 keep-alive response framed by `framing`, with nothing
    /// added: what tests start from and change field by field.
    pub(crate) fn plain(framing: BodyFraming) -> Self {
        ForwardResponse {
            framing,
            version: Version::Http11,
            keep_alive: true,
            via: None,
            via_version: None,
            upgrade: false,
            set_headers: &[],
        }
    }
}

/// Edits a caller makes to a head weir writes (traffic rules, the request id,
/// a persistence cookie): received fields it drops, and fields it adds after
/// those weir owns. Only end-to-end fields are offered to [`HeaderEdit::drops`];
/// framing, connection and forwarding fields stay weir's.
pub trait HeaderEdit {
    /// Whether received fields called `name` (any case) are left out.
    fn drops(&self, name: &[u8]) -> bool;
    /// Writes the added fields, each as `Name: value\r\n`.
    fn write_added(&self, out: &mut BytesMut);
}

/// No edits: the head as weir forwards it anyway.
#[derive(Debug, Clone, Copy, Default)]
pub struct Unedited;

impl HeaderEdit for Unedited {
    #[inline]
    fn drops(&self, _name: &[u8]) -> bool {
        false
    }

    #[inline]
    fn write_added(&self, _out: &mut BytesMut) {}
}

/// The target as a node expects it (RFC 9112 §3.2.1: origin servers get
/// origin-form): an absolute-form target is reduced to its path and query.
fn write_origin_form(head: &RequestHead, path: Option<&[u8]>, out: &mut BytesMut) {
    if let Some(path) = path {
        // A rewritten path, then the query as received.
        out.extend_from_slice(path);
        let target = head.target();
        if let Some(query) = target.iter().position(|&b| b == b'?') {
            out.extend_from_slice(&target[query..]);
        }
        return;
    }
    match head.target_form {
        TargetForm::Absolute { .. } => {
            let rest = head.path_and_query();
            if rest.is_empty() && head.method == Method::Options {
                // RFC 9112 §3.2.4: `OPTIONS http://host` asks about the server as a
                // whole, which its last hop writes as `OPTIONS *`.
                out.extend_from_slice(b"*");
                return;
            }
            if rest.first() != Some(&b'/') {
                out.extend_from_slice(b"/");
            }
            out.extend_from_slice(rest);
        }
        _ => out.extend_from_slice(head.target()),
    }
}

/// Writes the request line (`METHOD target HTTP/1.1`) and headers, without
/// hop-by-hop headers (`Connection` and the fields it names, `Keep-Alive`,
/// `Proxy-Connection`, `TE`, `Transfer-Encoding`, `Upgrade` unless upgrading,
/// `Content-Length`), then the framing header and the forwarding headers.
///
/// `Host` is kept even when `Connection` names it, and added (right after
/// the request line) when an HTTP/1.0 client sent none. With a client address,
/// existing `X-Forwarded-For` values are combined into one field ending in
/// the address and `X-Forwarded-Proto` is replaced; with `via`, existing `Via`
/// values are combined into one field ending in this hop's entry.
pub fn write_request_head(head: &RequestHead, forward: &ForwardRequest<'_>, out: &mut BytesMut) {
    write_request_head_edited(head, forward, None, &Unedited, out);
}

/// [`write_request_head`] with `path` (when given) in place of the received
/// path, the query kept as received, and `edits` applied: received `Host` and
/// end-to-end fields it drops are left out, its fields written last.
pub fn write_request_head_edited<E: HeaderEdit + ?Sized>(
    head: &RequestHead,
    forward: &ForwardRequest<'_>,
    path: Option<&[u8]>,
    edits: &E,
    out: &mut BytesMut,
) {
    let raw = &head.raw[..];
    out.reserve(raw.len() + 160);
    out.extend_from_slice(head.method_bytes());
    out.extend_from_slice(b" ");
    write_origin_form(head, path, out);
    out.extend_from_slice(b" HTTP/1.1\r\n");
    if head.host.is_none() {
        // HTTP/1.1 requires Host (RFC 9112 §3.2): an HTTP/1.0 request without
        // one gets its absolute-form authority, or the empty value.
        out.extend_from_slice(b"Host: ");
        out.extend_from_slice(head.host().unwrap_or_default());
        out.extend_from_slice(b"\r\n");
    }

    let rewrite_forwarded = forward.client_addr.is_some();
    let named = connection_names(raw, &head.headers, head.connection_names_fields);
    let listed = |field: &Header| {
        named
            .as_ref()
            .is_some_and(|named| named.contains(slice(raw, field.name)))
    };
    // RFC 9110 §7.6.2: an OPTIONS or TRACE goes on with one hop fewer in Max-Forwards
    // (one at 0 is answered by weir itself and never gets here).
    let forwards = head.max_forwards().filter(|&hops| hops > 0);
    copy_kept_lines(raw, &head.headers, out, |field| match field.kind {
        FieldKind::Connection
        | FieldKind::KeepAlive
        | FieldKind::ProxyConnection
        | FieldKind::Te
        | FieldKind::TransferEncoding
        | FieldKind::ContentLength => false,
        FieldKind::Host => !edits.drops(slice(raw, field.name)),
        FieldKind::Upgrade => forward.upgrade,
        FieldKind::Expect => !forward.strip_expect && !listed(field),
        FieldKind::XForwardedFor | FieldKind::XForwardedProto => {
            !rewrite_forwarded && !listed(field) && !edits.drops(slice(raw, field.name))
        }
        FieldKind::Via => {
            forward.via.is_none() && !listed(field) && !edits.drops(slice(raw, field.name))
        }
        FieldKind::Other => {
            let name = slice(raw, field.name);
            let underscored = forward.drop_underscore_names && name.contains(&b'_');
            let counted = forwards.is_some() && name.eq_ignore_ascii_case(b"max-forwards");
            !(listed(field) || underscored || counted)
                && forward
                    .owned_header
                    .is_none_or(|(owned, _)| !same_field_name(name, owned.as_bytes()))
                && !edits.drops(name)
        }
    });
    if let Some(hops) = forwards {
        out.extend_from_slice(b"Max-Forwards: ");
        out.extend_from_slice(itoa::Buffer::new().format(hops - 1).as_bytes());
        out.extend_from_slice(b"\r\n");
    }

    write_framing(forward.framing, out);
    if forward.upgrade {
        out.extend_from_slice(b"Connection: upgrade\r\n");
    }
    // A field weir writes itself that the edits drop (a rule's `set` or `remove` of it)
    // goes out as the edits say, not beside weir's own: one X-Forwarded-Proto, one Via.
    if let Some(client) = forward.client_addr {
        if !edits.drops(b"x-forwarded-for") {
            out.extend_from_slice(b"X-Forwarded-For: ");
            write_existing_values(raw, &head.headers, FieldKind::XForwardedFor, listed, out);
            // Writing into a BytesMut cannot fail.
            let _ = write!(out, "{}", client.to_canonical());
            out.extend_from_slice(b"\r\n");
        }
        if !edits.drops(b"x-forwarded-proto") {
            out.extend_from_slice(b"X-Forwarded-Proto: ");
            out.extend_from_slice(forward.proto.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
    }
    if let Some(via) = forward.via.filter(|_| !edits.drops(b"via")) {
        let received = forward.via_version.unwrap_or(version_number(head.version));
        write_via(raw, &head.headers, received, via, listed, out);
    }
    if let Some((name, Some(value))) = forward
        .owned_header
        .filter(|(name, _)| !edits.drops(name.as_bytes()))
    {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        // A subject can hold any character; keep the field on one line.
        out.extend(
            value
                .bytes()
                .map(|byte| if byte.is_ascii_control() { b' ' } else { byte }),
        );
        out.extend_from_slice(b"\r\n");
    }
    edits.write_added(out);
    out.extend_from_slice(b"\r\n");
}

/// Writes the status line in the client's version and the headers, without
/// hop-by-hop ones, then the framing and connection headers.
///
/// With `BodyFraming::None`, the node's `Content-Length` is kept on a 304 or
/// on the response to a HEAD request, where it describes the selected
/// representation rather than this message's body.
pub fn write_response_head(head: &ResponseHead, forward: &ForwardResponse<'_>, out: &mut BytesMut) {
    write_response_head_edited(head, forward, &Unedited, out);
}

/// [`write_response_head`] with `edits` applied: end-to-end fields it drops
/// are left out, its fields written after `set_headers`.
pub fn write_response_head_edited<E: HeaderEdit + ?Sized>(
    head: &ResponseHead,
    forward: &ForwardResponse<'_>,
    edits: &E,
    out: &mut BytesMut,
) {
    let raw = &head.raw[..];
    out.reserve(raw.len() + 96);
    let reason = match head.reason() {
        [] => reason_phrase(head.status).as_bytes(),
        reason => reason,
    };
    write_status_line(head.status, reason, out);

    let keep_length =
        forward.framing == BodyFraming::None && (head.head_request || head.status == 304);
    let named = connection_names(raw, &head.headers, head.connection_names_fields);
    let listed = |field: &Header| {
        named
            .as_ref()
            .is_some_and(|named| named.contains(slice(raw, field.name)))
    };
    let dated = std::cell::Cell::new(false);
    copy_kept_lines(raw, &head.headers, out, |field| match field.kind {
        FieldKind::Connection
        | FieldKind::KeepAlive
        | FieldKind::ProxyConnection
        | FieldKind::Te
        | FieldKind::TransferEncoding => false,
        FieldKind::ContentLength => keep_length,
        FieldKind::Upgrade => forward.upgrade,
        FieldKind::Via => forward.via.is_none() && !listed(field) && !edits.drops(b"via"),
        _ => {
            let name = slice(raw, field.name);
            // A `Date` the node's `Connection` names is dropped as hop-by-hop:
            // weir's own then takes its place. `Date` is a single value (RFC 9110
            // §6.6.1, §5.3): a second one from the node is dropped, the first kept.
            if name.eq_ignore_ascii_case(b"date") && !listed(field) && dated.replace(true) {
                return false;
            }
            !listed(field)
                && !forward
                    .set_headers
                    .iter()
                    .any(|(set, _)| name.eq_ignore_ascii_case(set.as_bytes()))
                && !edits.drops(name)
        }
    });

    write_framing(forward.framing, out);
    write_connection(forward.version, forward.keep_alive, forward.upgrade, out);
    // RFC 9110 §6.6.1: a recipient with a clock that forwards a final response
    // without `Date` adds one, the time it was received (written now, within the
    // second). A `Date` a rule removes stays removed; one a rule or `set_headers`
    // writes is not doubled.
    if !dated.get()
        && head.status >= 200
        && !edits.drops(b"date")
        && !forward
            .set_headers
            .iter()
            .any(|(set, _)| set.eq_ignore_ascii_case("date"))
    {
        write_date(out);
    }
    // A rule that removes or sets `Via` takes weir's entry out with the node's.
    if let Some(via) = forward.via.filter(|_| !edits.drops(b"via")) {
        let received = forward.via_version.unwrap_or(version_number(head.version));
        write_via(raw, &head.headers, received, via, listed, out);
    }
    // A field the edits set or remove too is theirs (a rule's word is the last).
    for (name, value) in forward
        .set_headers
        .iter()
        .filter(|(name, _)| !edits.drops(name.as_bytes()))
    {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    edits.write_added(out);
    out.extend_from_slice(b"\r\n");
}

/// Writes a complete short response generated by weir itself (errors, 100
/// Continue, 503 with Retry-After): status line with the standard reason,
/// `Content-Length`, `Content-Type: text/plain` when there is a body,
/// `Connection: close` unless `keep_alive`, then `extra_headers`.
///
/// A 1xx gets only its status line and `extra_headers`; 204 and 304 get no
/// `Content-Length` and no body, 205 a `Content-Length: 0` and no body (see
/// [`status_has_content`]). Extra headers holding CR or LF are skipped.
pub fn write_simple_response(
    status: u16,
    version: Version,
    keep_alive: bool,
    extra_headers: &[(&str, &str)],
    body: &[u8],
    out: &mut BytesMut,
) {
    let answer = SimpleResponse {
        status,
        version,
        keep_alive,
        head_request: false,
    };
    write_simple_response_edited(&answer, extra_headers, &Unedited, body, out);
}

/// What [`write_simple_response_edited`] answers.
#[derive(Debug, Clone, Copy)]
pub struct SimpleResponse {
    /// The status code; the reason phrase is the standard one.
    pub status: u16,
    /// The client's HTTP version; the status line is written in it.
    pub version: Version,
    /// Whether the connection stays open after it (else `Connection: close`).
    pub keep_alive: bool,
    /// The answer to a HEAD request: the body's length is written, not the body.
    pub head_request: bool,
}

/// [`write_simple_response`] with `edits`' fields added last (a redirect's
/// `Location`, a direct response's headers, the rules' response edits). When
/// `edits` drops `Content-Type`, weir writes none of its own.
pub fn write_simple_response_edited<E: HeaderEdit + ?Sized>(
    answer: &SimpleResponse,
    extra_headers: &[(&str, &str)],
    edits: &E,
    body: &[u8],
    out: &mut BytesMut,
) {
    let SimpleResponse {
        status,
        version,
        keep_alive,
        head_request,
    } = *answer;
    let interim = (100..200).contains(&status);
    let bodiless = interim || status == 204 || status == 304;
    let body = if status_has_content(status) {
        body
    } else {
        &[]
    };
    out.reserve(96 + body.len());
    write_status_line(status, reason_phrase(status).as_bytes(), out);
    if !bodiless {
        out.extend_from_slice(b"Content-Length: ");
        out.extend_from_slice(itoa::Buffer::new().format(body.len()).as_bytes());
        out.extend_from_slice(b"\r\n");
        if !body.is_empty() && !edits.drops(b"content-type") {
            out.extend_from_slice(b"Content-Type: text/plain; charset=utf-8\r\n");
        }
    }
    if !interim {
        write_connection(version, keep_alive, false, out);
        // weir is the origin of this answer, and has a clock (RFC 9110 §6.6.1).
        write_date(out);
    }
    for (name, value) in extra_headers {
        let breaks_line = |text: &str| text.bytes().any(|b| b == b'\r' || b == b'\n');
        // A field the edits set (or remove) replaces weir's own: one `Retry-After`, not two.
        if name.is_empty()
            || breaks_line(name)
            || breaks_line(value)
            || edits.drops(name.as_bytes())
        {
            continue;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    edits.write_added(out);
    out.extend_from_slice(b"\r\n");
    if !bodiless && !head_request {
        out.extend_from_slice(body);
    }
}

/// Whether an answer with `status` may carry content: not a 1xx, a 204 or a 304, which
/// end at their head (RFC 9112 §6.3), nor a 205, which a server must send without any
/// (RFC 9110 §15.3.6).
pub fn status_has_content(status: u16) -> bool {
    !(100..200).contains(&status) && !matches!(status, 204 | 205 | 304)
}

/// `Date: <now, an IMF-fixdate>\r\n`, formatted at most once a second on each thread:
/// the field weir adds to what it originates or forwards without one (RFC 9110 §6.6.1).
pub fn write_date(out: &mut BytesMut) {
    use crate::date::{HTTP_DATE_LEN, http_date};
    use std::cell::Cell;
    use std::time::{SystemTime, UNIX_EPOCH};
    thread_local! {
        static LAST: Cell<(u64, [u8; HTTP_DATE_LEN])> =
            const { Cell::new((u64::MAX, [0; HTTP_DATE_LEN])) };
    }
    let now = SystemTime::now();
    let second = now
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    let date = LAST.with(|last| {
        let (at, date) = last.get();
        if at == second {
            return date;
        }
        let date = http_date(now);
        last.set((second, date));
        date
    });
    out.extend_from_slice(b"Date: ");
    out.extend_from_slice(&date);
    out.extend_from_slice(b"\r\n");
}

/// The standard reason phrase for `status`, or `""` for codes weir does not name.
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        102 => "Processing",
        103 => "Early Hints",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        203 => "Non-Authoritative Information",
        204 => "No Content",
        205 => "Reset Content",
        206 => "Partial Content",
        300 => "Multiple Choices",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        305 => "Use Proxy",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        402 => "Payment Required",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        407 => "Proxy Authentication Required",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        416 => "Range Not Satisfiable",
        417 => "Expectation Failed",
        421 => "Misdirected Request",
        422 => "Unprocessable Content",
        426 => "Upgrade Required",
        428 => "Precondition Required",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        451 => "Unavailable For Legal Reasons",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        511 => "Network Authentication Required",
        _ => "",
    }
}

/// Copies the header lines `keep` accepts. Header lines are contiguous in
/// `raw` (no obs-fold, no skipped lines), so each run of kept lines is one copy.
fn copy_kept_lines(
    raw: &[u8],
    headers: &[Header],
    out: &mut BytesMut,
    keep: impl Fn(&Header) -> bool,
) {
    let copy = |out: &mut BytesMut, start: usize, end: usize| {
        out.extend_from_slice(raw.get(start..end).unwrap_or_default());
    };
    let mut run_start = None;
    for field in headers {
        let line_start = field.name.0 as usize;
        if keep(field) {
            run_start.get_or_insert(line_start);
        } else if let Some(start) = run_start.take() {
            copy(out, start, line_start);
        }
    }
    if let Some(start) = run_start {
        // The head ends with the empty line's CRLF, which the caller writes.
        copy(out, start, raw.len().saturating_sub(2));
    }
}

/// The names the `Connection` fields list when they name fields beyond the usual tokens
/// (each such field is then hop-by-hop): built once per head, asked once per field.
fn connection_names(raw: &[u8], headers: &[Header], names_fields: bool) -> Option<FieldNames> {
    names_fields.then(|| {
        FieldNames::listed(
            headers
                .iter()
                .filter(|field| field.kind == FieldKind::Connection)
                .map(|field| slice(raw, field.value)),
        )
    })
}

/// Writes each non-empty value of the `kind` fields not `listed` by
/// `Connection`, each followed by `", "`.
fn write_existing_values(
    raw: &[u8],
    headers: &[Header],
    kind: FieldKind,
    listed: impl Fn(&Header) -> bool,
    out: &mut BytesMut,
) {
    for field in headers
        .iter()
        .filter(|field| field.kind == kind && !listed(field))
    {
        let value = slice(raw, field.value);
        if !value.is_empty() {
            out.extend_from_slice(value);
            out.extend_from_slice(b", ");
        }
    }
}

/// `Via: <existing>, <received-protocol> <via>`; the protocol is the version
/// the message was received in (RFC 9110 §7.6.3).
fn write_via(
    raw: &[u8],
    headers: &[Header],
    received: &str,
    via: &str,
    listed: impl Fn(&Header) -> bool,
    out: &mut BytesMut,
) {
    out.extend_from_slice(b"Via: ");
    write_existing_values(raw, headers, FieldKind::Via, listed, out);
    out.extend_from_slice(received.as_bytes());
    out.extend_from_slice(b" ");
    out.extend_from_slice(via.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// A version as `Via` names it.
fn version_number(version: Version) -> &'static str {
    match version {
        Version::Http10 => "1.0",
        Version::Http11 => "1.1",
    }
}

fn write_framing(framing: BodyFraming, out: &mut BytesMut) {
    match framing {
        BodyFraming::Length(length) => {
            out.extend_from_slice(b"Content-Length: ");
            out.extend_from_slice(itoa::Buffer::new().format(length).as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        BodyFraming::Chunked => out.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
        BodyFraming::None | BodyFraming::CloseDelimited => {}
    }
}

/// The `Connection` field of a response to a client of `version`: `upgrade` for a switch,
/// `close` whenever the connection closes (the status line says HTTP/1.1 to every client),
/// `keep-alive` for an HTTP/1.0 client whose connection stays, nothing otherwise. Every
/// writer of a response head weir sends uses it (the cache's hits and the relay too).
pub fn write_connection(version: Version, keep_alive: bool, upgrade: bool, out: &mut BytesMut) {
    if upgrade {
        out.extend_from_slice(b"Connection: upgrade\r\n");
    } else if !keep_alive {
        out.extend_from_slice(b"Connection: close\r\n");
    } else if version == Version::Http10 {
        out.extend_from_slice(b"Connection: keep-alive\r\n");
    }
}

/// Writes a status line, always `HTTP/1.1`: to an HTTP/1.0 client too, as RFC 9112
/// §2.3 asks (the highest version weir conforms to within the client's major
/// version); what the client can read is kept by the framing and `Connection` fields,
/// not the line. `HTTP/1.1 200 OK`, nearly every answer's, is one copy of a constant
/// rather than five pieces.
pub fn write_status_line(status: u16, reason: &[u8], out: &mut BytesMut) {
    if (status, reason) == (200, &b"OK"[..]) {
        out.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
        return;
    }
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(itoa::Buffer::new().format(status).as_bytes());
    out.extend_from_slice(b" ");
    out.extend_from_slice(reason);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests;
