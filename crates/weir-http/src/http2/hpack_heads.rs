//! Heads to and from HPACK blocks directly, for weir's own HTTP/2 codec
//! (`docs/design/http2.md`, "weir's own HPACK"): a request head built from
//! the fields the decoder hands out, and a response block encoded from the
//! HTTP/1.1 head weir wrote, with no `http` crate map between them. The rules
//! are the adapter's (`super`), plus the ones the `h2` crate applies before
//! the adapter sees a message: lower-case names, pseudo-header fields first,
//! each once, and the ones a request needs (RFC 9113 §8.2 and §8.3).

use std::ops::Range;

use bytes::{BufMut, BytesMut};

use super::{
    is_connection_specific, is_te_trailers, is_uri_scheme, padded, put_field, written_fields,
};
use crate::error::{ParseError, ParseErrorKind};
use crate::fields::FieldKind;
use crate::head::{Limits, RequestHead};
use crate::hpack::{Block, Field, Indexing};
use crate::syntax::is_token_char;

/// A request as HTTP/2 carried it: the head it stands for, and the
/// `:protocol` of an extended CONNECT (RFC 8441), which the head cannot say
/// (its head is the GET of its path, without upgrade fields).
#[derive(Debug)]
pub struct H2Request {
    /// The HTTP/1.1 head the request stands for.
    pub head: RequestHead,
    /// `:protocol`, present only on an extended CONNECT.
    pub protocol: Option<Vec<u8>>,
}

/// Collects a request's fields as the HPACK decoder hands them out, then
/// builds its head ([`RequestFields::finish`]). The first fault is kept and
/// the rest of the block is only counted, as the decoder must go on.
///
/// Pseudo-header fields come first (RFC 9113 §8.3), so the request line and
/// `Host` are written when the first regular field comes, and each regular
/// field is written as a line as it comes: one buffer for the whole head.
pub struct RequestFields {
    /// The pseudo-header fields' values, one after another.
    pseudo: Vec<u8>,
    method: Option<Range<usize>>,
    scheme: Option<Range<usize>>,
    authority: Option<Range<usize>>,
    path: Option<Range<usize>>,
    protocol: Option<Range<usize>>,
    /// The head as HTTP/1.1 text; past the request line once `started`.
    out: BytesMut,
    started: bool,
    cookies: Option<Vec<u8>>,
    content_length: bool,
    /// The header list's size so far (RFC 9113 §6.5.2: octets plus 32 a field).
    list_size: usize,
    max_list_size: usize,
    fault: Option<ParseError>,
    /// The fault breaks HTTP/2's own rules on fields (RFC 9113 §8.1.1): the
    /// stream is reset, not answered.
    malformed: bool,
    /// A `content-type` of gRPC came (`application/grpc`, alone, with
    /// parameters or a suffix).
    grpc: bool,
    /// A fault HTTP/1.1 refuses too (a `Host` that differs from
    /// `:authority`): answered (400), and the fields after it still taken,
    /// as HTTP/2's own faults among them still reset the stream.
    refusal: Option<ParseError>,
}

impl RequestFields {
    /// How a refusal of this request is to be answered: whether it is a
    /// HEAD (no body) and a gRPC call (a trailers-only answer with a
    /// `grpc-status`).
    pub fn answer_form(&self) -> (bool, bool) {
        (
            slice(&self.pseudo, &self.method) == Some(b"HEAD"),
            self.grpc,
        )
    }

    /// A collector for one block under SETTINGS_MAX_HEADER_LIST_SIZE.
    pub fn new(max_list_size: usize) -> Self {
        RequestFields {
            pseudo: Vec::with_capacity(128),
            method: None,
            scheme: None,
            authority: None,
            path: None,
            protocol: None,
            out: BytesMut::with_capacity(512),
            started: false,
            cookies: None,
            content_length: false,
            list_size: 0,
            max_list_size,
            fault: None,
            malformed: false,
            grpc: false,
            refusal: None,
        }
    }

