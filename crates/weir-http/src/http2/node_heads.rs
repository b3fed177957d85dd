//! Heads to and from a node's HTTP/2 connection, for the client side of
//! weir's own codec (`crate::h2client`): a request block encoded straight from
//! the HTTP/1.1 head weir wrote for the node, and the node's response fields
//! collected into the HTTP/1.1 head they stand for. The rules are the `http`
//! crate path's (`request_to_h2_edited`, `response_from_h2_within` in
//! `super`), so either codec hands the node and the pipeline the same heads.

use bytes::{BufMut, BytesMut};

use super::hpack_heads::{Lines, encode_lines, is_field_name, is_field_value};
use super::{is_connection_specific, padded, put_field};
use crate::error::{ParseError, ParseErrorKind};
use crate::fields::FieldKind;
use crate::head::{Limits, ResponseHead};
use crate::hpack::{Block, Field, Indexing};
use crate::message::Method;

/// A request for a node, as [`encode_request_head`] takes it.
#[derive(Debug, Clone, Copy)]
pub struct NodeRequest<'a> {
    /// The HTTP/1.1 head weir wrote for the node (request line, fields, the
    /// empty line), rewritten as for an HTTP/1.1 node.
    pub written: &'a [u8],
    /// `:scheme`: `http` for h2c, `https` over TLS.
    pub scheme: &'a [u8],
    /// The client asked for trailers (`TE: trailers`, which the writer drops
    /// as hop-by-hop and an HTTP/2 node still reads; gRPC needs it).
    pub te_trailers: bool,
    /// `:protocol` of an extended CONNECT (RFC 8441): the written head is
    /// then the GET of its path, sent as a CONNECT.
    pub protocol: Option<&'a [u8]>,
}

