//! Templates rendered for one request: literals are shared `Bytes` (no
//! allocation), variables are looked up in the head, the facts and the
//! rule's captures.

use std::io::Write as _;

use bytes::Bytes;
use regex::bytes::Captures;
use weir_config::{Piece, Template, Variable};
use weir_http::RequestHead;

use crate::facts::{Facts, tls_version_text};
use crate::request;

/// A template ready to render.
#[derive(Debug, Clone)]
pub(crate) struct Compiled {
    parts: Box<[Part]>,
    /// The whole text when there are no variables.
    literal: Option<Bytes>,
}

#[derive(Debug, Clone)]
enum Part {
    Literal(Bytes),
    Variable(Variable),
}

/// What a variable may be read from.
pub(crate) struct Sources<'a> {
    pub head: &'a RequestHead,
    pub facts: &'a Facts<'a>,
    /// The rule's capture groups, when its match has a `path_regex`.
    pub captures: Option<&'a Captures<'a>>,
}

impl Compiled {
    pub(crate) fn new(template: &Template) -> Compiled {
        let parts: Box<[Part]> = template
            .pieces
            .iter()
            .map(|piece| match piece {
                Piece::Literal(text) => Part::Literal(Bytes::copy_from_slice(text.as_bytes())),
                Piece::Variable(variable) => Part::Variable(variable.clone()),
            })
            .collect();
        let literal = template
            .as_literal()
            .map(|text| Bytes::copy_from_slice(text.as_bytes()));
        Compiled { parts, literal }
    }

    /// Whether rendering needs the rule's captures.
    pub(crate) fn uses_captures(&self) -> bool {
        self.parts
            .iter()
            .any(|part| matches!(part, Part::Variable(Variable::Capture(_))))
    }

    /// The rendered bytes; a literal template is returned without copying.
    pub(crate) fn render(&self, sources: &Sources<'_>) -> Bytes {
        if let Some(literal) = &self.literal {
            return literal.clone();
        }
        let mut out = Vec::with_capacity(64);
        self.render_into(sources, &mut out);
        Bytes::from(out)
    }

    pub(crate) fn render_into(&self, sources: &Sources<'_>, out: &mut Vec<u8>) {
        for part in self.parts.iter() {
            match part {
                Part::Literal(text) => out.extend_from_slice(text),
                Part::Variable(variable) => {
                    let start = out.len();
                    write_variable(variable, sources, out);
                    scrub(&mut out[start..]);
                }
            }
        }
    }

    /// Renders a path (a `rewrite_path`'s `with`): what variables bring is
    /// percent-encoded so that the result is one valid request-target path
    /// (RFC 9112 §3.2). The path, the URI and the path regex's captures keep
    /// their `/` (they are path already); any other value (a header, cookie,
    /// parameter, the host...) is one segment: its `/`, `\`, `%`, `?`, `#`,
    /// spaces and other bytes outside a segment's characters are encoded, and
    /// a value that is only `.` or `..` is left out, so a client cannot climb
    /// out of the place the operator put it.
    pub(crate) fn render_path_into(&self, sources: &Sources<'_>, out: &mut Vec<u8>) {
        let mut value = Vec::new();
        for part in self.parts.iter() {
            match part {
                Part::Literal(text) => out.extend_from_slice(text),
                Part::Variable(variable) => {
                    value.clear();
                    write_variable(variable, sources, &mut value);
                    let path_already = matches!(
                        variable,
                        Variable::Path | Variable::Uri | Variable::Capture(_)
                    );
                    if path_already {
                        encode_for_path(&value, true, out);
                        continue;
                    }
                    // A value as sent may hold escapes (`?q=a%20b`): decoded first, so
                    // that it is encoded once, as one segment.
                    let value = request::percent_decoded(&value);
                    if matches!(&value[..], b"." | b"..") {
                        continue;
                    }
                    encode_for_path(&value, false, out);
                }
            }
        }
    }
}

/// Appends `value` with every byte that may not stand in a path segment
/// (RFC 3986 pchar) percent-encoded; `/` and existing `%XX` escapes are kept
/// when `keep_slashes` (a value that is a path already).
fn encode_for_path(value: &[u8], keep_slashes: bool, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &byte in value {
        let plain = byte.is_ascii_alphanumeric()
            || matches!(
                byte,
                b'-' | b'.'
                    | b'_'
                    | b'~'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b';'
                    | b'='
                    | b':'
                    | b'@'
            )
            || (keep_slashes && matches!(byte, b'/' | b'%'));
        if plain {
            out.push(byte);
        } else {
            out.extend_from_slice(&[
                b'%',
                HEX[usize::from(byte >> 4)],
                HEX[usize::from(byte & 15)],
            ]);
        }
    }
}

fn write_variable(variable: &Variable, sources: &Sources<'_>, out: &mut Vec<u8>) {
    let head = sources.head;
    let facts = sources.facts;
    let text: &[u8] = match variable {
        Variable::Host => request::host(head),
        // The path rules matched, not the one sent: `//evil.example/../dir`
        // must not become a Location that leaves the site.
        // A `\\` goes out as `%5C`: browsers read `/\\evil.example` in a Location as
        // `//evil.example`.
        Variable::Path => {
            extend_escaping_backslashes(out, &request::normalized_path(head.path()));
            return;
        }
        Variable::Query => request::query(head),
        Variable::Uri => {
            extend_escaping_backslashes(out, &request::normalized_uri(head));
            return;
        }
        Variable::Method => head.method_bytes(),
        Variable::Scheme if facts.https => b"https",
        Variable::Scheme => b"http",
        Variable::ClientAddress => {
            // Writing to a Vec cannot fail.
            let _ = write!(out, "{}", facts.client_address);
            return;
        }
        Variable::RequestId => facts.request_id.as_bytes(),
        Variable::TlsVersion => tls_version_text(facts.tls_version).as_bytes(),
        Variable::Sni => facts.sni.unwrap_or_default().as_bytes(),
        Variable::ClientSubject => facts.client_subject.unwrap_or_default().as_bytes(),
        Variable::Header(name) => head.header(name).unwrap_or_default(),
        Variable::Cookie(name) => request::cookie(head, name).unwrap_or_default(),
        Variable::QueryParam(name) => request::query_param(head, name).unwrap_or_default(),
        // A part of the same normalised path: its `\` goes out as `%5C` too.
        Variable::Capture(index) => {
            let group = sources
                .captures
                .and_then(|captures| captures.get(*index))
                .map_or(&b""[..], |group| group.as_bytes());
            extend_escaping_backslashes(out, group);
            return;
        }
    };
    out.extend_from_slice(text);
}

fn extend_escaping_backslashes(out: &mut Vec<u8>, bytes: &[u8]) {
    for piece in bytes.split_inclusive(|&b| b == b'\\') {
        match piece.split_last() {
            Some((b'\\', before)) => {
                out.extend_from_slice(before);
                out.extend_from_slice(b"%5C");
            }
            _ => out.extend_from_slice(piece),
        }
    }
}

/// Control characters (which could split a header line) become `?`. Values
/// from a parsed head never hold them; a certificate subject might.
fn scrub(bytes: &mut [u8]) {
    for byte in bytes {
        if (byte.is_ascii_control() && *byte != b'\t') || *byte == 0x7f {
            *byte = b'?';
        }
    }
}