    /// Takes the next field of the block.
    pub fn field(&mut self, field: Field<'_>) {
        self.list_size += field.name.len() + field.value.len() + 32;
        if self.fault.is_some() {
            return;
        }
        if self.list_size > self.max_list_size {
            self.fault = Some(ParseError {
                kind: ParseErrorKind::HeadTooLarge,
                reason: "header list larger than SETTINGS_MAX_HEADER_LIST_SIZE",
            });
            return;
        }
        if let Err(error) = self.take(field.name, field.value) {
            self.fault = Some(error);
            self.malformed = true;
        }
    }

    /// The fault that makes the request malformed under HTTP/2's own rules
    /// on fields (RFC 9113 §8.1.1: a stream error of type PROTOCOL_ERROR, as
    /// the `h2` crate answered it), if any: a name not lower case, a pseudo-header
    /// field unknown, repeated, missing or after a regular one, a
    /// connection-specific field. Faults HTTP/1.1 shares (a bad target, a bad
    /// `content-length`, a list too large) are [`RequestFields::finish`]'s, answered
    /// with their status.
    pub fn malformed(&mut self) -> Option<ParseError> {
        if !self.started && self.fault.is_none() {
            self.fault = self.start().err();
            self.malformed = self.fault.is_some();
        }
        self.fault.filter(|_| self.malformed)
    }

    fn take(&mut self, name: &[u8], value: &[u8]) -> Result<(), ParseError> {
        if !is_field_value(value) {
            return Err(ParseError::invalid("field value with NUL, CR or LF"));
        }
        if let Some(pseudo) = name.strip_prefix(b":") {
            return self.take_pseudo(pseudo, value);
        }
        if !self.started {
            self.start()?;
        }
        if !is_field_name(name) {
            return Err(ParseError::invalid("field name not a lower-case token"));
        }
        // RFC 9113 §8.2.1: a value that starts or ends with whitespace is
        // malformed (over HTTP/1.1 it would read as part of the syntax).
        if padded(value) {
            return Err(ParseError::invalid(
                "field value with leading or trailing whitespace in HTTP/2",
            ));
        }
        match FieldKind::of(name) {
            FieldKind::Host => {
                if let Err(refusal) = self.take_host(value) {
                    self.refusal.get_or_insert(refusal);
                }
            }
            _ if name == b"content-type" => {
                self.grpc = is_grpc_type(value);
                put_field(&mut self.out, name, value);
            }
            kind if is_connection_specific(kind) => {
                return Err(ParseError::invalid("connection-specific field in HTTP/2"));
            }
            FieldKind::Te if !is_te_trailers(value) => {
                return Err(ParseError::invalid("TE other than trailers in HTTP/2"));
            }
            _ if name == b"cookie" => {
                let joined = self.cookies.get_or_insert_with(Vec::new);
                if !joined.is_empty() {
                    joined.extend_from_slice(b"; ");
                }
                joined.extend_from_slice(value);
            }
            kind => {
                self.content_length |= kind == FieldKind::ContentLength;
                put_field(&mut self.out, name, value);
            }
        }
        Ok(())
    }

    fn take_pseudo(&mut self, pseudo: &[u8], value: &[u8]) -> Result<(), ParseError> {
        if self.started {
            return Err(ParseError::invalid(
                "pseudo-header field after a regular one",
            ));
        }
        let slot = match pseudo {
            b"method" => &mut self.method,
            b"scheme" => &mut self.scheme,
            b"authority" => &mut self.authority,
            b"path" => &mut self.path,
            b"protocol" => &mut self.protocol,
            _ => {
                return Err(ParseError::invalid(
                    "unknown or response pseudo-header field",
                ));
            }
        };
        if slot.is_some() {
            return Err(ParseError::invalid("repeated pseudo-header field"));
        }
        let start = self.pseudo.len();
        self.pseudo.extend_from_slice(value);
        *slot = Some(start..self.pseudo.len());
        Ok(())
    }