/// Encodes a request for a node into a header block and returns its
/// method (which frames the response: a HEAD's has no body). Pseudo-header
/// fields first, in the order the `h2` crate sends them: `:method`,
/// `:scheme`, `:authority` (the written `Host`), `:path`; a CONNECT names its
/// authority alone (RFC 9113 §8.5). A request without `Host` (HTTP/1.0) goes
/// without `:authority`, which an intermediary must not make up (§8.3.1).
pub fn encode_request_head(
    request: &NodeRequest<'_>,
    block: &mut Block<'_>,
) -> Result<Method, ParseError> {
    let written = request.written;
    let line_end = memchr::memchr(b'\n', written)
        .filter(|_| written.ends_with(b"\r\n\r\n"))
        .ok_or(ParseError::invalid("written request head incomplete"))?;
    let line = written[..line_end]
        .strip_suffix(b"\r")
        .unwrap_or(&written[..line_end]);
    let mut parts = line.splitn(3, |&b| b == b' ');
    let (Some(method), Some(target), Some(_version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(ParseError::invalid("written request line malformed"));
    };
    if method.is_empty() || target.is_empty() {
        return Err(ParseError::invalid("written request line malformed"));
    }
    let fields = &written[line_end + 1..];
    let host = find_host(fields).unwrap_or_default();
    match request.protocol {
        Some(protocol) => {
            block.field(b":method", b"CONNECT", Indexing::Index);
            block.field(b":protocol", protocol, Indexing::Index);
            block.field(b":scheme", request.scheme, Indexing::Index);
            block.field(b":path", target, path_indexing(target));
            block.field(b":authority", host, Indexing::Index);
        }
        None if method == b"CONNECT" => {
            block.field(b":method", method, Indexing::Index);
            block.field(b":authority", target, Indexing::Index);
        }
        None => {
            block.field(b":method", method, Indexing::Index);
            block.field(b":scheme", request.scheme, Indexing::Index);
            if !host.is_empty() {
                block.field(b":authority", host, Indexing::Index);
            }
            block.field(b":path", target, path_indexing(target));
        }
    }
    encode_lines(fields, block, Lines::Request)?;
    if request.te_trailers {
        block.field(b"te", b"trailers", Indexing::Index);
    }
    Ok(Method::from_bytes(method))
}

/// A path is indexed only when short: most differ from one request to the
/// next and would only push the repeating fields out of the table.
fn path_indexing(path: &[u8]) -> Indexing {
    match path.len() <= 16 {
        true => Indexing::Index,
        false => Indexing::NotIndexed,
    }
}

/// The value of the first `Host` line among written field lines.
fn find_host(lines: &[u8]) -> Option<&[u8]> {
    lines
        .split(|&b| b == b'\n')
        .take_while(|line| !matches!(line, [] | [b'\r']))
        .find_map(|line| {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let colon = memchr::memchr(b':', line)?;
            line[..colon]
                .eq_ignore_ascii_case(b"host")
                .then(|| crate::syntax::trim_ows(&line[colon + 1..]))
        })
}

/// What a node's header block turned out to be.
#[derive(Debug)]
pub enum NodeHead {
    /// An interim (1xx) response: its status and field lines (HTTP/1.1
    /// lines, each ending in CRLF).
    Interim {
        /// The status, 100 to 199 (never 101: RFC 9113 §8.6).
        status: u16,
        /// The fields.
        lines: Vec<u8>,
    },
    /// The final response head.
    Final(ResponseHead),
}

/// Collects a node's response fields as the HPACK decoder hands them out,
/// then builds its head ([`ResponseFields::finish`]). The first fault is kept
/// and the rest of the block only counted, as the decoder must go on.
pub struct ResponseFields {
    status: Option<u16>,
    out: BytesMut,
    content_length: bool,
    list_size: usize,
    max_list_size: usize,
    fault: Option<ParseError>,
}

impl ResponseFields {
    /// A collector for one block under weir's SETTINGS_MAX_HEADER_LIST_SIZE.
    pub fn new(max_list_size: usize) -> Self {
        let mut out = BytesMut::with_capacity(256);
        out.put_slice(b"HTTP/1.1 ");
        ResponseFields {
            status: None,
            out,
            content_length: false,
            list_size: 0,
            max_list_size,
            fault: None,
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
        }
    }

    fn take(&mut self, name: &[u8], value: &[u8]) -> Result<(), ParseError> {
        if !is_field_value(value) {
            return Err(ParseError::invalid("field value with NUL, CR or LF"));
        }
        if name == b":status" {
            if self.status.is_some() {
                return Err(ParseError::invalid("repeated or late :status"));
            }
            let status = match value {
                [a, b, c] if value.iter().all(u8::is_ascii_digit) => {
                    u16::from(a - b'0') * 100 + u16::from(b - b'0') * 10 + u16::from(c - b'0')
                }
                _ => return Err(ParseError::invalid("invalid :status")),
            };
            if status < 100 {
                return Err(ParseError::invalid("invalid :status"));
            }
            self.status = Some(status);
            self.out.put_slice(value);
            self.out.put_slice(b" \r\n");
            return Ok(());
        }
        if name.starts_with(b":") {
            return Err(ParseError::invalid(
                "a request's or unknown pseudo-header field",
            ));
        }
        if self.status.is_none() {
            return Err(ParseError::invalid("missing :status"));
        }
        if !is_field_name(name) {
            return Err(ParseError::invalid("field name not a lower-case token"));
        }
        if padded(value) {
            return Err(ParseError::invalid(
                "field value with leading or trailing whitespace in HTTP/2",
            ));
        }
        let kind = FieldKind::of(name);
        if is_connection_specific(kind) || kind == FieldKind::Te {
            return Err(ParseError::invalid("connection-specific field in HTTP/2"));
        }
        self.content_length |= kind == FieldKind::ContentLength;
        put_field(&mut self.out, name, value);
        Ok(())
    }

    /// The head the block stands for. `end_of_stream`: the HEADERS frame
    /// ended the stream; `request_method` frames the body (a HEAD's answer
    /// has none). A final response without `content-length` is framed by
    /// its stream: `content-length: 0` when the stream ended with the head,
    /// chunked otherwise, as `response_from_h2_within` frames it.
    pub fn finish(
        mut self,
        end_of_stream: bool,
        request_method: Method,
        limits: &Limits,
    ) -> Result<NodeHead, ParseError> {
        if let Some(fault) = self.fault {
            return Err(fault);
        }
        let status = self.status.ok_or(ParseError::invalid("missing :status"))?;
        if (100..200).contains(&status) {
            // RFC 9113 §8.1: an interim response never ends the stream, and
            // §8.6: there is no 101 in HTTP/2.
            if end_of_stream || status == 101 {
                return Err(ParseError::invalid(
                    "interim response that ends or switches",
                ));
            }
            let start = memchr::memchr(b'\n', &self.out).map_or(0, |end| end + 1);
            let lines = self.out[start..].to_vec();
            return Ok(NodeHead::Interim { status, lines });
        }
        let bodiless = request_method == Method::Head || status == 204 || status == 304;
        if !bodiless && !self.content_length {
            match end_of_stream {
                true => put_field(&mut self.out, b"content-length", b"0"),
                false => put_field(&mut self.out, b"transfer-encoding", b"chunked"),
            }
        }
        self.out.put_slice(b"\r\n");
        match ResponseHead::split_from(&mut self.out, limits, request_method)? {
            Some(head) if self.out.is_empty() => Ok(NodeHead::Final(head)),
            _ => Err(ParseError::invalid("HTTP/2 response does not form a head")),
        }
    }
}

#[cfg(test)]
mod tests;