    /// Writes the request line and `Host` from the pseudo-header fields,
    /// which are all in once a regular field comes (or the block ends).
    fn start(&mut self) -> Result<(), ParseError> {
        self.started = true;
        let method =
            slice(&self.pseudo, &self.method).ok_or(ParseError::invalid("missing :method"))?;
        let connect = method == b"CONNECT";
        let extended = connect && self.protocol.is_some();
        if self.protocol.is_some() && !connect {
            return Err(ParseError::invalid(":protocol without CONNECT"));
        }
        // An extended CONNECT (RFC 8441 §4) is written as the GET its path
        // stands for; the WebSocket stage builds the upgrade from that head and
        // `protocol`.
        self.out.put_slice(if extended { b"GET" } else { method });
        self.out.put_u8(b' ');
        if connect && !extended {
            // RFC 9113 §8.5: CONNECT names only its authority.
            if self.scheme.is_some() || self.path.is_some() {
                return Err(ParseError::invalid("CONNECT with :scheme or :path"));
            }
            let authority = slice(&self.pseudo, &self.authority)
                .ok_or(ParseError::invalid("CONNECT without :authority"))?;
            self.out.put_slice(authority);
        } else {
            let scheme =
                slice(&self.pseudo, &self.scheme).ok_or(ParseError::invalid("missing :scheme"))?;
            if !is_uri_scheme(scheme) {
                return Err(ParseError::invalid("invalid :scheme"));
            }
            let path = slice(&self.pseudo, &self.path)
                .filter(|path| !path.is_empty())
                .ok_or(ParseError::invalid("missing :path"))?;
            self.out.put_slice(path);
        }
        self.out.put_slice(b" HTTP/1.1\r\n");
        if let Some(range) = self.authority.clone() {
            put_field(&mut self.out, b"host", &self.pseudo[range]);
        }
        Ok(())
    }

    /// A `Host` must agree with `:authority` (RFC 9113 §8.3.1), which the head
    /// already carries as its `Host`; without one, it may not be empty.
    fn take_host(&mut self, host: &[u8]) -> Result<(), ParseError> {
        let Some(authority) = slice(&self.pseudo, &self.authority) else {
            if host.is_empty() {
                return Err(ParseError::invalid("empty Host in HTTP/2"));
            }
            put_field(&mut self.out, b"host", host);
            return Ok(());
        };
        let default_port = match slice(&self.pseudo, &self.scheme) {
            Some(b"https") => 443,
            _ => 80,
        };
        match crate::target::same_authority(host, authority, default_port) {
            true => Ok(()),
            false => Err(ParseError::invalid("Host differs from :authority")),
        }
    }

    /// The head the block stands for. `end_of_stream`: the HEADERS frame
    /// ended the stream (no body).
    pub fn finish(mut self, end_of_stream: bool, limits: &Limits) -> Result<H2Request, ParseError> {
        if !self.started && self.fault.is_none() {
            self.fault = self.start().err();
        }
        if let Some(fault) = self.fault.or(self.refusal) {
            return Err(fault);
        }
        if let Some(cookies) = &self.cookies {
            put_field(&mut self.out, b"cookie", cookies);
        }
        let connect = slice(&self.pseudo, &self.method) == Some(b"CONNECT");
        if !end_of_stream && !connect && !self.content_length {
            put_field(&mut self.out, b"transfer-encoding", b"chunked");
        }
        self.out.put_slice(b"\r\n");
        let protocol = slice(&self.pseudo, &self.protocol).map(<[u8]>::to_vec);
        match RequestHead::split_from(&mut self.out, limits)? {
            Some(head) if self.out.is_empty() => Ok(H2Request { head, protocol }),
            _ => Err(ParseError::invalid("HTTP/2 request does not form a head")),
        }
    }
}

/// Whether a `content-type` value is gRPC's: `application/grpc`, then the
/// end, parameters (`;`) or a suffix (`+proto`).
fn is_grpc_type(value: &[u8]) -> bool {
    const GRPC: &[u8] = b"application/grpc";
    value.len() >= GRPC.len()
        && value[..GRPC.len()].eq_ignore_ascii_case(GRPC)
        && matches!(value.get(GRPC.len()), None | Some(b'+' | b';'))
}

/// A pseudo-header field's value, if it came.
fn slice<'a>(pseudo: &'a [u8], slot: &Option<Range<usize>>) -> Option<&'a [u8]> {
    slot.clone().map(|range| &pseudo[range])
}

/// Encodes an HTTP/1.1 response head weir has just written as an HTTP/2
/// header block: `:status`, then each field as written, its name in lower
/// case, without the connection-specific fields and `TE`. What it does for a
/// `HeaderMap` (`written_fields_to_h2`) it does straight into the block.
pub fn encode_response_head(
    status: u16,
    written: &[u8],
    block: &mut Block<'_>,
) -> Result<(), ParseError> {
    if !(100..=999).contains(&status) {
        return Err(ParseError::invalid("status not representable in HTTP/2"));
    }
    block.status(status);
    // The status line first, then a field a line up to the empty line.
    match memchr::memchr(b'\n', written) {
        Some(end) if written.ends_with(b"\r\n\r\n") => encode_fields(&written[end + 1..], block),
        _ => Err(ParseError::invalid("written head incomplete")),
    }
}

/// Encodes HTTP/1.1 field lines (each ending in CRLF, up to an empty line
/// or the end) into a header block, names in lower case, without the
/// connection-specific fields and `TE`: a head's fields, or a trailer
/// section's.
pub fn encode_fields(lines: &[u8], block: &mut Block<'_>) -> Result<(), ParseError> {
    encode_lines(lines, block, Lines::Response)
}

/// Whose field lines [`encode_lines`] encodes: a response's (or trailers'),
/// or a request's for a node, whose `Host` went as `:authority`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Lines {
    Response,
    Request,
}

/// [`encode_fields`] for either kind of message.
pub(super) fn encode_lines(
    lines: &[u8],
    block: &mut Block<'_>,
    kind: Lines,
) -> Result<(), ParseError> {
    // Names are lower-cased here: most are short enough for the stack.
    let mut short = [0u8; 64];
    let mut long = Vec::new();
    for field in written_fields(lines) {
        let (name, value) = field?;
        if kind == Lines::Request && name.eq_ignore_ascii_case(b"host") {
            continue;
        }
        // The writer wrote these from a parsed head (names are tokens, values
        // hold no CR or LF), weir's own fields and validated edits; what an
        // HTTP/2 field cannot hold is still refused, in the pass that lowers
        // the name's case.
        if value.contains(&0) {
            return Err(ParseError::invalid("field value not representable"));
        }
        let lower = match short.get_mut(..name.len()) {
            Some(lower) => lower,
            None => {
                long.resize(name.len(), 0);
                &mut long[..]
            }
        };
        let mut invalid = name.is_empty();
        for (to, &from) in lower.iter_mut().zip(name) {
            *to = LOWER_TOKEN[usize::from(from)];
            invalid |= *to == 0;
        }
        if invalid {
            return Err(ParseError::invalid("field name not representable"));
        }
        let name = &*lower;
        let indexing = match kind {
            Lines::Response => indexing(name),
            Lines::Request => request_indexing(name),
        };
        block.field(name, value, indexing);
    }
    Ok(())
}

/// RFC 9113 §8.2.1: a regular field's name in HTTP/2 is a lower-case token.
pub(crate) fn is_field_name(name: &[u8]) -> bool {
    !name.is_empty()
        && name
            .iter()
            .all(|&b| b != 0 && LOWER_TOKEN[usize::from(b)] == b)
}

/// RFC 9113 §8.2.1: a field value holds no NUL, CR or LF.
pub(crate) fn is_field_value(value: &[u8]) -> bool {
    !value.iter().any(|&b| matches!(b, b'\0' | b'\r' | b'\n'))
}

/// Each octet of a token in lower case, 0 for an octet no token holds.
static LOWER_TOKEN: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut byte = 0;
    while byte < 256 {
        let b = byte as u8;
        let token = is_token_char(b);
        if token {
            table[byte] = b.to_ascii_lowercase();
        }
        byte += 1;
    }
    table
};

/// Which response fields may enter the table: all but the few whose values
/// are per user (`set-cookie`), and secrets a node should not have sent.
fn indexing(name: &[u8]) -> Indexing {
    match name {
        b"set-cookie" => Indexing::NotIndexed,
        b"authorization" | b"proxy-authorization" => Indexing::Never,
        _ => Indexing::Index,
    }
}

/// Which request fields may enter the table a node keeps for weir: not the
/// credentials (RFC 7541 §7.1.3), nor the fields that differ on every request.
fn request_indexing(name: &[u8]) -> Indexing {
    match name {
        b"authorization" | b"proxy-authorization" | b"cookie" => Indexing::Never,
        b"content-length" | b"x-request-id" | b"traceparent" => Indexing::NotIndexed,
        _ => Indexing::Index,
    }
}

#[cfg(test)]
mod tests;
